"""Chip macro-placement policy: size and batch-1 inference speed, torch vs onnxruntime fp32/int8.

What it measures
----------------
For every netlist shipped in ``actorq.chip`` (Ariane133: 133 hard macros on a 21 × 24 grid, and the
small circuit-training test netlists), :class:`actorq.agents.ppo.chip_networks.ChipPolicy` with the
default :class:`~actorq.agents.ppo.chip_networks.ChipPolicyConfig` (random weights, seed 0: speed
does not depend on training):

* **build**: ``ChipPolicy(env)``, which computes the static macro graph (``macro_graph``);
* **params**, and the size of the ONNX model from ``chip_policy_onnx`` at fp32, int8 (int8
  GraphSAGE layers, fp32 convolutions: the default) and int8c (``int8_convs=True``: the
  convolutions after the first in ``ConvInteger`` too); the static macro graph and port terms
  are constants in it;
* **ms per forward at batch 1** on one thread (what an actor pays per decision): torch
  (``torch.set_num_threads(1)``, inference mode), onnxruntime fp32, int8 and int8c
  (``intra_op_num_threads=1``, sequential). Median (and fastest) of ``--repeats`` calls after
  ``--warmup`` calls, cycling over the observations of one random legal episode prefix;
* int8 vs fp32: the largest |logit difference| over legal cells and how often the argmax
  agrees (random weights at their 0.01-gain initialisation: near-uniform logits, so the argmax
  agreement is a harsh measure here; tests/agents/ppo/test_chip_networks.py checks the distributions
  of a confident policy).

Command::

    .venv/bin/python benchmarks/chip_policy_speed.py

Quick smoke run::

    .venv/bin/python benchmarks/chip_policy_speed.py --repeats 20 --out /tmp/chip_policy_smoke

Results go to ``<out>/chip_policy_speed.json``.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
from rich.console import Console
from rich.table import Table

from _machine import machine_info
from actorq.agents.ppo.chip_networks import ChipPolicy, chip_policy_onnx
from actorq.chip.env import ChipPlacementEnv, random_legal_observations
from actorq.chip.netlist import netlist_names
from actorq.envs import make_env

BIG = "ariane133"
PRECISIONS = ("fp32", "int8", "int8c")


def _times(fn: Callable[[np.ndarray], Any], obs: np.ndarray, warmup: int, repeats: int) -> dict:
    """Median and fastest seconds of ``fn`` on one observation (batch 1), cycling states."""
    rows = [obs[i : i + 1] for i in range(len(obs))]
    for i in range(warmup):
        fn(rows[i % len(rows)])
    ts = []
    for i in range(repeats):
        x = rows[i % len(rows)]
        t = time.perf_counter()
        fn(x)
        ts.append(time.perf_counter() - t)
    return {"median_s": statistics.median(ts), "min_s": min(ts)}


def _session(data: bytes) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def measure(name: str, steps: int, warmup: int, repeats: int) -> dict[str, Any]:
    env = make_env(f"chip:{name}", use_fd=False)  # no episode is finished: FD never runs
    assert isinstance(env, ChipPlacementEnv)
    torch.manual_seed(0)
    t = time.perf_counter()
    model = ChipPolicy(env).eval()
    build_s = time.perf_counter() - t
    obs = random_legal_observations(env, steps)
    legal = obs[:, env.layout["mask"]] > 0.5
    data = {p: chip_policy_onnx(model, p[:4], int8_convs=p == "int8c") for p in PRECISIONS}
    sess = {p: _session(d) for p, d in data.items()}

    def torch_fwd(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return np.asarray(model(torch.from_numpy(x)).numpy())

    times = {"torch": _times(torch_fwd, obs, warmup, repeats)}
    for p, s in sess.items():
        times[f"ort_{p}"] = _times(lambda x, s=s: s.run(None, {"obs": x})[0], obs, warmup, repeats)
    ref = torch_fwd(obs)
    out = {p: s.run(None, {"obs": obs})[0] for p, s in sess.items()}
    return {
        "netlist": name,
        "hard_macros": env.n,
        "grid": f"{env.rows}x{env.cols}",
        "obs_dim": int(obs.shape[1]),
        "states": len(obs),
        "params": sum(p.numel() for p in model.parameters()),
        "build_s": build_s,
        "onnx_bytes": {p: len(d) for p, d in data.items()},
        "times": times,
        "fp32_vs_torch_max_abs": float(np.abs(out["fp32"] - ref)[legal].max()),
        **{
            f"{p}_vs_fp32_max_abs": float(np.abs(out[p] - out["fp32"])[legal].max())
            for p in PRECISIONS[1:]
        },
        **{
            f"{p}_argmax_agreement": float(np.mean(out[p].argmax(1) == out["fp32"].argmax(1)))
            for p in PRECISIONS[1:]
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeats", type=int, default=300, help="timed batch-1 calls (median)")
    ap.add_argument("--warmup", type=int, default=30, help="untimed calls first")
    ap.add_argument("--steps", type=int, default=30, help="random legal steps for observations")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    machine = machine_info()
    t = Table(title="actorq.chip policy, batch 1, one thread (ms: median / fastest)")
    cols = ["netlist", "macros", "grid", "params", "build ms"]
    cols += [f"{p} KiB" for p in PRECISIONS]
    cols += ["torch ms", *(f"ort {p} ms" for p in PRECISIONS)]
    cols += ["fp32 err", "int8 err", "int8c err", "int8 argmax", "int8c argmax"]
    for col in cols:
        t.add_column(col, justify="left" if col == "netlist" else "right")
    rows = []
    for name in [BIG, *(n for n in netlist_names() if n != BIG)]:
        r = measure(name, a.steps, a.warmup, a.repeats)
        rows.append(r)
        ms = {
            k: f"{v['median_s'] * 1e3:.3f} / {v['min_s'] * 1e3:.3f}" for k, v in r["times"].items()
        }
        t.add_row(
            name, str(r["hard_macros"]), r["grid"], f"{r['params']:,}", f"{r['build_s'] * 1e3:.0f}",
            *(f"{r['onnx_bytes'][p] / 1024:.0f}" for p in PRECISIONS),
            ms["torch"], *(ms[f"ort_{p}"] for p in PRECISIONS),
            f"{r['fp32_vs_torch_max_abs']:.1e}", f"{r['int8_vs_fp32_max_abs']:.1e}",
            f"{r['int8c_vs_fp32_max_abs']:.1e}", f"{r['int8_argmax_agreement']:.2f}",
            f"{r['int8c_argmax_agreement']:.2f}",
        )  # fmt: skip
    Console(width=240).print(t)
    argv_s = " ".join(sys.argv[1:] if argv is None else argv)
    results = {
        "command": f"python benchmarks/chip_policy_speed.py {argv_s}".strip(),
        "machine": machine,
        "torch_threads": torch.get_num_threads(),
        "ort_threads": 1,
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "repeats": a.repeats,
        "warmup": a.warmup,
        "rows": rows,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "chip_policy_speed.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {a.out / 'chip_policy_speed.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
