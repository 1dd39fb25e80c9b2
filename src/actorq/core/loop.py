"""The actor's environment loop: K environments, one batched inference per step.

Used as-is in the synchronous single-process mode and inside every actor process. numpy,
gymnasium and onnxruntime only — never torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from actorq.core.exploration import to_env_action
from actorq.core.interfaces import Actor, ParameterSource
from actorq.core.types import Batch, EnvSpec
from actorq.envs import make_vector_env
from actorq.errors import SnapshotError
from actorq.quant.runtimes import PolicyRuntime, make_runtime
from actorq.quant.snapshot import PolicySnapshot
from actorq.replay.adders import NStepAdder


class VectorActor(Actor):
    """Steps K copies of an environment with a quantized policy snapshot.

    Snapshots come from a :class:`ParameterSource`; a corrupt or non-finite one is refused
    (counted in ``rejected``) and the actor keeps acting with its last good one.
    """

    def __init__(
        self,
        env_id: str,
        spec: EnvSpec,
        num_envs: int,
        seed: int,
        source: ParameterSource,
        explore: Callable[[np.ndarray], np.ndarray],
        n_step: int,
        gamma: float,
        runtime: str = "ort",
        threads: int = 1,
        env_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.env = make_vector_env(env_id, num_envs, **(env_kwargs or {}))
        # Continuous policies act in [-1, 1] (what replay stores); the env gets its own bounds.
        self._bounds = (
            None
            if spec.discrete
            else (np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32))
        )
        self.k = num_envs
        self.source = source
        self.explore = explore
        self.runtime_kind, self.threads = runtime, threads
        self.runtime: PolicyRuntime | None = None
        self.version = -1
        self.rejected = 0
        self.swaps = 0
        self.adder = NStepAdder(n_step, gamma, num_envs, spec.observation, spec.action)
        obs, _ = self.env.reset(seed=seed)
        self.env.action_space.seed(seed)
        self.obs = np.asarray(obs, np.float32)
        self.adder.observe_first(self.obs)
        self._ret = np.zeros(num_envs, np.float64)
        self._len = np.zeros(num_envs, np.int64)
        self.env_steps = 0
        self.inference_s = 0.0  # time inside the policy runtime
        self.env_s = 0.0  # time inside env.step (the simulator, resets included)

    def update(self) -> bool:
        if self.source.latest_version() == self.version:
            return False
        got = self.source.fetch()
        if got is None or got[0] == self.version:
            return False
        try:
            snap = PolicySnapshot.from_bytes(got[1])
        except SnapshotError:
            self.rejected += 1
            self.version = got[0]  # don't retry the same bad version every step
            return False
        self.runtime = make_runtime(snap, self.runtime_kind, self.threads)
        self.version = snap.version
        self.swaps += 1
        return True

    def select_action(self, obs: np.ndarray) -> np.ndarray:
        if self.runtime is None:
            raise RuntimeError("actor has no policy snapshot yet")
        t = time.perf_counter()
        q = self.runtime(obs)
        self.inference_s += time.perf_counter() - t
        return self.explore(q)

    def step(self) -> tuple[Batch, list[tuple[float, int]]]:
        action = self.select_action(self.obs)
        env_action = action if self._bounds is None else to_env_action(action, *self._bounds)
        t = time.perf_counter()
        obs, rew, term, trunc, info = self.env.step(env_action)
        self.env_s += time.perf_counter() - t
        obs = np.asarray(obs, np.float32)  # no copy for float32 envs
        done = term | trunc
        final_arr = None
        episodes: list[tuple[float, int]] = []
        self._ret += rew
        self._len += 1
        if done.any():
            # SAME_STEP autoreset: ``obs`` already holds the next episodes' first observations;
            # the ended episodes' last ones are in info["final_obs"] (None for other envs).
            ended = np.flatnonzero(done)
            final_arr = obs.copy()
            final_arr[ended] = np.stack([info["final_obs"][i] for i in ended]).astype(np.float32)
            for i in ended:
                episodes.append((float(self._ret[i]), int(self._len[i])))
            self._ret[ended], self._len[ended] = 0.0, 0
        out = self.adder.add(action, rew, obs, term, trunc, final_arr)
        self.obs = obs
        self.env_steps += self.k
        return out, episodes

    def close(self) -> None:
        self.env.close()
