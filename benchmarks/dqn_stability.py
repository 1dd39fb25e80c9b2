"""Why some DQN seeds never reach CartPole-v1's threshold: a sweep over the knobs that govern
Q-value divergence and learning speed, over seeds.

    .venv/bin/python benchmarks/dqn_stability.py --variants lr2.5e-4 lr1e-3_publish100 --seeds 0-4 \
        --budget 100000 --results benchmarks/results/dqn_stability/local
    .venv/bin/python benchmarks/dqn_stability.py --actors 0 --envs 32 ...   # repeatable cells

Each cell is one (variant, seed) run of ``actorq train dqn`` on the local backend with
``--actors`` actor processes x ``--envs`` environments (default 2 x 16, ``make run``'s), or,
with ``--actors 0``, one actor in the learner's process stepping ``--envs`` environments with
the same Ape-X epsilons, the rate limiter interleaving inserts and updates exactly: the same
learning rule without the timing noise (repeatable, but its seeds are not the local run's).
A cell stops at a confirmed 475 or the step budget.
Recorded per cell: reached, env steps to target, the largest logged mean Q
(``losses/q_values``; CartPole's returns bound Q by 1/(1-0.99) = 100, so a mean Q far above 100
is divergence), the final held-out return, the training time. Cells are written to
``<results>/<variant>-s<seed>.json`` and skipped when present (resumable).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from rich.console import Console
from rich.table import Table

from actorq import train
from actorq.agents.dqn.config import DQNConfig

# Each variant sets every field it depends on, so a cell means the same thing whatever DQNConfig's
# defaults are now. "lr2.5e-4" is DQNConfig as shipped before this sweep (target period 250
# updates, 32 samples per insert, a publish every 50 updates); "lr1e-3_publish100" is the
# configuration shipped after it.
OLD = {"learning_rate": 2.5e-4, "publish_every": 50, "target_update_period": 250, "n_step": 3}
VARIANTS: dict[str, dict[str, Any]] = {
    "lr2.5e-4": OLD,
    "alpha3": {**OLD, "epsilon_alpha": 3.0},
    "target1000": {**OLD, "target_update_period": 1000},
    "alpha3_target1000": {**OLD, "epsilon_alpha": 3.0, "target_update_period": 1000},
    "lr1e-3": {**OLD, "learning_rate": 1e-3},
    "lr1e-3_target125": {**OLD, "learning_rate": 1e-3, "target_update_period": 125},
    "lr1e-3_n5": {**OLD, "learning_rate": 1e-3, "n_step": 5},
    "lr1e-3_publish100": {**OLD, "learning_rate": 1e-3, "publish_every": 100},
}


def seeds_arg(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def max_q(run_dir: Path) -> float:
    best = float("-inf")
    with open(run_dir / "metrics.csv") as f:
        for row in csv.DictReader(f):
            if row["metric"] == "losses/q_values":
                best = max(best, float(row["value"]))
    return best


def run_cell(variant: str, seed: int, a: argparse.Namespace, out: Path) -> dict[str, Any]:
    run_dir = out / "runs" / f"{variant}-s{seed}"
    cfg = DQNConfig(
        actors=a.actors, envs_per_actor=a.envs, total_steps=a.budget, seed=seed,
        precision=a.precision,
        run_dir=str(run_dir), progress=False, log_every=5.0, energy=False, save_replay=False,
        **VARIANTS[variant],
    )  # fmt: skip
    t0 = time.perf_counter()
    r = train(cfg)
    return {
        "variant": variant,
        "seed": seed,
        "overrides": VARIANTS[variant],
        "budget": a.budget,
        "actors": a.actors,
        "envs": a.envs,
        "precision": a.precision,
        "reached": r.reached_target,
        "steps_to_target": r.steps_to_target,
        "time_to_target_s": r.time_to_target_s,
        "env_steps": r.env_steps,
        "updates": r.updates,
        "max_mean_q": max_q(run_dir),
        "final_eval": r.eval_return,
        "wall_s": time.perf_counter() - t0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--variants", nargs="+", default=["lr2.5e-4", "lr1e-3_publish100"], choices=sorted(VARIANTS)
    )
    ap.add_argument("--seeds", type=seeds_arg, default=seeds_arg("0-9"))
    ap.add_argument("--budget", type=int, default=300_000)
    ap.add_argument("--actors", type=int, default=2, help="actor processes (0: in-process)")
    ap.add_argument("--envs", type=int, default=16, help="environments per actor")
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/dqn_stability"))
    ap.add_argument("--report", action="store_true", help="tabulate the cells there; train none")
    a = ap.parse_args()
    a.results.mkdir(parents=True, exist_ok=True)
    cells: dict[str, list[dict[str, Any]]] = {v: [] for v in a.variants}
    for seed in a.seeds:
        for v in a.variants:
            path = a.results / f"{v}-s{seed}.json"
            if path.exists():
                cell = json.loads(path.read_text())
                theirs = (cell["budget"], cell["actors"], cell["envs"], cell["precision"])
                if theirs != (a.budget, a.actors, a.envs, a.precision):
                    print(
                        f"error: {path} was run with (budget, actors, envs, precision) = "
                        f"{theirs}; use another --results folder",
                        file=sys.stderr,
                    )
                    return 2
            elif a.report:
                continue
            else:
                cell = run_cell(v, seed, a, a.results)
                path.write_text(json.dumps(cell, indent=1))
            cells[v].append(cell)
            print(
                f"{v} s{seed}: reached={cell['reached']} steps={cell['steps_to_target']} "
                f"maxQ={cell['max_mean_q']:.0f} final={cell['final_eval']:.0f}",
                flush=True,
            )
    t = Table(title=f"DQN CartPole-v1, {a.actors} actors x {a.envs} envs, budget {a.budget:,}")
    for col in [
        "variant",
        "reached",
        "median steps (reached)",
        "largest mean Q",
        "seeds (k steps)",
    ]:
        t.add_column(col)
    for v, cs in cells.items():
        if not cs:
            continue
        hit = [c["steps_to_target"] for c in cs if c["reached"]]
        t.add_row(
            v,
            f"{len(hit)}/{len(cs)}",
            f"{statistics.median(hit):,.0f}" if hit else "-",
            f"{max(c['max_mean_q'] for c in cs):.0f}",
            " ".join(
                f"{c['seed']}:{c['steps_to_target'] // 1000 if c['reached'] else 'x'}" for c in cs
            ),
        )
    Console(width=140).print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
