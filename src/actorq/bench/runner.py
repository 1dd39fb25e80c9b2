"""Run a benchmark matrix into one results directory, resumably.

Layout of ``RESULTS/``::

    spec.toml          the spec as last run
    machine.json       {"sessions": [machine facts, one per ``actorq bench`` that ran cells]}
    <cell name>/       one run directory per cell (config.json, summary.json, metrics.csv, tb/,
                       checkpoint/) plus cell.json (what the matrix asked for), log.txt (the run's
                       output) and, if it failed, failed.json

A cell is finished when its ``summary.json`` is complete (the run ended on its own, not by
Ctrl-C); finished cells are skipped, so an interrupted matrix continues where it stopped. A cell
directory without a complete summary is a partial run: it is cleared and the cell runs again
from the start, so wall-clock times (time-to-target) never mix two sessions.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actorq.bench.spec import Cell, Spec

#: runs one cell into its directory, within a time limit; returns an exit status
CellRunner = Callable[[Cell, Path, float | None], int]

_SUMMARY_KEYS = ("env_steps", "eval_return", "wall_time_s", "precision", "env")
TIMEOUT_STATUS = 124


def read_summary(cell_dir: Path) -> dict[str, Any] | None:
    """The cell's summary if it is complete, else None."""
    try:
        s = json.loads((cell_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(s, dict) or any(k not in s for k in _SUMMARY_KEYS):
        return None
    if s.get("interrupted"):
        return None
    return s


def is_finished(cell_dir: Path) -> bool:
    return read_summary(cell_dir) is not None


def subprocess_runner(cell: Cell, cell_dir: Path, timeout_s: float | None) -> int:
    """``python -m actorq.bench.cell`` in its own session (process group), output to log.txt.

    Its own session so that a timeout or Ctrl-C reaches the run's actor processes too.
    """
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with open(cell_dir / "log.txt", "ab") as log:
        proc = subprocess.Popen(
            cell_command(cell_dir), stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return TIMEOUT_STATUS
        except KeyboardInterrupt:
            _stop_group(proc)
            raise
        finally:
            # whatever the cell left behind in its group (actors of a run that crashed)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


def cell_command(cell_dir: Path) -> list[str]:
    return [sys.executable, "-m", "actorq.bench.cell", str(cell_dir / "cell.json")]


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT first (the run checkpoints and stops its actors), then SIGKILL."""
    for sig, wait in ((signal.SIGINT, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass
class MatrixOutcome:
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _log_tail(cell_dir: Path, lines: int = 20) -> list[str]:
    try:
        return (cell_dir / "log.txt").read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def _record_session(results: Path, spec: Spec) -> None:
    from actorq.bench.machine import machine_info

    path = results / "machine.json"
    try:
        sessions = json.loads(path.read_text())["sessions"]
    except (OSError, ValueError, KeyError, TypeError):
        sessions = []
    sessions.append(
        {
            **machine_info(),
            "spec_sha256": spec.sha256,
            "cells": len(spec.cells),
            "overrides": spec.overrides,
        }
    )
    path.write_text(json.dumps({"sessions": sessions}, indent=1))
    (results / "spec.toml").write_text(spec.text)


def run_matrix(
    spec: Spec,
    results: Path,
    runner: CellRunner = subprocess_runner,
    progress: bool = True,
) -> MatrixOutcome:
    """Run every unfinished cell of ``spec`` into ``results/<cell name>/``, one at a time."""
    results.mkdir(parents=True, exist_ok=True)
    out = MatrixOutcome()
    todo: list[Cell] = []
    for cell in spec.cells:
        if is_finished(results / cell.name):
            out.skipped.append(cell.name)
        else:
            todo.append(cell)
    if todo:  # a session that runs nothing leaves no trace
        _record_session(results, spec)
    bar = _Bar(progress, len(spec.cells), len(out.skipped))
    bar.print(
        f"bench {spec.name}: {len(spec.cells)} cells, {len(out.skipped)} finished, "
        f"{len(todo)} to run -> {results}"
    )
    try:
        for cell in todo:
            cell_dir = results / cell.name
            if cell_dir.exists():  # a partial run: start over (see the module docstring)
                shutil.rmtree(cell_dir)
            cell_dir.mkdir()
            (cell_dir / "cell.json").write_text(
                json.dumps(
                    {
                        "name": cell.name, "task": cell.task, "agent": cell.agent,
                        "env": cell.env, "precision": cell.precision, "seed": cell.seed,
                        "width": list(cell.width), "country": spec.country,
                        "spec": spec.name, "spec_sha256": spec.sha256, "config": cell.config,
                    },
                    indent=1,
                )
            )  # fmt: skip
            bar.start(cell.name)
            status = runner(cell, cell_dir, spec.timeout_s)
            if status == 0 and is_finished(cell_dir):
                out.ran.append(cell.name)
                s = read_summary(cell_dir) or {}
                bar.print(
                    f"  done   {cell.name}: eval {s.get('eval_return', float('nan')):.1f}, "
                    f"{s.get('wall_time_s', float('nan')):.0f}s"
                )
            else:
                out.failed.append(cell.name)
                why = "timed out" if status == TIMEOUT_STATUS else f"exit status {status}"
                (cell_dir / "failed.json").write_text(
                    json.dumps({"status": status, "why": why, "log_tail": _log_tail(cell_dir)})
                )
                bar.print(f"  [red]failed[/] {cell.name}: {why} (see {cell_dir / 'log.txt'})")
            bar.advance(len(out.failed))
    finally:
        bar.stop()
    return out


class _Bar:
    """A rich progress bar over cells, with the matrix's ETA (plain lines when disabled)."""

    def __init__(self, enabled: bool, total: int, done: int) -> None:
        self.enabled = enabled
        if not enabled:
            return
        from rich import progress as rp

        self.p = rp.Progress(
            rp.SpinnerColumn(),
            rp.TextColumn("[bold]bench"),
            rp.BarColumn(),
            rp.MofNCompleteColumn(),
            rp.TimeElapsedColumn(),
            rp.TextColumn("eta"),
            rp.TimeRemainingColumn(),
            rp.TextColumn("{task.fields[info]}"),
        )
        self.task = self.p.add_task("bench", total=total, completed=done, info="")
        self.p.start()

    def start(self, name: str) -> None:
        if self.enabled:
            self.p.update(self.task, info=f"running {name}")

    def advance(self, failed: int) -> None:
        if self.enabled:
            self.p.update(self.task, advance=1, info=f"{failed} failed" if failed else "")

    def print(self, msg: str) -> None:
        if self.enabled:
            self.p.console.print(msg, highlight=False)
        else:
            import re

            print(re.sub(r"\[/?\w*\]", "", msg), flush=True)

    def stop(self) -> None:
        if self.enabled:
            self.p.stop()
