"""Reader and writer for circuit-training placement files (``.plc``).

A ``.plc`` file (google-research/circuit_training, ``PlacementCost.save_placement``; Mirhoseini
et al. 2021, Nature) is a ``#`` comment header followed by one ``node_index x y orientation
fixed`` line per placed node. The header carries what the proxy cost needs besides the netlist:

* ``Columns : C  Rows : R`` — the placement grid;
* ``Width : W  Height : H`` — the canvas, in microns;
* ``Routes per micron, hor : h  ver : v`` — routing tracks per micron;
* ``Routes used by macros, hor : h  ver : v`` — tracks per micron a hard macro blocks;
* ``Smoothing factor : k`` — congestion smoothing range in grid cells;
* ``Overlap threshold : t``;
* and the costs the evaluator computed when it wrote the file (``Wirelength``, ``Wirelength
  cost``, ``Congestion cost``, ``Density cost``...), kept in :attr:`Placement.costs`.

``node_index`` counts the netlist's nodes in file order (``__metadata__`` left out); the
orientation is ``-`` for nodes without one (ports, soft macros in some files); ``fixed`` is 0 or 1.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from actorq.chip.netlist import ORIENTATIONS, read_text
from actorq.errors import NetlistError

_PAIRS = {
    "grid": re.compile(r"Columns\s*:\s*(\S+)\s+Rows\s*:\s*(\S+)"),
    "canvas": re.compile(r"Width\s*:\s*(\S+)\s+Height\s*:\s*(\S+)"),
    "routes": re.compile(r"Routes per micron,\s*hor\s*:\s*(\S+)\s+ver\s*:\s*(\S+)"),
    "macro_routes": re.compile(r"Routes used by macros,\s*hor\s*:\s*(\S+)\s+ver\s*:\s*(\S+)"),
}
_SINGLE = {
    "smooth_range": re.compile(r"Smoothing factor\s*:\s*(\S+)"),
    "overlap_threshold": re.compile(r"Overlap threshold\s*:\s*(\S+)"),
}
_COST = re.compile(
    r"(Wirelength cost|Wirelength|Congestion cost|Density cost|Proxy cost|Fake net cost"
    r"|Area(?: \([^)]*\))?)"
    r"\s*:\s*(\S+)\s*\Z"
)
_TEXT = re.compile(r"(Block|Project)\s*:\s*(.*?)\s*\Z")
MAX_GRID = 1000
"""Most columns or rows a grid may have (circuit-training uses tens to ~128): bounds the memory
of the cost grids."""
MIN_SIZE = 1e-3
"""Smallest canvas side (µm) and routes per micron accepted: with coordinates up to 1e12 µm,
grid indices and congestion values stay finite and fit an int64."""


@dataclass
class Placement:
    """A ``.plc`` file: header parameters plus one entry per placed node.

    ``orientation`` holds ``"-"`` where the file gives none. Costs read from the header are
    kept verbatim in ``costs`` (keys as in the file: ``"Wirelength cost"``...).
    """

    columns: int = 10
    rows: int = 10
    width: float = 0.0
    height: float = 0.0
    hroutes_per_micron: float = 0.0
    vroutes_per_micron: float = 0.0
    hrouting_alloc: float = 0.0
    vrouting_alloc: float = 0.0
    smooth_range: int = 0
    overlap_threshold: float = 0.0
    block: str = ""
    project: str = ""
    costs: dict[str, float] = field(default_factory=dict)
    node_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    x: np.ndarray = field(default_factory=lambda: np.zeros(0))
    y: np.ndarray = field(default_factory=lambda: np.zeros(0))
    orientation: list[str] = field(default_factory=list)
    fixed: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


def _num(tok: str, where: str, line: int, what: str, *, positive: bool = False) -> float:
    try:
        v = float(tok)
    except ValueError:
        raise NetlistError(f"{where}:{line}: {what} {tok[:30]!r} is not a number") from None
    if not math.isfinite(v) or abs(v) > 1e12 or v < 0 or (positive and v < MIN_SIZE):
        need = f">= {MIN_SIZE:g}" if positive else ">= 0"
        raise NetlistError(f"{where}:{line}: {what} {tok[:30]!r} out of range (finite, {need})")
    return v


def _count(tok: str, where: str, line: int, what: str) -> int:
    v = _num(tok, where, line, what, positive=True)
    if v != int(v) or v > MAX_GRID:
        raise NetlistError(f"{where}:{line}: {what} must be an integer 1..{MAX_GRID}")
    return int(v)


def parse_plc(text: str, where: str = "placement") -> Placement:
    """Parse ``.plc`` text; :class:`NetlistError` naming ``where:line`` for bad input."""
    p = Placement()
    idx: list[int] = []
    xs: list[float] = []
    ys: list[float] = []
    ors: list[str] = []
    fixed: list[bool] = []
    seen: set[int] = set()
    for lineno, raw in enumerate(text.split("\n"), 1):
        s = raw.strip()
        if not s:
            continue
        if s[0] == "#":
            _header_line(p, s[1:].strip(), where, lineno)
            continue
        f = s.split()
        if len(f) != 5:
            raise NetlistError(
                f"{where}:{lineno}: expected 'node_index x y orientation fixed', "
                f"got {len(f)} fields"
            )
        try:
            i = int(f[0])
        except ValueError:
            raise NetlistError(
                f"{where}:{lineno}: node index {f[0][:30]!r} is not an integer"
            ) from None
        if not 0 <= i < 2**31:
            raise NetlistError(f"{where}:{lineno}: node index {i} out of range")
        if i in seen:
            raise NetlistError(f"{where}:{lineno}: node {i} placed twice")
        seen.add(i)
        xv = _coord(f[1], where, lineno, "x")
        yv = _coord(f[2], where, lineno, "y")
        if f[3] != "-" and f[3] not in ORIENTATIONS:
            raise NetlistError(
                f"{where}:{lineno}: orientation {f[3][:30]!r} is not '-' or one of "
                f"{', '.join(ORIENTATIONS)}"
            )
        if f[4] not in ("0", "1"):
            raise NetlistError(f"{where}:{lineno}: fixed must be 0 or 1, got {f[4][:30]!r}")
        idx.append(i)
        xs.append(xv)
        ys.append(yv)
        ors.append(f[3])
        fixed.append(f[4] == "1")
    p.node_index = np.asarray(idx, np.int64)
    p.x = np.asarray(xs, np.float64)
    p.y = np.asarray(ys, np.float64)
    p.orientation = ors
    p.fixed = np.asarray(fixed, bool)
    return p


def _coord(tok: str, where: str, line: int, what: str) -> float:
    try:
        v = float(tok)
    except ValueError:
        raise NetlistError(f"{where}:{line}: {what} {tok[:30]!r} is not a number") from None
    if not math.isfinite(v) or abs(v) > 1e12:
        raise NetlistError(f"{where}:{line}: {what} {tok[:30]!r} out of range")
    return v


def _header_line(p: Placement, s: str, where: str, line: int) -> None:
    for key, rx in _PAIRS.items():
        m = rx.search(s)
        if m is None:
            continue
        a, b = m.group(1), m.group(2)
        if key == "grid":
            p.columns = _count(a, where, line, "Columns")
            p.rows = _count(b, where, line, "Rows")
        elif key == "canvas":
            p.width = _num(a, where, line, "Width", positive=True)
            p.height = _num(b, where, line, "Height", positive=True)
        elif key == "routes":
            p.hroutes_per_micron = _num(a, where, line, "routes per micron", positive=True)
            p.vroutes_per_micron = _num(b, where, line, "routes per micron", positive=True)
        else:
            p.hrouting_alloc = _num(a, where, line, "routes used by macros")
            p.vrouting_alloc = _num(b, where, line, "routes used by macros")
        return
    m = _SINGLE["smooth_range"].search(s)
    if m:
        v = _num(m.group(1), where, line, "Smoothing factor")
        if v > MAX_GRID:
            raise NetlistError(f"{where}:{line}: Smoothing factor must be at most {MAX_GRID}")
        p.smooth_range = int(v)  # the evaluator uses whole grid cells (floor)
        return
    m = _SINGLE["overlap_threshold"].search(s)
    if m:
        p.overlap_threshold = _num(m.group(1), where, line, "Overlap threshold")
        return
    m = _COST.match(s)
    if m:
        try:
            v = float(m.group(2))
        except ValueError:
            return  # a cost is informative only: an odd one is left out, not an error
        if math.isfinite(v):
            p.costs[m.group(1)] = v
        return
    m = _TEXT.match(s)
    if m:
        if m.group(1) == "Block":
            p.block = m.group(2)
        else:
            p.project = m.group(2)


def load_plc(path: str | Path) -> Placement:
    """Read a ``.plc`` file (plain or ``.gz``)."""
    p = Path(path)
    where = str(p) if str(p).isprintable() else repr(str(p))
    return parse_plc(read_text(p), where=where)


def format_plc(p: Placement, comment: str = "") -> str:
    """``.plc`` text for ``p`` in circuit-training's layout (header, then one line per node).

    Coordinates are written with ``repr`` precision, so reading the text back gives ``p``.
    """
    out = ["# Placement file for Circuit Training (written by actorq.chip)"]
    out += [f"# {c}" for c in comment.splitlines()]
    out += [
        f"# Columns : {p.columns}  Rows : {p.rows}",
        f"# Width : {p.width!r}  Height : {p.height!r}",
    ]
    for k, v in p.costs.items():
        out.append(f"# {k} : {v!r}")
    if p.project:
        out.append(f"# Project : {p.project}")
    if p.block:
        out.append(f"# Block : {p.block}")
    out += [
        f"# Routes per micron, hor : {p.hroutes_per_micron!r}  ver : {p.vroutes_per_micron!r}",
        f"# Routes used by macros, hor : {p.hrouting_alloc!r}  ver : {p.vrouting_alloc!r}",
        f"# Smoothing factor : {p.smooth_range}",
        f"# Overlap threshold : {p.overlap_threshold!r}",
        "#",
        "# node_index x y orientation fixed",
    ]
    for i, x, y, o, f in zip(
        p.node_index.tolist(),
        p.x.tolist(),
        p.y.tolist(),
        p.orientation,
        p.fixed.tolist(),
        strict=True,
    ):
        out.append(f"{i} {x!r} {y!r} {o} {int(f)}")
    return "\n".join(out) + "\n"


def save_plc(p: Placement, path: str | Path, comment: str = "") -> None:
    """Write ``p`` to ``path`` (see :func:`format_plc`)."""
    Path(path).write_text(format_plc(p, comment))
