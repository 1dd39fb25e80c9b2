"""GO's run-move exploration (``--explore``): some actor decisions are annealing's run moves
from the actor's incumbent; they are flagged, kept out of PPO, and feed the best decision that
self-imitation pulls the policy toward."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actorq import train
from actorq.agents.go.actor import GraphActor, GraphTask
from actorq.agents.go.builder import BUILDER
from actorq.agents.go.config import GOConfig
from actorq.agents.go.learning import GOLearner
from actorq.distributed.local import _LocalCache
from actorq.errors import ConfigError
from actorq.graphopt.baselines import (
    anchor_groups,
    greedy_fusion,
)
from actorq.types import Batch

from .conftest import sampled_batch

ENV = "graphopt:placement/synthetic-120-s0"


def _setup(**kw: Any) -> tuple[GOLearner, GraphActor]:
    kw = {"sil_coef": 1.0, **kw}
    cfg = GOConfig(env=ENV, actors=0, precision="fp32", update_epochs=1, **kw)
    cfg.validate()
    spec = BUILDER.env_spec(cfg)
    learner = BUILDER.make_learner(cfg, spec)
    cache = _LocalCache()
    cache.publish(0, BUILDER.policy_io(cfg, spec, learner).snapshot(0, "fp32"))
    setup = BUILDER.actor_setup(cfg, spec)
    actor = GraphActor.from_config(setup.actor_config(0, in_process=True), cache)
    assert actor.update()
    return learner, actor


def _one_run_moved(task: Any, before: np.ndarray, after: np.ndarray) -> None:
    """``after`` is ``before`` with the ops of consecutive anchor groups on one device."""
    gi = anchor_groups(task.env.sim)[1]
    changed = np.flatnonzero(before != after)
    if changed.size == 0:  # the run's new device may be the one it was on
        return
    lo, hi = gi[changed].min(), gi[changed].max()
    run = (gi >= lo) & (gi <= hi)
    assert len(set(after[run].tolist())) == 1, "a run move puts its ops on one device"
    np.testing.assert_array_equal(before[~run], after[~run])


def test_explored_decisions_are_flagged_run_moves_from_the_incumbent() -> None:
    _, actor = _setup(explore=0.5)
    task = actor.tasks[0]
    n = task.num_ops
    greedy, _ = task.decide(actor.outputs(0), None)
    flagged = sampled = 0
    for _ in range(6):
        before = dict(actor.incumbent)
        items, _ = actor.step()
        for j in range(len(items["reward"])):
            a = items["actions"][j, :n].astype(np.int64)
            if items["explore"][j]:
                flagged += 1
                # not a policy sample: no behaviour log-probs for PPO's ratio
                assert not items["log_prob"][j].any()
                base = before[0][1] if 0 in before else greedy
                _one_run_moved(task, base[:, 0], a[:, 0])
                np.testing.assert_array_equal(a[:, 1:], base[:, 1:])
            else:
                sampled += 1
                assert items["log_prob"][j, :n, 0].any()
            # the incumbent is the best decision the actor has simulated so far
            if 0 not in before or items["reward"][j] > before[0][0]:
                before[0] = (float(items["reward"][j]), a)
        assert actor.incumbent[0][0] == pytest.approx(before[0][0])
    assert flagged > 5 and sampled > 5, (flagged, sampled)


def test_without_explore_nothing_is_flagged_and_no_incumbent_is_kept() -> None:
    _, actor = _setup()
    items, _ = actor.step()
    assert not items["explore"].any() and actor.incumbent == {}
    assert all(items["log_prob"][j, :120, 0].any() for j in range(len(items["reward"])))


def _batch(learner: GOLearner, rewards: list[float], explore: list[bool], seed: int) -> Batch:
    return sampled_batch(learner, rewards, seed, explore)


def test_explored_decisions_feed_the_best_but_not_ppo() -> None:
    learner, _ = _setup(explore=0.5)
    first = _batch(learner, [-1.0, -0.9, -0.5, -0.6], [False, False, True, True], seed=0)
    learner.update(first)
    # the reward baseline is the policy samples' mean only; the best is the explored -0.5
    assert learner.baseline[0] == pytest.approx(-0.95)
    assert learner.best_reward[0] == pytest.approx(-0.5)
    np.testing.assert_array_equal(learner.best_actions[0].numpy(), first["actions"][2])
    # a batch of run moves only: self-imitation alone, the baseline untouched
    out = learner.update(_batch(learner, [-0.4, -0.7], [True, True], seed=1))
    assert learner.baseline[0] == pytest.approx(-0.95)
    assert learner.best_reward[0] == pytest.approx(-0.4)
    assert learner.improved == {"policy": 0, "explore": 1}
    assert out["charts/best_by_explore"] == 1.0 and out["losses/policy_loss"] == 0.0
    learner.update(_batch(learner, [-0.3, -1.0], [False, False], seed=2))
    assert learner.improved == {"policy": 1, "explore": 1}


def test_explore_is_checked() -> None:
    with pytest.raises(ConfigError, match="sil-coef"):
        GOConfig(env=ENV, explore=0.5).validate()
    with pytest.raises(ConfigError, match="placement or joint"):
        GOConfig(env="graphopt:scheduling/synthetic-60-s0", explore=0.5, sil_coef=1).validate()
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ConfigError, match="explore"):
            GOConfig(env=ENV, explore=bad, sil_coef=1).validate()


def test_a_run_with_explore_improves_by_run_moves_and_resumes(
    tiny: Callable[..., GOConfig],
) -> None:
    """From the greedy decision of an untrained policy, run moves find better placements (the
    untrained policy's greedy split is far from the best), and the counts survive a resume."""
    kw = {"env": "graphopt:placement/synthetic-60-s0", "sil_coef": 1.0, "explore": 0.5}
    first = train(tiny("go", total_steps=128, eval_every=10_000, **kw))
    state = json.loads((Path(first.run_dir) / "checkpoint" / "state.json").read_text())
    improved = state["learner"]["improved"]
    assert improved["explore"] > 0, improved
    again = train(
        tiny("go", total_steps=192, resume=first.run_dir, run_dir=None, eval_every=10_000, **kw)
    )
    after = json.loads((Path(again.run_dir) / "checkpoint" / "state.json").read_text())
    assert after["learner"]["improved"]["explore"] >= improved["explore"]
    assert after["learner"]["best_reward"][0] >= state["learner"]["best_reward"][0]


def test_distill_fits_the_policy_to_the_best_decision_found() -> None:
    """Expert iteration: after distilling, the policy's greedy decision is the kept best."""
    learner, _ = _setup(distill_steps=300)
    task = learner.tasks[0]
    rng = np.random.default_rng(0)
    best = np.zeros((task.num_ops, 3), np.int64)
    best[:, 0] = rng.integers(task.env.cluster.num_devices, size=task.num_ops)
    learner.best_actions[0] = torch.from_numpy(best)
    out = learner.finish()
    assert out["distill/accuracy"] >= 0.95, out
    with torch.no_grad():
        greedy = learner.model(**learner._inputs[0])["placement"].argmax(1).numpy()
    assert (greedy == best[:, 0]).mean() >= 0.95
    assert learner.since_distill == 0


def test_no_distillation_without_steps_or_a_kept_decision() -> None:
    learner, _ = _setup()
    assert learner.finish() == {}
    learner, _ = _setup(distill_steps=10)
    assert learner.finish() == {}  # nothing found yet
    with pytest.raises(ConfigError, match="distill-steps"):
        GOConfig(env=ENV, distill_every=100).validate()


def test_a_run_distills_during_training_and_at_the_end(tiny: Callable[..., GOConfig]) -> None:
    kw = {"env": "graphopt:placement/synthetic-60-s0", "sil_coef": 1.0, "explore": 0.5}
    r = train(tiny("go", total_steps=128, eval_every=10_000, distill_steps=50, distill_every=32,
                   **kw))  # fmt: skip
    state = json.loads((Path(r.run_dir) / "checkpoint" / "state.json").read_text())
    # after every update (32 decisions each), and once more at the end
    assert r.updates >= 2 and state["learner"]["distills"] == r.updates + 1
    rows = (Path(r.run_dir) / "metrics.csv").read_text().splitlines()
    final = [line.split(",") for line in rows if ",distill/accuracy," in line][-1]
    assert final[0] == "128" and float(final[3]) >= 0.9, final


def test_no_explore_sil_keeps_run_moves_out_of_self_imitation() -> None:
    """--no-explore-sil: the run moves' finds are the run's best decision, but self-imitation
    pulls toward the best policy sample; both survive a checkpoint."""
    learner, _ = _setup(explore=0.5, explore_sil=False, sil_coef=0.0)
    batch = _batch(learner, [-1.0, -0.9, -0.5, -0.6], [False, False, True, True], seed=0)
    learner.update(batch)
    assert learner.best_reward[0] == pytest.approx(-0.5)  # the run's best: a run move
    reward, target = learner.sil_target(0)
    assert reward == pytest.approx(-0.9) and target is not None  # the best policy sample
    np.testing.assert_array_equal(target.numpy(), batch["actions"][1])
    tensors, meta = learner.state()
    again, _ = _setup(explore=0.5, explore_sil=False, sil_coef=0.0)
    again.load_state(tensors, meta)
    assert again.sil_target(0)[0] == pytest.approx(-0.9)
    np.testing.assert_array_equal(again.sil_target(0)[1].numpy(), batch["actions"][1])
    assert again.best_reward[0] == pytest.approx(-0.5)
    # with the default, self-imitation's target is the best found
    learner, _ = _setup(explore=0.5)
    learner.update(batch)
    assert learner.sil_target(0)[0] == pytest.approx(-0.5)


def test_joint_run_moves_fuse_again_greedily_where_they_moved_ops() -> None:
    """In the joint task a run move re-decides, by greedy fusion on the new placement, the
    fusion bit of every op whose fusable input edge touches a moved op (as the fusing search
    baselines do after each move); every other op keeps its bits and its priority."""
    task = GraphTask("synthetic-120-s0", "joint", "4xgpu-pcie")
    g, sim = task.env.graph, task.env.sim
    rng = np.random.default_rng(0)
    base = np.zeros((g.num_ops, 3), np.int64)
    base[:, 0] = rng.integers(0, 4, g.num_ops)
    base[:, 1] = rng.integers(0, 8, g.num_ops)
    base[:, 2] = rng.integers(0, 2, g.num_ops)
    changed = 0
    for _ in range(40):
        a = task.run_move(base, rng)
        moved = a[:, 0] != base[:, 0]
        touched = task.fusable & (moved[g.src] | moved[g.dst])
        want = base[:, 2].copy()
        want[g.dst[touched]] = greedy_fusion(sim, a[:, 0])[touched]
        np.testing.assert_array_equal(a[:, 2], want)
        np.testing.assert_array_equal(a[:, 1], base[:, 1])
        changed += int((a[:, 2] != base[:, 2]).sum())
        base = a
    assert changed > 0  # the rule did act
    placement = GraphTask("synthetic-120-s0", "placement", "4xgpu-pcie")
    b = base.copy()
    b[:, 2] = 1
    assert (placement.run_move(b, rng)[:, 2] == 1).all()  # no fusion head: bits untouched
