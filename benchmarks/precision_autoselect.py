"""Policy inference latency by precision (fp32, fp16, int8, int4) and what auto-select picks.

What it measures
----------------
For each policy and each actor batch size K in ``--ks``, :func:`actorq.quant.autoselect.
select_precision` builds the onnxruntime runtime (one intra-op thread, as an actor runs) at
fp32, fp16, int8 (per-channel int8 weights, per-row uint8 activations) and int4 (block-wise,
``MatMulNBits`` at accuracy level 4), times one call at batch K (10 warm-up calls, then the
median of 31), measures agreement with fp32 and picks the fastest precision with agreement
≥ ``--min-agreement`` that is ≥ ``--min-speedup`` × faster than fp32. The whole selection
runs ``--rounds`` times: the table gives the median latency over rounds and every round's
choice, so noise on this shared machine shows.

Policies: randomly initialised, seeded MLPs ``4 → 3×256 → 2`` and the paper's
``24 → 3×2048 → 6`` (agreement on Gaussian observations: random nets have many near-tied
actions, so it is a pessimistic number), plus, with ``--run-dir``, a trained policy with
agreement on 10,000 states from its replay, once with round-to-nearest int8/int4 and once with
GPTQ rounding calibrated on 1,024 other replay states (the latency is the same).

Command::

    .venv/bin/python benchmarks/precision_autoselect.py --run-dir runs/ptq-dqn-cartpole

Results go to ``<out>/precision_autoselect.json`` and ``.md``.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from _machine import machine_info
from actorq.quant.autoselect import select_precision
from actorq.quant.snapshot import PolicySpec
from ptq_sweep import CALIBRATION_STATES, load_run, parse_ints

SEED = 0
SYNTHETIC = (PolicySpec(4, (256,) * 3, 2), PolicySpec(24, (2048,) * 3, 6))


def random_layers(spec: PolicySpec, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """He-scaled Gaussian weights, small biases: the scale of a freshly initialised MLP."""
    rng = np.random.default_rng(seed)
    d = spec.dims
    return [
        (
            (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32),
            (rng.standard_normal(b) * 0.01).astype(np.float32),
        )
        for a, b in itertools.pairwise(d)
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--ks", type=parse_ints, default=[1, 16])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-agreement", type=float, default=0.99)
    ap.add_argument("--min-speedup", type=float, default=1.3)
    ap.add_argument("--run-dir", type=Path, default=None, help="also a trained run's policy")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    if args.rounds <= 0 or not args.ks or any(k <= 0 for k in args.ks):
        ap.error("--rounds and --ks must be positive")

    console = Console(width=None if sys.stdout.isatty() else 140)
    machine = machine_info()
    rng = np.random.default_rng(SEED)
    Layers = list[tuple[np.ndarray, np.ndarray]]
    policies: list[tuple[str, PolicySpec, Layers, np.ndarray, np.ndarray | None]] = []
    for spec in SYNTHETIC:
        obs = rng.standard_normal((4096, spec.obs_dim)).astype(np.float32)
        label = f"{spec.obs_dim}→3×{spec.hidden[0]}→{spec.out_dim} (random)"
        policies.append((label, spec, random_layers(spec, SEED), obs, None))
    if args.run_dir is not None:
        cfg, spec, layers, states = load_run(args.run_dir)
        if states is None:
            ap.error(f"{args.run_dir} has no replay.npz for agreement states")
        dims = "→".join(map(str, spec.dims))
        policies.append((f"{dims} ({cfg.env}, trained)", spec, layers, states[:10_000], None))
        # as a learner would publish: int8 and int4 rounded by GPTQ on other replay states
        gptq_states = states[10_000:][:CALIBRATION_STATES]
        policies.append(
            (f"{dims} ({cfg.env}, trained, GPTQ)", spec, layers, states[:10_000], gptq_states)
        )
    command = (
        f"python benchmarks/precision_autoselect.py --ks {','.join(map(str, args.ks))} "
        f"--rounds {args.rounds} --min-agreement {args.min_agreement:g} "
        f"--min-speedup {args.min_speedup:g}"
        + (f" --run-dir {args.run_dir}" if args.run_dir else "")
        + f" --out {args.out}"
    )
    console.print(f"[bold]precision auto-select[/] on {machine['cpu_model']}: {command}")

    cells: list[dict[str, Any]] = []
    for label, spec, layers, obs, calib in policies:
        for k in args.ks:
            rounds = [
                select_precision(
                    layers,
                    obs,
                    k,
                    spec=spec,
                    min_agreement=args.min_agreement,
                    min_speedup=args.min_speedup,
                    calibration=calib,
                )
                for _ in range(args.rounds)
            ]
            console.print(f"\n{label}, K={k}\n{rounds[-1].table()}", highlight=False)
            for i, cand in enumerate(rounds[0].candidates):
                us = [r.candidates[i].latency_us for r in rounds]
                cells.append(
                    {
                        "policy": label,
                        "k": k,
                        "precision": cand.precision,
                        "latency_us_median": statistics.median(us),
                        "latency_us_rounds": us,
                        "agreement": cand.agreement,
                        "snapshot_bytes": cand.snapshot_bytes,
                        "chosen_in_rounds": sum(r.precision == cand.precision for r in rounds),
                    }
                )
    for c in cells:
        fp32 = next(
            x
            for x in cells
            if (x["policy"], x["k"], x["precision"]) == (c["policy"], c["k"], "fp32")
        )
        c["speedup_vs_fp32"] = fp32["latency_us_median"] / c["latency_us_median"]

    heads = ["policy", "K", "precision", "µs / call (median of rounds)", "per round", "vs fp32"]
    heads += ["agreement vs fp32", "snapshot bytes", f"chosen (of {args.rounds})"]
    lines = [
        "# Policy inference latency by precision, and the auto-select choice",
        "",
        f"`{command}`",
        "",
        f"- date: {machine['date']}; CPU: {machine['cpu_model']} ({machine['cores']} cores); "
        f"load average at start: {machine['load_avg_at_start']}",
        "- onnxruntime, 1 intra-op thread; one call at batch K: 10 warm-up calls, median of 31; "
        f"choice: fastest with agreement ≥ {args.min_agreement:.0%} and ≥ "
        f"{args.min_speedup:g}× faster than fp32",
        "",
        "| " + " | ".join(heads) + " |",
        "|" + "---|" * len(heads),
    ]
    for c in cells:
        lines.append(
            f"| {c['policy']} | {c['k']} | {c['precision']} | {c['latency_us_median']:,.1f} | "
            + ", ".join(f"{u:,.0f}" for u in c["latency_us_rounds"])
            + f" | {c['speedup_vs_fp32']:.2f}× | {c['agreement']:.2%} | "
            f"{c['snapshot_bytes']:,} | {c['chosen_in_rounds']} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    md = args.out / "precision_autoselect.md"
    md.write_text("\n".join(lines) + "\n")
    result: dict[str, Any] = {"benchmark": "precision_autoselect", "machine": machine}
    result["command"] = command
    result["cells"] = cells
    (args.out / "precision_autoselect.json").write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"\nwrote {md} and precision_autoselect.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
