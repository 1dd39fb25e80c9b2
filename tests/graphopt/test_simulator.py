"""Simulator: hand-computed small graphs, bad input, and properties on random DAGs.

The unit cluster (conftest) runs an op in ``max(flops, bytes)`` seconds and moves a tensor of
``b`` bytes in ``b + 0.5`` seconds, so each expected time below can be checked on paper.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorq.errors import GraphError
from actorq.graphopt.baselines import _bottom_level
from actorq.graphopt.cluster import get_cluster
from actorq.graphopt.ir import Graph, make_graph
from actorq.graphopt.simulator import HAVE_NUMBA, Simulator, _simulate
from actorq.graphopt.synthetic import layered_dag

from .conftest import unit_cluster


def chain(*flops: float, edge: float = 0.0, out: float = 0.0) -> Graph:
    ops = [{"name": f"op{i}", "flops": f, "out_bytes": out} for i, f in enumerate(flops)]
    edges = [(i, i + 1, edge) for i in range(len(flops) - 1)]
    return make_graph("chain", ops, edges)


def test_chain_on_one_device_is_the_serial_sum() -> None:
    r = Simulator(chain(1, 2, 3), unit_cluster(2)).run([0, 0, 0])
    assert r.step_time == pytest.approx(6.0)
    assert r.start.tolist() == [0, 1, 3] and r.finish.tolist() == [1, 3, 6]
    assert r.comm_time == 0 and r.transfers == 0
    assert r.busy.tolist() == [6.0, 0.0] and r.utilization[0] == pytest.approx(1.0)


def test_chain_with_a_cross_device_edge() -> None:
    # op0 0-1, op1 1-3 on d0; 2 bytes over the link: 3 + 2/1 + 0.5 = 5.5; op2 5.5-8.5 on d1
    r = Simulator(chain(1, 2, 3, edge=2), unit_cluster(2)).run([0, 0, 1])
    assert r.step_time == pytest.approx(8.5)
    assert r.start[2] == pytest.approx(5.5)
    assert r.comm_time == pytest.approx(2.5) and r.comm_bytes == 2 and r.transfers == 1


def test_fork_runs_in_parallel() -> None:
    ops = [{"name": "a", "flops": 1}, {"name": "b", "flops": 2}, {"name": "c", "flops": 2}]
    g = make_graph("fork", ops, [("a", "b", 1), ("a", "c", 1)])
    sim = Simulator(g, unit_cluster(2))
    # a 0-1; b 1-3 on d0; a's tensor reaches d1 at 1 + 1 + 0.5 = 2.5; c 2.5-4.5
    r = sim.run([0, 0, 1])
    assert r.step_time == pytest.approx(4.5) and r.start[2] == pytest.approx(2.5)
    assert sim.run([0, 0, 0]).step_time == pytest.approx(5.0)


def test_join_waits_for_the_last_input() -> None:
    ops = [{"name": "a", "flops": 1}, {"name": "b", "flops": 2}, {"name": "c", "flops": 1}]
    g = make_graph("join", ops, [("a", "c", 1), ("b", "c", 1)])
    # b on d1 finishes at 2, arrives at 3.5; c 3.5-4.5 on d0
    r = Simulator(g, unit_cluster(2)).run([0, 1, 0])
    assert r.start[2] == pytest.approx(3.5) and r.step_time == pytest.approx(4.5)


def test_transfers_share_a_link_and_are_sent_once_per_device() -> None:
    ops = [{"name": n, "flops": 1} for n in ("a", "b", "c", "d", "e")]
    # a -> c, a -> e (both on d1: one transfer); b -> d. a, b on d0; c, d, e on d1.
    g = make_graph("link", ops, [("a", "c", 3), ("a", "e", 3), ("b", "d", 3)])
    r = Simulator(g, unit_cluster(2)).run([0, 0, 1, 1, 1])
    # a 0-1, b 1-2; a's tensor holds the link 1-4 (arrives 4.5); b's waits for it: 4-7, 7.5
    assert r.transfers == 2 and r.comm_bytes == 6
    assert r.start[3] == pytest.approx(7.5)
    assert r.step_time == pytest.approx(8.5)
    # c and e both got a's single transfer at 4.5 and ran one after the other
    assert sorted([r.start[2], r.start[4]]) == pytest.approx([4.5, 5.5])


def test_priorities_order_ready_ops() -> None:
    g = make_graph("two", [{"name": "x", "flops": 1}, {"name": "y", "flops": 2}], [])
    sim = Simulator(g, unit_cluster(1))
    assert sim.run([0, 0]).start.tolist() == [0, 1]  # default: topological order
    r = sim.run([0, 0], priority=[0.0, 1.0])
    assert r.start.tolist() == [2, 0] and r.step_time == 3


def test_fusion_saves_overhead_and_memory_traffic() -> None:
    ops = [
        {"name": "a", "bytes_read": 4, "bytes_written": 2, "out_bytes": 2},
        {"name": "b", "bytes_read": 2, "bytes_written": 4, "out_bytes": 4},
    ]
    g = make_graph("fuse", ops, [("a", "b", 2)])
    sim = Simulator(g, unit_cluster(1, overhead=1.0))
    plain = sim.run([0, 0])
    assert plain.step_time == pytest.approx(14.0)  # (1 + 6) + (1 + 6)
    assert plain.peak_memory[0] == pytest.approx(6.0)  # a's 2 still live while b writes 4
    fused = sim.run([0, 0], fusion=[True])
    # one kernel: 1 + (12 - 2 * 2) = 9; the 2-byte intermediate is never allocated
    assert fused.step_time == pytest.approx(9.0) and fused.fusions_applied == 1
    assert fused.peak_memory[0] == pytest.approx(4.0)


def test_fusion_saves_only_traffic_the_ops_had() -> None:
    """A view (no traffic, no output of its own) carries a's tensor on its edges: fusing it to
    its reader saves nothing (the reader still reads a's output from memory), and fusing the
    whole chain saves a's write and relu's read through it, never more (the write of relu's
    output stays): a fused edge's bytes are the tensor's size, not traffic of its ends."""
    t = 4.0
    ops = [
        {"name": "a", "bytes_written": t, "out_bytes": t},
        {"name": "view", "out_bytes": 0},
        {"name": "relu", "bytes_read": t, "bytes_written": t, "out_bytes": t},
    ]
    g = make_graph("view", ops, [("a", "view", t), ("view", "relu", t)])
    sim = Simulator(g, unit_cluster(1))
    assert sim.run([0, 0, 0]).step_time == pytest.approx(3 * t)  # a 4, view 0, relu 8
    assert sim.run([0, 0, 0], fusion=[False, True]).step_time == pytest.approx(3 * t)
    assert sim.run([0, 0, 0], fusion=[True, True]).step_time == pytest.approx(t)
    # fused into a view alone: a's write is still needed by relu, nothing is saved
    assert sim.run([0, 0, 0], fusion=[True, False]).step_time == pytest.approx(3 * t)


def test_fused_output_used_outside_the_group_is_materialized() -> None:
    # a feeds b (fused) and c (on the other device): a's 2 bytes are still written, allocated
    # and sent, but only when the fused kernel {a, b} finishes
    ops = [
        {"name": "a", "bytes_read": 4, "bytes_written": 2, "out_bytes": 2},
        {"name": "b", "bytes_read": 2, "bytes_written": 4, "out_bytes": 4},
        {"name": "c", "flops": 1},
    ]
    g = make_graph("fork", ops, [("a", "b", 2), ("a", "c", 2)])
    sim = Simulator(g, unit_cluster(2, overhead=1.0))
    r = sim.run([0, 0, 1], fusion=[True, False])
    # kernel: 1 + (12 - 2) = 11 (b's read saved, a's write kept); transfer 2 + 0.5; c 1 + 1
    assert r.fusions_applied == 1 and r.finish[0] == r.finish[1] == pytest.approx(11.0)
    assert r.start[2] == pytest.approx(13.5) and r.step_time == pytest.approx(15.5)
    assert r.peak_memory[0] == pytest.approx(6.0)


def test_illegal_fusions_are_ignored() -> None:
    ops = [{"name": n, "flops": 1} for n in "abc"]
    g = make_graph("join", ops, [("a", "c", 1), ("b", "c", 1)])
    sim = Simulator(g, unit_cluster(2))
    r = sim.run([0, 0, 0], fusion=[True, False])  # c has two inputs
    assert r.fusions_applied == 0 and r.fusions_ignored == 1 and r.step_time == 3
    g2 = chain(1, 1, edge=1)
    r2 = Simulator(g2, unit_cluster(2)).run([0, 1], fusion=[True])  # across devices
    assert r2.fusions_ignored == 1 and r2.step_time == pytest.approx(3.5)


def test_memory_is_freed_after_the_last_consumer() -> None:
    # each op outputs 5 bytes; at most two outputs are live at once (producer + consumer)
    r = Simulator(chain(1, 1, 1, out=5), unit_cluster(1)).run([0, 0, 0])
    assert r.peak_memory[0] == pytest.approx(10.0)
    # across devices the receiver holds the 5-byte copy while its consumer runs
    r2 = Simulator(chain(1, 1, edge=5, out=5), unit_cluster(2)).run([0, 1])
    assert r2.peak_memory.tolist() == pytest.approx([5.0, 10.0])


def test_over_capacity_is_infeasible_with_a_reason() -> None:
    ops = [{"name": "w", "flops": 1, "param_bytes": 8}, {"name": "x", "flops": 1, "out_bytes": 4}]
    g = make_graph("mem", ops, [("w", "x", 1)])
    sim = Simulator(g, unit_cluster(2, memory=10, latency=0))
    r = sim.run([0, 0])
    assert not r.feasible and r.memory_excess == pytest.approx(0.2)
    assert r.reason == (
        "device 0 (dev0) needs 12 B > 10 B capacity (8 B parameters + 4 B peak activations "
        "at op 'x')"
    )
    ok = sim.run([0, 1])
    assert ok.feasible and ok.reason == "" and ok.peak_memory.max() <= 10


@pytest.mark.parametrize(
    "placement, needle",
    [
        ([0, 0, 2], "op 'op2' is placed on device 2, which does not exist"),
        ([0, -1, 0], "op 'op1'"),
        ([0, 0], "shape"),
        ([0.5, 0, 0], "integer"),
    ],
)
def test_bad_placements(placement: list, needle: str) -> None:
    sim = Simulator(chain(1, 1, 1), unit_cluster(2))
    with pytest.raises(GraphError) as e:
        sim.run(placement)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_bad_priority_and_fusion_shapes() -> None:
    sim = Simulator(chain(1, 1, 1), unit_cluster(2))
    with pytest.raises(GraphError, match="priority"):
        sim.run([0, 0, 0], priority=[1.0, float("nan"), 0.0])
    with pytest.raises(GraphError, match="fusion"):
        sim.run([0, 0, 0], fusion=[True])


def test_an_80k_graph() -> None:
    # speed is measured by benchmarks/simulator_speed.py; here: it runs and adds up at 80k ops
    g = layered_dag(80_000, 0)
    sim = Simulator(g, get_cluster("8xgpu-pcie"))
    r = sim.run(np.random.default_rng(0).integers(0, 8, g.num_ops))
    assert r.transfers > 0 and np.all(r.finish >= r.start) and r.step_time == r.finish.max()
    one = sim.run(np.zeros(g.num_ops, dtype=np.int64))
    assert one.step_time == pytest.approx(float(sim.op_times(0).sum()), rel=1e-9)


# ---- properties on random DAGs, placements and priorities ------------------------------------

CLUSTERS = ["2xgpu-pcie", "4xgpu-nvlink", "8xgpu-pcie"]


def _critical_path(sim: Simulator, device: int) -> float:
    g = sim.graph
    zero = np.zeros(g.num_edges)
    t = sim.op_times(device)
    return float(_bottom_level(g.topo_order, g.out_ptr, g.dst[g.out_edges], zero, t).max())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(2, 60),
    seed=st.integers(0, 10_000),
    cluster=st.sampled_from(CLUSTERS),
    fuse=st.booleans(),
)
def test_bounds_and_consistency(n: int, seed: int, cluster: str, fuse: bool) -> None:
    g = layered_dag(n, seed)
    c = get_cluster(cluster)
    sim = Simulator(g, c)
    rng = np.random.default_rng(seed)
    p = rng.integers(0, c.num_devices, n)
    prio = rng.random(n)
    fusion = rng.random(g.num_edges) < 0.5 if fuse else None
    r = sim.run(p, prio, fusion)
    eps = 1e-9 * r.step_time
    flop_s = c.arrays()[0]
    # no schedule beats total work spread over total compute
    assert r.step_time * flop_s.sum() >= g.flops.sum() * (1 - 1e-9)
    assert np.all(r.utilization <= 1 + 1e-9) and np.all(r.start <= r.finish)
    if not fuse:
        # ... nor the critical path on the fastest device (unfused op times, free transfers)
        assert r.step_time >= _critical_path(sim, c.fastest_device()) - eps
        # dependencies: a consumer starts after its producer finished (+ the link if remote)
        lat = c.latency[p[g.src], p[g.dst]]
        need = r.finish[g.src] + np.where(p[g.src] != p[g.dst], lat, 0.0)
        assert np.all(r.start[g.dst] >= need - eps)
        # a device runs one op at a time
        for d in range(c.num_devices):
            idx = np.flatnonzero(p == d)
            o = idx[np.argsort(r.start[idx], kind="stable")]
            assert np.all(r.start[o[1:]] >= r.finish[o[:-1]] - eps)
    # one device: exactly the serial sum of op times
    d = int(rng.integers(c.num_devices))
    single = sim.run(np.full(n, d), prio)
    assert single.step_time == pytest.approx(float(sim.op_times(d).sum()), rel=1e-9)
    assert single.comm_time == 0


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 50), seed=st.integers(0, 10_000), cap=st.floats(1e5, 1e9))
def test_memory_accounting(n: int, seed: int, cap: float) -> None:
    g = layered_dag(n, seed, batch_bytes=1e5)
    sim = Simulator(g, unit_cluster(3, memory=cap))
    p = np.random.default_rng(seed).integers(0, 3, n)
    r = sim.run(p)
    params = np.bincount(p, weights=g.param_bytes, minlength=3)
    # the peak holds at least the parameters, and one op's output while it runs
    assert np.all(r.peak_memory >= params - 1e-6)
    for d in range(3):
        on = p == d
        if on.any():
            assert r.peak_memory[d] >= params[d] + g.out_bytes[on].max() - 1e-6
    assert r.feasible == bool(np.all(r.peak_memory <= cap))
    assert (r.reason == "") == r.feasible


@pytest.mark.skipif(not HAVE_NUMBA, reason="compares the compiled loop with plain Python")
@settings(max_examples=8, deadline=None)
@given(n=st.integers(2, 40), seed=st.integers(0, 1000))
def test_compiled_and_python_agree(n: int, seed: int) -> None:
    g = layered_dag(n, seed)
    sim = Simulator(g, get_cluster("4xgpu-pcie"))
    rng = np.random.default_rng(seed)
    p = rng.integers(0, 4, n)
    fuse = rng.random(g.num_edges) < 0.5
    fprev, fbytes = np.full(n, -1, dtype=np.int64), np.zeros(n)
    ok = fuse & sim.fusable_edges & (p[g.src] == p[g.dst])
    fprev[g.dst[ok]], fbytes[g.dst[ok]] = g.src[ok], g.edge_bytes[ok]
    args = (
        sim._out_ptr, sim._out_dst, sim._out_eb, sim._in_ptr, sim._in_src, g.topo_order,
        g.topo_rank, g.flops, sim._moved, g.out_bytes, p.astype(np.int64), rng.random(n), fprev,
        fbytes, sim._flop_s, sim._mem_bw, sim._overhead, sim.cluster.bandwidth, sim.cluster.latency,
    )  # fmt: skip
    fast = _simulate(*args)
    slow = _simulate.py_func(*args)  # type: ignore[attr-defined]
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_allclose(a, b)
