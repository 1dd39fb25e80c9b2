"""The policy's optional input columns (--memory-input) travel one way: the
actors build what the learner builds, runs and policy files carry the switch, `place` reads
it, and a policy of another kind is refused as a warm start in one line, writing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from actorq import train
from actorq.agents.go.actor import GraphActor
from actorq.agents.go.builder import BUILDER
from actorq.agents.go.config import GOConfig
from actorq.agents.go.inputs import MEMORY_FEATURES, NODE_FEATURES
from actorq.cli import main
from actorq.errors import CheckpointError

ENV = "graphopt:placement/synthetic-120-s0"
#: switch -> (its columns, its flag)
SWITCHES = {"memory_input": (MEMORY_FEATURES, "--memory-input")}


@pytest.mark.parametrize("switch", SWITCHES)
def test_actors_build_the_same_inputs_as_the_learner(switch: str) -> None:
    cfg = GOConfig(env=ENV, actors=0, **{switch: True})  # type: ignore[arg-type]
    cfg.validate()
    spec = BUILDER.env_spec(cfg)
    learner = BUILDER.make_learner(cfg, spec)
    setup = BUILDER.actor_setup(cfg, spec)
    assert setup.workload[switch] is True
    actor = GraphActor.from_config(
        {"workload": setup.workload, "envs_per_actor": 1, "seed": 0, "actor": 0}, None
    )
    np.testing.assert_array_equal(actor.tasks[0].inputs.x, learner.tasks[0].inputs.x)
    width = len(NODE_FEATURES) + len(SWITCHES[switch][0])
    assert getattr(learner.model.config, switch) and spec.observation.shape == (width,)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny runs: without a switch, and with each."""
    root = tmp_path_factory.mktemp("switches")
    for name, kw in (("plain", {}), ("memory_input", {"memory_input": True})):
        train(GOConfig(env=ENV, actors=0, batch_graphs=16, total_steps=32, progress=False,
                       energy=False, run_dir=str(root / name), **kw))  # type: ignore[arg-type]  # fmt: skip
    return root


@pytest.mark.parametrize("switch", SWITCHES)
def test_a_run_with_the_switch_places_and_fine_tunes_only_from_its_kind(
    runs: Path, tmp_path: Path, switch: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "placement.json"
    argv = ["graphopt", "place", "--graph", "synthetic-90-s2", "--policy", str(runs / switch),
            "--samples", "2", "--no-baselines", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert len(json.loads(out.read_text())["placement"]) == 90
    # each other kind (their widths all differ), and this kind into a run without the switch
    kinds = [(src, switch) for src in ("plain", *SWITCHES) if src != switch]
    for src, on in [*kinds, (switch, "")]:
        ft = tmp_path / f"ft-{src}"
        bad = GOConfig(env=ENV, actors=0, batch_graphs=16, total_steps=32, progress=False,
                       energy=False, init_from=str(runs / src), run_dir=str(ft),
                       **({on: True} if on else {}))  # type: ignore[arg-type]  # fmt: skip
        with pytest.raises(CheckpointError, match=SWITCHES[switch][1]):
            train(bad)
        assert not ft.exists()
    capsys.readouterr()
