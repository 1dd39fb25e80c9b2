"""Quantization (ActorQ, Lam et al., QuaRL, TMLR 2022): quantizer, snapshot format, runtimes."""

from actorq.quant.quantizer import PRECISIONS, Precision, dequantize, quantize_int8
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot

__all__ = [
    "PRECISIONS",
    "PolicySnapshot",
    "PolicySpec",
    "Precision",
    "dequantize",
    "make_snapshot",
    "quantize_int8",
]
