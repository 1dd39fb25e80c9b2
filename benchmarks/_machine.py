"""What the scripts here share: the machine facts recorded next to every result, a report's
head and tables, the command line and subcommands, comma-separated integers, timed calls, checks,
progress lines, atomic JSON writes and metrics.csv read back."""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from actorq.bench import machine
from actorq.bench.machine import cpu_flags, cpu_model, git_commit

__all__ = [
    "check", "command", "cpu_flags", "cpu_model", "git_commit", "ints", "machine_info", "md_head",
    "md_table", "num", "read_metrics_csv", "say", "subcommands", "timed", "write_json_atomic",
]  # fmt: skip

REPO = Path(__file__).resolve().parents[1]


def machine_info() -> dict[str, Any]:
    """actorq.bench's machine facts plus the date, the load now and the versions that matter."""
    versions = {}
    for pkg in ("actorq", "stable-baselines3", "torch", "gymnasium", "mujoco", "dm-control"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        **machine.machine_info(),
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_avg": [round(x, 2) for x in os.getloadavg()], "versions": versions,
    }  # fmt: skip


def md_head(title: str, results: dict[str, Any]) -> list[str]:
    """A Markdown report's first lines: title, command, date, CPU and load."""
    m = results["machine"]
    return [
        f"# {title}",
        "", f"`{results['command']}`", "",
        f"- date: {m['date']}; CPU: {m['cpu_model']} ({m['cores_usable']} usable cores); "
        f"load average at start: {m.get('load_avg_at_start', m.get('load_avg'))}",
    ]  # fmt: skip


def md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines: header, separator, one line per row."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def command(script: str, argv: list[str] | None = None) -> str:
    """``python benchmarks/<script> <args>``: the command a result records (``argv`` or the
    process's own arguments)."""
    args = sys.argv[1:] if argv is None else argv
    return f"python benchmarks/{script} {' '.join(args)}".strip()


def subcommands(main: Callable[[], Any], **subs: Callable[[], Any]) -> None:
    """Exit with ``main()``'s code, or a subcommand's where the first argument names one
    (``-`` for ``_`` in its name)."""
    sub = subs.get(sys.argv[1].replace("-", "_")) if len(sys.argv) > 1 else None
    if sub is not None:
        sys.argv.pop(1)
    sys.exit((sub or main)() or 0)


def ints(s: str) -> list[int]:
    """An argparse type: comma-separated integers."""
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None


def timed(fn: Callable[[], Any], repeats: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each of ``repeats`` calls of ``fn`` after one warm-up call."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def check(text: str, passed: bool | None) -> dict[str, Any]:
    """A target's check as results record it, printed as PASS, FAIL or SKIPPED (None)."""
    print({True: "PASS: ", False: "FAIL: ", None: "SKIPPED: "}[passed] + text)
    return {"text": text, "passed": passed}


def say(msg: str) -> None:
    """A progress line on stdout, flushed."""
    print(msg, flush=True)


def num(x: float | None, fmt: str = ",.0f") -> str:
    return "—" if x is None or (isinstance(x, float) and x != x) else format(x, fmt)


def _portable(data: Any) -> Any:
    """``data`` with absolute paths inside the repository made relative to its root: committed
    results must not carry the machine's checkout path."""
    if isinstance(data, dict):
        return {k: _portable(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_portable(v) for v in data]
    if isinstance(data, str) and data.startswith(f"{REPO}{os.sep}"):
        return data[len(str(REPO)) + 1 :]
    return data


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` through a temporary file and a rename: never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_portable(data), indent=1))
    os.replace(tmp, path)


def read_metrics_csv(path: Path) -> dict[str, list[tuple[int, float, float | None]]]:
    """actorq's metrics.csv as ``{metric: [(step, value, wall_time or None), ...]}``."""
    out: dict[str, list[tuple[int, float, float | None]]] = {}
    if not path.exists():
        return out
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            wall = row.get("wall_time")
            out.setdefault(row["metric"], []).append(
                (int(float(row["step"])), float(row["value"]), float(wall) if wall else None)
            )
    return out
