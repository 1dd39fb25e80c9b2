"""D4PG on continuous control at fp32 and int8: returns and wall-clock curves, action closeness.

    .venv/bin/python benchmarks/d4pg_control.py --envs dmc:cartpole-swingup,dmc:walker-stand \\
        --precisions fp32,int8 --seeds 0,1,2 --steps 100000

Each run: the local backend with ``--actors`` actor processes × 16 envs, the default D4PG
config (policy 256×256×256, critic 512×512×256, n-step 5, batch 256, samples-per-insert 32 for
every precision), a fixed budget of environment steps, greedy evaluation (10 episodes, the
actors' snapshot) every ``--eval-every`` steps. Reported per run: the evaluation curve against
env steps and wall-clock seconds, the final held-out evaluation at the run's precision and of
the same weights at fp32, and, on 10,000 replay states, mean |a_quantized - a_fp32| and the share
of states whose actions are all within 0.05 (actions in [-1, 1]).

Writes ``<out>/d4pg_control.json`` and ``<out>/d4pg_control.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from _machine import machine_info
from actorq.agents.d4pg.config import D4PGConfig
from actorq.experiment import train


def eval_curve(run_dir: Path) -> list[dict[str, float]]:
    """(env steps, wall seconds since the run's first log line, eval return) from metrics.csv."""
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))  # noqa: SIM115
    if not rows:
        return []
    t0 = float(rows[0]["wall_time"])
    return [
        {"step": int(r["step"]), "wall_s": float(r["wall_time"]) - t0, "return": float(r["value"])}
        for r in rows
        if r["metric"] == "charts/eval_return"
    ]


def summary_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Per (env, policy, precision): the evaluation curve and final numbers, mean over seeds."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["env"], r["hidden"], r["precision"]), []).append(r)
    out = [
        "",
        "Mean over seeds:",
        "",
        "| env | policy | precision | seeds | eval return at each evaluation | wall s at the end | "
        "final eval (held-out) | mean abs Δa | within 0.05 (worst seed) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (env, hidden, prec), rs in sorted(groups.items()):
        n = min(len(r["curve"]) for r in rs)
        curve = [statistics.mean(r["curve"][i]["return"] for r in rs) for i in range(n)]
        steps = [rs[0]["curve"][i]["step"] for i in range(n)]
        pts = " / ".join(f"{v:.0f}" for v in curve)
        wall = statistics.mean(r["curve"][n - 1]["wall_s"] for r in rs) if n else float("nan")
        mad = statistics.mean(r.get("action_mean_abs_diff") or 0.0 for r in rs)
        worst = min(r["action_agreement"] for r in rs)
        final = statistics.mean(r["eval_return"] for r in rs)
        out.append(
            f"| {env} | {hidden} | {prec} | {len(rs)} | {pts} (at {', '.join(map(str, steps))}) | "
            f"{wall:.0f} | {final:.1f} | {mad:.4f} | {100 * worst:.2f}% |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--envs", default="dmc:cartpole-swingup,dmc:walker-stand")
    ap.add_argument("--precisions", default="fp32,int8")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--eval-every", type=int, default=10_000)
    ap.add_argument("--actors", type=int, default=1)
    ap.add_argument("--hidden", default="256,256,256", help="policy widths")
    ap.add_argument("--out", default="benchmarks/results")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "d4pg_control.json"
    runs: list[dict[str, Any]] = []
    if results_path.exists():  # resumable: finished cells are kept and skipped
        runs = json.loads(results_path.read_text())["runs"]
    done = {(r["env"], r["precision"], r["seed"], r["total_steps"], r["hidden"]) for r in runs}
    for env in a.envs.split(","):
        for seed in [int(s) for s in a.seeds.split(",")]:
            for prec in a.precisions.split(","):
                key = (env, prec, seed, a.steps, a.hidden)
                if key in done:
                    continue
                tag = f"d4pg-{env.replace(':', '-')}-{prec}-s{seed}-{int(time.time())}"
                run_dir = out / "runs" / tag
                print(f"== {env} {prec} seed {seed}: {a.steps} steps -> {run_dir}", flush=True)
                cfg = D4PGConfig(
                    env=env, precision=prec, seed=seed, actors=a.actors, total_steps=a.steps,
                    eval_every=a.eval_every, policy_hidden_sizes=a.hidden,  # type: ignore[arg-type]
                    run_dir=str(run_dir), progress=False, log_every=10.0,
                )  # fmt: skip
                r = train(cfg)
                runs.append(
                    {
                        **r.to_json(),
                        "seed": seed,
                        "total_steps": a.steps,
                        "hidden": a.hidden,
                        "curve": eval_curve(run_dir),
                    }
                )
                meta = {"machine": machine_info(), "command": "benchmarks/d4pg_control.py"}
                results_path.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1))
    lines = [
        "# D4PG on continuous control, fp32 vs int8",
        "",
        "| env | policy | precision | seed | env steps | wall s | final eval (held-out) | "
        "same weights fp32 | mean abs Δa | within 0.05 | snapshot bytes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        mad = r.get("action_mean_abs_diff")
        lines.append(
            f"| {r['env']} | {r['hidden']} | {r['precision']} | {r['seed']} | {r['env_steps']:,} | "
            f"{r['wall_time_s']:.0f} | {r['eval_return']:.1f} ± {r['eval_return_std']:.1f} | "
            f"{r['eval_return_fp32']:.1f} | {'—' if mad is None else f'{mad:.4f}'} | "
            f"{100 * r['action_agreement']:.2f}% | {r['snapshot_bytes']:,} |"
        )
    lines += summary_lines(runs)
    lines += ["", "Evaluation curves (env steps: return @ wall seconds):", ""]
    for r in runs:
        pts = ", ".join(f"{p['step']}: {p['return']:.0f} @ {p['wall_s']:.0f}s" for p in r["curve"])
        lines.append(f"- {r['env']} {r['precision']} s{r['seed']}: {pts}")
    (out / "d4pg_control.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
