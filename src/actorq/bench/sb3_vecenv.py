"""Stable-Baselines3's ``VecEnv`` interface over actorq's own vector env, so an SB3 cell trains
on the very engine actorq's cells of the same spec train on (an Atari cell's EnvPool pool, whose
frames differ from the Python wrappers': :mod:`actorq.envs.atari_envpool`). Imported only where
SB3 is installed (the ``[peers]`` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn


class ActorQVecEnv(VecEnv):
    """``vec`` (same-step autoreset: an ended env returns the next episode's first observation
    and its last one in ``info["final_obs"]``, as :func:`actorq.envs.make_vector_env` makes)
    as SB3's ``DummyVecEnv`` presents its envs: ``dones``, ``infos[i]["terminal_observation"]``
    and ``"TimeLimit.truncated"`` (PPO bootstraps a cut episode from it). ``seed(s)`` seeds env
    ``i`` with ``s + i`` at the next reset, as SB3's vector envs and EnvPool both count."""

    def __init__(self, vec: Any) -> None:
        self.vec = vec
        super().__init__(vec.num_envs, vec.single_observation_space, vec.single_action_space)
        self._actions = np.zeros(vec.num_envs, np.int64)

    def reset(self) -> np.ndarray:
        first = self._seeds[0]
        obs, _ = self.vec.reset(
            seed=None if first is None else [int(first) + i for i in range(self.num_envs)]
        )
        self._reset_seeds()
        self._reset_options()
        return np.array(obs, copy=True)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        obs, rew, term, trunc, info = self.vec.step(self._actions)
        term, trunc = np.asarray(term, bool), np.asarray(trunc, bool)
        dones = np.logical_or(term, trunc)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        final = info.get("final_obs")
        for i in np.flatnonzero(dones):
            infos[i]["terminal_observation"] = np.array(final[i], copy=True)
            infos[i]["TimeLimit.truncated"] = bool(trunc[i] and not term[i])
        return np.array(obs, copy=True), np.asarray(rew, np.float32), dones, infos

    def close(self) -> None:
        self.vec.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        if attr_name == "render_mode":  # VecEnv.__init__ asks; a pool does not render
            return [None] * len(list(self._get_indices(indices)))
        raise AttributeError(f"{type(self.vec).__name__} has no per-env attribute {attr_name!r}")

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise AttributeError(f"cannot set {attr_name!r} on the envs of a {type(self.vec).__name__}")

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        raise AttributeError(
            f"cannot call {method_name!r} on the envs of a {type(self.vec).__name__}"
        )

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(list(self._get_indices(indices)))

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None] * self.num_envs
