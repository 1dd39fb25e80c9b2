"""What one GO learner update costs on the CPU and on a GPU (``--device cuda``), 1k to 80k ops.

GO's learner (Zhou et al., NeurIPS 2020; :class:`actorq.agents.go.learning.GOLearner`) runs
PPO's clipped surrogate with self-imitation over whole-graph decisions: per update and epoch,
one forward and backward pass of the graph network over every op of each graph in the batch.
On large graphs that pass, not the actors' simulations, can bound a run; this benchmark says
how much a GPU learner buys.

For each graph (any name :func:`actorq.graphopt.get_graph` takes: seeded synthetic DAGs
``synthetic-N-sS``, suite graphs) and each device, a learner with the default network
(GOConfig's defaults: 3 GraphSAGE and 2 segment-attention layers, width 64, 4 epochs per
update, self-imitation on) does ``--warmup`` updates and then ``--updates`` timed ones, each
on ``--decisions`` decisions sampled from its own policy with random rewards; then
``--updates`` publishes (the snapshot actors load: ONNX export at int8, weights read back to
the host). Reported per row: ms per update (median), decisions learned from per second, ms per
publish (median), the GPU's peak memory, and each device's time over the CPU's.

CPU rows use ``--threads`` torch threads (default: every core the process may use), so on a
GPU machine the CPU row is that machine's whole CPU, not one core.

    .venv/bin/python benchmarks/go_learner_device.py --devices cpu --sizes 1000 10000
    python3 benchmarks/go_learner_device.py --devices cpu cuda   # on a GPU machine

Writes ``<out>/go_learner_device.json`` and ``<out>/go_learner_device.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from actorq.agents.go.actor import HEADS
from actorq.agents.go.builder import BUILDER
from actorq.agents.go.config import GOConfig
from actorq.bench.machine import machine_info


def _batch(learner: Any, k: int, rng: np.random.Generator) -> dict[str, Any]:
    """``k`` decisions sampled from the learner's policy on its graph, random rewards."""
    task = learner.tasks[0]
    with torch.no_grad():
        out = {h: v.cpu().numpy() for h, v in learner.model(**learner._inputs[0]).items()}
    n = task.num_ops
    actions = np.zeros((k, n, len(HEADS)), np.int8)
    logp = np.zeros((k, n, len(HEADS)), np.float32)
    for j in range(k):
        actions[j], logp[j] = task.decide(out, rng)
    reward = -np.sqrt(rng.uniform(0.5, 1.5, k)).astype(np.float32)
    return {"graph": np.zeros(k, np.int32), "actions": actions, "log_prob": logp,
            "reward": reward}  # fmt: skip


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(graph: str, device: str, a: argparse.Namespace) -> dict[str, Any]:
    cfg = GOConfig(
        env=f"graphopt:placement/{graph}", actors=0, device=device, batch_graphs=a.decisions,
        envs_per_actor=a.decisions, sil_coef=1.0, progress=False, energy=False,
        precision="int8",  # the publishes the committed results timed
    )  # fmt: skip
    cfg.validate()
    t0 = time.perf_counter()
    spec = BUILDER.env_spec(cfg)
    learner = BUILDER.make_learner(cfg, spec)
    io = BUILDER.policy_io(cfg, spec, learner)
    setup_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    batches = [_batch(learner, a.decisions, rng) for _ in range(2)]
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    for i in range(a.warmup):
        learner.update(batches[i % 2])
    times = []
    for i in range(a.updates):
        _sync(device)
        t = time.perf_counter()
        learner.update(batches[i % 2])
        _sync(device)
        times.append(time.perf_counter() - t)
    publish = []
    for i in range(a.updates):
        t = time.perf_counter()
        io.snapshot(i, "int8")
        publish.append(time.perf_counter() - t)
    update_s = statistics.median(times)
    return {
        "graph": graph,
        "ops": learner.tasks[0].num_ops,
        "device": device,
        "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "threads": torch.get_num_threads(),
        "update_ms": 1e3 * update_s,
        "update_ms_all": [1e3 * t for t in times],
        "decisions_per_s": a.decisions / update_s,
        "publish_ms": 1e3 * statistics.median(publish),
        "peak_gpu_mib": (
            torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None
        ),
        "setup_s": setup_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 80000],
                    help="synthetic graphs of these many ops (synthetic-N-s0)")  # fmt: skip
    ap.add_argument("--graphs", nargs="*", default=[], help="more graphs by name")
    ap.add_argument("--devices", nargs="+", default=["cpu", "cuda"])
    ap.add_argument("--decisions", type=int, default=32, help="decisions per update")
    ap.add_argument("--updates", type=int, default=5, help="timed updates (and publishes)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="CPU torch threads (0: all cores)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/go_learner_device"))
    a = ap.parse_args()
    for d in a.devices:
        if d.startswith("cuda") and not torch.cuda.is_available():
            ap.error(f"--devices {d}: torch sees no CUDA device here")
    threads = a.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    graphs = [f"synthetic-{n}-s0" for n in a.sizes] + list(a.graphs)
    rows = []
    for g in graphs:
        for d in a.devices:
            r = measure(g, d, a)
            rows.append(r)
            print(f"{g} on {d}: {r['update_ms']:.1f} ms per update, "
                  f"{r['publish_ms']:.1f} ms per publish", flush=True)  # fmt: skip
    cpu = {r["graph"]: r["update_ms"] for r in rows if r["device"] == "cpu"}
    table = Table(
        title=f"GO learner: one PPO update ({a.decisions} decisions, 4 epochs) and one int8 "
        f"publish; CPU rows on {threads} threads"
    )
    for col in ("graph", "ops", "device", "ms / update", "decisions / s", "vs CPU",
                "ms / publish", "peak GPU MiB"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("graph", "device") else "right")
    lines = [
        "| graph | ops | device | ms / update | decisions / s | vs CPU | ms / publish | "
        "peak GPU MiB |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = cpu.get(r["graph"])
        vs = f"{ratio / r['update_ms']:.1f}x" if ratio else "-"
        mem = "-" if r["peak_gpu_mib"] is None else f"{r['peak_gpu_mib']:.0f}"
        cells = [r["graph"], f"{r['ops']:,}", r["device_name"], f"{r['update_ms']:.1f}",
                 f"{r['decisions_per_s']:.0f}", vs, f"{r['publish_ms']:.1f}", mem]  # fmt: skip
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    Console().print(table)
    a.out.mkdir(parents=True, exist_ok=True)
    res = {"args": {k: str(v) for k, v in vars(a).items()}, "machine": machine_info(),
           "rows": rows}  # fmt: skip
    (a.out / "go_learner_device.json").write_text(json.dumps(res, indent=1))
    (a.out / "go_learner_device.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
