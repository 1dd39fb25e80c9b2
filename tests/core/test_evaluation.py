"""Evaluation: greedy by default, sampled where the env family says (Atari), seeded."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from actorq.core.evaluation import evaluate
from actorq.envs import eval_sampled
from actorq.quant.heads import head


class UniformPolicy:
    """A categorical policy with equal logits: greedy always pushes left (argmax's first)."""

    spec = SimpleNamespace(policy_head=head("categorical"))

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return np.zeros((len(obs), 2), np.float32)


def test_atari_evaluates_sampled_and_other_families_greedy() -> None:
    assert eval_sampled("atari:Pong") and eval_sampled("atari:Breakout")
    assert not eval_sampled("gym:CartPole-v1")


def test_sampled_evaluation_draws_from_the_policy_and_repeats_for_a_seed() -> None:
    policy: object = UniformPolicy()
    greedy = evaluate(policy, "gym:CartPole-v1", episodes=8, seed=3)  # type: ignore[arg-type]
    assert np.array_equal(greedy, evaluate(policy, "gym:CartPole-v1", 8, 3, sampled=False))  # type: ignore[arg-type]
    sampled = evaluate(policy, "gym:CartPole-v1", 8, 3, sampled=True)  # type: ignore[arg-type]
    # always left topples the pole in ~10 steps; a coin flip per step balances ~2x longer
    assert greedy.max() <= 12 and sampled.mean() > 1.5 * greedy.mean()
    np.testing.assert_array_equal(sampled, evaluate(policy, "gym:CartPole-v1", 8, 3, sampled=True))  # type: ignore[arg-type]
