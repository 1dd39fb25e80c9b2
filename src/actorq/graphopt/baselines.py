"""Classical baselines for placement, scheduling and fusion: what a learned policy must beat.

Each baseline returns a :class:`Decision` (a device per op, optionally a priority per op and a
fuse bit per edge); :func:`run_baselines` scores them all with the simulator.

* ``single`` — every op on the fastest device (the reference GO reports speedups against).
* ``expert`` — the human-expert heuristic GO and HDP compare with (Zhou et al., NeurIPS 2020;
  Zhou et al., 2019): cut the forward ops, in topological order, into contiguous pieces of equal
  compute, one per device (layer-wise model parallelism); gradient and update ops go with their
  forward op (:attr:`Graph.anchor`).
* ``metis`` — a min-cut partition (Karypis & Kumar, SIAM J. Sci. Comput. 1998, via pymetis) of the
  anchor-contracted graph, edge weights = tensor bytes, vertex weights = half compute share, half
  memory share, so no device gets more than its part of either.
* ``heft`` — Heterogeneous Earliest Finish Time (Topcuoglu et al., IEEE TPDS 2002): ops by
  decreasing upward rank, each to the device where it finishes first (non-insertion variant);
  priorities = the ranks.
* ``heft-cut`` — HEFT with a cut cost: each input edge from another device adds a multiple of
  its mean transfer time to the device choice (HEFT counts only the input that arrives last);
  the fastest of five multiples (:data:`CUT_WEIGHTS`) by the simulator, five calls.
* ``m-etf`` — memory-constrained Earliest Task First from Baechi (Jeon et al., SoCC 2020; ETF:
  Hwang et al., SIAM J. Comput. 1989): repeatedly schedule the (ready op, device) pair that can
  start first among devices with memory left for the op's parameters and output.
* ``+cp`` — critical-path priorities: each op's priority is its bottom level (longest remaining
  path including transfers) under the given placement.
* ``+fuse`` — greedy fusion: fuse every legal edge (consumer with one input, same device) into
  a memory-bound consumer, as XLA folds elementwise ops into their producers.
* ``random`` — random search over contiguous splits with random cut points and device order.
* ``anneal`` — simulated annealing from the best classical placement, moving runs of ops between
  devices, with a budget of simulator calls.
* ``climb`` — hill climbing: annealing's moves from the same start at zero temperature (only
  moves that do not slow the step are kept), the control for any search built on those moves.

Search baselines score a decision by step time, and an infeasible one by a value worse than any
feasible one (:func:`penalized`), so they also repair placements that do not fit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from actorq.errors import GraphError
from actorq.graphopt.simulator import SimResult, Simulator, _jit


@dataclasses.dataclass
class Decision:
    placement: np.ndarray
    priority: np.ndarray | None = None
    fusion: np.ndarray | None = None


@dataclasses.dataclass
class BaselineResult:
    name: str
    decision: Decision
    result: SimResult
    seconds: float
    """Wall time the baseline took to decide (simulations included for search baselines)."""
    start: str = ""
    """For ``best+fuse`` and ``anneal``: the baseline whose decision they started from."""


def log_softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (per-op log-probabilities from logits)."""
    z = z.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def penalized(sim: Simulator, r: SimResult) -> float:
    """Step time if feasible, else twice the serial time on the fastest device scaled by the
    memory excess, which ranks any infeasible decision below every feasible one that is not
    absurdly slow."""
    if r.feasible:
        return r.step_time
    serial = float(sim.op_times(sim.cluster.fastest_device()).sum())
    return max(r.step_time, serial) * (2.0 + r.memory_excess)


# ---- placements ----------------------------------------------------------------------------


def single_device(sim: Simulator) -> Decision:
    d = sim.cluster.fastest_device()
    return Decision(np.full(sim.graph.num_ops, d, dtype=np.int64))


def anchor_groups(sim: Simulator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Anchor roots in topological order, each op's group index, and each group's mean time."""
    g = sim.graph
    assert g.anchor is not None
    roots = g.topo_order[g.anchor[g.topo_order] == g.topo_order]
    gi = np.empty(g.num_ops, dtype=np.int64)
    gi[roots] = np.arange(roots.size)
    gi = gi[g.anchor]
    w = np.bincount(gi, weights=sim.op_times().mean(1), minlength=roots.size)
    return roots, gi, w


def _split_weights(w: np.ndarray) -> np.ndarray:
    """Group times to balance a split by; when every op is free (zero costs on zero-overhead
    devices) there is no time to balance, so balance the number of groups instead of
    dividing by a zero total."""
    return w if w.sum() > 0 else np.ones_like(w)


def expert(sim: Simulator) -> Decision:
    """Contiguous split of the forward order balanced by compute (module docstring)."""
    _, gi, w = anchor_groups(sim)
    w = _split_weights(w)
    nd = sim.cluster.num_devices
    cum = np.cumsum(w) - w / 2  # the piece a group falls in is decided by its midpoint
    piece = np.minimum((cum / w.sum() * nd).astype(np.int64), nd - 1)
    return Decision(piece[gi])


@contextlib.contextmanager
def _c_stdout_silenced() -> Iterator[None]:
    """File descriptor 1 pointed at /dev/null for the block: C code's ``printf`` (METIS writes
    a line per failed bisection: 324 lines for a 1024-device cluster) stays off the console."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def metis(sim: Simulator, seed: int = 0) -> Decision:
    """METIS k-way partition with compute+memory vertex weights (module docstring)."""
    try:
        import pymetis
    except ImportError:
        raise GraphError("the metis baseline needs pymetis: pip install 'actorq[graph]'") from None
    g, nd = sim.graph, sim.cluster.num_devices
    if nd == 1:
        return single_device(sim)
    roots, gi, w = anchor_groups(sim)
    k = roots.size
    if k <= nd:  # no fewer devices than groups: the balanced partition is one group each
        return Decision(gi.astype(np.int64))
    mem = np.bincount(gi, weights=g.param_bytes + g.out_bytes, minlength=k)
    share = 0.5 * w / max(w.sum(), 1e-30) + 0.5 * mem / max(mem.sum(), 1e-30)
    vw = np.maximum(1, np.round(share * 1e7)).astype(np.int64)
    a, b = gi[g.src], gi[g.dst]
    keep = a != b
    a, b, eb = a[keep], b[keep], g.edge_bytes[keep]
    # undirected, duplicates merged: METIS wants a symmetric simple graph
    key = np.minimum(a, b) * k + np.maximum(a, b)
    uk, inv = np.unique(key, return_inverse=True)
    wts = np.bincount(inv, weights=eb)
    ua, ub = uk // k, uk % k
    s2, d2 = np.concatenate([ua, ub]), np.concatenate([ub, ua])
    ew = np.concatenate([wts, wts])
    # initial=: a graph whose groups share no edge (e.g. no edges at all) has no weights to scale
    ew = np.maximum(1, np.round(ew / ew.max(initial=1.0) * 1e4)).astype(np.int64)
    order = np.lexsort((d2, s2))
    xadj = np.concatenate([[0], np.cumsum(np.bincount(s2, minlength=k))])
    opts = pymetis.Options(seed=seed)
    adj = pymetis.CSRAdjacency(xadj, d2[order])
    with _c_stdout_silenced():  # METIS prints its complaints from C (one per bisection)
        _, parts = pymetis.part_graph(nd, adj, vweights=vw, eweights=ew[order], options=opts)
    return Decision(np.asarray(parts, dtype=np.int64)[gi])


def _comm_model(sim: Simulator) -> tuple[float, float]:
    """Mean link latency and inverse bandwidth over device pairs (for HEFT's averages)."""
    c = sim.cluster
    off = ~np.eye(c.num_devices, dtype=bool)
    if not off.any():
        return 0.0, 0.0
    return float(c.latency[off].mean()), float((1.0 / c.bandwidth[off]).mean())


@_jit
def _bottom_level(
    topo: np.ndarray, out_ptr: np.ndarray, out_dst: np.ndarray, edge_cost: np.ndarray,
    t: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Longest path to a sink: ``b[u] = t[u] + max over out-edges e=(u,v) of cost[e] + b[v]``."""
    b = np.zeros(t.shape[0])
    for k in range(topo.shape[0] - 1, -1, -1):
        u = topo[k]
        best = 0.0
        for e in range(out_ptr[u], out_ptr[u + 1]):
            best = max(best, edge_cost[e] + b[out_dst[e]])
        b[u] = t[u] + best
    return b


def upward_rank(sim: Simulator) -> np.ndarray:
    """HEFT's rank_u: mean op time + the costliest path (mean transfers) to a sink."""
    g = sim.graph
    lat, inv_bw = _comm_model(sim)
    cost = lat + g.edge_bytes[g.out_edges] * inv_bw
    return _bottom_level(g.topo_order, g.out_ptr, g.dst[g.out_edges], cost, sim.op_times().mean(1))


@_jit
def _start(
    u: int, d: int, free_at: float, in_ptr: np.ndarray, in_src: np.ndarray, in_b: np.ndarray,
    fin: np.ndarray, dev: np.ndarray, lat: np.ndarray, bw: np.ndarray,
) -> float:  # fmt: skip
    """Earliest start of ``u`` on ``d``: the device is free and every input has arrived."""
    s = free_at
    for k in range(in_ptr[u], in_ptr[u + 1]):
        p = in_src[k]
        t = fin[p]
        if dev[p] != d:
            t += lat[dev[p], d] + in_b[k] / bw[dev[p], d]
        s = max(s, t)
    return s


@_jit
def _heft(
    order: np.ndarray, in_ptr: np.ndarray, in_src: np.ndarray, in_b: np.ndarray,
    times: np.ndarray, lat: np.ndarray, bw: np.ndarray, penalty: np.ndarray, cut: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Each op in ``order`` to the device minimising its finish time plus ``penalty[u, d]``
    plus ``cut[k]`` for each input edge ``k`` from another device (zeros: HEFT)."""
    n, nd = times.shape
    dev = np.zeros(n, dtype=np.int64)
    aft = np.zeros(n)
    avail = np.zeros(nd)
    for u in order:
        best_d, best_c, best_f = 0, np.inf, 0.0
        for d in range(nd):
            f = _start(u, d, avail[d], in_ptr, in_src, in_b, aft, dev, lat, bw) + times[u, d]
            c = f + penalty[u, d]
            for k in range(in_ptr[u], in_ptr[u + 1]):
                if dev[in_src[k]] != d:
                    c += cut[k]
            if c < best_c:
                best_d, best_c, best_f = d, c, f
        dev[u], aft[u] = best_d, best_f
        avail[best_d] = best_f
    return dev


def _in_csr(sim: Simulator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = sim.graph
    ie = np.argsort(g.dst, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(g.dst, minlength=g.num_ops))])
    return ptr.astype(np.int64), g.src[ie], g.edge_bytes[ie]


def heft(
    sim: Simulator, logp: np.ndarray | None = None, beta: float = 0.0, cut: float = 0.0
) -> Decision:
    """HEFT (Topcuoglu et al., 2002): ops in upward-rank order, each to the device where it
    would finish earliest given where its inputs are.

    Guided by a policy (``logp``: ``(n, devices)`` log-probabilities, e.g. GO's device head):
    each op goes to the device minimising ``finish time + beta * t_u * (max_d' logp[u, d'] -
    logp[u, d])``, ``t_u`` the op's mean time over devices: a device the policy finds
    ``e`` times less likely must let the op finish ``beta * t_u`` sooner. ``beta`` 0 is HEFT, a
    large one the policy's argmax; between, the scheduler keeps the policy's choices coherent
    with where each op's inputs are (docs/go-transfer.md, "Zero-shot through a list
    scheduler").

    With a cut cost (``cut`` > 0) each input edge from another device adds ``cut`` times its
    mean transfer time (latency + bytes / bandwidth over device pairs) to the choice: HEFT's
    finish time counts only the input that arrives last, as if links were free for every other
    transfer; the simulator queues transfers on links and keeps every received tensor in
    memory, so a split HEFT finds faster on paper is often slower (:func:`heft_cut`)."""
    if not (math.isfinite(cut) and cut >= 0):
        raise ValueError(f"cut must be finite and >= 0, got {cut!r}")
    h = _HeftInputs(sim)
    penalty = _guide_penalty(h.times, logp, beta)
    return Decision(h.decode(np.full(len(h.in_src), cut), penalty), priority=h.rank)


class _HeftInputs:
    """What HEFT's list scheduling of one graph needs, computed once: the upward ranks, the
    op order, each op's in-edges (CSR) and each in-edge's mean transfer time."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.rank = upward_rank(sim)
        self.order = np.lexsort((sim.graph.topo_rank, -self.rank)).astype(np.int64)
        self.ptr, self.in_src, self.in_bytes = _in_csr(sim)
        self.times = sim.op_times()
        lat, inv_bw = _comm_model(sim)
        self.transfer = lat + self.in_bytes * inv_bw
        self._no_penalty = np.zeros_like(self.times)

    def decode(self, weights: np.ndarray, penalty: np.ndarray | None = None) -> np.ndarray:
        """HEFT's placement with each in-edge cut charged ``weights`` x its transfer time."""
        c = self.sim.cluster
        pen = self._no_penalty if penalty is None else penalty
        cost = weights * self.transfer
        return _heft(self.order, self.ptr, self.in_src, self.in_bytes, self.times, c.latency,
                     c.bandwidth, pen, cost)  # fmt: skip

    def score(self, placement: np.ndarray) -> float:
        """The simulator's penalised step time of ``placement`` run in HEFT's rank order."""
        return penalized(self.sim, self.sim.run(placement, self.rank))


#: The cut costs :func:`heft_cut` tries (multiples of an edge's mean transfer time).
CUT_WEIGHTS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)


def heft_cut(sim: Simulator, weights: tuple[float, ...] = CUT_WEIGHTS) -> Decision:
    """HEFT with a cut cost (:func:`heft` with ``cut``), the fastest of ``weights`` by the
    simulator's penalised step time (one call each): how much a cut edge costs beyond HEFT's
    estimate depends on the links and the graph (fast NVLink wants little, PCIe much more),
    so the sweep is part of the baseline, as the budget is part of a search baseline's."""
    s = CutSearch(sim, sweep=weights)
    for _ in weights:  # every weight scored, equal placements too: one call each, as reported
        s.tell(s.h.score(s.propose()))
    assert s.placement is not None
    return Decision(s.placement, priority=s.priority)


class CutSearch:
    """:func:`heft_search`'s hill climb over per-edge cut costs, one candidate at a time, so a
    caller that judges candidates its own way can run it.

    :meth:`propose` returns the next candidate's HEFT placement, :meth:`tell` its score (lower
    is better); the first candidates are one cut cost for every edge, one per ``sweep`` weight
    (:func:`heft_cut` is this sweep alone; the first of equals kept), then each is the kept
    weights with one run move: a run of consecutive in-edges (by their consumer's topological
    position, geometric length with mean ``ops / 16``) scaled by ``exp(+-U(0.3, 2))``, kept if
    not slower."""

    def __init__(
        self,
        sim: Simulator,
        seed: int | np.random.Generator = 0,
        sweep: Sequence[float] = CUT_WEIGHTS,
    ) -> None:
        if not sweep:
            raise ValueError("the uniform sweep needs at least one weight")
        for w0 in sweep:
            if not (math.isfinite(w0) and w0 >= 0):
                raise ValueError(f"cut must be finite and >= 0, got {w0!r}")
        self.sweep = tuple(float(w0) for w0 in sweep)
        self.h = _HeftInputs(sim)
        g = sim.graph
        self.num_ops = g.num_ops
        # each in-edge's consumer's topological position (runs of edges are runs of consumers)
        self.pos = g.topo_rank[np.repeat(np.arange(g.num_ops), np.diff(self.h.ptr))]
        # a seed's generator is made when the sweep ends, where heft_search always made it
        self.rng = seed if isinstance(seed, np.random.Generator) else None
        self._seed = seed
        self.weights: np.ndarray | None = None
        """The kept per-edge weights (None before the first :meth:`tell`)."""
        self.placement: np.ndarray | None = None
        """The kept weights' HEFT placement."""
        self.score = math.inf
        """The kept weights' score."""
        self.told = 0
        self._pending: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def priority(self) -> np.ndarray:
        """HEFT's upward ranks (the priorities its placements are scored with)."""
        return self.h.rank

    def propose(self) -> np.ndarray:
        """The next candidate's placement (a new array)."""
        if self.told < len(self.sweep):
            w = np.full(len(self.h.in_src), self.sweep[self.told])
        else:
            if self.rng is None:
                self.rng = np.random.default_rng(self._seed)
            assert self.weights is not None
            rng = self.rng
            a = int(rng.integers(self.num_ops))
            run = int(rng.geometric(1 / max(1.0, self.num_ops / 16)))
            w = self.weights.copy()
            scale = math.exp(rng.choice((-1.0, 1.0)) * rng.uniform(0.3, 2))
            w[(self.pos >= a) & (self.pos < a + run)] *= scale
        self._pending = (w, self.h.decode(w))
        return self._pending[1].copy()

    def tell(self, score: float) -> bool:
        """Judge the last proposal (``score``: lower is better); whether it was kept."""
        if self._pending is None:
            raise RuntimeError("tell() needs a propose() first")
        in_sweep = self.told < len(self.sweep)
        keep = self.weights is None or (score < self.score if in_sweep else score <= self.score)
        if keep:
            self.weights, self.placement = self._pending
            self.score = score
        self.told += 1
        self._pending = None
        return keep


def heft_search(sim: Simulator, budget: int = 100, seed: int = 0) -> Decision:
    """HEFT with a cut cost per edge, searched: hill climbing over each in-edge's weight
    (:func:`heft`'s ``cut``, one per edge) from :func:`heft_cut`'s best uniform weight, every
    candidate decoded by HEFT's list scheduling and judged by the simulator
    (:class:`CutSearch`). ``budget`` simulator calls in all, the uniform sweep's included (a
    candidate HEFT places exactly as the kept one counts as a call without making one).
    Strong where the best placements are list schedules (RNN-style graphs: gnmt-s, rnnlm-s);
    hill climbing's run moves win where they are not (docs/go-transfer.md, "Searching
    HEFT's cut cost per edge"). Priorities: HEFT's ranks."""
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget!r}")
    s = CutSearch(sim, seed)
    for _ in range(budget):
        dev = s.propose()
        same = s.placement is not None and np.array_equal(dev, s.placement)
        s.tell(s.score if same else s.h.score(dev))
    assert s.placement is not None
    return Decision(s.placement, priority=s.priority)


def _guide_penalty(times: np.ndarray, logp: np.ndarray | None, beta: float) -> np.ndarray:
    """A guided list scheduler's cost of op ``u`` on device ``d`` beyond its time:
    ``beta * t_u * (max_d' logp[u, d'] - logp[u, d])`` (zeros without ``logp``)."""
    if logp is None:
        return np.zeros_like(times)
    logp = np.asarray(logp, np.float64)
    if logp.shape != times.shape or not np.isfinite(logp).all():
        raise ValueError(f"logp must be {times.shape} finite log-probabilities")
    if not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be finite and >= 0, got {beta!r}")
    return beta * times.mean(1, keepdims=True) * (logp.max(1, keepdims=True) - logp)


@_jit
def _metf(
    in_ptr: np.ndarray, in_src: np.ndarray, in_b: np.ndarray,
    out_ptr: np.ndarray, out_dst: np.ndarray, indeg: np.ndarray,
    times: np.ndarray, lat: np.ndarray, bw: np.ndarray,
    need: np.ndarray, cap: np.ndarray, level: np.ndarray, penalty: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """m-ETF's loop; the (ready op, device) pair minimising start time + ``penalty[u, d]``
    (zeros: m-ETF) among devices with memory left for the op."""
    n, nd = times.shape
    dev = np.full(n, -1, dtype=np.int64)
    fin = np.zeros(n)
    avail = np.zeros(nd)
    used = np.zeros(nd)
    left = indeg.copy()
    ready = np.empty(n, dtype=np.int64)
    nready = 0
    for u in range(n):
        if left[u] == 0:
            ready[nready] = u
            nready += 1
    seq = np.zeros(n, dtype=np.int64)
    for step in range(n):
        best_i, best_d, best_s, best_c, best_l = -1, -1, np.inf, np.inf, -np.inf
        fb_i, fb_d, fb_s, fb_free = -1, -1, np.inf, -np.inf  # fallback if nothing fits
        for i in range(nready):
            u = ready[i]
            for d in range(nd):
                s = _start(u, d, avail[d], in_ptr, in_src, in_b, fin, dev, lat, bw)
                if used[d] + need[u] <= cap[d]:
                    c = s + penalty[u, d]
                    if c < best_c or (c == best_c and level[u] > best_l):
                        best_i, best_d, best_s, best_c, best_l = i, d, s, c, level[u]
                else:
                    free = cap[d] - used[d]
                    if free > fb_free or (free == fb_free and s < fb_s):
                        fb_i, fb_d, fb_s, fb_free = i, d, s, free
        if best_i < 0:
            best_i, best_d, best_s = fb_i, fb_d, fb_s
        u = ready[best_i]
        ready[best_i] = ready[nready - 1]
        nready -= 1
        dev[u], fin[u] = best_d, best_s + times[u, best_d]
        avail[best_d] = fin[u]
        used[best_d] += need[u]
        seq[u] = step
        for e in range(out_ptr[u], out_ptr[u + 1]):
            v = out_dst[e]
            left[v] -= 1
            if left[v] == 0:
                ready[nready] = v
                nready += 1
    return dev, seq


def m_etf(
    sim: Simulator, memory_fraction: float = 0.9, logp: np.ndarray | None = None,
    beta: float = 0.0,
) -> Decision:  # fmt: skip
    """m-ETF (module docstring). Memory per op = its parameters + output, never freed — the
    conservative count Baechi uses, since a training step keeps activations for the backward.

    Guided by a policy as :func:`heft` is: the pair minimising ``start time + beta * t_u *
    (max_d' logp[u, d'] - logp[u, d])`` among those that fit, so a guided decision keeps
    m-ETF's memory bound where HEFT's list scheduler ignores it."""
    g, c = sim.graph, sim.cluster
    ptr, isrc, ib = _in_csr(sim)
    cap = c.arrays()[2] * memory_fraction
    times = sim.op_times()
    penalty = _guide_penalty(times, logp, beta)
    dev, seq = _metf(
        ptr, isrc, ib, g.out_ptr, g.dst[g.out_edges], g.in_degree, times,
        c.latency, c.bandwidth, g.param_bytes + g.out_bytes, cap, upward_rank(sim), penalty,
    )  # fmt: skip
    return Decision(dev, priority=-seq.astype(np.float64))


# ---- priorities and fusion -----------------------------------------------------------------


def critical_path_priority(sim: Simulator, placement: np.ndarray) -> np.ndarray:
    """Bottom level under ``placement``: ops on the longest remaining path run first."""
    g, c = sim.graph, sim.cluster
    dev = sim.check_placement(placement)
    t = sim.op_times()[np.arange(g.num_ops), dev]
    du, dv = dev[g.src], dev[g.dst]
    cost = np.where(du != dv, c.latency[du, dv] + g.edge_bytes / c.bandwidth[du, dv], 0.0)
    oe = g.out_edges
    return _bottom_level(g.topo_order, g.out_ptr, g.dst[oe], cost[oe], t)


def greedy_fusion(sim: Simulator, placement: np.ndarray) -> np.ndarray:
    """Fuse every legal edge (consumer with one input, same device) whose consumer is
    memory-bound on its device — XLA's habit of folding elementwise ops into their producer,
    which saves an op's overhead and a round trip of its input through memory."""
    g = sim.graph
    dev = sim.check_placement(placement)
    f, bw, _, _ = sim.cluster.arrays()
    d = dev[g.dst]
    moved = g.bytes_read + g.bytes_written
    membound = moved[g.dst] / bw[d] >= g.flops[g.dst] / f[d]
    return sim.fusable_edges & (dev[g.src] == d) & membound


def with_cp(sim: Simulator, d: Decision) -> Decision:
    return Decision(d.placement, critical_path_priority(sim, d.placement), d.fusion)


# ---- search ----------------------------------------------------------------------------------


def random_search(sim: Simulator, budget: int = 100, seed: int = 0) -> Decision:
    """Best of ``budget`` random contiguous splits (random cut points and device order), with
    HEFT-rank priorities."""
    rng = np.random.default_rng(seed)
    _, gi, w = anchor_groups(sim)
    nd = sim.cluster.num_devices
    prio = upward_rank(sim)
    w = _split_weights(w)
    cum = np.cumsum(w) / w.sum()
    best: tuple[float, np.ndarray] | None = None
    for _ in range(budget):
        k = int(rng.integers(1, nd + 1))  # use 1..nd devices
        cuts = np.sort(rng.random(k - 1))
        piece = np.searchsorted(cuts, cum - 1e-12)
        devs = rng.permutation(nd)[:k]
        p = devs[piece][gi]
        score = penalized(sim, sim.run(p, prio))
        if best is None or score < best[0]:
            best = (score, p)
    assert best is not None
    return Decision(best[1], prio)


def anneal(
    sim: Simulator,
    start: Decision,
    budget: int = 200,
    seed: int = 0,
    t0: float = 0.05,
) -> Decision:
    """Simulated annealing (Kirkpatrick et al., 1983) over placements from ``start``.

    A move reassigns a run of consecutive anchor groups (in topological order, geometric length,
    so both fine and coarse moves happen) to one device; gradient ops move with their forward op.
    Acceptance is Metropolis on the relative change of :func:`penalized` with a temperature that
    falls linearly from ``t0`` to 0 over ``budget`` simulator calls. Priorities: HEFT ranks.
    """
    rng = np.random.default_rng(seed)
    roots, gi, _ = anchor_groups(sim)
    nd = sim.cluster.num_devices
    prio = upward_rank(sim) if start.priority is None else start.priority
    fuse = start.fusion is not None  # keep fusing greedily if the start fused

    def score(p: np.ndarray) -> float:
        return penalized(sim, sim.run(p, prio, greedy_fusion(sim, p) if fuse else None))

    cur = sim.check_placement(start.placement).copy()
    best = cur
    if nd > 1:  # ``budget`` calls in all: the start's score is one of them
        best = _anneal_loop(score, cur, score(cur), gi, roots.size, nd, budget - 1, rng, t0)
    return Decision(best, prio, greedy_fusion(sim, best) if fuse else None)


def _anneal_loop(
    score: Callable[[np.ndarray], float],
    cur: np.ndarray,
    cur_s: float,
    gi: np.ndarray,
    k: int,
    nd: int,
    budget: int,
    rng: np.random.Generator,
    t0: float,
) -> np.ndarray:
    """``cur`` is a per-op placement (the start need not keep gradients with their forward
    ops); a move sets every op of ``run`` consecutive anchor groups to one device."""
    best_s, best = cur_s, cur.copy()
    for i in range(budget):
        temp = t0 * (1 - i / budget)
        cand = run_move(cur, gi, k, nd, rng)
        s = score(cand)
        # relative change; from a score of 0 (a graph of free ops) nothing can improve
        delta = (s - cur_s) / cur_s if cur_s > 0 else (0.0 if s <= 0 else math.inf)
        if delta <= 0 or (temp > 0 and rng.random() < math.exp(-delta / temp)):
            cur, cur_s = cand, s
            if s < best_s:
                best_s, best = s, cand.copy()
    return best


def run_move(
    placement: np.ndarray,
    gi: np.ndarray,
    k: int,
    nd: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Annealing's move: a copy of ``placement`` with every op of a run of consecutive anchor
    groups (``gi``: each op's group index in topological order, ``k`` groups) on one of ``nd``
    devices, drawn uniformly. The run's length is geometric with mean ``k / (8 nd)`` (at least
    1), so both single-group and coarse moves happen. GO's actors explore with it too
    (:class:`actorq.agents.go.actor.GraphActor`)."""
    mean_len = max(1.0, k / (8 * nd))
    a = int(rng.integers(k))
    run = min(k - a, int(rng.geometric(1 / mean_len)))
    cand = placement.copy()
    sel = (gi >= a) & (gi < a + run)
    cand[sel] = rng.integers(nd)
    return cand


# ---- all of them -----------------------------------------------------------------------------

NAMES = (
    "single",
    "expert",
    "expert+cp",
    "metis+cp",
    "heft",
    "heft-cut",
    "m-etf",
    "best+fuse",
    "random",
    "anneal",
    "climb",
    "heft-search",
)
#: The baselines with a budget of simulator calls.
SEARCH = ("random", "anneal", "climb", "heft-search")
#: The baselines that decide placement only: without ``best+fuse``, ``anneal`` and ``climb``
#: start from the best unfused placement, so none of them fuses ops. What a placement policy is
#: weighed against (``actorq graphopt place``): search that also fuses would win by fusing.
PLACEMENT = tuple(n for n in NAMES if n != "best+fuse")


#: The deterministic baselines: a decision the environments can take as their reference (no
#: search budget, no dependence on what ran before).
REFERENCES = tuple(n for n in NAMES if n not in ("best+fuse", *SEARCH))


def simulator_calls(name: str, budget: int) -> int:
    """The simulator calls baseline ``name`` needs to decide: ``budget`` for a search, one per
    cut weight for ``heft-cut``, one (its scoring) for the others."""
    if name in SEARCH:
        return budget
    return len(CUT_WEIGHTS) if name == "heft-cut" else 1


def run_baselines(
    sim: Simulator,
    names: tuple[str, ...] = NAMES,
    budget: int = 100,
    seed: int = 0,
) -> list[BaselineResult]:
    """Run the named baselines (in order) and score each with the simulator.

    ``best+fuse`` applies greedy fusion to the best feasible decision found before it; ``anneal``
    starts from it too, and ``climb`` from the same decision (annealing's result is not its
    start); ``heft-search`` starts from HEFT with a cut cost's uniform weights, whatever ran
    before. ``budget`` is the number of simulator calls of each search baseline.
    """
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise GraphError(f"unknown baseline(s) {unknown}; available: {', '.join(NAMES)}")
    out: list[BaselineResult] = []

    start = {"name": ""}

    def best_so_far(skip: tuple[str, ...] = ()) -> Decision:
        done = [b for b in out if b.name not in skip]
        if not done:
            start["name"] = "expert+cp"
            return with_cp(sim, expert(sim))
        best = min(done, key=lambda b: penalized(sim, b.result))
        start["name"] = best.start or best.name  # the placement's origin, through best+fuse
        return best.decision

    makers: dict[str, Callable[[], Decision]] = {
        "single": lambda: single_device(sim),
        "expert": lambda: expert(sim),
        "expert+cp": lambda: with_cp(sim, expert(sim)),
        "metis+cp": lambda: with_cp(sim, metis(sim, seed)),
        "heft": lambda: heft(sim),
        "heft-cut": lambda: heft_cut(sim),
        "m-etf": lambda: m_etf(sim),
        "best+fuse": lambda: _fused(sim, best_so_far()),
        "random": lambda: random_search(sim, budget, seed),
        "anneal": lambda: anneal(sim, best_so_far(), budget, seed),
        "climb": lambda: anneal(sim, best_so_far(skip=("anneal",)), budget, seed, t0=0.0),
        "heft-search": lambda: heft_search(sim, budget, seed),
    }
    for name in names:
        start["name"] = ""
        t = time.perf_counter()
        d = makers[name]()
        secs = time.perf_counter() - t
        r = sim.run(d.placement, d.priority, d.fusion)
        out.append(BaselineResult(name, d, r, secs, start["name"]))
    return out


def _fused(sim: Simulator, d: Decision) -> Decision:
    return Decision(d.placement, d.priority, greedy_fusion(sim, d.placement))
