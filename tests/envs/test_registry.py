"""A new env family is one registry line: a toy family added through ENV_FAMILIES is validated,
made, vectorised, checked by Gymnasium and trained on by the loop like the built-in ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from actorq.envs import (
    ENV_FAMILIES,
    EnvFamily,
    env_spec,
    make_env,
    make_vector_env,
    validate_env_id,
)
from actorq.errors import EnvIdError


class Line(gym.Env[np.ndarray, np.int64]):
    """Walk right along ``n`` cells (one-hot position); reward 1 on reaching the last."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.observation_space = gym.spaces.Box(0.0, 1.0, (n,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.pos, self.t = 0, 0

    def _obs(self) -> np.ndarray:
        o = np.zeros(self.n, np.float32)
        o[self.pos] = 1.0
        return o

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos, self.t = 0, 0
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.pos = min(self.n - 1, self.pos + 1) if int(action) == 1 else max(0, self.pos - 1)
        self.t += 1
        done = self.pos == self.n - 1
        return self._obs(), float(done), done, self.t >= 4 * self.n, {}


def validate_line(name: str) -> None:
    kind, _, n = name.partition("-")
    if kind != "line" or not n.isdigit() or not 2 <= int(n) <= 64:
        raise EnvIdError(f"unknown toy env {name!r}: expected line-<2..64>")


def make_line(name: str, **kwargs: Any) -> Line:
    return Line(int(name.partition("-")[2]), **kwargs)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        ENV_FAMILIES,
        "toy",
        EnvFamily(f"{__name__}:validate_line", f"{__name__}:make_line", "toy:line-5"),
    )


@pytest.mark.usefixtures("toy")
def test_a_registered_family_is_validated_and_made() -> None:
    validate_env_id("toy:line-5")
    with pytest.raises(EnvIdError, match=r"expected line-<2\.\.64>"):
        validate_env_id("toy:line-x")
    env = make_env("toy:line-5")
    check_env(env, skip_render_check=True)
    spec = env_spec("toy:line-5")
    assert spec.observation.shape == (5,) and spec.num_actions == 2
    vec = make_vector_env("toy:line-5", 3)
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (3, 5)
    vec.close()


def test_an_unregistered_prefix_is_one_line_naming_the_families() -> None:
    with pytest.raises(EnvIdError, match=r"prefixes gym:, dmc:, graphopt:, chip:") as e:
        validate_env_id("toy:line-5")
    assert "\n" not in str(e.value)


@pytest.mark.usefixtures("toy")
def test_the_loop_trains_on_a_registered_family(tiny: Callable[..., Any]) -> None:
    from actorq.experiment import train

    r = train(tiny("dqn", env="toy:line-5", total_steps=400, min_replay_size=100))
    assert r.env_steps >= 400
