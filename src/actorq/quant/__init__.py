"""Quantization (ActorQ, Lam et al., QuaRL, TMLR 2022): precision formats (one class each,
:data:`~actorq.quant.formats.FORMATS`), quantizer, snapshot format, the ONNX writer, runtimes,
post-training fake quantization and precision auto-select.

The names below load on first use: a CLI command, or an actor process, importing one
submodule does not pay for the others (auto-select alone pulls in the agents)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FORMATS": "formats",
    "PRECISIONS": "formats",
    "Precision": "formats",
    "WeightFormat": "formats",
    "PolicySnapshot": "snapshot",
    "PolicySpec": "snapshot",
    "make_snapshot": "snapshot",
    "PrecisionChoice": "autoselect",
    "select_precision": "autoselect",
    "fake_quantize": "ptq",
    "dequantize": "quantizer",
    "quantize_int4": "quantizer",
    "quantize_int8": "quantizer",
    "quantize_uniform": "quantizer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'actorq.quant' has no attribute {name!r}")
    return getattr(importlib.import_module(f"actorq.quant.{module}"), name)
