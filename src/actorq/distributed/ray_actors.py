"""The processes of the Ray backend: actors, replay shards, node caches, a parameter server.

Plain classes, made Ray actors by :mod:`actorq.distributed.ray_backend` (``ray.remote(cls)``).
Light on purpose: nothing here imports torch, so an actor costs what Ray, gymnasium and
onnxruntime cost and no more. What they exchange is bytes and JSON (:mod:`.wire`).

The parameter cache tier (Menger; Google 2020) has two implementations of one abstraction —
a :class:`ParameterSink` the learner publishes to and a :class:`ParameterSource` actors read:

* ``cache="node"``: the learner ``ray.put``\\ s each snapshot once and hands the reference to
  one :class:`NodeCache` per node; the cache pulls the bytes (learner egress: once per node)
  and writes them into the node's shared-memory :class:`SharedSnapshotCache`, the very class
  the local backend uses. Actors read their own node's copy: a version read is a shared-memory
  load, not a message. A cache level only needs ``publish(version, [ref])``, so a level of
  relays (learner → per-rack caches → node caches, Menger's hierarchy) stacks in front of the
  node caches without changing them (:class:`RelayCache`).
* ``cache="none"``: every actor asks a :class:`ParameterServer` on the learner's node for the
  version, and pulls the bytes from it — what systems without a cache do, kept to measure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from actorq.core.interfaces import ParameterSource
from actorq.core.seeds import clear_of_evaluations
from actorq.distributed import wire
from actorq.distributed.shm import SharedSnapshotCache, shm_dir
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.specs import gate_from_json


def node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


def info_json(**fields: Any) -> str:
    """A process's ``info()`` reply: its node and ``fields``, as JSON (a dict would cross
    through Ray's msgpack, which pickles any value it does not know, a numpy scalar say)."""
    return json.dumps({"node": node_id(), **fields})


# -- parameter cache tier ---------------------------------------------------------------------
class NewestPull:
    """A cache's pulls from upstream: one at a time, each of the newest version offered.

    The learner offers every version to every cache. Pulling each in turn (a synchronous
    actor's queue of messages), a node slower than the publish rate fell ever further behind,
    every superseded snapshot pinned in the object store until its turn. Here a version offered
    during a pull replaces the one waiting, whose reference is dropped at once; when the pull
    ends the one waiting is pulled: a busy spell costs two pulls and ends on the last version.
    Runs in an async actor's event loop: nothing here needs a lock.

    Async actors keep no order between messages, so a version older than the one being pulled
    can arrive during its pull: compared only with ``latest`` and the one waiting, it was
    queued and kept after the newer one, and the cache went back a version (an on-policy actor
    waiting for a version at least the learner's then waited for a publish)."""

    def __init__(self, keep: Callable[[int, bytes], None]) -> None:
        self.keep = keep  # stores a pulled version (shared memory, a relay's children, ...)
        self.latest = -1  # the newest version kept
        self._waiting: tuple[int, Any] | None = None
        self._inflight = -1  # the version being pulled now (-1: none)
        self._pulling = False

    async def offer(self, version: int, ref: Any) -> None:
        waiting = -1 if self._waiting is None else self._waiting[0]
        if version <= max(self.latest, self._inflight, waiting):
            return  # a late message for an older version (async actors keep no order)
        self._waiting = (version, ref)
        if self._pulling:
            return  # the pull under way takes it next
        self._pulling = True
        try:
            while self._waiting is not None:
                (v, r), self._waiting = self._waiting, None
                self._inflight = v
                try:
                    data = await r  # the one transfer of this version from upstream
                except Exception:
                    if self._waiting is None:
                        raise  # lost upstream; the next publish offers a newer one
                    continue  # superseded already: pull the newer one
                finally:
                    self._inflight = -1
                if v > self.latest:  # never back to an older snapshot
                    self.keep(v, bytes(data))
                    self.latest = v
        finally:
            self._pulling = False


class NodeCache:
    """One per node: holds the latest snapshot in the node's shared memory for its actors."""

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        (shm_dir() / name).unlink(missing_ok=True)  # a fresh inode; stale readers keep theirs
        self.cache = SharedSnapshotCache(name, capacity, create=True)
        self.pulls = 0
        self.bytes_pulled = 0
        self._pull = NewestPull(self._keep)

    async def publish(self, version: int, refs: list[Any]) -> None:
        await self._pull.offer(version, refs[0])

    def _keep(self, version: int, data: bytes) -> None:
        self.cache.publish(version, data)
        self.pulls += 1
        self.bytes_pulled += len(data)

    def info(self) -> str:
        return info_json(
            name=self.name,
            pulls=self.pulls,
            bytes_pulled=self.bytes_pulled,
            version=self._pull.latest,
        )

    def close(self) -> None:
        (shm_dir() / self.name).unlink(missing_ok=True)


class RelayCache:
    """An intermediate cache level: pulls each snapshot once from upstream, re-publishes it to
    its children (node caches or more relays). Upstream egress grows with relays, not nodes."""

    def __init__(self, children: list[Any]) -> None:
        self.children = children
        self.bytes_pulled = 0
        self._pull = NewestPull(self._keep)

    async def publish(self, version: int, refs: list[Any]) -> None:
        await self._pull.offer(version, refs[0])

    def _keep(self, version: int, data: bytes) -> None:
        import ray

        self.bytes_pulled += len(data)
        ref = ray.put(data)  # owned here: children pull from this relay's node
        for child in self.children:
            child.publish.remote(version, [ref])  # each child skips what it is too busy for
        # Keep the object alive until the children have it (they pull asynchronously).
        self._ref = ref

    def info(self) -> str:
        return info_json(bytes_pulled=self.bytes_pulled, version=self._pull.latest)


class ParameterServer:
    """``cache="none"``: the learner's node serves every actor's version reads and pulls."""

    def __init__(self) -> None:
        self.size = 0
        self.served = wire.encode_versioned(-1, b"")  # built once per version, not per fetch
        self.requests = 0
        self.fetches = 0
        self.bytes_served = 0
        self._pull = NewestPull(self._keep)

    async def publish(self, version: int, refs: list[Any]) -> None:
        await self._pull.offer(version, refs[0])

    def _keep(self, version: int, data: bytes) -> None:
        self.size, self.served = len(data), wire.encode_versioned(version, data)

    # An async actor: these run in its event loop one at a time, with no lock to take.
    async def latest_version(self) -> int:
        self.requests += 1
        return self._pull.latest

    async def fetch(self) -> bytes:
        """The newest snapshot behind its version (:func:`wire.encode_versioned`)."""
        self.fetches += 1
        self.bytes_served += self.size
        return self.served

    def info(self) -> str:
        return info_json(
            requests=self.requests, fetches=self.fetches, bytes_served=self.bytes_served
        )


class RemoteSource(ParameterSource):
    """Actor side of ``cache="none"``: a message to the parameter server per version read and
    per fetch (wrapped in a :class:`ThrottledSource`, so reads come at most once per poll)."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def latest_version(self) -> int:
        import ray

        return int(ray.get(self.server.latest_version.remote()))

    def fetch(self) -> tuple[int, bytes] | None:
        import ray

        version, data = wire.decode_versioned(ray.get(self.server.fetch.remote()))
        return None if version < 0 else (version, data)


class ThrottledSource(ParameterSource):
    """Reads the version at most once per ``poll_s``: a must for the parameter server (one
    message per read); for a node's shared-memory cache only benchmarks use it, so both cache
    modes poll at the same rate."""

    def __init__(self, inner: ParameterSource, poll_s: float) -> None:
        self.inner, self.poll_s = inner, poll_s
        self._v, self._t = -1, 0.0

    def latest_version(self) -> int:
        now = time.monotonic()
        if now - self._t >= self.poll_s:
            self._v, self._t = self.inner.latest_version(), now
        return self._v

    def fetch(self) -> tuple[int, bytes] | None:
        return self.inner.fetch()


def make_source(tier: dict[str, Any], poll_s: float = 0.0) -> tuple[ParameterSource, str]:
    """The parameter source for an actor on this node; returns ``(source, where)``."""
    if tier["mode"] == "none":
        import ray

        server = ray.get_actor(tier["server"], namespace=tier["namespace"])
        return ThrottledSource(RemoteSource(server), poll_s or 0.05), "server"
    here = node_id()
    names: dict[str, str] = tier["caches"]
    if here not in names:
        raise RuntimeError(f"no parameter cache on node {here[:8]} (known: {list(names)})")
    src: ParameterSource = SharedSnapshotCache(names[here])
    return (ThrottledSource(src, poll_s) if poll_s else src), here


# -- sharded replay ---------------------------------------------------------------------------
class ReplayShard:
    """One shard of the replay (Menger), holding the agent's replay kind (built by its table
    spec, :mod:`actorq.replay.specs`, as the local backend builds it).

    * ``uniform``: a ring buffer with its own samples-per-insert limiter. An insert the limiter
      refuses waits here (so the inserting actor blocks, as with Reverb), a sample waits for
      enough data, and neither stops the other. The learner samples whole batches from
      whichever shard can serve first; since every shard keeps ``inserts * spi - samples``
      within its own buffer, the sum over shards stays within the sum of the buffers.
    * ``queue``: a buffer of trajectory chunks the learner takes whole (its own queue does the
      batching and the staleness check); an actor asks :meth:`wait_grant` before each chunk and
      is held until the learner has consumed and published past its older chunks.

    An async Ray actor. Counters actors send along with their items (env steps, busy/wait time,
    finished episodes) collect here until the learner drains them; a drain's window is kept
    until the learner acknowledges it (:meth:`drain_stats`).
    """

    def __init__(
        self, index: int, specs_json: str, table_json: str, gate_json: str, seed: int
    ) -> None:
        from actorq.replay.specs import QueueGateSpec, gate_from_json, table_from_json
        from actorq.replay.tables import UniformTable
        from actorq.types import ArraySpec

        specs = {k: ArraySpec.from_json(v) for k, v in json.loads(specs_json).items()}
        spec = table_from_json(json.loads(table_json))  # this shard's share (capacity, limiter)
        gate = gate_from_json(json.loads(gate_json))
        self.index = index
        self.on_policy = spec.on_policy
        # The agent's replay kind, built as the local backends build it (for the queue kind the
        # learner's queue batches and checks staleness: the shard's hands over whatever it
        # holds, and grants chunks by the actors' gate).
        table = spec.build(specs)
        self.table: Any = table
        self.cap = 0
        if isinstance(table, UniformTable):
            self.replay = table.ring
            self.limiter: SampleToInsertRatio = table.limiter
        else:
            assert isinstance(gate, QueueGateSpec)
            self.cap = gate.unconsumed_items
        self.inserted: dict[int, int] = {}  # queue kind: per actor
        self.released: dict[int, int] = {}
        self.min_version = 0
        self.rng = np.random.default_rng((seed, index, uuid.uuid4().int & 0xFFFF))
        self.inserts = self.samples = 0
        self._loaded_at = 0.0  # the limiter's position load() left
        self.incarnation = uuid.uuid4().hex[:12]
        self._cond: asyncio.Condition | None = None
        self._pending: dict[str, Any] = self._empty_counters()
        self._seq = 0  # drained windows, numbered
        self._poll = 0  # the newest of the learner's drains run here (see drain_stats)
        self._unacked: list[dict[str, Any]] = []  # windows drained, not yet acknowledged

    @staticmethod
    def _empty_counters() -> dict[str, Any]:
        return {
            "env_steps": 0,
            "busy_s": 0.0,
            "wait_s": 0.0,
            "infer_s": 0.0,
            "env_s": 0.0,
            "episodes": [],
            "actors": {},
        }

    def _c(self) -> asyncio.Condition:
        if self._cond is None:  # created inside the actor's event loop
            self._cond = asyncio.Condition()
        return self._cond

    @property
    def size(self) -> int:
        return int(self.table.size)

    async def insert(self, payload: bytes) -> int:
        batch, meta = wire.decode_batch(payload)
        n = len(batch["reward"]) if "reward" in batch else 0
        cond = self._c()
        if n and not self.on_policy:
            async with cond:
                await cond.wait_for(lambda: self.limiter.can_insert(n, self.inserts, self.samples))
                self.replay.add(batch)
                self.inserts += n
                cond.notify_all()
        elif n:
            async with cond:
                self.table.insert(batch)
                self.inserts += n
                a = int(meta.get("actor", -1))
                self.inserted[a] = self.inserted.get(a, 0) + n
                cond.notify_all()
        p = self._pending
        p["env_steps"] += int(meta.get("env_steps", 0))
        p["busy_s"] += float(meta.get("busy_s", 0.0))
        p["wait_s"] += float(meta.get("wait_s", 0.0))
        p["infer_s"] += float(meta.get("infer_s", 0.0))
        p["env_s"] += float(meta.get("env_s", 0.0))
        p["episodes"].extend(meta.get("episodes", []))
        if "actor" in meta:
            p["actors"][str(meta["actor"])] = meta.get("status", {})
        return n

    async def sample(self, n: int) -> bytes:
        cond = self._c()
        async with cond:
            await cond.wait_for(lambda: self.limiter.can_sample(n, self.inserts, self.samples))
            self.samples += n
            cond.notify_all()
            batch = self.replay.sample(n, self.rng)
        return wire.encode_batch(batch, {"shard": self.index})

    # -- queue kind ------------------------------------------------------------------------
    async def take(self, timeout: float = 0.2) -> bytes:
        """Every chunk held (waits up to ``timeout`` for one); the learner's queue batches."""
        cond = self._c()
        async with cond:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cond.wait_for(lambda: self.table.size > 0), timeout)
            batch = self.table.take_all()
            self.samples += len(batch["reward"]) if batch else 0
        return wire.encode_batch(batch, {"shard": self.index})

    async def release(self, released_json: str, version: int) -> None:
        """The learner consumed these items (per actor) and published ``version``."""
        cond = self._c()
        async with cond:
            for a, n in json.loads(released_json).items():
                self.released[int(a)] = self.released.get(int(a), 0) + int(n)
            self.min_version = max(self.min_version, int(version))
            cond.notify_all()

    async def wait_grant(self, actor: int, timeout: float = 0.2) -> int:
        """Wait (up to ``timeout``) until ``actor`` may start a chunk: fewer than ``max_lag``
        of its chunks unreleased. Returns the oldest snapshot version it may start with, or -1
        if still not allowed (the actor asks again, so it can notice a stop)."""
        cond = self._c()

        def ok() -> bool:
            return self.inserted.get(actor, 0) - self.released.get(actor, 0) < self.cap

        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(ok), timeout)
            except TimeoutError:
                return -1
            return self.min_version

    # -- learner's view --------------------------------------------------------------------
    async def peek(self, n: int, seed: int) -> bytes:
        """Up to ``n`` random items, outside the rate limiter (calibration, evaluation)."""
        if self.on_policy or self.replay.size == 0:
            return wire.encode_batch({})
        return wire.encode_batch(self.replay.sample(n, np.random.default_rng(seed)))

    async def lead(self) -> float:
        """The limiter's position, ``inserts × samples_per_insert − samples`` (Reverb's diff;
        0 for the queue kind, which has none)."""
        if self.on_policy:
            return 0.0
        return self.inserts * self.limiter.samples_per_insert - self.samples

    async def resume_at(self, lead: float) -> None:
        """Start the limiter at ``lead`` (this shard's share of a checkpoint's), after
        :meth:`load`, which left it at its centre: a learner-bound run's actors would run the
        error buffer's worth of inserts ahead again after every resume."""
        if self.on_policy:
            return
        cond = self._c()
        async with cond:
            # moved by the difference, so the inserts and samples served since the load (the
            # prefetcher's waiting samples went at once) stay charged
            self.samples = max(self.samples + round(self._loaded_at - lead), 0)
            self._loaded_at = lead
            cond.notify_all()

    async def drain_stats(self, incarnation: str = "", acked: int = 0, poll: int = 0) -> str:
        """The counters collected since the last drain (one window, numbered), with every
        earlier window not yet acknowledged: the learner acknowledges the windows it counted
        (``acked``: the last one's number, for the shard's ``incarnation`` it saw) with its next
        drain. A reply the learner never got (its wait timed out) comes again with the next,
        where it was lost: its env steps uncounted, a run overshot its ``total_steps``.

        While replies keep missing the learner's deadline the windows piled up, each reply
        larger than the last: past :data:`MAX_WINDOWS` the oldest two become one (see
        :meth:`_merge_oldest`)."""
        if incarnation == self.incarnation:  # a predecessor's numbers are not ours
            self._unacked = [w for w in self._unacked if w["seq"] > acked]
        self._seq += 1
        self._unacked.append({**self._pending, "seq": self._seq})
        self._pending = self._empty_counters()
        # ``poll``: the learner's drains are numbered, one poll at a time, and it reads only
        # the reply to its newest. By the time this shard runs the newest drain it has seen,
        # the learner has read or dropped every earlier reply and ``acked`` covers each window
        # it counted: the windows left were never counted, and merging them cannot count one
        # twice. A drain older than one already run (Ray keeps no order for async actors)
        # could find windows the newer reply has just handed over: nothing is merged then.
        if poll > self._poll:
            self._poll = poll
            while len(self._unacked) > self.MAX_WINDOWS:
                self._merge_oldest()
        out = {
            "windows": self._unacked,
            "index": self.index,
            "incarnation": self.incarnation,
            "size": self.size,
            "inserts": self.inserts,
            "samples": self.samples,
            "pid": os.getpid(),
            "node": node_id(),
        }
        return json.dumps(out)

    #: drain windows kept unacknowledged before the oldest are merged
    MAX_WINDOWS = 16
    #: finished episodes a merged window keeps (its newest); how many it dropped is counted
    MAX_EPISODES = 4096

    def _merge_oldest(self) -> None:
        """The oldest two unacknowledged windows as one, numbered as the later: counters
        summed, episodes the newest :data:`MAX_EPISODES` (the rest counted in
        ``episodes_dropped``), each actor's newest status (a status of another incarnation it
        replaces is kept in ``earlier``: that incarnation's counts end there)."""
        a, b = self._unacked[0], self._unacked[1]
        merged = {k: a[k] + b[k] for k in ("env_steps", "busy_s", "wait_s", "infer_s", "env_s")}
        episodes = a["episodes"] + b["episodes"]
        dropped = a.get("episodes_dropped", 0) + b.get("episodes_dropped", 0)
        dropped += max(0, len(episodes) - self.MAX_EPISODES)
        earlier = a.get("earlier", []) + b.get("earlier", [])
        for actor, status in a["actors"].items():
            newer = b["actors"].get(actor)
            if newer is not None and newer.get("incarnation") != status.get("incarnation"):
                earlier.append([actor, status])
        self._unacked[:2] = [
            {
                **merged,
                "episodes": episodes[-self.MAX_EPISODES :],
                "episodes_dropped": dropped,
                "actors": {**a["actors"], **b["actors"]},
                "earlier": earlier,
                "merged": a.get("merged", 1) + b.get("merged", 1),
                "seq": b["seq"],
            }
        ]

    async def dump(self) -> bytes:
        """The items held, oldest first, with the shard's insert count as of them (taken in one
        step: actors insert on through a checkpoint, and the count the learner last polled can
        lag the items, a resume's ring counting fewer inserts than it holds)."""
        if self.on_policy:
            return wire.encode_batch({})
        items = self.replay.all() if self.replay.size else {}
        return wire.encode_batch(items, {"inserts": self.inserts})

    async def load(self, payload: bytes, inserts: int) -> None:
        batch, _ = wire.decode_batch(payload)
        cond = self._c()
        async with cond:
            if batch:
                self.replay.add(batch)
            # Restored items count as inserted, so sampling resumes at once.
            self.inserts = self.replay.inserts = max(inserts, self.replay.size)
            spi = self.limiter.samples_per_insert
            self.samples = max(int(self.inserts * spi - self.limiter.offset), 0)
            self._loaded_at = self.inserts * spi - self.samples  # resume_at moves from here
            # Samples and inserts may already be waiting (the learner's prefetcher starts with
            # the backend): they must re-check the limiter now, or nothing ever wakes them.
            cond.notify_all()


# -- actors -----------------------------------------------------------------------------------
class RayActorWorker:
    """An actor as a Ray actor: the same :class:`VectorActor` as the local backend, reading
    snapshots from its node's cache and inserting items into its replay shard.

    ``run()`` loops until ``stop()``. Off-policy, it keeps one insert in flight while it steps
    on, and blocks (counted as wait) only when a second chunk is ready before the shard
    accepted the first — which is how the shard's rate limiter slows it down. On-policy, it
    sends each trajectory chunk as it completes and, before starting the next, waits for the
    shard's grant and for a snapshot at least as new as the grant asks.
    """

    def __init__(self, cfg_json: str, tier_json: str, shard: str, namespace: str) -> None:
        import ray

        # Everything arrives as JSON and names (no pickled handles in the constructor's
        # arguments, which Ray keeps to re-run it on a restart).
        self.cfg = json.loads(cfg_json)
        self.tier = {**json.loads(tier_json), "namespace": namespace}
        self.shard = ray.get_actor(shard, namespace=namespace)
        self._stop = threading.Event()
        self._looping = threading.Lock()  # held while run() loops
        self.incarnation = uuid.uuid4().hex[:12]
        self._actor: Any = None
        self._where = ""

    def info(self) -> str:
        a = self._actor
        return info_json(
            pid=os.getpid(),
            torch_imported="torch" in sys.modules,
            incarnation=self.incarnation,
            version=-1 if a is None else a.version,
            cache=self._where,  # node id of the cache it reads, or "server"
            env_steps=0 if a is None else a.env_steps,
        )

    def stop(self) -> None:
        self._stop.set()

    def _await(self, ref: Any) -> bool:
        """Wait for an insert (the shard's rate limiter holds us here); False if it failed.
        Returns early when asked to stop, so a stopped learner never strands an actor."""
        import ray

        while not self._stop.is_set():
            try:
                ray.get(ref, timeout=0.05)
                return True
            except ray.exceptions.GetTimeoutError:
                if self._actor is not None:
                    self._actor.update()  # blocked, but with the newest snapshot when released
                continue
            except ray.exceptions.RayError:
                return False
        return True

    def _await_grant(self, actor: Any) -> None:
        """On-policy: hold until the shard lets this actor start a chunk and its snapshot is
        at least the version the learner asks for."""
        import ray

        i = int(self.cfg["actor"])
        while not self._stop.is_set():
            try:
                got: Any = ray.get(self.shard.wait_grant.remote(i), timeout=5.0)
                min_version = int(got)
            except ray.exceptions.RayError:
                time.sleep(0.05)  # a restarting shard: ask again
                continue
            if min_version < 0:
                continue
            while not self._stop.is_set():
                actor.update()
                if actor.runtime is not None and actor.version >= min_version:
                    return
                time.sleep(0.002)

    def run(self, loop: int = 0) -> str:
        """The actor's loop, until :meth:`stop` (``loop``: the learner's number for it, sent
        with every status). While a loop runs here another waits for it to end: the learner
        asks again when Ray cannot say whether the first still runs (``ActorUnavailableError``),
        and two loops at once would step the same envs; the waiting call keeps a reference
        the learner watches, so the first loop's end is still seen."""
        self._looping.acquire()
        try:
            if self._stop.is_set():
                return json.dumps({"stopped": True, "incarnation": self.incarnation})
            return self._loop(loop)
        finally:
            self._looping.release()

    def _loop(self, loop: int) -> str:
        from actorq.core.loop import make_actor

        cfg = self.cfg
        source, where = make_source(self.tier, float(cfg.get("poll_s", 0.0)))
        incarnation = int(self.incarnation[:6], 16) % 1000
        # actor_seed's rule, the incarnation known only here: clear of the evaluations' seeds
        seed = clear_of_evaluations(
            int(cfg["seed"]) + 7919 * incarnation, int(cfg["envs_per_actor"])
        )
        actor = make_actor({**cfg, "seed": seed}, source)
        self._actor, self._where = actor, where
        on_policy = gate_from_json(cfg["gate"]).on_policy
        chunk = int(cfg.get("insert_chunk", 64))
        pending: list[dict[str, np.ndarray]] = []
        pending_n = 0
        episodes: list[list[float]] = []
        steps = 0
        busy = wait = 0.0
        sent_infer = sent_env = 0.0  # the actor's inference_s and env_s at the last send
        inflight: Any = None
        lost_inserts = 0
        k = actor.k

        def send() -> None:
            nonlocal pending, pending_n, episodes, steps, busy, wait, inflight
            nonlocal sent_infer, sent_env
            meta = {
                "actor": cfg["actor"],
                "env_steps": steps,
                "busy_s": busy,
                "wait_s": wait,
                "infer_s": actor.inference_s - sent_infer,
                "env_s": actor.env_s - sent_env,
                "episodes": episodes,
                "status": {
                    "version": actor.version,
                    "rejected": actor.rejected,
                    "cache": where,
                    "incarnation": self.incarnation,
                    "loop": loop,
                    "pid": os.getpid(),  # the learner's pids() ask no actor
                    "lost_inserts": lost_inserts,
                    "inference_s": actor.inference_s,
                },
            }
            batch = wire.concat(pending) if pending else {}
            inflight = self.shard.insert.remote(wire.encode_batch(batch, meta))
            pending, pending_n, episodes, steps, busy, wait = [], 0, [], 0, 0.0, 0.0
            sent_infer, sent_env = actor.inference_s, actor.env_s

        while not self._stop.is_set():
            t0 = time.perf_counter()
            if on_policy and actor.at_boundary:
                self._await_grant(actor)
                if self._stop.is_set():
                    break
                t_granted = time.perf_counter()
                wait += t_granted - t0
                t0 = t_granted
            actor.update()
            if actor.runtime is None:
                time.sleep(0.005)
                continue
            batch, eps = actor.step()
            if batch:
                pending.append(batch)
                pending_n += len(batch["reward"])
            episodes.extend([r, float(n)] for r, n in eps)
            steps += k
            t1 = time.perf_counter()
            busy += t1 - t0
            if pending_n >= chunk:
                if inflight is not None:
                    if not self._await(inflight):
                        lost_inserts += 1  # the shard died with it: those items are gone
                    inflight = None
                    wait += time.perf_counter() - t1
                if not self._stop.is_set():
                    send()
                    if on_policy:  # the grant for the next chunk counts this one
                        if not self._await(inflight):
                            lost_inserts += 1
                        inflight = None
        actor.close()
        return json.dumps({"env_steps": actor.env_steps, "incarnation": self.incarnation})
