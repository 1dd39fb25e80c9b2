"""The one reader of a results directory's files: cell.json, config.json, summary.json,
failed.json, machine.json, metrics.csv and the step count of a cell's checkpoint.

`actorq report`, a resumed `actorq bench` and the cell process read them only through here, so
each either gets values of the types it uses (numbers finite, at most :data:`MAX_MAGNITUDE`) or
stops with one :class:`ResultsError` line that names the file.

Two kinds of damage are told apart. Bytes that are not UTF-8 or not JSON are what a write cut
short leaves (:class:`HalfWrittenError`): a cell killed while writing its files. A cell directory
without a complete summary is a partial run (docs/bench.md): the next `actorq bench` clears it
and runs the cell again, so such files are not an error there. A file that parses but has the
wrong shape (a list, a missing or wrong-typed field, NaN) is not something a cut-short write
makes, nor actorq: it is reported, never skipped or cleared, which would hide or delete what
someone else put there.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actorq import checkpoint as ckpt
from actorq.bench.spec import one_line
from actorq.errors import ActorQError, CheckpointError, shown
from actorq.inputs import read_input
from actorq.output import write_output
from actorq.rundir import METRICS_HEADER as RUN_METRICS_HEADER
from actorq.rundir import RunDir, within_metrics_header

#: summary.json keys a finished run always has (experiment.TrainResult)
SUMMARY_REQUIRED = ("env", "precision", "env_steps", "eval_return", "wall_time_s")
METRICS_HEADER = list(RUN_METRICS_HEADER)
# JSON integers have no size limit, but everything read here becomes a float or a numpy value
_INT_MAX = 2**63 - 1
#: the largest magnitude of a number read here. No return, duration, step count (the config caps
#: total_steps at 1e13), timestamp, byte count or energy a run logs comes near it, and the
#: report's sums, bootstrap means and plot axes overflow to inf on values near float's limit.
MAX_MAGNITUDE = 1e15
#: the most cores a session's machine.json may say it had (today's largest machines have
#: thousands): a larger count is no machine's
MAX_CORES = 1_000_000

Row = tuple[int, float, str, float]


class ResultsError(ActorQError):
    """A results file that cannot be read or does not hold what actorq writes there."""

    def __init__(self, msg: str) -> None:
        super().__init__(one_line(msg))


class HalfWrittenError(ResultsError):
    """A results file whose bytes are not UTF-8 or not JSON: what a write cut short leaves."""


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HalfWrittenError(f"{path}: not UTF-8 text (byte {e.start})") from None


def _read_bytes(path: Path) -> bytes | None:
    with contextlib.suppress(OSError):  # unreadable metadata: read_input says why
        if not path.exists():  # (a dangling link too)
            return None
    return read_input(path, shown(path), ResultsError)


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when there is no such file.

    NaN and Infinity parse (a run writes NaN where a statistic has no data, e.g. the action
    agreement of a run without states); the field readers below reject them where they are used.
    """
    data = _read_bytes(path)
    if data is None:
        return None
    text = _decode(path, data)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise HalfWrittenError(
            f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        ) from None
    except (ValueError, RecursionError) as e:  # an integer of > 4300 digits, or nesting
        raise ResultsError(f"{path}: unreadable JSON ({type(e).__name__})") from None
    if not isinstance(obj, dict):
        raise ResultsError(f"{path}: not a JSON object (a {type(obj).__name__})")
    return obj


class Fields:
    """Typed access to one JSON object's fields; every error names the file and the key."""

    def __init__(self, path: Path, d: dict[str, Any], prefix: str = "") -> None:
        self.path, self.d, self.prefix = path, d, prefix  # prefix: "config." for a nested object

    def bad(self, key: str, what: str) -> ResultsError:
        return ResultsError(
            f"{self.path}: {self.prefix}{key} must be {what}, got {_short(self.d[key])}"
        )

    def has(self, key: str) -> bool:
        return key in self.d

    def text(self, key: str, *, nullable: bool = False) -> str | None:
        v = self.d.get(key)
        if key in self.d and not (isinstance(v, str) or (nullable and v is None)):
            raise self.bad(key, "a string" + (" or null" if nullable else ""))
        return v

    def integer(
        self, key: str, lo: int = 0, *, nullable: bool = False, hi: float = MAX_MAGNITUDE
    ) -> int | None:
        v = self.d.get(key)
        if v is None and nullable:
            return None
        if key in self.d and (not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi):
            what = f"an integer in [{lo}, {hi:g}]"
            raise self.bad(key, what + (" or null" if nullable else ""))
        return v

    def number(self, key: str, *, nullable: bool = False, lo: float | None = None) -> float | None:
        """A finite number (an int or a float), at least ``lo``; None if absent (or null when
        ``nullable``)."""
        if key not in self.d:
            return None
        v = self.d[key]
        if v is None and nullable:
            return None
        what = f"a number in [{-MAX_MAGNITUDE if lo is None else lo:g}, {MAX_MAGNITUDE:g}]"
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise self.bad(key, what + (" or null" if nullable else ""))
        # NaN fails both comparisons; a huge int is compared exactly, before float() overflows
        if not (-MAX_MAGNITUDE if lo is None else lo) <= v <= MAX_MAGNITUDE:
            raise self.bad(key, what)
        return float(v)

    def flag(self, key: str, *, nullable: bool = False) -> bool | None:
        v = self.d.get(key)
        if key in self.d and not (isinstance(v, bool) or (nullable and v is None)):
            raise self.bad(key, "true or false" + (" or null" if nullable else ""))
        return v

    def widths(self, key: str) -> tuple[int, ...] | None:
        v = self.d.get(key)
        if key not in self.d:
            return None
        if not isinstance(v, list) or not all(
            isinstance(w, int) and not isinstance(w, bool) and 0 < w <= _INT_MAX for w in v
        ):
            raise self.bad(key, "a list of positive integers")
        return tuple(v)

    def table(self, key: str) -> dict[str, Any] | None:
        v = self.d.get(key)
        if key in self.d and not isinstance(v, dict):
            raise self.bad(key, "an object")
        return v


def _short(v: Any, limit: int = 60) -> str:
    """A value for an error line: its repr, shortened (a file may hold a megabyte-long list)."""
    try:
        text = repr(v)
    except (ValueError, RecursionError):  # a huge int's repr, or deep nesting
        return f"a {type(v).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_cell_json(path: Path) -> dict[str, Any] | None:
    """``<cell>/cell.json`` (what the matrix asked for), its fields checked; None if absent.

    Every field is optional (a cell directory from an older actorq may lack some); the ones
    present must have their types.
    """
    d = read_json_object(path)
    if d is None:
        return None
    f = Fields(path, d)
    for key in ("name", "task", "agent", "env", "precision", "country", "spec", "spec_sha256",
                "framework", "defaults"):  # fmt: skip
        f.text(key)
    f.integer("seed")
    f.integer("session")
    f.integer("segment", lo=1)  # 2, 3, ...: the cell resumed from its checkpoint
    f.flag("resume")
    f.table("settings")
    frameworks = d.get("frameworks", [])
    if not isinstance(frameworks, list) or not all(isinstance(x, str) for x in frameworks):
        raise f.bad("frameworks", "a list of strings")
    f.widths("width")
    config = f.table("config")
    if config is not None:  # the report reads it when the run wrote no config.json
        check_run_config(Fields(path, config, "config."), d.get("agent"))
    return d


def read_run_config(path: Path) -> dict[str, Any] | None:
    """A run's ``config.json`` (written by ``actorq.train``): the fields the report uses are
    checked; the agent's own config checks the rest when it is built."""
    d = read_json_object(path)
    if d is None:
        return None
    check_run_config(Fields(path, d))
    return d


def width_keys(agent: Any) -> tuple[str, ...]:
    """The config keys that may hold the acting network's widths (a list), as the report reads
    them: the agent's first width field; none for GO, whose ``hidden`` is one int; for an agent
    this actorq does not know, DQN's and the actor-critics'."""
    from actorq.agents import AGENTS, config_class

    if isinstance(agent, str) and agent in AGENTS:
        return config_class(agent).width_fields[:1]
    return ("hidden", "policy_hidden_sizes")


def check_run_config(f: Fields, agent: Any = None) -> None:
    """``agent``: whose config it is, where the object does not say (a cell.json's config)."""
    for key in ("agent", "env", "precision"):
        f.text(key)
    f.integer("seed")
    for key in width_keys(f.d.get("agent", agent)):
        f.widths(key)
    if f.has("log_every") and (f.number("log_every") or 0.0) <= 0:
        raise f.bad("log_every", "a positive number")
    f.number("target_return", nullable=True)  # a running cell's evaluations are compared to it


def read_summary(cell_dir: Path) -> dict[str, Any] | None:
    """The cell's ``summary.json`` if its run finished, else None.

    None for no file, a half-written one (see the module docstring: the cell is a partial run)
    or the summary of an interrupted run. A summary that parses but lacks a field every finished
    run writes, or has one of the wrong type, raises :class:`ResultsError`.
    """
    path = RunDir(cell_dir).summary_file
    try:
        d = read_json_object(path)
    except HalfWrittenError:
        return None
    if d is None:
        return None
    missing = [k for k in SUMMARY_REQUIRED if k not in d]
    if missing:
        raise ResultsError(f"{path}: missing {', '.join(missing)}")
    f = Fields(path, d)
    if f.flag("interrupted", nullable=True):
        return None  # a stopped segment's: no final evaluation (null), the cell goes on
    f.text("env")
    f.text("precision")
    f.integer("env_steps")
    f.number("eval_return")
    f.number("wall_time_s", lo=0)
    f.number("target_return", nullable=True)
    f.number("time_to_target_s", nullable=True, lo=0)
    f.integer("steps_to_target", nullable=True)
    evals, wall = f.number("eval_time_s", nullable=True, lo=0), f.number("wall_time_s", lo=0)
    if evals is not None and wall is not None and evals > wall:
        raise f.bad("eval_time_s", f"at most wall_time_s ({wall:g})")
    if f.flag("reached_target", nullable=True) and d.get("time_to_target_s") is None:
        raise ResultsError(f"{path}: reached_target is true but time_to_target_s is missing")
    f.flag("energy_estimated", nullable=True)
    for key in ("energy_kwh", "energy_kg_co2", "snapshot_bytes", "fp32_snapshot_bytes"):
        f.number(key, nullable=True, lo=0)
    return d


def read_failed_why(cell_dir: Path) -> str | None:
    """Why the cell failed (``failed.json``, written by `actorq bench`), if it did."""
    path = cell_dir / "failed.json"
    d = read_json_object(path)
    if d is None:
        return None
    f = Fields(path, d)
    f.integer("status", lo=-(2**31))
    return f.text("why")


def read_sessions(results: Path) -> list[dict[str, Any]]:
    """``machine.json``'s sessions (one per `actorq bench` that ran cells); [] if absent.

    machine.json is written whole (tmp file, then rename), so unlike a cell's files a damaged one
    is not a cut-short write of ours: it is an error whatever the damage.
    """
    path = results / "machine.json"
    d = read_json_object(path)
    if d is None:
        return []
    sessions = d.get("sessions")
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
        raise ResultsError(f"{path}: sessions must be a list of objects")
    for i, session in enumerate(sessions):
        check_session(Fields(path, session, f"sessions[{i}]."))
    return sessions


def check_session(f: Fields) -> None:
    """The machine facts of one session (:func:`actorq.bench.machine.machine_info`) that the
    report prints. Each is optional (an older actorq wrote fewer); one present must have its
    type, or the report would print ``nan cores`` or a GPU that is a dict."""
    for key in ("cpu_model", "torch", "onnxruntime", "date"):
        f.text(key)
    f.text("git_commit", nullable=True)  # null: not run from a git checkout
    f.integer("cores", lo=1, hi=MAX_CORES, nullable=True)  # null: os.cpu_count() did not know
    f.integer("cores_usable", lo=1, hi=MAX_CORES, nullable=True)  # null: not on Linux
    f.table("overrides")  # its --override items (field -> value), the spec.toml beside it took
    gpus = f.d.get("gpus", [])
    if not isinstance(gpus, list) or not all(isinstance(g, str) for g in gpus):
        raise f.bad("gpus", "a list of strings (GPU names)")
    load = f.d.get("load_avg_at_start")
    if load is not None and not (
        isinstance(load, list)
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in load)
        and all(0 <= x <= MAX_MAGNITUDE for x in load)  # NaN fails too
    ):
        raise f.bad("load_avg_at_start", f"null or a list of numbers in [0, {MAX_MAGNITUDE:g}]")


def read_checkpoint_steps(cell_dir: Path, native: bool) -> int | None:
    """The env steps the cell's checkpoint holds, where its resume goes on from (an actorq
    run's ``counters.env_steps``; with ``native`` false another framework's, SB3's
    ``learner.counters.num_timesteps``); None without a checkpoint, or one without the count.

    Read through :func:`actorq.checkpoint.read_state` (its manifest's checksums; no pickle, no
    tensors, the replay not hashed); a damaged one is one ResultsError line naming it.
    """
    run = RunDir(cell_dir)
    if not run.has_checkpoint():
        return None
    try:
        where, state = ckpt.read_state(run.checkpoint)  # where: checkpoint.old after a cut save
    except CheckpointError as e:
        raise ResultsError(str(e)) from None
    path = where / "state.json"
    counters = state["counters"]
    if not native:  # SB3's algorithm keeps its own, with the learner's state
        learner = state["learner"]
        counters = learner.get("counters") if isinstance(learner, dict) else None
    if not isinstance(counters, dict):
        raise ResultsError(f"{path}: counters must be an object")
    return Fields(path, counters).integer("env_steps" if native else "num_timesteps")


def read_metrics(path: Path, keep: Callable[[str], bool]) -> list[Row]:
    """The rows of ``metrics.csv`` whose metric ``keep`` accepts: (step, wall time, metric,
    value), all finite; [] if there is no file.

    The logger appends whole lines, so a run killed while logging leaves at most its last line
    cut short (no newline at its end): that line is dropped, even where what is left of it
    parses (``17.3`` cut to ``1``). A file empty or cut short in its header is
    :class:`HalfWrittenError` (a cell killed as it started). Any other bad line is an error.
    Other metrics' values are not read (a diverged loss may be logged as inf).
    """
    data = _read_bytes(path)
    if data is None:
        return []
    text = _decode(path, data)
    if not text:
        raise HalfWrittenError(f"{path}: empty (its header was never written)")
    if within_metrics_header(data):  # the rule by which the next bench clears it
        raise HalfWrittenError(f"{path}: cut short in its header")
    cut_short = not text.endswith(("\n", "\r"))
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[Row] = []
    try:
        header = next(reader, None)
        if header != METRICS_HEADER:
            raise ResultsError(f"{path}: header must be {','.join(METRICS_HEADER)}")
        pending: tuple[int, list[str]] | None = None
        for fields in reader:
            if pending is not None:
                rows.extend(_metric_row(path, *pending, keep))
            pending = (reader.line_num, fields)
        if pending is not None and not cut_short:
            rows.extend(_metric_row(path, *pending, keep))
    except csv.Error as e:
        raise ResultsError(f"{path}: line {reader.line_num}: {e}") from None
    return rows


def _metric_row(path: Path, line: int, fields: list[str], keep: Callable[[str], bool]) -> list[Row]:
    if len(fields) != len(METRICS_HEADER):
        raise ResultsError(f"{path}: line {line}: expected 4 fields, got {len(fields)}")
    step, wall, metric, value = fields
    try:
        s, w = int(step), float(wall)
        v = float(value) if keep(metric) else 0.0
    except ValueError:
        raise ResultsError(f"{path}: line {line}: not a number in {_short(fields)}") from None
    if not keep(metric):
        return []
    if not all(abs(x) <= MAX_MAGNITUDE for x in (s, w, v)):  # False for NaN too
        raise ResultsError(f"{path}: line {line}: a number out of range in {_short(fields)}")
    return [(s, w, metric, v)]


def write_atomic(path: Path, content: str | bytes) -> None:
    """Write ``path`` whole or not at all, so that a process killed mid-write leaves the old
    file or none, never half of one: :func:`actorq.output.write_output` (a temporary file of
    its own, never one a link at a predictable name leads elsewhere; on disk before the
    rename, and the rename too)."""
    write_output(path, content, "", error=ResultsError)


def strict_json(obj: Any) -> str:
    """``obj`` as standard JSON: a non-finite float (an infinite ratio where one side never
    reached the target, a statistic without data) is written as null, so that any JSON reader
    (jq, JavaScript, pandas) reads the file; report.md shows ∞ or — for them."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(obj), indent=1, allow_nan=False)
