"""GO's self-imitation (Oh et al. 2018): the best decision per graph is kept, checkpointed and
restored, and with ``sil_coef > 0`` the update pulls the policy toward it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actorq import train
from actorq.agents.go.builder import BUILDER
from actorq.agents.go.config import GOConfig
from actorq.agents.go.learning import GOLearner
from actorq.types import Batch

from .conftest import sampled_batch

ENV = "graphopt:placement/synthetic-60-s0"


def _learner(**kw: Any) -> GOLearner:
    cfg = GOConfig(env=ENV, actors=0, precision="fp32", update_epochs=1, **kw)
    cfg.validate()
    return BUILDER.make_learner(cfg, BUILDER.env_spec(cfg))


def _batch(learner: GOLearner, rewards: list[float], seed: int) -> Batch:
    return sampled_batch(learner, rewards, seed)


def _log_prob(learner: GOLearner, actions: torch.Tensor) -> float:
    with torch.no_grad():
        lp = torch.log_softmax(learner.model(**learner._inputs[0])["placement"], -1)
    return float(lp.gather(1, actions[:, :1]).sum())


def test_the_best_decision_per_graph_is_kept() -> None:
    learner = _learner()
    first = _batch(learner, [-1.0, -0.8, -1.2, -0.9], seed=0)
    learner.update(first)
    assert learner.best_reward[0] == pytest.approx(-0.8)
    best = learner.best_actions[0]
    assert best is not None
    np.testing.assert_array_equal(best.numpy(), first["actions"][1].astype(np.int64))
    learner.update(_batch(learner, [-1.0, -0.9, -0.95, -0.85], seed=1))  # none better
    assert learner.best_reward[0] == pytest.approx(-0.8)
    np.testing.assert_array_equal(learner.best_actions[0].numpy(), best.numpy())
    # rewards are -sqrt(S / S_ref): the best step time follows from the best reward
    ref = learner.tasks[0].env.reference_time
    assert learner.best_times()[0] == pytest.approx(0.64 * ref)


def test_self_imitation_pulls_the_policy_toward_the_best_decision() -> None:
    """After a batch with one standout decision, batches of equal rewards carry no PPO
    advantage: only self-imitation moves the policy toward the kept best (the entropy bonus
    alone moves it away)."""
    gains = {}
    for coef in (0.0, 1.0):
        learner = _learner(sil_coef=coef, learning_rate=1e-3, ent_coef=0.01)
        learner.update(_batch(learner, [-1.0, -1.0, -0.5, -1.0], seed=0))
        best = learner.best_actions[0]
        assert best is not None
        before = _log_prob(learner, best)
        for s in range(5):
            learner.update(_batch(learner, [-1.0] * 4, seed=10 + s))
        gains[coef] = _log_prob(learner, best) - before
    assert gains[1.0] > 1.0 and gains[0.0] < 0.1, gains


def test_no_pull_when_the_best_is_not_above_the_baseline() -> None:
    learner = _learner(sil_coef=1.0)
    learner.update(_batch(learner, [-1.0] * 4, seed=0))
    w = learner.track_best(
        {0: np.arange(4)}, np.full(4, -1.0), torch.zeros(4, 60, 3), np.zeros(4, bool), 0.0
    )
    assert w == {0: 0.0}


def test_the_best_decisions_survive_a_checkpoint_and_resume(
    tiny: Callable[..., GOConfig],
) -> None:
    cfg = tiny("go", env=ENV, total_steps=64, eval_every=10_000, sil_coef=1.0)
    first = train(cfg)
    state = json.loads((Path(first.run_dir) / "checkpoint" / "state.json").read_text())
    best = state["learner"]["best_reward"][0]
    assert best is not None and state["learner"]["best_time"][0] > 0
    again = tiny("go", env=ENV, total_steps=128, resume=first.run_dir, run_dir=None, sil_coef=1.0)
    spec = BUILDER.env_spec(again)
    learner = BUILDER.make_learner(again, spec)
    from actorq import checkpoint as ckpt

    tensors, saved, _ = ckpt.load(Path(first.run_dir) / "checkpoint")
    learner.load_state(tensors, saved["learner"])
    assert learner.best_reward[0] == pytest.approx(best)
    assert learner.best_actions[0] is not None and learner.best_actions[0].shape == (60, 3)
    r = train(again)
    assert r.env_steps == 128
    after = json.loads((Path(r.run_dir) / "checkpoint" / "state.json").read_text())
    assert after["learner"]["best_reward"][0] >= best  # never forgotten, only improved


def test_sil_coef_must_be_finite_and_non_negative() -> None:
    from actorq.errors import ConfigError

    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="sil"):
            GOConfig(env=ENV, sil_coef=bad).validate()
