"""A stop signal on the Ray backend stops the run as on the local backend: ``ray.init`` installs
its own SIGTERM handler (a head it starts kills Ray and exits 1), which must not replace the
run's, and Ray's processes and the node caches' shared memory still go at the end."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed.stopping import check_stopped_cleanly, sigterm_when

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("ray")  # one Ray cluster at a time (see test_ray.py)


def test_the_runs_stop_handler_outlives_ray_init(monkeypatch: pytest.MonkeyPatch) -> None:
    from actorq.distributed.ray_backend import init_ray
    from actorq.run.monitor import StopOnSignal

    assert not ray.is_initialized()
    monkeypatch.setenv("RAY_ADDRESS", "local")  # a Ray of its own, whatever else runs here
    stop = StopOnSignal()
    try:
        assert init_ray(None)
        assert signal.getsignal(signal.SIGTERM) == stop._handle
        assert signal.getsignal(signal.SIGINT) == stop._handle
    finally:
        ray.shutdown()
        stop.restore()


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """Ray's temporary directory for one run: short (Ray's socket paths must fit 107 bytes),
    and in every one of its processes' environment, so the test finds them all."""
    d = Path(tempfile.mkdtemp(prefix="aq", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _procs_with_env(entry: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.encode() in env:
            found.append(int(d.name))
    return found


def test_sigterm_stops_a_ray_run_as_on_the_local_backend(tmp_path: Path, ray_tmp: Path) -> None:
    """As tests/distributed/test_local.py's SIGTERM test: exit status 130, a final checkpoint
    and summary, a resume hint; no Ray process and no node-cache segment left behind. Before,
    Ray's handler exited 1 through the failed-run path, with neither."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "actorq.cli", "train", "dqn", "--backend", "ray",
           "--actors", "2", "--envs-per-actor", "4", "--replay-shards", "2",
           "--total-steps", "10000000", "--min-replay-size", "200", "--log-every", "0.5",
           "--no-progress", "--no-stop-at-target", "--run-dir", str(run)]  # fmt: skip
    env = dict(os.environ, RAY_ADDRESS="local", RAY_TMPDIR=str(ray_tmp))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    metrics = run / "metrics.csv"

    def acting() -> bool:  # actors finished episodes: the backend is up
        return metrics.is_file() and ",charts/episodic_return," in metrics.read_text()

    text = sigterm_when(p, acting, "the Ray run did not start", timeout=120)
    check_stopped_cleanly(p, text, run)
    deadline = time.monotonic() + 30  # Ray's shutdown waits for its processes, a little more
    while time.monotonic() < deadline and _procs_with_env(f"RAY_TMPDIR={ray_tmp}"):
        time.sleep(0.5)
    assert not _procs_with_env(f"RAY_TMPDIR={ray_tmp}"), "Ray processes left running"
    assert not list(Path("/dev/shm").glob(f"actorq-{p.pid}-*"))
