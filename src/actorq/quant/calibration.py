"""Calibrated int8 rounding of a policy's weights: GPTQ with states from replay.

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
"""

from __future__ import annotations

import numpy as np

from actorq.quant.quantizer import INT8_QMAX, Granularity, quantize_int8


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
    if w.ndim != 2 or x.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"expected w (in, out) and x (n, in), got {w.shape} and {x.shape}")
    _, scale = quantize_int8(w, granularity)
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
        return quantize_int8(w, granularity)  # degenerate inputs: fall back to plain rounding
    # The row loop is many small vector ops: numpy's per-call overhead is lower than torch's
    # (no BLAS involved); the block update is a real matmul: torch, on the learner's threads.
    work = np.array(w, np.float64)
    s = scale.astype(np.float64)
    q = np.empty(w.shape, np.float64)
    for i0 in range(0, n_in, block):
        i1 = min(i0 + block, n_in)
        wb = work[i0:i1]
        err = np.empty_like(wb)
        for i in range(i1 - i0):
            qi = np.clip(np.rint(wb[i] / s), -INT8_QMAX, INT8_QMAX)
            q[i0 + i] = qi
            e = (wb[i] - qi * s) / u[i0 + i, i0 + i]
            wb[i + 1 :] -= np.multiply.outer(u[i0 + i, i0 + i + 1 : i1], e)
            err[i] = e
        if i1 < n_in:  # the block's errors, onto the rows after it
            upd = torch.from_numpy(np.ascontiguousarray(u[i0:i1, i1:].T)) @ torch.from_numpy(err)
            work[i1:] -= upd.numpy()
    return q.astype(np.int8), scale
