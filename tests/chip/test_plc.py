"""The .plc placement reader and writer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from actorq.chip.netlist import netlist_dir
from actorq.chip.plc import Placement, format_plc, load_plc, parse_plc, save_plc
from actorq.errors import NetlistError


def test_ariane_header() -> None:
    p = load_plc(netlist_dir("ariane133") / "initial.plc")
    assert (p.columns, p.rows) == (24, 21)
    assert p.width == p.height == 1433.406
    assert (p.hroutes_per_micron, p.vroutes_per_micron) == (57.031, 56.818)
    assert (p.hrouting_alloc, p.vrouting_alloc) == (39.583, 30.303)
    assert p.smooth_range == 0 and p.block == "unset_block" and p.project == "unset_project"
    assert p.costs["Wirelength"] == 3219216.090
    assert p.costs["Wirelength cost"] == 0.0497
    assert p.costs["Congestion cost"] == 0.7128
    assert p.costs["Density cost"] == 0.6067
    # 495 ports + 133 hard + 782 soft macros, in node order
    assert len(p.node_index) == 1410 and p.node_index[0] == 0
    assert p.orientation[0] == "-" and p.fixed[0]
    assert set(p.orientation[495:]) <= {"N", "S"}


def test_small_headers() -> None:
    p = load_plc(netlist_dir("macro_tiles_10x10") / "initial.plc")
    assert (p.columns, p.rows, p.smooth_range, p.overlap_threshold) == (20, 20, 2, 0.004)
    assert len(p.node_index) == 100
    # toy_macro_stdcell's .plc has a header only, without a final newline
    t = load_plc(netlist_dir("toy_macro_stdcell") / "initial.plc")
    assert (t.columns, t.rows, t.width, t.height) == (20, 10, 200.0, 100.0)
    assert len(t.node_index) == 0


def test_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 50
    p = Placement(
        columns=7,
        rows=9,
        width=123.456789,
        height=98.7654321,
        hroutes_per_micron=11.285,
        vroutes_per_micron=12.605,
        hrouting_alloc=7.143,
        vrouting_alloc=8.339,
        smooth_range=2,
        overlap_threshold=0.004,
        block="blk",
        project="proj",
        costs={"Wirelength cost": 0.1234, "Density cost": 0.5},
        node_index=rng.permutation(1000)[:n].astype(np.int64),
        x=rng.uniform(-10, 200, n),
        y=rng.uniform(0, 100, n) / 3,
        orientation=[str(o) for o in rng.choice(["-", "N", "FN", "S", "FS", "E", "W"], n)],
        fixed=rng.random(n) < 0.5,
    )
    save_plc(p, tmp_path / "p.plc", comment="two\nlines")
    q = load_plc(tmp_path / "p.plc")
    _same(p, q)
    assert format_plc(q) == format_plc(p)


def _same(a: Placement, b: Placement) -> None:
    for f in a.__dataclass_fields__:
        va, vb = getattr(a, f), getattr(b, f)
        ok = np.array_equal(va, vb) if isinstance(va, np.ndarray) else va == vb
        assert ok, f


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("0 1 2 N\n", "expected 'node_index x y orientation fixed'"),
        ("a 1 2 N 0\n", "not an integer"),
        ("0 1 2 N 0\n0 3 4 N 0\n", "placed twice"),
        ("0 nan 2 N 0\n", "out of range"),
        ("0 1 inf N 0\n", "out of range"),
        ("0 1 2 R90 0\n", "orientation"),
        ("0 1 2 N 2\n", "fixed must be 0 or 1"),
        ("-1 1 2 N 0\n", "out of range"),
        ("# Columns : 0  Rows : 3\n", "Columns '0' out of range"),
        ("# Columns : 2.5  Rows : 3\n", "Columns must be an integer"),
        ("# Width : -1  Height : 3\n", "Width"),
        ("# Routes per micron, hor : nan  ver : 3\n", "routes per micron"),
        ("# Smoothing factor : -1\n", "Smoothing factor"),
    ],
)
def test_bad_plc(text: str, needle: str) -> None:
    with pytest.raises(NetlistError) as e:
        parse_plc(text, where="x.plc")
    assert needle in str(e.value) and str(e.value).startswith("x.plc:")
    assert "\n" not in str(e.value)
