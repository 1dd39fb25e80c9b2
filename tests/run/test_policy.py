"""actorq.load: a run's policy predicts what its actors would do, evaluates as `actorq eval`
does, and exports what `actorq export` writes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

import actorq
from actorq.cli import main
from actorq.errors import ActorQError
from actorq.experiment import train


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("dqn") / "run"
    cfg = actorq.DQNConfig(
        env="gym:CartPole-v1", actors=0, total_steps=1500, min_replay_size=200,
        run_dir=str(run), progress=False, log_every=1e9, energy=False, seed=3,
    )  # fmt: skip
    train(cfg)
    return run


def test_predict_is_the_greedy_action_for_one_or_many(dqn_run: Path) -> None:
    policy = actorq.load(dqn_run, precision="int8")
    assert policy.precision == "int8" and policy.config.agent == "dqn"
    obs = np.random.default_rng(0).uniform(-0.2, 0.2, (32, 4)).astype(np.float32)
    batch = policy.predict(obs)
    assert batch.shape == (32,) and set(np.unique(batch)) <= {0, 1}
    assert [int(policy.predict(o)) for o in obs] == batch.tolist()
    with pytest.raises(ActorQError, match="obs_dim 4"):
        policy.predict(np.zeros(5, np.float32))


def test_evaluate_is_actorq_eval(dqn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    returns = actorq.load(dqn_run).evaluate(episodes=3, seed=7)
    assert main(["eval", str(dqn_run), "--episodes", "3", "--seed", "7"]) == 0
    printed = capsys.readouterr().out
    assert f"mean return {returns.mean():.3g}" in printed


def test_export_runs_in_onnxruntime_as_predict_does(dqn_run: Path, tmp_path: Path) -> None:
    policy = actorq.load(dqn_run, precision="int8")
    out = policy.export(tmp_path / "p.onnx")
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    obs = np.random.default_rng(1).uniform(-0.2, 0.2, (16, 4)).astype(np.float32)
    q = sess.run(None, {"obs": obs})[0]
    np.testing.assert_array_equal(q.argmax(axis=1), policy.predict(obs))
    with pytest.raises(ActorQError, match="exists; pass --force"):
        policy.export(out)
    policy.export(out, force=True)


def test_a_continuous_policy_acts_in_the_envs_bounds(tiny: Callable[..., Any]) -> None:
    r = train(tiny("ppo", env="gym:Pendulum-v1", total_steps=512, num_steps=128))
    policy = actorq.load(r.run_dir, precision="fp32")
    obs = np.random.default_rng(2).standard_normal((64, 3)).astype(np.float32)
    greedy = policy.predict(obs)
    sampled = policy.predict(obs, deterministic=False, seed=0)
    assert greedy.shape == sampled.shape == (64, 1)
    assert np.all(np.abs(greedy) <= 2.0) and np.all(np.abs(sampled) <= 2.0)  # torque ±2
    assert not np.array_equal(greedy, sampled)  # sampling from the Gaussian, not its mean
    np.testing.assert_array_equal(greedy, policy.predict(obs))  # deterministic is repeatable


def test_eval_says_the_episodes_it_ran(dqn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`actorq eval --episodes 3` said "(held-out, 10 ep)", the training config's count
    (issue 49 item 18): it states the episodes it ran."""
    assert main(["eval", str(dqn_run), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "over 3 episodes (held-out, 3 ep;" in out and "10 ep" not in out
