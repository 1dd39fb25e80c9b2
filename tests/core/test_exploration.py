import numpy as np

from actorq.core.exploration import (
    EVAL_EPSILON,
    EpsilonGreedy,
    apex_epsilons,
    epsilon_greedy,
    sampled_actions,
)
from actorq.quant.heads import head


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


def test_a_warmup_acts_uniformly_on_the_untrained_snapshot_only() -> None:
    """``random_warmup`` (DQN): while actors hold version 0, the untrained network, every env
    acts uniformly whatever the Q-values (SB3's and CleanRL's start); from the first trained
    snapshot on, epsilon-greedy as without it."""
    from types import SimpleNamespace

    from actorq.core.exploration import make_behaviour

    q = np.tile([[0.0, 1.0, 0.0]], (4, 1))  # one action everywhere, as Pong's untrained net
    pol = make_behaviour("epsilon_greedy_warmup", 3, [0.0] * 4, seed=0)
    assert isinstance(pol, EpsilonGreedy)
    pol.set_snapshot(SimpleNamespace(version=0))  # type: ignore[arg-type]
    acts = np.array([pol.act(q.copy())[0] for _ in range(3000)])
    np.testing.assert_allclose(np.bincount(acts.ravel(), minlength=3) / acts.size, 1 / 3, atol=0.02)
    pol.set_snapshot(SimpleNamespace(version=1))  # type: ignore[arg-type]
    assert all((pol.act(q.copy())[0] == 1).all() for _ in range(100))  # eps 0: greedy
    plain = make_behaviour("epsilon_greedy", 3, [0.0] * 4, seed=0)
    plain.set_snapshot(SimpleNamespace(version=0))  # type: ignore[arg-type]
    assert (plain.act(q.copy())[0] == 1).all()  # Ape-X: greedy on it from the first step


def test_dqn_actors_get_the_warmup_where_the_config_asks() -> None:
    from actorq import DQNConfig
    from actorq.agents import builder_for

    for warm, kind in ((True, "epsilon_greedy_warmup"), (False, "epsilon_greedy")):
        cfg = DQNConfig(random_warmup=warm)
        builder = builder_for(cfg)
        assert builder.actor_setup(cfg, builder.env_spec(cfg)).behaviour == kind


# -- a sampled evaluation's actions (Atari's protocol): categorical draws from its softmax, a Q
# head is ε-greedy, continuous heads stay greedy
def test_a_categorical_head_samples_its_softmax() -> None:
    logits = np.log(np.array([[0.7, 0.2, 0.1]] * 20_000))
    a = sampled_actions(head("categorical"), logits, np.random.default_rng(0))
    freq = np.bincount(a, minlength=3) / len(a)
    np.testing.assert_allclose(freq, [0.7, 0.2, 0.1], atol=0.015)
    # seeded: the same draws again; a huge logit is always taken
    np.testing.assert_array_equal(
        a, sampled_actions(head("categorical"), logits, np.random.default_rng(0))
    )
    sure = np.array([[0.0, 50.0, 0.0]] * 100)
    assert (sampled_actions(head("categorical"), sure, np.random.default_rng(1)) == 1).all()


def test_a_q_head_is_epsilon_greedy_and_continuous_heads_stay_greedy() -> None:
    q = np.tile(np.array([[0.1, 0.9, 0.3, 0.2]]), (40_000, 1))
    a = sampled_actions(head("q"), q, np.random.default_rng(0))
    # a random action is the greedy one a quarter of the time
    off = float((a != 1).mean())
    assert abs(off - EVAL_EPSILON * 3 / 4) < 0.006, off
    assert set(np.unique(a)) == {0, 1, 2, 3}
    g = np.array([0, 2, 1])
    np.testing.assert_array_equal(epsilon_greedy(g, 3, np.random.default_rng(0), 0.0), g)
    mean = np.array([[0.2, -2.0]])
    for name in ("deterministic", "gaussian"):
        np.testing.assert_array_equal(
            sampled_actions(head(name), mean, np.random.default_rng(0)), head(name).greedy(mean)
        )
