"""The local backend: shared-memory cache, actor restarts, clean shutdown on Ctrl-C."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actorq import DQNConfig, train
from actorq.distributed import shm
from actorq.distributed.shm import SharedSnapshotCache
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot
from tests.distributed.stopping import check_stopped_cleanly, sigterm_when
from tests.quant.test_snapshot import layers


def _procs_mentioning(text: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmd and "actor_proc" in cmd:
            pids.append(int(d.name))
    return pids


def test_cache_serves_latest_and_survives_corruption() -> None:
    spec = PolicySpec(4, (16,), 2)
    name = f"actorq-test-{os.getpid()}-cache"
    writer = SharedSnapshotCache(name, capacity=1 << 16, create=True)
    try:
        reader = SharedSnapshotCache(name)
        assert reader.latest_version() == -1 and reader.fetch() is None
        for v in range(1, 4):
            writer.publish(v, make_snapshot(layers(spec, v), spec, "int8", v).to_bytes())
            got = reader.fetch()
            assert got is not None and got[0] == v
            assert PolicySnapshot.from_bytes(got[1]).version == v
        # a corrupted slot is detected by the snapshot checksum
        slot = int(writer.hdr[1])
        view = writer._slot(slot)
        n = int(writer.hdr[4 + slot])
        view[n - 10] = (view[n - 10] + 1) % 256  # inside the tensor data
        got = reader.fetch()
        assert got is not None
        with pytest.raises(Exception, match="checksum"):
            PolicySnapshot.from_bytes(got[1])
        with pytest.raises(ValueError):
            writer.publish(9, b"x" * (1 << 17))  # larger than a slot
    finally:
        writer.file.unlink()


def test_killed_actor_is_restarted_and_training_continues(tmp_path: Path) -> None:
    killed: list[int] = []
    at_kill: list[int] = []  # the killed slot's env steps when it died

    def kill_then_watch(info: dict) -> bool:
        steps = int(info["backend"].control.actor(0)[shm.A_ENV_STEPS])  # slot 0's counter
        if not killed:
            if info["actor_pids"] and info["env_steps"] > 2_000:
                killed.append(info["actor_pids"][0])
                at_kill.append(steps)
                os.kill(killed[0], signal.SIGKILL)
                info["backend"].procs[0].wait(timeout=30)
                # as if the dead process had refused 7 snapshots: its slot's count must stay
                # (a restarted actor wrote its own count, from 0, over it)
                info["backend"].control.actor(0)[shm.A_REJECTED] = 7
            return True
        # stop once the restart is logged and the new process in the slot has stepped its envs
        # (its counter goes on from the dead one's): a run of any speed shows the restart
        restarted = info["actor_pids"][:1] != killed and info["faults/actor_restarts"] >= 1
        return not (restarted and steps > at_kill[0] + 1_000)

    r = train(
        DQNConfig(
            actors=2,
            envs_per_actor=4,
            total_steps=200_000,  # a cap (a restart takes ~2 s): the callback ends the run
            min_replay_size=500,
            # a small, lightly trained learner: the restart is under test, not the learning
            hidden=(64, 64),
            samples_per_insert=4.0,
            stop_at_target=False,
            eval_every=10**7,
            progress=False,
            log_every=0.5,
            run_dir=str(tmp_path),
        ),
        callback=kill_then_watch,
    )
    assert killed, "no actor was killed"
    assert r.actor_restarts >= 1 and r.rejected_snapshots == 7
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stop"] == "callback"  # the restarted actor stepped: training went on
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert any(",faults/actor_restarts,1" in row for row in rows)
    assert not _procs_mentioning(str(tmp_path))
    # where the time went, per interval, the restart included: the restarted actor's counters
    # continue (a share below 0 would be an actor counting from zero again)
    logged: dict[tuple[str, str], float] = {}
    for row in rows[1:]:
        _, t, name, value = row.split(",")
        logged[(t, name)] = float(value)
    infer = {t: v for (t, n), v in logged.items() if n == "perf/actor_infer_frac"}
    env = {t: v for (t, n), v in logged.items() if n == "perf/actor_env_frac"}
    assert infer and env.keys() == infer.keys()
    assert max(infer.values()) > 0.0 and max(env.values()) > 0.0
    assert all(infer[t] >= 0.0 and env[t] >= 0.0 and infer[t] + env[t] <= 1.0 for t in infer)
    # the learner's wall time: waiting for data, inside updates, the rest (publishing, logging)
    update = {t: v for (t, n), v in logged.items() if n == "perf/learner_update_frac"}
    waits = {t: v for (t, n), v in logged.items() if n == "perf/learner_wait_frac"}
    assert update and waits.keys() == update.keys() and max(update.values()) > 0.0
    assert all(waits[t] >= 0.0 and update[t] >= 0.0 and waits[t] + update[t] <= 1.0 for t in waits)
    # a resumed run reports the run's totals, every segment's: the restart stays counted (it
    # reported this segment's alone: 0)
    more = train(DQNConfig(resume=str(tmp_path), total_steps=r.env_steps + 400, progress=False))
    assert more.actor_restarts >= r.actor_restarts >= 1 and more.rejected_snapshots == 7
    assert json.loads((tmp_path / "summary.json").read_text())["actor_restarts"] >= 1


def test_ctrl_c_stops_everything_and_checkpoints(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "actorq.cli", "train", "dqn", "--actors", "2",
           "--envs-per-actor", "4", "--total-steps", "10000000", "--no-progress",
           "--no-stop-at-target",  # it must still be running when Ctrl-C comes
           "--run-dir", str(run)]  # fmt: skip
    p = subprocess.Popen(
        cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        actors = str(run / "actors")  # actor processes' config paths (not the learner's args)
        while time.monotonic() < deadline and len(_procs_mentioning(actors)) < 2:
            time.sleep(0.2)
        assert len(_procs_mentioning(actors)) == 2, "actors did not start"
        time.sleep(2.0)
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, out.decode()[-2000:]
    time.sleep(0.5)
    assert not _procs_mentioning(str(run)), "orphan actor processes"
    assert (run / "checkpoint" / "manifest.json").is_file()
    assert not list(Path("/dev/shm").glob(f"actorq-{p.pid}-*"))


def test_sigterm_stops_a_run_as_ctrl_c_does(tmp_path: Path) -> None:
    """SIGTERM (kill, docker stop, Slurm, Kubernetes), sent to the learner alone: a final
    checkpoint and summary (without the final evaluation), the actors stopped, shared memory
    removed, a resume hint."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "actorq.cli", "train", "dqn", "--actors", "2",
           "--envs-per-actor", "4", "--total-steps", "10000000", "--no-progress",
           "--no-stop-at-target", "--log-every", "0.5", "--run-dir", str(run)]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    actors = str(run / "actors")

    def acting() -> bool:
        # both actor processes up, and the run's loop logging env steps (the actors start
        # before the energy tracker and the first snapshot: seconds on a loaded machine)
        if len(_procs_mentioning(actors)) != 2 or not (run / "metrics.csv").is_file():
            return False
        rows = (run / "metrics.csv").read_text().splitlines()[1:]
        return any(r.split(",")[0].isdigit() and int(r.split(",")[0]) > 0 for r in rows)

    text = sigterm_when(p, acting, "actors did not start")
    check_stopped_cleanly(p, text, run)
    time.sleep(0.5)
    assert not _procs_mentioning(str(run)), "orphan actor processes"
    summary = json.loads((run / "summary.json").read_text())
    # no held-out evaluation after a stop signal (minutes on Atari, past a scheduler's grace)
    assert summary["eval_return"] is None and summary["action_agreement"] is None
    assert "final_eval_return" not in (run / "metrics.csv").read_text()
    assert f"actorq eval {run}" in text
    assert not list(Path("/dev/shm").glob(f"actorq-{p.pid}-*"))


def test_actors_exit_when_the_learner_is_killed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "actorq.cli", "train", "dqn", "--actors", "2",
           "--envs-per-actor", "2", "--total-steps", "10000000", "--no-progress",
           "--run-dir", str(run)]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_procs_mentioning(str(run))) < 2:
        time.sleep(0.2)
    p.kill()  # SIGKILL: no cleanup code runs in the learner
    p.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _procs_mentioning(str(run)):
        time.sleep(0.2)
    assert not _procs_mentioning(str(run))
    for f in Path("/dev/shm").glob(f"actorq-{p.pid}-*"):
        f.unlink()  # a SIGKILLed learner cannot clean up its shared memory


def test_publish_costs_the_learner_the_same_for_any_number_of_readers() -> None:
    # one shared copy per machine: readers attach to it; publish never touches them
    spec = PolicySpec(8, (64, 64), 4)
    data = make_snapshot(layers(spec), spec, "int8", 1).to_bytes()
    name = f"actorq-test-{os.getpid()}-fan"
    writer = SharedSnapshotCache(name, capacity=len(data) + 1024, create=True)
    try:
        readers = [SharedSnapshotCache(name) for _ in range(16)]
        writer.publish(1, data)
        assert all(r.fetch() == (1, data) for r in readers)
        assert np.all([r.latest_version() == 1 for r in readers])
    finally:
        writer.file.unlink()


def test_a_later_run_reclaims_shared_memory_of_a_killed_learner(tmp_path: Path, tiny: Any) -> None:
    from actorq.distributed import shm

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    d = shm.shm_dir()
    stale = [d / f"actorq-{dead.pid}-deadbeef-{k}" for k in ("control", "cache", "chan0")]
    keep = [
        d / f"actorq-{dead.pid}-deadbeef-cache-0123456789ab",  # a Ray node cache: not ours
        d / f"actorq-{os.getpid()}-cafe0000-control",  # a live learner's
    ]
    for p in stale + keep:
        p.write_bytes(b"x")
    try:
        train(tiny("ppo", actors=1, total_steps=1_024, stop_at_target=False))
        assert not any(p.exists() for p in stale)
        assert all(p.exists() for p in keep)
    finally:
        for p in stale + keep:
            p.unlink(missing_ok=True)


def test_an_actor_that_raises_stops_the_run_with_its_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # e.g. an env whose install is broken in the actors: restarting it would fail the same way
    # forever while the learner waited for data; the run stops with the actor's own line
    from actorq.distributed import local
    from actorq.errors import ActorFailedError

    real = subprocess.Popen
    crash = "import sys; print('Traceback ...'); raise ModuleNotFoundError(\"No module 'optree'\")"

    def popen(args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        return real([sys.executable, "-c", crash], **kw)

    monkeypatch.setattr(local.subprocess, "Popen", popen)
    t0 = time.monotonic()
    with pytest.raises(ActorFailedError) as e:
        train(
            DQNConfig(
                actors=1,
                total_steps=5_000,
                progress=False,
                log_every=0.2,
                run_dir=str(tmp_path / "r"),
            )
        )
    msg = str(e.value)
    assert "actor 0 failed: ModuleNotFoundError: No module 'optree'" in msg, msg
    assert "actor0.log" in msg and "\n" not in msg
    assert time.monotonic() - t0 < 60  # at the first supervision, not after a timeout
    assert not _procs_mentioning(str(tmp_path))


def _ours() -> set[str]:
    return {p.name for p in shm.shm_dir().glob(f"actorq-{os.getpid()}-*")}


def test_a_full_shared_memory_is_one_line_before_any_actor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segments were sparse: on a full /dev/shm (Docker's 64 MiB; an Atari DQN actor's ring is
    ~58 MB) the first process to touch a page died of SIGBUS, an actor restarted forever."""
    import errno

    from actorq.resources import ResourceError

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    before = _ours()
    monkeypatch.setattr(shm.os, "posix_fallocate", full)
    with pytest.raises(ResourceError, match=r"^shared memory: no room for .*--shm-size") as e:
        train(DQNConfig(actors=2, total_steps=500, progress=False, run_dir=str(tmp_path / "r")))
    assert "\n" not in str(e.value) and _ours() == before


def test_a_backend_that_fails_to_start_leaves_no_actor_or_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Actor 1 failing to spawn (e.g. EAGAIN) left actor 0 polling forever beside the live
    learner, and the segments, which reclaim_stale spares while the learner's pid lives."""
    from actorq.distributed import local

    spawned: list[Any] = []
    real = local.LocalBackend._spawn

    def spawn(self: Any, i: int) -> None:
        if i == 1:
            raise OSError(11, "Resource temporarily unavailable")
        real(self, i)
        spawned.append(self.procs[i])

    before = _ours()
    monkeypatch.setattr(local.LocalBackend, "_spawn", spawn)
    with pytest.raises(OSError):
        train(DQNConfig(actors=2, total_steps=500, progress=False, run_dir=str(tmp_path / "r")))
    (first,) = spawned
    assert first.poll() is not None and _ours() == before


def test_an_actor_killed_at_every_start_stops_the_run_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal that kills every incarnation (a SIGBUS on a full /dev/shm, a native crash) was
    met by a restart at every supervision, forever, with no progress."""
    from actorq.distributed import local
    from actorq.errors import ActorFailedError

    real = subprocess.Popen
    die = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"

    def popen(args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        return real([sys.executable, "-c", die], **kw)

    monkeypatch.setattr(local.subprocess, "Popen", popen)
    cfg = DQNConfig(actors=1, total_steps=5_000, progress=False, log_every=0.2,
                    run_dir=str(tmp_path / "r"))  # fmt: skip
    t0 = time.monotonic()
    with pytest.raises(ActorFailedError, match=r"^actor 0 was killed 5 times in 60 s, last by "
                       r"SIGKILL; not restarting it again \(its log: ") as e:  # fmt: skip
        train(cfg, lambda info: time.monotonic() - t0 < 30)  # before: restarted until here
    assert "\n" not in str(e.value)
