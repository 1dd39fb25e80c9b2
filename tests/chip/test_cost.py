"""The proxy cost: Google's numbers on Ariane133 and macro_tiles_10x10, a hand-computed case,
a slow reference on random netlists, and incremental moves against full re-evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from actorq.chip.cost import Canvas, CostWeights, PlacementCost, apply_placement
from actorq.chip.netlist import (
    HARD_MACRO,
    ORIENTATIONS,
    PORT,
    SOFT_MACRO,
    STDCELL,
    get_netlist,
    netlist_dir,
    parse_netlist,
)
from actorq.chip.plc import Placement, load_plc, save_plc
from actorq.errors import NetlistError

from .synth import node_text, random_netlist_text, reference_costs


@pytest.fixture(scope="module")
def ariane() -> PlacementCost:
    nl = get_netlist("ariane133")
    return PlacementCost.from_placement(nl, load_plc(netlist_dir("ariane133") / "initial.plc"))


@pytest.mark.parametrize("plc", ["initial.plc", "legalized.plc"])
def test_ariane133_reproduces_googles_header(plc: str) -> None:
    """The headers were written by Google's evaluator (plc_wrapper_main) for these placements;
    they print costs to 4 decimals, wirelength to 3."""
    nl = get_netlist("ariane133")
    p = load_plc(netlist_dir("ariane133") / plc)
    c = PlacementCost.from_placement(nl, p).costs()
    h = p.costs
    assert c.wirelength == pytest.approx(h["Wirelength"], rel=1e-6)
    assert abs(c.wirelength_cost - h["Wirelength cost"]) < 1e-4
    assert abs(c.density_cost - h["Density cost"]) < 1e-4
    assert abs(c.congestion_cost - h["Congestion cost"]) < 1e-4
    assert c.proxy == pytest.approx(c.wirelength_cost + 0.5 * (c.density_cost + c.congestion_cost))


def test_macro_tiles_matches_circuit_trainings_own_test() -> None:
    """circuit_training's plc_client_test loads macro_tiles_10x10 without a .plc and expects
    these values from Google's evaluator (its default canvas: 60 % utilisation, 10×10 grid)."""
    nl = get_netlist("macro_tiles_10x10")
    c = PlacementCost(nl).costs()
    assert nl.area() == 250000
    assert c.wirelength == 5400
    assert c.wirelength_cost == pytest.approx(0.007745966692414834, abs=1e-12)
    assert c.density_cost == pytest.approx(0.3570806661517036, abs=1e-12)


def test_small_netlists_initial_costs() -> None:
    # sample_clustered's header (2×2 grid) says density 0.2305: the densest cell's density,
    # written by an older evaluator before the 0.5 factor (Ariane's 2022 header has it)
    nl = get_netlist("sample_clustered")
    p = load_plc(netlist_dir("sample_clustered") / "initial.plc")
    c = PlacementCost.from_placement(nl, p).costs()
    assert abs(2 * c.density_cost - p.costs["Density cost"]) < 1e-4
    # M0 (120×120) and Grp_2 (0.206×17.13) share the top-left 250×250 cell
    assert 2 * c.density_cost == pytest.approx((14400 + 0.20625865 * 17.128008) / 62500)
    # toy_macro_stdcell: header without costs; every cost finite and positive
    nl = get_netlist("toy_macro_stdcell")
    c = PlacementCost.from_placement(nl, load_plc(netlist_dir(nl.name) / "initial.plc")).costs()
    assert 0 < c.wirelength_cost < 1 and c.density_cost > 0 and c.congestion_cost > 0


def _two_macros(orient_a: str = "N") -> PlacementCost:
    text = "\n".join(
        [
            node_text(
                "A", type="MACRO", width=20.0, height=10.0, x=25.0, y=25.0, orientation=orient_a
            ),
            node_text("B", type="MACRO", width=10.0, height=10.0, x=75.0, y=75.0),
            node_text("A/p", ["B/p"], type="MACRO_PIN", macro_name="A", x_offset=5.0, y_offset=0.0),
            node_text("B/p", type="MACRO_PIN", macro_name="B", x_offset=0.0, y_offset=-5.0),
        ]
    )
    canvas = Canvas(100.0, 100.0, columns=2, rows=2, hrouting_alloc=10.0, vrouting_alloc=5.0)
    return PlacementCost(parse_netlist(text), canvas)


def test_two_macros_one_net_by_hand() -> None:
    pc = _two_macros()
    c = pc.costs()
    # pins at (30, 25) and (75, 70): HPWL 45 + 45, over (W + H) × 1 net
    assert c.wirelength == 90.0
    assert c.wirelength_cost == pytest.approx(90 / 200)
    # 4 cells -> top 1 (at least one): A's 200 µm² in a 2500 µm² cell, × 0.5
    assert np.allclose(pc.density_grid(), [[0.08, 0.0], [0.0, 0.04]])
    assert c.density_cost == pytest.approx(0.04)
    # net: cell (0,0) -> (1,1): H in (0,0), V in (0,1); 1 track/µm × 50 µm per cell
    # macros: A blocks 10 µm × 10 tracks (H) and 20 µm × 5 (V) of cell (0,0); B 10×10, 10×5
    h, v = pc.congestion_grids()
    assert np.allclose(h, [[2.0 + 0.02, 0.0], [0.0, 2.0]])
    assert np.allclose(v, [[2.0, 0.02], [0.0, 1.0]])
    assert c.congestion_cost == pytest.approx(2.02)  # 8 values -> the top one
    assert c.proxy == pytest.approx(0.45 + 0.5 * 0.04 + 0.5 * 2.02)


def test_orientation_turns_pin_offsets() -> None:
    # FN mirrors x: A's pin moves from (30, 25) to (20, 25)
    assert _two_macros("FN").costs().wirelength == 100.0
    pc = _two_macros()
    pc.move(0, 25.0, 25.0, "FN")
    assert pc.costs().wirelength == 100.0
    pc.move(0, 25.0, 25.0, "E")  # E: (dx, dy) -> (dy, -dx): pin at (25, 20)
    assert pc.costs().wirelength == pytest.approx(50 + 50)
    assert pc.costs() == pc.full_costs()


def _random_case(seed: int) -> tuple[PlacementCost, Canvas]:
    rng = np.random.default_rng(seed)
    w, h = rng.uniform(50, 200, 2)
    nl = parse_netlist(random_netlist_text(rng, float(w), float(h)))
    canvas = Canvas(
        float(w),
        float(h),
        columns=int(rng.integers(1, 9)),
        rows=int(rng.integers(1, 9)),
        hroutes_per_micron=float(rng.uniform(0.5, 3)),
        vroutes_per_micron=float(rng.uniform(0.5, 3)),
        hrouting_alloc=float(rng.uniform(0, 2)),
        vrouting_alloc=float(rng.uniform(0, 2)),
        smooth_range=int(rng.integers(0, 3)),
        # a separate congestion grid in a third of the cases (circuit_training's newer default)
        congestion_columns=int(rng.integers(1, 9)) if seed % 3 == 2 else None,
        congestion_rows=int(rng.integers(1, 9)) if seed % 3 == 2 else None,
    )
    return PlacementCost(nl, canvas), canvas


@pytest.mark.parametrize("seed", range(40))
def test_matches_slow_reference_on_random_netlists(seed: int) -> None:
    pc, canvas = _random_case(seed)
    ref = reference_costs(pc.netlist, canvas, pc.x, pc.y, pc.orientation)
    c = pc.costs()
    h, v = pc.congestion_grids()
    assert np.allclose(h, ref["H"]) and np.allclose(v, ref["V"])
    for k in ("wirelength", "wirelength_cost", "density_cost", "congestion_cost"):
        assert getattr(c, k) == pytest.approx(ref[k], rel=1e-9, abs=1e-12), k


def test_grid_aligned_macros_match_reference() -> None:
    """Macros whose edges sit exactly on grid lines: the partial-overlap rule's corner cases."""
    rng = np.random.default_rng(7)
    text = "\n".join(
        node_text(f"M{i}", type="MACRO", width=float(w), height=float(h), x=float(x), y=float(y))
        for i, (w, h, x, y) in enumerate(
            [
                (20, 20, 10, 10),
                (40, 20, 40, 30),
                (20, 60, 70, 50),
                (10, 10, 15, 95),
                (50, 50, 50, 50),
            ]
        )
    )
    nl = parse_netlist(text)
    for cols, rows in [(5, 5), (10, 10), (4, 2), (1, 1)]:
        canvas = Canvas(100.0, 100.0, cols, rows, 1.0, 2.0, 3.0, 4.0, int(rng.integers(0, 3)))
        pc = PlacementCost(nl, canvas)
        ref = reference_costs(nl, canvas, pc.x, pc.y, pc.orientation)
        h, v = pc.congestion_grids()
        assert np.allclose(h, ref["H"]) and np.allclose(v, ref["V"])


@pytest.mark.parametrize("seed", range(15))
def test_incremental_moves_agree_with_full_evaluation_small(seed: int) -> None:
    pc, canvas = _random_case(seed)
    rng = np.random.default_rng(seed + 100)
    nl = pc.netlist
    movable = nl.movable
    for step in range(60):
        i = int(rng.choice(movable))
        x = float(rng.uniform(-0.2, 1.2) * canvas.width)
        y = float(rng.uniform(-0.2, 1.2) * canvas.height)
        pc.move(i, x, y, int(rng.integers(8)))
        if step % 15 == 14:
            inc = pc.costs()
            ref = reference_costs(nl, canvas, pc.x, pc.y, pc.orientation)
            assert inc.wirelength == pytest.approx(ref["wirelength"], rel=1e-9)
            assert inc.density_cost == pytest.approx(ref["density_cost"], rel=1e-9, abs=1e-12)
            assert inc.congestion_cost == pytest.approx(ref["congestion_cost"], rel=1e-9)
    # only hard macros turn
    assert np.all(pc.orientation[nl.kind != HARD_MACRO] == 0)


def test_incremental_moves_agree_with_full_evaluation_ariane(ariane: PlacementCost) -> None:
    nl = ariane.netlist
    rng = np.random.default_rng(1)
    x0, y0, o0 = ariane.x.copy(), ariane.y.copy(), ariane.orientation.copy()
    nodes = np.concatenate([nl.hard_macros, nl.soft_macros, nl.indices(PORT)])
    w = ariane.canvas.width
    for step in range(400):
        i = int(rng.choice(nodes))
        ariane.move(i, float(rng.uniform(0, w)), float(rng.uniform(0, w)), int(rng.integers(4)))
        if step % 100 == 99:
            inc = ariane.costs()
            full = PlacementCost(nl, ariane.canvas, None, ariane.x, ariane.y, ariane.orientation)
            ref = full.costs()
            assert inc.wirelength == pytest.approx(ref.wirelength, rel=1e-12)
            for k in ("density_cost", "congestion_cost", "proxy"):
                assert getattr(inc, k) == pytest.approx(getattr(ref, k), rel=1e-9), k
    # moving everything back restores the original costs
    for i in nodes:
        ariane.move(int(i), float(x0[i]), float(y0[i]), int(o0[i]))
    assert ariane.costs().congestion_cost == pytest.approx(0.7127769489, abs=1e-9)


def test_placement_round_trip_keeps_costs(tmp_path: Path) -> None:
    pc, _ = _random_case(3)
    rng = np.random.default_rng(0)
    for i in pc.netlist.indices(HARD_MACRO, SOFT_MACRO, STDCELL):
        pc.move(int(i), float(rng.uniform(0, 50)), float(rng.uniform(0, 50)))
    save_plc(pc.placement(), tmp_path / "p.plc")
    again = PlacementCost.from_placement(pc.netlist, load_plc(tmp_path / "p.plc"))
    a, b = again.costs(), pc.costs()
    for k in ("wirelength", "density_cost", "congestion_cost", "proxy"):
        assert getattr(a, k) == pytest.approx(getattr(b, k), rel=1e-12), k


def test_weights_and_errors() -> None:
    pc = _two_macros()
    c = pc.costs()
    w = PlacementCost(pc.netlist, pc.canvas, CostWeights(2.0, 1.0, 0.0)).costs()
    assert w.proxy == pytest.approx(2 * c.wirelength_cost + c.density_cost)
    with pytest.raises(NetlistError, match="is a pin"):
        pc.move(2, 1.0, 1.0)
    with pytest.raises(NetlistError, match="not finite or past"):
        pc.move(0, float("nan"), 1.0)
    with pytest.raises(NetlistError, match="orientation 'R90'"):
        pc.move(0, 1.0, 1.0, "R90")
    with pytest.raises(NetlistError, match="orientation code 8"):
        pc.move(0, 1.0, 1.0, 8)
    with pytest.raises(NetlistError, match="one entry per node"):
        PlacementCost(pc.netlist, pc.canvas, x=np.zeros(3))
    with pytest.raises(NetlistError, match="has 4 nodes"):
        apply_placement(
            pc.netlist,
            Placement(
                node_index=np.array([9]),
                x=np.ones(1),
                y=np.ones(1),
                orientation=["N"],
                fixed=np.zeros(1, bool),
            ),
        )
    with pytest.raises(NetlistError, match="which is a pin"):
        apply_placement(
            pc.netlist,
            Placement(
                node_index=np.array([2]),
                x=np.ones(1),
                y=np.ones(1),
                orientation=["N"],
                fixed=np.zeros(1, bool),
            ),
        )
    with pytest.raises(NetlistError, match="Width/Height"):
        PlacementCost.from_placement(pc.netlist, Placement())
    with pytest.raises(NetlistError, match="smooth_range"):
        Canvas(1.0, 1.0, smooth_range=-1)
    assert ORIENTATIONS[pc.orientation[0]] == "N"


def test_circuit_training_congestion_grid() -> None:
    """circuit_training's create_placement_cost: congestion cells of 2·1000 / (h + v) µm."""
    p = load_plc(netlist_dir("ariane133") / "initial.plc")
    c = Canvas.from_placement(p)
    assert c.congestion_grid == (24, 21)  # legacy: the placement grid
    ct = c.with_circuit_training_congestion_grid()
    size = 2000 / (57.031 + 56.818)
    assert ct.congestion_grid == (int(1433.406 / size), int(1433.406 / size)) == (81, 81)
    pc = PlacementCost(
        get_netlist("ariane133"), ct, None, *apply_placement(get_netlist("ariane133"), p)
    )
    h, v = pc.congestion_grids()
    assert h.shape == v.shape == (81, 81) and pc.density_grid().shape == (21, 24)
    assert pc.costs().density_cost == pytest.approx(0.6067348455, abs=1e-9)  # unchanged
