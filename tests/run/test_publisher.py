"""The publisher's calibration states: GPTQ rounds an MLP's int8 weights on replay states at
each publish — PPO's too, whose queue is empty when it publishes (the learner has just taken
its batch) yet keeps that batch's states."""

from __future__ import annotations

import numpy as np

from actorq import PPOConfig
from actorq.replay.tables import TrajectoryQueue
from actorq.run.publisher import Publisher
from actorq.types import ArraySpec


def test_ppo_publishes_calibrate_gptq_on_the_batch_the_learner_just_took() -> None:
    cfg = PPOConfig(precision="int8", calibration="gptq", calibration_states=16)
    assert cfg.uses_gptq()
    specs = {"obs": ArraySpec((8, 4), "float32"), "version": ArraySpec((), "int64"),
             "actor": ArraySpec((), "int64")}  # fmt: skip
    queue = TrajectoryQueue(specs, batch_items=2)
    obs = np.arange(2 * 8 * 4, dtype=np.float32).reshape(2, 8, 4)
    queue.insert({"obs": obs, "version": np.zeros(2, np.int64), "actor": np.zeros(2, np.int64)})
    assert queue.next_batch() is not None and queue.size == 0
    pub = Publisher(cfg, io=object())  # type: ignore[arg-type]  # MLP path: io not asked
    pub.replay = queue
    states = pub._calibration(3, "int8")
    assert states is not None and states.shape == (16, 4)
    rows = {tuple(r) for r in obs.reshape(-1, 4).tolist()}
    assert all(tuple(r) in rows for r in states.tolist())  # the batch's own states
    again = pub._calibration(3, "int8")
    assert again is not None and np.array_equal(states, again)  # keyed by (seed, version)
    pub.replay = TrajectoryQueue(specs, batch_items=2)  # nothing taken yet: round to nearest
    assert pub._calibration(3, "int8") is None
