"""Force-directed placement of soft macros (standard-cell clusters) around fixed hard macros.

Mirhoseini et al. 2021 (Nature 594, "A graph placement methodology for fast chip design",
Methods, "Placement of standard cells") place the standard-cell clusters with a classic
force-directed (FD) method once the macros are placed: the netlist is a system of springs that
pull connected nodes together (weight × distance), overlapping nodes push each other apart, every
node moves along its force, and a maximum move distance per step damps oscillations. Google's
evaluator runs it as ``PlacementCost.optimize_stdcells`` (circuit_training
``environment/plc_client.py``) with a schedule of stages, each with its own number of steps,
attractive factor, repulsive factor and maximum move distance; circuit_training's default schedule
is three stages of 100 steps with attraction 100, 1e-3, 1e-5, repulsion 0, 1e6, 1e7 and moves of at
most the canvas's longer side over the stage's steps (1 %), the soft macros starting at the canvas
centre (``use_current_loc=False``).
TILOS-AI-Institute/MacroPlacement (``CodeElements/FDPlacement``) documents an open
re-implementation; this module follows those descriptions, vectorised with numpy:

* **attraction**: every net is split into two-pin connections from its driver to each sink (the
  star model); a connection pulls each of its two nodes towards the other with force
  ``k_a · w · (p_other − p_self)`` (``w`` the net weight; ``k_a`` times ``io_factor`` when one end
  is a port). Pins sit where the cost puts them: a soft-macro pin at its cluster's centre, a
  hard-macro pin at its offset turned by the macro's orientation;
* **repulsion**: two overlapping nodes (soft–soft, or soft–hard, the hard macro not moving) push
  each other apart along the line joining their centres with force ``k_r``; nodes that do not
  overlap do not repel. Soft macros are tested for overlap as squares of their area (as
  MacroPlacement's FD does); a force weaker than 1e-4 of the other in its stage is skipped, so
  the default stages are pure attraction, then pure repulsion;
* **move**: each axis of the force is scaled by the largest magnitude on that axis over all
  nodes, times the stage's maximum move distance (the node under the strongest force moves the
  full distance), and a node is kept on the canvas (its centre clipped so that it lies inside,
  or at the centre where it is wider than the canvas).

Hard macros and ports never move; standard cells (``STDCELL`` nodes, in unclustered netlists)
move like soft macros. What Google's closed-source placer does beyond this description is
unknown: on Ariane133's legalized macros this FD gives proxy 0.84 where the ``.plc`` header's
clusters (placed by a commercial placer, not by FD) give 0.686 (see ``docs/chip.md``). Exact
coincidences (every cluster starts at the canvas centre) are broken
by a seeded jitter of 1e-6 of the canvas, so a run is deterministic for its seed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from actorq.chip.cost import Costs, PlacementCost
from actorq.chip.netlist import HARD_MACRO, PORT, SOFT_MACRO, STDCELL
from actorq.errors import ConfigError

_CHUNK = 1 << 20  # pair-matrix entries per block of the overlap test (bounds memory)
#: Up to this many (movable, any) pairs the overlap test takes every pair at once; above it, a
#: sweep over x-sorted boxes (the same sums to the bit: an FD run on Ariane133's 782 clusters
#: 1.6x faster, on a dozen clusters 2.7x slower with it;
#: git show 85997d5:benchmarks/chip_fd_speed.py).
_ALL_PAIRS = 1 << 16


@dataclass(frozen=True)
class FDConfig:
    """A force-directed schedule: one entry per stage in each tuple (circuit_training's
    ``optimize_stdcells`` parameters and default schedule)."""

    num_steps: tuple[int, ...] = (100, 100, 100)
    """steps of each stage"""
    attract_factor: tuple[float, ...] = (100.0, 1e-3, 1e-5)
    """``k_a`` of each stage: strength of the springs along nets"""
    repel_factor: tuple[float, ...] = (0.0, 1e6, 1e7)
    """``k_r`` of each stage: the push between two overlapping nodes"""
    max_move_distance: tuple[float, ...] | None = None
    """largest move of one step, in µm, per stage; None: the canvas's longer side over the
    stage's steps (circuit_training's ``move_distance_factors`` of 1)"""
    io_factor: float = 1.0
    """multiplies ``k_a`` on connections to a port"""
    use_current_loc: bool = False
    """start from the soft macros' current positions; False: all at the canvas centre"""
    seed: int = 0
    """seed of the jitter that separates coincident nodes"""
    square_clusters: bool = True
    """test overlaps of soft macros as squares of their area (MacroPlacement's FD does)"""

    def __post_init__(self) -> None:
        n = len(self.num_steps)
        lens = [len(self.attract_factor), len(self.repel_factor)]
        if self.max_move_distance is not None:
            lens.append(len(self.max_move_distance))
        if n == 0 or any(k != n for k in lens):
            raise ConfigError(
                f"FD schedule: num_steps, attract_factor, repel_factor (and max_move_distance) "
                f"must have the same number (>= 1) of stages, got {[n, *lens]}"
            )
        if any(s < 0 or s > 10**7 for s in self.num_steps):
            raise ConfigError(f"FD num_steps={self.num_steps} (each 0..1e7)")
        vals = [*self.attract_factor, *self.repel_factor, self.io_factor]
        if self.max_move_distance is not None:
            vals += list(self.max_move_distance)
        if not all(math.isfinite(v) and 0 <= v <= 1e15 for v in vals):
            raise ConfigError("FD factors and move distances must be finite, >= 0 and <= 1e15")
        if not 0 <= self.seed < 2**63:
            raise ConfigError(f"FD seed={self.seed} (must be >= 0)")


@dataclass
class FDResult:
    """Costs before and after a force-directed run, and its duration."""

    before: Costs
    after: Costs
    steps: int
    seconds: float


class ForcePlacer:
    """Force-directed placement of the soft macros of ``pc``'s netlist.

    The connection list is built once per netlist; :meth:`place` may be called again after the
    hard macros moved (simulated annealing does), reading their pins from ``pc`` each time.
    """

    def __init__(self, pc: PlacementCost) -> None:
        self.pc = pc
        nl = pc.netlist
        self.movable = np.flatnonzero(np.isin(nl.kind, (SOFT_MACRO, STDCELL)))
        self.hard = nl.hard_macros
        slot = np.full(nl.num_nodes, -1, np.int64)
        slot[self.movable] = np.arange(len(self.movable))
        # star model: driver -> each sink, both as pins (their owner may be a macro)
        lens = np.diff(nl.net_ptr)
        drv = np.repeat(nl.net_nodes[nl.net_ptr[:-1]], lens)
        w = np.repeat(nl.weight[nl.net_driver], lens)
        first = np.zeros(len(nl.net_nodes), bool)
        first[nl.net_ptr[:-1][lens > 0]] = True
        u, v, w = drv[~first], nl.net_nodes[~first], w[~first]
        pu, pv = nl.parent[u], nl.parent[v]
        # keep connections that pull on something movable, between two different nodes
        keep = ((slot[pu] >= 0) | (slot[pv] >= 0)) & (pu != pv) & (w > 0)
        self.u, self.v = u[keep], v[keep]
        self.su, self.sv = slot[pu[keep]], slot[pv[keep]]
        io = (nl.kind[pu[keep]] == PORT) | (nl.kind[pv[keep]] == PORT)
        self.w = w[keep]
        self.io = io
        self.hw = nl.width[self.movable] / 2
        self.hh = nl.height[self.movable] / 2
        # clusters as squares of their area, for the overlap test (MacroPlacement's FD does
        # this: a cluster's aspect ratio is an artefact of clustering, not a shape)
        self.side = np.sqrt(nl.width[self.movable] * nl.height[self.movable]) / 2
        self.fixed_hw = nl.width[self.hard] / 2
        self.fixed_hh = nl.height[self.hard] / 2
        # the small netlists' overlap test: per square_clusters, the pairs' summed half-sizes
        self._sums: dict[bool, tuple[np.ndarray, np.ndarray]] = {}
        self._diag = np.arange(len(self.movable))
        assert np.all(nl.kind[self.hard] == HARD_MACRO)

    def place(self, config: FDConfig | None = None) -> FDResult:
        """Run the schedule, moving the soft macros of ``pc``; ``pc``'s costs are recomputed
        from scratch at the end."""
        cfg = config or FDConfig()
        pc = self.pc
        t = time.perf_counter()
        before = pc.costs()
        m = len(self.movable)
        if m == 0:
            return FDResult(before, before, 0, time.perf_counter() - t)
        c = pc.canvas
        rng = np.random.default_rng(cfg.seed)
        if cfg.use_current_loc:
            px, py = pc.x[self.movable].copy(), pc.y[self.movable].copy()
        else:
            px, py = np.full(m, c.width / 2), np.full(m, c.height / 2)
        jitter = 1e-6 * max(c.width, c.height)
        px += rng.uniform(-jitter, jitter, m)
        py += rng.uniform(-jitter, jitter, m)
        # the far end of a connection to a fixed node (hard-macro pin, port) stays put: read its
        # pin position once; pins of movable nodes sit at their node's centre
        cu_x = np.where(self.su < 0, pc.px[self.u], 0.0)
        cu_y = np.where(self.su < 0, pc.py[self.u], 0.0)
        cv_x = np.where(self.sv < 0, pc.px[self.v], 0.0)
        cv_y = np.where(self.sv < 0, pc.py[self.v], 0.0)
        mu, mv = self.su >= 0, self.sv >= 0
        iu, iv = np.maximum(self.su, 0), np.maximum(self.sv, 0)
        # the connections with a movable u (v), as indices: take() is cheaper than a mask
        ku, kv = np.flatnonzero(mu), np.flatnonzero(mv)
        iu_m, iv_m = iu[ku], iv[kv]
        # a node wider than the canvas sits at its centre line
        lo_x = np.minimum(self.hw, c.width / 2)
        hi_x = np.maximum(c.width - self.hw, c.width / 2)
        lo_y = np.minimum(self.hh, c.height / 2)
        hi_y = np.maximum(c.height - self.hh, c.height / 2)
        hx, hy = pc.x[self.hard], pc.y[self.hard]
        steps = 0
        for stage, n in enumerate(cfg.num_steps):
            ka = cfg.attract_factor[stage]
            kr = cfg.repel_factor[stage]
            if cfg.max_move_distance is not None:
                dist = cfg.max_move_distance[stage]
            else:
                dist = max(c.width, c.height) / max(n, 1)
            k = ka * self.w * np.where(self.io, cfg.io_factor, 1.0)
            for _ in range(n):
                fx, fy = np.zeros(m), np.zeros(m)
                # a force 1e4 times weaker than the other is skipped (it could not move anything
                # after the normalisation): circuit_training's stages are pure attraction or
                # pure repulsion
                if ka > 0 and len(k) and not (kr > 0 and ka / kr < 1e-4):
                    ux = np.where(mu, px[iu], cu_x)
                    uy = np.where(mu, py[iu], cu_y)
                    vx = np.where(mv, px[iv], cv_x)
                    vy = np.where(mv, py[iv], cv_y)
                    ax, ay = k * (vx - ux), k * (vy - uy)
                    # u is pulled towards v, v towards u
                    fx += np.bincount(iu_m, ax[ku], m) - np.bincount(iv_m, ax[kv], m)
                    fy += np.bincount(iu_m, ay[ku], m) - np.bincount(iv_m, ay[kv], m)
                if kr > 0 and not (ka > 0 and kr / ka < 1e-4):
                    rx, ry = self._repulsion(px, py, hx, hy, cfg.square_clusters)
                    fx += kr * rx
                    fy += kr * ry
                px = _step(px, fx, dist, lo_x, hi_x)
                py = _step(py, fy, dist, lo_y, hi_y)
                steps += 1
        pc.x[self.movable] = px
        pc.y[self.movable] = py
        pc.reset()
        return FDResult(before, pc.costs(), steps, time.perf_counter() - t)

    def _repulsion(
        self, px: np.ndarray, py: np.ndarray, hx: np.ndarray, hy: np.ndarray, square: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sum over overlapping partners of the unit vector pointing away from each partner:
        movable–movable pairs push both ways, movable–hard pairs only the movable node.

        Only pairs whose x-extents can meet are tested (a sweep over the partners sorted by
        left edge; the hard macros, few and large, against every movable node), in the order
        and with the arithmetic of the all-pairs test (:meth:`_repulsion_all_pairs`), so the
        sums are the same to the bit."""
        m = len(px)
        if m * (m + len(hx)) <= _ALL_PAIRS:  # small netlists: numpy's per-call cost dominates
            return self._repulsion_small(px, py, hx, hy, square)
        hw, hh, ohw, ohh = self._half_sizes(square)
        ox = np.concatenate([px, hx])
        oy = np.concatenate([py, hy])
        # candidates among the movable nodes: j's left edge lies in (L_i - 2 max hw, R_i),
        # widened by a rounding margin (the exact test below decides)
        left = px - hw
        order = np.argsort(left, kind="stable")
        sl = left[order]
        eps = 1e-9 * (float(np.max(np.abs(ox))) + float(np.max(ohw)) + 1.0)
        hi = np.searchsorted(sl, px + hw + eps, side="left")
        lo = np.searchsorted(sl, px - hw - 2 * float(np.max(hw)) - eps, side="right")
        counts = np.maximum(hi - lo, 0)
        ends = np.cumsum(counts)
        nh = len(hx)
        rows = max(1, _CHUNK // max(nh, 1))  # the hard macros' dense block: at most _CHUNK too
        rx, ry = np.zeros(m), np.zeros(m)
        a = 0
        while a < m:  # blocks of rows with at most _CHUNK candidates of each kind (bounds memory)
            b = max(a + 1, int(np.searchsorted(ends, ends[a] - counts[a] + _CHUNK, "right")))
            b = min(b, m, a + rows)
            c = counts[a:b]
            i = np.repeat(np.arange(a, b), c)
            j = order[np.arange(int(c.sum())) + np.repeat(lo[a:b] - (np.cumsum(c) - c), c)]
            dx = px[i] - ox[j]
            dy = py[i] - oy[j]
            hit = (np.abs(dx) < hw[i] + ohw[j]) & (np.abs(dy) < hh[i] + ohh[j]) & (i != j)
            i, j, dx, dy = i[hit], j[hit], dx[hit], dy[hit]
            if nh:
                # the hard macros, few and large, against every row: one dense test (an index
                # pair per candidate cost more than the test itself)
                dx2 = px[a:b, None] - hx[None, :]
                dy2 = py[a:b, None] - hy[None, :]
                hit2 = (np.abs(dx2) < hw[a:b, None] + ohw[None, m:]) & (
                    np.abs(dy2) < hh[a:b, None] + ohh[None, m:]
                )
                r, k = np.nonzero(hit2)
                i = np.concatenate([i, r + a])
                j = np.concatenate([j, k + m])
                dx = np.concatenate([dx, dx2[r, k]])
                dy = np.concatenate([dy, dy2[r, k]])
            if len(i):
                key = np.lexsort((j, i))  # row-major, as np.nonzero orders the all-pairs test
                px_, py_ = _push_apart(i[key] - a, j[key], dx[key], dy[key], b - a, a)
                rx[a:b] = px_
                ry[a:b] = py_
            a = b
        return rx, ry

    def _half_sizes(self, square: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Half-width and half-height of the movable nodes, then of every overlap partner
        (movable, then hard): squares of the clusters' area with ``square_clusters``."""
        hw, hh = (self.side, self.side) if square else (self.hw, self.hh)
        return (hw, hh, np.concatenate([hw, self.fixed_hw]),
                np.concatenate([hh, self.fixed_hh]))  # fmt: skip

    def _repulsion_small(
        self, px: np.ndarray, py: np.ndarray, hx: np.ndarray, hy: np.ndarray, square: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_repulsion_all_pairs` in one block, the sums of half-sizes (fixed for a
        netlist) computed once per placer: an FD run calls this 200 times."""
        if square not in self._sums:
            hw, hh, ohw, ohh = self._half_sizes(square)
            self._sums[square] = (hw[:, None] + ohw[None, :], hh[:, None] + ohh[None, :])
        wsum, hsum = self._sums[square]
        ox = np.concatenate([px, hx])
        oy = np.concatenate([py, hy])
        dx = px[:, None] - ox[None, :]
        dy = py[:, None] - oy[None, :]
        hit = (np.abs(dx) < wsum) & (np.abs(dy) < hsum)
        hit[self._diag, self._diag] = False  # a node does not repel itself
        i, j = np.nonzero(hit)
        return _push_apart(i, j, dx[i, j], dy[i, j], len(px))

    def _repulsion_all_pairs(
        self, px: np.ndarray, py: np.ndarray, hx: np.ndarray, hy: np.ndarray, square: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_repulsion` testing every pair (its reference in the tests)."""
        m = len(px)
        hw, hh, ohw, ohh = self._half_sizes(square)
        ox = np.concatenate([px, hx])
        oy = np.concatenate([py, hy])
        rx, ry = np.zeros(m), np.zeros(m)
        rows = max(1, _CHUNK // max(len(ox), 1))
        for a in range(0, m, rows):
            b = min(a + rows, m)
            dx = px[a:b, None] - ox[None, :]
            dy = py[a:b, None] - oy[None, :]
            hit = (np.abs(dx) < hw[a:b, None] + ohw[None, :]) & (
                np.abs(dy) < hh[a:b, None] + ohh[None, :]
            )
            hit[np.arange(b - a), np.arange(a, b)] = False  # a node does not repel itself
            i, j = np.nonzero(hit)
            if not len(i):
                continue
            px_, py_ = _push_apart(i, j, dx[i, j], dy[i, j], b - a, a)
            rx[a:b] += px_
            ry[a:b] += py_
        return rx, ry


def _push_apart(
    i: np.ndarray, j: np.ndarray, dx: np.ndarray, dy: np.ndarray, n: int, offset: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``i`` (of ``n``, numbered from ``offset``), the sum over its overlapping
    partners ``j`` of the unit vector ``(dx, dy) / |(dx, dy)|`` pointing away from each."""
    d = np.hypot(dx, dy)
    # coincident centres (rare after the jitter): push apart along x, by index order
    zero = d == 0
    dx = np.where(zero, np.where(i + offset < j, -1.0, 1.0), dx)
    d = np.where(zero, 1.0, d)
    return np.bincount(i, dx / d, n), np.bincount(i, dy / d, n)


def _step(p: np.ndarray, f: np.ndarray, dist: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Move along one axis: forces scaled so the largest moves ``dist``, then kept on canvas."""
    top = float(np.abs(f).max())  # the method: np.max's wrapper costs more than the max here
    if top > 0 and dist > 0:
        p = p + f * (dist / top)
    return np.minimum(np.maximum(p, lo), hi)


def place_soft_macros(pc: PlacementCost, config: FDConfig | None = None) -> FDResult:
    """Force-directed placement of ``pc``'s soft macros around its hard macros (one call; build
    a :class:`ForcePlacer` to run it repeatedly on one netlist)."""
    return ForcePlacer(pc).place(config)
