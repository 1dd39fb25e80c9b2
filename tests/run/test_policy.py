"""actorq.load: a run's policy predicts what its actors would do, evaluates as `actorq eval`
does, and exports what `actorq export` writes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import actorq
from actorq.cli import main
from actorq.errors import ActorQError
from actorq.experiment import train
from actorq.quant.runtimes import decode_snapshot, make_runtime
from tests.agents.pixel_task import PIXEL_RUN, Pixels, pixel_env  # noqa: F401 (the fixture)


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
    with pytest.raises(ActorQError, match=r"shape \(4,\) or a batch \(n, 4\), got \(5,\)"):
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
    action = sess.run(["action"], {"obs": obs})[0]  # the env's action, in the graph
    np.testing.assert_array_equal(action, policy.predict(obs))
    meta = sess.get_modelmeta().custom_metadata_map
    assert meta["actorq.action"] == "argmax of out"
    with pytest.raises(ActorQError, match=r"exists; pass force=True"):
        policy.export(out)
    policy.export(out, force=True)


def test_export_never_replaces_a_file_of_its_run(dqn_run: Path, tmp_path: Path) -> None:
    config = (dqn_run / "config.json").read_bytes()
    policy = actorq.load(dqn_run)
    with pytest.raises(ActorQError, match=r"where the run .* writes its own files"):
        policy.export(dqn_run / "config.json", force=True)
    assert main(["export", str(dqn_run), "--out", str(dqn_run / "config.json"), "--force"]) == 2
    assert (dqn_run / "config.json").read_bytes() == config
    with pytest.raises(ActorQError, match=r"where the run .* writes its own files"):
        policy.export(dqn_run / "checkpoint" / "policy.onnx")  # not even a new one
    new = policy.export(dqn_run / "policy.onnx")  # a file beside the run's is the user's
    assert policy.export(new, force=True) == new  # and replaced with force, as anywhere
    new.unlink()


@pytest.mark.parametrize(
    ("episodes", "seed", "says"),
    [
        (0, 0, r"episodes must be in \[1, 100000\], got 0"),
        (2.5, 0, r"episodes must be in \[1, 100000\], got 2.5"),
        ("3", 0, r"episodes must be in \[1, 100000\], got '3'"),
        (True, 0, r"episodes must be in \[1, 100000\], got True"),
        (2, -1, r"seed must be in \[0, 2\*\*32 - 1 - episodes\], got -1"),
        (2, 1.5, r"seed must be in .*got 1.5"),
        (2, 2**40, r"seed must be in .*got 1099511627776"),
    ],
)
def test_evaluate_takes_what_actorq_eval_takes(
    dqn_run: Path, episodes: Any, seed: Any, says: str
) -> None:
    with pytest.raises(ActorQError, match=says):
        actorq.load(dqn_run).evaluate(episodes, seed=seed)


def test_auto_and_an_empty_precision_are_refused_when_loading(dqn_run: Path) -> None:
    with pytest.raises(ActorQError, match="'auto' chooses while training"):
        actorq.load(dqn_run, precision="auto")
    with pytest.raises(ActorQError):
        actorq.load(dqn_run, precision="")
    assert main(["eval", str(dqn_run), "--precision", "auto"]) == 2


def test_a_path_too_long_to_look_at_is_one_line(dqn_run: Path, tmp_path: Path) -> None:
    long = tmp_path / ("x" * 300)
    with pytest.raises(ActorQError, match="File name too long"):
        actorq.load(long)
    assert main(["eval", str(long)]) == 2
    assert main(["export", str(dqn_run), "--out", str(tmp_path / ("y" * 300) / "p.onnx")]) == 2
    named = actorq.load(dqn_run).export(tmp_path / ("z" * 250 + ".onnx"))  # a long, legal name
    assert named.is_file()


def test_eval_runs_the_runs_own_runtime_unless_told(
    dqn_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actorq.run as run_pkg

    seen: list[Any] = []

    load = run_pkg.load_run_policy

    def spy(run_dir: str, precision: Any, runtime: Any = None, **kw: Any) -> Any:
        seen.append(runtime)
        return load(run_dir, precision, runtime, **kw)

    monkeypatch.setattr(run_pkg, "load_run_policy", spy)
    assert main(["eval", str(dqn_run), "--episodes", "1"]) == 0
    assert main(["eval", str(dqn_run), "--episodes", "1", "--runtime", "numpy"]) == 0
    assert seen == [None, "numpy"]  # None: the run's (what actorq.load(...).evaluate() runs)


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
    # the exported model's `action` is predict's, in the env's bounds: not [-1, 1]
    out = policy.export(Path(r.run_dir).parent / "pendulum.onnx")
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    raw, action = sess.run(["out", "action"], {"obs": obs})
    np.testing.assert_allclose(action, greedy, rtol=0, atol=1e-6)
    assert np.abs(action).max() > np.abs(np.clip(raw, -1, 1)).max()  # scaled to torque ±2
    assert "mapped to [[-2.0], [2.0]]" in sess.get_modelmeta().custom_metadata_map["actorq.action"]


def test_eval_says_the_episodes_it_ran(dqn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`actorq eval --episodes 3` said "(held-out, 10 ep)", the training config's count
    (issue 49 item 18): it states the episodes it ran, once ("over 3 episodes (held-out, 3
    ep; ..." said it twice)."""
    assert main(["eval", str(dqn_run), "--precision", "fp32", "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "over 3 episodes (held-out; min " in out and " ep;" not in out


@pytest.fixture(scope="module")
def pixel_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PPO run on the small pixel task with int8 convolutional actors (the Atari path)."""
    import gymnasium as gym

    from tests.agents.pixel_task import ENV

    run = tmp_path_factory.mktemp("pixels") / "run"
    gym.register(ENV, entry_point=Pixels)
    try:
        cfg = actorq.PPOConfig(
            **{**PIXEL_RUN, "precision": "int8", "total_steps": 256, "eval_episodes": 1},
            actors=0, num_steps=32, minibatch_size=32, run_dir=str(run), progress=False,
            log_every=1e9, energy=False,
        )  # fmt: skip
        train(cfg)
    finally:
        gym.registry.pop(ENV)
    return run


@pytest.mark.usefixtures("pixel_env")
def test_a_pixel_policy_predicts_as_its_actors_run_it(pixel_run: Path) -> None:
    """predict() ran MLP snapshots only: a pixel (Atari) run's policy was an error."""
    policy = actorq.load(pixel_run)
    assert policy.precision == "int8"
    frames = np.random.default_rng(0).integers(0, 256, (16, 4, 36, 36)).astype(np.uint8)
    batch = policy.predict(frames)
    # the run's own snapshot, in the runtime its actors use
    runtime = make_runtime(decode_snapshot(policy._data))
    np.testing.assert_array_equal(batch, runtime(frames).argmax(axis=1))
    assert [int(policy.predict(f)) for f in frames] == batch.tolist()
    np.testing.assert_array_equal(policy.predict(frames.astype(np.float64)), batch)  # 0..255
    sampled = [policy.predict(frames, deterministic=False, seed=s) for s in (0, 1, 0)]
    assert all(set(a.tolist()) <= {0, 1} for a in sampled)
    again = actorq.load(pixel_run)  # a seed's stream starts anew, whatever came before
    np.testing.assert_array_equal(again.predict(frames, deterministic=False, seed=1), sampled[1])
    for seed in (-1, 1.5, None, True, 2**64):
        with pytest.raises(ActorQError, match="seed must be a whole number >= 0"):
            policy.predict(frames, deterministic=False, seed=seed)  # type: ignore[arg-type]
    assert policy.predict(np.zeros((0, 4, 36, 36), np.uint8)).shape == (0,)


@pytest.mark.parametrize(
    ("obs", "says"),
    [
        (np.zeros((4, 36, 35), np.uint8), "got \\(4, 36, 35\\)"),
        (np.zeros((1, 1, 4, 36, 36), np.uint8), "or a batch"),
        (np.full((4, 36, 36), 256.0), "whole numbers in \\[0, 255\\]"),
        (np.full((4, 36, 36), 0.5), "whole numbers"),
        (np.full((4, 36, 36), np.nan), "whole numbers"),
        ("frames", "numbers, got dtype <U6"),
        (None, "numbers, got dtype object"),
        ([[1, 2], [3]], "a rectangular array"),
    ],
)
@pytest.mark.usefixtures("pixel_env")
def test_bad_pixels_are_one_line(pixel_run: Path, obs: Any, says: str) -> None:
    with pytest.raises(ActorQError, match=says):
        actorq.load(pixel_run).predict(obs)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    obs=hnp.arrays(
        st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.bool_, np.complex64]),
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
    )
    | st.builds(np.full, st.sampled_from([(4,), (2, 4), (3,)]), st.floats() | st.integers()),
)
def test_predict_takes_any_array_or_says_why_in_one_line(dqn_run: Path, obs: np.ndarray) -> None:
    policy = actorq.load(dqn_run, precision="int8")
    try:
        action = policy.predict(obs)
    except ActorQError as e:
        assert "\n" not in str(e)
    else:
        x = np.asarray(obs)
        assert np.isfinite(x.astype(np.float32)).all() and x.shape[-1] == 4
        assert np.shape(action) == x.shape[:-1] and set(np.ravel(action).tolist()) <= {0, 1}


def test_the_error_class_is_public() -> None:
    assert actorq.ActorQError is ActorQError
