"""Replay kinds: the trajectory adder's chunks, the consume-once queue's staleness bound and
release accounting, the actors' gates."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from actorq.replay.adders import TrajectoryAdder
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.specs import gate_from_json, table_from_json
from actorq.replay.tables import (
    GateCounters,
    QueueGate,
    RatioGate,
    TrajectoryQueue,
    UniformTable,
)
from actorq.types import ArraySpec, EnvSpec, trajectory_specs

SPEC = EnvSpec("x", ArraySpec((2,), "float32"), ArraySpec((), "int64"), num_actions=3)


def test_trajectory_adder_chunks_and_episode_ends() -> None:
    k, t = 2, 3
    adder = TrajectoryAdder(t, k, SPEC, actor=5)
    adder.observe_first(np.zeros((k, 2), np.float32))
    out = {}
    for step in range(t):
        assert adder.at_boundary == (step == 0)
        nxt = np.full((k, 2), step + 1, np.float32)
        term = np.array([step == 1, False])
        final = np.full((k, 2), -1.0, np.float32) if term.any() else None
        out = adder.add(
            np.array([step, step]),
            np.array([1.0, 2.0]),
            nxt,
            term,
            np.zeros(k, bool),
            final,
            {"log_prob": np.array([-0.5, -0.7], np.float32)},
            version=7,
        )
        assert (out == {}) == (step < t - 1)
    assert adder.at_boundary
    assert {k_: v.shape[:2] for k_, v in out.items() if v.ndim >= 2} == {
        "obs": (2, 3), "action": (2, 3), "log_prob": (2, 3), "reward": (2, 3),
        "terminated": (2, 3), "truncated": (2, 3), "next_obs": (2, 3),
    }  # fmt: skip
    assert set(out) == set(trajectory_specs(SPEC, t))
    np.testing.assert_array_equal(out["obs"][0, :, 0], [0, 1, 2])
    np.testing.assert_array_equal(out["next_obs"][0, :, 0], [1, -1, 3])  # final obs at the end
    np.testing.assert_array_equal(out["next_obs"][1, :, 0], [1, 2, 3])
    np.testing.assert_array_equal(out["terminated"][0], [0, 1, 0])
    assert (out["version"] == 7).all() and (out["actor"] == 5).all()


def _chunks(n: int, version: int, actor: int = 0) -> dict[str, np.ndarray]:
    specs = trajectory_specs(SPEC, 2)
    batch = {name: s.zeros(n) for name, s in specs.items()}
    batch["version"][:] = version
    batch["actor"][:] = actor
    return batch


@settings(max_examples=200, deadline=None)
@given(
    max_lag=st.integers(1, 3),
    batch_items=st.integers(1, 4),
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 3), st.integers(1, 3), st.integers(0, 2)),
        max_size=40,
    ),
)
def test_queue_never_hands_out_data_staler_than_its_bound(
    max_lag: int, batch_items: int, ops: list[tuple[bool, int, int, int]]
) -> None:
    q = TrajectoryQueue(trajectory_specs(SPEC, 2), batch_items, max_lag)
    version, inserted = 0, 0
    for insert, back, n, actor in ops:
        if insert:  # data collected with a snapshot up to 3 versions old
            q.insert(_chunks(n, max(0, version - back), actor))
            inserted += n
            continue
        batch = q.next_batch(None, version)
        if batch is not None:
            assert len(batch["version"]) == batch_items
            assert (version - batch["version"] < max_lag).all()
            version += 1  # the learner updated and published
    released = q.release()
    assert sum(released.values()) == q.taken + q.dropped
    assert q.taken + q.dropped + q.size == inserted


def test_queue_takes_oldest_first_and_releases_per_actor() -> None:
    q = TrajectoryQueue(trajectory_specs(SPEC, 2), batch_items=3, max_lag=1)
    q.insert(_chunks(2, 0, actor=0))
    assert q.next_batch(None, 0) is None  # not enough yet
    q.insert(_chunks(2, 0, actor=1))
    batch = q.next_batch(None, 0)
    assert batch is not None and batch["actor"].tolist() == [0, 0, 1]
    assert q.release() == {0: 2, 1: 1} and q.release() == {}
    # the learner moved on: the left-over chunk of version 0 is stale and is dropped
    assert q.next_batch(None, 1) is None and q.dropped == 1 and q.size == 0
    assert q.release() == {1: 1}


def test_gates() -> None:
    gate = gate_from_json({"kind": "queue", "chunk_items": 4, "max_lag": 2}).build()
    assert isinstance(gate, QueueGate)
    ok = GateCounters(num=4, own_written=4, own_released=0, version=3, min_version=3)
    assert gate.allows(ok)
    assert not gate.allows(GateCounters(num=4, own_written=8, version=3, min_version=3))
    assert not gate.allows(GateCounters(num=4, own_written=4, version=2, min_version=3))
    lim = SampleToInsertRatio(2.0, 10, 5.0)
    ratio = gate_from_json({"kind": "uniform", "limiter": {"samples_per_insert": 2.0,
                           "min_size_to_sample": 10, "error_buffer": 5.0}}).build()  # fmt: skip
    assert ratio == RatioGate(lim)
    assert ratio.allows(GateCounters(num=4, total_inserts=0, samples=0))
    assert not ratio.allows(GateCounters(num=4, total_inserts=40, samples=0))


UNIFORM_SPECS = {"obs": ArraySpec((2,), "float32"), "reward": ArraySpec((), "float32")}
#: a uniform table that samples batches of 4 once 8 items are in, one sample per insert
UNIFORM = {
    "kind": "uniform",
    "capacity": 100,
    "limiter": {"samples_per_insert": 1.0, "min_size_to_sample": 8, "error_buffer": 8.0},
    "batch_size": 4,
}


def test_uniform_table_follows_its_limiter() -> None:
    specs, cfg = UNIFORM_SPECS, UNIFORM
    table = table_from_json(cfg).build(specs)
    assert isinstance(table, UniformTable) and table.persistent
    rng = np.random.default_rng(0)
    assert table.next_batch(rng) is None
    table.insert({"obs": np.zeros((8, 2), np.float32), "reward": np.zeros(8, np.float32)})
    got = [table.next_batch(rng) for _ in range(5)]
    # diff = inserts * spi - samples must stay >= offset - buffer = 0: two batches of 4
    assert [g is not None for g in got] == [True, True, False, False, False]
    assert table.sample_states(3, rng).shape == (3, 2)


def test_a_restored_replay_counts_as_inserted_up_to_the_minimum(tmp_path: Any) -> None:
    """A resumed learner samples at once from a full restored replay (credit = the rule's
    minimum), and waits only for the rest from a partial one; the actors' gate counts the
    credit too (the local backend's shared insert count)."""
    from actorq.distributed import shm

    specs, cfg = UNIFORM_SPECS, UNIFORM
    rng = np.random.default_rng(0)
    for held, credit in [(12, 8), (5, 5)]:
        old = table_from_json(cfg).build(specs)
        old.insert({"obs": np.zeros((held, 2), np.float32), "reward": np.zeros(held, np.float32)})
        old.save(tmp_path / f"r{held}.npz")
        new = table_from_json(cfg).build(specs)
        assert new.credit == 0 and new.next_batch(rng) is None
        new.load(tmp_path / f"r{held}.npz")
        assert (new.credit, new.inserts, new.size) == (credit, credit, held)
        assert (new.next_batch(rng) is not None) == (held >= 8)
    control = shm.ControlBlock(f"actorq-test-{os.getpid()}", 2, create=True)
    try:
        control.actor(1)[shm.A_WRITE] = 3
        control.words[shm.INSERT_CREDIT] = 8
        assert control.total_inserts() == 11
    finally:
        control.file.unlink()


def test_a_resumed_table_starts_at_the_checkpoints_lead_not_a_whole_insert_from_it(
    tmp_path: Any,
) -> None:
    """The limiter's place a checkpoint saved (a local run's own, or a Ray run's shards summed)
    is where the resumed table starts: 8,003 at 8 samples per insert is 1,001 inserts less 5
    samples (rounded to 1,000 inserts, it was 8,000: three samples the learner skipped); at
    2.5 per insert, within half a sample."""
    for spi, lead in ((8.0, 8003.0), (8.0, 8000.0), (2.5, 1001.0), (8.0, -12.0)):
        cfg = {**UNIFORM, "limiter": {**UNIFORM["limiter"], "samples_per_insert": spi}}
        table = table_from_json(cfg).build(UNIFORM_SPECS)
        table.insert({"obs": np.zeros((20, 2), np.float32), "reward": np.zeros(20, np.float32)})
        table.save(tmp_path / "r.npz")
        table.load(tmp_path / "r.npz")
        table.resume_at(lead)
        assert abs(table.lead - lead) <= 0.5 and table.samples >= 0, (spi, lead, table.lead)
        assert table.credit == table.inserts and table.credit * spi >= lead
    assert (table.credit, table.samples) == (0, 12)
