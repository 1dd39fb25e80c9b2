"""Environments: check_env for every task and mode, rewards, and ids through make_env."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from actorq.envs import make_env, validate_env_id
from actorq.errors import EnvIdError, GraphError
from actorq.graphopt.envs import MODES, NODE_FEATURES, TASKS, GraphOptEnv, op_category
from actorq.graphopt.synthetic import layered_dag

GRAPH = layered_dag(50, 4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("task", TASKS)
def test_check_env(task: str, mode: str) -> None:
    env = GraphOptEnv(GRAPH, task, "4xgpu-pcie", mode)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert obs.nodes.shape == (50, NODE_FEATURES + 4) and obs.nodes.dtype == np.float32
    assert obs.edges.shape == (GRAPH.num_edges, 4)
    np.testing.assert_array_equal(obs.edge_links, np.stack([GRAPH.src, GRAPH.dst], 1))
    assert info["reference_time"] > 0


@pytest.mark.parametrize("task", TASKS)
def test_sequential_return_equals_oneshot_reward_of_the_same_decision(task: str) -> None:
    seq = GraphOptEnv(GRAPH, task, "2xgpu-nvlink", "sequential")
    seq.reset(seed=0)
    seq.action_space.seed(1)
    ret, done = 0.0, False
    while not done:
        _, r, done, _, info = seq.step(seq.action_space.sample())
        ret += r
    one = GraphOptEnv(GRAPH, "joint", "2xgpu-nvlink", "oneshot")
    one.reset(seed=0)
    action = {"placement": seq.placement, "priority": seq.priority, "fusion": seq.fusion}
    _, r1, term, trunc, info1 = one.step(action)
    assert term and not trunc
    assert ret == pytest.approx(r1, abs=1e-9)
    assert info1["step_time"] == pytest.approx(info["step_time"])
    with pytest.raises(GraphError, match="episode is over"):
        seq.step(seq.action_space.sample())


def test_reference_action_scores_zero_and_single_device_matches_the_simulator() -> None:
    env = GraphOptEnv(GRAPH, "placement", "4xgpu-pcie")
    env.reset(seed=0)
    _, r, *_ = env.step(env.reference.placement)
    assert r == pytest.approx(0.0, abs=1e-12)
    env.reset()
    _, r, _, _, info = env.step(np.zeros(50, dtype=np.int64))
    expect = env.sim.run(np.zeros(50, dtype=np.int64), env.reference.priority)
    assert info["step_time"] == pytest.approx(expect.step_time)
    assert r == pytest.approx((env.reference_time - expect.step_time) / env.reference_time)


@pytest.mark.parametrize("task", TASKS)
def test_judge_is_reset_then_step_without_observations(task: str) -> None:
    """The actors' path: judge(a) returns what reset() + step(a) return, after any earlier
    decision (it starts from the reference state, as reset does)."""
    env = GraphOptEnv(GRAPH, task, "2xgpu-pcie")
    rng = np.random.default_rng(0)
    n, e = GRAPH.num_ops, GRAPH.num_edges
    parts = {"placement": rng.integers(0, 2, n), "priority": rng.random(n),
             "fusion": rng.random(e) < 0.3}  # fmt: skip
    action = parts if task == "joint" else parts[{"scheduling": "priority"}.get(task, task)]
    env.judge({**parts, "placement": np.ones(n, np.int64)} if task == "joint" else action)
    r, info = env.judge(action)
    env.reset()
    _, r2, _, _, info2 = env.step(action)
    assert r == r2 and info == info2
    seq = GraphOptEnv(GRAPH, task, "2xgpu-pcie", "sequential")
    with pytest.raises(GraphError, match="oneshot"):
        seq.judge(action)


def test_bad_actions_are_one_line_errors() -> None:
    env = GraphOptEnv(GRAPH, "placement", "2xgpu-pcie")
    env.reset()
    with pytest.raises(GraphError, match="does not exist"):
        env.step(np.full(50, 7))
    seq = GraphOptEnv(GRAPH, "placement", "2xgpu-pcie", "sequential")
    seq.reset()
    with pytest.raises(GraphError, match="not in"):
        seq.step(5)


def test_make_env_ids() -> None:
    env = make_env("graphopt:fusion/synthetic-40-s1", cluster="2xgpu-pcie", mode="sequential")
    assert isinstance(env, GraphOptEnv) and env.task == "fusion"
    validate_env_id("graphopt:joint/rnnlm-s")  # a suite name validates without being built
    for bad, needle in [
        ("graphopt:placement", "must be <task>/<graph>"),
        ("graphopt:packing/rnnlm-s", "unknown graphopt task"),
        ("graphopt:placement/no-such-graph", "unknown graph"),
    ]:
        with pytest.raises(EnvIdError) as e:
            make_env(bad)
        assert needle in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(GraphError, match="unknown cluster"):
        make_env("graphopt:placement/synthetic-40-s1", cluster="3xtpu")
    with pytest.raises(GraphError, match="unknown mode"):
        make_env("graphopt:placement/synthetic-40-s1", mode="batch")


def test_check_env_on_a_suite_graph() -> None:
    env = make_env("graphopt:joint/gnmt-s", cluster="2xgpu-nvlink")
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    # traced op types land in real categories (not all "other")
    other = obs.nodes[:, 6 + 8]  # the last category column
    assert other.mean() < 0.2


def test_op_categories() -> None:
    cats = [op_category(t) for t in ("linear", "conv2d_grad", "sigmoid", "layernorm", "update")]
    assert cats == [1, 2, 3, 4, 7]


def test_a_graph_that_takes_no_time_is_rejected_up_front() -> None:
    # rewards are relative to the reference step time: with 0 they would divide by zero on step
    from actorq.graphopt.cluster import cluster_from_dict
    from actorq.graphopt.ir import make_graph

    free = make_graph("free", [{"name": "a"}, {"name": "b"}], [("a", "b", 0)])
    dev = {"flop_s": 1, "mem_bw": 1, "memory": 1, "op_overhead": 0}
    c = cluster_from_dict({"devices": [dev, dev], "link": {"bandwidth": 1, "latency": 0}})
    for mode in MODES:
        with pytest.raises(GraphError, match="takes no time") as e:
            GraphOptEnv(free, "placement", c, mode)
        assert "\n" not in str(e.value)
