"""A small pixel task for the agents' pixel tests: DQN and PPO learn it in seconds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import FrameStackObservation

ENV = "actorq-test/Pixels-v0"
#: the same task seen through Gymnasium's FrameStackObservation (4 frames): the frame replay's
ENV_STACKED = "actorq-test/PixelFrames-v0"


class Pixels(gym.Env[np.ndarray, np.int64]):
    """A bright bar at a random row of a dark ``shape`` image (every channel of a 4×36×36 one);
    action 1 earns 1 when the bar is in the top half, action 0 when it is in the bottom half.
    Episodes of 8 steps."""

    def __init__(self, shape: tuple[int, ...] = (4, 36, 36)) -> None:
        self.shape = shape
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.row, self.t = 0, 0

    def _obs(self) -> np.ndarray:
        self.row = int(self.np_random.integers(36))
        o = np.zeros(self.shape, np.uint8)
        o[..., self.row, :] = 255
        return o

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = float(int(action) == int(self.row < 18))
        self.t += 1
        return self._obs(), reward, False, self.t >= 8, {}


def stacked() -> gym.Env[np.ndarray, np.int64]:
    return FrameStackObservation(Pixels((36, 36)), 4)


@pytest.fixture
def pixel_env() -> Iterator[None]:
    """The tasks registered with Gymnasium while a test runs."""
    gym.register(ENV, entry_point=Pixels)
    gym.register(ENV_STACKED, entry_point=stacked)
    yield
    gym.registry.pop(ENV)
    gym.registry.pop(ENV_STACKED)


#: Settings a pixel learning test shares: in-process fp32 actors, one evaluation at the end on
#: 4 held-out episodes (a random policy scores 4 of 8 on average; 1-step credit, so gamma 0.5)
PIXEL_RUN: dict[str, Any] = {
    "env": f"gym:{ENV}",
    "envs_per_actor": 4,
    "precision": "fp32",
    "total_steps": 1200,
    "gamma": 0.5,
    "eval_every": 10**9,
    "eval_episodes": 4,
    "stop_at_target": False,
}
