"""Shared-memory rings and segments: the order of data and indices, and which runs are alive."""

import fcntl
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actorq.distributed import shm
from actorq.types import ArraySpec

SPECS = {"obs": ArraySpec((3,), "int64"), "reward": ArraySpec((), "float32")}


@pytest.fixture
def control() -> Iterator[shm.ControlBlock]:
    block = shm.ControlBlock(f"actorq-test-{os.getpid()}-ctl", 1, create=True)
    yield block
    block.file.unlink()


def _channel(control: shm.ControlBlock, ordered: bool, cap: int = 16) -> shm.TransitionChannel:
    name = f"actorq-test-{os.getpid()}-ring"
    return shm.TransitionChannel(name, SPECS, cap, control.actor(0), create=True, ordered=ordered)


def _rows(start: int, n: int) -> dict[str, np.ndarray]:
    i = np.arange(start, start + n)
    return {"obs": np.stack([i, 2 * i, 3 * i], 1), "reward": i.astype(np.float32)}


@pytest.mark.parametrize("ordered", [True, False])
def test_a_ring_hands_over_rows_and_episodes_in_order_across_wrap_around(
    control: shm.ControlBlock, ordered: bool
) -> None:
    ring = _channel(control, ordered)
    try:
        got: list[np.ndarray] = []
        for start in range(0, 60, 6):  # 10 writes of 6 through a ring of 16
            assert ring.free() >= 6
            ring.write(_rows(start, 6))
            ring.write_episode(float(start), start + 1)
            if start % 12 == 0:
                got.append(ring.drain()["reward"])
        got.append(ring.drain()["reward"])
        assert np.array_equal(np.concatenate(got), np.arange(60, dtype=np.float32))
        assert ring.drain() == {} and ring.free() == 16
        assert ring.drain_episodes() == [(float(s), s + 1) for s in range(0, 60, 6)]
        assert ring.drain_episodes() == []
    finally:
        ring.file.unlink()


def _blocked_by_the_rings_lock(ring: shm.TransitionChannel, call: Any) -> Any:
    """Run ``call`` in a thread while another descriptor holds the ring's lock: returns whether
    it waited for the lock, and its result once the lock is free."""
    fd = os.open(ring.file.path, os.O_RDWR)  # another process's hold on the lock
    out: list[Any] = []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        t = threading.Thread(target=lambda: out.append(call()), daemon=True)
        t.start()
        t.join(0.3)
        waited = t.is_alive()
    finally:
        os.close(fd)  # frees the lock, even when an assertion below fails
    t.join(10)
    return waited, out[0] if out else None


def test_without_total_store_order_each_index_crosses_under_the_rings_lock(
    control: shm.ControlBlock,
) -> None:
    """On CPUs that may reorder stores (aarch64) the reader could see the new index before the
    rows it covers, and the writer could see the reader's index before the reader is done with
    the rows; each index crossing is under the ring file's lock, which orders memory."""
    ring = _channel(control, ordered=False)
    h = control.actor(0)
    try:
        waited, _ = _blocked_by_the_rings_lock(ring, lambda: ring.write(_rows(0, 4)))
        assert waited and int(h[shm.A_WRITE]) == 4  # the writer's index: set under the lock
        waited, got = _blocked_by_the_rings_lock(ring, ring.drain)
        assert waited and np.array_equal(got["reward"], np.arange(4, dtype=np.float32))
        assert int(h[shm.A_READ]) == 4
        waited, free = _blocked_by_the_rings_lock(ring, ring.free)  # the reader's index
        assert waited and free == 16
        waited, got = _blocked_by_the_rings_lock(ring, ring.drain)
        assert not waited and got == {}  # nothing new: no lock to wait for
    finally:
        ring.file.unlink()


PRODUCER = """
import os
import sys
import numpy as np
from actorq.distributed import shm
from actorq.types import ArraySpec
name, ctl, ordered, chunks = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
specs = {"obs": ArraySpec((3,), "int64"), "reward": ArraySpec((), "float32")}
control = shm.ControlBlock(ctl, 1)
ring = shm.TransitionChannel(name, specs, 64, control.actor(0), ordered=ordered)
w = 0
for _ in range(chunks):
    n = 1 + w % 7
    while ring.free() < n:
        if os.getppid() == 1:  # the test died: stop spinning
            sys.exit(1)
    i = np.arange(w, w + n)
    ring.write({"obs": np.stack([i, 2 * i, 3 * i], 1), "reward": i.astype(np.float32)})
    w += n
"""


@pytest.mark.parametrize("ordered", [True, False])
def test_rows_drained_while_another_process_writes_are_whole_and_in_order(
    control: shm.ControlBlock, ordered: bool
) -> None:
    ring = _channel(control, ordered, cap=64)
    try:
        chunks = 3_000
        total = sum(1 + w % 7 for w in _offsets(chunks))
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(PRODUCER), str(ring.file.path.name),
             control.file.path.name, "1" if ordered else "0", str(chunks)],
        )  # fmt: skip
        try:
            seen = 0
            deadline = time.monotonic() + 60
            while seen < total and time.monotonic() < deadline:
                got: dict[str, Any] = ring.drain()
                if not got:
                    continue
                i = np.arange(seen, seen + len(got["reward"]))
                assert np.array_equal(got["obs"], np.stack([i, 2 * i, 3 * i], 1))
                seen += len(i)
            assert proc.wait(30) == 0 and seen == total
        finally:
            proc.kill()  # never left spinning on a full ring
            proc.wait()
    finally:
        ring.file.unlink()


def _offsets(chunks: int) -> Iterator[int]:
    w = 0
    for _ in range(chunks):
        yield w
        w += 1 + w % 7


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_run_whose_pid_looks_dead_here_is_spared_while_its_control_is_held() -> None:
    """Two containers sharing /dev/shm (``--ipc=host``) see different pids: a live learner of
    the other looked dead, and a new run here deleted its segments (its restarted actors then
    failed to attach). Its control segment's lock says it lives, in any PID namespace."""
    d = shm.shm_dir()
    tag = f"actorq-{_dead_pid()}-feed0001"
    held = shm.ControlBlock(f"{tag}-control", 1, create=True)
    others = [d / f"{tag}-cache", d / f"{tag}-chan0"]
    for p in others:
        p.write_bytes(b"x")
    try:
        assert tag + "-control" not in shm.reclaim_stale() and all(p.exists() for p in others)
        held.file.close()  # its learner died: the kernel dropped the lock
        removed = shm.reclaim_stale()
        assert sorted(removed) == sorted([f"{tag}-control", f"{tag}-cache", f"{tag}-chan0"])
    finally:
        held.file.unlink()
        for p in others:
            p.unlink(missing_ok=True)


def test_a_local_run_holds_its_control_segment_and_removes_every_segment_at_its_end(
    tiny: Any,
) -> None:
    from actorq import train

    seen: list[bool] = []

    def check(info: Any) -> bool:
        (path,) = Path(shm.shm_dir()).glob(f"actorq-{os.getpid()}-*-control")
        seen.append(shm._held(path))
        return True

    train(tiny("dqn", actors=1, total_steps=400, log_every=0.05), check)
    assert seen and all(seen)
    assert not list(Path(shm.shm_dir()).glob(f"actorq-{os.getpid()}-*"))


def _shm_descriptors() -> int:
    d = str(shm.shm_dir())
    return sum(
        os.path.realpath(f"/proc/self/fd/{fd}").startswith(d) for fd in os.listdir("/proc/self/fd")
    )


def test_a_local_run_without_total_store_order_leaves_no_descriptor_open(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ring kept a descriptor for its lock, never closed: a learner running trainings in
    turn (a sweep, a notebook) ran out of descriptors."""
    from actorq import train

    monkeypatch.setattr(shm, "TSO", False)  # the learner's rings lock, as on aarch64
    before = _shm_descriptors()
    for sub in ("a", "b"):
        train(tiny("dqn", sub=sub, actors=2, total_steps=300))
    assert _shm_descriptors() == before
