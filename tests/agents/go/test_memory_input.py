"""GO reading each graph's memory against a device's capacity (--memory-input): the columns are
the simulator's one-device need (how runs, actors and policy files carry the switch:
test_input_switches.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from actorq.agents.go.actor import GraphTask
from actorq.agents.go.inputs import NODE_FEATURES, InputSpec, memory_columns


def tight_cluster(tmp_path: Path) -> str:
    """Four devices of 40 MB: synthetic-120-s0 does not fit on one."""
    dev = {"flop_s": 1e13, "mem_bw": 7.5e11, "memory": 4e7, "op_overhead": 5e-6}
    path = tmp_path / "tight4.json"
    path.write_text(json.dumps({
        "name": "tight4", "devices": [{"name": f"d{i}", **dev} for i in range(4)],
        "link": {"bandwidth": 1.2e10, "latency": 1e-5},
    }))  # fmt: skip
    return str(path)


@pytest.mark.parametrize("cluster", ["4xgpu-pcie", "tight"])
def test_the_columns_are_the_simulators_one_device_need(tmp_path: Path, cluster: str) -> None:
    name = tight_cluster(tmp_path) if cluster == "tight" else cluster
    plain = GraphTask("synthetic-120-s0", "placement", name)
    task = GraphTask("synthetic-120-s0", "placement", name, inputs=InputSpec(memory=True))
    one = task.env.sim.run(np.zeros(task.num_ops, np.int64))
    assert task.memory_need == pytest.approx(float(one.peak_memory[0]))
    nf = len(NODE_FEATURES)
    np.testing.assert_array_equal(task.inputs.x[:, :nf], plain.inputs.x)
    want = memory_columns(task.env.graph, task.memory_need, float(one.capacity[0]))
    np.testing.assert_array_equal(task.inputs.x[:, nf:], want)
    need = float(task.inputs.x[0, nf])
    assert (need > 1) == (cluster == "tight") == (not one.feasible)
    assert plain.memory_need is None and plain.inputs.x.shape[1] == nf
