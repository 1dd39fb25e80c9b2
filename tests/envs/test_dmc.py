"""DeepMind Control Suite and Gymnasium MuJoCo environments (the [control] extra)."""

import numpy as np
import pytest

pytest.importorskip("dm_control", reason="needs the [control] extra")

from actorq.envs import env_spec, make_env, make_vector_env
from actorq.envs.dmc import DMCEnv
from actorq.errors import EnvIdError


def test_observation_is_flattened_in_the_specs_key_order() -> None:
    env = make_env("dmc:walker-stand")
    assert isinstance(env, DMCEnv)
    keys = list(env._env.observation_spec().keys())
    assert keys == ["orientations", "height", "velocity"]  # the suite's fixed order
    obs, _ = env.reset(seed=3)
    ts = env._env._physics  # the same state, read through the task's own observation
    raw = env._env.task.get_observation(ts)
    want = np.concatenate([np.asarray(raw[k], np.float32).ravel() for k in keys])
    np.testing.assert_array_equal(obs, want)
    assert obs.shape == (24,) and env_spec("dmc:walker-stand").action.shape == (6,)


def test_seeded_resets_repeat_and_action_repeat_sums_rewards() -> None:
    a, b = make_env("dmc:cartpole-swingup"), make_env("dmc:cartpole-swingup")
    np.testing.assert_array_equal(a.reset(seed=7)[0], b.reset(seed=7)[0])
    assert not np.array_equal(a.reset(seed=8)[0], b.reset(seed=7)[0])
    one, two = make_env("dmc:cartpole-balance"), make_env("dmc:cartpole-balance", action_repeat=2)
    one.reset(seed=0)
    two.reset(seed=0)
    act = np.zeros(1, np.float32)
    r1 = one.step(act)[1] + one.step(act)[1]
    r2 = two.step(act)[1]
    assert r2 == pytest.approx(r1)


def test_a_seed_past_32_bits_resets_as_its_low_bits_do() -> None:
    """A resumed long run (or a --seed near its top plus an actor's offset) seeds past 2**32,
    which the task's RandomState refused (every dmc: actor failed to start)."""
    a, b = make_env("dmc:cartpole-swingup"), make_env("dmc:cartpole-swingup")
    np.testing.assert_array_equal(a.reset(seed=2**32 + 7)[0], b.reset(seed=7)[0])


def test_episodes_end_by_time_limit_as_truncation() -> None:
    env = make_vector_env("dmc:cartpole-balance", 1, action_repeat=8)
    env.reset(seed=0)
    steps = 0
    while True:
        _, _, term, trunc, _ = env.step(np.zeros((1, 1), np.float32))
        steps += 1
        if trunc[0] or term[0] or steps > 1000:
            break
    assert trunc[0] and not term[0] and steps == 1000 // 8


def test_bad_dmc_ids_list_the_valid_choices() -> None:
    with pytest.raises(EnvIdError, match=r"its tasks: run, stand, walk") as e:
        make_env("dmc:walker-flip")
    assert "\n" not in str(e.value)
    with pytest.raises(EnvIdError, match=r"domains: acrobot, ball_in_cup"):
        make_env("dmc:walkr-stand")
