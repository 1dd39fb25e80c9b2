"""Force-directed placement of soft macros: it shortens wires, stays on the canvas, is
deterministic per seed, leaves hard macros and ports alone, and keeps the cost state exact."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.chip.anneal import AnnealConfig, anneal
from actorq.chip.cost import Canvas, PlacementCost
from actorq.chip.force import FDConfig, ForcePlacer, place_soft_macros
from actorq.chip.netlist import get_netlist, netlist_dir, parse_netlist
from actorq.chip.plc import load_plc
from actorq.errors import ConfigError

from .synth import node_text


def clustered_netlist(seed: int = 0, n_soft: int = 30) -> PlacementCost:
    """Four hard macros in the corners, ports on the left and right edges, and ``n_soft``
    clusters wired in a chain from the left ports to the right ones, with some nets to the
    macros; the clusters start at random positions on a 200 × 200 canvas."""
    rng = np.random.default_rng(seed)
    blocks = []
    for k, (x, y) in enumerate([(25, 25), (175, 25), (25, 175), (175, 175)]):
        blocks.append(node_text(f"M{k}", type="MACRO", width=40.0, height=40.0, x=x, y=y))
        blocks.append(
            node_text(f"M{k}/p", [f"Grp_{k * 7}/p"], type="MACRO_PIN", macro_name=f"M{k}",
                      x_offset=0.0, y_offset=0.0)
        )  # fmt: skip
    for i in range(n_soft):
        blocks.append(
            node_text(f"Grp_{i}", type="macro", width=12.0, height=6.0,
                      x=float(rng.uniform(0, 200)), y=float(rng.uniform(0, 200)))
        )  # fmt: skip
        sinks = [f"Grp_{i + 1}/p"] if i + 1 < n_soft else ["out"]
        blocks.append(
            node_text(f"Grp_{i}/p", sinks, type="macro_pin", macro_name=f"Grp_{i}", weight=2.0)
        )
    blocks.append(node_text("in", ["Grp_0/p"], type="PORT", side="LEFT", x=0.0, y=100.0))
    blocks.append(node_text("out", type="PORT", side="RIGHT", x=200.0, y=100.0))
    nl = parse_netlist("\n".join(blocks) + "\n", name="chain")
    return PlacementCost(nl, Canvas(200.0, 200.0, columns=8, rows=8))


def _on_canvas(pc: PlacementCost) -> bool:
    nl = pc.netlist
    s = nl.soft_macros
    c = pc.canvas
    hw, hh = nl.width[s] / 2, nl.height[s] / 2
    x, y = pc.x[s], pc.y[s]
    return bool(
        np.all(x - hw >= -1e-9)
        and np.all(x + hw <= c.width + 1e-9)
        and np.all(y - hh >= -1e-9)
        and np.all(y + hh <= c.height + 1e-9)
    )


@pytest.mark.parametrize("use_current_loc", [False, True])
def test_fd_shortens_wires_from_a_random_start(use_current_loc: bool) -> None:
    pc = clustered_netlist()
    fixed = pc.x.copy(), pc.y.copy()
    start = pc.costs()
    res = place_soft_macros(pc, FDConfig(use_current_loc=use_current_loc))
    assert res.before == start
    assert res.after.wirelength < 0.6 * start.wirelength
    assert res.steps == 300
    assert _on_canvas(pc)
    # hard macros and ports stay; the incremental state is the from-scratch one
    keep = ~np.isin(np.arange(pc.netlist.num_nodes), pc.netlist.soft_macros)
    assert np.array_equal(pc.x[keep], fixed[0][keep]) and np.array_equal(pc.y[keep], fixed[1][keep])
    assert pc.costs() == pc.full_costs()


def test_attraction_alone_clumps_and_repulsion_spreads() -> None:
    pc = clustered_netlist()
    attract = FDConfig(num_steps=(100,), attract_factor=(100.0,), repel_factor=(0.0,))
    clump = place_soft_macros(pc, attract).after
    spread = place_soft_macros(pc, FDConfig()).after
    assert clump.wirelength < spread.wirelength  # springs alone: shortest wires...
    assert clump.density_cost > spread.density_cost  # ...and the densest cells


def test_fd_is_deterministic_per_seed() -> None:
    a, b = clustered_netlist(), clustered_netlist()
    fa = ForcePlacer(a)
    ra = fa.place(FDConfig(seed=3))
    rb = ForcePlacer(b).place(FDConfig(seed=3))
    assert ra.after == rb.after and np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y)
    # the placer is reusable: the same schedule from the centre gives the same placement
    x = a.x.copy()
    fa.place(FDConfig(seed=3))
    assert np.array_equal(a.x, x)


def test_fd_on_shipped_netlists_stays_on_canvas() -> None:
    for name in ("sample_clustered", "toy_macro_stdcell", "macro_tiles_10x10"):
        nl = get_netlist(name)
        pc = PlacementCost.from_placement(nl, load_plc(netlist_dir(name) / "initial.plc"))
        res = place_soft_macros(pc, FDConfig(num_steps=(20, 20, 20)))
        assert _on_canvas(pc)
        assert np.isfinite(res.after.proxy)


def test_anneal_with_fd_reports_the_proxy_after_fd() -> None:
    nl = get_netlist("sample_clustered")
    pc = PlacementCost.from_placement(nl, load_plc(netlist_dir(nl.name) / "initial.plc"))
    res = anneal(pc, AnnealConfig(steps=300, seed=1, fd=FDConfig(), fd_every=50))
    assert res.proxy_before_fd is not None and res.fd_runs >= 2
    assert res.best_proxy == pytest.approx(pc.costs().proxy)
    assert pc.costs() == pc.full_costs()
    assert 0 < res.evaluations <= 300 + 100 and res.cpu_seconds > 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_steps": ()},
        {"num_steps": (1, 2)},
        {"num_steps": (-1, 1, 1)},
        {"attract_factor": (float("nan"), 1.0, 1.0)},
        {"repel_factor": (0.0, -1.0, 1.0)},
        {"max_move_distance": (1.0, 1.0)},
        {"max_move_distance": (1.0, float("inf"), 1.0)},
        {"io_factor": -1.0},
        {"seed": -1},
    ],
)
def test_bad_fd_config(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        FDConfig(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        AnnealConfig(fd_every=-1)


def test_springs_put_sample_clustereds_cluster_where_googles_fd_did() -> None:
    """sample_clustered's initial.plc (written by circuit_training) has its one cluster at
    (170, 310), the rest point of its springs; ours, started from the canvas centre, lands
    there too."""
    nl = get_netlist("sample_clustered")
    pc = PlacementCost.from_placement(nl, load_plc(netlist_dir(nl.name) / "initial.plc"))
    s = nl.soft_macros
    assert (pc.x[s][0], pc.y[s][0]) == (170.0, 310.0)
    place_soft_macros(pc, FDConfig())
    assert pc.x[s][0] == pytest.approx(170.0, abs=1e-3)
    assert pc.y[s][0] == pytest.approx(310.0, abs=1e-3)


@pytest.mark.parametrize("square", [True, False])
def test_repulsion_sweep_is_the_all_pairs_sum_to_the_bit(square: bool) -> None:
    """The sweep tests only pairs whose x-extents can meet, the small netlists' path all pairs
    in one block with cached sizes; their sums must be the all-pairs test's exactly (same
    pairs, same order, same arithmetic): spread, clumped (every cluster at the canvas centre,
    as FD starts them), coincident centres, and blocks of rows split by the memory bound."""
    import actorq.chip.force as force

    rng = np.random.default_rng(0)
    pc = clustered_netlist(seed=1, n_soft=60)
    fp = ForcePlacer(pc)
    m = len(fp.movable)
    hx, hy = pc.x[fp.hard], pc.y[fp.hard]
    layouts = [
        (rng.uniform(0, 200, m), rng.uniform(0, 200, m)),
        (100 + rng.uniform(-1, 1, m), 100 + rng.uniform(-1, 1, m)),
        (np.full(m, 100.0), np.full(m, 100.0)),  # every centre the same
        (np.round(rng.uniform(0, 200, m) / 20) * 20, np.round(rng.uniform(0, 200, m) / 20) * 20),
        # a cluster centred on a hard macro's centre: the coincident-centres push, hard side
        (np.r_[hx[0], rng.uniform(0, 200, m - 1)], np.r_[hy[0], rng.uniform(0, 200, m - 1)]),
    ]
    hw, hh = (fp.side, fp.side) if square else (fp.hw, fp.hh)
    for px, py in layouts[-1:]:  # a cluster does overlap a hard macro (the dense test's hits)
        assert np.any((np.abs(px[:, None] - hx) < hw[:, None] + fp.fixed_hw)
                      & (np.abs(py[:, None] - hy) < hh[:, None] + fp.fixed_hh))  # fmt: skip
    # 7: blocks of one or two rows; 29: several rows a block, a partial last one (hard: 7 rows)
    for chunk in (force._CHUNK, 7, 29):
        old = force._CHUNK, force._ALL_PAIRS
        force._CHUNK, force._ALL_PAIRS = chunk, 0  # the sweep, whatever the size
        try:
            for px, py in layouts:
                got = fp._repulsion(px, py, hx, hy, square)
                want = fp._repulsion_all_pairs(px, py, hx, hy, square)
                assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
                small = fp._repulsion_small(px, py, hx, hy, square)  # one block, cached sums
                assert np.array_equal(small[0], want[0]) and np.array_equal(small[1], want[1])
                assert np.abs(want[0]).sum() > 0  # the layouts do overlap
        finally:
            force._CHUNK, force._ALL_PAIRS = old


def test_fd_on_a_shipped_netlist_is_unchanged_by_the_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole FD run (attraction, then repulsion stages) ends at the same positions with the
    sweep as with the all-pairs test."""
    monkeypatch.setattr("actorq.chip.force._ALL_PAIRS", 0)  # the sweep on a small netlist
    nl = get_netlist("toy_macro_stdcell")
    runs = []
    for sweep in (True, False):
        pc = PlacementCost.from_placement(nl, load_plc(netlist_dir(nl.name) / "initial.plc"))
        if not sweep:
            monkeypatch.setattr(ForcePlacer, "_repulsion", ForcePlacer._repulsion_all_pairs)
        place_soft_macros(pc, FDConfig(seed=2))
        runs.append((pc.x.copy(), pc.y.copy()))
    assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])
