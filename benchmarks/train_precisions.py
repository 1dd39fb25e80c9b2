"""Train an agent (DQN by default) on CartPole-v1 at each precision with its default settings
(DQN's are `make run`'s); print and save a table.

    .venv/bin/python benchmarks/train_precisions.py --precisions fp32,fp16,int8 --seeds 0
    .venv/bin/python benchmarks/train_precisions.py --precisions int8 --seeds 0,1,2 \
        --backends local,ray --name train_backends        # the same runs on Ray
    .venv/bin/python benchmarks/train_precisions.py --agent ppo --precisions int8,fp32 \
        --seeds 0,1,2 --name train_precisions_ppo         # PPO's defaults

Each run: 2 actors × the agent's envs per actor (local processes, or Ray actors with 2 replay
shards; DQN 16, PPO 4), stop when
the greedy evaluation reaches CartPole-v1's threshold (475) and a confirmation on fresh seeds
agrees. Reported per run: time and steps to target, the held-out final evaluation (quantized
and the same weights at fp32), int8/fp32 action agreement on 10,000 replay states, snapshot
bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from rich.console import Console
from rich.table import Table

from actorq import train
from actorq.agents import AGENTS, config_class


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--agent", default="dqn", choices=sorted(AGENTS))
    ap.add_argument("--precisions", default="fp32,fp16,int8")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--env", default="gym:CartPole-v1")
    ap.add_argument("--backends", default="local", help="comma-separated: local, ray")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--name", default="train_precisions", help="results file name")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    cells = [
        (b, seed, prec)
        for seed in [int(s) for s in a.seeds.split(",")]
        for prec in a.precisions.split(",")
        for b in a.backends.split(",")
    ]
    for backend, seed, prec in cells:
        env = a.env.replace(":", "-")
        run_dir = out / "runs" / f"{a.agent}-{env}-{prec}-{backend}-s{seed}-{int(time.time())}"
        r = train(
            config_class(a.agent)(
                env=a.env, precision=prec, actors=a.actors, seed=seed, backend=backend,
                run_dir=str(run_dir), progress=False, log_every=10.0,
            )
        )  # fmt: skip
        rows.append({"seed": seed, "backend": backend, **r.to_json()})
    envs = config_class(a.agent)().envs_per_actor
    t = Table(title=f"{a.agent.upper()} on {a.env}, {a.actors} actors × {envs} envs")
    cols = ["backend", "precision", "seed", "reached 475", "time to target s", "steps to target"]
    cols += ["final eval (held-out)", "same weights fp32", "agreement", "snapshot bytes"]
    for col in cols:
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["backend"], r["precision"], str(r["seed"]), "yes" if r["reached_target"] else "no",
            f"{r['time_to_target_s']:.1f}" if r["time_to_target_s"] else "-",
            str(r["steps_to_target"] or "-"),
            f"{r['eval_return']:.1f} ± {r['eval_return_std']:.1f}", f"{r['eval_return_fp32']:.1f}",
            f"{100 * r['action_agreement']:.2f}%", f"{r['snapshot_bytes']:,}",
        )  # fmt: skip
    Console(width=160).print(t)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "agent": a.agent,
    }
    (out / f"{a.name}.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
