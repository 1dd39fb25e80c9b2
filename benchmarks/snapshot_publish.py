"""Snapshot size and publish/decode/swap cost, by policy size and precision.

What it measures
----------------
For the policies ``4 → (W, W, W) → 2`` with W in 64, 256, 1024, 2048, plus the paper's
``24 → (2048, 2048, 2048) → 6`` (a randomly initialised, seeded actorq
:class:`~actorq.agents.dqn.networks.MLP`), and for each precision fp32, fp16, int8 per-channel,
int8 per-tensor, int8 per-channel with GPTQ rounding and int4 (block-wise, 32 weights per fp32
scale):

* **bytes**: ``len(snapshot.to_bytes())``, what goes on the wire / into the shared cache, and its
  ratio to the fp32 snapshot of the same policy;
* **publish**: what the learner pays per publish — ``net.export_layers()`` +
  ``make_snapshot(...)`` + ``to_bytes()`` — with its three parts (export, quantize, serialize);
* **decode**: ``PolicySnapshot.from_bytes`` — the actor-side decode, checksum and validation;
* **ORT build**: constructing an ``OrtRuntime`` from the decoded snapshot (ONNX graph + session),
  the rest of an actor's snapshot swap; **swap** = decode + ORT build.

Times are medians over ``--repeats`` runs after one untimed warm-up, on one thread
(``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``, one onnxruntime intra-op thread). The check
at the end: the int8 snapshot of a 3×2048 policy is at most 27% of the fp32 bytes.

Command (full benchmark, well under a minute)::

    .venv/bin/python benchmarks/snapshot_publish.py

Quick smoke run::

    .venv/bin/python benchmarks/snapshot_publish.py --repeats 1 --out /tmp/bench_smoke

Results go to ``<out>/snapshot_publish.json`` and ``<out>/snapshot_publish.md``.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import dataclasses
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
from actorq.agents.dqn.networks import MLP
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

    @property
    def spec(self) -> PolicySpec:
        return PolicySpec(obs_dim=self.obs_dim, hidden=self.hidden, out_dim=self.out_dim)


POLICIES: tuple[Policy, ...] = (
    *(Policy(f"4→3×{w}→2", 4, (w, w, w), 2) for w in (64, 256, 1024, 2048)),
    Policy("24→3×2048→6 (paper)", 24, (2048, 2048, 2048), 6),
)

#: (label, precision, granularity, GPTQ-calibrated rounding)
PRECISIONS: tuple[tuple[str, str, Granularity, bool], ...] = (
    ("fp32", "fp32", "per_channel", False),
    ("fp16", "fp16", "per_channel", False),
    ("int8 per_channel", "int8", "per_channel", False),
    ("int8 per_tensor", "int8", "per_tensor", False),
    ("int8 per_channel + GPTQ", "int8", "per_channel", True),
    ("int4 block32", "int4", "per_channel", False),  # granularity does not apply to int4
)
#: Calibration states per publish (DQNConfig.calibration_states' default).
CALIBRATION_STATES = 1024


# -- machine info -----------------------------------------------------------------------------
# -- measurement ------------------------------------------------------------------------------
def ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


def measure(
    net: MLP,
    policy: Policy,
    precision: str,
    granularity: Granularity,
    repeats: int,
    gptq: bool = False,
) -> dict[str, Any]:
    spec = policy.spec
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
        parts["export"].append(t1 - t0)
        parts["quantize"].append(t2 - t1)
        parts["serialize"].append(t3 - t2)
        parts["publish"].append(t3 - t0)
        parts["decode"].append(t4 - t3)
        parts["ort_build"].append(t5 - t4)
    result: dict[str, Any] = {
        "policy": policy.label,
        "obs_dim": policy.obs_dim,
        "hidden": list(policy.hidden),
        "out_dim": policy.out_dim,
        "num_params": spec.num_params,
        "precision": precision,
        "granularity": {"int8": granularity, "int4": "block32"}.get(precision),
        "bytes": len(data),
        "repeats": repeats,
    }
    for k, v in parts.items():
        result[f"{k}_ms"] = ms(v)
    result["swap_ms"] = result["decode_ms"] + result["ort_build_ms"]
    return result


# -- reporting --------------------------------------------------------------------------------
HEADERS = [
    "policy",
    "params",
    "precision",
    "bytes",
    "vs fp32",
    "publish ms",
    "(export / quantize / serialize)",
    "decode ms",
    "ORT build ms",
    "swap ms",
]


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            r["policy"],
            f"{r['num_params']:,}",
            r["label"],
            f"{r['bytes']:,}",
            f"{r['ratio_to_fp32']:.1%}",
            f"{r['publish_ms']:.2f}",
            f"{r['export_ms']:.2f} / {r['quantize_ms']:.2f} / {r['serialize_ms']:.2f}",
            f"{r['decode_ms']:.2f}",
            f"{r['ort_build_ms']:.2f}",
            f"{r['swap_ms']:.2f}",
        ]
        for r in rows
    ]


def check_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    checks = []
    for r in rows:
        if r["precision"] == "int8" and r["hidden"] == [CHECK_WIDTH] * 3:
            checks.append(
                {
                    "target": f"{r['policy']} {r['label']}: bytes ≤ {INT8_MAX_RATIO:.0%} of fp32",
                    "value": r["ratio_to_fp32"],
                    "bound": INT8_MAX_RATIO,
                    "holds": r["ratio_to_fp32"] <= INT8_MAX_RATIO,
                }
            )
    return checks


def write_markdown(
    path: Path,
    machine: dict[str, Any],
    config: dict[str, Any],
    rows: list[dict[str, Any]],
    checks: list[dict[str, Any]],
) -> None:
    lines = [
        "# Snapshot size and publish / decode / swap cost",
        "",
        f"`{config['command']}`",
        "",
        f"- date: {machine['date']}",
        f"- CPU: {machine['cpu_model']} ({machine['cores']} cores), 1 thread",
        f"- load average at start: {machine['load_avg_at_start']}",
        f"- python {machine['python']}, torch {machine['torch']}, "
        f"onnxruntime {machine['onnxruntime']}, numpy {machine['numpy']}",
        f"- times: median of {config['repeats']} repeats after one warm-up; publish = "
        "export_layers + make_snapshot + to_bytes; swap = from_bytes + OrtRuntime",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(rows)]
    lines += ["", "Checks:", ""]
    for c in checks:
        lines.append(
            f"- {'PASS' if c['holds'] else 'FAIL'}: {c['target']} (measured {c['value']:.1%})"
        )
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeats", type=int, default=10, help="timed repeats per cell (median)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    if args.repeats <= 0:
        ap.error("--repeats must be positive")

    torch.set_num_threads(1)
    console = Console(width=None if sys.stdout.isatty() else 160)  # no wrapping when piped
    args.out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    config = {
        "command": f"python benchmarks/snapshot_publish.py --repeats {args.repeats} "
        f"--out {args.out}",
        "repeats": args.repeats,
        "seed": SEED,
        "threads": 1,
        "policies": [dataclasses.asdict(p) for p in POLICIES],
    }
    console.print(
        f"[bold]snapshot publish[/] on {machine['cpu_model']} "
        f"({machine['cores']} cores, load {machine['load_avg_at_start']})"
    )

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
            console.print(
                f"  {policy.label} {label}: {r['bytes']:,} B, publish {r['publish_ms']:.2f} ms",
                highlight=False,
            )

    table = Table(title="Policy snapshots: size and cost (1 thread, median ms)")
    for h in HEADERS:
        table.add_column(h, justify="left" if h in ("policy", "precision") else "right")
    for row_cells in table_rows(rows):
        table.add_row(*row_cells)
    console.print(table)

    checks = check_targets(rows)
    console.print("[bold]checks[/]")
    for c in checks:
        color = "green" if c["holds"] else "red"
        console.print(
            f"  [{color}]{'PASS' if c['holds'] else 'FAIL'}[/] {c['target']} "
            f"(measured {c['value']:.1%})"
        )

    results = {
        "benchmark": "snapshot_publish",
        "machine": machine,
        "config": config,
        "rows": rows,
        "checks": checks,
    }
    json_path = args.out / "snapshot_publish.json"
    md_path = args.out / "snapshot_publish.md"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    write_markdown(md_path, machine, config, rows, checks)
    console.print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
