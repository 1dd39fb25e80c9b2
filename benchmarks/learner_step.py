"""What one DQN learner update and one publish cost, in one process on one thread: the numbers
behind DQN's defaults (fused Adam, a publish every 100 updates).

    .venv/bin/python benchmarks/learner_step.py

Times, median over interleaved repeats (so a busy spell of a shared machine hits every row):
an Adam step alone, a whole update (forward, backward, clip, Adam) with torch's default Adam and
with the fused one, and a publish (quantize + encode the snapshot) at fp32, at int8 rounded to
nearest and at int8 with GPTQ on 1,024 states (DQN's default ``--calibration auto`` at width 256).
Writes benchmarks/results/learner_step.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.learning import DQNLearner
from actorq.bench.machine import machine_info
from actorq.envs import env_spec
from actorq.quant.snapshot import PolicySpec, make_snapshot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hidden", default="256,256")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/learner_step.json"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    hidden = tuple(int(h) for h in a.hidden.split(","))
    spec = env_spec("gym:CartPole-v1")
    rng = np.random.default_rng(0)
    b = a.batch
    batch = {
        "obs": rng.normal(size=(b, 4)).astype(np.float32),
        "next_obs": rng.normal(size=(b, 4)).astype(np.float32),
        "action": rng.integers(0, 2, b),
        "reward": np.ones(b, np.float32),
        "discount": np.full(b, 0.97, np.float32),
    }
    calib = rng.normal(size=(1024, 4)).astype(np.float32)
    pspec = PolicySpec(4, hidden, 2, head="q")
    learners = {}
    for name, fused in (("default", False), ("fused", True)):
        torch.manual_seed(0)
        learner = DQNLearner(DQNConfig(hidden=hidden), spec)
        learner.opt = torch.optim.Adam(learner.q.parameters(), lr=1e-3, eps=1e-5, fused=fused)
        for _ in range(20):
            learner.update(batch)
        learners[name] = learner

    def adam_step(name: str) -> Callable[[], None]:
        return lambda: learners[name].opt.step()

    def update(name: str) -> Callable[[], None]:
        return lambda: learners[name].update(batch) and None

    def publish(precision: str, gptq: bool) -> Callable[[], None]:
        layers = learners["fused"].policy_layers()
        cal = calib if gptq else None
        return lambda: make_snapshot(layers, pspec, precision, 1, "per_channel", cal).to_bytes()

    rows: dict[str, Callable[[], None]] = {
        "Adam step, torch default": adam_step("default"),
        "Adam step, fused": adam_step("fused"),
        "update, default Adam": update("default"),
        "update, fused Adam": update("fused"),
        "publish fp32": publish("fp32", False),
        "publish int8, round to nearest": publish("int8", False),
        "publish int8, GPTQ (1,024 states)": publish("int8", True),
    }
    inner = {k: (3 if k.startswith("publish int8, G") else 50) for k in rows}
    times: dict[str, list[float]] = {k: [] for k in rows}
    for _ in range(a.repeats):
        for k, fn in rows.items():
            t = time.perf_counter()
            for _ in range(inner[k]):
                fn()
            times[k].append((time.perf_counter() - t) / inner[k])
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    t = Table(title=f"DQN learner, {'x'.join(map(str, hidden))}, batch {b}, one thread")
    t.add_column("what")
    t.add_column("ms (median)", justify="right")
    t.add_column("in updates (fused)", justify="right")
    for k, v in ms.items():
        t.add_row(k, f"{v:.3f}", f"{v / ms['update, fused Adam']:.2f}")
    Console(width=120).print(t)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps({"machine": machine_info(), "hidden": hidden, "batch": b, "ms": ms}, indent=1)
    )
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
