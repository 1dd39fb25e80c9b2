"""GraphTask's guided decoding: the policy's device logits through HEFT's list scheduler."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.agents.go.actor import GraphTask
from actorq.graphopt.baselines import greedy_fusion, heft, m_etf


def outputs(task: GraphTask, placement: np.ndarray, levels: int = 8) -> dict[str, np.ndarray]:
    """Policy outputs preferring ``placement`` by 3 nats per op, random other heads."""
    n, nd = task.num_ops, task.env.cluster.num_devices
    rng = np.random.default_rng(1)
    dev = np.zeros((n, nd), np.float32)
    dev[np.arange(n), placement] = 3.0
    return {"placement": dev, "priority": rng.normal(size=(n, levels)).astype(np.float32),
            "fusion": rng.normal(size=(n, 2)).astype(np.float32)}  # fmt: skip


@pytest.mark.parametrize("kind", ["placement", "joint"])
def test_guided_spans_heft_to_the_argmax_and_keeps_other_heads(kind: str) -> None:
    task = GraphTask("synthetic-120-s0", kind, "4xgpu-pcie")
    wanted = np.random.default_rng(0).integers(0, 4, task.num_ops)
    out = outputs(task, wanted)
    greedy, _ = task.decide(out, None)
    np.testing.assert_array_equal(greedy[:, 0], wanted)
    far = task.guided(out, 1e9)
    np.testing.assert_array_equal(far, greedy)  # every head as greedy
    near = task.guided(out, 0.0)
    np.testing.assert_array_equal(near[:, 0], heft(task.env.sim).placement)
    np.testing.assert_array_equal(near[:, 1], greedy[:, 1])  # priorities as greedy
    # fusion as greedy but around the ops the scheduler moved, decided again on its placement
    g = task.env.graph
    moved = near[:, 0] != greedy[:, 0]
    touched = task.fusable & (moved[g.src] | moved[g.dst])
    want = greedy[:, 2].copy()
    if kind == "joint":
        assert touched.any()
        want[g.dst[touched]] = greedy_fusion(task.env.sim, near[:, 0])[touched]
    np.testing.assert_array_equal(near[:, 2], want)
    # between, the scheduler moves some of the policy's choices, and the result is judged
    mid = task.guided(out, 1.0)
    assert 0 < np.count_nonzero(mid[:, 0] != wanted) < task.num_ops
    assert np.isfinite(task.judge(mid)[2]["score"])


def test_guided_needs_a_placement_head() -> None:
    task = GraphTask("synthetic-120-s0", "scheduling", "4xgpu-pcie")
    with pytest.raises(ValueError, match="places ops"):
        task.guided(outputs(task, np.zeros(task.num_ops, np.int64)))


def test_guided_through_m_etf_or_with_a_cut_cost() -> None:
    task = GraphTask("synthetic-120-s0", "placement", "4xgpu-pcie")
    sim = task.env.sim
    wanted = np.random.default_rng(2).integers(0, 4, task.num_ops)
    out = outputs(task, wanted)
    np.testing.assert_array_equal(task.guided(out, 0.0, "m-etf")[:, 0], m_etf(sim).placement)
    np.testing.assert_array_equal(task.guided(out, 1e9, "m-etf")[:, 0], wanted)  # all fit
    np.testing.assert_array_equal(
        task.guided(out, 0.0, cut=2.0)[:, 0], heft(sim, cut=2.0).placement
    )
    with pytest.raises(ValueError, match="scheduler"):
        task.guided(out, 1.0, "metis")
    with pytest.raises(ValueError, match="cut cost"):
        task.guided(out, 1.0, "m-etf", cut=1.0)
