"""Synthetic netlists and a slow, loop-by-loop reference of the proxy cost, for the chip tests.

The reference follows the written definitions (circuit_training docs, MacroPlacement
``Docs/ProxyCost``) one net and one grid cell at a time, with none of the vectorisation of
:mod:`actorq.chip.cost`, so the two can be compared on random netlists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from actorq.chip.cost import Canvas
from actorq.chip.netlist import (
    HARD_MACRO,
    HARD_PIN,
    ORIENT_MATRIX,
    ORIENTATIONS,
    SOFT_MACRO,
    STDCELL,
    Netlist,
)


def node_text(name: str, inputs: Sequence[str] = (), **attrs: Any) -> str:
    """One ``node { ... }`` block; string attrs become placeholders, numbers ``f:``."""
    out = ["node {", f'  name: "{name}"']
    out += [f'  input: "{s}"' for s in inputs]
    for k, v in attrs.items():
        val = f'placeholder: "{v}"' if isinstance(v, str) else f"f: {v!r}"
        out += ["  attr {", f'    key: "{k}"', "    value {", f"      {val}", "    }", "  }"]
    return "\n".join([*out, "}"])


def random_netlist_text(rng: np.random.Generator, width: float, height: float) -> str:
    """A random netlist on a ``width`` × ``height`` canvas: hard macros (random orientations,
    1-4 pins), soft macros (weighted pins), ports, standard cells, and nets of 2-8 pins, some
    nodes placed partly or wholly off the canvas."""
    blocks: list[str] = []
    drivers: list[str] = []
    n_hard, n_soft, n_port, n_cell = (int(v) for v in rng.integers(1, 6, 4))
    pins_of: dict[str, list[str]] = {}
    for i in range(n_hard + n_soft):
        hard = i < n_hard
        name = f"M{i}" if hard else f"Grp_{i}"
        w, h = rng.uniform(1, width / 2), rng.uniform(1, height / 2)
        x, y = rng.uniform(-0.1 * width, 1.1 * width), rng.uniform(-0.1 * height, 1.1 * height)
        attrs: dict[str, Any] = {
            "type": "MACRO" if hard else "macro",
            "width": float(w),
            "height": float(h),
            "x": float(x),
            "y": float(y),
        }
        if hard:
            attrs["orientation"] = ORIENTATIONS[int(rng.integers(8))]
        blocks.append(node_text(name, **attrs))
        pins_of[name] = []
        for p in range(int(rng.integers(1, 5))):
            pname = f"{name}/P{p}"
            pins_of[name].append(pname)
            drivers.append(pname)
    for i in range(n_port):
        drivers.append(f"port{i}")
    for i in range(n_cell):
        drivers.append(f"cell{i}")
    # nets: each driver drives 0-7 other nodes
    sinks: dict[str, list[str]] = {}
    for d in drivers:
        k = int(rng.integers(0, 8))
        others = [s for s in drivers if s != d]
        sinks[d] = [str(s) for s in rng.choice(others, size=min(k, len(others)), replace=False)]
    for macro, pins in pins_of.items():
        hard = macro.startswith("M")
        for pname in pins:
            attrs = {
                "macro_name": macro,
                "type": "MACRO_PIN" if hard else "macro_pin",
                "x_offset": float(rng.uniform(-5, 5)),
                "y_offset": float(rng.uniform(-5, 5)),
            }
            if rng.random() < 0.3:
                attrs["weight"] = float(rng.integers(1, 5))
            blocks.append(node_text(pname, sinks[pname], **attrs))
    for i in range(n_port):
        name = f"port{i}"
        blocks.append(
            node_text(
                name,
                sinks[name],
                type="PORT",
                side="LEFT",
                x=float(rng.uniform(0, width)),
                y=float(rng.uniform(0, height)),
            )
        )
    for i in range(n_cell):
        name = f"cell{i}"
        blocks.append(
            node_text(
                name,
                sinks[name],
                type="STDCELL",
                width=float(rng.uniform(0.5, 3)),
                height=float(rng.uniform(0.5, 3)),
                x=float(rng.uniform(0, width)),
                y=float(rng.uniform(0, height)),
            )
        )
    order = rng.permutation(len(blocks))
    return "\n".join(blocks[i] for i in order) + "\n"


def reference_costs(
    nl: Netlist, c: Canvas, x: np.ndarray, y: np.ndarray, orient: np.ndarray
) -> dict[str, Any]:
    """Wirelength (raw, cost), density cost and congestion cost, one thing at a time."""
    n = nl.num_nodes
    px, py = np.zeros(n), np.zeros(n)
    for i in range(n):
        p = int(nl.parent[i])
        dx = dy = 0.0
        if nl.kind[i] == HARD_PIN:
            a, b, cc, d = ORIENT_MATRIX[orient[p]]
            dx = a * nl.x_offset[i] + b * nl.y_offset[i]
            dy = cc * nl.x_offset[i] + d * nl.y_offset[i]
        px[i], py[i] = x[p] + dx, y[p] + dy
    # routing and macro blockage on the congestion grid, density on the placement grid
    cols, rows = c.congestion_grid
    gw, gh = c.width / cols, c.height / rows

    wl = 0.0
    count = 0.0
    H = np.zeros((rows, cols))
    V = np.zeros((rows, cols))

    def hrun(r: int, a: int, b: int, w: float) -> None:
        for col in range(a, b):
            H[r, col] += w

    def vrun(col: int, a: int, b: int, w: float) -> None:
        for r in range(a, b):
            V[r, col] += w

    def cell(i: int) -> tuple[int, int]:
        r = min(max(math.floor(py[i] / gh), 0), rows - 1)
        k = min(max(math.floor(px[i] / gw), 0), cols - 1)
        return r, k

    def two(src: tuple[int, int], snk: tuple[int, int], w: float) -> None:
        hrun(src[0], min(src[1], snk[1]), max(src[1], snk[1]), w)
        vrun(snk[1], min(src[0], snk[0]), max(src[0], snk[0]), w)

    for k in range(nl.num_nets):
        m = nl.net_nodes[nl.net_ptr[k] : nl.net_ptr[k + 1]]
        w = float(nl.weight[m[0]])
        wl += w * (px[m].max() - px[m].min() + py[m].max() - py[m].min())
        count += w
        if any(not (0 <= px[j] <= c.width and 0 <= py[j] <= c.height) for j in m):
            continue
        rw = max(w, 1.0)
        src = cell(int(m[0]))
        cells = sorted({cell(int(j)) for j in m})
        if len(cells) == 2 or len(cells) > 3:
            for s in cells:
                if s != src:
                    two(src, s, rw)
        elif len(cells) == 3:
            (r1, c1), (r2, c2), (r3, c3) = sorted(cells, key=lambda rc: (rc[1], rc[0]))
            if c1 < c2 < c3 and min(r1, r3) < r2 < max(r1, r3):
                hrun(r1, c1, c2, rw)
                hrun(r2, c2, c3, rw)
                vrun(c2, min(r1, r2), max(r1, r2), rw)
                vrun(c3, min(r2, r3), max(r2, r3), rw)
            elif c2 == c3 and c1 < c2 and r1 < min(r2, r3):
                hrun(r1, c1, c2, rw)
                vrun(c2, r1, max(r2, r3), rw)
            elif r2 == r3:
                hrun(r1, c1, c2, rw)
                hrun(r2, c2, c3, rw)
                vrun(c2, min(r1, r2), max(r1, r2), rw)
            else:
                (R1, C1), (R2, _), (R3, C3) = sorted(cells)
                hrun(R2, min(c1, c2, c3), max(c1, c2, c3), rw)
                vrun(C1, R1, R2, rw)
                vrun(C3, R2, R3, rw)
    H /= gh * c.hroutes_per_micron
    V /= gw * c.vroutes_per_micron
    # smoothing: V along its row, H along its column
    k = c.smooth_range
    Hs, Vs = np.zeros_like(H), np.zeros_like(V)
    for r in range(rows):
        for col in range(cols):
            lo, hi = max(col - k, 0), min(col + k, cols - 1)
            for t in range(lo, hi + 1):
                Vs[r, t] += V[r, col] / (hi - lo + 1)
            lo, hi = max(r - k, 0), min(r + k, rows - 1)
            for t in range(lo, hi + 1):
                Hs[t, col] += H[r, col] / (hi - lo + 1)

    dw, dh = c.width / c.columns, c.height / c.rows
    occ = np.zeros((c.rows, c.columns))
    Hm, Vm = np.zeros((rows, cols)), np.zeros((rows, cols))
    for i in range(n):
        if nl.kind[i] not in (HARD_MACRO, SOFT_MACRO, STDCELL):
            continue
        x0, x1 = x[i] - nl.width[i] / 2, x[i] + nl.width[i] / 2
        y0, y1 = y[i] - nl.height[i] / 2, y[i] + nl.height[i] / 2
        for r in range(c.rows):
            for col in range(c.columns):
                ox = min(x1, (col + 1) * dw) - max(x0, col * dw)
                oy = min(y1, (r + 1) * dh) - max(y0, r * dh)
                if ox > 0 and oy > 0:
                    occ[r, col] += ox * oy
        if nl.kind[i] != HARD_MACRO:
            continue
        c0 = min(max(math.floor(x0 / gw), 0), cols - 1)
        c1 = min(max(math.floor(x1 / gw), 0), cols - 1)
        r0 = min(max(math.floor(y0 / gh), 0), rows - 1)
        r1 = min(max(math.floor(y1 / gh), 0), rows - 1)
        if x1 < 0 or y1 < 0 or x0 >= c.width or y0 >= c.height:
            continue
        part_v = part_h = False
        hm, vm = np.zeros((rows, cols)), np.zeros((rows, cols))
        for r in range(r0, r1 + 1):
            for col in range(c0, c1 + 1):
                ox = min(x1, (col + 1) * gw) - max(x0, col * gw)
                oy = min(y1, (r + 1) * gh) - max(y0, r * gh)
                if not (ox > 0 and oy > 0):
                    ox = oy = 0.0
                if r1 != r0 and r in (r0, r1) and abs(oy - gh) > 1e-5:
                    part_v = True
                if c1 != c0 and col in (c0, c1) and abs(ox - gw) > 1e-5:
                    part_h = True
                vm[r, col] += ox * c.vrouting_alloc
                hm[r, col] += oy * c.hrouting_alloc
        if part_v:
            vm[r1, :] = 0.0
        if part_h:
            hm[:, c1] = 0.0
        Hm += hm
        Vm += vm
    Hs += Hm / (gh * c.hroutes_per_micron)
    Vs += Vm / (gw * c.vroutes_per_micron)

    dens = sorted((occ / (dw * dh)).ravel(), reverse=True)
    kd = max(len(dens) // 10, 1)
    cong = sorted(list(Vs.ravel()) + list(Hs.ravel()), reverse=True)
    kc = max(math.floor(len(cong) * 0.05), 1)
    return {
        "wirelength": wl,
        "wirelength_cost": wl / ((c.width + c.height) * (count or 1.0)),
        "density_cost": 0.5 * sum(dens[:kd]) / kd,
        "congestion_cost": sum(cong[:kc]) / kc,
        "H": Hs,
        "V": Vs,
    }
