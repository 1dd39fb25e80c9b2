"""`--precision auto`'s states (`actorq.run.precision`)."""

from __future__ import annotations

import numpy as np

from actorq.config import ExperimentConfig
from actorq.envs import env_spec
from actorq.run.precision import random_states


def test_random_states_are_distinct_steps_not_one_buffer_repeated() -> None:
    """A vector env made with copy=False rewrites one buffer every step: states kept by
    reference were the last step's K rows, repeated (int8 calibration and the 99% agreement
    rule then judged K states)."""
    cfg = ExperimentConfig(env="gym:CartPole-v1", envs_per_actor=4, seed=3)
    states = random_states(cfg, env_spec(cfg.env), n=256)
    assert states.shape == (4 * (1 + 256 // 4), 4)
    assert len(np.unique(states, axis=0)) > 200
