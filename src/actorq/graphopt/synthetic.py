"""Seeded synthetic layered DAGs, for training diversity beyond the model suite.

Ops are laid out in layers; each op draws 1 to ``max_fan_in`` producers from the previous
``reach`` layers (mostly the one just before, as in real networks, sometimes further back, as in
skip connections). Costs are log-normal around a per-graph mix of compute-bound (matmul-like) and
memory-bound (elementwise-like) ops, so placement, scheduling and fusion all matter. The same
``(num_ops, seed)`` always gives the same graph.
"""

from __future__ import annotations

import numpy as np

from actorq.errors import GraphError
from actorq.graphopt.ir import Graph

TYPES = ("matmul", "conv", "elementwise", "norm", "reduce", "concat")


def layered_dag(
    num_ops: int,
    seed: int = 0,
    *,
    mean_width: float | None = None,
    max_fan_in: int = 3,
    reach: int = 3,
    batch_bytes: float = 4e6,
) -> Graph:
    """A random layered DAG with ``num_ops`` ops (see the module docstring)."""
    if num_ops < 2:
        raise GraphError(f"a synthetic graph needs at least 2 ops, got {num_ops}")
    rng = np.random.default_rng(seed)
    width = mean_width or max(2.0, float(np.sqrt(num_ops)) / 2)
    # layer sizes: Poisson around the mean width, first layer small (the inputs)
    sizes: list[int] = [min(num_ops, max(1, int(rng.integers(1, 4))))]
    while sum(sizes) < num_ops:
        sizes.append(min(num_ops - sum(sizes), max(1, int(rng.poisson(width)))))
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    layer = np.repeat(np.arange(len(sizes)), sizes)
    src_l: list[np.ndarray] = []
    dst_l: list[np.ndarray] = []
    for li in range(1, len(sizes)):
        ops = np.arange(bounds[li], bounds[li + 1])
        k = rng.integers(1, max_fan_in + 1, size=ops.size)
        for j, v in enumerate(ops):
            # mostly the previous layer: back-distance 1 with prob ~0.7
            back = np.minimum(rng.geometric(0.7, size=k[j]), li)
            lo, hi = bounds[li - back], bounds[li - back + 1]
            preds = np.unique(lo + (rng.random(k[j]) * (hi - lo)).astype(np.int64))
            src_l.append(preds)
            dst_l.append(np.full(preds.size, v))
    src = np.concatenate(src_l) if src_l else np.zeros(0, np.int64)
    dst = np.concatenate(dst_l) if dst_l else np.zeros(0, np.int64)
    # every op but the last layer's gets a consumer, so there are no stray dead ends
    has_out = np.zeros(num_ops, bool)
    has_out[src] = True
    lonely = np.flatnonzero(~has_out & (layer < len(sizes) - 1))
    extra = bounds[layer[lonely] + 1] + (
        rng.random(lonely.size) * (bounds[layer[lonely] + 2] - bounds[layer[lonely] + 1])
    ).astype(np.int64)
    src, dst = np.concatenate([src, lonely]), np.concatenate([dst, extra])
    type_idx = rng.choice(len(TYPES), size=num_ops, p=[0.25, 0.1, 0.35, 0.1, 0.1, 0.1])
    compute = (type_idx <= 1).astype(float)
    out_b = batch_bytes * rng.lognormal(0.0, 0.8, num_ops)
    out_b[type_idx == 4] /= 16  # reductions shrink
    flops = np.where(compute > 0, out_b * rng.lognormal(5.0, 1.0, num_ops), out_b / 4)
    read = np.zeros(num_ops)
    np.add.at(read, dst, out_b[src])
    read += np.where(layer == 0, out_b, 0.0)
    params = np.where(compute > 0, out_b * rng.lognormal(0.0, 1.0, num_ops), 0.0)
    read += params
    return Graph(
        name=f"synthetic-{num_ops}-s{seed}",
        op_names=[f"{TYPES[t]}_{i}" for i, t in enumerate(type_idx)],
        op_types=[TYPES[t] for t in type_idx],
        flops=flops,
        bytes_read=read,
        bytes_written=out_b,
        out_bytes=out_b,
        param_bytes=params,
        src=src,
        dst=dst,
        edge_bytes=out_b[src],
        meta={"family": "synthetic", "seed": seed, "layers": len(sizes), "last_layer": sizes[-1]},
    )
