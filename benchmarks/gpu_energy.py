"""The GPU's energy per bench cell, from the power samples `benchmarks/gpu_checks.sh` records.

Integrates nvidia-smi's power.draw (``power.csv``, every 0.5 s, UTC; the lent machines' CPU has
no energy counter, so this is the GPU's share only: not the actors' CPUs, not CO2) over each
cell's training up to its target: from its loop's start to the start of the evaluation that
reached it (the window its time to target measures), beside QuaRL's per-cell columns: time and
steps to target, updates/s, publish cost. A cell that did not reach its target: its whole loop,
said in the table. The window comes from metrics.csv's evaluation rows (an evaluation's
``perf/eval_s`` row is logged as it ends, its duration the cumulative seconds' step); the power
between samples is linear, and a window the sampler left a gap of over 2 s in is not measured.

    .venv/bin/python benchmarks/gpu_energy.py benchmarks/results/quarl_dqn_gpu_h200

Writes RESULTS/gpu_energy.md and .json.
"""

from __future__ import annotations

import argparse
import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from actorq.logging import EVAL_S_METRIC, RUN_CLOCK_METRIC


def read_power(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(unix seconds, watts) from nvidia-smi's CSV (`timestamp, power.draw [W], ...`, UTC);
    repeated header lines (one file per lease, concatenated) are skipped."""
    ts, watts = [], []
    with path.open() as f:
        for row in csv.reader(f):
            if len(row) < 2 or row[0].startswith("timestamp"):
                continue
            try:
                t = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
                w = float(row[1])
            except ValueError:
                continue  # "[N/A]" or a line cut short when the sampler was killed
            ts.append(t.timestamp())
            watts.append(w)
    order = np.argsort(ts)
    return np.asarray(ts)[order], np.asarray(watts)[order]


#: the longest gap between power samples a window may hold (the sampler writes every 0.5 s)
MAX_GAP_S = 2.0


def _eval_rows(cell: Path) -> list[tuple[int, float, float, float | None]]:
    """Each periodic evaluation of the cell: (step, wall time at its start, its end, the run's
    clock at its start where logged: ``perf/run_s``)."""
    ends: dict[int, tuple[float, float]] = {}  # step -> (wall at the end, cumulative eval s)
    clock: dict[int, float] = {}
    with (cell / "metrics.csv").open() as f:
        for r in csv.DictReader(f):
            if r["metric"] == EVAL_S_METRIC:
                ends[int(r["step"])] = (float(r["wall_time"]), float(r["value"]))
            elif r["metric"] == RUN_CLOCK_METRIC:
                clock[int(r["step"])] = float(r["value"])
    rows, before = [], 0.0
    for step in sorted(ends):
        wall, total = ends[step]
        rows.append((step, wall - (total - before), wall, clock.get(step)))
        before = total
    return rows


def cell_window(cell: Path, summary: dict[str, Any]) -> tuple[float, float, str] | None:
    """(start, end, what) in unix seconds: the loop's start to the start of the evaluation that
    reached the target ("to target"), or to the loop's end ("whole loop, target not reached");
    None where the logs do not place it: a run without ``perf/run_s`` that did not reach it, or
    one resumed across segments (its clock leaves out the stops between them; the machine's
    does not, so no one span of the samples is its training)."""
    record = cell / "cell.json"
    if record.is_file() and int(json.loads(record.read_text()).get("segment", 1)) > 1:
        return None
    rows = _eval_rows(cell)
    to = summary.get("time_to_target_s")
    if to is not None:
        hit = [r for r in rows if r[0] == summary.get("steps_to_target")]
        if not hit:
            return None
        t = hit[0][1]  # the reaching evaluation's start: the run's clock read time_to_target
        return t - float(to), t, "to target"
    clocked = [r for r in rows if r[3] is not None]
    if not clocked:
        return None
    _, start, _, clock = clocked[0]
    t0 = start - float(clock or 0.0)
    return t0, t0 + float(summary["wall_time_s"]), "whole loop, target not reached"


def energy(ts: np.ndarray, watts: np.ndarray, t0: float, t1: float) -> tuple[float, float] | None:
    """(Wh, mean W) over [t0, t1], the power linear between samples (and at the edges); None if
    the samples do not cover the window or leave a gap of over :data:`MAX_GAP_S` in it."""
    if len(ts) < 2 or ts[0] > t0 or ts[-1] < t1 or t1 <= t0:
        return None
    inside = (ts > t0) & (ts < t1)
    t = np.concatenate([[t0], ts[inside], [t1]])
    if np.diff(t).max() > MAX_GAP_S:
        return None
    w = np.interp(t, ts, watts)
    joules = float(np.sum((w[1:] + w[:-1]) / 2 * np.diff(t)))
    return joules / 3600, joules / (t1 - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a bench results directory holding power.csv")
    a = ap.parse_args()
    ts, watts = read_power(a.results / "power.csv")
    rows = []
    for cell in sorted(p for p in a.results.iterdir() if (p / "summary.json").is_file()):
        s = json.loads((cell / "summary.json").read_text())
        window = cell_window(cell, s)
        e = energy(ts, watts, window[0], window[1]) if window else None
        rows.append({
            "cell": cell.name, "precision": s["precision"],
            "time_to_target_s": s.get("time_to_target_s"),
            "steps_to_target": s.get("steps_to_target"),
            "updates_per_s": s["updates"] / s["wall_time_s"],
            # the run's wall time, its evaluations in (the report's training_s_per_1k_steps
            # leaves them out)
            "wall_s_per_1k_steps_evals_in": 1000 * s["wall_time_s"] / s["env_steps"],
            "publish_ms": s.get("publish_ms"), "publish_blocked_ms": s.get("publish_blocked_ms"),
            "gpu_wh": e[0] if e else None, "gpu_mean_w": e[1] if e else None,
            "energy_window": window[2] if window else "not placed: resumed, or no clock logged",
            "energy_window_s": window[1] - window[0] if window else None,
        })  # fmt: skip

    def f(v: float | None, fmt: str) -> str:
        return "" if v is None else format(v, fmt)

    lines = [
        f"# GPU energy per cell: {a.results}",
        "",
        "| cell | time to target s | env steps to target | learner updates/s "
        "| wall s / 1k steps (evaluations in) "
        "| publish ms | learner's thread per publish ms | GPU Wh | GPU mean W | energy window |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['cell']} | {f(r['time_to_target_s'], '.1f')} | {f(r['steps_to_target'], ',')} "
            f"| {f(r['updates_per_s'], '.0f')} | {f(r['wall_s_per_1k_steps_evals_in'], '.2f')} "
            f"| {f(r['publish_ms'], '.0f')} | {f(r['publish_blocked_ms'], '.0f')} "
            f"| {f(r['gpu_wh'], '.2f')} | {f(r['gpu_mean_w'], '.0f')} "
            f"| {r['energy_window']}, {f(r['energy_window_s'], '.1f')} s |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    (a.results / "gpu_energy.md").write_text(text)
    (a.results / "gpu_energy.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
