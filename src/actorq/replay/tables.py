"""Replay kinds: what the learner's data arrives into, and the rule actors obey when inserting.

An agent's builder picks one kind and describes it as a typed spec
(:mod:`actorq.replay.specs`); every backend builds it from that spec (the local backends in the
learner's process, the Ray backend in its replay shards), so no backend builds replay on its
own:

* ``uniform`` (DQN, D4PG): a ring buffer of transitions sampled uniformly, behind a Reverb-style
  samples-per-insert rate limiter (:class:`UniformTable`, :class:`SampleToInsertRatio`).
* ``queue`` (PPO): a consume-once FIFO of trajectory chunks with a staleness bound in policy
  versions (:class:`TrajectoryQueue`, :class:`QueueGate`).

The actor side of each rule is a *gate* (:class:`RatioGate`, :class:`QueueGate`): a pure function of
counters the backend keeps (shared memory locally, the shard's replies on Ray), so it works across
processes. numpy only (actors import the gates).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from pathlib import Path
from typing import Protocol

import numpy as np

from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.ring import ReplayBuffer
from actorq.types import ArraySpec, Batch, batch_len


@dataclasses.dataclass(frozen=True)
class GateCounters:
    """What an actor knows when it asks whether it may produce its next ``num`` items."""

    num: int  # items the next step (or chunk) may insert
    total_inserts: int = 0  # items inserted by all actors (this session)
    samples: int = 0  # items the learner has sampled (this session)
    own_written: int = 0  # items this actor has inserted
    own_released: int = 0  # of those, items the learner consumed and published past
    version: int = -1  # snapshot version the actor holds
    min_version: int = 0  # oldest snapshot version the learner accepts new data from


class Gate(Protocol):
    def allows(self, c: GateCounters) -> bool: ...


@dataclasses.dataclass(frozen=True)
class RatioGate:
    """Off-policy: Reverb's samples-per-insert rule (inserts wait for the learner to sample)."""

    limiter: SampleToInsertRatio

    def allows(self, c: GateCounters) -> bool:
        return self.limiter.can_insert(c.num, c.total_inserts, c.samples)


@dataclasses.dataclass(frozen=True)
class QueueGate:
    """On-policy: an actor may start a chunk while it has fewer than ``max_lag`` chunks the
    learner has not consumed *and published past*, and only with a snapshot at least as new as
    the learner's latest release asks for.

    With ``max_lag=1`` every chunk is collected with the newest policy and consumed before the
    next one starts (synchronous PPO); with ``max_lag=L`` actors run up to ``L - 1`` versions
    ahead of the learner (asynchronous, APPO-like; the importance ratio against the recorded
    log-probabilities corrects the lag).
    """

    chunk_items: int
    max_lag: int = 1

    def allows(self, c: GateCounters) -> bool:
        unreleased = c.own_written - c.own_released
        return unreleased < self.max_lag * self.chunk_items and c.version >= c.min_version


class Table(Protocol):
    """The learner's side of a replay kind."""

    kind: str
    specs: dict[str, ArraySpec]
    #: Whether checkpoints keep its contents (a consume-once queue does not).
    persistent: bool
    #: Items a restored replay counts as this session's inserts (up to the rule's minimum
    #: size), so a resumed learner samples at once instead of waiting for that many new ones.
    credit: int

    @property
    def size(self) -> int: ...

    def insert(self, batch: Batch) -> None: ...

    def next_batch(self, rng: np.random.Generator, version: int) -> Batch | None:
        """The learner's next batch, or None while the rule says wait."""

    def release(self) -> dict[int, int]:
        """Items consumed per actor since the last call (the backend tells the actors once the
        learner has published the policy trained on them)."""

    def sample_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Up to ``n`` observations (calibration, agreement checks), outside the rule."""

    def save(self, path: str | Path) -> None: ...

    def load(self, path: str | Path) -> None: ...

    def stats(self) -> dict[str, float]:
        """Metrics of the replay kind for the interval log."""


class UniformTable:
    """A ring buffer sampled uniformly in ``batch_size`` batches whenever the samples-per-insert
    limiter allows (this session's inserts and samples: a restored replay is already in)."""

    kind = "uniform"
    persistent = True

    def __init__(
        self,
        capacity: int,
        specs: dict[str, ArraySpec],
        limiter: SampleToInsertRatio,
        batch_size: int,
        device: str | None = None,
    ) -> None:
        if device is None:
            self.ring = ReplayBuffer(capacity, specs)
        else:  # torch only here: actor processes import this module for the gates
            from actorq.replay.device import DeviceReplayBuffer

            self.ring = DeviceReplayBuffer(capacity, specs, device)
        self.specs = self.ring.specs
        self.limiter, self.batch_size = limiter, batch_size
        self.inserts = self.samples = self.credit = 0

    @property
    def size(self) -> int:
        return self.ring.size

    def insert(self, batch: Batch) -> None:
        n = batch_len(batch)
        if n:
            self.ring.add(batch)
            self.inserts += n

    def can_sample(self) -> bool:
        return self.limiter.can_sample(self.batch_size, self.inserts, self.samples)

    def next_batch(self, rng: np.random.Generator, version: int = 0) -> Batch | None:
        if not self.can_sample():
            return None
        self.samples += self.batch_size
        return self.ring.sample(self.batch_size, rng)

    def release(self) -> dict[int, int]:
        return {}

    def sample(self, n: int, rng: np.random.Generator) -> Batch:
        """``n`` items as numpy arrays, outside the rule (whatever ring holds them)."""
        return ReplayBuffer.sample(self.ring, n, rng)

    def sample_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if not self.ring.size:
            return np.zeros((0, *self.specs["obs"].shape), np.float32)
        return np.asarray(self.sample(min(n, self.ring.size), rng)["obs"])

    def stats(self) -> dict[str, float]:
        return {}

    def save(self, path: str | Path) -> None:
        self.ring.save(path)

    def load(self, path: str | Path) -> None:
        """Restore a saved replay; its items count as inserted up to the rule's minimum size
        (:attr:`Table.credit`; Ray's replay shards do the same), so the ratio starts where a
        full replay keeps it rather than after ``min_size_to_sample`` new inserts
        (:meth:`resume_at` then moves it to where the checkpoint stood, if it says)."""
        self.ring.load(path)
        self.credit = min(self.ring.size, self.limiter.min_size_to_sample)
        self.inserts, self.samples = self.credit, 0

    @property
    def lead(self) -> float:
        """The rate limiter's position: inserts × samples_per_insert − samples (Reverb's diff;
        this session's, with the restored replay's credit)."""
        return self.inserts * self.limiter.samples_per_insert - self.samples

    def resume_at(self, lead: float) -> None:
        """Start this session's limiter at a checkpoint's :attr:`lead`, after :meth:`load`:
        the restored replay counts as that many inserts. From the centre instead, a
        learner-bound run's actors ran ``error_buffer`` samples' worth of inserts ahead again
        after every resume (Atari DQN: 10k steps with no update), an actor-bound one's learner
        as many samples. The place itself, not rounded to a whole insert (up to half of
        samples_per_insert off: a local run's own, or a Ray run's summed shards moved here):
        the inserts that reach it, less the samples past it."""
        spi = self.limiter.samples_per_insert
        self.credit = max(0, math.ceil(lead / spi))
        self.inserts, self.samples = self.credit, round(self.credit * spi - lead)


class TrajectoryQueue:
    """Consume-once FIFO of trajectory chunks: the learner takes ``batch_items`` of them at a
    time, oldest first, and never one collected more than ``max_lag - 1`` versions before the
    policy it is about to update (older ones are dropped and counted in ``dropped``)."""

    kind = "queue"
    persistent = False
    credit = 0

    def __init__(self, specs: dict[str, ArraySpec], batch_items: int, max_lag: int = 1) -> None:
        if batch_items < 1 or max_lag < 1:
            raise ValueError("batch_items and max_lag must be >= 1")
        self.specs = dict(specs)
        self.batch_items, self.max_lag = batch_items, max_lag
        self._parts: deque[Batch] = deque()
        self._n = 0
        self.dropped = 0
        self.taken = 0
        self._released: dict[int, int] = {}
        self._recent: np.ndarray | None = None  # observations of the last batch taken

    @property
    def size(self) -> int:
        return self._n

    def insert(self, batch: Batch) -> None:
        n = batch_len(batch)
        if n:
            self._parts.append(batch)
            self._n += n

    def _drop_stale(self, version: int) -> None:
        kept: deque[Batch] = deque()
        for part in self._parts:
            fresh = version - part["version"] < self.max_lag
            if fresh.all():
                kept.append(part)
                continue
            self.dropped += int((~fresh).sum())
            self._count_release(part, ~fresh)  # consumed (by dropping): the actor may go on
            if fresh.any():
                kept.append({k: v[fresh] for k, v in part.items()})
        self._parts = kept
        self._n = sum(batch_len(p) for p in kept)

    def _count_release(self, part: Batch, mask: np.ndarray | None = None) -> None:
        actors = part["actor"] if mask is None else part["actor"][mask]
        for a, c in zip(*np.unique(actors, return_counts=True), strict=True):
            self._released[int(a)] = self._released.get(int(a), 0) + int(c)

    def next_batch(self, rng: np.random.Generator | None = None, version: int = 0) -> Batch | None:
        self._drop_stale(version)
        if self._n < self.batch_items:
            return None
        parts, need = [], self.batch_items
        while need:
            p = self._parts.popleft()
            n = batch_len(p)
            if n > need:
                self._parts.appendleft({k: v[need:] for k, v in p.items()})
                p = {k: v[:need] for k, v in p.items()}
                n = need
            parts.append(p)
            need -= n
        batch = (
            parts[0]
            if len(parts) == 1
            else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        )
        self._n -= self.batch_items
        self.taken += self.batch_items
        self._count_release(batch)
        if "obs" in batch:  # a workload's items (GO's graph decisions) may carry no states
            self._recent = batch["obs"].reshape(-1, *self.specs["obs"].shape[1:])
        return batch

    def release(self) -> dict[int, int]:
        out, self._released = self._released, {}
        return out

    def take_all(self) -> Batch:
        """Every chunk held, oldest first, whatever its version (a Ray shard hands its chunks
        to the learner's queue, which batches them and checks their staleness)."""
        parts, self._parts, self._n = list(self._parts), deque(), 0
        if len(parts) <= 1:
            return parts[0] if parts else {}
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def sample_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if "obs" not in self.specs:
            return np.zeros((0,), np.float32)
        obs = self._recent
        if obs is None:
            if not self._parts:
                return np.zeros((0, *self.specs["obs"].shape[1:]), np.float32)
            obs = self._parts[-1]["obs"].reshape(-1, *self.specs["obs"].shape[1:])
        idx = rng.choice(len(obs), size=min(n, len(obs)), replace=False)
        return np.asarray(obs[idx])

    def stats(self) -> dict[str, float]:
        # chunks collected with a policy too old to train on (0 in a synchronous run)
        return {"replay/dropped_stale": float(self.dropped)}

    @property
    def samples(self) -> int:
        """Items handed to the learner (the counter the local backend shares with actors)."""
        return self.taken

    def save(self, path: str | Path) -> None:  # nothing to keep: consumed once
        return None

    def load(self, path: str | Path) -> None:
        return None
