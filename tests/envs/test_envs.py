import importlib.util
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from actorq.envs import env_spec, make_env, make_vector_env
from actorq.errors import EnvIdError

CLASSIC = ["gym:CartPole-v1", "gym:Acrobot-v1", "gym:MountainCar-v0", "gym:Pendulum-v1"]
_no_control = pytest.mark.skipif(
    importlib.util.find_spec("dm_control") is None, reason="needs the [control] extra"
)
CONTROL = [
    pytest.param(e, marks=_no_control)
    for e in (
        "dmc:cartpole-balance",
        "dmc:cartpole-swingup",
        "dmc:walker-stand",
        "dmc:walker-walk",  # PPO's benchmark (docs/results.md)
        "gym:HalfCheetah-v5",
    )
]


@pytest.mark.parametrize("env_id", CLASSIC + CONTROL)
def test_check_env(env_id: str) -> None:
    env = make_env(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_unknown_ids_fail_with_one_line() -> None:
    with pytest.raises(EnvIdError) as e:
        make_env("atari-pong")
    assert "gym:" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(EnvIdError, match="unknown Gymnasium id"):
        make_env("gym:NoSuchEnv-v0")


def test_spec_and_vector_env() -> None:
    spec = env_spec("gym:CartPole-v1")
    assert spec.num_actions == 2 and spec.observation.shape == (4,)
    assert not env_spec("gym:Pendulum-v1").discrete
    v = make_vector_env("gym:CartPole-v1", 3)
    obs, _ = v.reset(seed=0)
    assert obs.shape == (3, 4)
    assert isinstance(v.single_action_space, gym.spaces.Discrete)
    v.close()


def test_a_mujoco_env_leaves_no_log_file_in_the_working_directory(tmp_path: Path) -> None:
    """MuJoCo logs every warning (HalfCheetah-v5's model uses a deprecated attribute in MuJoCo
    3.17) to MUJOCO_LOG.TXT in the working directory unless told not to: actorq tells it."""
    pytest.importorskip("mujoco")
    code = "from actorq.envs import make_env; make_env('gym:HalfCheetah-v5').close()"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


@pytest.mark.parametrize("n", [0, -1, 2.0, True, "2"])
def test_a_vector_env_of_no_envs_is_one_line(n: object) -> None:
    """From the Python API (configs bound their counts): one EnvIdError, not Gymnasium's
    IndexError from an empty list of envs."""
    with pytest.raises(EnvIdError, match="num_envs must be a positive integer"):
        make_vector_env("gym:CartPole-v1", n)  # type: ignore[arg-type]
    make_vector_env("gym:CartPole-v1", np.int64(2)).close()


def test_an_unbounded_action_space_is_refused() -> None:
    """Continuous agents map actions onto [low, high]: infinite bounds gave NaN actions."""
    from actorq.types import EnvSpec

    obs = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    with pytest.raises(TypeError, match="x: unbounded action space"):
        EnvSpec.from_spaces("x", obs, gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))
    assert EnvSpec.from_spaces("x", obs, gym.spaces.Box(-2.0, 2.0, (2,))).action_high == (2.0, 2.0)
