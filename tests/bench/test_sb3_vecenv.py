"""SB3's VecEnv over actorq's vector env: an SB3 cell trains on the engine actorq's cells use."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3.common.vec_env import DummyVecEnv

from actorq.bench.sb3_vecenv import ActorQVecEnv
from actorq.envs import make_env, make_vector_env


def test_it_steps_as_sb3s_dummy_vec_env_on_the_same_seeds() -> None:
    """Same observations, rewards, dones, terminal observations and truncation flags, step for
    step, over many episode ends (CartPole: terminations and 500-step cuts)."""
    ours = ActorQVecEnv(make_vector_env("gym:CartPole-v1", 3))
    theirs = DummyVecEnv([lambda: make_env("gym:CartPole-v1")] * 3)
    try:
        for env in (ours, theirs):
            env.seed(7)
        np.testing.assert_array_equal(ours.reset(), theirs.reset())
        rng = np.random.default_rng(0)
        ends = 0
        for _ in range(600):
            actions = rng.integers(0, 2, 3)
            ours.step_async(actions)
            theirs.step_async(actions)
            (o1, r1, d1, i1), (o2, r2, d2, i2) = ours.step_wait(), theirs.step_wait()
            np.testing.assert_array_equal(o1, o2)
            np.testing.assert_array_equal(r1, r2)
            np.testing.assert_array_equal(d1, d2)
            for i in np.flatnonzero(d1):
                ends += 1
                np.testing.assert_array_equal(
                    i1[i]["terminal_observation"], i2[i]["terminal_observation"]
                )
                assert i1[i]["TimeLimit.truncated"] == i2[i]["TimeLimit.truncated"]
        assert ends > 20
        assert ours.get_attr("render_mode") == [None] * 3
        assert ours.env_is_wrapped(object) == [False] * 3
        with pytest.raises(AttributeError):
            ours.get_attr("spec")
    finally:
        ours.close()
        theirs.close()


def test_observations_are_copies_not_the_envs_buffer() -> None:
    """actorq's SyncVectorEnv writes each step into one buffer (``copy=False``): SB3 keeps
    observations across steps (its rollout buffer's last_obs), so each must be its own array."""
    env = ActorQVecEnv(make_vector_env("gym:CartPole-v1", 2))
    try:
        env.seed(0)
        first = env.reset()
        kept = first.copy()
        env.step_async(np.zeros(2, np.int64))
        second, *_ = env.step_wait()
        np.testing.assert_array_equal(first, kept)
        assert not np.shares_memory(first, second)
    finally:
        env.close()


def test_an_atari_cell_trains_on_envpool_whatever_the_config_was_given() -> None:
    """The engine is resolved where SB3's env is built (an unvalidated config says "auto"): an
    SB3 cell trains on the pool actorq's cells use, not on Python ale-py envs."""
    from actorq import PPOConfig
    from actorq.bench.sb3 import SB3
    from actorq.envs.atari import envpool_installed

    if not envpool_installed():
        pytest.skip("EnvPool is not installed")
    cfg = PPOConfig(env="atari:Pong", seed=0)
    assert cfg.atari_engine == "auto"
    model = SB3().build(cfg, [64, 64], {"policy": "CnnPolicy", "n_envs": 2, "n_steps": 8})
    try:
        assert isinstance(model.get_env(), ActorQVecEnv)
    finally:
        model.get_env().close()
