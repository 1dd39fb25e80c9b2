"""Shared-memory building blocks for the local backend (one machine, many processes).

Everything here is a flat, file-backed mmap under /dev/shm holding numpy arrays — no pickling,
no locks on x86-64. A ring's writer fills data, then advances an index; its reader reads the index,
then the data. x86-64 keeps that order for every observer (total store order), so there the
indices are plain words; other CPUs (aarch64: Graviton, Grace) may make the index visible
before the data, so there each index crossing between processes is read or written under a lock
on the ring's file (:data:`TSO`). Snapshots carry a checksum and a seqlock, so a torn copy is
detected and retried rather than trusted, on any CPU.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import platform
import tempfile
import uuid
from collections.abc import Iterator
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


#: Whether this CPU orders stores as x86-64 does (total store order): then a ring's index written
#: after its data is never seen before it, and no lock is needed.
TSO = platform.machine().lower() in {"x86_64", "amd64", "i386", "i686"}


def _held(path: Path) -> bool:
    """Whether a live learner holds its run's control segment. The kernel drops a flock when
    its holder dies, in any PID namespace: two containers sharing /dev/shm (``--ipc=host``)
    see different pids, and a pid alone would call the other's live run dead."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:  # removed last by its learner's close: the run is over
        return False
    except OSError:  # not ours to read (another user's): not ours to remove either
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def reclaim_stale(prefix: str = "actorq-") -> list[str]:
    """Remove shared-memory files of local runs whose learner is dead (a kill -9 leaves them:
    nothing else ever would). The local backend names its files
    ``actorq-<learner pid>-<run>-{control,cache,chan<i>}``; a Ray node cache's name ends with
    its node id and its pid is the learner's on another machine, so it is never touched here.
    A run is dead when its pid is gone here *and* no process holds its control segment's lock
    (:func:`_held`; a learner of another PID namespace holds it). Returns the names removed."""
    removed: list[str] = []
    try:
        entries = list(shm_dir().iterdir())
    except OSError:
        return removed
    live: dict[str, bool] = {}
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
        tag = "-".join(parts[:3])
        if tag not in live:
            live[tag] = pid == os.getpid() or _alive(pid) or _held(path.with_name(tag + "-control"))
        if not live[tag]:
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
    """A named, file-backed shared mapping. The creator sizes it; others attach by name.

    ``hold``: the creator keeps an exclusive flock on the file until :meth:`close` (a run's
    control segment: :func:`reclaim_stale` spares a held run). ``lockable``: keep a descriptor
    for :meth:`index` and :meth:`set_index` (rings on CPUs without total store order)."""

    def __init__(
        self, name: str, size: int = 0, create: bool = False, hold: bool = False,
        lockable: bool = False,
    ) -> None:  # fmt: skip
        self.path = shm_dir() / name
        fd = self._create(hold) if create else os.open(self.path, os.O_RDWR)
        try:
            if create:
                os.ftruncate(fd, size)
                _reserve(fd, size, self.path)
            self.size = os.fstat(fd).st_size
            self.mm = mmap.mmap(fd, self.size)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        if not (hold and create) and not lockable:
            self.close()

    def _create(self, hold: bool) -> int:
        # Made under a hidden name and renamed once held: a run's control segment is never
        # visible unheld (its pid may look dead to a reclaim in another PID namespace).
        tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if hold:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: never contended
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        return fd

    def close(self) -> None:
        """Drop the descriptor and a held lock (the mapping stays valid until collected)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)  # explicitly: the mapping keeps a dup of fd
            os.close(self._fd)
            self._fd = None

    def array(self, offset: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        return np.ndarray(shape, dtype=dtype, buffer=self.mm, offset=offset)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        assert self._fd is not None, "not lockable"
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def index(self, words: np.ndarray, i: int) -> int:
        """``words[i]`` read under the file's lock: what was written before the writer set it
        under the lock is visible after (the kernel's lock orders memory on every CPU)."""
        with self._locked():
            return int(words[i])

    def set_index(self, words: np.ndarray, i: int, value: int) -> None:
        """``words[i] = value`` under the file's lock, after everything written before it."""
        with self._locked():
            words[i] = value

    def unlink(self) -> None:
        """Remove the name (mappings stay valid) and drop a held lock: the run is over."""
        self.path.unlink(missing_ok=True)
        self.close()


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
        self.file = ShmFile(name, words * 8, create, hold=True)  # the run's liveness
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
    of finished-episode records. Indices live in the actor's header of the control block; each
    side writes its own and reads the other's, under the ring file's lock unless ``ordered``
    (default :data:`TSO`: the CPU keeps stores in order)."""

    EPISODE_CAP = 4096

    def __init__(
        self,
        name: str,
        specs: dict[str, ArraySpec],
        capacity: int,
        header: np.ndarray,
        create: bool = False,
        ordered: bool | None = None,
    ) -> None:
        self.capacity = capacity
        self.ordered = TSO if ordered is None else ordered
        layout: list[tuple[str, str, tuple[int, ...]]] = [
            (k, s.dtype, (capacity, *s.shape)) for k, s in specs.items()
        ]
        layout.append(("_episodes", "float64", (self.EPISODE_CAP, 2)))
        size, offsets = 0, []
        for _, dt, shape in layout:
            size = (size + 63) // 64 * 64
            offsets.append(size)
            size += int(np.prod(shape)) * np.dtype(dt).itemsize
        self.file = ShmFile(name, size, create, lockable=not self.ordered)
        arrays = {
            k: self.file.array(off, dt, shape)
            for (k, dt, shape), off in zip(layout, offsets, strict=True)
        }
        self.episodes = arrays.pop("_episodes")
        self.data = arrays
        self.h = header

    def _theirs(self, field: int) -> int:
        """The other side's index, read before the data it covers."""
        return int(self.h[field]) if self.ordered else self.file.index(self.h, field)

    def _publish(self, field: int, value: int) -> None:
        """Set this side's index after the data it covers (written or read)."""
        if self.ordered:
            self.h[field] = value
        else:
            self.file.set_index(self.h, field, value)

    # producer side
    def free(self) -> int:
        return self.capacity - (int(self.h[A_WRITE]) - self._theirs(A_READ))

    def write(self, batch: Batch) -> None:
        n = len(batch["reward"])
        w = int(self.h[A_WRITE])
        idx = (w + np.arange(n)) % self.capacity
        for k, arr in self.data.items():
            arr[idx] = batch[k]
        self._publish(A_WRITE, w + n)

    def write_episode(self, ret: float, length: int) -> None:
        w = int(self.h[A_EPISODES_W])
        self.episodes[w % self.EPISODE_CAP] = (ret, length)
        self._publish(A_EPISODES_W, w + 1)

    # consumer side: an unchanged index needs no lock (nothing is read behind it)
    def drain(self) -> Batch:
        r = int(self.h[A_READ])
        if int(self.h[A_WRITE]) == r:
            return {}
        w = self._theirs(A_WRITE)
        idx = (r + np.arange(w - r)) % self.capacity
        out = {k: arr[idx] for k, arr in self.data.items()}
        self._publish(A_READ, w)
        return out

    def drain_episodes(self) -> list[tuple[float, int]]:
        r = int(self.h[A_EPISODES_R])
        if int(self.h[A_EPISODES_W]) == r:
            return []
        w = self._theirs(A_EPISODES_W)
        r = max(r, w - self.EPISODE_CAP)  # a lagging reader loses the oldest records only
        out = [(float(a), int(b)) for a, b in self.episodes[np.arange(r, w) % self.EPISODE_CAP]]
        self._publish(A_EPISODES_R, w)
        return out
