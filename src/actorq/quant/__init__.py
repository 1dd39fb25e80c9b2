"""Quantization (ActorQ, Lam et al., QuaRL, TMLR 2022): precision formats (one class each,
:data:`~actorq.quant.formats.FORMATS`), quantizer, snapshot format, the ONNX writer, runtimes,
post-training fake quantization and precision auto-select."""

from actorq.quant.autoselect import PrecisionChoice, select_precision
from actorq.quant.formats import FORMATS, PRECISIONS, Precision, WeightFormat
from actorq.quant.ptq import fake_quantize
from actorq.quant.quantizer import (
    dequantize,
    quantize_int4,
    quantize_int8,
    quantize_uniform,
)
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot

__all__ = [
    "FORMATS",
    "PRECISIONS",
    "PolicySnapshot",
    "PolicySpec",
    "Precision",
    "PrecisionChoice",
    "WeightFormat",
    "dequantize",
    "fake_quantize",
    "make_snapshot",
    "quantize_int4",
    "quantize_int8",
    "quantize_uniform",
    "select_precision",
]
