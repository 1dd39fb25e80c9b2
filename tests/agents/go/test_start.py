"""GO deciding from a start placement (--start, Placeto's formulation): the start is the
baseline's placement as --imitate picks it, it reaches the network on the learner's and the
actors' side alike, imitating it fits through one learned gain, and policy files and
``actorq graphopt place`` carry it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actorq import train
from actorq.agents.go import targets
from actorq.agents.go.actor import GraphActor, GraphTask
from actorq.agents.go.builder import BUILDER
from actorq.agents.go.config import GOConfig
from actorq.agents.go.inputs import NODE_FEATURES, InputSpec
from actorq.agents.go.networks import GOPolicy, GOPolicyConfig
from actorq.agents.go.pretrained import load_policy_file, load_policy_run, save_policy
from actorq.cli import main
from actorq.errors import ConfigError, GraphError
from actorq.run import load_run_config

ENV = "graphopt:placement/synthetic-120-s0"


def test_the_start_is_the_imitation_target_as_one_hot_columns() -> None:
    plain = GraphTask("synthetic-120-s0", "placement", "4xgpu-pcie")
    task = GraphTask("synthetic-120-s0", "placement", "4xgpu-pcie", inputs=InputSpec("m-etf"))
    goal = targets.target(plain, "m-etf")
    assert task.start.baseline == "m-etf"
    np.testing.assert_array_equal(task.start.placement, goal.placement)
    nf = len(NODE_FEATURES)
    assert task.inputs.x.shape == (120, nf + 4)
    np.testing.assert_array_equal(task.inputs.x[:, :nf], plain.inputs.x)
    np.testing.assert_array_equal(task.inputs.x[:, nf:].argmax(1), goal.placement)
    assert plain.start is None and plain.inputs.x.shape == (120, nf)


def test_actors_build_the_same_inputs_as_the_learner() -> None:
    cfg = GOConfig(env=ENV, actors=0, start="best")
    cfg.validate()
    spec = BUILDER.env_spec(cfg)
    learner = BUILDER.make_learner(cfg, spec)
    setup = BUILDER.actor_setup(cfg, spec)
    assert setup.workload["start"] == "best"
    actor = GraphActor.from_config(
        {"workload": setup.workload, "envs_per_actor": 1, "seed": 0, "actor": 0}, None
    )
    np.testing.assert_array_equal(actor.tasks[0].inputs.x, learner.tasks[0].inputs.x)
    assert learner.model.config.start_input and spec.observation.shape == (len(NODE_FEATURES) + 4,)


def test_imitating_the_start_fits_and_the_actors_int8_policy_keeps_it() -> None:
    """With the start as input, imitating that same placement is learning to keep it: a few
    steps fit every op (without the input the network needs position octaves to fit a split),
    and the int8 snapshot the actors run places exactly like it."""
    cfg = GOConfig(env=ENV, actors=0, start="m-etf", imitate="m-etf", imitate_steps=30,
                   imitate_lr=3e-3)  # fmt: skip
    cfg.validate()
    spec = BUILDER.env_spec(cfg)
    learner = BUILDER.make_learner(cfg, spec)
    m = learner.warm_start()
    assert m["imitate/accuracy"] == 1.0, m
    assert float(learner.model.start_gain.detach()) > 0.0  # the skip is part of the fit
    io = BUILDER.policy_io(cfg, spec, learner)
    task = learner.tasks[0]
    gain = float(io.evaluate(io.snapshot(0, "int8"), 1, 0)[0])
    assert task.env.reference_time * (1.0 - gain) == pytest.approx(task.start.time, rel=1e-6)


def test_a_start_run_fine_tunes_only_from_a_start_run(
    tiny: Callable[..., GOConfig], tmp_path: Path
) -> None:
    run = Path(train(tiny("go", env=ENV, start="best", total_steps=32, batch_graphs=32)).run_dir)
    model, info = load_policy_run(run, load_run_config(run, device="cpu"))
    assert info.start == "best" and model.config.start_input
    # the network's input differs: fine-tuning a start run without --start is refused
    with pytest.raises(Exception, match=r"--init-from .* start placement"):
        train(tiny("go", env=ENV, init_from=str(run), total_steps=32, batch_graphs=32,
                   run_dir=str(tmp_path / "ft")))  # fmt: skip
    r = train(tiny("go", env=ENV, start="best", init_from=str(run), total_steps=32,
                   batch_graphs=32, run_dir=str(tmp_path / "ft2")))  # fmt: skip
    assert r.env_steps >= 32


def test_policy_files_carry_the_start_and_place_decides_from_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.manual_seed(0)
    model = GOPolicy(GOPolicyConfig(num_devices=4, hidden=32, ffn=64, start_input=True))
    with torch.no_grad():
        model.start_gain.fill_(100.0)  # keeps the start: place's greedy decision is m-ETF's
    kw: dict[str, Any] = {"task": "placement", "cluster": "4xgpu-pcie", "trained_on": ["x"],
                          "command": "test"}  # fmt: skip
    path = save_policy(model, tmp_path / "p.safetensors", **kw, start="m-etf")
    _, info = load_policy_file(path)
    assert info.start == "m-etf"
    out = tmp_path / "placement.json"
    argv = ["graphopt", "place", "--graph", "synthetic-120-s0", "--policy", str(path),
            "--samples", "0", "--no-baselines", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    import json

    res = json.loads(out.read_text())
    task = GraphTask("synthetic-120-s0", "placement", "4xgpu-pcie", inputs=InputSpec("m-etf"))
    assert res["greedy"]["score_s"] == pytest.approx(task.start.time, rel=1e-9)
    with pytest.raises(ValueError, match="start"):  # a file must say what its network reads
        save_policy(model, tmp_path / "q.safetensors", **kw)
    capsys.readouterr()


def test_a_file_whose_start_does_not_fit_its_network_is_one_line(tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    model = GOPolicy(GOPolicyConfig(num_devices=4, hidden=32, ffn=64, start_input=True))
    kw: dict[str, Any] = {"task": "placement", "cluster": "4xgpu-pcie", "trained_on": ["x"],
                          "command": "test"}  # fmt: skip
    path = save_policy(model, tmp_path / "p.safetensors", **kw, start="best")
    with safe_open(str(path), framework="pt") as f:
        meta: dict[str, Any] = dict(f.metadata())
    tensors = load_file(str(path))
    for start in ("none", "anneal", "1"):
        bad = tmp_path / f"bad-{start}.safetensors"
        save_file(tensors, str(bad), metadata={**meta, "start": start})
        with pytest.raises(GraphError, match="does not fit") as e:
            load_policy_file(bad)
        assert "\n" not in str(e.value)
    bad = tmp_path / "flag.safetensors"
    cfg = meta["config"].replace('"start_input": true', '"start_input": 1')
    save_file(tensors, str(bad), metadata={**meta, "config": cfg})
    with pytest.raises(GraphError, match="true or false"):
        load_policy_file(bad)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"start": "anneal"}, "--start must be one of none, best"),
        ({"start": "best", "env": "graphopt:scheduling/synthetic-120-s0"}, "placement or joint"),
        ({"start": 2}, "--start has the wrong type"),
    ],
)
def test_bad_start_settings_are_one_line_errors(kw: dict[str, Any], msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        GOConfig(**kw).validate()
    assert msg in str(e.value) and "\n" not in str(e.value), str(e.value)
