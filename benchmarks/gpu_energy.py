"""The GPU's energy per bench cell, from the power samples `benchmarks/gpu_checks.sh` records.

Integrates nvidia-smi's power.draw (``power.csv``, every 0.5 s; the lent machines' CPU has no
energy counter) over each cell's training loop (its metrics.csv's wall-clock span), beside
QuaRL's per-cell columns: time and steps to target, updates/s, publish cost.

    .venv/bin/python benchmarks/gpu_energy.py benchmarks/results/quarl_dqn_gpu_h200

Writes RESULTS/gpu_energy.md and .json.
"""

from __future__ import annotations

import argparse
import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np


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


def cell_interval(cell: Path) -> tuple[float, float] | None:
    """Wall-clock span of the cell's logged training loop (metrics.csv's wall_time column)."""
    with (cell / "metrics.csv").open() as f:
        times = [float(r["wall_time"]) for r in csv.DictReader(f)]
    return (min(times), max(times)) if times else None


def energy(ts: np.ndarray, watts: np.ndarray, t0: float, t1: float) -> tuple[float, float] | None:
    """(Wh, mean W) over [t0, t1] from the samples inside it (trapezoids); None if the
    sampler did not cover the span."""
    inside = (ts >= t0) & (ts <= t1)
    if inside.sum() < 2 or ts[0] > t0 + 1 or ts[-1] < t1 - 1:
        return None
    t, w = ts[inside], watts[inside]
    joules = float(np.sum((w[1:] + w[:-1]) / 2 * np.diff(t)))
    return joules / 3600, joules / float(t[-1] - t[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a bench results directory holding power.csv")
    a = ap.parse_args()
    ts, watts = read_power(a.results / "power.csv")
    rows = []
    for cell in sorted(p for p in a.results.iterdir() if (p / "summary.json").is_file()):
        s = json.loads((cell / "summary.json").read_text())
        span = cell_interval(cell)
        e = energy(ts, watts, *span) if span else None
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
        })  # fmt: skip

    def f(v: float | None, fmt: str) -> str:
        return "" if v is None else format(v, fmt)

    lines = [
        f"# GPU energy per cell: {a.results}",
        "",
        "| cell | time to target s | env steps to target | learner updates/s "
        "| wall s / 1k steps (evaluations in) "
        "| publish ms | learner's thread per publish ms | GPU Wh | GPU mean W |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['cell']} | {f(r['time_to_target_s'], '.1f')} | {f(r['steps_to_target'], ',')} "
            f"| {f(r['updates_per_s'], '.0f')} | {f(r['wall_s_per_1k_steps_evals_in'], '.2f')} "
            f"| {f(r['publish_ms'], '.0f')} | {f(r['publish_blocked_ms'], '.0f')} "
            f"| {f(r['gpu_wh'], '.2f')} | {f(r['gpu_mean_w'], '.0f')} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    (a.results / "gpu_energy.md").write_text(text)
    (a.results / "gpu_energy.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
