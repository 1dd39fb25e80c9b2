"""The paper's setting on this CPU: when are the actors, not the learner, the bottleneck?

QuaRL's ActorQ speedups (Lam et al., TMLR 2022) come from *actor-bound* runs: wall-clock time is
set by how fast actors produce experience, so faster (quantized) actor inference shortens the
run. Whether a run is actor-bound is decided by the replay ratio the rate limiter enforces
(samples-per-insert, SPI): each inserted env step obliges the learner to sample SPI items, so
with the learner and the actors on their own cores the run moves at

    env steps/s = min(actor steps/s, learner samples/s / SPI)

and it is actor-bound while SPI < SPI* = learner samples/s / actor steps/s. This script measures
both sides on this machine with the project's own code, one core each (the way the local backend
runs one learner and one actor process on a 2-core machine):

* **actor**: env steps/s of one :class:`~actorq.core.loop.VectorActor` on CartPole-v1 with K
  environments running the policy at each precision (``actor_throughput.actor_sps``: the real
  loop, snapshot from the actor's cache, epsilon-greedy, n-step adder);
* **learner**: samples/s of :meth:`DQNLearner.update` (double, dueling DQN, Adam, the default
  config) at batch B, one torch thread;

and prints, per precision and K: SPI* (actor-bound below it), and at ``--spi``: the predicted
env steps/s, which side binds, the predicted speedup over fp32 actors at the same SPI, and the
hours a run of ``--env-steps`` steps takes. Results go to ``<out>/actor_bound.{json,md}``.

Command (docs/results.md, "The paper's setting on this CPU"; ~2 minutes)::

    .venv/bin/python benchmarks/actor_bound.py

Quick smoke run::

    .venv/bin/python benchmarks/actor_bound.py --hidden 64,64,64 --seconds 0.3 --out /tmp/ab
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from _machine import machine_info
from actor_throughput import actor_sps
from actorq.agents.dqn.builder import BUILDER
from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.learning import DQNLearner
from actorq.envs import env_spec
from actorq.quant.snapshot import make_snapshot

ENV_ID = "gym:CartPole-v1"


def learner_samples_per_s(
    hidden: tuple[int, ...], batch: int, seconds: float, trials: int
) -> dict[str, Any]:
    """Samples/s of the real DQN learner update at ``batch`` (median of ``trials``)."""
    spec = env_spec(ENV_ID)
    cfg = DQNConfig(hidden=hidden, batch_size=batch)
    learner = DQNLearner(cfg, spec)
    rng = np.random.default_rng(0)
    data = {
        "obs": rng.standard_normal((batch, spec.obs_dim)).astype(np.float32),
        "action": rng.integers(0, spec.num_actions, batch),
        "reward": rng.standard_normal(batch).astype(np.float32),
        "discount": np.full(batch, 0.97, np.float32),
        "next_obs": rng.standard_normal((batch, spec.obs_dim)).astype(np.float32),
    }
    for _ in range(3):  # warm-up: allocations, Adam state
        learner.update(data)
    t = time.perf_counter()
    learner.update(data)
    per = max(time.perf_counter() - t, 1e-6)
    n = max(2, round(seconds / trials / per))
    times = []
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(n):
            learner.update(data)
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    return {"batch": batch, "updates_per_s": n / med, "samples_per_s": n * batch / med}


def predict(actor: float, learner: float, spi: float) -> tuple[float, str]:
    """Env steps/s of a run at ``spi`` with actor and learner on their own cores, and its bound."""
    learner_cap = learner / spi
    return (actor, "actor") if actor <= learner_cap else (learner_cap, "learner")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hidden", default="2048,2048,2048", help="the policy's (and Q-net's) widths")
    p.add_argument("--ks", default="1,16", help="environments per actor")
    p.add_argument("--precisions", default="fp32,fp16,int8,int4")
    p.add_argument("--batch", type=int, default=32, help="learner batch size")
    p.add_argument("--spi", type=float, default=0.05, help="samples-per-insert to evaluate")
    p.add_argument("--env-steps", type=int, default=1_000_000, help="run length for the hours")
    p.add_argument("--seconds", type=float, default=3.0, help="per measured cell")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--out", default="benchmarks/results")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    hidden = tuple(int(x) for x in args.hidden.split(","))
    ks = [int(x) for x in args.ks.split(",")]
    precs = args.precisions.split(",")
    console = Console()

    spec = env_spec(ENV_ID)
    cfg = DQNConfig(hidden=hidden)
    torch.manual_seed(0)
    layers = DQNLearner(cfg, spec).policy_layers()  # the default (dueling) net, as trained
    pspec = BUILDER.policy_spec(cfg, spec)
    snaps = {pr: make_snapshot(layers, pspec, pr, version=1) for pr in precs}

    info = machine_info()
    console.print(f"learner update, batch {args.batch}, 1 thread ...")
    learner = learner_samples_per_s(hidden, args.batch, args.seconds, args.trials)
    console.print(
        f"  {learner['updates_per_s']:.2f} updates/s = {learner['samples_per_s']:.0f} samples/s"
    )
    rows: list[dict[str, Any]] = []
    for k in ks:
        for pr in precs:
            a = actor_sps(snaps[pr], "ort", k, args.seconds, args.trials)["env_steps_per_s"]
            console.print(f"  actor K={k:<2} {pr}: {a:,.0f} env steps/s")
            sps, bound = predict(a, learner["samples_per_s"], args.spi)
            rows.append(
                {
                    "k": k,
                    "precision": pr,
                    "snapshot_bytes": len(snaps[pr].to_bytes()),
                    "actor_steps_per_s": a,
                    "spi_balance": learner["samples_per_s"] / a,
                    "spi": args.spi,
                    "predicted_steps_per_s": sps,
                    "bound": bound,
                    "hours_for_env_steps": args.env_steps / sps / 3600,
                    "updates_in_run": args.env_steps * args.spi / args.batch,
                }
            )
    for r in rows:
        f32 = next(x for x in rows if x["k"] == r["k"] and x["precision"] == "fp32")
        r["actor_speedup_vs_fp32"] = r["actor_steps_per_s"] / f32["actor_steps_per_s"]
        r["predicted_speedup_vs_fp32"] = r["predicted_steps_per_s"] / f32["predicted_steps_per_s"]

    cols = ["K", "precision", "actor steps/s", "actor vs fp32", "SPI* (actor-bound below)",
            f"at SPI {args.spi:g}: steps/s", "bound", "speedup vs fp32",
            f"hours for {args.env_steps:,} steps"]  # fmt: skip
    table = Table(title=f"actor-bound check · 3×{hidden[0]} DQN, learner batch {args.batch}")
    for c in cols:
        table.add_column(c, justify="right")
    md_rows = []
    for r in rows:
        cells = [
            str(r["k"]),
            r["precision"],
            f"{r['actor_steps_per_s']:,.0f}",
            f"{r['actor_speedup_vs_fp32']:.2f}×",
            f"{r['spi_balance']:.3f}",
            f"{r['predicted_steps_per_s']:,.0f}",
            r["bound"],
            f"{r['predicted_speedup_vs_fp32']:.2f}×",
            f"{r['hours_for_env_steps']:.2f}",
        ]
        table.add_row(*cells)
        md_rows.append("| " + " | ".join(cells) + " |")
    console.print(table)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = "python benchmarks/actor_bound.py " + " ".join(argv or sys.argv[1:])
    lines = [
        "# Actor-bound check: actor steps/s vs learner samples/s (one core each)",
        "",
        f"`{cmd.strip()}`",
        "",
        f"- date: {info.get('date')}; CPU: {info.get('cpu_model')} ({info.get('cores')} cores); "
        f"load at start: "
        f"{info.get('load_avg_at_start')}; commit {str(info.get('git_commit'))[:10]}",
        f"- learner: DQNLearner.update, {hidden} dueling double DQN, batch {args.batch}, 1 torch "
        f"thread: {learner['updates_per_s']:.2f} updates/s = {learner['samples_per_s']:.0f} "
        f"samples/s",
        f"- actor: one VectorActor on {ENV_ID}, ORT runtime, 1 thread; median of {args.trials} "
        f"trials of ~{args.seconds / args.trials:.1f} s",
        f"- a run of {args.env_steps:,} env steps at SPI {args.spi:g} makes "
        f"{args.env_steps * args.spi / args.batch:,.0f} learner updates",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
        *md_rows,
        "",
    ]
    (out / "actor_bound.md").write_text("\n".join(lines))
    (out / "actor_bound.json").write_text(
        json.dumps(
            {"machine": info, "args": vars(args), "learner": learner, "rows": rows}, indent=1
        )
    )
    console.print(f"wrote {out / 'actor_bound.md'} and {out / 'actor_bound.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
