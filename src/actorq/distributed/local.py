"""Backends that the learner loop drives: synchronous (one process) and local (N processes).

Both offer the same small surface — ``publish``, ``drain``, ``stats``, ``close`` — so the learner
loop in :mod:`actorq.experiment` is the same for every backend.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from actorq.core.exploration import make_exploration
from actorq.core.interfaces import ParameterSink, ParameterSource
from actorq.core.loop import VectorActor
from actorq.core.types import Batch, EnvSpec, transition_specs
from actorq.distributed import shm
from actorq.replay.rate_limiter import SampleToInsertRatio


@dataclasses.dataclass
class ActorSetup:
    """What every actor needs to know; JSON-serializable."""

    env_spec: EnvSpec
    envs_per_actor: int
    noise: list[list[float]]  # per actor, per env: epsilon (discrete) or sigma (continuous)
    n_step: int
    gamma: float
    seed: int
    rate_limiter: SampleToInsertRatio
    runtime: str = "ort"
    threads: int = 1
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class BackendStats:
    env_steps: int
    actor_busy_s: float
    actor_wait_s: float
    actor_restarts: int
    rejected_snapshots: int
    versions: list[int]
    extra: dict[str, float] = dataclasses.field(default_factory=dict)  # backend-specific metrics


class _LocalCache(ParameterSink, ParameterSource):
    """In-process parameter cache for the synchronous mode."""

    def __init__(self) -> None:
        self._v, self._data = -1, b""

    def publish(self, version: int, data: bytes) -> None:
        self._v, self._data = version, data

    def latest_version(self) -> int:
        return self._v

    def fetch(self) -> tuple[int, bytes] | None:
        return None if self._v < 0 else (self._v, self._data)


class SyncBackend:
    """One actor in the learner's process, stepped only when the learner cannot sample.

    Deterministic for a seed: the order of acting and learning depends only on the rate
    limiter's counters, never on timing.
    """

    synchronous = True

    def __init__(self, setup: ActorSetup) -> None:
        self.cache = _LocalCache()
        s = setup
        self.actor = VectorActor(
            s.env_spec.env_id,
            s.env_spec,
            s.envs_per_actor,
            s.seed,
            self.cache,
            make_exploration(s.env_spec.num_actions, s.noise[0], s.seed),
            s.n_step,
            s.gamma,
            s.runtime,
            s.threads,
            s.env_kwargs,
        )
        self._episodes: list[tuple[float, int]] = []
        self._pending: Batch = {}
        self._busy = 0.0

    def publish(self, version: int, data: bytes) -> None:
        self.cache.publish(version, data)

    def step_actor(self) -> None:
        t = time.perf_counter()
        self.actor.update()
        batch, eps = self.actor.step()
        self._busy += time.perf_counter() - t
        if batch:
            self._pending = batch
        self._episodes.extend(eps)

    def drain(self) -> Batch:
        out, self._pending = self._pending, {}
        return out

    def drain_episodes(self) -> list[tuple[float, int]]:
        out, self._episodes = self._episodes, []
        return out

    def set_samples(self, samples: int) -> None:
        pass

    def supervise(self) -> int:
        return 0

    def pids(self) -> list[int]:
        return []

    def env_steps(self) -> int:
        return self.actor.env_steps

    def stats(self) -> BackendStats:
        a = self.actor
        return BackendStats(a.env_steps, self._busy, 0.0, 0, a.rejected, [a.version])

    def close(self) -> None:
        self.actor.close()


class LocalBackend:
    """N actor processes on this machine, sharing one snapshot cache in shared memory.

    The learner publishes each snapshot once into the cache (no per-actor work); actors poll its
    version counter and swap snapshots between steps. Transitions come back through one
    shared-memory ring per actor. A dead actor is restarted with its ring intact and counted;
    the learner never blocks on an actor.
    """

    synchronous = False

    def __init__(
        self,
        setup: ActorSetup,
        num_actors: int,
        run_dir: Path,
        snapshot_capacity: int,
        channel_capacity: int = 0,
        env_steps_offset: int = 0,
    ) -> None:
        self.setup, self.n = setup, num_actors
        self.run_dir = run_dir
        tag = f"actorq-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._names = {"control": f"{tag}-control", "cache": f"{tag}-cache"}
        self.control = shm.ControlBlock(self._names["control"], num_actors, create=True)
        self.cache = shm.SharedSnapshotCache(self._names["cache"], snapshot_capacity, create=True)
        k, n = setup.envs_per_actor, setup.n_step
        self.channel_capacity = channel_capacity or max(8192, 64 * k * n)
        specs = transition_specs(setup.env_spec)
        self.channels = []
        for i in range(num_actors):
            name = f"{tag}-chan{i}"
            self._names[f"chan{i}"] = name
            self.channels.append(
                shm.TransitionChannel(
                    name, specs, self.channel_capacity, self.control.actor(i), create=True
                )
            )
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * num_actors
        self.restarts = 0
        self._restarts_per_actor = [0] * num_actors
        self._steps_offset = env_steps_offset
        self._closed = False
        (run_dir / "actors").mkdir(parents=True, exist_ok=True)
        for i in range(num_actors):
            self._spawn(i)

    def _config(self, i: int) -> dict[str, Any]:
        s = self.setup
        return {
            "actor": i,
            "num_actors": self.n,
            "control": self._names["control"],
            "cache": self._names["cache"],
            "channel": self._names[f"chan{i}"],
            "channel_capacity": self.channel_capacity,
            "env_spec": s.env_spec.to_json(),
            "env_kwargs": s.env_kwargs,
            "envs_per_actor": s.envs_per_actor,
            "noise": s.noise[i],
            "n_step": s.n_step,
            "gamma": s.gamma,
            # distinct per actor and per restart, so a restarted actor does not replay history
            "seed": s.seed + 1000 * (i + 1) + 7919 * self._restarts_per_actor[i],
            "rate_limiter": dataclasses.asdict(s.rate_limiter),
            "runtime": s.runtime,
            "threads": s.threads,
            "parent_pid": os.getpid(),
        }

    def _spawn(self, i: int) -> None:
        path = self.run_dir / "actors" / f"actor{i}.json"
        path.write_text(json.dumps(self._config(i)))
        log = open(self.run_dir / "actors" / f"actor{i}.log", "ab")  # noqa: SIM115
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", "actorq.distributed.actor_proc", str(path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()

    # -- learner-facing surface ------------------------------------------------------------
    def publish(self, version: int, data: bytes) -> None:
        self.cache.publish(version, data)
        self.control.words[shm.SNAPSHOT_VERSION] = version

    def drain(self) -> Batch:
        parts = [b for b in (c.drain() for c in self.channels) if b]
        if not parts:
            return {}
        if len(parts) == 1:
            return parts[0]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def drain_episodes(self) -> list[tuple[float, int]]:
        out: list[tuple[float, int]] = []
        for c in self.channels:
            out.extend(c.drain_episodes())
        return out

    def set_samples(self, samples: int) -> None:
        self.control.words[shm.SAMPLES] = samples

    def supervise(self) -> int:
        """Restart actors that exited; returns how many were restarted now."""
        if self._closed:
            return 0
        restarted = 0
        for i, p in enumerate(self.procs):
            if p is not None and p.poll() is not None:
                self._restarts_per_actor[i] += 1
                self.restarts += 1
                restarted += 1
                self._spawn(i)
        return restarted

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None]

    def env_steps(self) -> int:
        w = self.control.words
        return self._steps_offset + int(
            w[shm.GLOBAL_WORDS + shm.A_ENV_STEPS :: shm.ACTOR_WORDS].sum()
        )

    def stats(self) -> BackendStats:
        hs = [self.control.actor(i) for i in range(self.n)]
        return BackendStats(
            env_steps=self._steps_offset + int(sum(h[shm.A_ENV_STEPS] for h in hs)),
            actor_busy_s=sum(int(h[shm.A_BUSY_NS]) for h in hs) / 1e9,
            actor_wait_s=sum(int(h[shm.A_WAIT_NS]) for h in hs) / 1e9,
            actor_restarts=self.restarts,
            rejected_snapshots=int(sum(h[shm.A_REJECTED] for h in hs)),
            versions=[int(h[shm.A_VERSION]) for h in hs],
        )

    def close(self, timeout: float = 5.0) -> None:
        if self._closed:
            return
        self._closed = True
        self.control.words[shm.STOP] = 1
        deadline = time.monotonic() + timeout
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()
        for p in self.procs:
            if p is not None and p.poll() is None:
                try:
                    p.wait(2.0)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for name in self._names.values():
            (shm.shm_dir() / name).unlink(missing_ok=True)
