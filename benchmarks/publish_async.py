"""What publishing costs the learner, in line and in the background (``publish_async``).

A DQN learner does real updates (random batches, fused Adam, one torch thread) and publishes
every ``--publish-every`` updates through :class:`actorq.experiment.Publisher` into the node
cache actors read (:class:`actorq.distributed.shm.SharedSnapshotCache`). Modes, interleaved
per repeat so that a busy spell of a shared machine hits each:

* ``none``: no publishing (the learner's ceiling);
* ``in line``: quantize + encode + write on the learner's thread (``--no-publish-async``, and
  every ``--actors 0`` run);
* ``background``: the learner's thread copies the weights; one thread quantizes, encodes and
  writes (the default with actor processes; a publish is skipped while one is in flight).

Per mode: learner updates/s (median over repeats) and its ratio to ``none``; what each publish
cost the learner's thread (ms); publishes made and skipped. The background thread needs a core
of its own to be free: on a 2-core machine the second core is the actors' in a real run.

    .venv/bin/python benchmarks/publish_async.py                       # 3x2048, int8, CPU
    .venv/bin/python benchmarks/publish_async.py --device cuda         # the learner on a GPU

Writes ``<out>/publish_async.json`` and ``<out>/publish_async.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from actorq.agents import builder_for
from actorq.agents.dqn.config import DQNConfig
from actorq.bench.machine import machine_info
from actorq.distributed.shm import SharedSnapshotCache
from actorq.experiment import Counters, Publisher

MODES = ("none", "in line", "background")


def _batch(rng: np.random.Generator, b: int) -> dict[str, np.ndarray]:
    return {
        "obs": rng.normal(size=(b, 4)).astype(np.float32),
        "next_obs": rng.normal(size=(b, 4)).astype(np.float32),
        "action": rng.integers(0, 2, b),
        "reward": np.ones(b, np.float32),
        "discount": np.full(b, 0.97, np.float32),
    }


def run_mode(mode: str, cfg: DQNConfig, updates: int, name: str) -> dict[str, Any]:
    builder = builder_for(cfg)
    spec = builder.env_spec(cfg)
    torch.manual_seed(0)
    learner = builder.make_learner(cfg, spec)
    io = builder.policy_io(cfg, spec, learner)
    pub = Publisher(cfg, io, asynchronous=mode == "background")
    first = pub.snapshot(0)
    cache = SharedSnapshotCache(name, int(len(first) * 1.1) + 65536, create=True)
    try:
        pub.backend = cache  # type: ignore[assignment]
        c = Counters()
        pub.publish(c, first)
        rng = np.random.default_rng(0)
        batches = [_batch(rng, cfg.batch_size) for _ in range(16)]
        for b in batches[:4]:  # warm-up: allocator, kernels, Adam state
            learner.update(b)
        if cfg.device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(updates):
            learner.update(batches[i % len(batches)])
            c.updates += 1
            if mode != "none" and c.updates % cfg.publish_every == 0:
                pub.publish(c)
        pub.settle()
        if cfg.device.startswith("cuda"):
            torch.cuda.synchronize()
        dt = time.perf_counter() - t
        return {
            "ups": updates / dt,
            "blocked_ms": pub.blocked_ms,
            "publish_ms": pub.mean_ms,
            "publishes": c.publishes,
            "skipped": pub.skipped,
        }
    finally:
        pub.close()
        cache.file.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hidden", default="2048,2048,2048")
    ap.add_argument("--precision", default="int8", choices=["fp32", "fp16", "int8", "int4"])
    ap.add_argument("--publish-every", type=int, default=10)
    ap.add_argument("--updates", type=int, default=100, help="updates per mode and repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/publish_async"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    hidden = tuple(int(h) for h in a.hidden.split(","))
    cfg = DQNConfig(
        hidden=hidden, precision=a.precision, publish_every=a.publish_every, device=a.device,
        actors=1, calibration="none",
    )  # fmt: skip
    cfg.validate()
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for r in range(a.repeats):
        for m in MODES:
            runs[m].append(run_mode(m, cfg, a.updates, f"actorq-pubbench-{os.getpid()}-{r}"))
            print(f"repeat {r} {m}: {runs[m][-1]['ups']:.2f} updates/s", flush=True)
    ups = {m: statistics.median(x["ups"] for x in v) for m, v in runs.items()}
    rows = []
    for m, v in runs.items():
        rows.append(
            {
                "mode": m,
                "updates_per_s": ups[m],
                "vs_none": ups[m] / ups["none"],
                "blocked_ms": statistics.median(x["blocked_ms"] for x in v),
                "publish_ms": statistics.median(x["publish_ms"] for x in v),
                "publishes": sum(x["publishes"] for x in v),
                "skipped": sum(x["skipped"] for x in v),
            }
        )
    title = (
        f"DQN learner {'x'.join(map(str, hidden))} on {a.device}, {a.precision} snapshots, "
        f"a publish every {a.publish_every} updates ({a.updates} updates x {a.repeats} repeats)"
    )
    t = Table(title=title)
    head = ["mode", "updates/s", "vs none", "learner ms per publish", "publish ms", "made", "skip"]
    for h in head:
        t.add_column(h, justify="left" if h == "mode" else "right")
    md = [f"# {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [
            row["mode"], f"{row['updates_per_s']:.2f}", f"{row['vs_none']:.2f}x",
            f"{row['blocked_ms']:.1f}", f"{row['publish_ms']:.1f}", str(row["publishes"]),
            str(row["skipped"]),
        ]  # fmt: skip
        t.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    Console(width=140).print(t)
    a.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "machine": machine_info(),
        "config": dataclasses.asdict(cfg),
        "args": {k: str(v) for k, v in vars(a).items()},
        "rows": rows,
        "runs": runs,
    }
    (a.out / "publish_async.json").write_text(json.dumps(payload, indent=1, default=str))
    (a.out / "publish_async.md").write_text("\n".join(md) + "\n")
    print(f"wrote {a.out}/publish_async.json and .md")


if __name__ == "__main__":
    main()
