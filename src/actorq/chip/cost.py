"""The proxy cost of a macro placement, as circuit-training's evaluator defines it, with
incremental updates for moving one node.

Mirhoseini et al. 2021 ("A graph placement methodology for fast chip design", Nature 594) train
on a proxy cost ``wirelength + λ·density + γ·congestion``. Google's evaluator
(``plc_wrapper_main`` behind circuit_training's ``environment/plc_client.py``) is closed source;
the definitions below follow circuit_training's ``docs/PLACEMENT_COST.md`` and the open
re-implementation and documentation of TILOS-AI-Institute/MacroPlacement
(``Docs/ProxyCost/README.md``, ``CodeElements/Plc_client/plc_client_os.py``), which matches
Google's numbers to about 1e-7. On Ariane133 this module reproduces all four costs in the headers
of two ``.plc`` files written by Google's evaluator to their printed 4 decimals (``|Δ| <= 4e-5``).

**Wirelength.** A net is a driver (a macro pin, port or standard cell) and the nodes its
``input`` fields list. Its HPWL is the half perimeter of its pins' bounding box, weighted by the
driver's ``weight``. A hard-macro pin sits at the macro centre plus its offset turned by the
orientation; a soft-macro pin sits at its cluster's centre (its offset is ignored). The cost is
``Σ w·HPWL / ((W + H) · Σ w)``: 1 means every net spans the whole canvas.

**Density.** Each grid cell's density is the area of macros and standard cells overlapping it
(overlaps count twice) over the cell's area. The cost is 0.5 × the mean of the top 10 %
(``floor(0.1·n)`` cells, at least the densest one). The 0.5 is inside the reported density
cost (Google: it corrects the 2× area bloating of standard-cell clusters); it is not the density
weight.

**Congestion.** Every net is routed on the grid, on the cells its pins fall in: two cells with
one L (horizontal along the driver's row, vertical along the sink's column); three cells with
the evaluator's L/T rules (:func:`_route_three`); more cells as a star of two-cell routes from
the driver's cell. A net with any pin off the canvas is not routed (pins on its edge count in the
edge cells). A horizontal step from cell (r, c) to (r, c+1) loads cell (r, c), a vertical one
from (r, c) to (r+1, c) loads (r, c), by the net weight (at least 1). Loads are divided by the
cell's tracks (``cell height × horizontal routes per micron``, ``cell width × vertical routes per
micron``) and smoothed with range k (``Smoothing factor``): a cell's vertical load is shared
evenly by the cells of its row within k columns of it (fewer at the grid edge), a horizontal
load by the cells of its column within k rows. (This is what plc_client_os's code does, and its
numbers match Google's; MacroPlacement's prose describes the directions the other way round.)
Hard macros then add the tracks they block (``Routes used by macros`` × their overlap with each
cell; where a macro spans several rows and covers its top or bottom row only partly, its top row
gets no vertical blockage, likewise its rightmost column no horizontal blockage). The cost is the
mean of the top 5 % of the horizontal and vertical maps taken together (``floor(0.05·2n)``
values, at least the maximum).

**Proxy** = ``1·wirelength + 0.5·density + 0.5·congestion`` by default: Google's internal weights
(per MacroPlacement); the released circuit_training environment's reward uses density weight 1.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from actorq.chip.netlist import (
    HARD_MACRO,
    HARD_PIN,
    ORIENT_MATRIX,
    ORIENTATIONS,
    PORT,
    SOFT_MACRO,
    STDCELL,
    Netlist,
)
from actorq.chip.plc import MAX_GRID, MIN_SIZE, Placement
from actorq.errors import NetlistError

_EPS = 1e-5  # the evaluator's tolerance for "a macro covers this row/column fully"


@dataclass(frozen=True)
class Canvas:
    """Canvas, grid and routing parameters: what a ``.plc`` header adds to the netlist."""

    width: float
    height: float
    columns: int = 10
    rows: int = 10
    hroutes_per_micron: float = 1.0
    vroutes_per_micron: float = 1.0
    hrouting_alloc: float = 0.0
    vrouting_alloc: float = 0.0
    smooth_range: int = 0
    congestion_columns: int | None = None
    """congestion grid; None: the placement grid (what the evaluator did before circuit_training
    added a separate congestion grid, and what the Ariane133 .plc headers were computed with)"""
    congestion_rows: int | None = None

    @property
    def congestion_grid(self) -> tuple[int, int]:
        """(columns, rows) of the grid congestion is computed on."""
        return (self.congestion_columns or self.columns, self.congestion_rows or self.rows)

    def with_circuit_training_congestion_grid(self, routes_per_cell: int = 1000) -> Canvas:
        """This canvas with the congestion grid circuit_training's ``create_placement_cost``
        sets unless ``legacy_congestion_grid``: cells of ``2 · routes_per_cell / (h + v routes
        per micron)`` µm, at least one per side."""
        size = 2.0 * routes_per_cell / (self.hroutes_per_micron + self.vroutes_per_micron)
        return dataclasses.replace(
            self,
            congestion_columns=min(max(1, int(self.width / size)), MAX_GRID),
            congestion_rows=min(max(1, int(self.height / size)), MAX_GRID),
        )

    def __post_init__(self) -> None:
        # the same bounds as the .plc reader: far-off pins must not overflow grid indices
        for f in ("width", "height", "hroutes_per_micron", "vroutes_per_micron"):
            v = getattr(self, f)
            if not (math.isfinite(v) and MIN_SIZE <= v <= 1e12):
                raise NetlistError(f"canvas {f}={v!r} (must be between {MIN_SIZE:g} and 1e12)")
        for f in ("hrouting_alloc", "vrouting_alloc"):
            v = getattr(self, f)
            if not (math.isfinite(v) and 0 <= v <= 1e12):
                raise NetlistError(f"canvas {f}={v!r} (must be between 0 and 1e12)")
        for cols, rows in ((self.columns, self.rows), self.congestion_grid):
            if not (1 <= cols <= MAX_GRID and 1 <= rows <= MAX_GRID):
                raise NetlistError(f"grid {cols}x{rows} (1..{MAX_GRID} each)")
        if not 0 <= self.smooth_range <= MAX_GRID:
            raise NetlistError(f"smooth_range={self.smooth_range} (must be 0..{MAX_GRID})")

    @classmethod
    def from_placement(cls, p: Placement) -> Canvas:
        """The parameters in a ``.plc`` header (routes default to 1 track/µm when absent)."""
        if p.width <= 0 or p.height <= 0:
            raise NetlistError("placement header has no canvas Width/Height")
        return cls(
            width=p.width,
            height=p.height,
            columns=p.columns,
            rows=p.rows,
            hroutes_per_micron=p.hroutes_per_micron or 1.0,
            vroutes_per_micron=p.vroutes_per_micron or 1.0,
            hrouting_alloc=p.hrouting_alloc,
            vrouting_alloc=p.vrouting_alloc,
            smooth_range=p.smooth_range,
        )

    @classmethod
    def default_for(cls, netlist: Netlist) -> Canvas:
        """circuit-training's canvas when none is set: a square of 60 % utilisation (the
        evaluator's macro_tiles_10x10 test values only come out this way) and a 10×10 grid."""
        # a netlist of ports alone has no area: give it a 1 µm canvas rather than none
        side = max(math.sqrt(netlist.area() / 0.6), 1.0)
        return cls(width=side, height=side)


@dataclass(frozen=True)
class CostWeights:
    """Weights of the proxy cost (Mirhoseini et al. 2021: λ density, γ congestion)."""

    wirelength: float = 1.0
    density: float = 0.5
    congestion: float = 0.5


@dataclass(frozen=True)
class Costs:
    """One evaluation: raw weighted HPWL (µm) and the three normalised costs."""

    wirelength: float
    wirelength_cost: float
    density_cost: float
    congestion_cost: float
    proxy: float


def _gather(ptr: np.ndarray, items: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate CSR rows ``rows``: (the items, the position in ``rows`` each came from)."""
    starts = ptr[rows]
    lens = ptr[rows + 1] - starts
    seg = np.repeat(np.arange(len(rows)), lens)
    offs = np.cumsum(lens) - lens
    return items[np.repeat(starts - offs, lens) + np.arange(int(lens.sum()))], seg


def _csr(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of unique ``values`` grouped by ``keys`` in ``0..n-1``."""
    pair = np.unique(keys.astype(np.int64) * (values.max(initial=0) + 1) + values)
    k, v = np.divmod(pair, values.max(initial=0) + 1)
    ptr = np.zeros(n + 1, np.int64)
    np.add.at(ptr, k + 1, 1)
    return np.cumsum(ptr), v


class _Grid:
    """A grid over the canvas: cell sizes, grid lines, and where things fall on it."""

    def __init__(self, width: float, height: float, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows
        self.gw, self.gh = width / cols, height / rows
        self.col_lo = np.arange(cols) * self.gw  # grid lines as the evaluator puts them
        self.row_lo = np.arange(rows) * self.gh

    def cells(self, px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, col) of each point; points on or past the canvas edge count in the edge cell."""
        col = np.floor(px / self.gw).astype(np.int64)
        row = np.floor(py / self.gh).astype(np.int64)
        return np.minimum(np.maximum(row, 0), self.rows - 1), np.minimum(
            np.maximum(col, 0), self.cols - 1
        )

    def overlaps(
        self, x0: float, x1: float, y0: float, y1: float
    ) -> tuple[np.ndarray, np.ndarray, int, int, int, int]:
        """A rectangle's overlap length with each column and row, and the cell range the
        evaluator walks (floor of its corners, clipped to the grid)."""
        cl, rl = self.col_lo, self.row_lo
        xov = np.clip(np.minimum(x1, cl + self.gw) - np.maximum(x0, cl), 0.0, None)
        yov = np.clip(np.minimum(y1, rl + self.gh) - np.maximum(y0, rl), 0.0, None)
        c0 = min(max(math.floor(x0 / self.gw), 0), self.cols - 1)
        c1 = min(max(math.floor(x1 / self.gw), 0), self.cols - 1)
        r0 = min(max(math.floor(y0 / self.gh), 0), self.rows - 1)
        r1 = min(max(math.floor(y1 / self.gh), 0), self.rows - 1)
        return xov, yov, c0, c1, r0, r1


class PlacementCost:
    """Proxy cost of a placement of ``netlist`` on ``canvas``, updated incrementally.

    Holds every node's position and every hard macro's orientation, each net's HPWL, the
    density grid and the horizontal/vertical routing demand (as difference arrays, so a net's
    route is added or removed in O(its segments)). :meth:`move` moves one node and updates only
    the nets on its pins and the grid cells it covers; :meth:`costs` reads the costs off that
    state; :meth:`full_costs` recomputes everything from scratch (the reference for tests).
    """

    def __init__(
        self,
        netlist: Netlist,
        canvas: Canvas | None = None,
        weights: CostWeights | None = None,
        x: np.ndarray | None = None,
        y: np.ndarray | None = None,
        orientation: np.ndarray | None = None,
    ) -> None:
        self.netlist = nl = netlist
        self.canvas = c = canvas or Canvas.default_for(netlist)
        self.weights = weights or CostWeights()
        self.x = (nl.x if x is None else x).astype(np.float64).copy()
        self.y = (nl.y if y is None else y).astype(np.float64).copy()
        self.orientation = (nl.orientation if orientation is None else orientation).astype(np.int8)
        n = nl.num_nodes
        if not (len(self.x) == len(self.y) == len(self.orientation) == n):
            raise NetlistError(f"positions and orientations must have one entry per node ({n})")
        if not (np.all(np.abs(self.x) <= 1e12) and np.all(np.abs(self.y) <= 1e12)):
            raise NetlistError("positions must be finite and at most 1e12 µm from the origin")
        if not np.all((self.orientation >= 0) & (self.orientation < len(ORIENTATIONS))):
            raise NetlistError(f"orientations must be codes 0..{len(ORIENTATIONS) - 1}")
        self.grid = _Grid(c.width, c.height, c.columns, c.rows)  # density
        cc, cr = c.congestion_grid
        same = (cc, cr) == (c.columns, c.rows)
        self.cgrid = self.grid if same else _Grid(c.width, c.height, cc, cr)  # congestion
        # tracks crossing one congestion cell: the normalisers of routing demand
        self.h_tracks = self.cgrid.gh * c.hroutes_per_micron
        self.v_tracks = self.cgrid.gw * c.vroutes_per_micron
        self.has_area = np.isin(nl.kind, (HARD_MACRO, SOFT_MACRO, STDCELL)) & (
            nl.width * nl.height > 0
        )
        self.is_hard = nl.kind == HARD_MACRO
        self.hpwl_weight = nl.weight[nl.net_driver]
        self.route_weight = np.maximum(self.hpwl_weight, 1.0)  # the router counts a net >= once
        self.net_count = float(self.hpwl_weight.sum()) or 1.0
        # smoothing: vertical demand spreads along the row, horizontal along the column
        self._smooth_v = _smoothing(cc, c.smooth_range)  # V_s = V @ S_c
        self._smooth_h = _smoothing(cr, c.smooth_range).T  # H_s = S_r^T @ H
        # soft-macro pins sit at their cluster's centre: the evaluator ignores their offsets
        # (MacroPlacement found this; the Ariane133 wirelength only reproduces this way)
        hard_pin = nl.kind == HARD_PIN
        self._dx = np.where(hard_pin, nl.x_offset, 0.0)
        self._dy = np.where(hard_pin, nl.y_offset, 0.0)
        self._build_index()
        self.reset()

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def from_placement(
        cls, netlist: Netlist, placement: Placement, weights: CostWeights | None = None
    ) -> PlacementCost:
        """Costs of ``placement`` (a ``.plc``) on ``netlist``, with the header's canvas."""
        x, y, o = apply_placement(netlist, placement)
        return cls(netlist, Canvas.from_placement(placement), weights, x, y, o)

    def _build_index(self) -> None:
        nl = self.netlist
        n = nl.num_nodes
        net_of_member = np.repeat(np.arange(nl.num_nets), np.diff(nl.net_ptr))
        owner = nl.parent[nl.net_nodes]
        # the nets a node's move changes: those on the node or on any of its pins
        self._node_net_ptr, self._node_nets = _csr(owner, net_of_member, n)
        # a node's pins, whose positions follow it (move() adds the node itself)
        pins = np.flatnonzero(nl.parent != np.arange(n))
        self._node_pin_ptr, self._node_pins = _csr(nl.parent[pins], pins, n)
        self._cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}

    def _net_members(self, nets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(members of ``nets``, which of ``nets`` each belongs to, start of each net)."""
        nl = self.netlist
        members, seg = _gather(nl.net_ptr, nl.net_nodes, nets)
        lens = nl.net_ptr[nets + 1] - nl.net_ptr[nets]
        return members, seg, np.cumsum(lens) - lens

    # ---- full evaluation ----------------------------------------------------------------

    def reset(self) -> None:
        """Recompute all state from the current positions (also undoes rounding drift)."""
        nl = self.netlist
        self.px, self.py = self._pin_positions(np.arange(nl.num_nodes))
        allnets = np.arange(nl.num_nets)
        members, seg, starts = self._net_members(allnets)
        self.net_hpwl = _hpwl(self.px[members], self.py[members], starts)
        cg = self.cgrid
        self.h_diff = np.zeros(cg.rows * (cg.cols + 1))
        self.v_diff = np.zeros(cg.cols * (cg.rows + 1))
        self._route(self.px[members], self.py[members], seg, starts, self.route_weight)
        self._wirelength = float(np.sum(self.hpwl_weight * self.net_hpwl))
        self.occupancy = np.zeros((self.grid.rows, self.grid.cols))
        self.h_macro = np.zeros((cg.rows, cg.cols))
        self.v_macro = np.zeros((cg.rows, cg.cols))
        for i in np.flatnonzero(self.has_area):
            self._add_footprint(int(i), +1.0)

    def full_costs(self) -> Costs:
        """Costs recomputed from scratch (resets the incremental state)."""
        self.reset()
        return self.costs()

    def _pin_positions(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nl = self.netlist
        par = nl.parent[nodes]
        m = ORIENT_MATRIX[self.orientation[par]]
        dx, dy = self._dx[nodes], self._dy[nodes]
        return (
            self.x[par] + m[:, 0] * dx + m[:, 1] * dy,
            self.y[par] + m[:, 2] * dx + m[:, 3] * dy,
        )

    def _route(
        self, px: np.ndarray, py: np.ndarray, seg: np.ndarray, starts: np.ndarray, w: np.ndarray
    ) -> None:
        """Add the routes of a batch of nets to the routing demand, net ``k`` with weight
        ``w[k]`` (negative removes it).

        ``px``/``py`` are the positions of the nets' pins, net by net (``seg`` says which net
        each belongs to, ``starts`` where each net, led by its driver, begins).
        """
        cg = self.cgrid
        row, col = cg.cells(px, py)
        ncell = cg.rows * cg.cols
        cols = cg.cols
        cell = row * cols + col
        src = cell[starts]  # the driver's cell
        key = np.unique(seg * ncell + cell)  # distinct (net, cell) pairs, sorted by net
        net, kc = np.divmod(key, ncell)
        count = np.bincount(net, minlength=len(starts))
        # a net with a pin off the canvas is not routed at all (how Google's evaluator treats
        # the Ariane133 initial placement, whose 18 off-canvas macros would otherwise change
        # its congestion cost from 0.7128 to 0.7157)
        off = (px < 0) | (px > self.canvas.width) | (py < 0) | (py > self.canvas.height)
        if off.any():
            count[np.bincount(seg[off], minlength=len(starts)) > 0] = 0
        kcount = count[net]
        # two cells, or more than three: a star of L routes from the driver's cell
        star = ((kcount == 2) | (kcount > 3)) & (kc != src[net])
        sn, sc = net[star], kc[star]
        sr, scol = np.divmod(sc, cols)
        dr, dcol = np.divmod(src[sn], cols)
        hr, ha, hb, hw = [dr], [np.minimum(dcol, scol)], [np.maximum(dcol, scol)], [w[sn]]
        vc, va, vb, vw = [scol], [np.minimum(dr, sr)], [np.maximum(dr, sr)], [w[sn]]
        three = kcount == 3
        if three.any():
            cells3 = kc[three].reshape(-1, 3)  # three cells per net, nets in order
            w3 = w[net[three][::3]]
            for (h_row, h_a, h_b), (v_col, v_a, v_b) in _route_three(cells3, cols, cg.rows):
                hr.append(h_row)
                ha.append(h_a)
                hb.append(h_b)
                hw.append(w3)
                vc.append(v_col)
                va.append(v_a)
                vb.append(v_b)
                vw.append(w3)
        # a run from a to b (exclusive) is +w at a and -w at b in a difference array
        r = np.concatenate(hr) * (cols + 1)
        ww = np.concatenate(hw)
        idx = np.concatenate([r + np.concatenate(ha), r + np.concatenate(hb)])
        self.h_diff += np.bincount(idx, np.concatenate([ww, -ww]), minlength=len(self.h_diff))
        c = np.concatenate(vc) * (cg.rows + 1)
        ww = np.concatenate(vw)
        idx = np.concatenate([c + np.concatenate(va), c + np.concatenate(vb)])
        self.v_diff += np.bincount(idx, np.concatenate([ww, -ww]), minlength=len(self.v_diff))

    def _add_footprint(self, i: int, sign: float) -> None:
        """Add or remove node ``i``'s area in the density grid and, for a hard macro, the
        routing tracks it blocks in the congestion grid."""
        nl = self.netlist
        hw, hh = nl.width[i] / 2, nl.height[i] / 2
        box = (self.x[i] - hw, self.x[i] + hw, self.y[i] - hh, self.y[i] + hh)
        xov, yov, c0, c1, r0, r1 = self.grid.overlaps(*box)
        if not (xov.any() and yov.any()):
            return  # entirely off the canvas: the evaluator skips it
        self.occupancy += sign * np.outer(yov, xov)
        if not self.is_hard[i]:
            return
        cg = self.cgrid
        if cg is not self.grid:
            xov, yov, c0, c1, r0, r1 = cg.overlaps(*box)
        c = self.canvas
        xin, yin = xov > 0, yov > 0
        v = np.outer(yin, xov) * c.vrouting_alloc
        h = np.outer(yov, xin) * c.hrouting_alloc
        # a cell's (x, y) overlap reads (0, 0) unless both are positive: so a column the macro
        # only touches also makes its bottom row look partly covered (the evaluator's rule)
        xs, ys = xov[c0 : c1 + 1], yov[r0 : r1 + 1]
        if r1 != r0 and (
            abs(yov[r0] - cg.gh) > _EPS or abs(yov[r1] - cg.gh) > _EPS or not xs.all()
        ):
            v[r1, :] = 0.0
        if c1 != c0 and (
            abs(xov[c0] - cg.gw) > _EPS or abs(xov[c1] - cg.gw) > _EPS or not ys.all()
        ):
            h[:, c1] = 0.0
        self.v_macro += sign * v
        self.h_macro += sign * h

    # ---- reading the costs --------------------------------------------------------------

    def wirelength(self) -> float:
        """Raw weighted HPWL in microns (``get_wirelength``)."""
        return self._wirelength

    def wirelength_cost(self) -> float:
        c = self.canvas
        return self.wirelength() / ((c.width + c.height) * self.net_count)

    def density_grid(self) -> np.ndarray:
        """Density of each placement grid cell, (rows, cols)."""
        return self.occupancy / (self.grid.gw * self.grid.gh)

    def density_cost(self) -> float:
        d = self.density_grid().ravel()
        return 0.5 * _top_mean(d, len(d) // 10)  # _top_mean takes at least the maximum

    def congestion_grids(self) -> tuple[np.ndarray, np.ndarray]:
        """Horizontal and vertical congestion per congestion grid cell, (rows, cols) each."""
        cg = self.cgrid
        h = np.cumsum(self.h_diff.reshape(cg.rows, cg.cols + 1), axis=1)[:, : cg.cols]
        v = np.cumsum(self.v_diff.reshape(cg.cols, cg.rows + 1), axis=1)[:, : cg.rows].T
        if self.canvas.smooth_range:
            h = self._smooth_h @ h
            v = v @ self._smooth_v
        h = (h + self.h_macro) / self.h_tracks
        v = (v + self.v_macro) / self.v_tracks
        return h, v

    def congestion_cost(self) -> float:
        h, v = self.congestion_grids()
        both = np.concatenate([v.ravel(), h.ravel()])
        return _top_mean(both, max(math.floor(len(both) * 0.05), 1))

    def costs(self) -> Costs:
        """The costs of the current placement, from the incrementally kept state."""
        wl = self.wirelength()
        c = self.canvas
        wc = wl / ((c.width + c.height) * self.net_count)
        dc = self.density_cost()
        cc = self.congestion_cost()
        w = self.weights
        return Costs(wl, wc, dc, cc, w.wirelength * wc + w.density * dc + w.congestion * cc)

    def proxy(self) -> float:
        return self.costs().proxy

    # ---- incremental moves --------------------------------------------------------------

    def _node_data(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        got = self._cache.get(i)
        if got is None:
            nets = self._node_nets[self._node_net_ptr[i] : self._node_net_ptr[i + 1]]
            members, seg, starts = self._net_members(nets)
            got = (nets, members, seg, starts)
            if len(self._cache) < 4096:
                self._cache[i] = got
        return got

    def move(self, node: int, x: float, y: float, orientation: int | str | None = None) -> None:
        """Move ``node`` (a macro, port or standard cell) to centre ``(x, y)``, optionally
        re-orienting a hard macro, updating only what depends on it."""
        nl = self.netlist
        if nl.kind[node] not in (HARD_MACRO, SOFT_MACRO, PORT, STDCELL):
            raise NetlistError(f"node {node} ({nl.names[node]!r}) is a pin: move its macro")
        if not (abs(x) <= 1e12 and abs(y) <= 1e12):  # also false for NaN
            raise NetlistError(f"position ({x!r}, {y!r}) is not finite or past 1e12 µm")
        if isinstance(orientation, str):
            if orientation not in ORIENTATIONS:
                raise NetlistError(f"orientation {orientation!r} is not one of {ORIENTATIONS}")
            orientation = ORIENTATIONS.index(orientation)
        elif orientation is not None and not 0 <= orientation < len(ORIENTATIONS):
            raise NetlistError(f"orientation code {orientation} is not 0..{len(ORIENTATIONS) - 1}")
        nets, members, seg, starts = self._node_data(node)
        old_x, old_y = self.px[members], self.py[members]
        if self.has_area[node]:
            self._add_footprint(node, -1.0)
        self.x[node] = x
        self.y[node] = y
        if orientation is not None and nl.kind[node] == HARD_MACRO:
            self.orientation[node] = orientation
        pins = self._node_pins[self._node_pin_ptr[node] : self._node_pin_ptr[node + 1]]
        moved = np.append(pins, node)
        self.px[moved], self.py[moved] = self._pin_positions(moved)
        if self.has_area[node]:
            self._add_footprint(node, +1.0)
        if not len(nets):
            return
        new_x, new_y = self.px[members], self.py[members]
        hpwl = _hpwl(new_x, new_y, starts)
        # a running total: summing all nets' HPWL each move would cost more than the move
        self._wirelength += float(np.sum(self.hpwl_weight[nets] * (hpwl - self.net_hpwl[nets])))
        self.net_hpwl[nets] = hpwl
        # remove the old routes and add the new ones in one batch: old nets 0..k-1, new k..2k-1
        k, m = len(nets), len(members)
        w = self.route_weight[nets]
        self._route(
            np.concatenate([old_x, new_x]),
            np.concatenate([old_y, new_y]),
            np.concatenate([seg, seg + k]),
            np.concatenate([starts, starts + m]),
            np.concatenate([-w, w]),
        )

    def placement(self, base: Placement | None = None) -> Placement:
        """The current positions as a :class:`Placement` (header from ``base`` or the canvas)."""
        nl = self.netlist
        idx = nl.movable
        c = self.canvas
        p = Placement(
            columns=c.columns,
            rows=c.rows,
            width=c.width,
            height=c.height,
            hroutes_per_micron=c.hroutes_per_micron,
            vroutes_per_micron=c.vroutes_per_micron,
            hrouting_alloc=c.hrouting_alloc,
            vrouting_alloc=c.vrouting_alloc,
            smooth_range=c.smooth_range,
        )
        if base is not None:
            p.block, p.project, p.overlap_threshold = (
                base.block,
                base.project,
                base.overlap_threshold,
            )
        costs = self.costs()
        p.costs = {
            "Wirelength": costs.wirelength,
            "Wirelength cost": costs.wirelength_cost,
            "Congestion cost": costs.congestion_cost,
            "Density cost": costs.density_cost,
        }
        p.node_index = idx.astype(np.int64)
        p.x = self.x[idx].copy()
        p.y = self.y[idx].copy()
        p.orientation = [
            ORIENTATIONS[self.orientation[i]] if nl.kind[i] != PORT else "-" for i in idx
        ]
        p.fixed = nl.kind[idx] == PORT
        return p


def _smoothing(n: int, k: int) -> np.ndarray:
    """(n, n) matrix S with ``out = in @ S``: each cell's value spread evenly over the cells
    within ``k`` of it (clipped at the grid edge), as the evaluator's smoothing does."""
    i = np.arange(n)
    near = np.abs(i[:, None] - i[None, :]) <= k
    return near / near.sum(axis=1, keepdims=True)


def _top_mean(v: np.ndarray, k: int) -> float:
    """Mean of the ``k`` largest values of ``v``."""
    k = min(max(k, 1), len(v))
    return float(np.partition(v, len(v) - k)[len(v) - k :].sum() / k)


def _hpwl(px: np.ndarray, py: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Unweighted HPWL of consecutive nets starting at ``starts`` (each non-empty)."""
    if len(starts) == 0:
        return np.zeros(0)
    return (
        np.maximum.reduceat(px, starts)
        - np.minimum.reduceat(px, starts)
        + np.maximum.reduceat(py, starts)
        - np.minimum.reduceat(py, starts)
    )


Seg = tuple[np.ndarray, np.ndarray, np.ndarray]


def _route_three(cells: np.ndarray, cols: int, rows: int) -> list[tuple[Seg, Seg]]:
    """Routes of three-cell nets, vectorised: ``cells`` is (m, 3) of ``row * cols + col``.

    The evaluator's rules (MacroPlacement ``Docs/ProxyCost``), with the cells sorted by
    (column, row) as (r1, c1), (r2, c2), (r3, c3):

    * L: c1 < c2 < c3 and r2 strictly between r1 and r3 — horizontal r1: c1→c2 and r2: c2→c3,
      vertical c2: r1↔r2 and c3: r2↔r3;
    * c2 == c3, c1 < c2 and r1 below both — horizontal r1: c1→c2, vertical c2: r1→max(r2, r3);
    * r2 == r3 — horizontal r1: c1→c2 and r2: c2→c3, vertical c2: r1↔r2;
    * otherwise T: sorted by (row, column) as (R1, C1)..(R3, C3), horizontal along R2 across
      all columns, vertical C1: R1→R2 and C3: R2→R3.

    Returns two (horizontal, vertical) segment pairs per net; unused ones are empty (a→a).
    """
    r, c = np.divmod(cells, cols)
    by_col = np.sort(c * rows + r, axis=1)  # sort by (column, row)
    cs, rs = np.divmod(by_col, rows)
    by_row = np.sort(cells, axis=1)  # cells are row-major: sorting them sorts by (row, column)
    rt, ct = np.divmod(by_row, cols)
    r1, r2, r3 = rs.T
    c1, c2, c3 = cs.T
    R1, R2, R3 = rt.T
    C1, C3 = ct[:, 0], ct[:, 2]
    is_l = (c1 < c2) & (c2 < c3) & (np.minimum(r1, r3) < r2) & (np.maximum(r1, r3) > r2)
    is_b = ~is_l & (c2 == c3) & (c1 < c2) & (r1 < np.minimum(r2, r3))
    is_c = ~is_l & ~is_b & (r2 == r3)
    is_t = ~(is_l | is_b | is_c)
    lc = is_l | is_c
    # first pair: the first horizontal run and the first vertical run of each case
    h1 = (np.where(is_t, R2, r1), c1, np.where(is_t, c3, c2))  # sorted: c1, c3 are min, max
    v1_col = np.where(is_t, C1, c2)
    v1_a = np.where(is_t, R1, np.where(is_b, r1, np.minimum(r1, r2)))
    v1_b = np.where(is_t, R2, np.where(is_b, np.maximum(r2, r3), np.maximum(r1, r2)))
    # second pair: L and r2 == r3 have a second horizontal run; L and T a second vertical one
    h2 = (r2, np.where(lc, c2, 0), np.where(lc, c3, 0))
    v2_col = np.where(is_t, C3, c3)
    v2_a = np.where(is_t, R2, np.minimum(r2, r3))
    v2_b = np.where(is_l | is_t, np.where(is_t, R3, np.maximum(r2, r3)), v2_a)
    return [(h1, (v1_col, v1_a, v1_b)), (h2, (v2_col, v2_a, v2_b))]


def apply_placement(
    netlist: Netlist, placement: Placement
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions and orientations of ``netlist`` with ``placement`` applied (nodes it does not
    list keep the netlist's). A listed index that is not a macro, port or cell is an error."""
    nl = netlist
    idx = placement.node_index
    if len(idx):
        bad = idx[(idx >= nl.num_nodes)]
        if len(bad):
            raise NetlistError(
                f"placement places node {int(bad[0])}, but the netlist has {nl.num_nodes} nodes"
            )
        pins = idx[~np.isin(nl.kind[idx], (HARD_MACRO, SOFT_MACRO, PORT, STDCELL))]
        if len(pins):
            i = int(pins[0])
            raise NetlistError(f"placement places node {i} ({nl.names[i]!r}), which is a pin")
    x, y, o = nl.x.copy(), nl.y.copy(), nl.orientation.copy()
    x[idx] = placement.x
    y[idx] = placement.y
    for i, s in zip(idx.tolist(), placement.orientation, strict=True):
        if s != "-" and nl.kind[i] == HARD_MACRO:
            o[i] = ORIENTATIONS.index(s)
    return x, y, o
