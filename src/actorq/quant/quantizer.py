"""Uniform symmetric quantization of policy weights.

ActorQ (Lam et al., "QuaRL: Quantization for Fast and Environmentally Sustainable Reinforcement
Learning", TMLR 2022) quantizes each policy the learner publishes with uniform affine
quantization and lets actors explore with it. We use the symmetric variant (zero point 0) for
weights, per output channel by default: one scale per column of a (in, out) weight matrix, so a
column of small weights does not lose its resolution to a column of large ones.

4-bit weights are quantized block-wise instead (:func:`quantize_int4`): one scale per block of 32
consecutive input rows of each output column, the layout of onnxruntime's ``MatMulNBits``
contrib operator (the block-wise 4-bit scheme of GPTQ-style weight-only LLM deployments,
Frantar et al., ICLR 2023). With 15 levels a per-column scale would spend most of them on the
column's single largest weight; a scale per 32 weights keeps the error local.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Granularity = Literal["per_channel", "per_tensor"]

INT8_QMAX = 127  # symmetric: [-127, 127], so negation never overflows
# Symmetric [-7, 7]: the 16th level (-8) is left unused so that |w - q * scale| <= scale / 2
# holds for every weight of a block whatever its sign (onnxruntime's own symmetric quantizer
# maps the largest weight to -8 and clips its opposite to 7, an error of a whole step).
INT4_QMAX = 7
INT4_BLOCK = 32  # weights per scale along the input dimension (MatMulNBits block_size)
INT4_ZERO = 8  # MatMulNBits' default zero point for 4 bits: a stored nibble c means c - 8


MIN_BITS, MAX_BITS = 2, 8  # uniform integer widths: below 2 bits nothing is left but the sign


def check_bits(bits: int) -> int:
    """``bits`` as an int if it is an integer from 2 to 8; otherwise a ``ValueError`` saying so."""
    if isinstance(bits, bool) or not isinstance(bits, int | np.integer):
        raise ValueError(f"bits must be an integer from {MIN_BITS} to {MAX_BITS}, got {bits!r}")
    if not MIN_BITS <= bits <= MAX_BITS:
        raise ValueError(f"bits must be from {MIN_BITS} to {MAX_BITS}, got {bits}")
    return int(bits)


def quantize_uniform(
    w: np.ndarray, bits: int, granularity: Granularity = "per_channel"
) -> tuple[np.ndarray, np.ndarray]:
    """Quantize a (in, out) float matrix to ``bits``-bit integers (2..8) with symmetric scales.

    Levels are ``-qmax..qmax`` with ``qmax = 2**(bits - 1) - 1`` (int8: ±127; 2 bits: -1, 0, 1).
    Returns ``(q, scale)`` with ``q`` int8 of the same shape and ``scale`` float32 of shape
    ``(out,)`` (per channel) or ``(1,)`` (per tensor), such that ``q * scale ≈ w`` with
    ``|w - q * scale| <= scale / 2`` elementwise.
    """
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D weight, got shape {w.shape}")
    qmax = 2 ** (check_bits(bits) - 1) - 1
    w = np.asarray(w, dtype=np.float32)
    if granularity == "per_channel":
        absmax = np.abs(w).max(axis=0)
    elif granularity == "per_tensor":
        absmax = np.abs(w).max(keepdims=True).reshape(1)
    else:
        raise ValueError(f"unknown granularity {granularity!r}")
    scale = (absmax / np.float32(qmax)).astype(np.float32)
    # A channel of zeros (or of subnormals whose scale underflows to 0) gets scale 1: any scale
    # represents 0 exactly, and 0/0 would give NaN, which casts to an arbitrary int8.
    scale[scale == 0] = 1.0
    q = np.rint(w / scale)
    np.clip(q, -qmax, qmax, out=q)
    return q.astype(np.int8), scale


def quantize_int8(
    w: np.ndarray, granularity: Granularity = "per_channel"
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quantize_uniform` at 8 bits: int8 in [-127, 127], the format of int8 snapshots."""
    return quantize_uniform(w, 8, granularity)


def dequantize(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Inverse of :func:`quantize_uniform` (exact up to the rounding it did)."""
    return q.astype(np.float32) * scale.astype(np.float32)


def to_fp16(w: np.ndarray) -> np.ndarray:
    """Round to IEEE half precision. Values beyond ±65504 become inf, which snapshot validation
    then refuses, so an fp16 overflow can never reach an actor silently."""
    with np.errstate(over="ignore"):
        return np.asarray(w, dtype=np.float32).astype(np.float16)


def int4_blocks(in_dim: int) -> int:
    """Blocks of :data:`INT4_BLOCK` input rows (the last one zero-padded) of a 4-bit weight."""
    return -(-in_dim // INT4_BLOCK)


def quantize_int4(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantize a (in, out) float matrix to 4 bits, symmetric, one scale per block of 32 inputs.

    Returns ``(packed, scale)`` in onnxruntime's ``com.microsoft::MatMulNBits`` layout (bits=4,
    block_size=32, no zero-point input), so an actor hands both to its session unchanged:

    * ``packed``: uint8 ``(out, blocks, 16)``, ``blocks = ceil(in / 32)``. Byte ``j`` of block
      ``k`` of column ``n`` holds input rows ``32k + 2j`` (low nibble) and ``32k + 2j + 1``
      (high nibble) as ``q + 8``, ``q`` in [-7, 7]; rows past ``in`` (padding) hold q = 0;
    * ``scale``: float32 ``(out, blocks)``.

    ``dequantize_int4(packed, scale, in)`` gives back ``w`` to within ``scale / 2`` per block.
    """
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D weight, got shape {w.shape}")
    n_in, n_out = w.shape
    nb = int4_blocks(n_in)
    # (out, blocks, 32): each block is contiguous, in the order MatMulNBits reads it.
    padded = np.zeros((n_out, nb * INT4_BLOCK), np.float32)
    padded[:, :n_in] = np.asarray(w, dtype=np.float32).T
    wb = padded.reshape(n_out, nb, INT4_BLOCK)
    scale = np.abs(wb).max(axis=2) / np.float32(INT4_QMAX)
    # A block of zeros (or of subnormals whose scale underflows to 0) gets scale 1: any scale
    # represents 0 exactly, and 0/0 would put NaN codes in the padding.
    scale[scale == 0] = 1.0
    # In place on the padded copy: a publish of a 3×2048 policy rounds 8M weights, and each
    # temporary of that size costs a few ms.
    wb /= scale[..., None]
    np.rint(wb, out=wb)
    np.clip(wb, -INT4_QMAX, INT4_QMAX, out=wb)
    return _pack_blocks(wb), scale


def pack_int4(q: np.ndarray) -> np.ndarray:
    """Pack signed 4-bit values ``q`` (in, out), each in [-8, 7], into the ``MatMulNBits``
    layout of :func:`quantize_int4` (uint8 ``(out, blocks, 16)``; padding rows hold 0)."""
    n_in, n_out = q.shape
    blocks = np.zeros((n_out, int4_blocks(n_in) * INT4_BLOCK), np.int8)
    blocks[:, :n_in] = np.asarray(q).T
    return _pack_blocks(blocks.reshape(n_out, -1, INT4_BLOCK))


def _pack_blocks(q: np.ndarray) -> np.ndarray:
    # q: (out, blocks, 32) signed values; two per byte, the even row in the low nibble.
    codes = q.astype(np.int8).view(np.uint8) + np.uint8(INT4_ZERO)  # -7..7 -> 1..15
    return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4))


def unpack_int4(packed: np.ndarray, in_dim: int) -> np.ndarray:
    """The signed 4-bit values of :func:`quantize_int4`'s ``packed``, as int8 ``(in, out)``."""
    n_out, nb, half = packed.shape
    codes = np.empty((n_out, nb, 2 * half), np.int8)
    codes[..., 0::2] = packed & 0x0F
    codes[..., 1::2] = packed >> 4
    codes -= INT4_ZERO
    return codes.reshape(n_out, nb * 2 * half)[:, :in_dim].T


def dequantize_int4(packed: np.ndarray, scale: np.ndarray, in_dim: int) -> np.ndarray:
    """Inverse of :func:`quantize_int4` (exact up to the rounding it did): float32 (in, out)."""
    n_out, nb, half = packed.shape
    q = unpack_int4(packed, nb * 2 * half).T.reshape(n_out, nb, 2 * half).astype(np.float32)
    w = (q * scale[..., None].astype(np.float32)).reshape(n_out, -1)[:, :in_dim]
    return np.ascontiguousarray(w.T)
