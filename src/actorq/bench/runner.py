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
from the start, so wall-clock times (time-to-target) never mix two sessions; unless the spec
says ``resume = true`` (cells of hours), where a partial cell that holds a checkpoint (actorq's
``checkpoint/``, or an adapter's in the same place) continues from it if it ran the settings the
spec gives now, up to what a resume may change (other changes are refused with one line, the
checkpoint kept): its run's clock, evaluation seconds and time to target go on from the
checkpoint's counters, so an interruption loses at most one checkpoint interval. A summary.json cut
short is such a partial run; one that parses but is not what a run writes (a list, a missing or
wrong-typed field) stops the matrix with one line naming it (:mod:`actorq.bench.results`), as
does a damaged machine.json: both are read before anything is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from actorq.agents import config_class
from actorq.bench.frameworks import NATIVE
from actorq.bench.results import (
    ResultsError,
    read_cell_json,
    read_sessions,
    read_summary,
    write_atomic,
)
from actorq.bench.spec import Cell, Spec, SpecError
from actorq.config import RESUME_OVERRIDES
from actorq.errors import shown
from actorq.inputs import exists, is_dir
from actorq.output import open_append
from actorq.rundir import RunDir, lock_file, remove_trash, some, unlock_file

#: runs one cell into its directory, within a time limit; returns an exit status
CellRunner = Callable[[Cell, Path, float | None], int]

TIMEOUT_STATUS = 124

__all__ = ["MatrixOutcome", "Plan", "is_finished", "plan_matrix", "read_summary", "run_matrix"]


def is_finished(cell_dir: Path) -> bool:
    """Whether the cell's run finished; raises ResultsError for a summary.json that is not
    what a run writes (see the module docstring)."""
    return read_summary(cell_dir) is not None


@dataclass
class Plan:
    """What running a spec into a results directory would do, from the files already there."""

    finished: list[Cell]
    todo: list[Cell]
    sessions: list[dict[str, Any]]  # machine.json's, to append this session to
    resumes: set[str] = field(default_factory=set)  # todo cells that continue a checkpoint


def plan_matrix(spec: Spec, results: Path) -> Plan:
    """Read and check every results file a run of ``spec`` into ``results`` reads (each
    cell's summary.json, machine.json), writing nothing: `actorq bench --dry-run` and
    :func:`run_matrix` fail alike, with one line naming the file, before anything is written."""
    where = f"results {shown(results)}"
    if exists(results, where, ResultsError) and not is_dir(results, where, ResultsError):
        raise ResultsError(f"results {results} is not a directory")
    finished: list[Cell] = []
    todo: list[Cell] = []
    resumes: set[str] = set()
    for cell in spec.cells:
        cell_dir = results / cell.name
        done = is_finished(cell_dir)
        if done:
            _check_same_cell(cell, cell_dir)
        elif spec.resume and _can_resume(cell, cell_dir):
            resumes.add(cell.name)
        (finished if done else todo).append(cell)
    fresh = [c for c in todo if c.name not in resumes]
    for cell in fresh:
        if cell.name in spec.refused_if_new:
            raise SpecError(spec.refused_if_new[cell.name])
    _refuse_foreign(spec, results, fresh)
    return Plan(finished, todo, read_sessions(results), resumes)


def _refuse_foreign(spec: Spec, results: Path, fresh: list[Cell]) -> None:
    """One line where the bench would delete or overwrite what is not its own: a directory at
    a fresh cell's name (cleared to start the cell over) holding what is not a run's or a
    cell's, a file there, or a ``spec.toml`` at the root that no bench wrote (it writes
    machine.json beside it) and that is not this spec."""
    move = "move it away or use another --results"
    for cell in fresh:
        where = results / cell.name
        if os.path.lexists(where) and not where.is_dir():
            raise ResultsError(f"{shown(where)} is not a cell's directory; {move}")
        foreign = RunDir(where).foreign_entries()
        if foreign:
            raise ResultsError(
                f"{shown(results / cell.name)} holds what is not a cell's run ({some(foreign)}), "
                f"and the cell would start over there; {move}"
            )
    spec_file = results / "spec.toml"
    if (
        os.path.lexists(spec_file)
        and not os.path.lexists(results / "machine.json")
        and not _holds(spec_file, spec.text.encode("utf-8"))  # the spec kept in its results
    ):
        raise ResultsError(
            f"{shown(spec_file)} is not a bench's (no machine.json beside it); {move}"
        )


def _can_resume(cell: Cell, cell_dir: Path) -> bool:
    """Whether a partial cell holds a checkpoint to go on from (spec ``resume = true``).

    A checkpoint of another run than the spec asks now (a config field, the framework axis
    or the framework's settings changed since, beyond what a resume may change: the run's
    length, display, how updates run; :data:`~actorq.config.RESUME_OVERRIDES`) is refused
    with one line: never deleted to start over (an Atari cell's is days of training)."""
    if not RunDir(cell_dir).has_checkpoint():
        return False
    old = read_cell_json(cell_dir / "cell.json")
    keep = "restore the spec's setting, use another --results directory, or remove that cell"
    if old is None or not isinstance(old.get("config"), dict):
        raise ResultsError(
            f"{cell_dir} holds a checkpoint but no cell.json saying what it ran; {keep}"
        )
    if old.get("framework", NATIVE) != cell.framework:
        raise ResultsError(
            f"{cell_dir} holds a checkpoint of framework {old.get('framework', NATIVE)!r}, "
            f"the spec's cell is {cell.framework!r}; {keep}"
        )
    for diff, was, now in _differences(cell, old):
        if diff == "settings" and isinstance(was, dict) and isinstance(now, dict):
            # a framework's own settings: how its updates run may change (SB3's threads)
            keys = set(was) | set(now)
            bad = sorted(k for k in keys if was.get(k) != now.get(k) and k not in _SB3_FREE)
            if not bad:
                continue
            diff, was, now = f"settings.{bad[0]}", was.get(bad[0]), now.get(bad[0])
        elif cell.framework == NATIVE and diff in _NATIVE_FREE:
            continue
        elif diff == "total_steps":  # SB3's learn(): its progress is num_timesteps / total
            raise ResultsError(
                f"{cell_dir} holds a checkpoint of a {was!r}-step {cell.framework} run and the "
                f"spec now says {now!r}: its schedules (learning rate, clip range, exploration) "
                f"run over the budget it started with; {keep} to start it over"
            )
        raise ResultsError(
            f"{cell_dir} holds a checkpoint of a run with other settings than the spec "
            f"gives now ({diff}: {was!r} -> {now!r}); {keep} to start it over"
        )
    return True


#: what a partial cell's resume may change: actorq's resume overrides and the learner's device
#: (``actorq train --resume --device``); an SB3 cell's threads and checkpoint period
_NATIVE_FREE = frozenset({*RESUME_OVERRIDES, "device"})
_SB3_FREE = frozenset({"torch_threads", "checkpoint_minutes"})


def _difference(cell: Cell, old: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first setting (key, then, now) where the cell.json ``old`` differs from ``cell``."""
    return next(iter(_differences(cell, old)), None)


#: cell.json's ``defaults``: a cell's config fields the spec does not name take the agent's
#: defaults (``DQNConfig()``'s). A cell.json without it was written when the bench built its
#: configs as saved runs' are read, so those fields took the older runs' values
#: (:attr:`~actorq.config.ExperimentConfig.saved_run_defaults`: DQN without its dueling head,
#: rounding to nearest); a comparison fills them in on both sides, so that such a cell counts
#: as the same run only where the spec now names those values.
CLASS_DEFAULTS = "agent"


def _unnamed_defaults(cell: Cell, old: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what an older cell ran, what the cell runs now) for the settings whose unnamed value
    changed with cell.json's ``defaults``; empty for a cell.json that records them."""
    if old.get("defaults") == CLASS_DEFAULTS or cell.framework != NATIVE:
        return {}, {}
    cls = config_class(cell.agent)
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    then = {k: v for k, v in cls.saved_run_defaults.items() if k not in old["config"]}
    now = {k: fields[k] for k in then if k not in cell.config and k in fields}
    return then, now


def _differences(cell: Cell, old: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Every setting (key, then, now) where the cell.json ``old`` differs from ``cell``."""
    ran, runs = _unnamed_defaults(cell, old)
    # a cell from before the framework axis ran actorq alone
    then = {**ran, **old["config"], "frameworks": old.get("frameworks", [NATIVE]),
            "settings": old.get("settings", {})}  # fmt: skip
    now = json.loads(json.dumps(
        {**runs, **cell.config, "frameworks": list(cell.frameworks), "settings": cell.settings}
    ))  # fmt: skip
    keys = sorted(set(then) | set(now))
    return [(k, then.get(k), now.get(k)) for k in keys if then.get(k) != now.get(k)]


def _check_same_cell(cell: Cell, cell_dir: Path) -> None:
    """A finished cell counts only if it ran what the spec asks now: a cell of the same name
    run with other settings (the spec changed since: a config field, the framework axis its
    timings are compared within, its framework's settings) is refused with one line, never
    reported under the new spec nor silently rerun over."""
    old = read_cell_json(cell_dir / "cell.json")
    if old is None or not isinstance(old.get("config"), dict):
        return  # a cell directory from before cell.json kept its config: nothing to compare
    found = _difference(cell, old)
    if found is not None:
        diff, was, now = found
        raise ResultsError(
            f"{cell_dir} finished with other settings than the spec gives now ({diff}: "
            f"{was!r} -> {now!r}); use a new --results directory, "
            "or remove that cell to run it again"
        )


def subprocess_runner(cell: Cell, cell_dir: Path, timeout_s: float | None) -> int:
    """``python -m actorq.bench.cell`` in its own session (process group), output to log.txt.

    Its own session so that a timeout or Ctrl-C reaches the run's actor processes too.
    """
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with open_append(cell_dir / "log.txt", ResultsError) as log:
        with _sigint_delivered():
            proc = subprocess.Popen(
                cell_command(cell_dir), stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )  # fmt: skip
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            if _stop_group(proc):  # stopped by the time limit, and asked to stop meanwhile
                raise KeyboardInterrupt from None
            return TIMEOUT_STATUS
        except KeyboardInterrupt:
            _stop_group(proc)
            raise
        finally:
            # whatever the cell left behind in its group (actors of a run that crashed)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def _sigint_delivered() -> Iterator[None]:
    """Children started inside get SIGINT's default action, even where this process ignores it.

    A shell starts background jobs (``nohup actorq bench ... &``) with SIGINT ignored, and
    children inherit that through exec: a timed-out cell then ignored the SIGINT that makes it
    checkpoint and stop its actors, and was killed 30 s later without a checkpoint. A disposition
    with a handler is reset to the default at exec, so a handler set for the spawn is enough."""
    import threading

    old = signal.getsignal(signal.SIGINT)
    if old != signal.SIG_IGN or threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def cell_command(cell_dir: Path) -> list[str]:
    return [sys.executable, "-m", "actorq.bench.cell", str(cell_dir / "cell.json")]


#: how long a stopped cell may take to checkpoint (an Atari DQN cell writes its 0.7 GB frame
#: replay) before it is killed
STOP_GRACE_S = 60.0


def _stop_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> bool:
    """SIGINT first (the run checkpoints and stops its actors), then SIGKILL. A Ctrl-C or
    SIGTERM meanwhile does not cut the checkpoint short: it is remembered, and the return value
    says whether one came (the caller then stops the matrix, as it asked)."""
    interrupted = False
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGKILL, 10.0)):
        while True:
            try:
                os.killpg(proc.pid, sig)
                break
            except ProcessLookupError:
                return interrupted
            except KeyboardInterrupt:  # raised around the call: send it (again), to be sure
                interrupted = True
        done, again = _wait(proc, wait)
        interrupted = interrupted or again
        if done:
            break
    return interrupted


def _wait(proc: subprocess.Popen[bytes], seconds: float) -> tuple[bool, bool]:
    """(whether ``proc`` exited within ``seconds``, whether an interrupt came meanwhile)."""
    deadline = time.monotonic() + seconds
    interrupted = False
    while True:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            return True, interrupted
        except subprocess.TimeoutExpired:
            return False, interrupted
        except KeyboardInterrupt:
            if not interrupted:
                print(
                    "actorq: the cell is checkpointing; stopping when it is done", file=sys.stderr
                )
            interrupted = True


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


def _record_session(results: Path, spec: Spec, sessions: list[dict[str, Any]]) -> None:
    from actorq.bench.machine import machine_info

    sessions = [
        *sessions,
        {
            **machine_info(),
            "spec_sha256": spec.sha256,
            "cells": len(spec.cells),
            "overrides": spec.overrides,
        },
    ]
    write_atomic(results / "machine.json", json.dumps({"sessions": sessions}, indent=1))
    write_atomic(results / "spec.toml", spec.text)


def _holds(path: Path, data: bytes) -> bool:
    """Whether the regular file ``path`` holds exactly ``data``."""
    try:
        return path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def _fresh_dir(cell_dir: Path) -> None:
    try:  # a partial run: start over (see the module docstring); never what is not a run's,
        RunDir(cell_dir).clear()  # checked again now (plan_matrix's check may be hours old)
        cell_dir.mkdir()
    except OSError as e:
        raise ResultsError(f"cannot make {cell_dir}: {e.strerror or e}") from None


def _prepare_cell(spec: Spec, plan: Plan, cell: Cell, cell_dir: Path) -> bool:
    """Make the cell's directory and its cell.json: a fresh directory, or, for a cell the plan
    resumes, the one holding its checkpoint (cell.json then says ``resume`` and counts the
    segments). Returns whether the cell resumes."""
    resume = cell.name in plan.resumes
    segment = 1
    if resume:
        old = read_cell_json(cell_dir / "cell.json") or {}
        segment = int(old.get("segment", 1)) + 1
        with RunDir(cell_dir).unwritten():  # not under a segment still running
            for stale in ("failed.json", "summary.json"):  # an interrupted segment's
                (cell_dir / stale).unlink(missing_ok=True)
    else:
        _fresh_dir(cell_dir)
    write_atomic(
        cell_dir / "cell.json",
        json.dumps(
            {
                "name": cell.name, "task": cell.task, "agent": cell.agent,
                "env": cell.env, "precision": cell.precision, "seed": cell.seed,
                "width": list(cell.width), "country": spec.country,
                "spec": spec.name, "spec_sha256": spec.sha256, "config": cell.config,
                "framework": cell.framework, "frameworks": list(cell.frameworks),
                "settings": cell.settings, "defaults": CLASS_DEFAULTS,
                "session": len(plan.sessions),
                "resume": resume, "segment": segment,
            },
            indent=1,
        )
    )  # fmt: skip
    return resume


def _last_error(cell_dir: Path) -> str:
    """``": <the run's error line>"`` from a failed cell's log (a diverging learner, a bad
    setting), or "" if its log has none: the console says why, not just a status."""
    try:
        lines = (cell_dir / "log.txt").read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith("actorq: error:")]
    if not errors:
        return ""
    return ": " + errors[-1].removeprefix("actorq: error:").strip()[:300]


def _outcome(cell_dir: Path, status: int) -> tuple[dict[str, Any] | None, str]:
    """The summary of a cell that finished, or None and why it did not."""
    if status != 0:
        if status == TIMEOUT_STATUS:
            return None, "timed out"
        return None, f"exit status {status}{_last_error(cell_dir)}"
    try:
        summary = read_summary(cell_dir)
    except ResultsError as e:  # the run wrote a summary the report could not read
        return None, str(e)
    return summary, "no complete summary.json"


def run_matrix(
    spec: Spec,
    results: Path,
    runner: CellRunner = subprocess_runner,
    progress: bool = True,
) -> MatrixOutcome:
    """Run every unfinished cell of ``spec`` into ``results/<cell name>/``, one at a time."""
    plan_matrix(spec, results)  # every file read and checked before anything is written
    try:
        results.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ResultsError(f"cannot make {results}: {e.strerror or e}") from None
    # one runner per results directory: a second one is refused rather than running every
    # cell a second time into the same cell directories
    lock = lock_file(
        results / ".lock", f"{shown(results)}: another actorq bench is running these results"
    )
    try:
        remove_trash(results)  # cells an earlier bench was clearing when it was stopped
        plan = plan_matrix(spec, results)  # again, under the lock: what is finished now
        out = MatrixOutcome(skipped=[c.name for c in plan.finished])
        return _run_plan(spec, results, plan, out, runner, progress)
    finally:
        unlock_file(lock)


def _run_plan(
    spec: Spec,
    results: Path,
    plan: Plan,
    out: MatrixOutcome,
    runner: CellRunner,
    progress: bool,
) -> MatrixOutcome:
    todo = plan.todo
    if todo:  # a session that runs nothing leaves no trace
        _record_session(results, spec, plan.sessions)
    bar = _Bar(progress, len(spec.cells), len(out.skipped))
    term = _TermAsInterrupt()  # SIGTERM/SIGHUP stop the running cell as Ctrl-C does
    bar.print(
        f"bench {spec.name}: {len(spec.cells)} cells, {len(out.skipped)} finished, "
        f"{len(todo)} to run -> {results}"
    )
    try:
        for cell in todo:
            cell_dir = results / cell.name
            if _prepare_cell(spec, plan, cell, cell_dir):
                bar.print(f"  resume {cell.name} from its checkpoint")
            bar.start(cell.name)
            status = runner(cell, cell_dir, spec.timeout_s)
            summary, why = _outcome(cell_dir, status)
            if summary is not None:
                out.ran.append(cell.name)
                bar.print(
                    f"  done   {cell.name}: eval {float(summary['eval_return']):.1f}, "
                    f"{float(summary['wall_time_s']):.0f}s"
                )
            else:
                out.failed.append(cell.name)
                write_atomic(
                    cell_dir / "failed.json",
                    json.dumps({"status": status, "why": why, "log_tail": _log_tail(cell_dir)}),
                )
                where = escape(f"{cell.name}: {why} (see {cell_dir / 'log.txt'})")
                bar.print(f"  [red]failed[/] {where}")
            bar.advance(len(out.failed))
    finally:
        term.restore()
        bar.stop()
    return out


class _TermAsInterrupt:
    """SIGTERM, and SIGHUP (the terminal closed, an ssh session dropped), raised as
    KeyboardInterrupt in the main thread while a matrix runs: the cell in flight is then
    stopped through the Ctrl-C path (SIGINT to its process group: it checkpoints and stops its
    actors) instead of left training as an orphan in its own session."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        import threading

        self._prev: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            # a hangup `nohup` ignores stays ignored (a bench left running past a logout)
            self._prev = {
                s: signal.signal(s, self._handle)
                for s in self.SIGNALS
                if s != signal.SIGHUP or signal.getsignal(s) is not signal.SIG_IGN
            }

    @staticmethod
    def _handle(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    def restore(self) -> None:
        for s, prev in self._prev.items():
            signal.signal(s, prev)
        self._prev = {}


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
