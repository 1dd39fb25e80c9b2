"""Post-training fake quantization of a policy at 2..8 bits (QuaRL's post-training study).

QuaRL (Lam et al., "QuaRL: Quantization for Fast and Environmentally Sustainable Reinforcement
Learning", TMLR 2022) asks how far a trained policy's weights can be quantized after training,
with no retraining, before its return drops: it quantizes with uniform affine quantization at
decreasing bit widths and evaluates the quantized policy. This module does the weight side of
that study: :func:`fake_quantize` rounds each weight matrix to ``bits``-bit symmetric levels, one
scale per output channel (:func:`~actorq.quant.quantizer.quantize_uniform`), and returns the
*dequantized* fp32 weights. "Fake" because the arithmetic stays fp32: only the values the
weights can take change, so the effect on return is the quantization error's alone, separate
from any kernel's activation rounding. ``benchmarks/ptq_sweep.py`` evaluates the result.

Biases stay fp32 (a rounding error of a policy's size, as in QuaRL and in actorq's snapshots).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from actorq.quant.quantizer import Granularity, check_bits, dequantize, quantize_uniform

Layers = list[tuple[np.ndarray, np.ndarray]]


def fake_quantize(
    layers: Layers,
    bits: int,
    *,
    keep_io_fp32: bool = False,
    granularity: Granularity = "per_channel",
) -> Layers:
    """Return ``layers`` (``[(W (in, out), b), ...]``) with each W rounded to ``bits`` bits.

    Uniform symmetric quantization with ``2**(bits - 1) - 1`` positive levels (8 bits: ±127;
    2 bits: the ternary -1, 0, 1 times a scale), per output channel by default, then
    dequantized back to float32. ``keep_io_fp32`` leaves the first and last layers unrounded,
    the way actorq's int8 and int4 snapshots deploy (QuaRL's study rounds every layer, the
    default here). Raises ``ValueError`` unless ``2 <= bits <= 8``.
    """
    bits = check_bits(bits)
    last = len(layers) - 1
    out: Layers = []
    for i, (w, b) in enumerate(layers):
        w32 = np.asarray(w, dtype=np.float32)
        if keep_io_fp32 and i in (0, last):
            out.append((w32.copy(), np.asarray(b, np.float32).copy()))
            continue
        q, scale = quantize_uniform(w32, bits, granularity)
        out.append((dequantize(q, scale), np.asarray(b, np.float32).copy()))
    return out


def fake_quantize_module(net: Any, bits: int, *, keep_io_fp32: bool = False) -> Any:
    """A copy of the torch module ``net`` with the weight of each ``Conv2d`` / ``Linear``
    rounded as :func:`fake_quantize` rounds a layer's (per output channel, dequantized; biases
    unrounded); ``keep_io_fp32`` leaves the first of them unrounded and the output layers (the
    network's ``output_layers()`` where it has them, a dueling Q-network's value and advantage
    heads; else the last in module order). QuaRL's post-training study applied to a
    convolutional policy (the Nature-CNN)."""
    import copy

    import torch
    from torch import nn

    out = copy.deepcopy(net)
    mods = [m for m in out.modules() if isinstance(m, nn.Conv2d | nn.Linear)]
    if keep_io_fp32 and mods:
        heads = out.output_layers() if hasattr(out, "output_layers") else mods[-1:]
        kept = {id(mods[0]), *map(id, heads)}
        mods = [m for m in mods if id(m) not in kept]
    # (in, out) matrices: each output channel's weights form a column, as fake_quantize reads
    mats = [
        (m.weight.detach().cpu().reshape(len(m.weight), -1).T.numpy(), np.zeros(0)) for m in mods
    ]
    rounded = fake_quantize(mats, bits)
    with torch.no_grad():
        for m, (w, _) in zip(mods, rounded, strict=True):
            m.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)).reshape(m.weight.shape))
    return out
