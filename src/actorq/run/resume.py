"""Resolving a run's config (on a copy; a resume merges the saved one), its run directory, and
restoring a checkpoint: counters, RNG streams, replay.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import io
import random
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actorq import checkpoint as ckpt
from actorq.config import (
    RESUME_OVERRIDES,
    ExperimentConfig,
    device_problem,
    is_device_name,
    not_this_backend,
)
from actorq.core.interfaces import Learner
from actorq.envs import validate_env_id
from actorq.errors import ActorQError, CheckpointError, ConfigError, first_line, shown
from actorq.logging import rewrite_metrics, whole_lines
from actorq.replay.frames import MAX_COUNT
from actorq.replay.npz import missing_shards
from actorq.run.directory import run_config_from_json
from actorq.rundir import RunDir, some
from actorq.settings import flag, flat_items


def _default_run_dir(cfg: ExperimentConfig) -> Path:
    env = cfg.env.replace(":", "-").replace("/", "-")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.agent}-{env}-{cfg.precision}-s{cfg.seed}-{stamp}"


Loaded = ckpt.Checkpoint


def resolve_config(cfg: ExperimentConfig) -> tuple[ExperimentConfig, Loaded | None]:
    """The config this run uses — a copy: ``train(cfg)`` never changes the caller's object —
    and, for ``resume``, the checkpoint it continues from (the saved experiment, with this
    invocation's run-length and display options)."""
    out = resolve_run(cfg)
    return out, (RunDir(Path(out.resume)).load_checkpoint() if out.resume else None)


def resolve_run(cfg: ExperimentConfig, given: Collection[str] | None = None) -> ExperimentConfig:
    """:func:`resolve_config` without reading the checkpoint, and with the run directory
    decided (``run_dir`` set): everything checked before anything is written or locked.

    ``given``: the settings the caller set, by flat name, where it knows (the command line's
    flags, even at their defaults); None: those that differ from the class's defaults (the
    library cannot tell a default given from one left out). A resume takes the given ones it may
    change (:data:`RESUME_OVERRIDES`, where it runs: :meth:`ExperimentConfig.placement`) and
    refuses the others that differ from the saved run."""
    if not cfg.resume:
        out = copy.deepcopy(cfg)
        out.validate()
        validate_env_id(out.env)
        run_dir = Path(out.run_dir) if out.run_dir else _default_run_dir(out)
        try:
            if run_dir.exists() and not run_dir.is_dir():
                raise ConfigError(f"--run-dir {shown(run_dir)} is a file, not a directory")
        except OSError as e:  # Python 3.11's exists() raises for EACCES on a parent
            raise ConfigError(f"--run-dir {shown(run_dir)}: {e.strerror or e}") from None
        out.run_dir = str(run_dir)
        return out
    resume_dir = Path(cfg.resume)
    if cfg.run_dir is not None and Path(cfg.run_dir).resolve() != resume_dir.resolve():
        raise ConfigError(
            f"--resume {resume_dir} continues in that directory; --run-dir {cfg.run_dir} "
            "names another (drop --run-dir, or copy the run directory first)"
        )
    run = RunDir(resume_dir)
    saved_json = run.read_config_json()  # once: the config, and the device it trained on
    saved = run_config_from_json(run, saved_json, device="cpu")  # where: decided here
    names = set_settings(cfg) if given is None else sorted(given)
    saved.device = resume_device(cfg, resume_dir, saved_json.get("device", "cpu"), names)
    if saved.agent != cfg.agent:
        raise ConfigError(f"{resume_dir} is a {saved.agent} run; resume it with {saved.agent}")
    refuse_conflicts(resume_dir, given_conflicts(cfg, saved, names))
    for f in RESUME_OVERRIDES:
        if hasattr(cfg, f):
            setattr(saved, f, getattr(cfg, f))
    move_run(cfg, saved, names)
    saved.resume, saved.run_dir = str(resume_dir), str(resume_dir)
    if not run.has_checkpoint():
        raise CheckpointError(f"{resume_dir} has no checkpoint to resume from")
    saved.validate()
    validate_env_id(saved.env)
    return saved


_RESUME_FREE = (*RESUME_OVERRIDES, "resume", "run_dir", "energy", "energy_country", "device")
#: a run's budget and stop rule: a resume that gives them trains to them and keeps them in
#: config.json; one that does not keeps the run's (``actorq train --resume``)
RESUME_BUDGET = frozenset({"total_steps", "stop_at_target"})


def move_run(cfg: ExperimentConfig, saved: ExperimentConfig, names: Collection[str]) -> None:
    """Where the resumed run's actors run: the placement settings (:meth:`~actorq.config.
    ExperimentConfig.placement`: the backend, its settings, the actor count) among ``names``
    (given) from ``cfg``, the rest the saved run's. One line for a backend's setting that would
    be ignored (``replay_shards`` on a run that goes on locally)."""
    backend = cfg.backend if "backend" in names else saved.backend
    for name in names:
        owner = saved.backend_of(name)
        if owner not in (None, backend) and getattr(cfg, name) != getattr(saved, name):
            raise ConfigError(not_this_backend(flag(name), str(owner), backend))
    for name in saved.placement().intersection(names):
        setattr(saved, name, getattr(cfg, name))


def record_move(cfg: ExperimentConfig, run: RunDir) -> str | None:
    """Once a resume's replay is read (a refused resume writes nothing): ``config.json`` says
    from now on where the resume moved the run (another backend, its settings, actor count) and
    the budget it trains to (``--total-steps``, ``--stop-at-target``: the next resume, as an
    interrupted one's hint gives it, goes on to that budget, not back to the first one).
    Returns what moved (``--backend ray, --replay-shards 4``), None if nothing did. The rest of
    config.json stays the run's start's."""
    saved = run.read_config_json()
    # compared as the resume read it (an older file's "" for no Ray address reads as None)
    was = run_config_from_json(run, saved, device="cpu").to_json()
    kept = cfg.placement() | RESUME_BUDGET
    now = {k: v for k, v in cfg.to_json().items() if k in kept}
    changed = {k: v for k, v in now.items() if was.get(k) != v}
    if changed:
        run.write_config_json({**saved, **changed})
    moved = sorted((k, v) for k, v in changed.items() if k in cfg.placement())
    return ", ".join(f"{flag(k)} {v}" for k, v in moved) or None


def resume_device(
    cfg: ExperimentConfig, resume_dir: Path, ran_on: Any, given: Collection[str]
) -> str:
    """Where a resumed run's learner computes: ``--device`` when given (in ``given``: the
    command line's even at its default, so ``--device cpu`` takes a GPU run to the CPU on a
    machine with a GPU; the library's when not at its default, :func:`set_settings`); else the
    device the run trained on (``ran_on``, as its config.json says), if this machine has it;
    else the CPU, with a warning (a run trained on a GPU goes on on a machine without one).
    Checkpoints hold CPU tensors, so weights and optimizer state load onto either; updates on
    another device differ in the last bits."""
    if "device" in given:
        return cfg.device  # validated with the rest of the config
    path = RunDir(resume_dir).config_file
    if not is_device_name(ran_on):
        raise CheckpointError(f"{path}: device must be cpu, cuda or cuda:N, got {ran_on!r}")
    problem = device_problem(ran_on)
    if problem is None:
        return ran_on
    print(
        f"actorq: warning: {resume_dir} trained its learner on {ran_on}, which this machine "
        f"lacks ({problem.partition(': ')[2]}): resuming on the CPU (--device to choose)",
        file=sys.stderr,
    )
    return "cpu"


def set_settings(cfg: ExperimentConfig) -> list[str]:
    """The settings of ``cfg`` that differ from its class's defaults, by flat name: what a
    library call is taken to have given."""
    defaults = dict(flat_items(type(cfg)()))
    return [n for n, v in flat_items(cfg) if v != defaults[n]]


def resume_conflicts(cfg: ExperimentConfig, saved: ExperimentConfig) -> list[str]:
    """Options set on a resume (differing from the defaults) that differ from the saved run:
    they would be silently ignored, so they are refused (``--flag value (saved: x)``)."""
    return given_conflicts(cfg, saved, set_settings(cfg))


def given_conflicts(
    cfg: ExperimentConfig, saved: ExperimentConfig, names: Collection[str]
) -> list[str]:
    """Of the settings ``names`` (known to be given: the command line knows which), those a
    resume would ignore because they differ from the saved run (``--flag value (saved: x)``);
    where the run's actors run is no conflict (:func:`move_run` takes it)."""
    mine, was = dict(flat_items(cfg)), dict(flat_items(saved))
    free = {*_RESUME_FREE, *saved.placement()}
    return [
        f"{flag(n)} {mine[n]} (saved: {was.get(n)})"
        for n in names
        if n in mine and n not in free and mine[n] != was.get(n)
    ]


def refuse_conflicts(resume_dir: str | Path, conflicts: list[str]) -> None:
    """One :class:`ConfigError` line naming every option a resume of ``resume_dir`` would
    ignore, if any."""
    if conflicts:
        raise ConfigError(
            f"--resume continues {resume_dir} with its saved settings; these options differ "
            f"from them: {', '.join(conflicts)} (drop them, or start a new run)"
        )


def refuse_held_output(run: RunDir) -> None:
    """One line when a new run would write into another run's output (never overwritten nor
    mixed): resume it when it has a checkpoint, else pick another directory; or among files
    that are not a run's (``--run-dir .``, ``--run-dir ~/data``): a new run needs a new or
    empty directory."""
    foreign = run.foreign_entries()
    if foreign:
        raise ConfigError(
            f"--run-dir {shown(run.path)} holds what is not a run's ({some(foreign)}): a new "
            "run goes into a new or empty directory"
        )
    held = run.held_output()
    if held is None:
        return
    if run.has_checkpoint():
        raise ConfigError(f"{run} already holds a run; use --resume {run} or a new --run-dir")
    raise ConfigError(
        f"{run} holds {held} of an earlier run (no checkpoint to resume from); "
        "use a new --run-dir, or move that run away"
    )


def open_run_dir(cfg: ExperimentConfig) -> Path:
    """Create (or, resuming, reuse) the run directory; write config.json for a new run. Called
    with the run's lock held (:func:`train`), so no other run can be starting in it."""
    run = RunDir(Path(cfg.run_dir) if cfg.run_dir else _default_run_dir(cfg))
    if run.path.exists() and not run.path.is_dir():
        raise ConfigError(f"--run-dir {run} is a file, not a directory")
    if not cfg.resume:
        refuse_held_output(run)
    run.path.mkdir(parents=True, exist_ok=True)
    cfg.run_dir = str(run)
    if not cfg.resume:
        write_config(cfg, run.path)
    return run.path


def write_config(cfg: ExperimentConfig, run_dir: Path) -> None:
    RunDir(run_dir).write_config_json(cfg.to_json())


@dataclasses.dataclass
class Counters:
    """The run's progress; checkpointed as JSON (``state.json["counters"]``)."""

    env_steps: int = 0
    updates: int = 0
    publishes: int = 0
    version: int = 0
    episodes: int = 0
    wall_time_s: float = 0.0
    #: of ``wall_time_s``, the seconds spent in periodic evaluations (carried over a resume,
    #: so a resumed run's training time and time to target less evaluation stay whole)
    eval_time_s: float = 0.0
    time_to_target_s: float | None = None
    steps_to_target: int | None = None
    last_eval: float | None = None
    #: the best periodic evaluation so far and its env step: the policy kept in ``RUN/best``
    best_eval: float | None = None
    best_eval_steps: int | None = None
    #: the env step of the next periodic evaluation (None in checkpoints from before it: the
    #: next multiple of eval_every): a checkpoint saved while one was due makes a resume run it
    next_eval: int | None = None
    #: ``updates`` when the latest snapshot was published (an evaluation publishes only if the
    #: weights changed since, so on-policy data is not made stale by evaluations)
    updates_at_publish: int = 0
    #: the run's energy and carbon up to this checkpoint, every segment of it (a resume adds
    #: its own tracker's); None where a segment was not measured (energy off, codecarbon
    #: missing or failing) or in checkpoints from before the fields: no whole-run total then
    energy_kwh: float | None = None
    energy_kg_co2: float | None = None
    energy_estimated: bool | None = None
    #: the replay's samples-per-insert position at this checkpoint (Reverb's diff: inserts ×
    #: samples_per_insert − samples, :attr:`~actorq.replay.tables.UniformTable.lead`; Ray: the
    #: shards' summed): a resume starts its rate limiter there, so actors run no further ahead
    #: of the learner (nor it of them) than before the stop. None: no replay saved, a Ray shard
    #: that did not answer, older checkpoints (the restored items then count as inserts up to
    #: min_replay_size: the limiter's centre)
    replay_lead: float | None = None
    #: whole-run totals (every segment's; a log interval or the run's end brings them up to
    #: date): actors restarted, snapshots actors refused, periodic publishes skipped
    actor_restarts: int = 0
    rejected_snapshots: int = 0
    publishes_skipped: int = 0
    #: whole-run sums of what counts from each segment's start: the backend's cumulative
    #: metrics (:data:`~actorq.distributed.backend.CUMULATIVE`) and the publishes' timings
    #: (``publish_s``/``publish_n``: making and sending; ``blocked_s``/``blocked_n``: what
    #: the learner's thread paid), so a resumed run's means and faults are the whole run's
    totals: dict[str, float] = dataclasses.field(default_factory=dict)

    def mean_ms(self, what: str) -> float:
        """The run's mean time of ``what`` (``publish``, ``blocked``) in milliseconds."""
        n = self.totals.get(f"{what}_n", 0.0)
        return 1e3 * self.totals.get(f"{what}_s", 0.0) / n if n else 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Counters:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def restore(loaded: Loaded, learner: Learner, counters: Counters) -> np.random.Generator:
    """Load the learner's state, the counters and the RNG streams; returns the learner's
    sampling generator."""
    tensors, state = loaded.tensors, loaded.state
    for name, t in tensors.items():  # weights and optimizer state: a NaN never resumes
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise CheckpointError(
                f"checkpoint tensor {name!r} is NaN or infinite: this checkpoint cannot resume "
                "(a diverged or damaged run; start a new run or resume an earlier copy)"
            )
    try:
        learner.load_state(tensors, state["learner"])
        restored = Counters.from_json(state["counters"])
        rng = ckpt.restore_rng(state["rng"]["numpy"])
        torch.set_rng_state(tensors["rng.torch"])
        ckpt.restore_cuda_rng(tensors)
        random.setstate((3, tuple(state["rng"]["python"]), None))
    except CheckpointError:  # a bad setting it names
        raise
    except Exception as e:  # a checkpoint of another config, or a hand-edited state.json
        raise CheckpointError(f"checkpoint does not match config.json: {first_line(e)}") from None
    for f in dataclasses.fields(Counters):
        v = getattr(restored, f.name)
        if not _fits(f, v):  # the loop counts on them, a summary reports them: one line
            raise CheckpointError(f"checkpoint counters hold a bad {f.name}: {v!r:.60}")
        setattr(counters, f.name, v)
    return rng


#: counters that may be below zero: returns, and the rate limiter's lead
_SIGNED = frozenset({"last_eval", "best_eval", "replay_lead"})


def _fits(f: dataclasses.Field[Any], v: Any) -> bool:
    """Whether ``v`` is a value of :class:`Counters` field ``f``'s kind: a count (whole, in
    [0, MAX_COUNT]), a finite number (non-negative but for :data:`_SIGNED`), a bool, or the
    totals' table of finite non-negative numbers; None where the field may be."""
    kind = str(f.type)  # the annotation's text (postponed annotations)
    if v is None:
        return kind.endswith("| None")
    if kind.startswith("int"):
        return _counted(v, int)
    if kind.startswith("float"):
        return _counted(v, int | float, -MAX_COUNT if f.name in _SIGNED else 0)
    if kind.startswith("bool"):
        return isinstance(v, bool)
    return isinstance(v, dict) and all(
        isinstance(k, str) and _counted(x, int | float) for k, x in v.items()
    )


def _counted(v: Any, kind: Any, least: float = 0) -> bool:
    """Whether ``v`` is a JSON number of ``kind`` (not a bool) in [least, MAX_COUNT]: NaN,
    infinities and whole numbers past float's range fail the comparison."""
    return isinstance(v, kind) and not isinstance(v, bool) and least <= v <= MAX_COUNT


def load_replay(replay: Any, path: Path) -> None:
    """Restore a checkpoint's replay; one CheckpointError line if it is unreadable or does not
    fit this run's replay (shapes, dtypes, non-finite values)."""
    try:
        replay.load(path)
        lacks = missing_shards(path)
    except Exception as e:
        raise CheckpointError(f"cannot read {path}: {first_line(e)}") from None
    if lacks:  # Ray replay shards that died while this checkpoint was saved
        shards = ", ".join(f"{j} ({n:,} items)" for j, n in lacks)
        print(
            f"actorq: warning: {path} lacks the items of replay shard(s) {shards}, which died "
            "while it was saved; the run resumes with the rest",
            file=sys.stderr,
        )


def adopt_best(counters: Counters, run: RunDir) -> None:
    """Take ``RUN/best``'s evaluation as the best so far when it beats the checkpoint's: a run
    killed after keeping a new best but before its next checkpoint resumes with the older
    record, and its next, worse, best would replace the better policy kept there. Read as a
    checkpoint is (its manifest checked): a kill between a best's two renames leaves it in
    ``best.old`` alone, which the next best, thought better, would delete."""
    try:
        saved = ckpt.read_state(run.best)[1]["counters"]
        best, steps = saved["best_eval"], saved["best_eval_steps"]
    except (ActorQError, KeyError, TypeError):  # none, unreadable
        return
    # abs() <= the largest float: False for NaN, ±inf and a whole number past float's range
    # (JSON's ints have no bound; math.isfinite would raise OverflowError on one)
    if not (isinstance(best, int | float) and abs(best) <= sys.float_info.max):
        return
    if isinstance(best, bool) or not isinstance(steps, int) or isinstance(steps, bool):
        return
    if counters.best_eval is None or best > counters.best_eval:
        counters.best_eval, counters.best_eval_steps = float(best), steps


def trim_metrics(run: RunDir, env_steps: int, saved_at: float | None) -> None:
    """Rewrite ``metrics.csv`` without the rows the checkpoint had not seen (logged by a run
    killed after it: steps past ``env_steps``, or logged after ``saved_at``), so a resumed run's
    curve and first evaluation at the target are its own, not a dead segment's. Written whole
    (:func:`~actorq.logging.rewrite_metrics`); a last line cut short (a run killed while
    logging: the next segment's first row was glued to it) is dropped
    (:func:`~actorq.logging.whole_lines`); other rows that do not parse are kept as they are."""
    path = run.metrics
    try:
        with open(path, "rb") as f:
            data = f.read()
        whole = whole_lines(data)
        rows = list(csv.reader(io.StringIO(whole.decode("utf-8"), newline="")))
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise CheckpointError(f"cannot read {path} to resume: {first_line(e)}") from None

    def seen(row: list[str]) -> bool:
        try:
            step, wall = int(row[0]), float(row[1])
        except (ValueError, IndexError):
            return True
        # rows at the checkpoint's step were logged before or after its save (wall times, to
        # the millisecond, tell which); earlier steps' rows are kept whatever their clock said
        # (a segment on a node whose clock ran ahead)
        if step != env_steps:
            return step < env_steps
        return saved_at is None or wall <= saved_at + 1e-3

    kept = [r for r in rows[1:] if seen(r)]
    if len(kept) < len(rows) - 1 or len(whole) < len(data):
        rewrite_metrics(path, kept, CheckpointError)
