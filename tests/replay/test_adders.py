import numpy as np
import pytest

from actorq.core.types import ArraySpec
from actorq.replay.adders import NStepAdder

OBS, ACT = ArraySpec((1,), "float32"), ArraySpec((), "int64")
G = 0.5


def run(n: int, rewards: list[float], end: str, k: int = 1) -> dict[str, np.ndarray]:
    """One episode of len(rewards) steps in env 0 (obs = time index); returns all transitions."""
    adder = NStepAdder(n, G, k, OBS, ACT)
    adder.observe_first(np.zeros((k, 1), np.float32))
    out: list[dict[str, np.ndarray]] = []
    T = len(rewards)
    for t in range(T):
        last = t == T - 1
        term = np.array([last and end == "term"] + [False] * (k - 1))
        trunc = np.array([last and end == "trunc"] + [False] * (k - 1))
        nxt = np.full((k, 1), t + 1, np.float32)
        if last:
            nxt[0] = 100.0  # reset observation of the next episode
        final = np.full((k, 1), t + 1, np.float32)
        b = adder.add(np.full(k, t), np.full(k, rewards[t], np.float32), nxt, term, trunc, final)
        if b:
            out.append(b)
    return {key: np.concatenate([b[key] for b in out]) for key in out[0]}


def by_start(tr: dict[str, np.ndarray]) -> dict[int, tuple[float, float, float]]:
    return {
        int(a): (float(r), float(d), float(o[0]))
        for a, r, d, o in zip(
            tr["action"], tr["reward"], tr["discount"], tr["next_obs"], strict=True
        )
    }


def test_three_step_returns_terminated_by_hand() -> None:
    tr = by_start(run(3, [1.0, 2.0, 3.0, 4.0], "term"))
    # (R, discount, next_obs) per start step t
    assert tr[0] == pytest.approx((1 + 0.5 * 2 + 0.25 * 3, G**3, 3.0))
    assert tr[1] == pytest.approx((2 + 0.5 * 3 + 0.25 * 4, 0.0, 4.0))
    assert tr[2] == pytest.approx((3 + 0.5 * 4, 0.0, 4.0))
    assert tr[3] == pytest.approx((4.0, 0.0, 4.0))
    assert len(tr) == 4


def test_truncation_bootstraps_from_final_observation() -> None:
    tr = by_start(run(3, [1.0, 1.0, 1.0, 1.0], "trunc"))
    assert tr[1] == pytest.approx((1.75, G**3, 4.0))
    assert tr[2] == pytest.approx((1.5, G**2, 4.0))
    assert tr[3] == pytest.approx((1.0, G**1, 4.0))
    assert all(o != 100.0 for _, _, o in tr.values())  # never the next episode's first obs


def test_one_step_and_short_episode() -> None:
    tr = by_start(run(1, [2.0, 3.0], "term"))
    assert tr == {0: pytest.approx((2.0, G, 1.0)), 1: pytest.approx((3.0, 0.0, 2.0))}
    tr = by_start(run(5, [1.0, 1.0], "term"))  # shorter than n
    assert tr[0] == pytest.approx((1.5, 0.0, 2.0)) and tr[1] == pytest.approx((1.0, 0.0, 2.0))


def test_vectorized_envs_each_emit_their_own_transitions() -> None:
    tr = run(2, [1.0, 1.0, 1.0], "term", k=3)
    # env 0: 3 transitions (episode ends); envs 1, 2 still running: 2 full windows each
    assert len(tr["reward"]) == 3 + 2 * 2


def test_next_episode_starts_clean() -> None:
    adder = NStepAdder(3, G, 1, OBS, ACT)
    adder.observe_first(np.zeros((1, 1), np.float32))
    f, t = np.array([False]), np.array([True])
    one = np.ones(1, np.float32)
    adder.add(
        np.zeros(1), one, np.full((1, 1), 100.0, np.float32), t, f, np.ones((1, 1), np.float32)
    )
    b = adder.add(np.zeros(1), one, np.full((1, 1), 101.0, np.float32), f, f, None)
    assert not b  # the new episode has one step: nothing to emit yet
    b = adder.add(np.zeros(1), one, np.full((1, 1), 102.0, np.float32), f, f, None)
    b = adder.add(np.zeros(1), one, np.full((1, 1), 103.0, np.float32), f, f, None)
    assert b["obs"][0, 0] == 100.0  # starts from the reset observation, not the old episode
