"""Transitional: the GO, graph and chip scripts import these helpers from here; they live in
``_machine`` now. Delete this file once those scripts import from ``_machine``."""

from _machine import machine_info, num, read_metrics_csv, say, write_json_atomic

__all__ = ["machine_info", "num", "read_metrics_csv", "say", "write_json_atomic"]
