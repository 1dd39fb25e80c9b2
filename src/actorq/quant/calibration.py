"""Calibrated int8 and int4 rounding of a policy's weights: GPTQ with states from replay.

Round-to-nearest (``quantize_int8``) minimizes each weight's own error. What matters to an actor
is the error of the layer's *output* on the states it visits: GPTQ (Frantar et al., "GPTQ:
Accurate Post-Training Quantization for Generative Pre-trained Transformers", ICLR 2023, after
Optimal Brain Quantization, Frantar & Alistarh, NeurIPS 2022) quantizes one input row of the
weight matrix at a time and moves the rounding error it made onto the rows not yet quantized,
weighted by the inverse Hessian ``H = XᵀX`` of the layer's inputs ``X``. The scales, and so the
snapshot format and the actors' kernels, are exactly those of round-to-nearest: only which way
each weight rounds changes.

Why actorq uses it: a trained Q-network has many near-tied states (both actions are fine), and
there round-to-nearest int8 noise flips greedy actions; on CartPole GPTQ halves the flips
(docs/results.md). The learner has the states at hand (its replay), so calibration is free of
extra data. It costs O(in² · out) per layer, a few ms at 256 wide, about a second at 2048: the
``auto`` setting of the DQN config uses it only where it is cheap next to a publish interval.
For block-wise int4 (:func:`gptq_int4`) each input row rounds with its own block's scales.
"""

from __future__ import annotations

import numpy as np

from actorq.quant.quantizer import (
    INT4_BLOCK,
    INT4_QMAX,
    INT8_QMAX,
    Granularity,
    pack_int4,
    quantize_int4,
    quantize_int8,
    quantize_uniform,
)


def gptq_int8(
    w: np.ndarray,
    x: np.ndarray,
    granularity: Granularity = "per_channel",
    damp: float = 0.01,
    block: int = 128,
) -> tuple[np.ndarray, np.ndarray]:
    """Quantize ``w`` (in, out) to int8 minimizing ``‖x @ w - x @ dequant(q)‖²`` greedily.

    ``x`` (n, in) are the layer's inputs on calibration states. Returns ``(q, scale)`` in the
    format of :func:`~actorq.quant.quantizer.quantize_int8`, with the same scales.
    ``damp`` adds ``damp * mean(diag H)`` to H's diagonal (GPTQ's dampening: keeps the inverse
    well conditioned when inputs are correlated or some are always zero, e.g. dead ReLUs).
    """
    _check_shapes(w, x)
    _, scale = quantize_int8(w, granularity)
    q = _gptq(w, x, scale[None, :], w.shape[0], INT8_QMAX, damp, block)
    if q is None:  # degenerate inputs: fall back to plain rounding
        return quantize_int8(w, granularity)
    return q.astype(np.int8), scale


def gptq_int4(
    w: np.ndarray, x: np.ndarray, damp: float = 0.01, block: int = 128
) -> tuple[np.ndarray, np.ndarray]:
    """GPTQ for block-wise int4 weights: returns ``(packed, scale)`` in the format of
    :func:`~actorq.quant.quantizer.quantize_int4`, with the same scales (one per 32 inputs of a
    column, from the unrounded weights). 4 bits is GPTQ's own headline setting (Frantar et al.,
    ICLR 2023, with groups of 128; onnxruntime's MatMulNBits uses blocks of 32).

    GPTQ's grouped variant instead recomputes each group's scales from the compensated weights
    when it reaches the group; tried on the trained CartPole and cartpole-balance policies of
    docs/results.md, that flipped more greedy actions than fixed scales, so the scales stay
    those of round-to-nearest, as for int8.
    """
    _check_shapes(w, x)
    packed, scale = quantize_int4(w)
    q = _gptq(w, x, scale.T, INT4_BLOCK, INT4_QMAX, damp, block)
    if q is None:
        return packed, scale
    return pack_int4(q.astype(np.int8)), scale


def gptq_uniform(
    w: np.ndarray, x: np.ndarray, bits: int, damp: float = 0.01, block: int = 128
) -> tuple[np.ndarray, np.ndarray]:
    """GPTQ for symmetric per-output-channel ``bits``-bit weights: returns ``(q, scale)`` as
    :func:`~actorq.quant.quantizer.quantize_uniform` does, with its scales. The static int8
    convolutions and fc of a pixel policy (7 bits, :data:`~actorq.quant.onnx.
    STATIC_WEIGHT_BITS`) take it with ``x`` the layer's im2col patches on replay states."""
    _check_shapes(w, x)
    q0, scale = quantize_uniform(w, bits, "per_channel")
    q = _gptq(w, x, scale[None, :], w.shape[0], 2 ** (bits - 1) - 1, damp, block)
    if q is None:  # degenerate inputs: plain rounding
        return q0, scale
    return q.astype(np.int8), scale


def _check_shapes(w: np.ndarray, x: np.ndarray) -> None:
    if w.ndim != 2 or x.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"expected w (in, out) and x (n, in), got {w.shape} and {x.shape}")


def _gptq(
    w: np.ndarray,
    x: np.ndarray,
    scales: np.ndarray,
    group: int,
    qmax: int,
    damp: float,
    block: int,
) -> np.ndarray | None:
    """GPTQ's rounding of ``w`` (in, out) to integers in [-qmax, qmax] (a float64 array), input
    row ``i`` with the column scales ``scales[i // group]``; None if H is not positive definite.
    """
    n_in = w.shape[0]
    # The dense linear algebra runs in torch, which the learner (the only caller) has already
    # pinned to its thread budget; numpy's BLAS would spawn a thread per core and, on a machine
    # whose cores are busy with actors, run 4× slower than single-threaded.
    import torch

    xt = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    h = (xt.T @ xt).double()  # float32 products: 2× faster, plenty for a Hessian
    diag = torch.diagonal(h).clone()
    dead = diag == 0
    idx = torch.nonzero(dead).flatten()
    h[idx, idx] = 1.0  # an input that is always 0: its weights round freely (no compensation)
    h += damp * max(float(diag.mean()), 1e-12) * torch.eye(n_in, dtype=torch.float64)
    # Upper Cholesky factor of H^-1: row i holds how the error of row i spreads to rows > i.
    try:
        u = np.ascontiguousarray(
            torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h))).T.numpy()
        )
    except RuntimeError:  # torch.linalg.LinAlgError subclasses RuntimeError
        return None
    # The row loop is many small vector ops: numpy's per-call overhead is lower than torch's
    # (no BLAS involved); the block update is a real matmul: torch, on the learner's threads.
    work = np.array(w, np.float64)
    scales = scales.astype(np.float64)
    q = np.empty(w.shape, np.float64)
    for i0 in range(0, n_in, block):
        i1 = min(i0 + block, n_in)
        wb, ub = work[i0:i1], u[i0:i1, i0:i1]
        err = np.empty_like(wb)
        for i in range(i1 - i0):
            # the same arithmetic as clip(rint(w / s)) and (w - q s) / u_ii, in fewer numpy
            # calls with no temporaries (a Python loop over every input row of the layer)
            s, qi, e = scales[(i0 + i) // group], q[i0 + i], err[i]
            np.rint(np.divide(wb[i], s, out=qi), out=qi)
            np.minimum(np.maximum(qi, -qmax, out=qi), qmax, out=qi)
            np.subtract(wb[i], np.multiply(qi, s, out=e), out=e)
            e /= ub[i, i]
            wb[i + 1 :] -= ub[i, i + 1 :, None] * e
        if i1 < n_in:  # the block's errors, onto the rows after it
            upd = torch.from_numpy(np.ascontiguousarray(u[i0:i1, i1:].T)) @ torch.from_numpy(err)
            work[i1:] -= upd.numpy()
    return q
