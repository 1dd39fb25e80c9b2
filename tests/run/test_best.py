"""A run keeps its best policy beside the latest checkpoint (issue 49 item 7): training on, a
resume included, never loses it; eval, export and actorq.load choose either."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

import actorq
from actorq.cli import main
from actorq.errors import CheckpointError
from actorq.experiment import train
from actorq.rundir import RunDir


def _weights(d: Path) -> dict[str, np.ndarray]:
    return load_file(str(d / "learner.safetensors"))


def test_the_best_evaluation_is_kept_and_survives_training_on(
    tiny: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tiny("dqn", total_steps=3000, min_replay_size=200, eval_every=500, eval_episodes=3,
               stop_at_target=False, seed=1)  # fmt: skip
    r = train(cfg)
    run = RunDir(Path(r.run_dir))
    state = json.loads((run.best / "state.json").read_text())["counters"]
    assert run.best.is_dir() and state["best_eval"] is not None
    # the best is the highest periodic evaluation logged, at the step it was logged
    rows = [ln.split(",") for ln in run.metrics.read_text().splitlines()[1:]]
    logged = [(int(s), float(v)) for s, _, name, v in rows if name == "charts/eval_return"]
    best_step, best = max(logged, key=lambda sv: (sv[1], -sv[0]))
    assert state["best_eval"] == pytest.approx(best, rel=1e-5)
    assert state["best_eval_steps"] == best_step
    kept = _weights(run.best)

    # a resume says what it will do, trains on and keeps the best unless it is beaten
    capsys.readouterr()
    r2 = train(tiny("dqn", resume=str(run), total_steps=3500, eval_every=500, eval_episodes=3,
                    stop_at_target=False, progress=True))  # fmt: skip
    out = capsys.readouterr().out
    assert "resuming at" in out and "to --total-steps 3,500" in out
    assert "its best policy (eval" in " ".join(out.split())  # the console wraps long lines
    after = json.loads((run.best / "state.json").read_text())["counters"]
    if after["best_eval_steps"] == best_step:  # not beaten: the same weights
        assert all(np.array_equal(kept[k], v) for k, v in _weights(run.best).items())
    else:
        assert after["best_eval"] > state["best_eval"]
    assert r2.env_steps >= 3500


def test_eval_export_and_load_choose_latest_or_best(
    tiny: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = train(tiny("dqn", total_steps=1500, min_replay_size=200, eval_every=500, eval_episodes=2,
                   stop_at_target=False))  # fmt: skip
    run = str(r.run_dir)
    assert main(["eval", run, "--which", "best", "--episodes", "2"]) == 0
    assert "mean return" in capsys.readouterr().out
    assert main(["export", run, "--which", "best", "--out", str(tmp_path / "b.onnx")]) == 0
    best, latest = actorq.load(run, which="best"), actorq.load(run)
    obs = np.random.default_rng(0).uniform(-0.1, 0.1, (8, 4)).astype(np.float32)
    assert best.predict(obs).shape == latest.predict(obs).shape == (8,)


def test_a_run_without_evaluations_has_no_best_and_says_so(tiny: Callable[..., Any]) -> None:
    r = train(tiny("dqn", total_steps=600, min_replay_size=200))  # eval_every 10k: none ran
    with pytest.raises(CheckpointError, match="has no best policy yet"):
        actorq.load(r.run_dir, which="best")
    assert main(["eval", str(r.run_dir), "--which", "best"]) == 2
