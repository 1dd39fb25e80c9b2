"""Baselines: each returns a valid decision and does what its algorithm promises."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.errors import GraphError
from actorq.graphopt.baselines import (
    CUT_WEIGHTS,
    NAMES,
    CutSearch,
    Decision,
    anneal,
    critical_path_priority,
    expert,
    greedy_fusion,
    heft,
    heft_cut,
    heft_search,
    m_etf,
    metis,
    penalized,
    random_search,
    run_baselines,
    simulator_calls,
    single_device,
    upward_rank,
)
from actorq.graphopt.cluster import cluster_from_dict, get_cluster
from actorq.graphopt.ir import make_graph
from actorq.graphopt.simulator import Simulator
from actorq.graphopt.synthetic import layered_dag

from .conftest import unit_cluster


@pytest.fixture(scope="module")
def sim() -> Simulator:
    return Simulator(layered_dag(400, 2), get_cluster("4xgpu-nvlink"))


def test_all_baselines_return_valid_decisions(sim: Simulator) -> None:
    res = run_baselines(sim, budget=10)
    assert [b.name for b in res] == list(NAMES)
    n = sim.graph.num_ops
    for b in res:
        d = b.decision
        assert d.placement.shape == (n,) and d.placement.min() >= 0 and d.placement.max() < 4
        assert d.priority is None or (d.priority.shape == (n,) and np.isfinite(d.priority).all())
        assert b.result.step_time > 0
    by = {b.name: b for b in res}
    # best+fuse fuses the best placement so far, and says which one that was
    first = min(res[:6], key=lambda b: penalized(sim, b.result))
    assert by["best+fuse"].start == first.name
    np.testing.assert_array_equal(by["best+fuse"].decision.placement, first.decision.placement)
    assert by["anneal"].start in NAMES[:6]
    assert by["single"].result.step_time == pytest.approx(sim.op_times(0).sum())
    # search baselines never return worse than where they started
    best_classical = min(penalized(sim, by[k].result) for k in NAMES[:7])
    assert penalized(sim, by["anneal"].result) <= best_classical * (1 + 1e-12)
    # hill climbing starts where annealing started (not from annealing's result)
    assert by["climb"].start == by["anneal"].start
    assert penalized(sim, by["climb"].result) <= best_classical * (1 + 1e-12)


def test_climb_keeps_only_moves_that_do_not_slow_the_step(sim: Simulator) -> None:
    """Zero temperature: every accepted move is no worse, so a short climb's score sequence is
    monotone; seeded; and its end is never worse than its start."""
    start = Decision(expert(sim).placement)
    prio = upward_rank(sim)
    s0 = penalized(sim, sim.run(start.placement, prio))
    ends = [anneal(sim, start, budget=b, seed=4, t0=0.0) for b in (5, 10, 20)]
    scores = [penalized(sim, sim.run(e.placement, e.priority)) for e in ends]
    assert scores[0] <= s0 and scores[0] >= scores[1] >= scores[2]
    again = anneal(sim, start, budget=20, seed=4, t0=0.0)
    np.testing.assert_array_equal(again.placement, ends[2].placement)


def test_unknown_baseline_is_one_line(sim: Simulator) -> None:
    with pytest.raises(GraphError, match="unknown baseline"):
        run_baselines(sim, ("single", "magic"))


def test_expert_is_contiguous_balanced_and_colocates_gradients() -> None:
    ops = [{"name": f"f{i}", "flops": 1.0} for i in range(8)]
    ops += [{"name": f"f{i}/grad", "flops": 2.0, "anchor": f"f{i}"} for i in range(8)]
    edges = [(f"f{i}", f"f{i + 1}", 1) for i in range(7)]
    edges += [(f"f{i + 1}/grad", f"f{i}/grad", 1) for i in range(7)] + [("f7", "f7/grad", 1)]
    g = make_graph("mlp", ops, edges)
    p = expert(Simulator(g, unit_cluster(4))).placement
    assert p[:8].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    np.testing.assert_array_equal(p[8:], p[:8])  # each gradient with its forward op


def test_metis_balances_memory_and_cuts_little() -> None:
    # two dense clusters joined by one thin edge: a 2-way cut should separate them
    rng = np.random.default_rng(0)
    ops = [{"name": f"o{i}", "flops": 1.0, "out_bytes": 100.0} for i in range(40)]
    edges: list[tuple[int, int, float]] = []
    for base in (0, 20):
        for i in range(19):
            for j in rng.choice(np.arange(i + 1, 20), size=min(3, 19 - i), replace=False):
                edges.append((base + i, base + int(j), 1000.0))
    edges.append((19, 20, 1.0))
    g = make_graph("twin", ops, edges)
    pytest.importorskip("pymetis")
    p = metis(Simulator(g, unit_cluster(2))).placement
    assert np.count_nonzero(p == 0) == 20
    assert len(set(p[:20].tolist())) == 1 and len(set(p[20:].tolist())) == 1


def test_heft_uses_parallelism_when_links_are_fast() -> None:
    # 8 independent heavy ops after a light source: HEFT spreads them over the devices
    ops = [{"name": "src", "flops": 1.0}] + [{"name": f"w{i}", "flops": 100.0} for i in range(8)]
    g = make_graph("wide", ops, [("src", f"w{i}", 1.0) for i in range(8)])
    sim = Simulator(g, unit_cluster(4, bandwidth=1e6, latency=0.0))
    d = heft(sim)
    assert len(set(d.placement[1:].tolist())) == 4
    assert sim.run(d.placement, d.priority).step_time == pytest.approx(201.0, rel=1e-3)
    r = upward_rank(sim)
    assert np.all(r[0] > r[1:])  # the source outranks everything after it


def test_guided_heft_spans_heft_to_the_policys_choice(sim: Simulator) -> None:
    n, nd = sim.graph.num_ops, sim.cluster.num_devices
    plain = heft(sim).placement
    rng = np.random.default_rng(0)
    wanted = rng.integers(0, nd, n)
    logp = np.log(np.full((n, nd), 0.1 / (nd - 1)))
    logp[np.arange(n), wanted] = np.log(0.9)
    np.testing.assert_array_equal(heft(sim, logp, 0.0).placement, plain)
    # a uniform policy expresses no preference: HEFT whatever beta
    np.testing.assert_array_equal(heft(sim, np.zeros((n, nd)), 50.0).placement, plain)
    np.testing.assert_array_equal(heft(sim, logp, 1e9).placement, wanted)
    mid = heft(sim, logp, 1.0).placement
    assert np.count_nonzero(mid != plain) > 0 and np.count_nonzero(mid != wanted) > 0


def test_guided_heft_trades_finish_time_for_preference() -> None:
    # one op of 1 FLOP; device 1 at half speed: 1 s against 2 s (t_u = 1.5, the mean). The
    # policy prefers device 1 by a gap of 1 nat, so it wins once beta * 1.5 * 1 > 1
    dev = {"flop_s": 1.0, "mem_bw": 1.0, "memory": 1e6, "op_overhead": 0.0}
    c = cluster_from_dict(
        {"devices": [dev, {**dev, "flop_s": 0.5}], "link": {"bandwidth": 1.0, "latency": 0.0}},
        name="mixed2",
    )
    sim = Simulator(make_graph("one", [{"name": "a", "flops": 1.0}], []), c)
    np.testing.assert_allclose(sim.op_times()[0], [1.0, 2.0])
    logp = np.array([[-2.0, -1.0]])
    assert heft(sim, logp, 0.6).placement[0] == 0  # 0.9 s of preference < 1 s of finish time
    assert heft(sim, logp, 0.7).placement[0] == 1  # 1.05 s > 1 s


@pytest.mark.parametrize(
    ("logp", "beta"),
    [(np.zeros((3, 4)), 1.0), (np.full((400, 4), np.nan), 1.0), (np.zeros((400, 4)), -1.0),
     (np.zeros((400, 4)), float("inf"))],
)  # fmt: skip
def test_guided_heft_refuses_bad_input(sim: Simulator, logp: np.ndarray, beta: float) -> None:
    if logp.shape[0] == 400:
        logp = np.zeros((sim.graph.num_ops, sim.cluster.num_devices)) + logp[:1]
    with pytest.raises(ValueError):
        heft(sim, logp, beta)


def test_a_cut_cost_keeps_an_op_with_its_input_unless_finishing_sooner_pays_for_it() -> None:
    # a -> b, a -> c, each op 1 s; a 0.5-byte edge at 1 B/s costs 0.5 s on a link. HEFT puts c
    # beside b's device: it finishes at 2.5 s there against 3 s after b. A cut costs `cut` x
    # the edge's mean transfer time (0.5 s), so c stays with a once that exceeds the 0.5 s gain
    dev = {"flop_s": 1.0, "mem_bw": 1e9, "memory": 1e6, "op_overhead": 0.0}
    c = cluster_from_dict(
        {"devices": [dev, dev], "link": {"bandwidth": 1.0, "latency": 0.0}}, name="two"
    )
    ops = [{"name": n, "flops": 1.0} for n in "abc"]
    sim = Simulator(make_graph("fork", ops, [("a", "b", 0.5), ("a", "c", 0.5)]), c)
    assert heft(sim).placement.tolist() == [0, 0, 1]
    assert heft(sim, cut=0.9).placement.tolist() == [0, 0, 1]  # 0.45 s of cut < 0.5 s sooner
    assert heft(sim, cut=1.1).placement.tolist() == [0, 0, 0]  # 0.55 s > 0.5 s
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            heft(sim, cut=bad)


def test_heft_cut_is_the_fastest_of_its_weights(sim: Simulator) -> None:
    def ms(d: Decision) -> float:
        return penalized(sim, sim.run(d.placement, d.priority))

    each = [ms(heft(sim, cut=w)) for w in CUT_WEIGHTS]
    assert ms(heft_cut(sim)) == min(each)
    assert ms(heft_cut(sim, (CUT_WEIGHTS[0],))) == each[0]
    with pytest.raises(ValueError):
        heft_cut(sim, ())
    # what `place` reports beside each baseline
    assert simulator_calls("heft-cut", 100) == len(CUT_WEIGHTS)
    assert (simulator_calls("climb", 100), simulator_calls("heft", 100)) == (100, 1)


def test_heft_search_climbs_per_edge_cut_costs_from_heft_cut(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    def ms(d: Decision) -> float:
        return penalized(sim, sim.run(d.placement, d.priority))

    start = ms(heft_cut(sim))
    # within the uniform sweep's budget it is heft-cut (or the first weights of its sweep)
    assert ms(heft_search(sim, len(CUT_WEIGHTS))) == start
    assert ms(heft_search(sim, 1)) == ms(heft(sim, cut=CUT_WEIGHTS[0]))
    # per-edge costs find what no uniform one does on this graph, never anything slower
    found = heft_search(sim, 60, seed=0)
    assert ms(found) < start
    np.testing.assert_array_equal(found.placement, heft_search(sim, 60, seed=0).placement)
    np.testing.assert_array_equal(found.priority, upward_rank(sim))
    # the budget bounds the simulator calls (a candidate HEFT places as before costs none)
    calls = []
    run = sim.run
    monkeypatch.setattr(sim, "run", lambda *a, **k: calls.append(1) or run(*a, **k))
    heft_search(sim, 60, seed=1)
    assert 0 < len(calls) <= 60
    monkeypatch.undo()
    assert simulator_calls("heft-search", 60) == 60
    with pytest.raises(ValueError):
        heft_search(sim, 0)


def test_cut_search_one_candidate_at_a_time_is_heft_search(sim: Simulator) -> None:
    """The stepwise search (what GO's actors run) is heft-search: the uniform sweep first,
    then per-edge moves kept when not slower; told by the caller, judged its own way."""
    s = CutSearch(sim, seed=3)
    with pytest.raises(RuntimeError, match="propose"):
        s.tell(1.0)
    scores = []
    for k in range(40):
        dev = s.propose()
        if k < len(CUT_WEIGHTS):  # heft-cut's sweep, one weight per proposal
            np.testing.assert_array_equal(dev, heft(sim, cut=CUT_WEIGHTS[k]).placement)
        t = penalized(sim, sim.run(dev, s.priority))
        before = s.score
        kept = s.tell(t)
        # the sweep keeps the first of equals, the climb accepts sideways moves
        assert kept == (t < before if k < len(CUT_WEIGHTS) else t <= before)
        assert s.score == min(before, t)
        scores.append(t)
        if kept:
            np.testing.assert_array_equal(s.placement, dev)
    assert s.score == min(scores) and s.told == 40
    assert s.weights is not None and s.weights.shape == (sim.graph.num_edges,)
    # the same seed, the same candidates: heft_search counts the calls the same way
    d = heft_search(sim, 40, seed=3)
    np.testing.assert_array_equal(d.placement, s.placement)


def test_m_etf_respects_memory_where_single_device_cannot() -> None:
    ops = [{"name": f"l{i}", "flops": 1.0, "param_bytes": 30.0} for i in range(6)]
    g = make_graph("big", ops, [(i, i + 1, 1.0) for i in range(5)])
    sim = Simulator(g, unit_cluster(4, memory=100.0))
    assert not sim.run(single_device(sim).placement).feasible
    d = m_etf(sim, memory_fraction=1.0)
    r = sim.run(d.placement, d.priority)
    assert r.feasible, r.reason
    assert np.bincount(d.placement, weights=g.param_bytes, minlength=4).max() <= 100


def test_guided_m_etf_spans_m_etf_to_the_policys_choice(sim: Simulator) -> None:
    n, nd = sim.graph.num_ops, sim.cluster.num_devices
    plain = m_etf(sim)
    rng = np.random.default_rng(1)
    wanted = rng.integers(0, nd, n)
    logp = np.log(np.full((n, nd), 0.1 / (nd - 1)))
    logp[np.arange(n), wanted] = np.log(0.9)
    zero = m_etf(sim, logp=logp, beta=0.0)
    np.testing.assert_array_equal(zero.placement, plain.placement)
    np.testing.assert_array_equal(zero.priority, plain.priority)
    np.testing.assert_array_equal(m_etf(sim, logp=np.zeros((n, nd)), beta=50.0).placement,
                                  plain.placement)  # fmt: skip
    np.testing.assert_array_equal(m_etf(sim, logp=logp, beta=1e9).placement, wanted)
    with pytest.raises(ValueError):
        m_etf(sim, logp=logp[:1], beta=1.0)


def test_guided_m_etf_keeps_the_memory_bound_the_policy_ignores() -> None:
    # six 30-byte layers, devices of 100 bytes; the policy wants them all on device 0
    ops = [{"name": f"l{i}", "flops": 1.0, "param_bytes": 30.0} for i in range(6)]
    g = make_graph("big", ops, [(i, i + 1, 1.0) for i in range(5)])
    sim = Simulator(g, unit_cluster(4, memory=100.0))
    logp = np.log(np.array([[0.97, 0.01, 0.01, 0.01]] * 6))
    assert np.all(heft(sim, logp, 1e9).placement == 0)  # HEFT's scheduler has no memory bound
    d = m_etf(sim, memory_fraction=1.0, logp=logp, beta=1e9)
    assert sim.run(d.placement, d.priority).feasible
    assert np.count_nonzero(d.placement == 0) == 3  # as many as fit where the policy wants them


def test_critical_path_priority_runs_the_long_branch_first() -> None:
    # s -> long1 -> long2 and s -> short; on one device the long branch must go first
    ops = [{"name": n, "flops": f} for n, f in (("s", 1), ("short", 1), ("l1", 1), ("l2", 5))]
    g = make_graph("cp", ops, [("s", "short", 0), ("s", "l1", 0), ("l1", "l2", 0)])
    sim = Simulator(g, unit_cluster(1))
    prio = critical_path_priority(sim, np.zeros(4, dtype=np.int64))
    assert prio.tolist() == [7.0, 1.0, 6.0, 5.0]
    r = sim.run(np.zeros(4, dtype=np.int64), prio)
    assert r.start[2] < r.start[1]


def test_greedy_fusion_only_fuses_legal_memory_bound_edges() -> None:
    ops = [{"name": n, "bytes_read": 4, "bytes_written": 4} for n in "abcde"]
    ops += [{"name": "mm", "flops": 100, "bytes_read": 8, "bytes_written": 4}]
    ops += [{"name": "add", "bytes_read": 8, "bytes_written": 4}]
    # a -> b -> c -> d; c -> e (e on another device); b -> mm (compute-bound); d, mm -> add
    edges = [("a", "b", 4), ("b", "c", 4), ("c", "d", 4), ("c", "e", 4), ("b", "mm", 4)]
    g = make_graph("f", ops, [*edges, ("d", "add", 4), ("mm", "add", 4)])
    sim = Simulator(g, unit_cluster(2, overhead=1.0))
    p = np.array([0, 0, 0, 0, 1, 0, 0])
    f = greedy_fusion(sim, p)
    # legal and memory-bound: a->b, b->c, c->d; not: across devices, into mm, into add (2 inputs)
    assert f.tolist() == [True, True, True, False, False, False, False]
    assert sim.run(p, fusion=f).step_time < sim.run(p).step_time


def test_anneal_keeps_a_start_that_splits_anchor_groups() -> None:
    # m-ETF places gradient ops freely; annealing from such a start must not return anything
    # worse, e.g. the start with each gradient pulled next to its forward op (128 s, not 84 s)
    ops = [{"name": f"f{i}", "flops": 1.0} for i in range(6)]
    ops += [{"name": f"g{i}", "flops": 2.0, "anchor": f"f{i}"} for i in range(6)]
    edges = [(f"f{i}", f"f{i + 1}", 1) for i in range(5)] + [("f5", "g5", 1)]
    edges += [(f"g{i + 1}", f"g{i}", 1) for i in range(5)]
    edges += [(f"f{i}", f"g{i}", 1) for i in range(5)]
    g = make_graph("anch", ops, edges)
    sim = Simulator(g, unit_cluster(2, bandwidth=0.1, latency=1.0))
    start = np.array([0, 1, 0, 1, 0, 1] + [0] * 6)
    assert penalized(sim, sim.run(start, upward_rank(sim))) == pytest.approx(84.0)
    for budget in (1, 15):
        end = anneal(sim, Decision(start), budget=budget, seed=0)
        assert penalized(sim, sim.run(end.placement, end.priority)) <= 84.0


def test_search_is_seeded_and_anneal_never_ends_worse(sim: Simulator) -> None:
    a, b = random_search(sim, 5, seed=3), random_search(sim, 5, seed=3)
    np.testing.assert_array_equal(a.placement, b.placement)
    start = Decision(expert(sim).placement)
    s0 = penalized(sim, sim.run(start.placement, upward_rank(sim)))
    end = anneal(sim, start, budget=20, seed=1)
    assert penalized(sim, sim.run(end.placement, end.priority)) <= s0


@pytest.mark.parametrize("t0", [0.05, 0.0])  # anneal, climb
def test_anneal_and_climb_make_exactly_their_budget_of_simulator_calls(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, t0: float
) -> None:
    """Budgets count simulator calls (docs/graphopt.md): the start's score is one of them."""
    calls = []
    run = sim.run
    monkeypatch.setattr(sim, "run", lambda *a, **k: calls.append(1) or run(*a, **k))
    anneal(sim, Decision(expert(sim).placement), budget=20, seed=1, t0=t0)
    assert len(calls) == simulator_calls("anneal", 20) == 20
