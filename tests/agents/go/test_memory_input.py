"""GO reading each graph's memory against a device's capacity (--memory-input): the columns are
the simulator's one-device need, the actors build what the learner builds, runs and policy
files carry the switch, and a policy without it is refused as a warm start in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from actorq import train
from actorq.agents.go.builder import BUILDER
from actorq.agents.go.config import GOConfig
from actorq.cli import main
from actorq.errors import CheckpointError
from actorq.graphopt.actor import GraphActor, GraphTask
from actorq.graphopt.inputs import MEMORY_FEATURES, NODE_FEATURES, memory_columns

ENV = "graphopt:placement/synthetic-120-s0"


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
    task = GraphTask("synthetic-120-s0", "placement", name, memory=True)
    one = task.env.sim.run(np.zeros(task.num_ops, np.int64))
    assert task.memory_need == pytest.approx(float(one.peak_memory[0]))
    nf = len(NODE_FEATURES)
    np.testing.assert_array_equal(task.inputs.x[:, :nf], plain.inputs.x)
    want = memory_columns(task.env.graph, task.memory_need, float(one.capacity[0]))
    np.testing.assert_array_equal(task.inputs.x[:, nf:], want)
    need = float(task.inputs.x[0, nf])
    assert (need > 1) == (cluster == "tight") == (not one.feasible)
    assert plain.memory_need is None and plain.inputs.x.shape[1] == nf


def test_actors_build_the_same_inputs_as_the_learner() -> None:
    cfg = GOConfig(env=ENV, actors=0, memory_input=True, start="m-etf")
    cfg.validate()
    spec = BUILDER.env_spec(cfg)
    learner = BUILDER.make_learner(cfg, spec)
    setup = BUILDER.actor_setup(cfg, spec)
    assert setup.workload["memory_input"] is True
    actor = GraphActor.from_config(
        {"workload": setup.workload, "envs_per_actor": 1, "seed": 0, "actor": 0}, None
    )
    np.testing.assert_array_equal(actor.tasks[0].inputs.x, learner.tasks[0].inputs.x)
    width = len(NODE_FEATURES) + 4 + len(MEMORY_FEATURES)
    assert learner.model.config.memory_input and spec.observation.shape == (width,)


def test_a_memory_run_trains_places_and_fine_tunes_only_from_its_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kw = {"env": ENV, "actors": 0, "batch_graphs": 16, "total_steps": 32, "progress": False,
          "energy": False}  # fmt: skip
    r = train(GOConfig(**kw, memory_input=True, run_dir=str(tmp_path / "mem")))  # type: ignore[arg-type]
    assert r.env_steps >= 32
    out = tmp_path / "placement.json"
    argv = ["graphopt", "place", "--graph", "synthetic-90-s2", "--policy", str(tmp_path / "mem"),
            "--samples", "2", "--no-baselines", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert len(json.loads(out.read_text())["placement"]) == 90
    train(GOConfig(**kw, run_dir=str(tmp_path / "plain")))  # type: ignore[arg-type]
    for src, mem in (("plain", True), ("mem", False)):
        bad = GOConfig(**kw, memory_input=mem, init_from=str(tmp_path / src),  # type: ignore[arg-type]
                       run_dir=str(tmp_path / f"ft-{src}"))  # fmt: skip
        with pytest.raises(CheckpointError, match="--memory-input"):
            train(bad)
    capsys.readouterr()
