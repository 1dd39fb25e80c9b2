"""How a policy's output becomes an action in a sampled evaluation (Atari's protocol): a
categorical head draws from its softmax, a Q head is ε-greedy, continuous heads stay greedy."""

from __future__ import annotations

import numpy as np

from actorq.quant.heads import EVAL_EPSILON, epsilon_greedy, head


def test_a_categorical_head_samples_its_softmax() -> None:
    logits = np.log(np.array([[0.7, 0.2, 0.1]] * 20_000))
    a = head("categorical").sampled(logits, np.random.default_rng(0))
    freq = np.bincount(a, minlength=3) / len(a)
    np.testing.assert_allclose(freq, [0.7, 0.2, 0.1], atol=0.015)
    # seeded: the same draws again; a huge logit is always taken
    np.testing.assert_array_equal(a, head("categorical").sampled(logits, np.random.default_rng(0)))
    sure = np.array([[0.0, 50.0, 0.0]] * 100)
    assert (head("categorical").sampled(sure, np.random.default_rng(1)) == 1).all()


def test_a_q_head_is_epsilon_greedy_and_continuous_heads_stay_greedy() -> None:
    q = np.tile(np.array([[0.1, 0.9, 0.3, 0.2]]), (40_000, 1))
    a = head("q").sampled(q, np.random.default_rng(0))
    # a random action is the greedy one a quarter of the time
    off = float((a != 1).mean())
    assert abs(off - EVAL_EPSILON * 3 / 4) < 0.006, off
    assert set(np.unique(a)) == {0, 1, 2, 3}
    g = np.array([0, 2, 1])
    np.testing.assert_array_equal(epsilon_greedy(g, 3, np.random.default_rng(0), 0.0), g)
    mean = np.array([[0.2, -2.0]])
    for name in ("deterministic", "gaussian"):
        np.testing.assert_array_equal(
            head(name).sampled(mean, np.random.default_rng(0)), head(name).greedy(mean)
        )
