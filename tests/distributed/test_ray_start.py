"""A Ray cluster as users start one: ``ray start --head`` and ``ray start --address`` (two
raylets on this machine, separate ports, one CPU each, token authentication on), then
``actorq train --backend ray --ray-address``. Slow (≈ 1–3 min): ``make test-cluster``.

What it checks: a client without the token gets one line saying what to set; with it, DQN int8
trains across both raylets, an actor killed on the second raylet is restarted and counted, and
the run reaches CartPole's threshold. The raylets are stopped by their own session (their
processes and descendants), never by a machine-wide ``ray stop``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.cluster]

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session_pids(marks: tuple[str, ...]) -> list[int]:
    """Processes whose command line names this cluster (its temp dir or GCS port), and their
    descendants (workers and agents the raylets forked)."""
    parent: dict[int, int] = {}
    hits: set[int] = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if any(m in cmd for m in marks):
            hits.add(int(d.name))
    grew = True
    while grew:
        kids = {p for p, pp in parent.items() if pp in hits and p not in hits}
        grew = bool(kids)
        hits |= kids
    hits.discard(os.getpid())
    return sorted(hits)


def _stop(marks: tuple[str, ...]) -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        pids = _session_pids(marks)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if Path(f"/proc/{p}").exists()]
            time.sleep(0.2)
        if not pids:
            return


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix="aq-ray-", dir="/tmp"))  # short: unix socket paths
    token = root / "token"
    token.write_text(secrets.token_hex(32))
    port, client_port = _free_port(), _free_port()
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    marks = (str(root), f":{port} ", f":{port}\0", f"{port} --")
    common = ["--num-cpus=1", "--disable-usage-stats"]
    try:
        subprocess.run(
            [RAY, "start", "--head", f"--port={port}", f"--temp-dir={root}",
             f"--ray-client-server-port={client_port}", "--include-dashboard=false", *common],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        subprocess.run(
            [RAY, "start", f"--address=127.0.0.1:{port}", *common],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        yield {"address": f"127.0.0.1:{port}", "env": env, "root": root}
    finally:
        _stop(marks)
        shutil.rmtree(root, ignore_errors=True)


def test_a_client_without_the_token_is_told_what_to_set(cluster: dict[str, Any]) -> None:
    env = {k: v for k, v in cluster["env"].items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(cluster["root"] / "home")  # no ~/.ray/auth_token either
    p = subprocess.run(
        [sys.executable, "-m", "actorq.cli", "train", "dqn", "--backend", "ray",
         "--ray-address", cluster["address"], "--actors", "1", "--no-energy",
         "--run-dir", str(cluster["root"] / "noauth")],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and "requires token authentication" in lines[0], p.stderr
    assert "RAY_AUTH_MODE=token" in lines[0] and "auth_token" in lines[0]


DRIVER = """
import json, os, signal, sys
from actorq import DQNConfig, train

seen, killed = set(), []

def kill_on_second_raylet(info):
    backend = info["backend"]
    actors = backend.actor_info()
    seen.update(a["node"] for a in actors if a.get("alive"))
    if not killed and info["env_steps"] > 5_000:
        for a in actors:
            if a.get("alive") and a["node"] != backend.nodes[0]:
                os.kill(a["pid"], signal.SIGKILL)
                killed.append(a["pid"])
                break

r = train(
    DQNConfig(backend="ray", ray_address=sys.argv[1], actors=2, envs_per_actor=8,
              actor_cpus=0.5, replay_shards=2, precision="int8", total_steps=400_000,
              progress=False, log_every=1.0, energy=False, run_dir=sys.argv[2]),
    callback=kill_on_second_raylet,
)
print(json.dumps({"nodes": len(seen), "killed": killed, "restarts": r.actor_restarts,
                  "reached": r.reached_target, "steps": r.env_steps}))
"""


def test_dqn_trains_across_two_raylets_and_survives_a_killed_actor(
    cluster: dict[str, Any],
) -> None:
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, cluster["address"], str(cluster["root"] / "run")],
        env=cluster["env"], capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["nodes"] == 2, out  # one actor per raylet
    assert out["killed"] and out["restarts"] >= 1, out
    assert out["reached"], out
