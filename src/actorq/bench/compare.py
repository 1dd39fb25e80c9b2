"""The report's side-by-side section for a matrix with a framework axis (``frameworks = [...]``):
actorq's precisions and the other frameworks, per task, on the same budget and evaluation seeds.

Training time is the run's wall time less its evaluation time (``eval_time_s``); time to target
is the run's ``time_to_target_s`` less the evaluation seconds logged before the target step
(cumulative ``perf/eval_s``), for every framework alike (unknown, and said so, for a summary
from before ``steps_to_target``, which names no target step). A run that never reached the target
counts as +inf in the median (a failure, never dropped). Ratios are of medians over seeds, other
framework / actorq (> 1: actorq faster), with a percentile bootstrap 95% CI, seeds resampled
within each side independently. Timings are comparable within one run of the matrix, where the
frameworks alternate cell by cell; the section says when the cells ran in several sessions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np

from actorq.bench.frameworks import NATIVE
from actorq.logging import EVAL_S_METRIC

# report.Run, report.Group and report.GroupMap (not imported: the report imports this module)
Run: TypeAlias = Any
Group: TypeAlias = Any
GroupMap: TypeAlias = dict[tuple[str, tuple[int, ...]], list[Any]]

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


def policy_label(gs: Sequence[Group], width: Sequence[int]) -> str:
    """The policy a task's cells ran: Atari cells the Nature-CNN, whatever their (unused) MLP
    widths, which stay in their names; others their hidden widths (``256x256``)."""
    envs = {r.env for g in gs for r in g.runs}
    if envs and all(e.startswith("atari:") for e in envs):
        return "Nature-CNN"
    return "x".join(map(str, width))


def train_time(r: Run) -> float:
    return float(r.summary_value("wall_time_s")) - float(r.summary_value("eval_time_s") or 0.0)


def time_to_target(r: Run) -> float:
    """Training seconds to the target (+inf: never reached; NaN: unknown, a summary from
    before ``steps_to_target``, whose evaluations before the target cannot be told apart: its
    time with them in is no training time)."""
    t, step = r.summary_value("time_to_target_s"), r.summary_value("steps_to_target")
    if not r.summary_value("reached_target") or t is None:
        return math.inf
    if step is None:
        return math.nan
    before = [v for s, _, m, v in r.rows if m == EVAL_S_METRIC and s < step]
    return float(t) - (before[-1] if before else 0.0)


#: what the side-by-side says where a run's time to target is unknown (:func:`time_to_target`)
UNKNOWN = "unknown: {} run(s) from before steps_to_target"


def ratio_ci(num: np.ndarray, den: np.ndarray) -> tuple[float, float, float]:
    """median(num) / median(den) and its percentile-bootstrap 95% CI (inf/inf resamples
    dropped; no interpolation between resamples, so an infinite end stays infinite)."""

    def ratio(a: float, b: float) -> float:
        if math.isinf(a) and math.isinf(b):
            return math.nan
        return a / b if b > 0 else math.inf

    point = ratio(float(np.median(num)), float(np.median(den)))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    a = np.median(rng.choice(num, size=(BOOTSTRAP_RESAMPLES, len(num))), axis=1)
    b = np.median(rng.choice(den, size=(BOOTSTRAP_RESAMPLES, len(den))), axis=1)
    rs = np.array([ratio(x, y) for x, y in zip(a, b, strict=True)])
    ok = rs[~np.isnan(rs)]
    if not len(ok):
        return point, math.nan, math.nan
    lo, hi = np.quantile(ok, [0.025, 0.975], method="inverted_cdf")
    return point, float(lo), float(hi)


def _x(ratio: float) -> str:
    return "∞×" if math.isinf(ratio) else f"{ratio:.2f}×"


def _s(x: float) -> str:
    return "∞" if math.isinf(x) else "—" if math.isnan(x) else f"{x:.1f}"


def _row(g: Group) -> list[str]:
    rs = g.finished
    finals = [float(r.summary_value("eval_return")) for r in rs]
    ttt = np.array([time_to_target(r) for r in rs])
    reached = [r for r in rs if r.summary_value("reached_target")]
    # steps to the target: runs that reached it and say when (a summary from before the field)
    hit = [int(s) for r in reached if (s := r.summary_value("steps_to_target")) is not None]
    times = np.array([train_time(r) for r in rs])
    sps = [float(r.summary_value("env_steps")) / t for r, t in zip(rs, times, strict=True) if t > 0]
    target = any(r.summary_value("target_return") is not None for r in rs)
    finite, unknown = ttt[np.isfinite(ttt)], int(np.isnan(ttt).sum())
    return [
        g.precision,
        str(len(rs)),
        f"{finals[0]:.1f} (1 seed)" if len(finals) == 1 else
        f"{np.mean(finals):.1f} ± {np.std(finals):.1f}",
        f"{len(reached)}/{len(rs)}" if target else "—",
        f"{np.median(hit):,.0f}" if hit else "—",
        UNKNOWN.format(unknown) if unknown else
        (f"{_s(float(np.median(ttt)))} ({_s(float(np.mean(finite)))}; "
         f"{_s(float(finite.min()))}–{_s(float(ttt.max()))})")
        if target and len(finite) else "—",
        f"{np.median(times):.1f}",
        f"{np.mean(sps):,.0f}" if sps else "—",
    ]  # fmt: skip


def _ratio_line(
    what: str, o: Group, m: Group, f: Callable[[Run], float]
) -> tuple[str, dict[str, Any] | None]:
    """The report's line for one ratio of ``f`` (training time, time to target), the other
    framework's group ``o`` over actorq's ``m``, and its report.json row (None: no ratio)."""
    head = f"- {what}, {o.precision} / actorq {m.precision}:"
    num, den = np.array([f(x) for x in o.finished]), np.array([f(x) for x in m.finished])
    unknown = int(np.isnan(num).sum() + np.isnan(den).sum())
    if unknown:  # no ratio of times some of which have evaluations in them
        return f"{head} no ratio ({UNKNOWN.format(unknown)})", None
    r, lo, hi = ratio_ci(num, den)
    if math.isnan(r):
        return f"{head} no ratio (neither side's median run reached the target)", None
    if len(o.finished) == len(m.finished) == 1:  # no spread to resample
        lo = hi = math.nan
    ci = "one seed each: no CI" if math.isnan(lo) else f"95% CI {_x(lo)}–{_x(hi)}"
    row = {"what": what, "other": o.precision, "actorq": m.precision, "ratio": r, "low": lo,
           "high": hi}  # fmt: skip
    return f"{head} median {_x(r)} ({ci})", row


def framework_section(
    groups: GroupMap, runs: Sequence[Run], data: list[dict[str, Any]]
) -> list[str]:
    """The section's markdown ([] without other frameworks); its ratios go to ``data``."""
    if all(r.framework == NATIVE for r in runs):
        return []
    sessions = sorted({r.session for r in runs if r.session is not None})
    lines = [
        "## Side by side with other frameworks",
        "",
        "Training time = wall time less evaluation time; time to target likewise, a run that "
        "never reached it counted as ∞; ratios: other framework's median / actorq's (> 1: actorq "
        f"faster), 95% bootstrap CI over seeds ({BOOTSTRAP_RESAMPLES:,} resamples).",
        "",
    ]
    if len(sessions) > 1:
        lines += [f"**The cells ran in {len(sessions)} sessions**: timings of different "
                  "sessions are not one run's.", ""]  # fmt: skip
    resumed = [r for r in runs if r.segments > 1]
    if resumed:
        lines += [f"{len(resumed)} run(s) resumed from a checkpoint (times summed over their "
                  "segments, evaluation excluded; work since a run's last checkpoint redone).",
                  ""]  # fmt: skip
    for (task, width), gs in groups.items():
        if all(r.framework == NATIVE for g in gs for r in g.runs):
            continue
        lines += [
            f"### {task} ({policy_label(gs, width)})",
            "",
            "| framework | seeds | final return | reached target | median steps to target | "
            "time to target, s: median (mean; min–max) | median training time (s) | "
            "env steps/s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(_row(g)) + " |" for g in gs if g.finished]
        lines.append("")
        others = [g for g in gs if g.finished and g.runs[0].framework != NATIVE]
        mine = [g for g in gs if g.finished and g.runs[0].framework == NATIVE]
        for o in others:
            for m in mine:
                for what, f in (("training time", train_time), ("time to target", time_to_target)):
                    line, row = _ratio_line(what, o, m, f)
                    lines.append(line)
                    if row is not None:
                        data.append({"task": task, "width": list(width), **row})
        lines.append("")
    return lines
