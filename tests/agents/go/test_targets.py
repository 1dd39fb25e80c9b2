"""Imitation targets (:mod:`actorq.agents.go.targets`): ``best`` is the fastest deterministic
candidate, device labels are renamed by first use only where that changes nothing, and
priorities become equal-count levels."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.agents.go import targets
from actorq.agents.go.actor import GraphTask
from actorq.graphopt.baselines import CUT_WEIGHTS
from actorq.graphopt.cluster import cluster_from_dict, get_cluster


def test_best_is_the_fastest_deterministic_candidate() -> None:
    task = GraphTask("synthetic-90-s1", "placement", "4xgpu-pcie")
    best = targets.target(task, "best")
    times = {n: targets.target(task, n).time for n in targets.BEST_OF}
    assert best.baseline in targets.BEST_OF and best.time == min(times.values())
    assert best.sim_calls == 2 * len(targets.BEST_OF) + len(CUT_WEIGHTS)  # heft-cut's sweep


def test_relabelling_renames_devices_by_first_use_only_where_it_changes_nothing() -> None:
    task = GraphTask("synthetic-120-s0", "placement", "4xgpu-pcie")
    raw = targets.target(task, "metis+cp", relabel=False)
    new = targets.target(task, "metis+cp", relabel=True)
    assert new.relabelled and not raw.relabelled
    order = task.env.graph.topo_order
    assert new.placement[order[0]] == 0  # the first op's device is device 0
    firsts = list(dict.fromkeys(new.placement[order].tolist()))
    assert firsts == sorted(firsts)  # devices appear in label order
    # a renaming: same partition of the ops, same step time (the cluster is symmetric)
    pairs = set(zip(raw.placement.tolist(), new.placement.tolist(), strict=True))
    assert len(pairs) == len(np.unique(raw.placement))
    assert new.time == pytest.approx(raw.time, rel=1e-12)
    swap = np.array([1, 0, 2, 3])
    assert targets.symmetric_under(get_cluster("4xgpu-pcie"), swap)
    # one faster device: renaming it changes step times, so labels are kept
    dev = {"flop_s": 1e13, "mem_bw": 7.5e11, "memory": 1.7e10, "op_overhead": 5e-6}
    fast = {**dev, "flop_s": 2e13}
    hetero = cluster_from_dict(
        {"devices": [fast, dev, dev, dev], "link": {"bandwidth": 1.2e10, "latency": 1e-5}}
    )
    assert not targets.symmetric_under(hetero, swap)
    assert targets.symmetric_under(hetero, np.array([0, 2, 1, 3]))


def test_priority_levels_are_equal_count_buckets_of_the_order() -> None:
    rng = np.random.default_rng(0)
    prio = rng.normal(size=80)
    lv = targets.priority_levels(prio, 8)
    assert np.bincount(lv, minlength=8).tolist() == [10] * 8
    order = np.argsort(prio)
    assert (np.diff(lv[order]) >= 0).all()  # a higher priority never gets a lower level
    assert lv[prio.argmax()] == 7 and lv[prio.argmin()] == 0


def devices(t: targets.Target) -> int:
    return len(np.unique(t.placement))


def test_a_margin_prefers_the_candidate_on_fewer_devices_within_it() -> None:
    """inception-v0 on 8 NVLink GPUs: HEFT-cut's 8-way split is the fastest, 8.4% ahead of one
    device; a 10% margin imitates the single device, a 5% margin still the split."""
    task = GraphTask("inception-v0", "placement", "8xgpu-nvlink", "heft")
    fastest = targets.target(task, "best")
    single = targets.target(task, "single")
    assert fastest.baseline == "heft-cut" and devices(fastest) == 8
    assert 1.05 < single.time / fastest.time < 1.10
    near = targets.target(task, "best", margin=0.10)
    assert near.baseline == "single" and near.time == single.time and devices(near) == 1
    assert targets.target(task, "best", margin=0.05).baseline == "heft-cut"


@pytest.mark.parametrize("margin", [0.05, 0.3, 2.0])
def test_the_margins_target_is_near_the_fastest_and_on_the_fewest_devices(margin: float) -> None:
    task = GraphTask("synthetic-120-s0", "placement", "8xgpu-nvlink")
    each = {n: targets.target(task, n) for n in targets.BEST_OF}
    fastest = min(t.time for t in each.values() if t.feasible)
    got = targets.target(task, "best", margin=margin)
    assert got.feasible and got.time <= fastest * (1 + margin)
    near = [t for t in each.values() if t.feasible and t.time <= fastest * (1 + margin)]
    assert devices(got) == min(devices(t) for t in near)


def test_choose_by_hand() -> None:
    c = [(True, 1.00, 8), (True, 1.00, 4), (True, 1.10, 2), (True, 1.15, 1), (False, 0.5, 1)]
    assert targets.choose(c) == 0  # fastest feasible; a tie keeps the order
    assert targets.choose(c, 0.05) == 1  # fewer devices at the same time
    assert targets.choose(c, 0.12) == 2 and targets.choose(c, 0.2) == 3
    none_fit = [(False, 3.0, 1), (False, 2.0, 4)]
    assert targets.choose(none_fit, 0.5) == 1  # the least penalised; no margin without a fit
