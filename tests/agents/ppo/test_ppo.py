"""PPO: GAE, the importance ratio against the actors' recorded log-probs, learning CartPole,
determinism, resume, local processes; the queue's staleness bound is in tests/replay."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

from actorq import PPOConfig, train
from actorq.agents import builder_for
from actorq.agents.ppo.learning import MLPPPOLearner, RunningMeanStd, gae
from actorq.core.loop import VectorActor
from actorq.distributed.local import _LocalCache
from actorq.envs import env_spec
from actorq.errors import ConfigError
from actorq.experiment import learner_snapshot
from actorq.quant.snapshot import make_snapshot


def test_gae_matches_a_hand_computed_case() -> None:
    # one chunk of 4 steps: the episode terminates at t=1, a new one is truncated at t=3
    g, lam = 0.9, 0.5
    r = np.array([[1.0, 2.0, 0.5, 1.0]])
    v = np.array([[0.1, 0.2, 0.3, 0.4]])
    v_next = np.array([[0.2, 9.0, 0.4, 0.7]])  # 9.0: V of the terminal state, must be ignored
    term = np.array([[0.0, 1.0, 0.0, 0.0]])
    trunc = np.array([[0.0, 0.0, 0.0, 1.0]])
    d3 = 1.0 + g * 0.7 - 0.4  # truncated: bootstrap from the last state, no carry
    d2 = 0.5 + g * 0.4 - 0.3
    d1 = 2.0 - 0.2  # terminated: no bootstrap
    d0 = 1.0 + g * 0.2 - 0.1
    want = [d0 + g * lam * d1, d1, d2 + g * lam * d3, d3]
    np.testing.assert_allclose(gae(r, v, v_next, term, trunc, g, lam)[0], want, rtol=1e-6)
    # lam = 1, no ends: the discounted return minus the value, bootstrapped at the chunk end
    ones = np.ones((1, 3))
    zeros = np.zeros((1, 3))
    v_next = np.array([[0.0, 0.0, 2.0]])  # V = 0 except the state after the chunk
    adv = gae(ones, zeros, v_next, zeros, zeros, 0.5, 1.0)
    np.testing.assert_allclose(adv[0], [1 + 0.5 + 0.25 + 0.125 * 2, 1 + 0.5 + 0.25 * 2, 1 + 1.0])


def test_running_mean_std_matches_numpy() -> None:
    x = np.random.default_rng(0).normal(3.0, 2.0, (1000, 3))
    rms = RunningMeanStd((3,))
    for part in np.array_split(x, 7):
        rms.update(part)
    np.testing.assert_allclose(rms.mean, x.mean(0), rtol=1e-3)
    np.testing.assert_allclose(rms.var, x.var(0), rtol=1e-3)


def _collect(cfg: PPOConfig, snapshot_bytes: bytes, version: int = 0) -> dict[str, np.ndarray]:
    """One chunk per env from an in-process actor running ``snapshot_bytes``."""
    spec = env_spec(cfg.env)
    setup = builder_for(cfg).actor_setup(cfg, spec)
    cache = _LocalCache()
    cache.publish(version, snapshot_bytes)
    actor = VectorActor.from_config(setup.actor_config(0, in_process=True), cache)
    try:
        assert actor.update()
        while True:
            items, _ = actor.step()
            if items:
                return items
    finally:
        actor.close()


@pytest.mark.parametrize("env", ["gym:CartPole-v1", "gym:Pendulum-v1"])
def test_ratio_is_taken_against_the_actors_recorded_log_prob(env: str, tmp_path: Path) -> None:
    cfg = PPOConfig(env=env, envs_per_actor=4, num_steps=32, minibatch_size=128, actors=0)
    spec = env_spec(env)
    builder = builder_for(cfg)
    pspec = builder.policy_spec(cfg, spec)

    def first_dev(perturb: float) -> float:
        learner = MLPPPOLearner(cfg, spec)
        snap = learner_snapshot(learner, pspec, "fp32", 0)
        if perturb:
            rng = np.random.default_rng(1)
            layers = [
                (w + perturb * rng.standard_normal(w.shape), b) for w, b in snap.dequantized()
            ]
            extras = {k: snap.tensors[k] for k in snap.spec_extras()}
            snap = make_snapshot(layers, pspec, "fp32", 0, extras=extras)
        batch = _collect(cfg, snap.to_bytes())
        assert batch["log_prob"].shape == (4, 32) and (batch["version"] == 0).all()
        return learner.update(batch)["quant/first_ratio_abs_dev"]

    # the actor ran the learner's own fp32 policy: the first minibatch's ratios are 1
    assert first_dev(0.0) < 1e-4
    # a perturbed snapshot is a different behaviour policy: the ratio says so at once
    assert first_dev(0.5) > 0.05


@pytest.mark.parametrize(("anneal_steps", "left"), [(0, 1 - 128 / 512), (2048, 1 - 128 / 2048)])
def test_the_learning_rate_decays_over_its_horizon(anneal_steps: int, left: float) -> None:
    """Over total_steps by default; over anneal_steps if given (the published Atari runs'
    horizon is 40M frames: annealing to 0 at a 10M-frame budget is a 4x steeper schedule)."""
    cfg = PPOConfig(envs_per_actor=4, num_steps=32, total_steps=512, anneal_steps=anneal_steps,
                    actors=0)  # fmt: skip
    spec = env_spec(cfg.env)
    learner = MLPPPOLearner(cfg, spec)
    snap = learner_snapshot(learner, builder_for(cfg).policy_spec(cfg, spec), "fp32", 0)
    batch = _collect(cfg, snap.to_bytes())
    first = learner.update(batch)["losses/learning_rate"]
    second = learner.update(batch)["losses/learning_rate"]
    assert first == pytest.approx(cfg.learning_rate)  # full at the first update
    assert second == pytest.approx(left * cfg.learning_rate)  # after 128 steps


def test_learns_cartpole_and_int8_acts_like_fp32(tiny: Callable[..., Any]) -> None:
    r = train(tiny("ppo", total_steps=150_000, seed=0))
    assert r.target_return == 475 and r.reached_target, r
    assert r.eval_return >= 400
    assert r.action_agreement >= 0.98 and r.logprob_gap is not None and r.logprob_gap < 0.05


def test_continuous_snapshot_carries_normalisation_and_log_std(tiny: Callable[..., Any]) -> None:
    r = train(tiny("ppo", env="gym:Pendulum-v1", total_steps=4096, num_steps=64, minibatch_size=64))
    # the budget ends the run when the last chunk is collected, before it is trained on
    assert r.updates == 4096 // (4 * 64) - 1
    w = load_file(str(Path(r.run_dir) / "checkpoint/learner.safetensors"))
    assert "log_std" in w
    state = json.loads((Path(r.run_dir) / "checkpoint/state.json").read_text())
    assert state["learner"]["obs_rms"]["count"] >= r.updates * 256  # normalisation on (auto)
    assert r.action_mean_abs_diff is not None and r.logprob_gap is not None


def test_same_seed_same_result_and_resume(tiny: Callable[..., Any], tmp_path: Path) -> None:
    kw = dict(total_steps=3_000, stop_at_target=False, eval_every=1_000)
    a = train(tiny("ppo", "a", seed=3, **kw))
    b = train(tiny("ppo", "b", seed=3, **kw))
    wa = load_file(str(tmp_path / "a/checkpoint/learner.safetensors"))
    wb = load_file(str(tmp_path / "b/checkpoint/learner.safetensors"))
    assert a.updates == b.updates > 0
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k])
    second = train(PPOConfig(resume=str(tmp_path / "a"), total_steps=6_000, progress=False))
    assert second.env_steps >= 6_000 and second.updates > a.updates


def test_train_with_an_actor_process(tiny: Callable[..., Any]) -> None:
    r = train(tiny("ppo", actors=1, total_steps=8_192, stop_at_target=False, eval_every=4_096))
    assert r.updates >= 8_192 // (4 * 128) - 1 and r.env_steps >= 8_192
    assert r.actor_restarts == 0 and r.rejected_snapshots == 0


def test_bad_ppo_options_are_one_line_errors() -> None:
    for kw in (
        {"minibatch_size": 10_000},
        {"gae_lambda": 1.5},
        {"max_policy_lag": 0},
        {"publish_every": 2},
        {"learning_rate": float("nan")},
    ):
        with pytest.raises(ConfigError):
            PPOConfig(**kw).validate()  # type: ignore[arg-type]


def test_an_action_repeat_off_the_control_suite_is_one_line() -> None:
    """Recorded in config.json but never applied (only dmc: ids take it): refused."""
    with pytest.raises(ConfigError, match=r"^--action-repeat 4 applies to dmc: ids only"):
        PPOConfig(env="gym:Pendulum-v1", action_repeat=4).validate()
    PPOConfig(env="gym:Pendulum-v1").validate()
