"""Snapshot size and publish/decode/swap cost, by policy size and precision.

Seeded random MLPs ``4 → 3×W → 2`` (W in 64 … 2048) and the paper's ``24 → 3×2048 → 6`` at fp32,
fp16, int8 (per channel, per tensor, GPTQ) and int4: bytes, publish ms (export + quantize +
serialize), decode and ORT build ms (an actor's swap); medians over ``--repeats``, one thread.
``learner-step``: one DQN update (torch's Adam, fused) and one publish, in ms. ``publish-async``:
a 3×2048 DQN learner publishing not at all, in line or in the background, updates/s per mode.

    .venv/bin/python benchmarks/snapshot_publish.py --repeats 1 --out /tmp/bench_smoke
    .venv/bin/python benchmarks/snapshot_publish.py learner-step --out /tmp/learner_step.json
    .venv/bin/python benchmarks/snapshot_publish.py publish-async --updates 60 --repeats 6
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _machine import machine_info, md_table, subcommands
from actorq.agents import builder_for
from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.learning import DQNLearner
from actorq.agents.dqn.networks import MLP
from actorq.distributed.shm import SharedSnapshotCache
from actorq.envs import env_spec
from actorq.experiment import Counters, Publisher
from actorq.quant.quantizer import Granularity
from actorq.quant.runtimes import OrtRuntime
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot

SEED = 0
INT8_MAX_RATIO = 0.27  # int8 snapshot of a 3×2048 policy: at most this fraction of fp32 bytes
CHECK_WIDTH = 2048


@dataclasses.dataclass(frozen=True)
class Policy:
    label: str
    obs_dim: int
    hidden: tuple[int, ...]
    out_dim: int


POLICIES: tuple[Policy, ...] = (
    *(Policy(f"4→3×{w}→2", 4, (w, w, w), 2) for w in (64, 256, 1024, 2048)),
    Policy("24→3×2048→6 (paper)", 24, (2048, 2048, 2048), 6),
)

#: (label, precision, granularity, GPTQ-calibrated rounding)
PRECISIONS: tuple[tuple[str, str, Granularity, bool], ...] = (
    ("fp32", "fp32", "per_channel", False), ("fp16", "fp16", "per_channel", False),
    ("int8 per_channel", "int8", "per_channel", False),
    ("int8 per_tensor", "int8", "per_tensor", False),
    ("int8 per_channel + GPTQ", "int8", "per_channel", True),
    ("int4 block32", "int4", "per_channel", False),  # granularity does not apply to int4
)  # fmt: skip
#: Calibration states per publish (DQNConfig.calibration_states' default).
CALIBRATION_STATES = 1024


def ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


def measure(
    net: MLP, policy: Policy, precision: str, granularity: Granularity, repeats: int,
    gptq: bool = False,
) -> dict[str, Any]:  # fmt: skip
    spec = PolicySpec(obs_dim=policy.obs_dim, hidden=policy.hidden, out_dim=policy.out_dim)
    calib = None
    if gptq:
        rng = np.random.default_rng(0)
        calib = rng.standard_normal((CALIBRATION_STATES, policy.obs_dim)).astype(np.float32)
    parts: dict[str, list[float]] = {
        k: [] for k in ("export", "quantize", "serialize", "publish", "decode", "ort_build")
    }
    data = b""
    for i in range(repeats + 1):  # iteration 0 is an untimed warm-up
        t0 = time.perf_counter()
        layers = net.export_layers()
        t1 = time.perf_counter()
        snap = make_snapshot(layers, spec, precision, i + 1, granularity, calibration=calib)
        t2 = time.perf_counter()
        data = snap.to_bytes()
        t3 = time.perf_counter()
        decoded = PolicySnapshot.from_bytes(data)
        t4 = time.perf_counter()
        runtime = OrtRuntime(decoded, threads=1)
        t5 = time.perf_counter()
        del runtime, decoded, snap, layers
        if i == 0:
            continue
        spans = (t1 - t0, t2 - t1, t3 - t2, t3 - t0, t4 - t3, t5 - t4)
        for v, k in zip(spans, parts, strict=True):  # parts' order
            parts[k].append(v)
    result: dict[str, Any] = {
        "policy": policy.label, "obs_dim": policy.obs_dim, "hidden": list(policy.hidden),
        "out_dim": policy.out_dim, "num_params": spec.num_params, "precision": precision,
        "granularity": {"int8": granularity, "int4": "block32"}.get(precision),
        "bytes": len(data), "repeats": repeats,
    }  # fmt: skip
    for k, v in parts.items():
        result[f"{k}_ms"] = ms(v)
    result["swap_ms"] = result["decode_ms"] + result["ort_build_ms"]
    return result


HEADERS = ["policy", "params", "precision", "bytes", "vs fp32", "publish ms",
           "(export / quantize / serialize)", "decode ms", "ORT build ms", "swap ms"]  # fmt: skip


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [r["policy"], f"{r['num_params']:,}", r["label"], f"{r['bytes']:,}",
         f"{r['ratio_to_fp32']:.1%}", f"{r['publish_ms']:.2f}",
         f"{r['export_ms']:.2f} / {r['quantize_ms']:.2f} / {r['serialize_ms']:.2f}",
         f"{r['decode_ms']:.2f}", f"{r['ort_build_ms']:.2f}", f"{r['swap_ms']:.2f}"]
        for r in rows
    ]  # fmt: skip


def check_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"target": f"{r['policy']} {r['label']}: bytes ≤ {INT8_MAX_RATIO:.0%} of fp32",
         "value": r["ratio_to_fp32"], "bound": INT8_MAX_RATIO,
         "holds": r["ratio_to_fp32"] <= INT8_MAX_RATIO}
        for r in rows if r["precision"] == "int8" and r["hidden"] == [CHECK_WIDTH] * 3
    ]  # fmt: skip


def write_markdown(
    path: Path, machine: dict[str, Any], config: dict[str, Any], rows: list[dict[str, Any]],
    checks: list[dict[str, Any]],
) -> None:  # fmt: skip
    lines = [
        "# Snapshot size and publish / decode / swap cost",
        "", f"`{config['command']}`", "", f"- date: {machine['date']}",
        f"- CPU: {machine['cpu_model']} ({machine['cores']} cores), 1 thread",
        f"- load average at start: {machine['load_avg_at_start']}",
        f"- python {machine['python']}, torch {machine['torch']}, "
        f"onnxruntime {machine['onnxruntime']}, numpy {machine['numpy']}",
        f"- times: median of {config['repeats']} repeats after one warm-up; publish = "
        "export_layers + make_snapshot + to_bytes; swap = from_bytes + OrtRuntime",
        "",
        *md_table(HEADERS, table_rows(rows)),
    ]  # fmt: skip
    lines += ["", "Checks:", ""]
    lines += [f"- {'PASS' if c['holds'] else 'FAIL'}: {c['target']} (measured {c['value']:.1%})"
              for c in checks]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeats", type=int, default=10, help="timed repeats per cell (median)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    if args.repeats <= 0:
        ap.error("--repeats must be positive")

    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    config = {
        "command": f"python benchmarks/snapshot_publish.py --repeats {args.repeats} "
        f"--out {args.out}", "repeats": args.repeats, "seed": SEED, "threads": 1,
        "policies": [dataclasses.asdict(p) for p in POLICIES],
    }  # fmt: skip
    print(f"snapshot publish on {machine['cpu_model']} ({machine['cores']} cores)", flush=True)

    rows: list[dict[str, Any]] = []
    for policy in POLICIES:
        torch.manual_seed(SEED)
        net = MLP(policy.obs_dim, policy.hidden, policy.out_dim)
        fp32_bytes: int | None = None
        for label, precision, granularity, gptq in PRECISIONS:
            r = measure(net, policy, precision, granularity, args.repeats, gptq)
            if precision == "fp32":
                fp32_bytes = r["bytes"]
            assert fp32_bytes is not None  # fp32 comes first
            r["label"] = label
            r["ratio_to_fp32"] = r["bytes"] / fp32_bytes
            rows.append(r)
            print(
                f"  {policy.label} {label}: {r['bytes']:,} B, {r['publish_ms']:.2f} ms", flush=True
            )

    checks = check_targets(rows)
    results = {"benchmark": "snapshot_publish", "machine": machine, "config": config,
               "rows": rows, "checks": checks}  # fmt: skip
    json_path = args.out / "snapshot_publish.json"
    md_path = args.out / "snapshot_publish.md"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    write_markdown(md_path, machine, config, rows, checks)
    print(md_path.read_text() + f"wrote {json_path} and {md_path}")
    return 0


def _batch(rng: np.random.Generator, b: int) -> dict[str, np.ndarray]:
    return {
        "obs": rng.normal(size=(b, 4)).astype(np.float32),
        "next_obs": rng.normal(size=(b, 4)).astype(np.float32), "action": rng.integers(0, 2, b),
        "reward": np.ones(b, np.float32), "discount": np.full(b, 0.97, np.float32),
    }  # fmt: skip


# ---- learner-step: one update and one publish (see the module docstring)


def main_learner_step() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
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
    batch = _batch(rng, b)
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
        "Adam step, torch default": adam_step("default"), "Adam step, fused": adam_step("fused"),
        "update, default Adam": update("default"), "update, fused Adam": update("fused"),
        "publish fp32": publish("fp32", False),
        "publish int8, round to nearest": publish("int8", False),
        "publish int8, GPTQ (1,024 states)": publish("int8", True),
    }  # fmt: skip
    inner = {k: (3 if k.startswith("publish int8, G") else 50) for k in rows}
    times: dict[str, list[float]] = {k: [] for k in rows}
    for _ in range(a.repeats):
        for k, fn in rows.items():
            t = time.perf_counter()
            for _ in range(inner[k]):
                fn()
            times[k].append((time.perf_counter() - t) / inner[k])
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    print(f"DQN learner, {'x'.join(map(str, hidden))}, batch {b}, one thread")
    rows_ms = [[k, f"{v:.3f}", f"{v / ms['update, fused Adam']:.2f}"] for k, v in ms.items()]
    print("\n".join(md_table(["what", "ms (median)", "in updates (fused)"], rows_ms)))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps({"machine": machine_info(), "hidden": hidden, "batch": b, "ms": ms}, indent=1)
    )
    print(f"wrote {a.out}")


# ---- publish-async: publishing in line and in the background

MODES = ("none", "in line", "background")


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
        blocked_ms = 1e3 * float(np.mean(pub.blocked)) if pub.blocked else 0.0
        publish_ms = 1e3 * float(np.mean(pub.times)) if pub.times else 0.0
        return {"ups": updates / dt, "blocked_ms": blocked_ms, "publish_ms": publish_ms,
                "publishes": c.publishes, "skipped": pub.skipped}  # fmt: skip
    finally:
        pub.close()
        cache.file.unlink()


def main_publish_async() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
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
    rows = [
        {"mode": m, "updates_per_s": ups[m], "vs_none": ups[m] / ups["none"],
         "blocked_ms": statistics.median(x["blocked_ms"] for x in v),
         "publish_ms": statistics.median(x["publish_ms"] for x in v),
         "publishes": sum(x["publishes"] for x in v), "skipped": sum(x["skipped"] for x in v)}
        for m, v in runs.items()
    ]  # fmt: skip
    title = (
        f"DQN learner {'x'.join(map(str, hidden))} on {a.device}, {a.precision} snapshots, "
        f"a publish every {a.publish_every} updates ({a.updates} updates x {a.repeats} repeats)"
    )
    head = ["mode", "updates/s", "vs none", "learner ms per publish", "publish ms", "made", "skip"]
    md = [f"# {title}", "", *md_table(head, [[
        row["mode"], f"{row['updates_per_s']:.2f}", f"{row['vs_none']:.2f}x",
        f"{row['blocked_ms']:.1f}", f"{row['publish_ms']:.1f}", str(row["publishes"]),
        str(row["skipped"])] for row in rows])]  # fmt: skip
    print("\n".join(md))
    a.out.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine_info(), "config": dataclasses.asdict(cfg),
               "args": {k: str(v) for k, v in vars(a).items()},
               "rows": rows, "runs": runs}  # fmt: skip
    (a.out / "publish_async.json").write_text(json.dumps(payload, indent=1, default=str))
    (a.out / "publish_async.md").write_text("\n".join(md) + "\n")
    print(f"wrote {a.out}/publish_async.json and .md")


if __name__ == "__main__":
    subcommands(main, learner_step=main_learner_step, publish_async=main_publish_async)
