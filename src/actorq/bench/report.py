"""``actorq report RESULTS``: a markdown report with plots from a benchmark results directory.

What it reports is what QuaRL (Lam et al., TMLR 2022) reports for ActorQ, per task and precision:
the speedup in time to reach a target return over fp32 actors, the return reached, and the
energy and CO2 of training with their fp32/quantized ratios; plus where the time goes (learner-
or actor-bound), actor throughput against policy width, and snapshot sizes.

Aggregates over seeds follow rliable (Agarwal et al., "Deep Reinforcement Learning at the Edge of
the Statistical Precipice", NeurIPS 2021): the interquartile mean (IQM) with 95% stratified
bootstrap confidence intervals, for final returns and at every point of the learning curves.

Definitions (the report repeats them):

* time to target: the run's ``time_to_target_s``: wall-clock seconds from the start of the
  learner's loop to the first periodic evaluation whose mean reached the target and was
  confirmed on fresh seeds, evaluations included (the side-by-side section's excludes them).
  Per task × precision it is the mean over the seeds that reached it; seeds that never did are
  counted and shown, never dropped silently.
* speedup: mean fp32 time to target / mean time to target at the precision, over the seeds
  finished on both sides: a seed that never reached the target counts as never (no finite mean).
* energy: ``energy_kwh`` / ``energy_kg_co2`` of each run's ``summary.json`` (whole machine,
  over the run's clock); ratio: fp32's energy / the precision's, summed over the seeds both
  sides finished the same way (both at the target or both at the budget), fewer said.
* curves: a run that stopped (e.g. at its target) keeps its last evaluation afterwards; time
  is the run's own clock (``perf/run_s``, the clock of its time to target: a resumed run's
  stops are not on it; older runs: :meth:`Run.eval_curve`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actorq.bench.compare import framework_section, policy_label, time_to_target, train_time
from actorq.bench.frameworks import NATIVE
from actorq.bench.results import (
    HalfWrittenError,
    ResultsError,
    read_cell_json,
    read_checkpoint_steps,
    read_failed_why,
    read_metrics,
    read_run_config,
    read_sessions,
    read_summary,
    strict_json,
    width_keys,
    write_atomic,
)
from actorq.bench.spec import load_spec, one_line, width_slug
from actorq.energy import (
    METRIC_KG_CO2,
    METRIC_KWH,
    SUMMARY_ESTIMATED,
    SUMMARY_KG_CO2,
    SUMMARY_KWH,
)
from actorq.errors import ActorQError, shown
from actorq.inputs import is_dir, read_input
from actorq.logging import CONFIRM_METRIC, EVAL_METRIC, EVAL_S_METRIC, RUN_CLOCK_METRIC
from actorq.output import check_output
from actorq.quant.formats import PRECISIONS
from actorq.rundir import RunDir, is_trash

EVAL = EVAL_METRIC
#: a gap in a resumed run's metrics.csv longer than its logging interval and evaluations by
#: this much is a stop between segments (runs logged before ``perf/run_s``; see eval_curve)
STOP_GAP_S = 60.0
PRECISION_ORDER = PRECISIONS
_ENERGY_METRIC = {SUMMARY_KWH: METRIC_KWH, SUMMARY_KG_CO2: METRIC_KG_CO2}
#: --reps range: below 100 resamples the 2.5% and 97.5% percentiles of the bootstrap rest on two
#: or three draws; 100000 (twice rliable's default) already takes ~15 s per table row here
MIN_REPS, MAX_REPS = 100, 100_000


def check_reps(reps: int) -> None:
    if isinstance(reps, bool) or not isinstance(reps, int) or not MIN_REPS <= reps <= MAX_REPS:
        raise ActorQError(f"--reps must be an integer in [{MIN_REPS}, {MAX_REPS}], got {reps!r}")


def _reported_metric(metric: str) -> bool:
    """The metrics.csv rows the report reads: evaluations and their confirmations, perf/* (whose
    first row is a run's wall-clock origin) and energy."""
    return (
        metric in (EVAL, CONFIRM_METRIC)
        or metric.startswith("perf/")
        or metric in _ENERGY_METRIC.values()
    )


@dataclasses.dataclass
class Run:
    """One cell of the results directory, finished or not."""

    name: str
    task: str
    agent: str
    env: str
    precision: str
    seed: int
    width: tuple[int, ...]
    summary: dict[str, Any] | None  # None: failed or unfinished
    why: str | None  # why it did not finish (failed.json), if known
    log_every: float
    rows: list[tuple[int, float, str, float]]  # metrics.csv: (step, wall_time, metric, value)
    framework: str = NATIVE  # another framework's cell: ``precision`` is its name
    session: int | None = None  # which `actorq bench` ran it (machine.json's sessions)
    segments: int = 1  # > 1: resumed from its checkpoint (spec ``resume = true``)
    target: float | None = None  # the config's target_return (an unfinished run has no summary)
    #: env steps its checkpoint holds (an unfinished Atari cell's; None: none read or none)
    checkpoint_steps: int | None = None

    @property
    def finished(self) -> bool:
        return self.summary is not None

    def series(self, metric: str) -> list[float]:
        return [v for _, _, m, v in self.rows if m == metric]

    def mean_of(self, metric: str) -> float | None:
        xs = self.series(metric)
        return float(np.mean(xs)) if xs else None

    def eval_curve(self) -> list[tuple[int, float | None, float]]:
        """(env steps, seconds on the run's clock, eval return) per periodic evaluation.

        The run's clock is what its time to target is read on: ``perf/run_s``, logged with each
        evaluation (stops between a resumed run's segments are not on it). An actorq run's
        evaluations logged before that metric existed are placed, approximately, by the
        machine's clock from the run's origin (its first perf row less one logging interval),
        less the stops of a cell its cell.json says was resumed (:meth:`_stops`: a long stall
        of the loop counts as one), at the end of each evaluation rather than its start;
        another framework's logged only evaluations, which cannot tell a stop from training:
        their time is None (no point on a wall-clock axis)."""
        if not self.rows:
            return []
        clock = {s: v for s, _, m, v in self.rows if m == RUN_CLOCK_METRIC}
        evals = [(s, w, v) for s, w, m, v in self.rows if m == EVAL]
        if all(s in clock for s, _, _ in evals) or self.framework != NATIVE:
            return [(s, None if s not in clock else max(clock[s], 0.0), v) for s, _, v in evals]
        perf = [w for _, w, m, _ in self.rows if m.startswith("perf/")]
        t0 = (min(perf) if perf else min(w for _, w, _, _ in self.rows)) - self.log_every
        stops = self._stops() if self.segments > 1 else []
        machine = {s: max(w - t0 - sum(d for e, d in stops if e <= w), 0.0) for s, w, _ in evals}
        return [(s, clock.get(s, machine[s]), v) for s, _, v in evals]

    def _stops(self) -> list[tuple[float, float]]:
        """``(machine time the run went on, seconds it was stopped)`` per stop between segments
        (:meth:`eval_curve`): its rows in time order, each gap less a logging interval and the
        evaluation seconds (``perf/eval_s``, cumulative) logged at its end."""
        # an evaluation holds the loop's logging: its row ends a gap as long as it took, the
        # confirmation's (if any) ends at its cumulative perf/eval_s row, and that row's value
        # at the same step says how long both took
        eval_s_at = {s: v for s, _, m, v in self.rows if m == EVAL_S_METRIC}
        stops: list[tuple[float, float]] = []
        eval_s, prev = 0.0, None
        for s, w, m, v in sorted(self.rows, key=lambda r: r[1]):
            spent = 0.0
            if m in (EVAL, EVAL_S_METRIC):
                spent = max(eval_s_at.get(s, eval_s) - eval_s, 0.0)
            gap = 0.0 if prev is None else w - prev - self.log_every - spent
            if gap > STOP_GAP_S:
                stops.append((w, gap))
            if m == EVAL_S_METRIC:
                eval_s = v
            prev = w
        return stops

    def summary_value(self, key: str) -> Any:
        return None if self.summary is None else self.summary.get(key)

    def energy(self, key: str) -> float | None:
        """The run's energy (``energy_kwh``) or CO2 (``energy_kg_co2``): the summary's (null:
        not recorded for the whole run, e.g. a resumed segment not measured), else, for a
        summary without the key from a run never resumed, the last (cumulative) value of its
        metric in metrics.csv, else None (not recorded). A resumed run's rows may be one
        segment's: never the whole run's."""
        if self.summary is not None and key in self.summary:
            v = self.summary[key]
            return None if v is None else float(v)
        xs = self.series(_ENERGY_METRIC[key]) if self.segments == 1 else []
        return xs[-1] if xs else None


def load_runs(
    results: Path, skipped: list[str] | None = None, unread: list[str] | None = None
) -> list[Run]:
    """Every cell directory under ``results`` (one with cell.json or config.json), its files
    read through :mod:`actorq.bench.results`: a damaged file raises one ResultsError line that
    names it, except in a partial cell (below), which is skipped: why goes to ``skipped`` when
    given, else to stderr as a warning; and except an unfinished Atari cell's checkpoint (a
    damaged one is often why the cell failed), whose frames are then those it logged: why goes
    to ``unread``, or stderr."""
    try:
        # (not a cell a bench was clearing when it was stopped: it runs again)
        dirs = sorted(p for p in results.iterdir() if p.is_dir() and not is_trash(p.name))
    except OSError as e:
        raise ResultsError(f"cannot read {results}: {e.strerror or e}") from None
    runs = []
    for d in dirs:
        try:
            cell = read_cell_json(d / "cell.json")
            cfg = read_run_config(RunDir(d).config_file)
            if cell is None and cfg is None:  # not a cell directory
                continue
            why = read_failed_why(d)
            rows = _metrics(d, why)
        except HalfWrittenError as e:
            if read_summary(d) is not None:  # a finished run we cannot attribute: never drop it
                raise
            # A cell killed while its files were written is a partial run, which the next
            # `actorq bench` clears and runs again (docs/bench.md): nothing to report yet, and
            # no reason to hold up the report of the others, so skip it and say so.
            _warn(f"skipped partial cell {d.name}: {e}", skipped)
            continue
        summary = read_summary(d)
        cell = cell or {}
        cfg = cfg or cell.get("config") or {}  # the run's own, else what the matrix asked for
        agent = cfg.get("agent") or cell.get("agent", "dqn")
        env = cfg.get("env") or cell.get("env", "?")
        widths: list[Any] = [cfg[k] for k in width_keys(agent) if cfg.get(k)]
        width = cell.get("width") or (widths[0] if widths else [])
        framework = cell.get("framework", NATIVE)
        checkpoint_steps = None
        if summary is None and env.startswith("atari:"):
            checkpoint_steps = _checkpoint_steps(d, framework == NATIVE, unread)
        runs.append(
            Run(
                name=d.name,
                task=cell.get("task") or f"{agent}-{env.replace(':', '-').replace('/', '-')}",
                agent=agent,
                env=env,
                precision=framework
                if framework != NATIVE
                else cfg.get("precision") or cell.get("precision", "?"),
                seed=int(cfg.get("seed", cell.get("seed", 0))),
                width=tuple(int(w) for w in width),
                summary=summary,
                why=why,
                log_every=float(cfg.get("log_every", 2.0)),
                rows=rows,
                framework=framework,
                session=cell.get("session"),
                segments=int(cell.get("segment", 1)),
                target=cfg.get("target_return"),
                checkpoint_steps=checkpoint_steps,
            )
        )
    return runs


def _metrics(cell_dir: Path, failed: str | None) -> list[tuple[int, float, str, float]]:
    """The cell's metrics.csv rows the report reads; a failed cell's (``failed``: why) that is
    empty or cut in its header has none, and the cell stays a failed row with its reason."""
    try:
        return read_metrics(RunDir(cell_dir).metrics, _reported_metric)
    except HalfWrittenError:
        if failed is None:
            raise
        return []


def _warn(why: str, into: list[str] | None) -> None:
    if into is None:
        print(f"actorq: warning: {one_line(why)}", file=sys.stderr)
    else:
        into.append(one_line(why))


def _checkpoint_steps(cell_dir: Path, native: bool, unread: list[str] | None) -> int | None:
    """The env steps an unfinished Atari cell's checkpoint holds (an SB3 cell logs only at its
    evaluations), or None: none, or one that cannot be read (said to ``unread``)."""
    try:
        return read_checkpoint_steps(cell_dir, native)
    except ResultsError as e:
        _warn(f"{cell_dir.name}: checkpoint not read, frames are its last logged step: {e}", unread)
        return None


# ---------------------------------------------------------------- statistics (rliable)


def _rliable() -> Any:
    try:
        from rliable import library as rly
    except ImportError:
        raise ActorQError(
            "actorq report needs rliable and matplotlib: pip install 'actorq[bench]'"
        ) from None
    return rly


def iqm(x: np.ndarray, axis: int | None = None) -> Any:
    """Interquartile mean: the 25%-trimmed mean (rliable's ``aggregate_iqm``)."""
    from scipy.stats import trim_mean

    return trim_mean(x, proportiontocut=0.25, axis=axis)


@contextlib.contextmanager
def _numpy_seed(seed: int) -> Iterator[None]:
    """Seed numpy's global generator for the block, then put its state back: rliable's
    StratifiedBootstrap draws its resamples from ``np.random.choice`` and ignores the
    ``random_state`` it is given (rliable 1.2), so without this the CIs change run to run."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def iqm_ci(values: Sequence[float], reps: int, seed: int = 0) -> tuple[float, float, float]:
    """(IQM, CI low, CI high) over runs: rliable's 95% stratified bootstrap (percentile)."""
    rly = _rliable()
    scores = np.asarray(values, dtype=float).reshape(-1, 1)
    # arch deprecates the RandomState rliable passes it
    with warnings.catch_warnings(), _numpy_seed(seed):
        warnings.simplefilter("ignore", FutureWarning)
        point, interval = rly.get_interval_estimates(
            {"x": scores},
            lambda s: np.array([iqm(s)]),
            reps=reps,
            random_state=np.random.RandomState(seed),
        )
    return float(point["x"][0]), float(interval["x"][0, 0]), float(interval["x"][1, 0])


def curve_iqm_ci(
    scores: np.ndarray, reps: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-point IQM and 95% CI of a (runs, points) matrix, runs resampled jointly across points
    (rliable's sample-efficiency curves)."""
    rly = _rliable()
    with warnings.catch_warnings(), _numpy_seed(seed):
        warnings.simplefilter("ignore", FutureWarning)
        point, interval = rly.get_interval_estimates(
            {"x": scores[:, None, :]},
            lambda s: iqm(s[:, 0, :], axis=0),
            reps=reps,
            random_state=np.random.RandomState(seed),
        )
    return point["x"], interval["x"][0], interval["x"][1]


def _hold_last(points: list[tuple[float, float]], grid: np.ndarray) -> np.ndarray:
    """Each grid point's value: the last (x, value) at or before it; NaN before the first."""
    out = np.full(len(grid), np.nan)
    if not points:
        return out
    xs = np.array([p[0] for p in points])
    vs = np.array([p[1] for p in points])
    order = np.argsort(xs, kind="stable")
    xs, vs = xs[order], vs[order]
    idx = np.searchsorted(xs, grid, side="right") - 1
    ok = idx >= 0
    out[ok] = vs[idx[ok]]
    return out


# ---------------------------------------------------------------- tables


@dataclasses.dataclass
class Group:
    """The runs of one task (label + policy width) at one precision."""

    task: str
    width: tuple[int, ...]
    precision: str
    runs: list[Run]

    @property
    def finished(self) -> list[Run]:
        return [r for r in self.runs if r.finished]

    def ttt(self) -> list[float]:
        return [
            float(r.summary_value("time_to_target_s"))
            for r in self.finished
            if r.summary_value("reached_target") and r.summary_value("time_to_target_s") is not None
        ]

    def energy(self, key: str) -> list[float]:
        return [e for r in self.finished if (e := r.energy(key)) is not None]


def _prec_key(p: str) -> tuple[int, str]:
    return (PRECISION_ORDER.index(p) if p in PRECISION_ORDER else len(PRECISION_ORDER), p)


GroupMap = dict[tuple[str, tuple[int, ...]], list[Group]]


def group_runs(runs: list[Run]) -> GroupMap:
    """``{(task, width): [Group per precision, fp32 first]}``."""
    out: dict[tuple[str, tuple[int, ...]], dict[str, list[Run]]] = {}
    for r in runs:
        out.setdefault((r.task, r.width), {}).setdefault(r.precision, []).append(r)
    return {
        k: [
            Group(k[0], k[1], p, sorted(rs, key=lambda r: r.seed))
            for p, rs in sorted(v.items(), key=lambda kv: _prec_key(kv[0]))
        ]
        for k, v in sorted(out.items())
    }


def _mean(xs: list[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def _fmt(x: float | None, spec: str = ".1f", none: str = "—") -> str:
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _on_seeds(g: Group, seeds: set[int]) -> Group:
    """``g`` with only its finished runs of ``seeds``."""
    return Group(g.task, g.width, g.precision, [r for r in g.finished if r.seed in seeds])


def speedup_cell(g: Group, fp32: Group | None) -> tuple[float | None, str]:
    """(speedup, text): mean fp32 time to target / mean time to target at g's precision, over
    the seeds finished on both sides (a mean over other seeds on each side would compare
    different runs; fewer than either side finished: the text says how many of each): a seed
    that never reached the target takes forever, so a side with one has no finite mean (a
    precision that missed where fp32 reached on every seed: 0×; the other way round: ∞×; both:
    no ratio). Seeds that did not reach it are never dropped."""
    if fp32 is None:
        return None, "no fp32 cells"
    if not g.finished:
        return None, "no finished runs"
    if all(r.summary_value("target_return") is None for r in g.finished):
        return None, "no target"
    if not fp32.finished:
        return None, "no finished fp32 runs"
    common = {r.seed for r in g.finished} & {r.seed for r in fp32.finished}
    if not common:
        return None, "no seed finished on both sides"
    seeds = ""
    if g is not fp32 and not len(common) == len(g.finished) == len(fp32.finished):
        seeds = f"{len(common)} common seeds of {len(g.finished)} vs fp32 {len(fp32.finished)}"
        seeds += " finished"
        g, fp32 = _on_seeds(g, common), _on_seeds(fp32, common)
    return _speedup(g, fp32, seeds)


def _paren(*notes: str) -> str:
    """`` (a; b)`` of the notes that are not empty; "" if none is."""
    kept = [n for n in notes if n]
    return f" ({'; '.join(kept)})" if kept else ""


def _speedup(g: Group, fp32: Group, seeds: str) -> tuple[float | None, str]:
    """:func:`speedup_cell` of two groups of the same finished seeds; ``seeds`` says which."""
    n, k = len(g.finished), len(g.ttt())
    f, m = fp32.ttt(), len(fp32.finished)
    mine_all, theirs_all = k == n, len(f) == m
    if g is fp32:
        partial = "" if mine_all else f"{k}/{n} reached"
    else:
        partial = "" if mine_all and theirs_all else f"{k}/{n} vs fp32 {len(f)}/{m} reached"
    if not mine_all and not theirs_all:  # forever on both sides: no ratio
        if not k:
            return None, f"never reached{_paren(f'0/{n}', seeds)}"
        return None, f"—{_paren(partial, seeds)}"
    if not mine_all:
        return 0.0, f"0×{_paren(partial, seeds)}"
    mine = float(np.mean(g.ttt()))
    if mine <= 0:  # a target reached at once (time 0): no ratio to take
        return None, f"—{_paren(f'reached at 0 s, {k}/{n}', seeds)}"
    if not theirs_all:
        return math.inf, f"∞×{_paren(partial, seeds)}"
    s = float(np.mean(f)) / mine
    return s, f"{s:.2f}×{_paren(partial, seeds)}"


def _iqm_text(xs: list[float], ret: tuple[float, float, float] | None) -> str:
    """An IQM and its 95% CI (``ret``) as the table shows it; one seed has no CI to give."""
    if ret is None:
        return "—"
    if len(xs) == 1:
        return f"{ret[0]:.1f} (1 seed)"
    return f"{ret[0]:.1f} [{ret[1]:.1f}, {ret[2]:.1f}]"


def _ratio(fp32: Group | None, g: Group, key: str) -> tuple[float | None, str]:
    """(fp32's energy / g's, text), over the seeds both sides finished the same way: both
    stopped at the target (energy to the same return) or both ran the budget (the same steps).
    A seed that ended otherwise on each side compares different work and is left out, as are
    seeds not measured; the text says how many pairs it took. (Energy codecarbon estimated, CPU
    power from TDP and load where there is no RAPL, is close to constant power: its ratio is
    about the runs' wall-time ratio, as the report's note on estimated energy says.)"""
    if fp32 is None:
        return None, "—"
    # each run's energy read once (an older summary's is read from its metrics.csv)
    mine = {r.seed: (r.energy(key), _end(r)) for r in g.finished}
    theirs = {r.seed: (r.energy(key), _end(r)) for r in fp32.finished}
    common = mine.keys() & theirs.keys()
    if not any(mine[s][0] is not None and theirs[s][0] is not None for s in common):
        measured = all(any(e is not None for e, _ in x.values()) for x in (mine, theirs))
        return None, "—" if measured else "not recorded"
    alike: list[tuple[float, float]] = []
    for s in common:
        (e, end), (ef, end_f) = mine[s], theirs[s]
        if e is not None and ef is not None and end is not None and end == end_f:
            alike.append((ef, e))
    notes = []
    if len(alike) < max(len(mine), len(theirs)):  # seeds finished on one side only said too
        notes.append(f"{len(alike)} of {len(mine)} vs fp32 {len(theirs)} seeds paired")
    b = sum(float(y) for _, y in alike)
    if not alike or b <= 0:
        return None, f"—{_paren(*notes)}"
    ratio = sum(float(x) for x, _ in alike) / b
    return ratio, f"{ratio:.2f}×{_paren(*notes)}"


def _end(r: Run) -> str | None:
    """How a finished run ended, for energy pairs: "target" (stopped there) or "budget"."""
    stop = r.summary_value("stop")
    return stop if stop in ("target", "budget") else None


def _energy_text(g: Group, key: str, spec: str) -> str:
    xs = g.energy(key)
    if not xs:
        return "not recorded"
    n = len(g.finished)
    return format(float(np.mean(xs)), spec) + ("" if len(xs) == n else f" ({len(xs)}/{n} runs)")


def bound(learner_wait: float | None, actor_wait: float | None) -> str:
    """Which side limits the run: the learner waiting for data means the actors are the
    bottleneck (actor-bound); actors held back by the rate limiter mean the learner is."""
    if learner_wait is None or actor_wait is None:
        return "—"
    if max(learner_wait, actor_wait) < 0.1:
        return "balanced"
    return "actor-bound" if learner_wait > actor_wait else "learner-bound"


# ---------------------------------------------------------------- plots


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _plot_curves(groups: list[Group], reps: int, target: float | None) -> bytes | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), dpi=90)
    drawn = False
    for g in groups:
        runs = [r.eval_curve() for r in g.finished]
        for ax, col, label in ((axes[0], 1, "run's clock, seconds"), (axes[1], 0, "env steps")):
            # (x, return) per evaluation; one with no time on the run's clock has no x here
            curves = [[(float(x), p[2]) for p in c if (x := p[col]) is not None] for c in runs]
            curves = [c for c in curves if c]
            if not curves:
                continue
            if col == 0:
                grid = np.array(sorted({p[0] for c in curves for p in c}), dtype=float)
            else:
                grid = np.linspace(0.0, max(max(p[0] for p in c) for c in curves), 60)
            m = np.stack([_hold_last(c, grid) for c in curves])
            keep = ~np.isnan(m).any(axis=0)
            if not keep.any():
                continue
            mid, lo, hi = curve_iqm_ci(m[:, keep], reps=reps)
            # held values between evaluations: steps on the wall-clock grid
            (line,) = ax.plot(
                grid[keep],
                mid,
                label=f"{g.precision} (n={len(curves)})",
                drawstyle="default" if col == 0 else "steps-post",
            )
            ax.fill_between(
                grid[keep],
                lo,
                hi,
                alpha=0.2,
                color=line.get_color(),
                step=None if col == 0 else "post",
            )
            ax.set_xlabel(label)
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    for ax in axes:
        if target is not None:
            ax.axhline(target, ls="--", lw=1, color="gray")
        ax.set_ylabel("eval return (IQM, 95% CI)")
        ax.grid(alpha=0.3)
    for ax in axes:  # each panel's own: a run without times on its clock is on one panel only
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    g0 = groups[0]
    fig.suptitle(f"{g0.task} · policy {policy_label(groups, g0.width)}", fontsize=10)
    fig.tight_layout()
    return _png(fig)


def _plot_throughput(rows: list[dict[str, Any]]) -> bytes | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({r["task"] for r in rows if r["busy_sps"] is not None})
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.4), dpi=90, squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        mine = [r for r in rows if r["task"] == task and r["busy_sps"] is not None]
        widths = sorted({tuple(r["width"]) for r in mine}, key=lambda w: (sum(w), w))
        for prec in sorted({r["precision"] for r in mine}, key=_prec_key):
            pts = {tuple(r["width"]): r["busy_sps"] for r in mine if r["precision"] == prec}
            xs = [i for i, w in enumerate(widths) if w in pts]
            ax.plot(xs, [pts[widths[i]] for i in xs], marker="o", label=prec)
        ax.set_xticks(range(len(widths)), [width_slug(w)[1:] for w in widths], fontsize=7)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("policy hidden widths")
        ax.set_ylabel("actor env steps/s while busy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


# ---------------------------------------------------------------- the report


def _header(results: Path, runs: list[Run], sessions: list[dict[str, Any]], reps: int) -> list[str]:
    """Title, the machine of the last bench session, and how the report was made."""
    lines = [f"# Benchmark report: {results.name}", ""]
    if sessions:
        m = sessions[-1]
        gpu = m.get("gpus")
        gpu_text = f", GPU {', '.join(map(str, gpu))}" if isinstance(gpu, list) and gpu else ""
        lines += [
            f"Machine: {m.get('cpu_model')}, {m.get('cores')} cores "
            f"({m.get('cores_usable')} usable){gpu_text}, load at start "
            f"{m.get('load_avg_at_start')}; "
            f"torch {m.get('torch')}, onnxruntime {m.get('onnxruntime')}; "
            f"commit {str(m.get('git_commit'))[:10]}; {len(sessions)} bench session(s), "
            f"last {m.get('date')}.",
            "",
        ]
    lines += [
        f"Made by `actorq report {results}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        f" from {len(runs)} cell(s). Aggregates over seeds: IQM with 95% stratified bootstrap CIs "
        f"(rliable, {reps} resamples; Agarwal et al., NeurIPS 2021).",
        "",
    ]
    return lines


def _quarl_table(groups: GroupMap, reps: int, rows: list[dict[str, Any]]) -> list[str]:
    """Per task, width and precision: time to target, speedup, return, energy (QuaRL's table);
    appends each row's numbers to ``rows``."""
    lines = [
        "## Per task: speedup, return, energy (QuaRL's table)",
        "",
        "Time to target: mean over the seeds that reached the target (confirmed on fresh seeds), "
        "from the start of the learner's loop, evaluations included; speedup = fp32 time / time "
        'at the precision, means over the seeds finished at both ("k common seeds of n vs fp32 '
        'm finished" when fewer than either finished; one that never reached the target counts '
        "as never: 0× or ∞×, or no ratio when both sides have one). "
        "Energy: whole machine, over the run's clock, mean per run; ratio = fp32 / precision "
        "over the seeds both finished the same way (both at the target, or both at the "
        'budget: the same return or the same steps, both measured: "k of n vs fp32 m seeds '
        'paired" when fewer).',
        "",
        "| task | policy | precision | runs | reached target | time to target s | speedup vs fp32 "
        "| final return IQM [95% CI] | kWh per run | kg CO2 per run | kWh ratio | CO2 ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    estimated = False
    for (task, width), gs in groups.items():
        fp32 = next((g for g in gs if g.precision == "fp32"), None)
        for g in gs:
            fin = g.finished
            # a cell with a failure record failed; one without is unfinished (running, stopped)
            n_fail = sum(1 for r in g.runs if not r.finished and r.why)
            n_open = len(g.runs) - len(fin) - n_fail
            others = [
                f"+{n} {what}" for n, what in ((n_fail, "failed"), (n_open, "unfinished")) if n
            ]
            targets = {r.summary_value("target_return") for r in fin}
            tgt = next(iter(targets)) if len(targets) == 1 else None
            reached = f"{len(g.ttt())}/{len(fin)}" + (f" (≥ {tgt:g})" if tgt is not None else "")
            if fin and targets == {None}:
                reached = "no target"
            spd, spd_text = speedup_cell(g, fp32)
            finals = [float(r.summary_value("eval_return")) for r in fin]
            ret = iqm_ci(finals, reps) if finals else None
            kr, kr_text = _ratio(fp32, g, SUMMARY_KWH)
            cr, cr_text = _ratio(fp32, g, SUMMARY_KG_CO2)
            estimated |= any(r.summary_value(SUMMARY_ESTIMATED) for r in fin)
            lines.append(
                f"| {task} | {policy_label(gs, width)} | {g.precision} | {len(fin)}"
                + (f" ({', '.join(others)})" if others else "")
                + f" | {reached} | {_fmt(_mean(g.ttt()))} | {spd_text} | "
                + _iqm_text(finals, ret)
                + f" | {_energy_text(g, SUMMARY_KWH, '.3g')}"
                + f" | {_energy_text(g, SUMMARY_KG_CO2, '.3g')} | {kr_text} | {cr_text} |"
            )
            rows.append(
                {
                    "task": task, "width": list(width), "precision": g.precision,
                    "runs": len(fin), "failed": n_fail, "reached": len(g.ttt()),
                    "target": tgt, "time_to_target_s": _mean(g.ttt()), "speedup": spd,
                    "return_iqm": None if ret is None else ret[0],
                    "return_ci": None if ret is None or len(finals) < 2 else [ret[1], ret[2]],
                    "kwh": _mean(g.energy(SUMMARY_KWH)), "kg_co2": _mean(g.energy(SUMMARY_KG_CO2)),
                    "kwh_ratio": kr, "co2_ratio": cr,
                }
            )  # fmt: skip
    if estimated:
        lines += [
            "",
            "Energy is estimated: this machine has no RAPL counters, so codecarbon models CPU "
            "power from its TDP and load (and RAM power from its size); it covers the whole "
            "machine, other processes included. On a machine kept busy that power is nearly "
            "constant, so a ratio of estimated energies is about the ratio of the runs' wall "
            "times, not separate evidence.",
        ]
    return lines


def _per_kstep(g: Group) -> float | None:
    """The training loop's wall-clock seconds per 1k env steps less its periodic evaluations'
    (``eval_time_s``, as every other training time of the report), mean over finished seeds:
    with them, a precision that evaluated slower looked slower at training."""
    return _mean(
        [
            1e3 * train_time(r) / float(r.summary_value("env_steps"))
            for r in g.finished
            if r.summary_value("wall_time_s") and r.summary_value("env_steps")
        ]
    )


def _perf_table(groups: GroupMap, rows: list[dict[str, Any]]) -> list[str]:
    """Where the time goes: wait fractions, throughput, run time per 1k steps, snapshot size;
    appends each row's numbers to ``rows``."""
    lines = [
        "",
        "## Where the time goes: wait fractions, throughput, snapshot size",
        "",
        "Means over each run's log intervals, then over seeds. Learner wait: share of time the "
        "learner waited for data (actor-bound when it dominates); actor wait: share of the actors' "
        "time held back by the rate limiter (learner-bound). Actor steps/s is the system's rate; "
        '"while busy" divides it by (1 − actor wait): what the actors sustain when not held back. '
        "Training time per 1k env steps: the training loop's wall-clock time (from the actors' "
        "start to the last update) less its periodic evaluations (the final evaluation and "
        "checkpoint not included either) over the run's env steps, mean over seeds; vs fp32 = "
        "fp32's / this one's: the speedup at equal work, whether or not a target was reached.",
        "",
        "| task | policy | precision | learner wait | actor wait | bound | actor steps/s "
        "| while busy | training s / 1k steps | vs fp32 | snapshot bytes | of fp32 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (task, width), gs in groups.items():
        fp32 = next((g for g in gs if g.precision == "fp32"), None)
        base = _per_kstep(fp32) if fp32 is not None else None
        for g in gs:
            fin = g.finished
            lw = _mean([x for r in fin if (x := r.mean_of("perf/learner_wait_frac")) is not None])
            aw = _mean([x for r in fin if (x := r.mean_of("perf/actor_wait_frac")) is not None])
            sps = _mean([x for r in fin if (x := r.mean_of("perf/actor_sps")) is not None])
            busy = None if sps is None or aw is None or aw >= 1 else sps / (1 - aw)
            snap = _mean([float(v) for r in fin if (v := r.summary_value("snapshot_bytes"))])
            f32 = _mean([float(v) for r in fin if (v := r.summary_value("fp32_snapshot_bytes"))])
            share = None if snap is None or not f32 else snap / f32
            pk = _per_kstep(g)
            pk_speedup = None if pk is None or base is None or pk <= 0 else base / pk
            lines.append(
                f"| {task} | {policy_label(gs, width)} | {g.precision} | {_fmt(lw, '.2f')} | "
                f"{_fmt(aw, '.2f')} | {bound(lw, aw)} | {_fmt(sps, '.0f')} | {_fmt(busy, '.0f')} | "
                f"{_fmt(pk, '.2f')} | {_fmt(pk_speedup, '.2f')}× | "
                f"{_fmt(snap, ',.0f')} | {_fmt(None if share is None else 100 * share, '.1f')}% |"
            )
            rows.append(
                {
                    "task": task, "width": list(width), "precision": g.precision,
                    "learner_wait_frac": lw, "actor_wait_frac": aw, "bound": bound(lw, aw),
                    "actor_sps": sps, "busy_sps": busy, "training_s_per_1k_steps": pk,
                    "training_speedup_vs_fp32": pk_speedup, "snapshot_bytes": snap,
                    "snapshot_share_of_fp32": share,
                }
            )  # fmt: skip
    return lines


def _curves(
    groups: GroupMap, perf: list[dict[str, Any]], reps: int, images: dict[str, bytes]
) -> list[str]:
    """Learning curves per task and width (and throughput vs width when a task has several);
    the PNGs go to ``images``."""
    lines = ["", "## Learning curves", ""]
    lines += [
        "Left: each run's own clock, the one its time to target is read on (a resumed run's "
        "stops between segments are not on it; another framework's evaluations logged before "
        "actorq logged that clock have no point there). Right: env steps.",
        "",
    ]
    for (task, width), gs in groups.items():
        # a task's name is at most a directory name long (the spec checks labels), but with the
        # width and prefix added it may not fit in one file name
        png = f"curves-{_slug(task)[:120]}-{width_slug(width)[:100]}.png"
        tgts = {r.summary_value("target_return") for g in gs for r in g.finished}
        tgt = next(iter(tgts)) if len(tgts) == 1 else None
        image = _plot_curves(gs, max(reps // 4, 100), tgt)
        if image is not None:
            images[png] = image
            lines.append(f"![{task} {policy_label(gs, width)}]({png})")
            lines.append("")
    several_widths = any(len({w for (t, w) in groups if t == task}) > 1 for task, _ in groups)
    image = _plot_throughput(perf) if several_widths else None
    if image is not None:
        images["throughput_vs_width.png"] = image
        lines += [
            "## Actor throughput vs policy width",
            "",
            "![throughput](throughput_vs_width.png)",
            "",
        ]
    return lines


def atari_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per ``atari:`` cell: game, agent, framework, precision, seed, frames trained
    (agent steps × the frame skip of 4; an unfinished cell's: how far it trained, its
    checkpoint's step or its last logged one, the later: a resume goes on from the checkpoint's
    and trains what was logged past it again), the final score (full games, raw score; None
    until the cell finishes), frames and training wall seconds to the target (a finished cell's
    summary: the first periodic evaluation that reached it, confirmed, wall seconds less
    evaluation; a running cell's: its first confirmed one, frames only), frames per second of a
    finished cell's training (its wall time less its evaluations'), the last periodic
    evaluation so far, and every periodic evaluation as ``evals``: ``[frames, mean score]``
    pairs (report.json's rows carry them; summary.json keeps issue 50's row without them)."""
    from actorq.envs.atari import AtariOptions

    skip = AtariOptions().frame_skip  # the spec's runs keep the default (4)
    out = []
    for r in runs:
        if not r.env.startswith("atari:"):
            continue
        curve = r.eval_curve()
        # unfinished: the later of its checkpoint's step and its last logged one (SB3's cells
        # log only at evaluations: the last logged step lags up to an evaluation interval)
        logged = max((s for s, _, _, _ in r.rows), default=0)
        steps = r.summary_value("env_steps") or max(logged, r.checkpoint_steps or 0)
        to_target = r.summary_value("steps_to_target")
        wall_to_target = time_to_target(r) if r.finished else math.inf
        wall, evals = r.summary_value("wall_time_s"), r.summary_value("eval_time_s") or 0.0
        fps = int(steps) * skip / (wall - evals) if wall and wall > evals else None
        if to_target is None and r.target is not None and not r.finished:
            # a running cell's first confirmed evaluation at the target (logs from before the
            # confirmation was logged have none: null); a finished cell's summary is the word
            to_target = next(
                (s for s, _, m, v in r.rows if m == CONFIRM_METRIC and v >= r.target), None
            )
        out.append(
            {
                "game": r.env.removeprefix("atari:"), "agent": r.agent, "framework": r.framework,
                "precision": r.precision if r.framework == NATIVE else "fp32", "seed": r.seed,
                "frames": int(steps) * skip, "final_score": r.summary_value("eval_return"),
                "frames_to_target": None if to_target is None else int(to_target) * skip,
                # null: not reached, or unknown (a summary from before steps_to_target)
                "wall_to_target_s": wall_to_target if math.isfinite(wall_to_target) else None,
                "frames_per_s": fps, "target": r.target, "finished": r.finished,
                "last_eval": curve[-1][2] if curve else None,
                "last_eval_frames": curve[-1][0] * skip if curve else None,
                "evals": [[s * skip, v] for s, _, v in curve],
            }
        )  # fmt: skip
    return out


def _atari_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "", "## Atari (frames = agent steps × 4; scores: full games, raw)", "",
        "An unfinished cell's frames: how far it trained, its checkpoint's step or its last logged "
        "one, the later; a resume goes on from the checkpoint's, training frames logged past it "
        "again.", "",
        "| game | agent | framework | precision | seed | frames | frames/s | final score "
        "| last eval (at frames) | frames to target | wall to target s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        last = (
            "—" if r["last_eval"] is None else f"{r['last_eval']:.1f} ({r['last_eval_frames']:,})"
        )
        ftt = r["frames_to_target"]
        lines.append(
            f"| {r['game']} | {r['agent']} | {r['framework']} | {r['precision']} | {r['seed']} "
            f"| {r['frames']:,} | {_fmt(r['frames_per_s'], '.0f')} | {_fmt(r['final_score'])} "
            f"| {last} | "
            f"{'—' if ftt is None else f'{ftt:,}'} | {_fmt(r['wall_to_target_s'], '.0f')} |"
        )
    return lines


def not_started(results: Path, sessions: list[dict[str, Any]]) -> tuple[list[str], str | None]:
    """The cells of ``results/spec.toml`` (the spec as last run, with the ``--override`` items
    of that run: the last of machine.json's ``sessions``, read and checked; an override of the
    width changes the cells' names) without a directory yet, and why that spec could not be
    read (None: it was, or there is none). Not summary rows: a row is a cell with results, and
    an unfinished one stands for a cell in progress."""
    path = results / "spec.toml"
    if not path.is_file():
        return [], None
    overrides = sessions[-1].get("overrides") if sessions else None
    try:
        cells = load_spec(path, overrides).cells
    except ActorQError as e:  # e.g. its other framework is not installed here
        return [], one_line(str(e))
    return [c.name for c in cells if not os.path.lexists(results / c.name)], None


def _not_started_lines(names: list[str], why: str | None) -> list[str]:
    if why is not None:
        return [f"The spec's cells not started are not listed: spec.toml not read ({why}).", ""]
    if not names:
        return []
    return ["## Cells of the spec not started", "", *(f"- {n}" for n in names), ""]


def _problems(runs: list[Run], data: dict[str, Any]) -> list[str]:
    """Cells that did not finish, partial cells skipped, checkpoints not read; appends the
    failed to ``data["failed"]``."""
    skipped, unread, failed_rows = data["skipped"], data["checkpoints_not_read"], data["failed"]
    lines: list[str] = []
    failed = [r for r in runs if not r.finished]
    if failed:
        lines += ["## Cells without a complete summary", ""]
        for r in failed:
            lines.append(f"- {r.name}: {r.why or 'unfinished (no complete summary.json)'}")
            failed_rows.append({"name": r.name, "why": r.why})
        lines.append("")
    if skipped:
        lines += ["## Partial cells skipped (the next `actorq bench` runs them again)", ""]
        lines += [f"- {why}" for why in skipped]
        lines.append("")
    if unread:
        lines += ["## Checkpoints not read (those rows' frames: their last logged step)", ""]
        lines += [*(f"- {why}" for why in unread), ""]
    return lines


def build_report(results: Path, reps: int = 2000) -> tuple[str, dict[str, Any], dict[str, bytes]]:
    """The report's markdown, its numbers (report.json) and its plots (file name -> PNG),
    from the results directory's files, all read and checked first; writes nothing."""
    check_reps(reps)
    skipped: list[str] = []  # reported with the report, not before an error that stops it
    unread: list[str] = []  # the same
    runs = load_runs(results, skipped, unread)
    sessions = read_sessions(results)
    if skipped and not runs:  # every cell partial: say which and why, not "none found"
        raise ResultsError(f"{results}: nothing to report, every cell is partial: "
                           + "; ".join(skipped))  # fmt: skip
    if not runs:
        raise ResultsError(f"{results}: no run directories (cell.json or config.json) found")
    _rliable()
    groups = group_runs(runs)
    images: dict[str, bytes] = {}
    data: dict[str, Any] = {"table": [], "perf": [], "failed": [], "skipped": skipped,
                            "checkpoints_not_read": unread}  # fmt: skip
    data["frameworks"] = []
    lines = _header(results, runs, sessions, reps)
    lines += _quarl_table(groups, reps, data["table"])
    lines += framework_section(groups, runs, data["frameworks"])
    lines += _perf_table(groups, data["perf"])
    lines += _curves(groups, data["perf"], reps, images)
    lines += _problems(runs, data)
    data["not_started"], why = not_started(results, sessions)
    lines += _not_started_lines(data["not_started"], why)
    data["atari"] = atari_rows(runs)
    lines += _atari_table(data["atari"])
    return "\n".join(lines).rstrip() + "\n", data, images


def _check_ours(path: Path) -> None:
    """``summary.json`` at the results' root is the report's (a list of Atari rows): a file of
    that name written by someone else is refused with one line, never replaced."""
    with contextlib.suppress(OSError):  # unreadable metadata: read_input says why
        if not path.exists():  # (a dangling link too: replaced, never followed)
            return
    try:  # a device node or FIFO there is refused below, not read (or waited on)
        d = json.loads(read_input(path, shown(path), ResultsError))
    except (ActorQError, ValueError, RecursionError):
        d = None
    if not (isinstance(d, list) and all(isinstance(x, dict) and "game" in x for x in d)):
        raise ResultsError(
            f"{shown(path)} is not a report's summary (a list of Atari rows); move it away "
            "and run the report again"
        )


def _check_outputs(results: Path, names: Iterable[str]) -> None:
    """One line unless each of ``names`` in ``results`` can be written: absent, or a regular
    file (the report replaces its own files), never a directory, FIFO or device node."""
    for name in names:
        check_output(results / name, "report output", force=True, error=ResultsError)


def write_report(results: Path, reps: int = 2000) -> Path:
    """Write ``results/report.md`` (and ``report.json``, the PNGs); returns the report's path.

    Everything is read, checked and drawn before the first file is written, and each file is
    written whole (a tmp file, then a rename), report.md last: a bad input writes nothing.
    """
    check_reps(reps)
    if not is_dir(results, f"results directory {shown(results)}", ResultsError):
        raise ResultsError(f"results directory not found: {shown(results)}")
    # every output checked before the first is written: a directory at report.md's name was
    # found only when report.json and the plots had been written (and before the work: cheap)
    _check_outputs(results, ("report.md", "report.json"))
    text, data, images = build_report(results, reps)
    if data["atari"]:
        _check_ours(results / "summary.json")
    _check_outputs(results, images)
    for name, png in images.items():
        write_atomic(results / name, png)
    write_atomic(results / "report.json", strict_json(data))
    if data["atari"]:  # issue 50's table, one row per Atari cell started, finished or not
        rows = [{k: v for k, v in row.items() if k != "evals"} for row in data["atari"]]
        write_atomic(results / "summary.json", strict_json(rows))
    path = results / "report.md"
    write_atomic(path, text)
    for why in [*data["skipped"], *data["checkpoints_not_read"]]:
        print(f"actorq: warning: {why}", file=sys.stderr)
    return path
