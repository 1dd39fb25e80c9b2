"""``backend="ray"``: the same experiment on Ray, with Menger's two fixes built in.

Menger (Google, 2020) found that with many actors the learner is throttled by parameter reads
and starved by its input pipeline. Here:

* **Parameter cache tier** — the learner publishes each snapshot once (``ray.put``); one
  :class:`~actorq.distributed.ray_actors.NodeCache` per node pulls it and writes it into the
  node's shared memory, where that node's actors read it (``cache="node"``). Learner egress per
  publish grows with nodes, not actors. ``cache="none"`` makes every actor pull from a
  parameter server on the learner's node, to measure the difference.
* **Sharded replay** — ``replay_shards`` Ray actors, each with its own rate limiter; actors
  insert into a shard on their node (on a node without one, into all shards in turn:
  :func:`actor_shards`); the learner samples across shards.
* **Prefetching input pipeline** — a background thread keeps sample requests in flight to every
  shard and fills a bounded queue; the learner only waits when that queue is empty
  (``perf/learner_wait_frac``).
* **Faults** — Ray restarts a killed actor (``max_restarts``) and :meth:`RayBackend.supervise`
  resumes its loop, unless it cannot come back or dies too often (the local backend's rule:
  the run stops with one line); a killed shard comes back empty, its lost items counted in
  ``faults/*``.

Ray is an optional dependency (``pip install 'actorq[distributed]'``).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import json
import math
import os
import queue
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from actorq.distributed import ray_actors, wire
from actorq.distributed.backend import (
    BackendConfig,
    BackendContext,
    BackendStats,
    PrecisionTrial,
)
from actorq.distributed.cores import usable_cores
from actorq.distributed.local import CRASH_LOOP, CRASH_WINDOW_S, recent_deaths
from actorq.distributed.ray_nodes import (  # re-exported: where they were defined first
    actor_nodes,
    actor_shards,
    cpu_nodes,
    import_ray,
    node_affinity,
    ray_error_line,
)
from actorq.errors import ActorFailedError, ActorQError, ConfigError, first_line
from actorq.replay.npz import MISSING
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.ring import ReplayBuffer
from actorq.replay.specs import UniformSpec
from actorq.replay.tables import TrajectoryQueue
from actorq.types import Batch, batch_len

AUTH_HINT = (
    "set RAY_AUTH_MODE=token and give this machine the cluster's token (copy the head's "
    "~/.ray/auth_token to ~/.ray/auth_token here, or point RAY_AUTH_TOKEN_PATH at a copy, or "
    "set RAY_AUTH_TOKEN): see docs/distributed.md"
)


def init_ray(address: str | None) -> bool:
    """Connect to ``address`` (a running cluster) or start Ray on this machine.
    Returns True if this call started Ray (so the backend shuts it down at the end).

    Ray ≥ 2.52 turns token authentication on for clusters made with ``ray start``; a client
    without the token only sees "Failed to connect" after ~20 s of retries, its cause logged by
    Ray's C++ client on the process's stderr. That stream is captured while connecting, so the
    error can say what to set."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "logging_level": "ERROR",
        "log_to_driver": False,  # actor errors surface through supervise(); logs stay in Ray's
        "configure_logging": True,
    }
    if address:
        kwargs["address"] = address
    else:
        kwargs["num_cpus"] = usable_cores()
    with _captured_stderr() as captured, _kept_signal_handlers():
        try:
            ray.init(**kwargs)
            error: BaseException | None = None
        except (ConnectionError, ray.exceptions.RayError) as e:
            error = e
    log = captured.text
    if error is None:
        sys.stderr.write(log)  # not ours to hide
        return True
    mode = os.environ.get("RAY_AUTH_MODE", "")
    if is_auth_failure(error, log):
        if mode.lower() == "token":
            raise ConfigError(
                f"the Ray cluster at {address!r} refused this machine's token: copy the head's "
                "~/.ray/auth_token here (or set RAY_AUTH_TOKEN_PATH / RAY_AUTH_TOKEN to it)"
            )
        raise ConfigError(f"the Ray cluster at {address!r} requires token authentication: "
                          f"{AUTH_HINT}")  # fmt: skip
    sys.stderr.write(log)
    raise ConfigError(f"cannot connect to Ray at {address!r}: {error}") from None


def is_auth_failure(error: BaseException, log: str) -> bool:
    """Whether a failed ``ray.init`` was refused for its (missing or wrong) token."""
    names = {type(error).__name__, *(c.__name__ for c in type(error).__mro__)}
    return (
        "AuthenticationError" in names
        or "InvalidAuthToken" in log
        or "Unauthenticated" in log
        or "InvalidAuthToken" in str(error)
    )


@contextlib.contextmanager
def _kept_signal_handlers() -> Iterator[None]:
    """Keep this process's SIGINT, SIGTERM and SIGHUP handlers across ``ray.init``. It installs
    its own SIGTERM handler (``sys.exit``; a head it starts, one that kills Ray and exits 1), which
    replaced the run's :class:`~actorq.run.monitor.StopOnSignal`: a SIGTERM (kill, Slurm,
    Kubernetes) then failed the run, without its final checkpoint or summary. Ray's processes
    still stop: :meth:`RayBackend.close` shuts down a Ray it started (its node caches remove
    their shared memory first), and Ray's atexit hook kills them if the learner exits
    otherwise. Ray 2.60 sets no SIGHUP handler; kept all the same, as the run stops on one
    too. Only the main thread can set handlers (Ray sets none elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in kept.items():
            if handler is not None:  # None: set outside Python, cannot be put back
                signal.signal(s, handler)


class _Captured:
    text = ""


@contextlib.contextmanager
def _captured_stderr() -> Iterator[_Captured]:
    """Capture file descriptor 2 (C++ code writes there, not to ``sys.stderr``)."""
    out = _Captured()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.text = tmp.read().decode(errors="replace")


def check_actor_cpus(nodes: list[str], actors: int, actor_cpus: float) -> None:
    """Refuse a placement Ray could never schedule: the actors :func:`actor_nodes` puts on a
    node reserve ``actor_cpus`` each, and a node's CPUs bound them. Ray would leave the rest
    pending forever, and a synchronous learner, which needs a chunk from every actor, would
    wait without a word (a cluster that autoscales adds nodes, not CPUs to these)."""
    ray = import_ray()
    cpus = {n["NodeID"]: float(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"]}
    per_node: dict[str, int] = {}
    for node in actor_nodes(nodes, actors):
        per_node[node] = per_node.get(node, 0) + 1
    for node, count in per_node.items():
        have = cpus.get(node, 0.0)
        if count * actor_cpus > have + 1e-9:
            fit = math.floor(have / count * 100) / 100
            raise ConfigError(
                f"--actors {actors} --actor-cpus {actor_cpus:g}: {count} actors on a node with "
                f"{have:g} CPUs need {count * actor_cpus:g}; Ray would never start the rest "
                f"(use --actor-cpus {fit:g} or fewer actors)"
            )


def shard_limiter(
    limiter: SampleToInsertRatio, shards: int, batch_size: int, max_chunk: int
) -> SampleToInsertRatio:
    """Each shard's limiter: the global ratio, 1/shards of the warm-up and of the error
    buffer — but never a buffer so small that one batch and one insert chunk could deadlock."""
    floor = SampleToInsertRatio.min_error_buffer(batch_size, limiter.samples_per_insert, max_chunk)
    return SampleToInsertRatio(
        limiter.samples_per_insert,
        max(1, math.ceil(limiter.min_size_to_sample / shards)),
        max(limiter.error_buffer / shards, floor),
    )


class ParameterTier:
    """Learner side of the cache tier (a :class:`ParameterSink`): one ``ray.put`` per publish,
    the reference handed to each node cache (or to the parameter server with
    ``cache="none"``)."""

    def __init__(
        self, mode: str, nodes: list[str], capacity: int, tag: str, relays: int = 0
    ) -> None:
        self.mode = mode
        self.caches: dict[str, Any] = {}
        self.relays: list[Any] = []
        self.names: dict[str, str] = {}
        self.server: Any = None
        self._ref: Any = None
        try:
            self._start(mode, nodes, capacity, tag, relays)
        except BaseException:
            self.close()  # no tier reaches the backend to close: its caches' segments with it
            raise

    def _start(self, mode: str, nodes: list[str], capacity: int, tag: str, relays: int) -> None:
        ray = import_ray()
        if mode == "node":
            cls = ray.remote(ray_actors.NodeCache)
            for n in nodes:
                name = f"{tag}-cache-{n[:12]}"
                self.names[n] = name
                self.caches[n] = cls.options(
                    num_cpus=0, scheduling_strategy=node_affinity(n), max_restarts=0
                ).remote(name, capacity)
            for n, c in self.caches.items():  # their files exist before any actor reads them
                try:
                    ray.get(c.info.remote())
                except ray.exceptions.RayError as e:
                    # e.g. a full /dev/shm (ResourceError): one line, not Ray's traceback
                    raise ActorQError(
                        f"the parameter cache on node {n[:12]} could not start: {ray_error_line(e)}"
                    ) from None
            if relays > 0:
                # Menger's hierarchy: the learner feeds `relays` relays, each feeds its share
                # of the node caches; learner egress per publish = one copy per relay.
                relay_cls = ray.remote(ray_actors.RelayCache)
                caches = list(self.caches.values())
                for r in range(min(relays, len(caches))):
                    self.relays.append(
                        relay_cls.options(
                            num_cpus=0, scheduling_strategy=node_affinity(nodes[r % len(nodes)])
                        ).remote(caches[r :: min(relays, len(caches))])
                    )
                ray.get([r.info.remote() for r in self.relays])
        elif mode == "none":
            self.server_name = f"{tag}-server"
            self.server = (
                ray.remote(ray_actors.ParameterServer)
                .options(
                    name=self.server_name,
                    num_cpus=0,
                    scheduling_strategy=node_affinity(nodes[0]),
                    max_concurrency=32,
                )
                .remote()
            )
            ray.get(self.server.info.remote())
        else:
            raise ConfigError(f"unknown cache mode {mode!r}; expected node or none")

    def for_actors(self) -> str:
        """What an actor needs to find its source: JSON with names, not handles."""
        server = self.server_name if self.mode == "none" else None
        return json.dumps({"mode": self.mode, "caches": self.names, "server": server})

    def publish(self, version: int, data: bytes) -> None:
        ray = import_ray()
        ref = ray.put(data)  # once, whatever the number of nodes and actors
        targets = self.relays or (
            list(self.caches.values()) if self.mode == "node" else [self.server]
        )
        for t in targets:
            t.publish.remote(version, [ref])  # in a list: passed as a reference, not resolved
        self._ref = ref

    def egress(self) -> dict[str, float]:
        """Bytes that left the learner's node for snapshots, as the tier's ends count them."""
        ray = import_ray()
        if self.mode == "node":
            first = self.relays or list(self.caches.values())  # the level the learner feeds
            infos = [json.loads(i) for i in ray.get([c.info.remote() for c in first], timeout=10)]
            return {
                "comm/learner_egress_bytes": float(sum(i["bytes_pulled"] for i in infos)),
                "comm/cache_nodes": float(len(self.caches)),
            }
        info = json.loads(ray.get(self.server.info.remote(), timeout=10))
        return {
            "comm/learner_egress_bytes": float(info["bytes_served"]),
            "comm/server_requests": float(info["requests"]),
        }

    def close(self) -> None:
        ray = import_ray()
        with contextlib.suppress(Exception):
            ray.get([c.close.remote() for c in self.caches.values()], timeout=5)
        for h in [*self.relays, *self.caches.values(), self.server]:
            if h is not None:
                with contextlib.suppress(Exception):
                    ray.kill(h)


def shard_capacity(table: UniformSpec, shards: int) -> int:
    """Each shard's share of a replay table's capacity (at least one item)."""
    return max(1, table.capacity // shards)


def shards_hold(table: UniformSpec, shards: int) -> int:
    """What the shards hold together: the table's capacity, or more where it is smaller than
    their count (each holds one item), so that a checkpoint of theirs reads back whole."""
    return max(table.capacity, shards * shard_capacity(table, shards))


def by_age(parts: list[Batch]) -> Batch:
    """The shards' contents (each oldest first) as one batch, oldest first across them: every
    shard's first item, then every shard's second, ... :meth:`ShardedReplay.load` deals item
    ``i`` back to shard ``i % shards``, each again oldest first, and the local ring drops the
    oldest first. Concatenated shard by shard, a restored shard held shard 0's items of every
    age ahead of shard 1's, and evicted shard 0's newest before shard 1's oldest."""
    lengths = [batch_len(p) for p in parts]
    ranks = np.concatenate([np.arange(n) for n in lengths])
    shard = np.repeat(np.arange(len(parts)), lengths)
    order = np.lexsort((shard, ranks))
    return {k: v[order] for k, v in wire.concat(parts).items()}


class ShardedReplay:
    """The learner's view of the replay shards, for what is not the training stream: its size,
    calibration and evaluation states (sampled outside the rate limiter), and checkpoints in
    the same npz format as the local ring buffer (so a run can resume on either backend)."""

    persistent = True

    def __init__(self, backend: RayBackend) -> None:
        self._b = backend

    def sample_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if not self.size:
            return np.zeros((0, *self._b.specs["obs"].shape), np.float32)
        return np.asarray(self.sample(n, rng)["obs"])

    @property
    def size(self) -> int:
        return self._b.replay_size()

    def sample(self, n: int, rng: np.random.Generator) -> Batch:
        recent = self._b.recent
        if recent is not None and len(recent["reward"]) >= n:
            # The learner's recent batches are uniform draws from the shards already: drawing
            # from them (GPTQ calibration at every publish) saves a round trip to every shard.
            idx = rng.choice(len(recent["reward"]), size=n, replace=False)
            return {k: v[idx] for k, v in recent.items()}
        return self.sample_shards(n, rng)

    def sample_shards(self, n: int, rng: np.random.Generator) -> Batch:
        """``n`` items drawn from every shard in proportion to its size (fewer where a shard
        does not answer)."""
        sizes = np.array(self._b.shard_sizes(), np.float64)
        if sizes.sum() == 0:
            raise RuntimeError("cannot sample from an empty replay")
        counts = np.floor(n * sizes / sizes.sum()).astype(int)
        counts[int(np.argmax(sizes))] += n - counts.sum()
        refs = {
            j: s.peek.remote(int(c), int(rng.integers(2**31)))
            for j, (s, c) in enumerate(zip(self._b.shards, counts, strict=True))
            if c > 0
        }
        got = self._answers(refs, 60.0, "this sample is drawn from the others")
        return self._batch([wire.decode_batch(b)[0] for b in got.values()])

    def save(self, path: str | Path) -> None:
        """The shards' items in one npz, oldest first (:func:`by_age`). A shard that dies
        while it is saved is left out, and the file says so (``_missing_shards``: rows of
        shard, items; a resume warns): the run has lost those items too (the shard comes back
        empty), so the checkpoint is what the run holds, and the learner's progress is kept
        rather than the previous checkpoint's."""
        sizes = self._b.shard_sizes()
        refs = dict(enumerate(s.dump.remote() for s in self._b.shards))
        got = self._answers(
            refs, None, "the checkpoint holds the other shards' items",
            lambda j: f"not its {sizes[j]:,}", lambda j: f"saving its {sizes[j]:,} items",
        )  # fmt: skip
        dumps = {j: wire.decode_batch(b) for j, b in got.items()}
        parts = [p for p, _ in dumps.values() if p]
        # each shard's count as of its items (a shard left out: the count last polled)
        polled = self._b.shard_inserts()
        counts = [
            int(dumps[j][1].get("inserts", n)) if j in dumps else n for j, n in enumerate(polled)
        ]
        inserts = np.array(sum(counts), np.int64)
        missing = [[j, sizes[j]] for j in refs if j not in got]
        lacks = {MISSING: np.array(missing, np.int64)} if missing else {}
        np.savez(path, _inserts=inserts, **lacks, **by_age(parts or [self._batch([])]))  # type: ignore[arg-type]

    #: seconds between the lines saying that a save or a load still waits for a shard
    PROGRESS_S = 60.0

    def _answers(
        self,
        refs: dict[int, Any],
        timeout: float | None,
        instead: str,
        what_is_lost: Callable[[int], str] | None = None,
        doing: Callable[[int], str] | None = None,
    ) -> dict[int, Any]:
        """Each shard's answer by its index, without the shards that failed: the run goes on
        with the other shards (docs/distributed.md), and the log says which shard was left
        out and what that costs (``instead``, and ``what_is_lost(j)``). Before, one dead
        shard's error reached the CLI as a traceback from a checkpoint, a calibration sample
        or a resume. ``timeout``: seconds for all shards together (a sample); None (a save, a
        load) waits for each shard as long as it lives, saying every :data:`PROGRESS_S` what
        it is ``doing``: a deadline whatever a shard's size left a slow, live shard out as
        if dead, its items missing from a checkpoint, or counted lost while its load went on
        and restored them (and the resume's ``resume_at`` could run before that load)."""
        ray = import_ray()
        deadline = None if timeout is None else time.monotonic() + timeout
        out: dict[int, Any] = {}
        for j, ref in refs.items():
            try:
                if deadline is None:
                    still = f"replay shard {j} is still {doing(j) if doing else 'answering'}"
                    out[j] = self._while_alive(ray, ref, still)
                else:
                    out[j] = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.RayError as e:
                lost = f", {what_is_lost(j)}" if what_is_lost else ""
                print(
                    f"actorq: warning: replay shard {j} did not answer ({ray_error_line(e)}); "
                    f"{instead}{lost}",
                    file=sys.stderr,
                )
        return out

    def _while_alive(self, ray: Any, ref: Any, waiting: str) -> Any:
        """``ref``'s value, waited for until it comes or fails (Ray's error, its actor's
        death), with a line every :data:`PROGRESS_S` (``waiting``, the seconds so far)."""
        start = time.monotonic()
        while True:
            try:
                return ray.get(ref, timeout=self.PROGRESS_S)
            except ray.exceptions.GetTimeoutError:
                took = time.monotonic() - start
                print(f"actorq: {waiting} ({took:.0f} s so far)", file=sys.stderr, flush=True)

    def _batch(self, parts: list[Batch]) -> Batch:
        """``parts`` (shards' answers) as one batch; none, or only empty ones: zero items."""
        parts = [p for p in parts if p]
        if not parts:
            return {k: s.zeros(0) for k, s in self._b.specs.items()}
        return wire.concat(parts)

    @property
    def lead(self) -> float | None:
        """The shards' rate limiters' position, summed (a checkpoint's ``replay_lead``); None
        if a shard does not answer (dead or restarting: the resume starts at the centre)."""
        ray = import_ray()
        try:
            return float(sum(ray.get([s.lead.remote() for s in self._b.shards], timeout=60)))
        except ray.exceptions.RayError:
            return None

    def resume_at(self, lead: float) -> None:
        """Start each shard's limiter at its share of a checkpoint's ``lead``, after
        :meth:`load`; a shard that died since stays at its centre (Ray restarts it empty)."""
        ray = import_ray()
        shards = self._b.shards
        for ref in [s.resume_at.remote(lead / len(shards)) for s in shards]:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(ref, timeout=60)

    def load(self, path: str | Path) -> None:
        """A saved replay (this backend's or the local ring's) dealt out to the shards as
        :meth:`save` gathered it. Read by the local ring's one reader (each array's npz header
        before any array, shapes, dtypes, finite values, lengths, the insert counter) into a
        ring of the table's capacity: ``ValueError`` before any shard is touched."""
        ring = ReplayBuffer(self._b.replay_capacity, self._b.specs)
        ring.load(path)
        data, total = ring.all(), ring.inserts
        n, s = ring.size, len(self._b.shards)
        refs, sizes = {}, {}
        for j, shard in enumerate(self._b.shards):
            part = {k: v[j::s] for k, v in data.items()}
            sizes[j] = batch_len(part) if part else 0
            # the whole-run insert count, dealt as the items are (shard j of s: its share, one
            # more for the first total % s), so the shards' sum saved next is the file's
            share = total // s + (j < total % s) if n else 0
            refs[j] = shard.load.remote(wire.encode_batch(part), share)
        got = self._answers(
            refs, None, "the run goes on with the others",
            lambda j: f"its {sizes[j]:,} restored items lost",
            lambda j: f"restoring its {sizes[j]:,} items",
        )  # fmt: skip
        # Counted once: a load that failed never reached a poll (a shard's drain runs before
        # or after a load, and its reply follows the load's), so the restart detection
        # (RayBackend._count) counts only what the shard held before; a live shard's load is
        # waited for, so none is counted lost and then restored.
        self._b.lose_items(sum(sizes[j] for j in refs if j not in got))
        # the sizes the backend polls (every 0.2 s) said 0 until the next poll: the resumed
        # run's first snapshot, calibrated on these states, found none
        self._b.refresh_sizes()


class _ShardPump(abc.ABC):
    """A background thread that keeps one request in flight per shard and hands each reply's
    batch to :meth:`_deliver`; a dead or restarting shard is asked again (``errors``)."""

    name = "actorq-pump"

    def __init__(self, backend: RayBackend) -> None:
        self._b = backend
        self._stop = threading.Event()
        self.errors = 0
        self._t = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._t.start()

    @abc.abstractmethod
    def _request(self, shard: Any) -> Any:
        """The remote call whose reply is the next batch (an ObjectRef)."""

    @abc.abstractmethod
    def _deliver(self, batch: Batch) -> None: ...

    def _run(self) -> None:
        ray = import_ray()
        inflight: dict[Any, int] = {}
        while not self._stop.is_set():
            for j, shard in enumerate(self._b.shards):
                if j not in inflight.values():
                    inflight[self._request(shard)] = j
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.2)
            for ref in ready:
                inflight.pop(ref)
                try:
                    batch, _ = wire.decode_batch(ray.get(ref))
                except ray.exceptions.RayError:
                    self.errors += 1  # a dead or restarting shard: ask again next round
                    time.sleep(0.05)
                    continue
                self._deliver(batch)
        for ref in inflight:
            with contextlib.suppress(Exception):  # the shard may be gone already
                ray.cancel(ref, force=False)

    def close(self) -> None:
        self._stop.set()
        self._t.join(timeout=2.0)


class Prefetcher(_ShardPump):
    """Keeps one sample request in flight per shard and a bounded queue of ready batches, so
    the learner's next batch is usually already there (Menger's input pipeline)."""

    name = "actorq-prefetch"

    def __init__(
        self, backend: RayBackend, batch_size: int, depth: int, device: str | None = None
    ) -> None:
        self.batch_size = batch_size
        # (host batch, the same on the learner's CUDA device or None): the copy to the device
        # is started here, from pinned memory, so it overlaps the learner's current update
        self.q: queue.Queue[tuple[Batch, Batch | None]] = queue.Queue(maxsize=max(1, depth))
        self.device = device if device and device.startswith("cuda") else None
        super().__init__(backend)

    def _request(self, shard: Any) -> Any:
        return shard.sample.remote(self.batch_size)

    def _deliver(self, batch: Batch) -> None:
        on_device: Batch | None = None
        if self.device is not None:
            import torch

            from actorq.replay.device import to_device

            on_device = to_device(batch, torch.device(self.device))  # type: ignore[assignment]
        while not self._stop.is_set():
            try:
                self.q.put((batch, on_device), timeout=0.2)
                return
            except queue.Full:
                continue

    def get(self, timeout: float) -> tuple[Batch, Batch | None] | None:
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            return None


class QueueFeeder(_ShardPump):
    """On-policy input: keeps one ``take`` in flight per shard and moves the chunks it gets
    into the learner's :class:`~actorq.replay.tables.TrajectoryQueue`, which batches them and
    drops any too stale (the same queue the local backends use)."""

    name = "actorq-queue-feed"

    def __init__(self, backend: RayBackend, queue: TrajectoryQueue) -> None:
        self.queue = queue
        self.lock = threading.Lock()
        super().__init__(backend)

    def _request(self, shard: Any) -> Any:
        return shard.take.remote()

    def _deliver(self, batch: Batch) -> None:
        if batch:
            with self.lock:
                self.queue.insert(batch)


class _QueueView:
    """The learner's view of an on-policy replay: nothing to checkpoint (consumed once);
    states for calibration come from the last batch."""

    persistent = False

    def __init__(self, feeder: QueueFeeder) -> None:
        self._f = feeder

    @property
    def size(self) -> int:
        return self._f.queue.size

    def sample_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        with self._f.lock:
            return self._f.queue.sample_states(n, rng)

    def save(self, path: str | Path) -> None:
        return None

    def load(self, path: str | Path) -> None:
        return None


@dataclasses.dataclass
class _ShardState:
    incarnation: str = ""
    size: int = 0
    inserts: int = 0
    samples: int = 0
    pid: int = 0
    node: str = ""
    acked: int = 0  # the last of its drain windows counted (see ReplayShard.drain_stats)
    retired: set[str] = dataclasses.field(default_factory=set)  # its dead incarnations


class RayBackend:
    """N Ray actors, ``replay_shards`` replay shards and a parameter cache tier, behind the
    :class:`~actorq.distributed.backend.Backend` surface the learner loop drives."""

    synchronous = False

    @staticmethod
    def select_precision(cfg: BackendConfig, trial: PrecisionTrial) -> tuple[str, str]:
        """``--precision auto`` on every node that will host actors
        (:mod:`actorq.distributed.precision`), combined by a vote."""
        from actorq.distributed import precision as node_precision

        started = init_ray(cfg.ray.ray_address)
        try:
            choices = node_precision.node_choices(
                trial.snapshot() if trial.models is None else b"",  # else among the models
                trial.observations,
                cfg.actors,
                cfg.envs_per_actor,
                cfg.runtime,
                cfg.actor_threads,
                cfg.granularity,
                min(1.0, cfg.ray.actor_cpus),
                # as the local backend: int8/int4 timed as the run's publishes round them
                node_precision.gptq_candidates(trial, cfg.granularity),
                node_precision.models_blob(trial),  # a policy exported whole: its snapshots
            )
        finally:
            if started:  # the backend starts (and later stops) its own Ray
                import_ray().shutdown()
        chosen = node_precision.vote(choices)
        return chosen, node_precision.report(choices, chosen)

    def __init__(self, ctx: BackendContext, poll_s: float = 0.0) -> None:
        cfg = ctx.cfg
        self._ray = import_ray()
        self._closed = False
        self._started = init_ray(cfg.ray.ray_address)
        self.specs = ctx.specs
        self.n = cfg.actors
        self.on_policy = ctx.table_config.on_policy
        try:
            self._build(ctx, poll_s)
        except BaseException:
            self.close()
            raise
        self._steps = ctx.env_steps_offset
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()  # one _poll at a time (see there)
        self._polls = 0  # drains sent, numbered (see ReplayShard.drain_stats)
        self._merge_warned: set[int] = set()
        self._episodes: list[tuple[float, int]] = []
        self._busy = self._wait = 0.0
        self._infer = self._env = 0.0  # parts of _busy: policy runtime, environment
        self._status: dict[str, dict[str, Any]] = {}
        self._counts: dict[tuple[str, str], dict[str, int]] = {}  # per actor and incarnation
        self.actor_restarts = 0
        self._deaths: dict[int, list[float]] = {}  # recent deaths' times, per actor
        # deaths waiting for Ray to say whether the actor's node is alive: error, since when
        self._unchecked: dict[int, tuple[Any, float]] = {}
        self._min_loop: dict[str, int] = {}  # per actor: the oldest loop whose status counts
        self.shard_restarts = 0
        self.items_lost = 0
        self._shard_state = [_ShardState() for _ in self.shards]
        self._stop = threading.Event()
        self._stats_t = threading.Thread(target=self._poll_loop, name="actorq-stats", daemon=True)
        self._stats_t.start()
        self._ring: Batch | None = None
        self._ring_n = 0
        self._version = 0
        self.rng = ctx.rng
        self.prefetcher: Prefetcher | None = None
        self.feeder: QueueFeeder | None = None
        self.replay: ShardedReplay | _QueueView
        if self.on_policy:
            queue = ctx.table_config.build(ctx.specs)
            assert isinstance(queue, TrajectoryQueue)
            self.feeder = QueueFeeder(self, queue)
            self.replay = _QueueView(self.feeder)
        else:
            depth = int(getattr(cfg.ray, "prefetch", 4))  # off-policy agents have it
            assert isinstance(ctx.table_config, UniformSpec)
            self.prefetcher = Prefetcher(self, ctx.table_config.batch_size, depth, str(cfg.device))
            self.replay = ShardedReplay(self)

    def _build(self, ctx: BackendContext, poll_s: float) -> None:
        ray = import_ray()
        cfg, s = ctx.cfg, ctx.setup
        self.nodes = cpu_nodes()
        check_actor_cpus(self.nodes, cfg.actors, cfg.ray.actor_cpus)
        tag = f"actorq-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tier = ParameterTier(
            cfg.ray.cache, self.nodes, ctx.snapshot_capacity, tag, cfg.ray.cache_relays
        )
        self.shards: list[Any] = []
        self.actors: list[Any] = []
        self._runs: dict[Any, int] = {}
        k = s.envs_per_actor
        n = s.adder.items_per_env_step
        # A shard no actor inserts into would never fill: at most one shard per actor.
        num_shards = min(cfg.ray.replay_shards, cfg.actors)
        table = ctx.table_config
        # a checkpoint's replay is read (and checked) at the size the shards hold together
        self.replay_capacity = 1
        if isinstance(table, UniformSpec):
            self.replay_capacity = shards_hold(table, num_shards)
        if isinstance(table, UniformSpec):
            chunk = max(64, k)
            limiter = shard_limiter(table.limiter, num_shards, table.batch_size, chunk + k * n)
            self.shard_limiter = limiter
            # each shard: its share of the capacity, behind its own limiter
            table = dataclasses.replace(
                table, capacity=shard_capacity(table, num_shards), limiter=limiter
            )
        else:
            chunk = k  # one trajectory chunk per insert
        specs_json = json.dumps({name: spec.to_json() for name, spec in self.specs.items()})
        gate_json = json.dumps(s.gate.to_json())
        shard_cls = ray.remote(ray_actors.ReplayShard)
        shard_node = [self.nodes[j % len(self.nodes)] for j in range(num_shards)]
        shard_names = [f"{tag}-shard{j}" for j in range(num_shards)]
        for j, (name, node) in enumerate(zip(shard_names, shard_node, strict=True)):
            self.shards.append(
                shard_cls.options(
                    name=name, num_cpus=0, scheduling_strategy=node_affinity(node), max_restarts=-1
                ).remote(j, specs_json, json.dumps(table.to_json()), gate_json, s.seed)
            )
        namespace = ray.get_runtime_context().namespace
        actor_cls = ray.remote(ray_actors.RayActorWorker)
        tier = self.tier.for_actors()
        placed = self.actor_node = actor_nodes(self.nodes, cfg.actors)
        for i, (node, j) in enumerate(zip(placed, actor_shards(placed, shard_node), strict=True)):
            shard = shard_names[j]
            acfg = {**s.actor_config(i), "insert_chunk": chunk, "poll_s": poll_s}
            h = actor_cls.options(
                num_cpus=cfg.ray.actor_cpus,
                scheduling_strategy=node_affinity(node),
                max_restarts=-1,
                max_concurrency=3,  # run(); a second run() waiting for it; stop()/info()
            ).remote(json.dumps(acfg), tier, shard, namespace)
            self.actors.append(h)
            self._runs[h.run.remote(0)] = i
        self._loop = [0] * len(self.actors)  # the number of each actor's latest loop

    # -- learner-facing surface --------------------------------------------------------------
    def publish(self, version: int, data: bytes) -> None:
        self.tier.publish(version, data)
        self._version = version
        if self.feeder is not None:
            # On-policy: release the consumed chunks only now, with the version that follows
            # them, so no actor starts a chunk with the policy they trained.
            with self.feeder.lock:
                released = self.feeder.queue.release()
            if released:
                msg = json.dumps(released)
                for shard in self.shards:
                    shard.release.remote(msg, version)

    RECENT = 4096  # learner batches kept for calibration states (see ShardedReplay.sample)

    def next_batch(self, timeout: float = 0.002) -> Batch | None:
        if self.feeder is not None:
            with self.feeder.lock:
                batch = self.feeder.queue.next_batch(self.rng, self._version)
            if batch is None:
                time.sleep(timeout)
            return batch
        assert self.prefetcher is not None
        got = self.prefetcher.get(timeout)
        if got is None:
            return None
        batch, on_device = got
        self._remember(batch)
        return batch if on_device is None else on_device

    def ready_batch(self) -> Batch | None:
        return self.next_batch(timeout=0.0)

    def _remember(self, batch: Batch) -> None:
        n = len(batch["reward"])
        if self._ring is None:
            self._ring = {
                k: np.zeros((self.RECENT, *v.shape[1:]), v.dtype) for k, v in batch.items()
            }
        idx = (self._ring_n + np.arange(n)) % self.RECENT
        for k, v in self._ring.items():
            v[idx] = batch[k]
        self._ring_n += n

    @property
    def recent(self) -> Batch | None:
        if self._ring is None:
            return None
        m = min(self._ring_n, self.RECENT)
        return {k: v[:m] for k, v in self._ring.items()}

    def drain_episodes(self) -> list[tuple[float, int]]:
        with self._lock:
            out, self._episodes = self._episodes, []
        return out

    def env_steps(self) -> int:
        return self._steps

    def _poll_loop(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(Exception):
                self._poll()

    def _poll(self) -> None:
        """Drain every shard's counters, acknowledging the windows counted so far: a reply not
        read in time is not lost, its windows come again with the next drain's.

        One poll at a time (``refresh_sizes`` polls from the learner's thread beside the poll
        thread): each drain then acknowledges every window counted before it was sent, which
        is what lets a shard merge windows it holds (``ReplayShard.drain_stats``); and a late
        reply from a shard's dead incarnation cannot land after its successor's."""
        with self._poll_lock:
            self._poll_once()

    def _poll_once(self) -> None:
        ray = self._ray
        with self._lock:
            self._polls += 1
            acks = [(st.incarnation, st.acked, self._polls) for st in self._shard_state]
        refs = [s.drain_stats.remote(*ack) for s, ack in zip(self.shards, acks, strict=True)]
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=5.0)[0])  # one deadline
        for j, ref in enumerate(refs):
            try:
                if ref not in ready:
                    continue  # slow, dead or restarting: its windows come with a later reply
                d = json.loads(ray.get(ref))
            except Exception:
                continue
            with self._lock:
                self._count(self._shard_state[j], d)

    def _count(self, st: _ShardState, d: dict[str, Any]) -> None:
        """A shard's drain reply: its state, and each window not counted yet."""
        if d["incarnation"] in st.retired:
            return  # a dead incarnation's late reply: its successor's state stands
        if d["incarnation"] != st.incarnation:
            if st.incarnation:
                self.shard_restarts += 1
                self.items_lost += st.size
                st.retired.add(st.incarnation)
            st.acked = 0  # a restarted shard numbers its windows from 1 again
        st.incarnation, st.size = d["incarnation"], d["size"]
        st.inserts, st.samples = d["inserts"], d["samples"]
        st.pid, st.node = d["pid"], d["node"]
        for w in d["windows"]:
            if w["seq"] <= st.acked:
                continue  # counted from an earlier reply (its acknowledgement was on the way)
            st.acked = int(w["seq"])
            if w.get("merged", 1) > 1:
                self._merged_window(d["index"], w)
            for actor, status in w.get("earlier", []):
                self._keep_status(actor, status)
            self._steps += int(w["env_steps"])
            self._busy += float(w["busy_s"])
            self._wait += float(w["wait_s"])
            self._infer += float(w.get("infer_s", 0.0))
            self._env += float(w.get("env_s", 0.0))
            self._episodes.extend((float(r), int(n)) for r, n in w["episodes"])
            for actor, status in w["actors"].items():
                self._keep_status(actor, status)

    def _merged_window(self, shard: int, w: dict[str, Any]) -> None:
        """Say once per shard that its replies missed the learner's deadline long enough for
        it to merge windows: every count is kept, only the returns of episodes past the merged
        window's cap are not (``ReplayShard.MAX_EPISODES``)."""
        if shard in self._merge_warned:
            return
        self._merge_warned.add(shard)
        print(
            f"actorq: warning: replay shard {shard}'s last {w['merged']} counter replies missed "
            f"the learner's 5 s deadline; it merged them (steps and times kept, "
            f"{w.get('episodes_dropped', 0)} episode returns dropped)",
            file=sys.stderr,
        )

    def _keep_status(self, actor: str, status: dict[str, Any]) -> None:
        """An actor's latest status, and its counts per incarnation: a restarted actor counts
        from 0 again, and a dead incarnation's last status can still land after its
        successor's first (its insert finished late), so each keeps its own running maximum.
        Such a late status, or one of a loop that died (``_check_death``), is not the actor's
        latest: its pid would be a dead process's (``pids``)."""
        counts = self._counts.setdefault((actor, str(status.get("incarnation"))), {})
        for k in ("rejected", "lost_inserts"):
            counts[k] = max(counts.get(k, 0), int(status.get(k, 0)))
        loop = int(status.get("loop", 0))
        if loop >= self._min_loop.get(actor, 0):
            self._min_loop[actor] = loop
            self._status[actor] = status

    def _total(self, key: str) -> int:
        """Every actor's count of ``key`` (``rejected``, ``lost_inserts``), every incarnation's."""
        return sum(c.get(key, 0) for c in self._counts.values())

    def lose_items(self, n: int) -> None:
        """Count ``n`` replay items lost outside a shard's restart (``faults/replay_items_lost``):
        a checkpoint's part for a shard that died while it was restored."""
        with self._lock:
            self.items_lost += n

    def shard_sizes(self) -> list[int]:
        return [s.size for s in self._shard_state]

    def refresh_sizes(self) -> None:
        """Poll the shards now (a restored replay's size, before the poll thread's next)."""
        self._poll()

    def shard_inserts(self) -> list[int]:
        return [s.inserts for s in self._shard_state]

    def replay_size(self) -> int:
        return sum(self.shard_sizes())

    def wait_for_data(self, min_size: int, timeout: float) -> None:
        """Block until the shards hold ``min_size`` items (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while self.replay_size() < min_size and time.monotonic() < deadline:
            time.sleep(0.05)

    def supervise(self) -> int:
        """Resume the loop of actors Ray restarted. An actor that raised, one that cannot come
        back (its ``__init__`` failed, its node is gone: it is pinned there) and one that dies
        :data:`~actorq.distributed.local.CRASH_LOOP` times within ``CRASH_WINDOW_S`` stop the
        run with one line, as on the local backend: resubmitted forever, its loop would fail
        again at once, or die again, and the learner would wait for its data."""
        ray = self._ray
        for i in list(self._unchecked):  # deaths whose node Ray could not say was alive
            if self._node_alive(i):
                self._submit(i)
        if not self._runs:
            return 0
        done, _ = ray.wait(list(self._runs), num_returns=len(self._runs), timeout=0)
        restarted = 0
        unavailable = getattr(ray.exceptions, "ActorUnavailableError", ())
        for ref in done:
            i = self._runs.pop(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as e:
                # A killed actor Ray is restarting answers ActorUnavailableError ("may or may
                # not have executed"), as one briefly unreachable does: both count as a death
                # (the crash-loop rule sees a kill at every start), but only a certain death
                # drops its status; a second run() waits for a loop still running.
                self.actor_restarts += 1
                restarted += 1
                if not self._check_death(i, e, certain=not isinstance(e, unavailable)):
                    continue  # resubmitted once Ray's node table says its node is alive
            except ray.exceptions.RayError as e:
                # the actor's own exception (a RayTaskError), or Ray's: one it cannot place
                # (ActorUnschedulableError), a lost owner (OwnerDiedError), ...
                raise ActorFailedError(f"actor {i} failed: {ray_error_line(e)}") from None
            # returned normally only if stopped; either way, it acts again until close()
            self._submit(i)
        return restarted

    def _submit(self, i: int) -> None:
        """Actor ``i``'s loop, numbered: its statuses carry the number (see _keep_status)."""
        self._loop[i] += 1
        self._runs[self.actors[i].run.remote(self._loop[i])] = i

    #: seconds an actor's death waits for Ray's node table to answer before the run stops:
    #: a GCS restarting (Ray's GCS fault tolerance) is back within this, as Ray's own clients
    #: allow it (``gcs_rpc_server_reconnect_timeout_s``)
    NODES_GRACE_S = 60.0

    def _check_death(self, i: int, e: Any, certain: bool = True) -> bool:
        """Raise :class:`ActorFailedError` if actor ``i``, dead with Ray's ``e``, will not come
        back, or has died too often of late (:func:`~actorq.distributed.local.recent_deaths`).
        Returns whether its loop may be resubmitted now: not while Ray cannot say whether its
        node is alive (resubmitted to an actor pinned to a dead node, the loop would wait for
        it forever, and the learner for its data)."""
        if e.actor_init_failed:
            raise ActorFailedError(f"actor {i} could not start: {ray_error_line(e)}")
        if certain:
            with self._lock:  # its pid and status are the dead process's: gone until the next
                self._min_loop[str(i)] = self._loop[i] + 1
                self._status.pop(str(i), None)
        self._unchecked[i] = (e, time.monotonic())
        alive = self._node_alive(i)
        deaths = recent_deaths(self._deaths, i)
        if deaths >= CRASH_LOOP:
            raise ActorFailedError(
                f"actor {i} died {deaths} times in {CRASH_WINDOW_S:.0f} s, last: "
                f"{ray_error_line(e)}; not restarting it again"
            )
        return alive

    def _node_alive(self, i: int) -> bool:
        """Whether dead actor ``i``'s node is alive; :class:`ActorFailedError` if it is gone,
        or if Ray's node table (the GCS) has not answered for :data:`NODES_GRACE_S` since the
        death; False until then. A GCS that does not answer is often one restarting: the run
        waits for it rather than stop at once (or print Ray's traceback, as it did)."""
        e, since = self._unchecked[i]
        try:
            alive = {n["NodeID"] for n in self._ray.nodes() if n["Alive"]}
        except Exception as err:  # whatever Ray's client raises for an unreachable GCS
            if time.monotonic() - since < self.NODES_GRACE_S:
                return False
            raise ActorFailedError(
                f"actor {i} died ({ray_error_line(e)}) and Ray's node table has not answered "
                f"for {self.NODES_GRACE_S:.0f} s: {first_line(err)}"
            ) from None
        del self._unchecked[i]
        node = self.actor_node[i]
        if node not in alive:
            raise ActorFailedError(
                f"actor {i} is gone with its node {node[:12]}, where it is pinned: "
                f"{ray_error_line(e)}"
            )
        return True

    def processes(self) -> dict[str, list[int]]:
        """Process ids of actors and replay shards (tests kill them); -1 while restarting."""
        return {
            "actors": [int(i.get("pid", -1)) for i in self.actor_info()],
            "replay_shards": [s.pid for s in self._shard_state],
        }

    def actor_info(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Per actor: pid, node, whether torch got imported, the snapshot version it runs and
        the node whose cache it reads (``{"alive": False}`` for one Ray is restarting, or
        that does not answer within ``timeout``: one deadline for all, so an actor that does
        not answer delays the others' answers by no more)."""
        ray = self._ray
        refs = [a.info.remote() for a in self.actors]
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=timeout)[0]) if refs else set()
        out: list[dict[str, Any]] = []
        for ref in refs:
            try:
                if ref not in ready:
                    raise ray.exceptions.GetTimeoutError("no answer in time")
                out.append({"alive": True, **json.loads(ray.get(ref))})
            except ray.exceptions.RayError:
                out.append({"alive": False})
        return out

    def pids(self) -> list[int]:
        """The actors' process ids as their last inserts reported them (a restarted actor's
        with its first insert; none from its death until then): every log interval asks for
        them, and asking every actor in turn stalled the learner, up to 10 s for each actor
        Ray was restarting."""
        with self._lock:
            status = sorted(self._status.items(), key=lambda kv: int(kv[0]))
        return [int(s["pid"]) for _, s in status if int(s.get("pid", -1)) > 0]

    def stats(self) -> BackendStats:
        with self._lock:
            versions = [int(v.get("version", -1)) for v in self._status.values()]
            rejected, lost = self._total("rejected"), self._total("lost_inserts")
            extra = {
                "faults/replay_shard_restarts": float(self.shard_restarts),
                "faults/replay_items_lost": float(self.items_lost),
                "faults/actor_lost_inserts": float(lost),
                "faults/prefetch_errors": float(
                    (self.prefetcher or self.feeder).errors  # type: ignore[union-attr]
                ),
            }
            st = BackendStats(
                env_steps=self._steps,
                actor_busy_s=self._busy,
                actor_wait_s=self._wait,
                actor_restarts=self.actor_restarts,
                rejected_snapshots=rejected,
                versions=versions,
                extra=extra,
                actor_infer_s=self._infer,
                actor_env_s=self._env,
            )
        if self.feeder is not None:
            st.extra.update(self.feeder.queue.stats())
        with contextlib.suppress(Exception):
            st.extra.update(self.tier.egress())
        return st

    def close(self, timeout: float = 5.0) -> None:
        ray = self._ray
        if self._closed:
            return
        self._closed = True
        # close() also runs on a half-built backend (a failed start): look before touching.
        if hasattr(self, "_stop"):
            self._stop.set()
        for feed in (getattr(self, "prefetcher", None), getattr(self, "feeder", None)):
            if feed is not None:
                feed.close()
        actors = getattr(self, "actors", [])
        runs = list(getattr(self, "_runs", {}))
        with contextlib.suppress(Exception):
            for a in actors:
                a.stop.remote()
            if runs:
                ray.wait(runs, num_returns=len(runs), timeout=timeout)
        for h in [*actors, *getattr(self, "shards", [])]:
            with contextlib.suppress(Exception):
                ray.kill(h)
        if hasattr(self, "tier"):
            self.tier.close()
        if self._started:
            ray.shutdown()
