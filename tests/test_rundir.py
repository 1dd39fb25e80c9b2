"""The run directory has one writer: a second run into it, or a second resume of it, is refused
with one line and writes nothing; the lock dies with its holder, however it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actorq.errors import CheckpointError, ConfigError
from actorq.experiment import train
from actorq.rundir import RunDir, lock_file, unlock_file
from tests.damage import HOSTILE_JSON

HOLD = """
import sys, time
from actorq.rundir import lock_file
from pathlib import Path
lock_file(Path(sys.argv[1]), "held")
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder() -> Iterator[Callable[[Path], subprocess.Popen[str]]]:
    """Start a process that holds the lock file given, as another actorq would."""
    procs: list[subprocess.Popen[str]] = []

    def start(lock: Path) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True
        )
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == "locked"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_the_layout_is_one_type(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    assert run.config_file.name == "config.json" and run.checkpoint.name == "checkpoint"
    assert run.actor_log(3) == tmp_path / "r" / "actors" / "actor3.log"
    assert not run.is_run() and run.read_summary() is None


def test_a_second_run_into_a_locked_directory_is_refused_and_writes_nothing(
    tiny: Callable[..., Any], tmp_path: Path, holder: Callable[[Path], Any]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    p = holder(run / ".lock")
    with pytest.raises(
        ConfigError, match=rf"another actorq process is writing this run \(pid {p.pid}\)"
    ):
        train(tiny("dqn", total_steps=300, min_replay_size=100))
    assert sorted(f.name for f in run.iterdir()) == [".lock"]  # no config, metrics, checkpoint
    p.kill()
    p.wait()  # a killed holder's lock is gone with it: the run starts
    r = train(tiny("dqn", total_steps=300, min_replay_size=100))
    assert RunDir(Path(r.run_dir)).has_checkpoint()


def test_a_second_resume_of_a_running_run_is_refused(
    tiny: Callable[..., Any], holder: Callable[[Path], Any]
) -> None:
    r = train(tiny("dqn", total_steps=300, min_replay_size=100))
    run = RunDir(Path(r.run_dir))
    before = run.metrics.read_bytes()
    p = holder(run.path / ".lock")
    with pytest.raises(ConfigError, match="another actorq process is writing this run"):
        train(tiny("dqn", resume=str(run), total_steps=600))
    assert run.metrics.read_bytes() == before  # nothing appended
    os.kill(p.pid, signal.SIGTERM)
    p.wait()
    assert train(tiny("dqn", resume=str(run), total_steps=600)).env_steps >= 600


def test_a_lock_is_taken_once_per_process_and_released(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    fd = lock_file(lock, "x")
    assert fd is not None and lock_file(lock, "x") is None  # nested in this thread: no-op
    unlock_file(fd)
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", f"from actorq.rundir import lock_file; from pathlib import Path; "
         f"print(lock_file(Path({str(lock)!r}), 'x'))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.stdout.strip().isdigit() and time.monotonic() - t0 < 60


def _lockable(lock: Path) -> bool:
    """Whether another process can take ``lock`` now."""
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; from actorq.rundir import "
         "lock_file; lock_file(Path(sys.argv[1]), 'held')", str(lock)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return out.returncode == 0


def test_a_second_run_from_another_thread_is_refused(
    tiny: Callable[..., Any], tmp_path: Path
) -> None:
    """A lock held by one thread is not a nested take for another: a second train() into the
    same directory from another thread of the process is refused, as from another process."""
    import threading

    run = RunDir(tmp_path / "run")
    run.prepare()
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with run.lock():
            held.set()
            done.wait(60)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(60)
        with pytest.raises(
            ConfigError, match=rf"writing this run \(pid {os.getpid()}, another thread of this"
        ):
            train(tiny("dqn", total_steps=300, min_replay_size=100))
        assert not run.is_run()  # nothing written
    finally:
        done.set()
        t.join()


def test_a_lock_taken_by_a_relative_path_is_released_after_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock released is the one taken, not whatever its path names once the working
    directory (or the run directory) moved: that one leaked, and the run stayed locked."""
    (tmp_path / "a" / "run").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    with RunDir(Path("run")).lock():
        monkeypatch.chdir(tmp_path / "b")
        assert not _lockable(tmp_path / "a" / "run" / ".lock")
    assert _lockable(tmp_path / "a" / "run" / ".lock")


def test_clear_refuses_a_run_still_being_written_and_removes_nothing(
    tmp_path: Path, holder: Callable[[Path], Any]
) -> None:
    """A bench cell outlives a killed `actorq bench` (it runs in its own session): the next
    bench must not delete the directory it still writes."""
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "cell.json").write_text('{"name": "c", "agent": "dqn", "env": "gym:CartPole-v1"}')
    (cell / "log.txt").write_text("training")
    p = holder(cell / ".lock")
    before = sorted(f.name for f in cell.iterdir())
    with pytest.raises(ConfigError, match=rf"cell is still being written \(pid {p.pid}\)"):
        RunDir(cell).clear()
    assert sorted(f.name for f in cell.iterdir()) == before
    assert (cell / "log.txt").read_text() == "training"
    p.kill()
    p.wait()
    RunDir(cell).clear()  # its writer gone: removed
    assert not cell.exists()


@pytest.mark.parametrize("hostile", HOSTILE_JSON, ids=["deep", "deep-objects", "big", "neg"])
def test_a_summary_the_json_parser_raises_on_is_no_summary(tmp_path: Path, hostile: bytes) -> None:
    """``read_summary`` says None for what it cannot read: nesting past the parser's stack,
    and an integer past Python's 4,300 digits (its bare ValueError) too."""
    run = RunDir(tmp_path)
    run.summary_file.write_bytes(hostile)
    assert run.read_summary() is None


def test_a_path_that_is_no_directory_is_named_for_what_it_is(tmp_path: Path) -> None:
    """A file or a FIFO where a run directory goes: said to be one, not "no config.json"."""
    file, fifo = tmp_path / "policy.onnx", tmp_path / "pipe"
    file.write_text("x")
    os.mkfifo(fifo)
    assert RunDir(file).not_a_directory() == f"{file} is a file, not a run directory"
    assert RunDir(fifo).not_a_directory() == f"{fifo} is a special file, not a run directory"
    for there in (tmp_path, tmp_path / "absent", file / "below", Path("a" * 5000)):
        assert RunDir(there).not_a_directory() is None  # "not found" or "no config.json"
    with pytest.raises(CheckpointError, match="is a file, not a run directory"):
        RunDir(file).read_config_json()
    with pytest.raises(CheckpointError, match="not an actorq run directory"):
        RunDir(tmp_path / "absent").read_config_json()
