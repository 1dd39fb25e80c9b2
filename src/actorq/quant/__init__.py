"""Quantization (ActorQ, Lam et al., QuaRL, TMLR 2022): quantizer, snapshot format, runtimes,
post-training fake quantization and precision auto-select."""

from actorq.quant.autoselect import PrecisionChoice, select_precision
from actorq.quant.ptq import fake_quantize
from actorq.quant.quantizer import (
    PRECISIONS,
    Precision,
    dequantize,
    quantize_int4,
    quantize_int8,
    quantize_uniform,
)
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot

__all__ = [
    "PRECISIONS",
    "PolicySnapshot",
    "PolicySpec",
    "Precision",
    "PrecisionChoice",
    "dequantize",
    "fake_quantize",
    "make_snapshot",
    "quantize_int4",
    "quantize_int8",
    "quantize_uniform",
    "select_precision",
]
