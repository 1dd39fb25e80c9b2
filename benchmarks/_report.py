"""Transitional: ``md_head`` lives in ``_machine`` now; delete this file once the graph
scripts import it from there."""

from _machine import md_head

__all__ = ["md_head"]
