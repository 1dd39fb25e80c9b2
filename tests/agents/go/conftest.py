"""Helpers shared by GO's learner tests."""

from __future__ import annotations

import numpy as np
import torch

from actorq.agents.go.actor import HEADS
from actorq.agents.go.learning import GOLearner
from actorq.types import Batch


def sampled_batch(
    learner: GOLearner, rewards: list[float], seed: int, explore: list[bool] | None = None
) -> Batch:
    """Decisions sampled from the learner's own policy on its first graph (so the per-op
    ratio starts at 1), with the given rewards; ``explore`` flags run-move decisions, which
    carry no behaviour log-probs."""
    rng = np.random.default_rng(seed)
    task = learner.tasks[0]
    with torch.no_grad():
        out = {k: v.numpy() for k, v in learner.model(**learner._inputs[0]).items()}
    k, n = len(rewards), task.num_ops
    flags = explore if explore is not None else [False] * k
    actions = np.zeros((k, n, len(HEADS)), np.int8)
    logp = np.zeros((k, n, len(HEADS)), np.float32)
    for j in range(k):
        a, lp = task.decide(out, rng)
        actions[j] = a
        logp[j] = 0.0 if flags[j] else lp
    batch: Batch = {
        "graph": np.zeros(k, np.int32),
        "actions": actions,
        "log_prob": logp,
        "reward": np.asarray(rewards, np.float32),
    }
    if explore is not None:
        batch["explore"] = np.asarray(explore, np.int8)
    return batch
