"""Event-driven execution simulator: the step time, memory and traffic of one decision.

Given a graph, a cluster and a decision — a device per op (placement), a priority per op
(scheduling) and a fuse bit per edge (fusion), the three things GO's policy outputs (Zhou et al.,
NeurIPS 2020) — :class:`Simulator` plays one step the way a dataflow runtime executes it:

* **Compute.** Each device runs one op (or fused group) at a time, taking the highest-priority
  ready one (ties: earliest in topological order). Time on device ``d`` is the roofline
  ``overhead_d + max(flops / flop_s_d, bytes / mem_bw_d)``.
* **Communication.** When an op finishes, its output is sent once to every *other* device that
  has a consumer (TensorFlow's send/recv pairs do the same), taking the largest edge tensor to
  that device. A transfer waits for its link (transfers on one directed link go one at a time,
  first come first served), occupies it for ``bytes / bandwidth`` and arrives ``latency`` later.
  Communication overlaps compute, as DMA engines do.
* **Fusion.** A fused edge ``u -> v`` is honoured when ``v`` has no other input and both ops are
  on one device — producer–consumer fusion (as in XLA) restricted so it can never create a
  cycle: a fused group is an out-tree that is entered only at its root, and its root reaches
  every member. A group runs as one kernel (one overhead, summed FLOPs); a fused input is not
  read back from memory (``bytes -= edge bytes``), and an output needed by no op outside the
  group is neither written nor allocated; outputs used outside are materialized when the group
  finishes. Other fuse bits are ignored and counted in :attr:`SimResult.fusions_ignored`.
  (The mirror rule — ``u`` with a single consumer — is just as safe alone, but not mixed with
  this one; in training graphs every forward output the backward saves also feeds a gradient
  op, so the single-input rule is the one that leaves something to fuse.)
* **Memory.** Parameter bytes live on their op's device all step. An op's output is allocated
  when it starts and freed when its last consumer on that device has finished and its transfers
  have arrived; a received tensor is allocated on arrival and freed after its last consumer there.
  Outputs nobody consumes (the loss, gradients) stay to the end. Peak over capacity makes the
  decision infeasible with a reason naming the device and the op at the peak.

The hot loop is compiled with numba (``cache=True``) when it is installed (the ``[graph]`` extra);
without it the same code runs as plain Python, correct but ~100x slower. Graph-dependent arrays
(CSR adjacency, topological ranks) are built once per :class:`Simulator`, so one call costs only
the event loop: an 80k-op graph takes tens of milliseconds (``benchmarks/simulator_speed.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from actorq.errors import GraphError
from actorq.graphopt.cluster import Cluster
from actorq.graphopt.ir import Graph

F = TypeVar("F", bound=Callable[..., Any])

try:
    import numba

    def _jit(fn: F) -> F:
        return numba.njit(cache=True, nogil=True)(fn)  # type: ignore[return-value]

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - the [graph] extra installs numba

    def _jit(fn: F) -> F:
        return fn

    HAVE_NUMBA = False


# ---- array binary heaps (numba has no per-device heap of tuples): keys (k1, k2), min first ------
@_jit
def _less(k1: np.ndarray, k2: np.ndarray, row: int, i: int, j: int) -> bool:
    a, b = k1[row, i], k1[row, j]
    return a < b or (a == b and k2[row, i] < k2[row, j])


@_jit
def _swap(k1: np.ndarray, k2: np.ndarray, ids: np.ndarray, row: int, i: int, j: int) -> None:
    k1[row, i], k1[row, j] = k1[row, j], k1[row, i]
    k2[row, i], k2[row, j] = k2[row, j], k2[row, i]
    ids[row, i], ids[row, j] = ids[row, j], ids[row, i]


@_jit
def _push(
    k1: np.ndarray,
    k2: np.ndarray,
    ids: np.ndarray,
    size: np.ndarray,
    row: int,
    a: float,
    b: float,
    x: int,
) -> None:
    i = size[row]
    size[row] += 1
    k1[row, i], k2[row, i], ids[row, i] = a, b, x
    while i > 0:
        p = (i - 1) // 2
        if _less(k1, k2, row, i, p):
            _swap(k1, k2, ids, row, i, p)
            i = p
        else:
            break


@_jit
def _pop(k1: np.ndarray, k2: np.ndarray, ids: np.ndarray, size: np.ndarray, row: int) -> int:
    top = ids[row, 0]
    size[row] -= 1
    last = size[row]
    if last > 0:
        _swap(k1, k2, ids, row, 0, last)
        i = 0
        while True:
            lc, rc, best = 2 * i + 1, 2 * i + 2, i
            if lc < last and _less(k1, k2, row, lc, best):
                best = lc
            if rc < last and _less(k1, k2, row, rc, best):
                best = rc
            if best == i:
                break
            _swap(k1, k2, ids, row, i, best)
            i = best
    return top


@_jit
def _fused_groups(
    topo: np.ndarray,
    fprev: np.ndarray,
    fbytes: np.ndarray,
    out_ptr: np.ndarray,
    flops: np.ndarray,
    moved: np.ndarray,
    out_bytes: np.ndarray,
    prio: np.ndarray,
    rank: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fused groups (gid = the out-tree's root: the op with no fused producer): per op its
    group and whether its output is materialized; per group id its FLOPs, memory traffic,
    priority (max), topological rank (min) and whether it is a group.

    Fusion saves only traffic an op had: a fused input is not read back from memory where a
    member of the group computed it (a view or a saved buffer, which outputs nothing of its
    own, passes on its fused producer's values; fused to an op outside the group, its reader
    still reads memory), and an output nobody outside the group needs is not written, up to
    what the op writes. An edge's bytes are the tensor's size, not traffic of its ends."""
    n = flops.shape[0]
    gid = np.empty(n, dtype=np.int64)
    for k in range(n):
        u = topo[k]
        gid[u] = gid[fprev[u]] if fprev[u] >= 0 else u
    # an output is materialized unless every consumer is fused with it (sinks are kept)
    nfused = np.zeros(n, dtype=np.int64)
    fwrite = np.zeros(n)
    for v in range(n):
        if fprev[v] >= 0:
            nfused[fprev[v]] += 1
            fwrite[fprev[v]] = max(fwrite[fprev[v]], fbytes[v])
    materialize = np.empty(n, dtype=np.bool_)
    for u in range(n):
        deg = out_ptr[u + 1] - out_ptr[u]
        materialize[u] = deg == 0 or nfused[u] < deg
    for k in range(n - 1, -1, -1):  # a view read outside its group: its producer's output is
        v = topo[k]  # what is read (a view has none of its own), so that one is written
        if materialize[v] and out_bytes[v] == 0 and fprev[v] >= 0:
            materialize[fprev[v]] = True
    gflops = np.zeros(n)
    gmoved = np.zeros(n)
    gprio = np.full(n, -np.inf)
    grank = np.full(n, n, dtype=np.int64)
    ismember = np.zeros(n, dtype=np.bool_)
    for u in range(n):
        g = gid[u]
        gflops[g] += flops[u]
        gmoved[g] += moved[u]
        gprio[g] = max(gprio[g], prio[u])
        grank[g] = min(grank[g], rank[u])
        ismember[g] = True
        save = 0.0
        if fprev[u] >= 0:  # the fused input is not read back from memory ...
            src = fprev[u]
            while out_bytes[src] == 0 and fprev[src] >= 0:  # a view passes values on
                src = fprev[src]
            save += min(fbytes[u], out_bytes[src])
        if not materialize[u]:  # ... nor written, when nobody outside the group needs it
            save += min(fwrite[u], out_bytes[u])
        gmoved[g] -= min(save, moved[u])
    return gid, materialize, gflops, gmoved, gprio, grank, ismember


@_jit
def _group_members(gid: np.ndarray, topo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Members of each group in topological order, CSR by group id: (ptr, members)."""
    n = gid.shape[0]
    mcount = np.zeros(n + 1, dtype=np.int64)
    for u in range(n):
        mcount[gid[u] + 1] += 1
    mptr = np.cumsum(mcount)
    mfill = mptr[:-1].copy()
    members = np.empty(n, dtype=np.int64)
    for k in range(n):
        u = topo[k]
        members[mfill[gid[u]]] = u
        mfill[gid[u]] += 1
    return mptr, members


@_jit
def _transfers(
    out_ptr: np.ndarray, out_dst: np.ndarray, out_bytes_e: np.ndarray, dev: np.ndarray, nd: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """One transfer per (producer op, destination device), CSR by producer: (ptr, destination
    device, bytes = the largest edge's, source op, count)."""
    n = dev.shape[0]
    m = out_dst.shape[0]
    t_ptr = np.zeros(n + 1, dtype=np.int64)
    t_dev = np.empty(m, dtype=np.int64)
    t_bytes = np.zeros(m)
    t_src = np.empty(m, dtype=np.int64)
    mark = np.full(nd, -1, dtype=np.int64)
    nt = 0
    for u in range(n):
        t_ptr[u] = nt
        for e in range(out_ptr[u], out_ptr[u + 1]):
            dv = dev[out_dst[e]]
            if dv == dev[u]:
                continue
            if mark[dv] < t_ptr[u]:  # first edge from u to dv
                mark[dv] = nt
                t_dev[nt], t_src[nt], t_bytes[nt] = dv, u, out_bytes_e[e]
                nt += 1
            else:
                t_bytes[mark[dv]] = max(t_bytes[mark[dv]], out_bytes_e[e])
    t_ptr[n] = nt
    return t_ptr, t_dev, t_bytes, t_src, nt


@_jit
def _ref_counts(
    out_ptr: np.ndarray,
    out_dst: np.ndarray,
    gid: np.ndarray,
    dev: np.ndarray,
    t_ptr: np.ndarray,
    t_dev: np.ndarray,
    nt: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs each group waits for; references to each op's output buffer on its own device
    (local consumers and outgoing transfers); references to each received copy."""
    n = dev.shape[0]
    pending = np.zeros(n, dtype=np.int64)
    pref = np.zeros(n, dtype=np.int64)
    tref = np.zeros(max(nt, 1), dtype=np.int64)
    for u in range(n):
        for e in range(out_ptr[u], out_ptr[u + 1]):
            v = out_dst[e]
            if gid[v] == gid[u]:
                continue
            pending[gid[v]] += 1
            if dev[v] == dev[u]:
                pref[u] += 1
            else:
                for t in range(t_ptr[u], t_ptr[u + 1]):
                    if t_dev[t] == dev[v]:
                        tref[t] += 1
        pref[u] += t_ptr[u + 1] - t_ptr[u]
    return pending, pref, tref


@_jit
def _simulate(
    out_ptr: np.ndarray,
    out_dst: np.ndarray,
    out_bytes_e: np.ndarray,
    in_ptr: np.ndarray,
    in_src: np.ndarray,
    topo: np.ndarray,
    rank: np.ndarray,
    flops: np.ndarray,
    moved: np.ndarray,
    out_bytes: np.ndarray,
    dev: np.ndarray,
    prio: np.ndarray,
    fprev: np.ndarray,
    fbytes: np.ndarray,
    flop_s: np.ndarray,
    mem_bw: np.ndarray,
    overhead: np.ndarray,
    link_bw: np.ndarray,
    link_lat: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The event loop. Returns (start, finish per op, busy, peak live bytes, op at peak per
    device, stats = [comm_time, comm_bytes, transfers], group id per op, groups done).

    The set-up is in helpers; the loop's per-event work stays inline: moved into compiled
    helpers (even numba's ``inline="always"``) it made a simulation 1.3-1.7x slower."""
    n = flops.shape[0]
    nd = flop_s.shape[0]
    gid, materialize, gflops, gmoved, gprio, grank, ismember = _fused_groups(
        topo, fprev, fbytes, out_ptr, flops, moved, out_bytes, prio, rank
    )
    mptr, members = _group_members(gid, topo)
    gtime = np.zeros(n)
    for g in range(n):
        if ismember[g]:
            d = dev[g]
            gtime[g] = overhead[d] + max(gflops[g] / flop_s[d], max(gmoved[g], 0.0) / mem_bw[d])
    t_ptr, t_dev, t_bytes, t_src, nt = _transfers(out_ptr, out_dst, out_bytes_e, dev, nd)
    pending, pref, tref = _ref_counts(out_ptr, out_dst, gid, dev, t_ptr, t_dev, nt)
    # -- state: per-device ready heaps (priority, then rank) and one event heap (time, seq) --
    start = np.zeros(n)
    finish = np.zeros(n)
    busy = np.zeros(nd)
    live = np.zeros(nd)
    peak = np.zeros(nd)
    peak_op = np.full(nd, -1, dtype=np.int64)
    link_free = np.zeros((nd, nd))
    running = np.full(nd, -1, dtype=np.int64)
    rk1 = np.empty((nd, n))
    rk2 = np.empty((nd, n))
    rid = np.empty((nd, n), dtype=np.int64)
    rsize = np.zeros(nd, dtype=np.int64)
    ek1 = np.empty((1, n + nt))
    ek2 = np.empty((1, n + nt))
    eid = np.empty((1, n + nt), dtype=np.int64)
    esize = np.zeros(1, dtype=np.int64)
    seq = 0.0
    comm_time = 0.0
    comm_bytes = 0.0
    for g in range(n):
        if ismember[g] and pending[g] == 0:
            _push(rk1, rk2, rid, rsize, dev[g], -gprio[g], float(grank[g]), g)
    now = 0.0
    done = 0
    while True:
        # dispatch every idle device (all events at `now` are already applied)
        for d in range(nd):
            if running[d] < 0 and rsize[d] > 0:
                g = _pop(rk1, rk2, rid, rsize, d)
                running[d] = g
                for k in range(mptr[g], mptr[g + 1]):
                    u = members[k]
                    start[u] = now
                    if materialize[u]:
                        live[d] += out_bytes[u]
                if live[d] > peak[d]:
                    peak[d], peak_op[d] = live[d], g
                busy[d] += gtime[g]
                _push(ek1, ek2, eid, esize, 0, now + gtime[g], seq, g)
                seq += 1.0
        if esize[0] == 0:
            break
        now = ek1[0, 0]
        while esize[0] > 0 and ek1[0, 0] == now:
            x = _pop(ek1, ek2, eid, esize, 0)
            if x < n:  # group x finished: its outputs go to local consumers and out on links
                d = dev[x]
                running[d] = -1
                done += 1
                for k in range(mptr[x], mptr[x + 1]):
                    u = members[k]
                    finish[u] = now
                    for e in range(out_ptr[u], out_ptr[u + 1]):
                        v = out_dst[e]
                        if dev[v] == d and gid[v] != x:
                            pending[gid[v]] -= 1
                            if pending[gid[v]] == 0:
                                gv = gid[v]
                                _push(rk1, rk2, rid, rsize, d, -gprio[gv], float(grank[gv]), gv)
                    for t in range(t_ptr[u], t_ptr[u + 1]):
                        dd = t_dev[t]
                        ts = max(now, link_free[d, dd])
                        dur = t_bytes[t] / link_bw[d, dd]
                        link_free[d, dd] = ts + dur
                        comm_time += dur + link_lat[d, dd]
                        comm_bytes += t_bytes[t]
                        _push(ek1, ek2, eid, esize, 0, ts + dur + link_lat[d, dd], seq, n + t)
                        seq += 1.0
                    for k2 in range(in_ptr[u], in_ptr[u + 1]):
                        w = in_src[k2]
                        if gid[w] == x:
                            continue
                        if dev[w] == d:
                            pref[w] -= 1
                            if pref[w] == 0:
                                live[d] -= out_bytes[w]
                        else:
                            for t in range(t_ptr[w], t_ptr[w + 1]):
                                if t_dev[t] == d:
                                    tref[t] -= 1
                                    if tref[t] == 0:
                                        live[d] -= t_bytes[t]
            else:  # transfer arrived: the copy is live on its device, the source may be freed
                t = x - n
                u, dd, su = t_src[t], t_dev[t], dev[t_src[t]]
                live[dd] += t_bytes[t]
                if live[dd] > peak[dd]:
                    peak[dd], peak_op[dd] = live[dd], u
                pref[u] -= 1
                if pref[u] == 0:
                    live[su] -= out_bytes[u]
                for e in range(out_ptr[u], out_ptr[u + 1]):
                    v = out_dst[e]
                    if dev[v] == dd:
                        pending[gid[v]] -= 1
                        if pending[gid[v]] == 0:
                            gv = gid[v]
                            _push(rk1, rk2, rid, rsize, dd, -gprio[gv], float(grank[gv]), gv)
    stats = np.array([comm_time, comm_bytes, float(nt)])
    return start, finish, busy, peak, peak_op, stats, gid, done


def fmt_bytes(x: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:g} B"


@dataclasses.dataclass
class SimResult:
    """What one simulated step cost."""

    step_time: float
    """Seconds from the first op's start to the last op's finish."""
    feasible: bool
    """False when some device's peak memory exceeds its capacity."""
    reason: str
    """Why it is infeasible (empty when feasible)."""
    peak_memory: np.ndarray
    """Per device: parameter bytes + peak live activation bytes."""
    capacity: np.ndarray
    comm_time: float
    """Summed link time of all transfers (latency included); overlaps compute."""
    comm_bytes: float
    transfers: int
    busy: np.ndarray
    """Per device: seconds spent computing."""
    start: np.ndarray
    finish: np.ndarray
    fusions_applied: int
    fusions_ignored: int

    @property
    def utilization(self) -> np.ndarray:
        """Per device: busy time / step time."""
        return self.busy / self.step_time if self.step_time > 0 else np.zeros_like(self.busy)

    @property
    def memory_excess(self) -> float:
        """Largest ``peak / capacity - 1`` over devices (<= 0 when feasible)."""
        return float(np.max(self.peak_memory / self.capacity) - 1.0)


class Simulator:
    """Simulates decisions on one graph and cluster; build once, call :meth:`run` many times."""

    def __init__(self, graph: Graph, cluster: Cluster) -> None:
        self.graph, self.cluster = graph, cluster
        g = graph
        oe = g.out_edges
        self._out_ptr = g.out_ptr
        self._out_dst = g.dst[oe]
        self._out_eb = g.edge_bytes[oe]
        ie = np.argsort(g.dst, kind="stable")
        in_counts = np.bincount(g.dst, minlength=g.num_ops)
        self._in_ptr = np.concatenate([[0], np.cumsum(in_counts)]).astype(np.int64)
        self._in_src = g.src[ie]
        self._moved = g.bytes_read + g.bytes_written
        self._flop_s, self._mem_bw, self._memory, self._overhead = cluster.arrays()
        self._fusable_edge = g.in_degree[g.dst] == 1
        self.default_priority = -g.topo_rank.astype(np.float64)
        self._times: np.ndarray | None = None

    @property
    def fusable_edges(self) -> np.ndarray:
        """Edges into an op with a single input: fusing them is legal on a shared device."""
        return self._fusable_edge

    def op_times(self, device: int | None = None) -> np.ndarray:
        """Unfused roofline time of every op on ``device`` (all devices if None: ``(n, D)``)."""
        if self._times is None:  # baselines and the search penalty ask often: compute once
            self._times = self.cluster.op_times(self.graph.flops, self._moved)
            self._times.setflags(write=False)
        return self._times if device is None else self._times[:, device]

    def check_placement(self, placement: Any) -> np.ndarray:
        g, nd = self.graph, self.cluster.num_devices
        p = np.asarray(placement)
        if p.shape != (g.num_ops,):
            raise GraphError(f"placement has shape {p.shape}; graph {g.name!r} has {g.num_ops} ops")
        if p.dtype.kind not in "iu" and (
            p.dtype.kind != "f" or not np.all(np.isfinite(p)) or np.any(p != np.round(p))
        ):
            raise GraphError("placement must be integer device indices")
        bad = np.flatnonzero((p < 0) | (p >= nd))
        if bad.size:
            i = int(bad[0])
            raise GraphError(
                f"op {g.op_names[i]!r} is placed on device {p[i]}, which does not exist "
                f"(cluster {self.cluster.name!r} has devices 0..{nd - 1})"
            )
        return p.astype(np.int64)

    def run(
        self,
        placement: Any,
        priority: Any = None,
        fusion: Any = None,
    ) -> SimResult:
        """Simulate one step. ``priority``: higher runs first (default: topological order);
        ``fusion``: a bool per edge (default: none)."""
        g = self.graph
        dev = self.check_placement(placement)
        if priority is None:
            prio = self.default_priority
        else:
            prio = np.asarray(priority, dtype=np.float64)
            if prio.shape != (g.num_ops,) or not np.all(np.isfinite(prio)):
                raise GraphError(f"priority must be {g.num_ops} finite numbers")
        fprev = np.full(g.num_ops, -1, dtype=np.int64)
        fbytes = np.zeros(g.num_ops)
        applied = ignored = 0
        if fusion is not None:
            fz = np.asarray(fusion).astype(bool)
            if fz.shape != (g.num_edges,):
                raise GraphError(f"fusion must be one bool per edge ({g.num_edges})")
            ok = fz & self._fusable_edge & (dev[g.src] == dev[g.dst])
            fprev[g.dst[ok]] = g.src[ok]
            fbytes[g.dst[ok]] = g.edge_bytes[ok]
            applied, ignored = int(ok.sum()), int(fz.sum() - ok.sum())
        start, finish, busy, peak, peak_op, stats, _, done = _simulate(
            self._out_ptr,
            self._out_dst,
            self._out_eb,
            self._in_ptr,
            self._in_src,
            g.topo_order,
            g.topo_rank,
            g.flops,
            self._moved,
            g.out_bytes,
            dev,
            prio,
            fprev,
            fbytes,
            self._flop_s,
            self._mem_bw,
            self._overhead,
            self.cluster.bandwidth,
            self.cluster.latency,
        )
        if done != g.num_ops - applied:  # a DAG with legal fusion always drains: this is a bug
            raise RuntimeError(f"simulator deadlock: {done} of {g.num_ops - applied} groups ran")
        params = np.bincount(dev, weights=g.param_bytes, minlength=self.cluster.num_devices)
        peak_mem = params + peak
        over = np.flatnonzero(peak_mem > self._memory)
        reason = ""
        if over.size:
            d = int(over[np.argmax(peak_mem[over] / self._memory[over])])
            at = f" at op {g.op_names[peak_op[d]]!r}" if peak_op[d] >= 0 else ""
            reason = (
                f"device {d} ({self.cluster.devices[d].name}) needs {fmt_bytes(peak_mem[d])} > "
                f"{fmt_bytes(self._memory[d])} capacity ({fmt_bytes(params[d])} parameters + "
                f"{fmt_bytes(peak[d])} peak activations{at})"
            )
        return SimResult(
            step_time=float(finish.max()),
            feasible=not over.size,
            reason=reason,
            peak_memory=peak_mem,
            capacity=self._memory.copy(),
            comm_time=float(stats[0]),
            comm_bytes=float(stats[1]),
            transfers=int(stats[2]),
            busy=busy,
            start=start,
            finish=finish,
            fusions_applied=applied,
            fusions_ignored=ignored,
        )


def simulate(
    graph: Graph,
    cluster: Cluster,
    placement: Any,
    priority: Any = None,
    fusion: Any = None,
) -> SimResult:
    """One-off convenience; build a :class:`Simulator` to score many decisions on one graph."""
    return Simulator(graph, cluster).run(placement, priority, fusion)
