import numpy as np
import pytest

from actorq.replay.adders import NStepAdder
from actorq.types import ArraySpec

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


@pytest.mark.parametrize("n", [1, 3, 5])
def test_matches_brute_force_on_random_episodes(n: int) -> None:
    """K envs with random episode ends: every emitted transition equals the one computed
    from the whole recorded episode, and none is missing or duplicated."""
    k, steps, gamma = 6, 300, 0.9
    rng = np.random.default_rng(n)
    obs_spec = ArraySpec((2,), "float32")
    adder = NStepAdder(n, gamma, k, obs_spec, ACT)
    ids = iter(range(1, 10**9))

    def fresh() -> np.ndarray:
        return np.array([[next(ids), 0.0] for _ in range(k)], np.float32)

    cur = fresh()
    adder.observe_first(cur)
    episodes: list[list[list[tuple[float, int, float]]]] = [[[]] for _ in range(k)]
    ends: list[list[tuple[bool, float]]] = [[] for _ in range(k)]  # (terminated, final id)
    got = []
    for _ in range(steps):
        act = rng.integers(0, 3, k)
        rew = rng.normal(size=k).astype(np.float32)
        nxt = fresh()
        end = rng.random(k) < 0.15
        term = end & (rng.random(k) < 0.5)
        trunc = end & ~term
        final = fresh()  # last observation of the ended episodes
        for e in range(k):
            episodes[e][-1].append((float(cur[e, 0]), int(act[e]), float(rew[e])))
            if end[e]:
                ends[e].append((bool(term[e]), float(final[e, 0])))
                episodes[e].append([])
        # envs that did not end: their next obs is nxt; ended ones reset to nxt as well
        b = adder.add(act, rew, nxt, term, trunc, final if end.any() else None)
        if b:
            got += [
                (float(o[0]), int(a), float(r), float(d), float(x[0]))
                for o, a, r, d, x in zip(
                    b["obs"], b["action"], b["reward"], b["discount"], b["next_obs"], strict=True
                )
            ]
        cur = nxt
    want = []
    for e in range(k):
        for ep, (terminated, final_id) in zip(episodes[e], ends[e], strict=False):
            T = len(ep)
            for t in range(T):
                m = min(n, T - t)
                ret = sum(gamma**j * ep[t + j][2] for j in range(m))
                at_end = t + m == T
                disc = 0.0 if (at_end and terminated) else gamma**m
                nxt_id = final_id if at_end else ep[t + m][0]
                want.append((ep[t][0], ep[t][1], ret, disc, nxt_id))
        # the episode still running: only its complete windows are out
        ep = episodes[e][-1]
        for t in range(len(ep) - n + 1):
            ret = sum(gamma**j * ep[t + j][2] for j in range(n))
            nxt_id = ep[t + n][0] if t + n < len(ep) else float(cur[e, 0])
            want.append((ep[t][0], ep[t][1], ret, gamma**n, nxt_id))
    # each observation id belongs to one step of one env, so it keys its transition
    assert len(got) == len({g[0] for g in got}) == len(want)
    by_obs = {w[0]: w for w in want}
    for g in got:
        w = by_obs[g[0]]
        assert (g[1], g[4]) == (w[1], w[4])
        assert g[2:4] == pytest.approx(w[2:4], rel=1e-5, abs=1e-5)
