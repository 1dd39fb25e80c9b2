"""The learner's loop: one short function drives every agent and every backend.

``train(config)`` reads like a CleanRL script over named pieces, each testable on its own:
resolve the config (on a copy) and lock the run directory (:mod:`~actorq.run.resume`), restore
a checkpoint, publish snapshots and checkpoint (:mod:`~actorq.run.publisher`), run the backend
(:mod:`actorq.distributed.backend`), evaluate and log each interval
(:mod:`~actorq.run.monitor`), shut down and report (:mod:`~actorq.run.report`). The loop
itself: take the backend's next batch, update, publish every ``publish_every`` updates,
evaluate the actors' snapshot greedily every ``eval_every`` environment steps, checkpoint, log.
Ctrl-C or SIGTERM stops the actors, writes a checkpoint and returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actorq import checkpoint as ckpt
from actorq.agents import builder_for
from actorq.agents.builder import Builder
from actorq.agents.policy_io import ModelPolicyIO, PolicyIO
from actorq.config import ExperimentConfig
from actorq.core.interfaces import Learner, MLPLearner
from actorq.distributed.backend import Backend, BackendContext, make_backend
from actorq.energy import (
    UNAVAILABLE,
    EnergyReading,
    EnergyTracker,
    RunEnergy,
    codecarbon_installed,
)
from actorq.errors import CheckpointError, ConfigError, DivergedError
from actorq.logging import MetricLogger
from actorq.run.memory import check_run_memory
from actorq.run.monitor import Evaluator, IntervalLogger, Progress, StopOnSignal, log_interval
from actorq.run.precision import select_model_run_precision, select_run_precision
from actorq.run.publisher import Checkpointer, Publisher, check_losses
from actorq.run.report import (
    TrainResult,
    final_report,
    final_states,
    registered_threshold,
    run_report,
    write_summary,
)
from actorq.run.resume import (
    Counters,
    Loaded,
    adopt_best,
    load_replay,
    open_run_dir,
    record_move,
    refuse_held_output,
    resolve_run,
    restore,
    trim_metrics,
    write_config,
)
from actorq.rundir import RunDir
from actorq.types import EnvSpec


def train(
    cfg: ExperimentConfig,
    callback: Callable[[dict[str, Any]], bool | None] | None = None,
    given: Collection[str] | None = None,
) -> TrainResult:
    """Train an agent (the config's type says which: DQN, D4PG, PPO) with quantized actors;
    returns a :class:`TrainResult`. ``cfg`` itself is not changed.

    ``callback(info)`` is called after each log interval with the latest metrics; return
    ``False`` to stop training early. ``given``: for a resume, the settings the caller set
    even where they equal the defaults (the command line's flags: ``--backend local`` moves a
    Ray run home); by default those that differ from them (:func:`~actorq.run.resume.resolve_run`).
    """
    if not isinstance(cfg, ExperimentConfig):  # e.g. a dict: one line, not an AttributeError
        raise ConfigError(
            f"train() takes an agent's config (e.g. actorq.DQNConfig(env=...)), not a "
            f"{type(cfg).__name__}"
        )
    cfg = resolve_run(cfg, given)
    builder = builder_for(cfg)
    spec = builder.env_spec(cfg)
    builder.check_spec(spec)
    if not cfg.resume:
        builder.check_new_run(cfg, spec)
    check_run_memory(cfg, builder, spec)  # all input checked: from here on the run dir is written
    run = RunDir(Path(cfg.run_dir or ""))
    if not cfg.resume:  # said before the lock file is made, too
        refuse_held_output(run)
    run.prepare()  # a run directory the run can write, or one line
    with run.lock():  # the one writer: a second train() into this directory is refused here
        loaded = run.load_checkpoint() if cfg.resume else None
        return _train(cfg, builder, spec, loaded, callback)


@dataclasses.dataclass
class _Run:
    """The live pieces of one training run: what :func:`_start` opens, :func:`_loop` drives and
    :func:`_finish` (or :func:`_close_failed_run`) closes."""

    run_dir: Path
    learner: Learner
    io: PolicyIO
    c: Counters
    target: float | None
    fp32_bytes: int
    publisher: Publisher
    energy: RunEnergy | None
    stop: StopOnSignal
    backend: Backend
    checkpointer: Checkpointer
    logger: MetricLogger
    progress: Progress
    evaluator: Evaluator
    interval: IntervalLogger
    #: why a resumed run has nothing left to train ("budget", "target"), None if it trains
    done_by: str | None = None
    #: the snapshot the resumed checkpoint names as its weights' (what `actorq eval` reads)
    kept_snapshot: bytes | None = None
    start_wall: float = 0.0

    @property
    def past_budget(self) -> bool:
        """Nothing left to train: not one env step or update, only the summary."""
        return self.done_by is not None


def _train(
    cfg: ExperimentConfig,
    builder: Builder,
    spec: EnvSpec,
    loaded: Loaded | None,
    callback: Callable[[dict[str, Any]], bool | None] | None,
) -> TrainResult:
    """:func:`train` with its input checked and the run directory locked."""
    warn = cfg.cores_warning()  # once the input is known good, from the settings in use
    if warn:
        print(f"actorq: warning: {warn}", file=sys.stderr)
    r = _start(cfg, builder, spec, loaded)
    interrupted = False
    try:
        stop_reason = _loop(cfg, r, callback)
        if not r.past_budget:  # the last interval's metrics, before the final checkpoint
            r.interval.add_metrics(r.learner.read_metrics(), r.c.updates)
        r.publisher.settle()  # its error, if any, is the run's
    except KeyboardInterrupt:
        interrupted, stop_reason = True, "interrupted"
    except BaseException as e:
        # A failed run (a diverged learner, a bug) writes nothing more: the checkpoint on disk
        # is the last good one, and a crashed resume must not replace it.
        _close_failed_run(r)
        if isinstance(e, DivergedError):
            raise _where_it_diverged(e, r) from None
        raise
    return _finish(cfg, r, interrupted, stop_reason)


def _start(cfg: ExperimentConfig, builder: Builder, spec: EnvSpec, loaded: Loaded | None) -> _Run:
    """Open the run directory, make (or restore) the learner, start the backend with the first
    snapshot published (none where nothing is left to train), and the loggers; the run's clock
    starts last."""
    target = cfg.target_return if cfg.target_return is not None else registered_threshold(cfg.env)
    run_dir = open_run_dir(cfg)

    learner, io, c, rng, warm = _prepare_learner(cfg, builder, spec, loaded, run_dir)

    setup = builder.actor_setup(cfg, spec)
    if loaded is not None:
        setup.seed = cfg.seed + 104_729 * (c.env_steps // 1000 + 1)  # fresh env seeds
    asynchronous = bool(getattr(cfg, "publish_async", False)) and cfg.actors >= 1
    publisher = Publisher(cfg, io, asynchronous)
    fp32_bytes = len(publisher.snapshot(0, "fp32"))
    first = publisher.snapshot(c.version)
    # From here on Ctrl-C only sets a flag, so a run interrupted while its actors start still
    # stops through the loop's clean path (checkpoint, summary).
    stop = StopOnSignal()
    ctx = BackendContext(
        cfg=cfg,
        setup=setup,
        specs=builder.data_specs(cfg, spec),
        table_config=builder.table_config(cfg, spec),
        snapshot_capacity=int(len(first) * 1.1) + 65536,
        run_dir=run_dir,
        rng=rng,
        env_steps_offset=c.env_steps,
    )
    backend: Backend | None = None
    moved: str | None = None
    try:
        backend = start_backend(ctx, loaded, stop)
        if loaded is not None:  # once the replay is read too: a refused resume writes nothing
            first, moved = _resume_where_it_stopped(cfg, publisher, backend, c, loaded, first)
    except BaseException:
        # a refused resume (its replay, its metrics) leaves nothing running in the caller's
        # process: the backend, the publisher's thread
        if backend is not None:
            backend.close()
        stop.restore()
        publisher.close()
        raise
    replay = backend.replay
    publisher.replay, publisher.backend = replay, backend
    checkpointer = Checkpointer(
        run_dir, learner, c, rng, replay, bool(getattr(cfg, "save_replay", False))
    )
    checkpointer.publisher = publisher
    logger = MetricLogger(run_dir, purge_step=None if loaded is None else c.env_steps + 1)
    progress = Progress(cfg.progress, cfg.total_steps, c.env_steps)
    progress.print(f"run dir: {run_dir}")
    if cfg.learner_threads == 0:  # auto: say what it resolved to on this machine
        progress.print(f"learner: {torch.get_num_threads()} torch threads (--learner-threads 0)")
    done_by = None if loaded is None else _resumed_plan(cfg, c, run_dir, moved, progress.print)
    evaluator = Evaluator(
        cfg, io, target, logger, progress.print, c.env_steps, c.eval_time_s, c.next_eval
    )
    c.next_eval = evaluator.next  # checkpointed: a resume redoes an evaluation it had not seen
    interval = IntervalLogger(logger, progress, c)
    if warm:
        logger.log(c.env_steps, warm)
    r = _Run(
        run_dir=run_dir,
        learner=learner,
        io=io,
        c=c,
        target=target,
        fp32_bytes=fp32_bytes,
        publisher=publisher,
        energy=None,
        stop=stop,
        backend=backend,
        checkpointer=checkpointer,
        logger=logger,
        progress=progress,
        evaluator=evaluator,
        interval=interval,
        done_by=done_by,
        kept_snapshot=_named_snapshot(loaded),
    )
    try:
        # Energy is tracked over the window the run's clock measures (time to target, wall
        # time), not the actors' start before it: its ratios and the time's cover the same
        # work. Before the first publish: actors idle until it, and codecarbon's start takes
        # ~1.5 s. A run past its budget trains nothing: its checkpoint's total stands.
        r.energy = None if r.past_budget else _start_energy(cfg, c, loaded is not None)
        if r.past_budget:  # no snapshot, no env step: kept for the summary and checkpoint only
            publisher.latest, publisher.latest_updates = first, c.updates
        else:
            publisher.publish(c, first)
    except BaseException:
        _close_failed_run(r)
        raise
    r.start_wall = time.perf_counter() - c.wall_time_s  # the run's clock, after the publish
    return r


def _resumed_plan(
    cfg: ExperimentConfig, c: Counters, run_dir: Path, moved: str | None, say: Callable[[str], None]
) -> str | None:
    """A resume's plan, said, then why it has nothing to train if so (:func:`_done_before`,
    whose answer it returns)."""
    why: list[str] = []
    done_by = _done_before(cfg, c, run_dir, why.append)
    say(resume_plan(cfg, c, RunDir(run_dir), moved, trains=done_by is None))
    for line in why:
        say(line)
    return done_by


def _done_before(
    cfg: ExperimentConfig, c: Counters, run_dir: Path, say: Callable[[str], None]
) -> str | None:
    """Why a resumed run has nothing left to train, said: ``"budget"`` (already past
    ``--total-steps``) or ``"target"``; None if it trains on."""
    # With --stop-at-target a run that reached its target is done, resumed or not (one signalled
    # in its final evaluation is resumed for its summary): the evaluator counts a target once,
    # so it would otherwise train on to the budget.
    if cfg.stop_at_target and c.steps_to_target is not None:
        say(
            f"{run_dir} reached its target at {c.steps_to_target:,} env steps (--stop-at-target):"
            " nothing to train, summarising its checkpoint (--no-stop-at-target to go on)"
        )
        return "target"
    if c.env_steps >= cfg.total_steps:
        say(
            f"{run_dir} is already at {c.env_steps:,} env steps of --total-steps "
            f"{cfg.total_steps:,}: nothing to train, summarising its checkpoint (raise "
            "--total-steps to go on)"
        )
        return "budget"
    return None


def _loop(
    cfg: ExperimentConfig, r: _Run, callback: Callable[[dict[str, Any]], bool | None] | None
) -> str:
    """Train until the budget, the target or the callback stops the run; returns which
    (``"budget"``, ``"target"``, ``"callback"``). A stop signal raises KeyboardInterrupt."""
    c, backend, interval = r.c, r.backend, r.interval
    if r.done_by is not None:  # not one env step or update, only the summary
        return r.done_by
    while True:
        if r.stop.requested:
            raise KeyboardInterrupt
        t_poll = time.perf_counter()
        batch = backend.next_batch()
        interval.add_episodes(backend.drain_episodes())
        turn = _learn(cfg, r, batch)
        c.env_steps = backend.env_steps()  # cheap: the full stats are read per log interval
        now = time.perf_counter()
        if turn == 0:  # the poll found no batch: the learner waited for data
            interval.wait_s += now - t_poll
        if r.evaluator.due(c.env_steps):
            reached = _evaluate(r, now)
            if reached and cfg.stop_at_target:
                return "target"
        if c.env_steps >= cfg.total_steps:
            break
        if interval.due(now, cfg.log_every):
            interval.add_metrics(r.learner.read_metrics(), c.updates)
            info = log_interval(now, c, backend, interval, r.publisher, r.energy, r.progress)
            if callback is not None and callback(info) is False:
                return "callback"
    return "budget"


def _learn(cfg: ExperimentConfig, r: _Run, batch: Any) -> int:
    """Update on ``batch``, then on each batch the replay rule has ready, up to
    ``updates_per_turn``; publish and checkpoint on their schedules. Returns the updates made."""
    c = r.c
    turn = 0
    while batch is not None:
        t_update = time.perf_counter()
        # metrics stay with the learner (on its device) until read: no sync per update
        r.learner.learn(batch)
        c.updates += 1
        turn += 1
        r.interval.update_s += time.perf_counter() - t_update
        if c.updates % cfg.publish_every == 0:
            r.publisher.publish(c)  # refuses non-finite weights
        if c.updates % cfg.checkpoint_every == 0:
            # the snapshot of these weights reaches the actors first: the checkpoint keeps the
            # snapshot they run (one in flight lands; one skipped while it flew is made)
            r.publisher.publish_for_checkpoint(c)
            r.interval.add_metrics(r.learner.read_metrics(), c.updates)
            c.env_steps = r.backend.env_steps()
            c.wall_time_s = time.perf_counter() - r.start_wall  # time to target on resume
            _keep_energy(c, r.energy.snapshot() if r.energy is not None else None)
            r.checkpointer.save()
        batch = r.backend.ready_batch() if turn < cfg.updates_per_turn else None
    return turn


def _evaluate(r: _Run, now: float) -> bool:
    """Evaluate the actors' latest snapshot (greedy, or sampled where the env family says:
    :func:`~actorq.core.evaluation.evaluate`) and keep it if it is the best so far;
    returns whether the target is newly reached (and confirmed)."""
    r.publisher.publish_for_evaluation(r.c)
    reached = r.evaluator.run(r.publisher.latest, r.c, now - r.start_wall)
    if keep_if_best(r.c, r.checkpointer):
        r.progress.print(f"  the best so far: kept in {RunDir(r.run_dir).best}")
    return reached


def _finish(cfg: ExperimentConfig, r: _Run, interrupted: bool, stop_reason: str) -> TrainResult:
    """Stop the actors, let the learner finish, write the final checkpoint and the summary.

    A stop signal here (the scheduler's SIGTERM as the run ends) still lets the checkpoint and
    the summary be written: the signal handler stays until they are, and a signal only skips
    the final evaluation (the summary says interrupted; a resumed run's end evaluates)."""
    try:
        return _finish_run(cfg, r, interrupted, stop_reason)
    finally:
        r.stop.restore()


def _finish_run(cfg: ExperimentConfig, r: _Run, interrupted: bool, stop_reason: str) -> TrainResult:
    c = r.c
    r.publisher.close()
    try:
        # first: codecarbon's threads stop even where the backend's stats fail
        reading = r.energy.stop() if r.energy is not None else None  # the run, not the report
        st = r.backend.stats()
        if r.past_budget:  # nothing trained: the checkpoint's total is the run's
            reading = _energy_before(c, resumed=True)  # not measured: not ok, no total
        # c.env_steps stays the loop's last reading: actor processes step on until closed, and
        # their steps after the learner stopped were never learned from
        r.interval.keep_totals(c, st, r.publisher)  # every segment's
        r.interval.add_episodes(r.backend.drain_episodes())
        c.episodes += len(r.interval.ep_returns)  # the last, partial interval's (not logged)
        if r.interval.window:  # its learner metrics are: the last updates' losses
            r.logger.log(c.env_steps, r.interval.means())
        if not interrupted and not r.past_budget:  # past it, the run's own end already ran
            _finish_learner(r.learner, r.logger, c)
        if not r.past_budget:  # past it, the checkpoint's clock is the run's
            c.wall_time_s = time.perf_counter() - r.start_wall
        _keep_energy(c, reading)
        save = not r.past_budget  # past it, the checkpoint stays as it is, but for its snapshot
        if not interrupted:
            # Whatever reads replay comes before close(): a Ray backend's replay is its shards.
            states = final_states(r.backend.replay, cfg.seed)
            final, save = _final_snapshot(r)
        if save:
            r.checkpointer.save(None if interrupted else final)
    finally:
        r.backend.close()
        r.progress.stop(c.env_steps)

    result = run_report(cfg, c, r.publisher, r.target, r.fp32_bytes)
    # No held-out evaluation after a stop signal: on Atari it takes minutes (a scheduler's
    # SIGKILL comes first, 30-60 s on), and the run is not finished: `actorq eval` or the
    # resumed run's end evaluates it.
    evaluated = False
    if not interrupted and not r.stop.requested:
        try:
            with r.stop.at_once():
                result = final_report(result, cfg, r.io, final, states, c.version + 1)
            evaluated = True
        except KeyboardInterrupt:
            pass
    if not evaluated:  # a signal after the loop: the checkpoint is saved, the rest is a resume's
        interrupted, stop_reason = True, "interrupted"
    result = dataclasses.replace(
        result,
        interrupted=interrupted,
        eval_time_s=r.evaluator.seconds,
        summary_rows=[*result.summary_rows, *_best_kept(c, RunDir(r.run_dir))],
        **(reading.as_summary() if reading is not None else {}),
    )
    write_summary(result, stop_reason, r.logger, r.run_dir, c.env_steps)
    return result


def _final_snapshot(r: _Run) -> tuple[bytes, bool]:
    """The snapshot the summary evaluates, and whether the checkpoint is to be saved with it.
    A run that trained: its weights' next version, saved. Past its budget nothing trained, so
    the summary evaluates what `actorq eval` reads: the checkpoint's own snapshot (nothing
    saved); else, where calibration makes it, the one the resume calibrated on the restored
    replay (an interrupted run's checkpoint keeps none), saved; else one made from the weights
    alone, as `eval` makes it (nothing saved)."""
    if not r.past_budget:
        return r.publisher.snapshot(r.c.version + 1), True
    if r.kept_snapshot is not None:
        return r.kept_snapshot, False
    if r.publisher.calibrates():
        return r.publisher.latest, True
    return r.publisher.snapshot(r.c.version + 1), False


def _named_snapshot(loaded: Loaded | None) -> bytes | None:
    """The snapshot a loaded checkpoint names as its weights' (its state's record, as
    :func:`~actorq.run.directory.saved_snapshot` reads it for `actorq eval`), or None."""
    if loaded is None or not isinstance(loaded.state.get("snapshot"), dict):
        return None
    return loaded.snapshot


def _best_kept(c: Counters, run: RunDir) -> list[list[str]]:
    """The summary's row for the best periodic evaluation's policy, kept in ``best/``: the
    summary's returns are the final policy's, and ``eval``, ``export`` and ``actorq.load`` take
    the latest unless told ``--which best`` (users of SB3's EvalCallback look for a best model)."""
    if c.best_eval is None or c.best_eval_steps is None or not run.best.is_dir():
        return []
    where = f"{run.best} (--which best)"
    return [["best policy kept", f"eval {c.best_eval:.4g} at {c.best_eval_steps:,} steps: {where}"]]


def _start_energy(cfg: ExperimentConfig, c: Counters, resumed: bool) -> RunEnergy | None:
    """The run's energy tracker, started (~1.5 s: codecarbon detects the hardware), or None:
    without the [bench] extra a run is not measured, and its summary says how to measure it.
    The whole run's: a resume adds its earlier segments' total, kept in its checkpoint."""
    if not (cfg.energy and codecarbon_installed()):
        _keep_energy(c, None)  # a segment not measured: no whole-run total from here on
        return None
    energy = RunEnergy(EnergyTracker(cfg.energy_country), _energy_before(c, resumed))
    if resumed and not energy.before.ok:
        print(
            "actorq: warning: energy: the checkpoint holds no total of the run's earlier "
            "segments (not measured, or saved by an older actorq): the summary will have none",
            file=sys.stderr,
        )
    energy.start()
    return energy


def _energy_before(c: Counters, resumed: bool) -> EnergyReading:
    """The run's energy before this segment: none for a new run; a resumed run's total from its
    checkpoint (not ok where a segment was not measured or the checkpoint predates the total:
    the summary then has no energy, rather than one segment's for the whole run's)."""
    if not resumed:
        return EnergyReading(kwh=0.0, kg_co2=0.0, estimated=False, ok=True)
    if c.energy_kwh is None or c.energy_kg_co2 is None:
        return UNAVAILABLE
    return EnergyReading(c.energy_kwh, c.energy_kg_co2, bool(c.energy_estimated), ok=True)


def _keep_energy(c: Counters, reading: EnergyReading | None) -> None:
    """The counters carry the run's energy so far into its checkpoint (None: not measured)."""
    if reading is None or not reading.ok:
        c.energy_kwh = c.energy_kg_co2 = c.energy_estimated = None
    else:
        c.energy_kwh, c.energy_kg_co2 = reading.kwh, reading.kg_co2
        c.energy_estimated = reading.estimated


def _resume_where_it_stopped(
    cfg: ExperimentConfig,
    publisher: Publisher,
    backend: Backend,
    c: Counters,
    loaded: Loaded,
    first: bytes,
) -> tuple[bytes, str | None]:
    """Once a resumed run's replay is restored: its rate limiter where the checkpoint left it,
    the snapshot its actors start from (the checkpoint's own, or one calibrated on the restored
    replay, not ``first``, made before it), metrics.csv without what a killed segment logged
    past the checkpoint, and config.json with where the resume moved the run, if it did.
    Returns the first snapshot and the move (:func:`~actorq.run.resume.record_move`)."""
    run = RunDir(Path(cfg.run_dir or ""))
    resume_at = getattr(backend.replay, "resume_at", None)
    if c.replay_lead is not None and loaded.replay is not None and resume_at is not None:
        resume_at(c.replay_lead)
    if publisher.calibrates():
        publisher.replay = backend.replay
        first = publisher.resumed(c.version, run.checkpoint, loaded, first)
    saved_at = loaded.state.get("saved_at")
    trim_metrics(run, c.env_steps, saved_at if isinstance(saved_at, float) else None)
    return first, record_move(cfg, run)


def _prepare_learner(
    cfg: ExperimentConfig, builder: Builder, spec: EnvSpec, loaded: Loaded | None, run_dir: Path
) -> tuple[Learner, PolicyIO, Counters, np.random.Generator, dict[str, float]]:
    """The learner, its policy IO, the counters and the run's RNG: restored from ``loaded`` on a
    resume, else fresh, with the learner's warm start (its metrics returned, to log at step 0).
    ``--precision auto`` is settled here, before the first snapshot, and saved to the config."""
    torch.set_num_threads(cfg.learner_torch_threads())
    random.seed(cfg.seed)
    learner = builder.make_learner(cfg, spec)
    io = builder.policy_io(cfg, spec, learner)
    if cfg.precision == "auto":
        # configs refuse auto for graph policies (GO, PPO's chip network) before this point
        if isinstance(io, ModelPolicyIO):  # a network exported whole (pixels): its snapshots
            cfg.precision = select_model_run_precision(cfg, spec, io, run_dir)
        elif isinstance(learner, MLPLearner):
            pspec = builder.policy_spec(cfg, spec)
            cfg.precision = select_run_precision(cfg, spec, learner, pspec, run_dir)
        else:
            raise TypeError(f"--precision auto needs an MLP policy, not {type(learner).__name__}")
        write_config(cfg, run_dir)
    c = Counters()
    # the seed's first child, not the seed: the seed is the in-process actor's
    # (actor_seed(seed, 0)), whose exploration would draw the very numbers replay sampling does
    rng = np.random.default_rng(np.random.SeedSequence(cfg.seed).spawn(1)[0])
    warm: dict[str, float] = {}
    if loaded is not None:
        rng = restore(loaded, learner, c)
        adopt_best(c, RunDir(run_dir))
    else:
        warm = learner.warm_start()  # a fresh run: before the first snapshot is taken
    return learner, io, c, rng, warm


def _close_failed_run(r: _Run) -> None:
    """Stop what a failed run started, writing nothing (no checkpoint, no summary)."""
    r.publisher.close()
    r.stop.restore()
    with contextlib.suppress(Exception):
        if r.energy is not None:
            r.energy.stop()
    r.backend.close()
    r.progress.stop()


def _where_it_diverged(e: DivergedError, r: _Run) -> DivergedError:
    """``e`` with where the run stopped and what is left of it on disk."""
    if (r.checkpointer.dir / ckpt.MANIFEST).is_file():
        kept = f", the last finite checkpoint is kept in {r.checkpointer.dir}"
    else:  # nothing to point at: say so, and what usually fixes it
        kept = (
            " before its first checkpoint, so none was written (lower the learning "
            "rate or --max-grad-norm, in a new --run-dir)"
        )
    return DivergedError(f"{e}; stopped at {r.c.env_steps} env steps{kept}")


def _finish_learner(learner: Learner, logger: MetricLogger, c: Counters) -> None:
    """The learner's end-of-run work (GO's final distillation), logged at the last step, before
    the final snapshot and checkpoint so that they hold it."""
    done = learner.finish()
    if done:
        check_losses(done, c.updates)
        logger.log(c.env_steps, done)


def start_backend(ctx: BackendContext, loaded: Loaded | None, stop: StopOnSignal) -> Backend:
    """Start the backend and, resuming, restore the checkpoint's replay into it; on failure
    nothing is left running (and Ctrl-C gets its default handler back)."""
    try:
        backend = make_backend(ctx)
    except BaseException:
        stop.restore()
        raise
    replay = backend.replay
    if loaded is not None and loaded.replay is not None and replay.persistent:
        try:
            load_replay(replay, loaded.replay)
        except CheckpointError:
            backend.close()
            stop.restore()
            raise
    return backend


def keep_if_best(c: Counters, checkpointer: Checkpointer) -> bool:
    """After a periodic evaluation: if it beats every earlier one, keep this policy in
    ``RUN/best`` (SB3's ``EvalCallback`` keeps ``best_model`` the same way)."""
    if c.last_eval is None or (c.best_eval is not None and c.last_eval <= c.best_eval):
        return False
    c.best_eval, c.best_eval_steps = c.last_eval, c.env_steps
    checkpointer.save_best()
    return True


def resume_plan(
    cfg: ExperimentConfig, c: Counters, run: RunDir, moved: str | None = None, trains: bool = True
) -> str:
    """What a resume will do, said before it does it (``moved``: where it moved the run,
    :func:`~actorq.run.resume.record_move`; ``trains``: whether it trains on, or only
    summarises its checkpoint)."""
    plan = f"resuming at {c.env_steps:,} env steps, to --total-steps {cfg.total_steps:,}"
    if moved:
        plan += f", moved to {moved} (config.json says so now)"
    if c.steps_to_target is not None:
        plan += f"; it reached its target at {c.steps_to_target:,} steps"
    if trains and c.best_eval is not None and run.best.exists():
        plan += (
            f"; training on replaces the latest checkpoint, its best policy (eval "
            f"{c.best_eval:.4g} at {c.best_eval_steps:,} steps) stays in {run.best}"
        )
    return plan
