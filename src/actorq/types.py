"""Plain data types shared by every component (no torch here: actors import this)."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """Shape (without the batch dimension) and dtype of one field, and where known the least
    and greatest values it holds (a discrete action's indices, a discount's [0, 1]): data read
    back from a file (a checkpoint's replay) is checked against them."""

    shape: tuple[int, ...]
    dtype: str
    low: float | None = None
    high: float | None = None

    def zeros(self, *batch: int) -> np.ndarray:
        return np.zeros((*batch, *self.shape), dtype=self.dtype)

    def outside(self, v: np.ndarray) -> bool:
        """Whether any value of ``v`` lies outside [low, high]."""
        return bool(
            (self.low is not None and (v < self.low).any())
            or (self.high is not None and (v > self.high).any())
        )

    def to_json(self) -> dict[str, Any]:
        bounds = {k: v for k, v in (("low", self.low), ("high", self.high)) if v is not None}
        return {"shape": list(self.shape), "dtype": self.dtype, **bounds}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArraySpec:
        low, high = d.get("low"), d.get("high")
        return cls(
            tuple(int(x) for x in d["shape"]),
            str(d["dtype"]),
            None if low is None else float(low),
            None if high is None else float(high),
        )


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What an agent needs to know about an environment to build networks and buffers."""

    env_id: str
    observation: ArraySpec
    action: ArraySpec
    #: Number of discrete actions, or 0 for a continuous action space.
    num_actions: int = 0
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    #: Observations are the last ``frame_stack`` frames along the first axis, oldest first, a
    #: new episode's padded with its first frame (Gymnasium's ``FrameStackObservation``, padding
    #: "reset"): pixel replay can then store each frame once. 0: not such a stack.
    frame_stack: int = 0

    @property
    def discrete(self) -> bool:
        return self.num_actions > 0

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.observation.shape))

    def to_json(self) -> dict[str, Any]:
        """Plain data for an actor's JSON settings (processes and Ray actors alike)."""
        return {
            "env_id": self.env_id,
            "observation": self.observation.to_json(),
            "action": self.action.to_json(),
            "num_actions": self.num_actions,
            "action_low": list(self.action_low),
            "action_high": list(self.action_high),
            "frame_stack": self.frame_stack,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EnvSpec:
        return cls(
            str(d["env_id"]),
            ArraySpec.from_json(d["observation"]),
            ArraySpec.from_json(d["action"]),
            int(d["num_actions"]),
            tuple(float(x) for x in d.get("action_low", ())),
            tuple(float(x) for x in d.get("action_high", ())),
            int(d.get("frame_stack", 0)),
        )

    @classmethod
    def from_spaces(cls, env_id: str, obs_space: gym.Space, act_space: gym.Space) -> EnvSpec:
        if not isinstance(obs_space, gym.spaces.Box):
            raise TypeError(f"{env_id}: only Box observation spaces are supported, got {obs_space}")
        # Pixels (uint8) stay bytes from the emulator to the learner's device (a quarter of
        # float32's channel, replay and copy traffic); every other observation is float32.
        dtype = "uint8" if obs_space.dtype == np.uint8 else "float32"
        obs = ArraySpec(tuple(obs_space.shape), dtype)
        if isinstance(act_space, gym.spaces.Discrete):
            n = int(act_space.n)
            return cls(env_id, obs, ArraySpec((), "int64", 0, n - 1), num_actions=n)
        if isinstance(act_space, gym.spaces.Box):
            if not (np.isfinite(act_space.low).all() and np.isfinite(act_space.high).all()):
                # actions are squashed to [-1, 1] and mapped onto [low, high]: inf gives NaN
                raise TypeError(
                    f"{env_id}: unbounded action space {act_space} (continuous agents map "
                    "their actions onto finite bounds)"
                )
            return cls(
                env_id,
                obs,
                ArraySpec(tuple(act_space.shape), "float32"),
                action_low=tuple(float(x) for x in act_space.low.ravel()),
                action_high=tuple(float(x) for x in act_space.high.ravel()),
            )
        raise TypeError(f"{env_id}: unsupported action space {act_space}")


def transition_specs(spec: EnvSpec) -> dict[str, ArraySpec]:
    """Fields of one n-step transition (s_t, a_t, R_t^(n), discount, s_{t+n}).

    ``discount`` is gamma^n, or 0 when the episode terminated inside the n steps; a time-limit
    truncation keeps the bootstrap (the state is not terminal, only the episode was cut).
    """
    return {
        "obs": spec.observation,
        "action": spec.action,
        "reward": ArraySpec((), "float32"),
        "discount": ArraySpec((), "float32", 0.0, 1.0),
        "next_obs": spec.observation,
    }


def trajectory_specs(spec: EnvSpec, length: int) -> dict[str, ArraySpec]:
    """Fields of one trajectory chunk: ``length`` consecutive steps of one environment, as an
    on-policy agent (PPO) consumes them.

    Per step: ``obs``, ``action``, ``log_prob`` (of the action under the snapshot the actor ran:
    the behaviour policy), ``reward``, ``terminated``, ``truncated`` (1.0/0.0) and ``next_obs``
    (the observation after the step; the episode's last one where it ended, so the learner can
    bootstrap a time-limit truncation). Per chunk: ``version`` (of that snapshot; a chunk is
    collected with one) and ``actor`` (which actor collected it; the queue releases per actor).
    """
    t = (length,)
    return {
        "obs": ArraySpec(t + spec.observation.shape, spec.observation.dtype),
        "action": ArraySpec(t + spec.action.shape, spec.action.dtype),
        "log_prob": ArraySpec(t, "float32"),
        "reward": ArraySpec(t, "float32"),
        "terminated": ArraySpec(t, "float32"),
        "truncated": ArraySpec(t, "float32"),
        "next_obs": ArraySpec(t + spec.observation.shape, spec.observation.dtype),
        "version": ArraySpec((), "int64"),
        "actor": ArraySpec((), "int32"),
    }


def batch_len(batch: Batch) -> int:
    """Items in a batch (0 for an empty one)."""
    return len(next(iter(batch.values()))) if batch else 0


Batch = dict[str, np.ndarray]
