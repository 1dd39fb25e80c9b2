"""Shared-memory building blocks for the local backend (one machine, many processes).

Everything here is a flat, file-backed mmap under /dev/shm holding numpy arrays — no pickling,
no locks. Ordering relies on x86-64's total store order: a writer fills data, then advances an
index; a reader reads the index, then the data. Snapshots additionally carry a checksum and a
seqlock, so a torn copy is detected and retried rather than trusted.
"""

from __future__ import annotations

import errno
import mmap
import os
import tempfile
from pathlib import Path

import numpy as np

from actorq.core.interfaces import ParameterSink, ParameterSource
from actorq.resources import ResourceError
from actorq.types import ArraySpec, Batch


def shm_dir() -> Path:
    d = Path("/dev/shm")
    return d if d.is_dir() and os.access(d, os.W_OK) else Path(tempfile.gettempdir())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def reclaim_stale(prefix: str = "actorq-") -> list[str]:
    """Remove shared-memory files of local runs whose learner is dead (a kill -9 leaves them:
    nothing else ever would). The local backend names its files
    ``actorq-<learner pid>-<run>-{control,cache,chan<i>}``; a Ray node cache's name ends with
    its node id and its pid is the learner's on another machine, so it is never touched here.
    Returns the names removed."""
    removed: list[str] = []
    try:
        entries = list(shm_dir().iterdir())
    except OSError:
        return removed
    for path in entries:
        parts = path.name.split("-")
        if (
            not path.name.startswith(prefix)
            or len(parts) != 4
            or not parts[1].isdigit()
            or not (parts[3] in ("control", "cache") or parts[3].startswith("chan"))
        ):
            continue
        pid = int(parts[1])
        if pid != os.getpid() and not _alive(pid):
            try:
                path.unlink()
                removed.append(path.name)
            except OSError:
                pass
    return removed


def _reserve(fd: int, size: int, path: Path) -> None:
    """Reserve ``size`` bytes for the segment at ``path`` now: a sparse segment on a full
    /dev/shm (Docker's is 64 MiB by default) kills the first process to touch a page it has
    no room for with SIGBUS, an actor restarted forever or the learner without a checkpoint.
    One :class:`~actorq.resources.ResourceError` line instead, the segment removed."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return  # a filesystem that cannot reserve: as before, sparse
        path.unlink(missing_ok=True)
        raise ResourceError(
            f"shared memory: no room for {size / 2**20:.1f} MiB in {path.parent} "
            f"({e.strerror}); free it, enlarge it (docker run --shm-size=2g), or run fewer "
            "--actors"
        ) from None


class ShmFile:
    """A named, file-backed shared mapping. The creator sizes it; others attach by name."""

    def __init__(self, name: str, size: int = 0, create: bool = False) -> None:
        self.path = shm_dir() / name
        if create:
            with open(self.path, "wb") as f:
                f.truncate(size)
                _reserve(f.fileno(), size, self.path)
        fd = os.open(self.path, os.O_RDWR)
        try:
            self.size = os.fstat(fd).st_size
            self.mm = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)

    def array(self, offset: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        return np.ndarray(shape, dtype=dtype, buffer=self.mm, offset=offset)

    def unlink(self) -> None:
        self.path.unlink(missing_ok=True)


# -- control block ------------------------------------------------------------------------------
# int64 words: global words first, then one fixed-size header per actor.
# MIN_VERSION: on-policy agents, the oldest snapshot version actors may start new data with.
# INSERT_CREDIT: a restored replay's items that count as inserts (``Table.credit``).
STOP, SAMPLES, SNAPSHOT_VERSION, MIN_VERSION, INSERT_CREDIT = 0, 1, 2, 3, 4
GLOBAL_WORDS = 8
ACTOR_WORDS = 16
# per-actor header fields
(
    A_WRITE,  # transitions written to the channel (== this actor's inserts, ever)
    A_READ,  # transitions the learner has drained
    A_ENV_STEPS,
    A_EPISODES_W,  # episode records written
    A_EPISODES_R,
    A_VERSION,  # snapshot version in use
    A_HEARTBEAT,  # time.monotonic_ns() of the last loop iteration
    A_WAIT_NS,  # time blocked by the rate limiter or a full channel
    A_BUSY_NS,  # time stepping (inference + env + adder)
    A_PID,
    A_REJECTED,  # snapshots refused (checksum/NaN)
    A_INFER_NS,  # time inside the policy runtime (part of busy)
    A_RELEASED,  # items of this actor the learner consumed and published past (on-policy)
    A_ENV_NS,  # time inside the environment or simulator (part of busy)
) = range(14)


class ControlBlock:
    def __init__(self, name: str, num_actors: int, create: bool = False) -> None:
        words = GLOBAL_WORDS + ACTOR_WORDS * num_actors
        self.file = ShmFile(name, words * 8, create)
        self.words = self.file.array(0, "int64", (words,))
        self.num_actors = num_actors

    def actor(self, i: int) -> np.ndarray:
        s = GLOBAL_WORDS + ACTOR_WORDS * i
        return self.words[s : s + ACTOR_WORDS]

    def total_inserts(self) -> int:
        """Items the actors have inserted this session, plus a restored replay's credit."""
        writes = self.words[GLOBAL_WORDS + A_WRITE :: ACTOR_WORDS].sum()
        return int(writes + self.words[INSERT_CREDIT])


class SharedSnapshotCache(ParameterSink, ParameterSource):
    """The node-level parameter cache (Menger): one shared copy of the latest snapshot per
    machine. The learner writes it once per publish; every local actor reads it, so publishing
    costs the learner the same for 1 or 100 actors.

    Two slots, each behind a seqlock: the writer fills the slot not in use, then flips
    ``active``. A reader retries if the slot's sequence number changed while it copied.
    """

    _HDR_WORDS = 8  # version, active, seq0, seq1, len0, len1

    def __init__(self, name: str, capacity: int = 0, create: bool = False) -> None:
        self.file = ShmFile(name, self._HDR_WORDS * 8 + 2 * capacity, create)
        self.hdr = self.file.array(0, "int64", (self._HDR_WORDS,))
        self.capacity = (self.file.size - self._HDR_WORDS * 8) // 2
        if create:
            self.hdr[:] = 0
            self.hdr[0] = -1

    def _slot(self, i: int) -> memoryview:
        start = self._HDR_WORDS * 8 + i * self.capacity
        return memoryview(self.file.mm)[start : start + self.capacity]

    def publish(self, version: int, data: bytes) -> None:
        if len(data) > self.capacity:
            raise ValueError(f"snapshot of {len(data)} B exceeds cache slot of {self.capacity} B")
        slot = 1 - int(self.hdr[1]) if self.hdr[0] >= 0 else 0
        self.hdr[2 + slot] += 1  # odd: being written
        self._slot(slot)[: len(data)] = data
        self.hdr[4 + slot] = len(data)
        self.hdr[2 + slot] += 1  # even: stable
        self.hdr[1] = slot
        self.hdr[0] = version

    def latest_version(self) -> int:
        return int(self.hdr[0])

    def fetch(self) -> tuple[int, bytes] | None:
        for _ in range(100):
            version = int(self.hdr[0])
            if version < 0:
                return None
            slot = int(self.hdr[1])
            seq = int(self.hdr[2 + slot])
            if seq % 2:
                continue
            n = int(self.hdr[4 + slot])
            data = bytes(self._slot(slot)[:n])
            if int(self.hdr[2 + slot]) == seq and int(self.hdr[0]) == version:
                return version, data
        return None  # writer kept lapping us; the caller polls again later


class TransitionChannel:
    """Single-producer single-consumer ring of transitions (actor → learner) plus a small ring
    of finished-episode records. Indices live in the actor's header of the control block."""

    EPISODE_CAP = 4096

    def __init__(
        self,
        name: str,
        specs: dict[str, ArraySpec],
        capacity: int,
        header: np.ndarray,
        create: bool = False,
    ) -> None:
        self.capacity = capacity
        layout: list[tuple[str, str, tuple[int, ...]]] = [
            (k, s.dtype, (capacity, *s.shape)) for k, s in specs.items()
        ]
        layout.append(("_episodes", "float64", (self.EPISODE_CAP, 2)))
        size, offsets = 0, []
        for _, dt, shape in layout:
            size = (size + 63) // 64 * 64
            offsets.append(size)
            size += int(np.prod(shape)) * np.dtype(dt).itemsize
        self.file = ShmFile(name, size, create)
        arrays = {
            k: self.file.array(off, dt, shape)
            for (k, dt, shape), off in zip(layout, offsets, strict=True)
        }
        self.episodes = arrays.pop("_episodes")
        self.data = arrays
        self.h = header

    # producer side
    def free(self) -> int:
        return self.capacity - int(self.h[A_WRITE] - self.h[A_READ])

    def write(self, batch: Batch) -> None:
        n = len(batch["reward"])
        w = int(self.h[A_WRITE])
        idx = (w + np.arange(n)) % self.capacity
        for k, arr in self.data.items():
            arr[idx] = batch[k]
        self.h[A_WRITE] = w + n  # publish after the data (x86 TSO keeps the order)

    def write_episode(self, ret: float, length: int) -> None:
        w = int(self.h[A_EPISODES_W])
        self.episodes[w % self.EPISODE_CAP] = (ret, length)
        self.h[A_EPISODES_W] = w + 1

    # consumer side
    def drain(self) -> Batch:
        r, w = int(self.h[A_READ]), int(self.h[A_WRITE])
        if w == r:
            return {}
        idx = (r + np.arange(w - r)) % self.capacity
        out = {k: arr[idx] for k, arr in self.data.items()}
        self.h[A_READ] = w
        return out

    def drain_episodes(self) -> list[tuple[float, int]]:
        r, w = int(self.h[A_EPISODES_R]), int(self.h[A_EPISODES_W])
        r = max(r, w - self.EPISODE_CAP)  # a lagging reader loses the oldest records only
        out = [(float(a), int(b)) for a, b in self.episodes[np.arange(r, w) % self.EPISODE_CAP]]
        self.h[A_EPISODES_R] = w
        return out
