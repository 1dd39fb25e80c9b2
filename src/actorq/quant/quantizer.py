"""Uniform symmetric quantization of policy weights.

ActorQ (Lam et al., "QuaRL: Quantization for Fast and Environmentally Sustainable Reinforcement
Learning", TMLR 2022) quantizes each policy the learner publishes with uniform affine
quantization and lets actors explore with it. We use the symmetric variant (zero point 0) for
weights, per output channel by default: one scale per column of a (in, out) weight matrix, so a
column of small weights does not lose its resolution to a column of large ones.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Precision = Literal["fp32", "fp16", "int8"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
Granularity = Literal["per_channel", "per_tensor"]

INT8_QMAX = 127  # symmetric: [-127, 127], so negation never overflows


def quantize_int8(
    w: np.ndarray, granularity: Granularity = "per_channel"
) -> tuple[np.ndarray, np.ndarray]:
    """Quantize a (in, out) float matrix to int8 with symmetric scales.

    Returns ``(q, scale)`` with ``q`` int8 of the same shape and ``scale`` float32 of shape
    ``(out,)`` (per channel) or ``(1,)`` (per tensor), such that ``q * scale ≈ w`` with
    ``|w - q * scale| <= scale / 2`` elementwise.
    """
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D weight, got shape {w.shape}")
    w = np.asarray(w, dtype=np.float32)
    if granularity == "per_channel":
        absmax = np.abs(w).max(axis=0)
    elif granularity == "per_tensor":
        absmax = np.abs(w).max(keepdims=True).reshape(1)
    else:
        raise ValueError(f"unknown granularity {granularity!r}")
    # An all-zero channel gets scale 1 (any scale represents 0 exactly); avoids 0/0.
    scale = np.where(absmax > 0, absmax / INT8_QMAX, 1.0).astype(np.float32)
    q = np.rint(w / scale)
    np.clip(q, -INT8_QMAX, INT8_QMAX, out=q)
    return q.astype(np.int8), scale


def dequantize(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Inverse of :func:`quantize_int8` (exact up to the rounding it did)."""
    return q.astype(np.float32) * scale.astype(np.float32)


def to_fp16(w: np.ndarray) -> np.ndarray:
    """Round to IEEE half precision. Values beyond ±65504 become inf, which snapshot validation
    then refuses, so an fp16 overflow can never reach an actor silently."""
    with np.errstate(over="ignore"):
        return np.asarray(w, dtype=np.float32).astype(np.float16)
