import numpy as np

from actorq.core.exploration import EpsilonGreedy, apex_epsilons


def test_apex_schedule() -> None:
    e = apex_epsilons(8, 0.4, 7.0)
    assert e[0] == np.float64(0.4) and np.isclose(e[-1], 0.4**8)
    assert (np.diff(e) < 0).all()
    assert apex_epsilons(1).tolist() == [0.4]


def test_epsilon_greedy_rates() -> None:
    q = np.tile([[0.0, 1.0, 0.0]], (2, 1))
    pol = EpsilonGreedy(np.array([0.0, 1.0]), 3, seed=0)
    acts = np.array([pol(q.copy()) for _ in range(3000)])
    assert (acts[:, 0] == 1).all()  # eps 0: always greedy
    assert abs((acts[:, 1] == 1).mean() - 1 / 3) < 0.05  # eps 1: uniform
