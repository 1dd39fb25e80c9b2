"""GO's imitation warm start (--imitate): it drives the greedy decision to the baseline's, runs
once at the start of a fresh run (never on resume, eval or export), relabels devices only where
that changes nothing, and bad values are one-line errors."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actorq import train
from actorq.agents.go import imitation, targets
from actorq.agents.go.actor import GraphTask
from actorq.agents.go.builder import BUILDER
from actorq.agents.go.config import GOConfig
from actorq.agents.go.learning import GOLearner
from actorq.errors import ConfigError
from actorq.graphopt.baselines import CUT_WEIGHTS

ENV = "graphopt:placement/synthetic-120-s0"


def _learner(**kw: Any) -> tuple[GOConfig, GOLearner]:
    cfg = GOConfig(**{"env": ENV, "actors": 0, **kw})
    cfg.validate()
    return cfg, BUILDER.make_learner(cfg, BUILDER.env_spec(cfg))


def _imitate_rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["metric"].startswith("imitate/")]


def test_imitation_drives_the_greedy_decision_to_the_baselines() -> None:
    """120 ops, m-ETF's 4-device placement: after 150 steps the learner's greedy placement and
    the actors' int8 snapshot's agree with it on >= 95% of ops and run within 3% of its step
    time; an untrained policy is far from it."""
    cfg, learner = _learner(imitate="m-etf", imitate_steps=150, imitate_lr=3e-3)
    task = learner.tasks[0]
    goal = targets.target(task, "m-etf")
    assert len(np.unique(goal.placement)) == 4  # a real split, not one device
    before = imitation.greedy_placements(learner.model, learner._inputs)[0]
    assert (before == goal.placement).mean() < 0.8
    m = learner.warm_start()
    assert m["imitate/accuracy"] >= 0.95 and m["imitate/time_ratio"] <= 1.03, m
    assert m["imitate/steps"] == 150 and m["imitate/sim_calls"] == 3  # score, judge, check
    (rec,) = learner.imitation
    assert rec["baseline"] == "m-etf" and rec["agreement"] >= 0.95
    # PPO's per-graph reward baseline starts at the imitated decision's reward (-sqrt(S/S_ref))
    ref = task.env.reference_time
    assert learner.baseline[0] == pytest.approx(-np.sqrt(rec["greedy_time"] / ref))
    assert rec["target_time"] == pytest.approx(goal.time)
    # what the actors run: the int8 snapshot's greedy decision
    io = BUILDER.policy_io(cfg, BUILDER.env_spec(cfg), learner)
    gain = float(io.evaluate(io.snapshot(0, "int8"), 1, 0)[0])
    int8_time = task.env.reference_time * (1.0 - gain)
    assert int8_time <= 1.03 * goal.time, (int8_time, goal.time)


def test_with_position_octaves_the_actors_int8_policy_is_the_imitated_split() -> None:
    """``pos_freqs``: the learner's network and the actors' exported int8 one both carry the
    octaves; 30 steps fit m-ETF's split on every op (measured: 96% without them) and the
    snapshot the actors run places exactly like it."""
    cfg, learner = _learner(imitate="m-etf", imitate_steps=30, imitate_lr=3e-3, pos_freqs=10)
    assert learner.model.config.pos_freqs == 10
    m = learner.warm_start()
    assert m["imitate/accuracy"] == 1.0 and m["imitate/time_ratio"] == pytest.approx(1.0), m
    io = BUILDER.policy_io(cfg, BUILDER.env_spec(cfg), learner)
    gain = float(io.evaluate(io.snapshot(0, "int8"), 1, 0)[0])
    task = learner.tasks[0]
    int8_time = task.env.reference_time * (1.0 - gain)
    assert int8_time == pytest.approx(targets.target(task, "m-etf").time, rel=1e-6)


def test_a_fresh_run_imitates_once_and_resume_eval_export_do_not(
    tiny: Callable[..., GOConfig], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    real = imitation.warm_start

    def counted(*a: Any, **k: Any) -> Any:
        calls.append("warm_start")
        return real(*a, **k)

    monkeypatch.setattr(imitation, "warm_start", counted)
    cfg = tiny("go", env=ENV, imitate="best", imitate_steps=40, total_steps=64,
               eval_every=8, batch_graphs=32)  # fmt: skip
    r = train(cfg)
    run = Path(r.run_dir)
    assert calls == ["warm_start"]
    rows = _imitate_rows(run)
    names = {row["metric"] for row in rows}
    assert {"imitate/accuracy", "imitate/loss", "imitate/sim_calls"} <= names
    assert all(row["step"] == "0" for row in rows)
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    (rec,) = state["learner"]["imitation"]
    assert rec["graph"] == "synthetic-120-s0" and rec["baseline"] in targets.BEST_OF
    # the first published snapshot is the imitated policy: the first evaluation (8 decisions,
    # before any update) is the greedy imitation's gain over the reference
    with open(run / "metrics.csv", newline="") as f:
        evals = [r for r in csv.DictReader(f) if r["metric"] == "charts/eval_return"]
    first_gain = float(evals[0]["value"])
    ref = GraphTask("synthetic-120-s0", "placement", "4xgpu-pcie").env.reference_time
    assert first_gain == pytest.approx(1 - rec["greedy_time"] / ref, abs=0.03)
    # resume: no second warm start, and the records survive the checkpoint
    train(tiny("go", env=ENV, total_steps=128, resume=str(run), run_dir=None))
    assert calls == ["warm_start"] and len(_imitate_rows(run)) == len(rows)
    again = json.loads((run / "checkpoint" / "state.json").read_text())
    assert again["learner"]["imitation"] == state["learner"]["imitation"]
    # eval and export build the learner from the checkpoint: no warm start either
    from actorq.cli import main

    assert main(["eval", str(run)]) == 0
    assert main(["export", str(run), "--out", str(tmp_path / "go.onnx")]) == 0
    assert calls == ["warm_start"]


def test_no_imitation_by_default() -> None:
    _, learner = _learner()
    assert learner.warm_start() == {} and learner.imitation == []
    assert GOConfig().imitate == "none"


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"imitate": "anneal"}, "--imitate must be one of none, best, single"),
        ({"imitate": "HEFT"}, "--imitate must be one of"),
        ({"imitate": 3}, "--imitate has the wrong type"),
        ({"imitate": "heft", "env": "graphopt:scheduling/gnmt-s"}, "placement or joint task"),
        ({"imitate": "best", "env": "graphopt:fusion/synthetic-120-s0"}, "placement or joint"),
        ({"imitate_steps": -1}, "--imitate-steps must be in [0, 1000000]"),
        ({"imitate_steps": 1.5}, "--imitate-steps has the wrong type"),
        ({"imitate_lr": 0.0}, "--imitate-lr must be > 0"),
        ({"imitate_lr": float("nan")}, "--imitate-lr must be a finite number"),
        ({"imitate_relabel": "yes"}, "--imitate-relabel has the wrong type"),
        ({"imitate": "heft", "imitate_margin": 0.1}, "--imitate best, not 'heft'"),
        ({"imitate_margin": 0.1}, "--imitate best, not 'none'"),
        ({"imitate": "best", "imitate_margin": -0.1}, "--imitate-margin must be in [0, 10]"),
        ({"imitate": "best", "imitate_margin": float("inf")}, "--imitate-margin must be a finite"),
    ],
)
def test_bad_imitation_settings_are_one_line_errors(kw: dict[str, Any], msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        GOConfig(**kw).validate()
    assert msg in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_an_unfit_imitation_warns_and_a_fit_one_does_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Three steps cannot fit m-ETF's split: the warm start says so (PPO would lose the
    placement from the flat policy's samples); 150 steps fit it, and nothing is said."""
    _, short = _learner(imitate="m-etf", imitate_steps=3, imitate_lr=3e-3)
    assert short.warm_start()["imitate/accuracy"] < 0.99
    assert "imitate: warning: only" in capsys.readouterr().out
    _, full = _learner(imitate="m-etf", imitate_steps=150, imitate_lr=3e-3)
    assert full.warm_start()["imitate/accuracy"] >= 0.99
    assert "warning" not in capsys.readouterr().out


def test_joint_imitation_fits_placement_priorities_and_fusion() -> None:
    """The joint task's target is a baseline's whole decision: its placement, its priorities
    as levels, and greedy fusion where that is faster. On 120 ops `best` is the single device
    with fusion (5.3 ms against HEFT's 9.0): the fit reaches its step time."""
    env = "graphopt:joint/synthetic-120-s0"
    _, learner = _learner(env=env, imitate="best", imitate_steps=150, imitate_lr=3e-3)
    task = learner.tasks[0]
    goal = targets.target(task, "best")
    heft = targets.target(task, "heft")
    assert goal.time < heft.time and goal.fused
    # each baseline (heft-cut's sweep once per weight), then fused and not
    assert goal.sim_calls == 3 * len(targets.BEST_OF) + len(CUT_WEIGHTS)
    fuse = goal.actions[:, 2].astype(bool)
    assert fuse.any() and not (fuse & (task.mask[:, 2] == 0)).any()  # fusable ops only
    # HEFT's target levels follow its upward ranks
    rank = heft_rank(task)
    assert np.corrcoef(heft.actions[:, 1], rank)[0, 1] > 0.9
    m = learner.warm_start()
    assert m["imitate/accuracy"] >= 0.95 and m["imitate/time_ratio"] <= 1.03, m
    (rec,) = learner.imitation
    assert rec["fused"] and rec["agreement"] >= 0.95


def heft_rank(task: GraphTask) -> np.ndarray:
    from actorq.graphopt.baselines import upward_rank

    return upward_rank(task.env.sim)
