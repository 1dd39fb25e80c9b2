"""Evaluation of a policy snapshot on separately seeded environments: greedy, or sampled where
the env family asks (Atari)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from actorq.core.exploration import sampled_actions, to_env_action
from actorq.envs import eval_env_kwargs, eval_sampled, make_vector_env
from actorq.quant.runtimes import ModelRuntime, PolicyRuntime


def evaluate(
    runtime: PolicyRuntime | ModelRuntime,
    env_id: str,
    episodes: int = 10,
    seed: int = 10_000,
    env_kwargs: dict[str, Any] | None = None,
    sampled: bool | None = None,
) -> np.ndarray:
    """Run one episode in each of ``episodes`` environments (seeds seed..seed+E-1),
    in lock-step with batched inference; return the episode returns.

    Actions are the head's greedy ones (:mod:`actorq.quant.heads`: argmax for discrete heads;
    the action, or a Gaussian's mean, clipped to [-1, 1] and mapped to the environment's
    bounds as the actors do, for continuous ones). The env family's evaluation settings apply
    (:func:`~actorq.envs.eval_env_kwargs`: Atari plays full games on the raw score), and the
    family says whether actions are sampled instead (``sampled`` None; Atari: PPO draws from
    its policy, DQN is ε-greedy at 0.05, :func:`~actorq.core.exploration.sampled_actions`), from a
    generator seeded with ``seed``.
    """
    if sampled is None:
        sampled = eval_sampled(env_id)
    env = make_vector_env(env_id, episodes, **eval_env_kwargs(env_id, env_kwargs))
    head = runtime.head if isinstance(runtime, ModelRuntime) else runtime.spec.policy_head
    try:
        space = env.single_action_space
        low = np.asarray(getattr(space, "low", -1.0), np.float32)
        high = np.asarray(getattr(space, "high", 1.0), np.float32)

        def act(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
            out = runtime(obs)  # uint8 pixels stay bytes; runtimes cast
            action = sampled_actions(head, out, rng) if sampled else head.greedy(out)
            return action if head.discrete else to_env_action(action, low, high)

        return play(env, seed, act)
    finally:
        env.close()


def play(
    env: Any, seed: int, act: Callable[[np.ndarray, np.random.Generator], np.ndarray]
) -> np.ndarray:
    """One episode in each of ``env``'s environments (a vector env in same-step autoreset mode,
    seeds seed..seed+E-1), ``act(obs, rng)`` choosing every env's action in one call with a
    generator seeded with ``seed``; the episode returns. Every env steps until the last episode
    ends (later episodes' rewards are not counted), so the draws an evaluation makes do not
    depend on when its episodes end: the loop of actorq's evaluations and of another
    framework's (:class:`~actorq.bench.frameworks.PolicyEval`) alike."""
    episodes = int(env.num_envs)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=[seed + i for i in range(episodes)])
    returns = np.zeros(episodes)
    alive = np.ones(episodes, bool)
    while alive.any():
        obs, rew, term, trunc, _ = env.step(act(np.asarray(obs), rng))
        returns += np.where(alive, rew, 0.0)
        alive &= ~np.logical_or(term, trunc)
    return returns
