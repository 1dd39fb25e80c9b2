"""The embedded backends: synchronous (one process) and local (N processes, shared memory).

Both own the agent's replay kind in the learner's process (built from the builder's table
config) and implement :class:`~actorq.distributed.backend.Backend`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from actorq.core.interfaces import ParameterSink, ParameterSource
from actorq.core.loop import ActorSetup, make_actor
from actorq.distributed import shm
from actorq.distributed.backend import BackendContext, BackendStats, select_precision_here
from actorq.errors import ActorFailedError, shown
from actorq.output import open_append, write_output
from actorq.replay.tables import TrajectoryQueue, UniformTable
from actorq.rundir import RunDir
from actorq.types import Batch

__all__ = ["ActorSetup", "BackendStats", "LocalBackend", "SyncBackend"]


def last_error_line(log: Path, tail: int = 65536) -> str:
    """The last non-empty line of an actor's log (a traceback's exception line), printable,
    at most 300 characters; what to say when there is none."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return "no log"
    for line in reversed(lines):
        if line.strip():
            return "".join(c if c.isprintable() else "?" for c in line.strip())[:300]
    return "an empty log"


def channel_items(setup: ActorSetup) -> int:
    """Items an actor's shared-memory channel holds: room for every chunk the gate lets it
    have unconsumed (on-policy), or for many n-step emissions (off-policy)."""
    return setup.gate.channel_items(setup.envs_per_actor, setup.adder)


def _make_table(ctx: BackendContext) -> UniformTable | TrajectoryQueue:
    """The learner's replay, its ring mirrored on the learner's device when the config asks
    (``replay_on_device``): batches then arrive there with no host copy."""
    device = None
    capacity = ctx.table_config.ring_capacity()
    if capacity is not None:
        from actorq.replay.device import replay_device  # torch: learner side only

        device = replay_device(ctx.cfg, capacity, ctx.specs)
    return ctx.table_config.build(ctx.specs, device)


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
    """One actor in the learner's process, stepped only when the learner cannot get a batch.

    Deterministic for a seed: the order of acting and learning depends only on the replay
    rule's counters, never on timing.
    """

    synchronous = True
    select_precision = staticmethod(select_precision_here)  # the actor is this process

    def __init__(self, ctx: BackendContext) -> None:
        self.cache = _LocalCache()
        self.actor = make_actor(ctx.setup.actor_config(0, in_process=True), self.cache)
        self.replay = self.table = _make_table(ctx)
        self.rng = ctx.rng
        self._version = 0
        self._offset = ctx.env_steps_offset
        self._episodes: list[tuple[float, int]] = []
        self._busy = 0.0

    def publish(self, version: int, data: bytes) -> None:
        self.cache.publish(version, data)
        self._version = version
        self.table.release()  # one actor, stepped by us: nothing to tell it

    def next_batch(self) -> Batch | None:
        batch = self.table.next_batch(self.rng, self._version)
        if batch is None:
            self._step_actor()
        return batch

    def ready_batch(self) -> Batch | None:
        return self.table.next_batch(self.rng, self._version)

    def _step_actor(self) -> None:
        t = time.perf_counter()
        self.actor.update()
        items, eps = self.actor.step()
        self._busy += time.perf_counter() - t
        if items:
            self.table.insert(items)
        self._episodes.extend(eps)

    def drain_episodes(self) -> list[tuple[float, int]]:
        out, self._episodes = self._episodes, []
        return out

    def supervise(self) -> int:
        return 0

    def pids(self) -> list[int]:
        return []

    def env_steps(self) -> int:
        return self._offset + self.actor.env_steps

    def stats(self) -> BackendStats:
        a = self.actor
        return BackendStats(
            self.env_steps(),
            self._busy,
            0.0,
            0,
            a.rejected,
            [a.version],
            self.table.stats(),
            actor_infer_s=a.inference_s,
            actor_env_s=a.env_s,
        )

    def close(self) -> None:
        self.actor.close()


#: deaths of one actor slot within :data:`CRASH_WINDOW_S` seconds that stop the run
CRASH_LOOP = 5
CRASH_WINDOW_S = 60.0


def recent_deaths(deaths: dict[int, list[float]], i: int) -> int:
    """Note a death of actor slot ``i`` now in ``deaths`` (each slot's recent deaths' times);
    returns its deaths within :data:`CRASH_WINDOW_S`, this one included. :data:`CRASH_LOOP`
    or more: something kills every incarnation (a SIGBUS, a SIGSEGV in a native library, the
    OOM killer), and restarting it forever makes no progress."""
    now = time.monotonic()
    recent = [t for t in deaths.get(i, []) if now - t < CRASH_WINDOW_S] + [now]
    deaths[i] = recent
    return len(recent)


class LocalBackend:
    """N actor processes on this machine, sharing one snapshot cache in shared memory.

    The learner publishes each snapshot once into the cache (no per-actor work); actors poll its
    version counter and swap snapshots between steps. Transitions come back through one
    shared-memory ring per actor. A dead actor is restarted with its ring intact and counted;
    the learner never blocks on an actor.
    """

    synchronous = False
    select_precision = staticmethod(select_precision_here)  # actors share this machine

    def __init__(self, ctx: BackendContext, channel_capacity: int = 0) -> None:
        setup = ctx.setup
        self.setup, self.n = setup, ctx.cfg.actors
        self.specs = ctx.specs
        num_actors = self.n
        self.run_dir = ctx.run_dir
        self.replay = self.table = _make_table(ctx)
        self.rng = ctx.rng
        self._version = 0
        shm.reclaim_stale()  # segments of earlier runs whose learner was killed
        tag = f"actorq-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._names = {"control": f"{tag}-control", "cache": f"{tag}-cache"}
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * num_actors
        self._closed = False
        try:
            self.control = shm.ControlBlock(self._names["control"], num_actors, create=True)
            self.cache = shm.SharedSnapshotCache(
                self._names["cache"], ctx.snapshot_capacity, create=True
            )
            self.channel_capacity = channel_capacity or channel_items(setup)
            self.channels = []
            for i in range(num_actors):
                name = f"{tag}-chan{i}"
                self._names[f"chan{i}"] = name
                self.channels.append(
                    shm.TransitionChannel(
                        name, ctx.specs, self.channel_capacity, self.control.actor(i), create=True
                    )
                )
            self.restarts = 0
            self._restarts_per_actor = [0] * num_actors
            self._deaths: dict[int, list[float]] = {}  # recent deaths' times, per actor
            self._steps_offset = ctx.env_steps_offset
            RunDir(self.run_dir).actors.mkdir(parents=True, exist_ok=True)
            for i in range(num_actors):
                self._spawn(i)
        except BaseException:
            # no backend reaches the caller to close: the actors spawned so far would poll
            # forever beside a live learner, and its segments outlive it (reclaim_stale spares
            # a live pid's)
            self.close()
            raise

    def _config(self, i: int) -> dict[str, Any]:
        return {
            **self.setup.actor_config(i, self._restarts_per_actor[i]),
            "num_actors": self.n,
            "control": self._names["control"],
            "cache": self._names["cache"],
            "channel": self._names[f"chan{i}"],
            "channel_capacity": self.channel_capacity,
            "specs": {name: spec.to_json() for name, spec in self.specs.items()},
            "parent_pid": os.getpid(),
        }

    def _spawn(self, i: int) -> None:
        path = RunDir(self.run_dir).actor_config(i)
        write_output(path, json.dumps(self._config(i)), "actor config")  # never into a FIFO
        log = open_append(RunDir(self.run_dir).actor_log(i))
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
        w = self.control.words
        w[shm.SNAPSHOT_VERSION] = version
        self._version = version
        # On-policy: the data the learner consumed is now behind it; let its actors go on,
        # with this snapshot or newer (released only now, so nothing starts with the old one).
        released = self.table.release()
        if released:
            w[shm.MIN_VERSION] = version
            for actor, items in released.items():
                self.control.actor(actor)[shm.A_RELEASED] += items

    def _drain(self) -> None:
        # the actors' gate counts a restored replay's credit, and the samples its limiter's
        # place starts at, as the table does (set once the checkpoint's replay is loaded, after
        # the actors started)
        self.control.words[shm.INSERT_CREDIT] = self.table.credit
        self.control.words[shm.SAMPLES] = self.table.samples
        for c in self.channels:
            items = c.drain()
            if items:
                self.table.insert(items)

    def next_batch(self) -> Batch | None:
        """Move the actors' items into the replay, then return a batch when its rule allows
        (sampling a numpy ring is microseconds, so no prefetch thread: it would only contend
        for the GIL)."""
        self._drain()
        batch = self.table.next_batch(self.rng, self._version)
        if batch is not None:
            self.control.words[shm.SAMPLES] = self.table.samples
            return batch
        time.sleep(0.0002)
        return None

    def ready_batch(self) -> Batch | None:
        batch = self.table.next_batch(self.rng, self._version)
        if batch is not None:
            self.control.words[shm.SAMPLES] = self.table.samples
        return batch

    def drain_episodes(self) -> list[tuple[float, int]]:
        out: list[tuple[float, int]] = []
        for c in self.channels:
            out.extend(c.drain_episodes())
        return out

    def supervise(self) -> int:
        """Restart actors that were killed; returns how many were restarted now. An actor that
        raised (exit status 1) stops the run with its error line, as the Ray backend does: it
        would fail again on every restart, and the learner would wait for data forever."""
        if self._closed:
            return 0
        restarted = 0
        for i, p in enumerate(self.procs):
            if p is not None and p.poll() is not None:
                if p.returncode > 0:
                    log = RunDir(self.run_dir).actor_log(i)
                    raise ActorFailedError(
                        f"actor {i} failed: {last_error_line(log)} (its log: {shown(log)})"
                    )
                self._check_crash_loop(i, p.returncode)
                self._restarts_per_actor[i] += 1
                self.restarts += 1
                restarted += 1
                self._spawn(i)
        return restarted

    def _check_crash_loop(self, i: int, returncode: int) -> None:
        """Stop the run with one line when actor ``i`` has been killed :data:`CRASH_LOOP` times
        within :data:`CRASH_WINDOW_S` (:func:`recent_deaths`)."""
        deaths = recent_deaths(self._deaths, i)
        if deaths >= CRASH_LOOP:
            try:
                how = signal.Signals(-returncode).name
            except ValueError:
                how = f"exit status {returncode}"
            log = RunDir(self.run_dir).actor_log(i)
            raise ActorFailedError(
                f"actor {i} was killed {deaths} times in {CRASH_WINDOW_S:.0f} s, last by "
                f"{how}; not restarting it again (its log: {shown(log)})"
            )

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
            extra=self.table.stats(),
            actor_infer_s=sum(int(h[shm.A_INFER_NS]) for h in hs) / 1e9,
            actor_env_s=sum(int(h[shm.A_ENV_NS]) for h in hs) / 1e9,
        )

    def close(self, timeout: float = 5.0) -> None:
        if self._closed:
            return
        self._closed = True
        control = getattr(self, "control", None)  # absent: its creation failed (/dev/shm full)
        if control is not None:
            control.words[shm.STOP] = 1
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
        for name in reversed(self._names.values()):  # the control segment last: the run's
            (shm.shm_dir() / name).unlink(missing_ok=True)  # liveness while the rest go
        for segment in [*getattr(self, "channels", []), getattr(self, "cache", None), control]:
            if segment is not None:
                segment.file.close()  # its descriptor (a ring's lock, the run's liveness)
