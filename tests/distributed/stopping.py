"""A training run in a subprocess stopped by SIGTERM, as kill, Slurm or Kubernetes stop one: what
every backend's run must do then (tests/distributed/test_local.py, test_ray_signals.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def sigterm_when(
    p: subprocess.Popen[bytes], ready: Callable[[], bool], what: str, timeout: float = 60.0
) -> str:
    """SIGTERM ``p`` once ``ready()`` (``what`` did not happen within ``timeout``: fail); its
    output once it exited (it is killed if it outlives the test)."""
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and p.poll() is None and not ready():
            time.sleep(0.2)
        assert p.poll() is None and ready(), what
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    return out.decode()


def check_stopped_cleanly(p: subprocess.Popen[bytes], text: str, run: Path) -> None:
    """Stopped as Ctrl-C stops a run: exit status 130, a resume hint, a final checkpoint and a
    summary of the interrupted run."""
    assert p.returncode == 130, text[-2000:]
    assert f"--resume {run}" in text
    assert (run / "checkpoint" / "manifest.json").is_file()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["env_steps"] > 0
