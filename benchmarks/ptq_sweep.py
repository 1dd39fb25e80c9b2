"""Post-training quantization sweep: a trained policy's return at fp32 and 2..8 bits.

QuaRL's post-training study (Lam et al., TMLR 2022): a run's fp32 weights rounded to b bits
(:func:`actorq.quant.ptq.fake_quantize`), every layer (``all``) or hidden layers only
(``hidden``), and the real int8/int4 snapshots, each evaluated greedily on the same episodes and
compared with fp32 on replay states. ``autoselect``: inference latency by precision at each
actor batch K and what ``select_precision`` picks, on random MLPs and, with ``--run-dir``, a
trained policy.

A convolutional policy (an ``atari:`` run, the Nature-CNN): its conv and dense weights rounded
(:func:`actorq.quant.ptq.fake_quantize_module`), beside the fp16 and int8 snapshots its actors
run (static ``QLinearConv``, calibrated on 256 states), each playing the same full games on
the raw score; agreement with fp32 on ``--states`` states of random play (no replay in PPO).

    .venv/bin/python benchmarks/ptq_sweep.py runs/ptq-dqn-cartpole --name dqn_cartpole
    .venv/bin/python benchmarks/ptq_sweep.py RUN --name ppo_pong --bits 8,6,4 --seeds 0 \
        --snapshots fp16,int8 --states 2048
    .venv/bin/python benchmarks/ptq_sweep.py autoselect --run-dir runs/ptq-dqn-cartpole
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from _machine import ints, machine_info, md_table, subcommands
from actorq.agents.pixels import PIXEL_CALIBRATION_STATES, PixelPolicyIO, pixel_snapshot
from actorq.agents.policy_io import compare_policies
from actorq.core.evaluation import evaluate
from actorq.envs import eval_sampled
from actorq.output import write_output
from actorq.quant.autoselect import select_precision
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.ptq import fake_quantize, fake_quantize_module
from actorq.quant.quantizer import MAX_BITS, MIN_BITS, check_bits
from actorq.quant.runtimes import PolicyRuntime, make_runtime
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot
from actorq.run import load_run_policy  # the loading `actorq eval` does, kept in one place
from actorq.run.precision import random_states

SEED_BASE = 20_000  # actorq eval's first environment seed
SEED_STRIDE = 1_000
CLOSE = 0.05  # continuous actions: |Δa| within this counts as agreeing (as in docs/results.md)
VARIANTS = {"all": False, "hidden": True}  # variant -> keep_io_fp32
SNAPSHOT_BITS = {
    "int8": 8, "int8+gptq": 8, "int8+gptq-convs": 8, "int4": 4, "int4+gptq": 4, "fp16": 16,
}  # fmt: skip
# what convolutional actors run (no 4-bit conv kernel); int8 by its weights' rounding (nearest,
# GPTQ on the convolutions: --calibration auto, GPTQ everywhere: gptq)
PIXEL_SNAPSHOTS = ("fp16", "int8", "int8+gptq-convs", "int8+gptq")
CALIBRATION_STATES = 1024  # GPTQ states for +gptq (DQNConfig.calibration_states' default)
SNAPSHOT = "snapshot"  # the variant of rows that run a real quantized snapshot (int8/int4 kernels)


def load_run(
    run_dir: Path, loaded: tuple[Any, Any, bytes] | None = None
) -> tuple[Any, PolicySpec, list[tuple[np.ndarray, np.ndarray]], np.ndarray | None]:
    """``(config, spec, fp32 layers, replay observations shuffled (seed 0) or None)``;
    ``loaded``: what ``load_run_policy(run_dir, "fp32")`` returned, if called already."""
    cfg, _, data = loaded or load_run_policy(str(run_dir), "fp32")
    snap = PolicySnapshot.from_bytes(data)
    replay = run_dir / "checkpoint" / "replay.npz"
    states = None
    if replay.is_file():
        with np.load(replay, allow_pickle=False) as z:
            obs = z["obs"]
        states = obs[np.random.default_rng(0).permutation(len(obs))].astype(np.float32)
    return cfg, snap.spec, snap.dequantized(), states


def agreement(spec: PolicySpec, ref: np.ndarray, out: np.ndarray) -> dict[str, float]:
    if spec.head == "q":
        return {"agreement": float((ref.argmax(1) == out.argmax(1)).mean())}
    d = np.abs(ref - out).max(axis=1)
    return {"agreement": float((d <= CLOSE).mean()), "mean_abs_da": float(d.mean())}


def evaluate_runtime(
    runtime: PolicyRuntime, cfg: Any, episodes: int, seeds: list[int]
) -> dict[str, Any]:
    per_seed = [
        evaluate(runtime, cfg.env, episodes, SEED_BASE + SEED_STRIDE * s, cfg.env_kwargs())
        for s in seeds
    ]
    rets = np.concatenate(per_seed)
    return {
        "mean": float(rets.mean()), "std": float(rets.std()), "min": float(rets.min()),
        "seed_means": [float(r.mean()) for r in per_seed],
        "seed_means_std": float(np.std([r.mean() for r in per_seed])), "returns": rets.tolist(),
    }  # fmt: skip


def fmt_row(r: dict[str, Any], head: str) -> list[str]:
    close = "—" if head == "q" else f"{r['mean_abs_da']:.4f}"
    return [
        r["label"], f"{r['mean']:.1f} ± {r['std']:.1f}", f"{r['min']:.0f}",
        ", ".join(f"{m:.1f}" for m in r["seed_means"]), f"{r['agreement']:.2%}", close,
    ]  # fmt: skip


def headers(head: str) -> list[str]:
    agree = "greedy action = fp32" if head == "q" else f"|Δa| ≤ {CLOSE} vs fp32"
    return ["weights", "return (mean ± std)", "min", "per-seed means", agree, "mean |Δa|"]


def plot(path: Path, rows: list[dict[str, Any]], title: str, bits: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    fp32 = next(r for r in rows if r["bits"] is None)
    ax.axhline(fp32["mean"], color="k", ls="--", lw=1, label="fp32")
    for variant, style in (("all", "o-"), ("hidden", "s-")):
        rs = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["bits"])
        if not rs:
            continue
        ax.errorbar(
            [r["bits"] for r in rs], [r["mean"] for r in rs],
            yerr=[r["seed_means_std"] for r in rs], fmt=style, capsize=3,
            label="every layer" if variant == "all" else "hidden layers (I/O fp32)",
        )  # fmt: skip
    for r in rows:
        if r["variant"] == SNAPSHOT and r["bits"] <= max(bits):
            ax.plot(r["bits"], r["mean"], "*", ms=11, label=r["label"])
    ax.set_xticks(bits)
    ax.set_xlabel("weight bits (uniform, symmetric, per channel)")
    ax.set_ylabel("evaluation return")
    ax.set_title(title.replace(", policy", "\npolicy"), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    write_output(path, lambda f: fig.savefig(f, format="png", dpi=120), "--out")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("run_dir", type=Path, help="a trained run directory (config + checkpoint)")
    ap.add_argument("--name", default=None, help="results name; default: the run dir's name")
    ap.add_argument("--bits", type=ints, default=list(range(MIN_BITS, MAX_BITS + 1)))
    ap.add_argument("--variants", default="all,hidden", help="all (every layer), hidden")
    ap.add_argument(
        "--snapshots", default=None,
        help="also evaluate these snapshots (+gptq: GPTQ on replay states); default "
        f"int8,int8+gptq,int4,int4+gptq (a convolutional policy: {','.join(PIXEL_SNAPSHOTS)})",
    )  # fmt: skip
    ap.add_argument("--episodes", type=int, default=10, help="episodes per seed")
    ap.add_argument("--seeds", type=ints, default=[0, 1, 2])
    ap.add_argument("--states", type=int, default=10_000, help="replay states for agreement")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--force", action="store_true", help="replace an existing sweep's files")
    args = ap.parse_args(argv)
    try:
        for b in args.bits:
            check_bits(b)
    except ValueError as e:
        ap.error(str(e))
    variants = [v for v in args.variants.split(",") if v]
    if not variants or any(v not in VARIANTS for v in variants):
        ap.error(f"--variants: choose from {', '.join(VARIANTS)}")
    snapshots = [p for p in (args.snapshots or "").split(",") if p]
    if any(p not in SNAPSHOT_BITS for p in snapshots):
        ap.error(f"--snapshots: choose from {', '.join(SNAPSHOT_BITS)}")
    if args.episodes <= 0 or not args.seeds:
        ap.error("--episodes must be positive and --seeds non-empty")

    name = args.name or args.run_dir.name
    done = args.out / f"ptq_sweep_{name}.json"
    if done.exists() and not args.force:  # before an hour of evaluation, not after it
        ap.error(
            f"{done} exists (another run's sweep?): --name NAME for a new one, "
            "--force to replace it"
        )
    loaded = load_run_policy(str(args.run_dir), "fp32")
    pixels = isinstance(loaded[1], PixelPolicyIO)
    if args.snapshots is None:
        snapshots = list(PIXEL_SNAPSHOTS if pixels else ("int8", "int8+gptq", "int4", "int4+gptq"))
    command = (
        f"python benchmarks/ptq_sweep.py {args.run_dir} --name {name} "
        f"--bits {','.join(map(str, args.bits))} --variants {','.join(variants)} "
        f"--snapshots {','.join(snapshots) or chr(39) * 2} "
        f"--episodes {args.episodes} --seeds {','.join(map(str, args.seeds))} "
        f"--states {args.states} --out {args.out}"
    )
    if pixels:
        return sweep_pixels(args, name, command, loaded[0], loaded[1], variants, snapshots)
    cfg, spec, layers, replay_obs = load_run(args.run_dir, loaded)
    states = calib = None
    if replay_obs is not None:
        # disjoint sets: GPTQ must not calibrate on the states its agreement is measured on
        states, calib = replay_obs[: args.states], replay_obs[args.states :][:CALIBRATION_STATES]
    print(f"PTQ sweep {cfg.env} {spec.dims} ({spec.head} head): {command}", flush=True)

    fp32_runtime = make_runtime(make_snapshot(layers, spec, "fp32", 0))
    ref_out = fp32_runtime(states) if states is not None else None
    rows: list[dict[str, Any]] = []
    cells: list[tuple[int | None, str, str | None]] = [(None, "fp32", None)]
    cells += [(b, v, None) for v in variants for b in sorted(args.bits, reverse=True)]
    cells += [(SNAPSHOT_BITS[p], SNAPSHOT, p) for p in snapshots]
    for bits, variant, precision in cells:
        t0 = time.perf_counter()
        if precision is not None:  # what actors run: the snapshot and its onnxruntime kernels
            p, gptq = precision.removesuffix("+gptq"), precision.endswith("+gptq")
            snap = make_snapshot(layers, spec, p, 0, calibration=calib if gptq else None)
            runtime = make_runtime(snap)
            label = f"{precision} snapshot (ORT)"
        elif bits is None:
            runtime, label = fp32_runtime, "fp32"
        else:
            lay = fake_quantize(layers, bits, keep_io_fp32=VARIANTS[variant])
            runtime = make_runtime(make_snapshot(lay, spec, "fp32", 0))
            label = f"{bits}-bit, {variant}"
        r: dict[str, Any] = {
            "bits": bits, "variant": variant, "label": label,
            **evaluate_runtime(runtime, cfg, args.episodes, args.seeds),
        }  # fmt: skip
        if ref_out is not None and states is not None:
            r.update(agreement(spec, ref_out, runtime(states)))
        else:
            r.update(agreement=float("nan"), mean_abs_da=float("nan"))
        r["eval_s"] = time.perf_counter() - t0
        rows.append(r)
        print(f"  {r['label']}: {r['mean']:.1f} ± {r['std']:.1f} (agreement "
              f"{r['agreement']:.2%}, {r['eval_s']:.1f} s)", flush=True)  # fmt: skip

    dims = "→".join(map(str, spec.dims))
    notes = [
        f"run {args.run_dir} ({cfg.env}, policy {dims}, {spec.head} head)",
        "weights: uniform symmetric per-channel, dequantized to fp32 (biases fp32); `all` = "
        "every layer, `hidden` = input/output layers kept fp32; fp32 onnxruntime runtime",
        "`int8 snapshot (ORT)` / `int4 snapshot (ORT)`: what actorq's actors run (fp32 I/O "
        "layers; int8: per-channel weights, per-row uint8 activations; int4: 32 weights per "
        "scale, MatMulNBits with int8 activations per block); `+gptq`: rounded with GPTQ on "
        f"{CALIBRATION_STATES} other replay states (as int8 training publishes at ≤ 512 wide)",
        f"agreement on {0 if states is None else len(states):,} replay states",
    ]
    extra = {"policy_dims": list(spec.dims), "head": spec.head}
    n_states = 0 if states is None else len(states)
    write(args, name, command, cfg, f"policy {dims}", rows, notes, extra, n_states, spec.head)
    return 0


def write(
    args: argparse.Namespace, name: str, command: str, cfg: Any, policy: str,
    rows: list[dict[str, Any]], notes: list[str], extra: dict[str, Any], n_states: int,
    head: str,
) -> None:  # fmt: skip
    """The sweep's ``ptq_sweep_<name>`` .json, .md (a table) and .png (return vs bits)."""
    machine = machine_info()
    title = f"PTQ sweep: {cfg.env}, {policy}, {len(args.seeds)}×{args.episodes} episodes"
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"ptq_sweep_{name}"
    result = {
        "benchmark": "ptq_sweep", "machine": machine,
        "config": {
            "command": command, "run_dir": str(args.run_dir), "env": cfg.env,
            "agent": getattr(cfg, "agent", None), **extra, "bits": args.bits,
            "episodes_per_seed": args.episodes, "seeds": args.seeds,
            "env_seeds": f"{SEED_BASE} + {SEED_STRIDE} * seed + episode",
            "agreement_states": n_states,
            "quantization": "uniform symmetric per-channel weights, dequantized; biases fp32",
        },
        "rows": rows,
    }  # fmt: skip
    write_output(Path(f"{stem}.json"), json.dumps(result, indent=2) + "\n", "--out")
    lines = [
        f"# {title}", "", f"`{command}`", "", f"- date: {machine['date']}",
        *(f"- {n}" for n in notes), "",
        *md_table([h.replace("|", "\\|") for h in headers(head)],
                  [fmt_row(r, head) for r in rows]),
    ]  # fmt: skip
    write_output(Path(f"{stem}.md"), "\n".join(lines) + "\n", "--out")
    plot(Path(f"{stem}.png"), rows, title, sorted(args.bits))
    print(Path(f"{stem}.md").read_text() + f"wrote {stem}.json, .md and .png")


def sweep_pixels(
    args: argparse.Namespace, name: str, command: str, cfg: Any, io: PixelPolicyIO,
    variants: list[str], snapshots: list[str],
) -> int:  # fmt: skip
    """The sweep for a convolutional policy (module docstring)."""
    bad = [p for p in snapshots if p not in PIXEL_SNAPSHOTS]
    if bad:
        raise SystemExit(f"--snapshots: a convolutional policy runs {', '.join(PIXEL_SNAPSHOTS)}")
    pool = random_states(cfg, io.spec, args.states + PIXEL_CALIBRATION_STATES)
    states, calib = pool[: args.states], pool[args.states :][:PIXEL_CALIBRATION_STATES]
    print(f"PTQ sweep {cfg.env} (Nature-CNN, {io.head} head): {command}", flush=True)

    def snap(net: Any, name: str) -> ModelSnapshot:
        precision, _, rounding = name.partition("+")
        return pixel_snapshot(net, 0, io.spec, io.head, precision, calib, rounding or "nearest")

    fp32 = snap(io.net, "fp32")
    cells: list[tuple[int | None, str, str]] = [(None, "fp32", "fp32")]
    cells += [(b, v, "fp32") for v in variants for b in sorted(args.bits, reverse=True)]
    cells += [(SNAPSHOT_BITS[p], SNAPSHOT, p) for p in snapshots]
    rows: list[dict[str, Any]] = []
    for bits, variant, precision in cells:
        t0 = time.perf_counter()
        if variant == SNAPSHOT:  # made as a publish makes it: its time is the publish's cost
            s = snap(io.net, precision)
            label = f"{precision} snapshot (ORT; {time.perf_counter() - t0:.2f} s to make)"
        elif bits is None:
            s, label = fp32, "fp32"
        else:
            s = snap(fake_quantize_module(io.net, bits, keep_io_fp32=VARIANTS[variant]), "fp32")
            label = f"{bits}-bit, {variant}"
        agree, _, _ = compare_policies(s, fp32, states, cfg.envs_per_actor)
        r: dict[str, Any] = {
            "bits": bits, "variant": variant, "label": label, "agreement": agree,
            "mean_abs_da": float("nan"),
            **evaluate_runtime(make_runtime(s, "ort"), cfg, args.episodes, args.seeds),
        }  # fmt: skip
        r["eval_s"] = time.perf_counter() - t0
        rows.append(r)
        print(f"  {label}: {r['mean']:.1f} ± {r['std']:.1f} (agreement {agree:.2%}, "
              f"{r['eval_s']:.0f} s)", flush=True)  # fmt: skip
    notes = [
        f"run {args.run_dir} ({cfg.env}, Nature-CNN, {io.head} head), full games on the raw "
        f"score, actions {'sampled' if eval_sampled(cfg.env) else 'greedy'} (the env family's "
        "evaluation protocol)",
        "weights: conv and dense, uniform symmetric per output channel, dequantized to fp32 "
        "(biases fp32); `all` = every layer, `hidden` = first conv and policy head kept fp32",
        f"`fp16` / `int8… snapshot (ORT)`: what actorq's actors run (int8: static QLinearConv "
        f"and QGemm, 7-bit weights, uint8 activations calibrated on {len(calib)} states; weights "
        "rounded to nearest, `+gptq-convs` GPTQ on the convolutions (`--calibration auto`), "
        "`+gptq` GPTQ everywhere; the time to make one is a publish's)",
        f"agreement: equal greedy actions with fp32 on {len(states):,} states of random play",
    ]
    extra = {"policy": "nature-cnn", "head": io.head}
    write(args, name, command, cfg, "Nature-CNN policy", rows, notes, extra, len(states), "q")
    return 0


# ---- autoselect: latency by precision and auto-select's choice

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


def main_autoselect(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--ks", type=ints, default=[1, 16])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-agreement", type=float, default=0.99)
    ap.add_argument("--min-speedup", type=float, default=1.3)
    ap.add_argument("--run-dir", type=Path, default=None, help="also a trained run's policy")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    if args.rounds <= 0 or not args.ks or any(k <= 0 for k in args.ks):
        ap.error("--rounds and --ks must be positive")

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
        f"python benchmarks/ptq_sweep.py autoselect --ks {','.join(map(str, args.ks))} "
        f"--rounds {args.rounds} --min-agreement {args.min_agreement:g} "
        f"--min-speedup {args.min_speedup:g}"
        + (f" --run-dir {args.run_dir}" if args.run_dir else "")
        + f" --out {args.out}"
    )
    print(f"precision auto-select on {machine['cpu_model']}: {command}", flush=True)

    cells: list[dict[str, Any]] = []
    for label, spec, layers, obs, calib in policies:
        for k in args.ks:
            rounds = [
                select_precision(layers, obs, k, spec=spec, min_agreement=args.min_agreement,
                                 min_speedup=args.min_speedup, calibration=calib)
                for _ in range(args.rounds)
            ]  # fmt: skip
            print(f"\n{label}, K={k}\n{rounds[-1].table()}", flush=True)
            for i, cand in enumerate(rounds[0].candidates):
                us = [r.candidates[i].latency_us for r in rounds]
                cells.append(
                    {
                        "policy": label, "k": k, "precision": cand.precision,
                        "latency_us_median": statistics.median(us), "latency_us_rounds": us,
                        "agreement": cand.agreement, "snapshot_bytes": cand.snapshot_bytes,
                        "chosen_in_rounds": sum(r.precision == cand.precision for r in rounds),
                    }
                )  # fmt: skip
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
        "", f"`{command}`", "",
        f"- date: {machine['date']}; CPU: {machine['cpu_model']} ({machine['cores']} cores); "
        f"load average at start: {machine['load_avg_at_start']}",
        "- onnxruntime, 1 intra-op thread; one call at batch K: 10 warm-up calls, median of 31; "
        f"choice: fastest with agreement ≥ {args.min_agreement:.0%} and ≥ "
        f"{args.min_speedup:g}× faster than fp32",
        "",
        *md_table(heads, []),
    ]  # fmt: skip
    for c in cells:
        lines.append(
            f"| {c['policy']} | {c['k']} | {c['precision']} | {c['latency_us_median']:,.1f} | "
            + ", ".join(f"{u:,.0f}" for u in c["latency_us_rounds"])
            + f" | {c['speedup_vs_fp32']:.2f}× | {c['agreement']:.2%} | "
            f"{c['snapshot_bytes']:,} | {c['chosen_in_rounds']} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    md = args.out / "precision_autoselect.md"
    write_output(md, "\n".join(lines) + "\n", "--out")
    result: dict[str, Any] = {"benchmark": "precision_autoselect", "machine": machine}
    result["command"] = command
    result["cells"] = cells
    write_output(
        args.out / "precision_autoselect.json", json.dumps(result, indent=2) + "\n", "--out"
    )
    print(f"\nwrote {md} and precision_autoselect.json")
    return 0


if __name__ == "__main__":
    subcommands(main, autoselect=main_autoselect)
