"""Greedy evaluation of a policy snapshot on separately seeded environments."""

from __future__ import annotations

import numpy as np

from actorq.envs import make_vector_env
from actorq.quant.runtimes import PolicyRuntime


def evaluate(
    runtime: PolicyRuntime, env_id: str, episodes: int = 10, seed: int = 10_000
) -> np.ndarray:
    """Run one greedy episode in each of ``episodes`` environments (seeds seed..seed+E-1),
    in lock-step with batched inference; return the episode returns."""
    env = make_vector_env(env_id, episodes)
    try:
        obs, _ = env.reset(seed=[seed + i for i in range(episodes)])
        returns = np.zeros(episodes)
        alive = np.ones(episodes, bool)
        while alive.any():
            out = runtime(np.asarray(obs, np.float32))
            action = out.argmax(axis=1) if runtime.spec.head == "q" else out
            obs, rew, term, trunc, _ = env.step(action)
            returns += np.where(alive, rew, 0.0)
            alive &= ~np.logical_or(term, trunc)
        return returns
    finally:
        env.close()
