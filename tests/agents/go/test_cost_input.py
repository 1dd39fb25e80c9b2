"""GO reading each graph's costs as shares of its own work (--cost-input): the columns are the
simulator's op times on the fastest device over the slowest link (how runs, actors and policy
files carry the switch: test_input_switches.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from actorq.agents.go.actor import GraphTask
from actorq.agents.go.inputs import (
    COST_FEATURES,
    MEMORY_FEATURES,
    NODE_FEATURES,
    InputSpec,
    cost_columns,
)


def mixed_cluster(tmp_path: Path) -> str:
    """Device 1 twice as fast as device 0; the link 0-2 slower and later than the others."""
    dev = {"flop_s": 1e13, "mem_bw": 7.5e11, "memory": 1.6e10, "op_overhead": 5e-6}
    fast = {**dev, "flop_s": 2e13, "mem_bw": 1.5e12}
    path = tmp_path / "mixed3.json"
    path.write_text(json.dumps({
        "name": "mixed3", "devices": [{"name": "a", **dev}, {"name": "b", **fast},
                                      {"name": "c", **dev}],
        "link": {"bandwidth": 1.2e10, "latency": 1e-5},
        "links": [{"src": 0, "dst": 2, "bandwidth": 3e9, "latency": 4e-5}],
    }))  # fmt: skip
    return str(path)


@pytest.mark.parametrize("cluster", ["4xgpu-pcie", "mixed", "1xgpu"])
def test_the_columns_are_the_fastest_devices_times_over_the_slowest_link(
    tmp_path: Path, cluster: str
) -> None:
    name = mixed_cluster(tmp_path) if cluster == "mixed" else cluster
    plain = GraphTask("synthetic-120-s0", "placement", name)
    spec = InputSpec(memory=True, cost=True)
    task = GraphTask("synthetic-120-s0", "placement", name, inputs=spec)
    nf, nm = len(NODE_FEATURES), len(MEMORY_FEATURES)
    np.testing.assert_array_equal(task.inputs.x[:, :nf], plain.inputs.x)
    assert task.inputs.x.shape[1] == nf + nm + len(COST_FEATURES)
    sim = task.env.sim
    link = {"4xgpu-pcie": (1.2e10, 1e-5), "mixed": (3e9, 4e-5), "1xgpu": (float("inf"), 0.0)}
    want = cost_columns(
        task.env.graph, sim.op_times(1 if cluster == "mixed" else 0), *link[cluster]
    )
    np.testing.assert_array_equal(task.inputs.x[:, nf + nm :], want)
    sent = task.inputs.x[:, -1]
    assert (sent == 0).all() if cluster == "1xgpu" else sent.max() > 0
