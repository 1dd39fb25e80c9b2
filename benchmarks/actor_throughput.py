"""Environment steps per second of ONE actor, by policy width, runtime and envs per actor.

The real actor loop (``VectorActor``) on CartPole: K envs, one batched inference per vector
step, epsilon-greedy and the 3-step adder, policies ``4 → 3×W → 2`` (seeded random) run by torch
fp32 and ORT fp32 / int8 / int4; median of ``--trials`` trials of about ``--seconds`` each, one
thread. Targets: at 3×2048, K = 1, ORT int8 ≥ 4× torch fp32 and ≥ 3× ORT fp32; at width 64 the
loop costs ≤ 1.5× its env.step.

    .venv/bin/python benchmarks/actor_throughput.py                     # ~2 minutes
    .venv/bin/python benchmarks/actor_throughput.py --widths 64,256 --ks 1,16 --seconds 0.3 \
        --out /tmp/bench_smoke

``--atari Pong --ks 8``: Atari instead (issue 50), K envs in one process, one thread each side:
the raw vector env, actorq's actor (the Nature-CNN PPO policy exported to ONNX, fp32, sampled,
128-step trajectory chunks) and Stable-Baselines3's collection on the same engine's vector env,
as the bench's SB3 cells collect (``bench.sb3_vecenv.ActorQVecEnv``; PPO's CnnPolicy forward:
action, value, log-prob; no learning, no rollout buffer), with ratios to SB3 on each engine.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _machine import command, ints, machine_info, md_head, md_table
from actorq.agents.dqn.networks import MLP
from actorq.core.exploration import EpsilonGreedy
from actorq.core.loop import VectorActor
from actorq.distributed.local import _LocalCache
from actorq.envs import env_spec, make_vector_env
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot
from actorq.replay.adders import NStepAdder

ENV_ID = "gym:CartPole-v1"
EPSILON = 0.01
N_STEP = 3
GAMMA = 0.99
SEED = 0
DEPTH = 3

#: (label, runtime kind for VectorActor, snapshot precision)
RUNTIMES: tuple[tuple[str, str, str], ...] = (
    ("torch fp32", "torch", "fp32"), ("ORT fp32", "ort", "fp32"), ("ORT int8", "ort", "int8"),
    ("ORT int4", "ort", "int4"),
)  # fmt: skip
TORCH_FP32, ORT_FP32, ORT_INT8 = (r[0] for r in RUNTIMES[:3])

#: Targets checked at the end.
BIG_WIDTH = 2048
INT8_VS_TORCH_MIN = 4.0
INT8_VS_ORT_FP32_MIN = 3.0
SMALL_WIDTH = 64
LOOP_COST_MAX = 1.5


def rates(n: int, k: int, times: list[float]) -> dict[str, Any]:
    """Steps/s and µs per vector step from the median of trials of ``n`` vector steps."""
    t_med = statistics.median(times)
    return {
        "vector_steps": n, "trial_s": times, "env_steps_per_s": n * k / t_med,
        "us_per_vector_step": t_med / n * 1e6,
    }  # fmt: skip


def calibrate(run: Callable[[int], float], seconds: float, trials: int) -> int:
    """Number of calls that take about ``seconds / trials``; ``run(n)`` times n calls."""
    budget = max(0.02, min(0.25, seconds / 4))  # short pre-run: at most a quarter of the cell
    n = 4
    while True:
        elapsed = run(n)
        if elapsed >= budget or n >= 1 << 22:
            break
        n *= 2 if elapsed <= 0 else min(8, max(2, math.ceil(budget / elapsed)))
    per_call = elapsed / n
    return max(4, round(seconds / trials / per_call))


def timed_trials(run: Callable[[int], float], n: int, trials: int) -> list[float]:
    return [run(n) for _ in range(trials)]


def raw_env_sps(
    k: int, seconds: float, trials: int, env_id: str = ENV_ID, **env_kwargs: Any
) -> dict[str, Any]:
    """Steps/s of the bare vector env with precomputed random actions."""
    env = make_vector_env(env_id, k, **env_kwargs)
    env.reset(seed=SEED)
    num_actions = int(env.single_action_space.n)  # type: ignore[attr-defined]
    rng = np.random.default_rng(SEED)
    pool = rng.integers(0, num_actions, size=(4096, k), dtype=np.int64)

    def run(n: int) -> float:
        step = env.step
        t = time.perf_counter()
        for i in range(n):
            step(pool[i & 4095])
        return time.perf_counter() - t

    try:
        run(64)  # warm-up
        n = calibrate(run, seconds, trials)
        times = timed_trials(run, n, trials)
    finally:
        env.close()
    return {"k": k, **rates(n, k, times)}


def actor_sps(
    snap: PolicySnapshot, runtime: str, k: int, seconds: float, trials: int
) -> dict[str, Any]:
    """Steps/s of a VectorActor running ``snap`` with ``runtime``."""
    spec = env_spec(ENV_ID)
    cache = _LocalCache()
    cache.publish(snap.version, snap.to_bytes())
    explore = EpsilonGreedy(np.full(k, EPSILON), spec.num_actions, SEED)
    adder = NStepAdder(N_STEP, GAMMA, k, spec.observation, spec.action)
    actor = VectorActor(ENV_ID, spec, k, SEED, cache, explore, adder, runtime=runtime, threads=1)
    return time_actor(actor, k, seconds, trials)


def time_actor(actor: VectorActor, k: int, seconds: float, trials: int) -> dict[str, Any]:
    if not actor.update() or actor.runtime is None:
        raise RuntimeError("actor did not load the snapshot")

    def run(n: int) -> float:
        step = actor.step
        t = time.perf_counter()
        for _ in range(n):
            step()
        return time.perf_counter() - t

    try:
        run(32)  # warm-up: first inferences, adder fill, first episode ends
        n = calibrate(run, seconds, trials)
        actor.inference_s = actor.env_s = 0.0
        times = timed_trials(run, n, trials)
        infer_share = actor.inference_s / sum(times)
        # The loop's cost over the simulator it drove, in the same run: same episodes and
        # resets (a policy's episodes differ in length from the raw baseline's random ones).
        cost_vs_own_env = sum(times) / actor.env_s
    finally:
        actor.close()
    return {
        **rates(n, k, times), "inference_share": infer_share, "cost_vs_own_env": cost_vs_own_env,
    }  # fmt: skip


def snapshots_for(width: int) -> dict[str, PolicySnapshot]:
    torch.manual_seed(SEED + width)
    hidden = (width,) * DEPTH
    net = MLP(4, hidden, 2)
    layers = net.export_layers()
    spec = PolicySpec(obs_dim=4, hidden=hidden, out_dim=2)
    return {p: make_snapshot(layers, spec, p, version=1) for p in ("fp32", "int8", "int4")}


def fmt_x(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def table_rows(cells: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [f"3×{c['width']}", str(c["k"]), c["runtime"], f"{c['env_steps_per_s']:,.0f}",
         f"{c['us_per_vector_step']:,.1f}", fmt_x(c["cost_vs_raw"]), fmt_x(c["cost_vs_own_env"]),
         fmt_x(c["speedup_vs_torch_fp32"]), fmt_x(c["speedup_vs_ort_fp32"])]
        for c in cells
    ]  # fmt: skip


HEADERS = ["width", "K", "runtime", "env steps/s", "µs / vector step", "cost vs raw env",
           "cost vs its env.step", "speedup vs torch fp32", "speedup vs ORT fp32"]  # fmt: skip


def check_targets(cells: list[dict[str, Any]], ks: list[int]) -> list[dict[str, Any]]:
    by = {(c["width"], c["k"], c["runtime"]): c for c in cells}
    checks: list[dict[str, Any]] = []
    big = by.get((BIG_WIDTH, 1, ORT_INT8))
    big_targets = (
        ("torch fp32", "speedup_vs_torch_fp32", INT8_VS_TORCH_MIN),
        ("ORT fp32", "speedup_vs_ort_fp32", INT8_VS_ORT_FP32_MIN),
    )
    for baseline, key, bound in big_targets:
        name = f"3×{BIG_WIDTH}, K=1: ORT int8 ≥ {bound:g}× {baseline}"
        value = None if big is None else big[key]
        checks.append({"target": name, "value": value, "bound": bound,
                       "holds": None if value is None else value >= bound})  # fmt: skip
    for k in ks:
        for label, _, _ in RUNTIMES:
            c = by.get((SMALL_WIDTH, k, label))
            for key, what in (
                ("cost_vs_raw", "raw env (random actions, separate run)"),
                ("cost_vs_own_env", "its own env.step time (same episodes)"),
            ):
                value = None if c is None else c[key]
                checks.append({
                    "target": f"3×{SMALL_WIDTH}, K={k}, {label}: actor loop ≤ "
                    f"{LOOP_COST_MAX:g}× {what}", "value": value, "bound": LOOP_COST_MAX,
                    "holds": None if value is None else value <= LOOP_COST_MAX,
                })  # fmt: skip
    return checks


def verdict(holds: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "not measured"}[holds]


def write_markdown(
    path: Path, machine: dict[str, Any], config: dict[str, Any], raw: dict[int, dict[str, Any]],
    cells: list[dict[str, Any]], checks: list[dict[str, Any]],
) -> None:  # fmt: skip
    lines = [
        "# Actor throughput (one actor, one core)",
        "", f"`{config['command']}`", "", f"- date: {machine['date']}",
        f"- CPU: {machine['cpu_model']} ({machine['cores']} cores; "
        f"flags: {', '.join(machine['cpu_flags']) or 'n/a'})",
        f"- load average at start: {machine['load_avg_at_start']}",
        f"- python {machine['python']}, torch {machine['torch']}, "
        f"onnxruntime {machine['onnxruntime']}, numpy {machine['numpy']}, "
        f"gymnasium {machine['gymnasium']}",
        f"- env {ENV_ID}, policy 4 → (W, W, W) → 2, eps {EPSILON}, n-step {N_STEP}, "
        f"~{config['seconds']} s per cell in {config['trials']} trials (median)", "",
        "Raw env (precomputed random actions, no inference, no adder):", "",
        "| K | env steps/s | µs / vector step |", "|---|---|---|",
    ]  # fmt: skip
    for k, r in raw.items():
        lines.append(f"| {k} | {r['env_steps_per_s']:,.0f} | {r['us_per_vector_step']:,.1f} |")
    lines += ["", *md_table(HEADERS, table_rows(cells))]  # fmt: skip
    lines += ["", "Targets:", ""]
    for c in checks:
        v = "—" if c["value"] is None else f"{c['value']:.2f}×"
        lines.append(f"- {verdict(c['holds'])}: {c['target']} (measured {v})")
    path.write_text("\n".join(lines) + "\n")


def sb3_sps(env_id: str, k: int, seconds: float, trials: int, kw: dict[str, Any]) -> dict[str, Any]:
    """SB3's collection as the bench's SB3 cells collect: its CnnPolicy (action, value,
    log-prob) over the engine's vector env (``ActorQVecEnv``)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import obs_as_tensor

    from actorq.bench.sb3_vecenv import ActorQVecEnv
    from actorq.envs import make_vector_env

    venv = ActorQVecEnv(make_vector_env(env_id, k, **kw))
    try:
        model = PPO("CnnPolicy", venv, seed=SEED, device="cpu", n_steps=128)
        obs = venv.reset()

        def run(n: int) -> float:
            nonlocal obs
            t = time.perf_counter()
            for _ in range(n):
                with torch.no_grad():
                    actions, _, _ = model.policy(obs_as_tensor(obs, model.device))
                obs, _, _, _ = venv.step(actions.numpy())
            return time.perf_counter() - t

        run(32)
        return rates(n := calibrate(run, seconds, trials), k, timed_trials(run, n, trials))
    finally:
        venv.close()


def atari(game: str, k: int, seconds: float, trials: int) -> dict[str, Any]:
    """Env steps/s at K envs: raw env, actorq's actor, SB3's collection (module docstring)."""
    from actorq.agents.pixels import pixel_snapshot
    from actorq.agents.ppo.networks import NatureCNNPolicy
    from actorq.core.exploration import PolicySampler
    from actorq.envs.atari import envpool_installed
    from actorq.replay.adders import TrajectoryAdder

    env_id, spec = f"atari:{game}", env_spec(f"atari:{game}")
    torch.manual_seed(SEED)
    net = NatureCNNPolicy(spec.observation.shape, spec.num_actions)
    # int8 uncalibrated (its activation bound): the same kernels and speed as a calibrated one
    snaps = {p: pixel_snapshot(net, 1, spec, "categorical", p).to_bytes() for p in ("fp32", "int8")}
    out: dict[str, dict[str, Any]] = {}
    # both engines where EnvPool is installed (--atari-engine auto picks it), in one run
    for engine in ("ale", "envpool") if envpool_installed() else ("ale",):
        kw = {"engine": engine}
        out[f"raw env ({engine})"] = raw_env_sps(k, seconds, trials, env_id, **kw)
        for precision, data in snaps.items():
            cache = _LocalCache()
            cache.publish(1, data)
            actor = VectorActor(env_id, spec, k, SEED, cache, PolicySampler(SEED),
                                TrajectoryAdder(128, k, spec), env_kwargs=kw)  # fmt: skip
            out[f"actorq actor, {engine} (ORT {precision})"] = time_actor(actor, k, seconds, trials)
            actor.close()
        out[f"SB3 collection, {engine} (torch fp32)"] = sb3_sps(env_id, k, seconds, trials, kw)
    return out


def atari_main(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    results = {"benchmark": "actor_throughput --atari", "game": args.atari, "cells": rows,
               "machine": machine_info(), "command": command("actor_throughput.py")}  # fmt: skip
    for k in args.ks:
        sps = atari(args.atari, k, args.seconds, args.trials)
        for what, r in sps.items():  # against SB3 on the same engine
            engine = "envpool" if "envpool" in what else "ale"
            sb3 = sps[f"SB3 collection, {engine} (torch fp32)"]["env_steps_per_s"]
            rows.append({"k": k, "what": what, **r, "vs_sb3": r["env_steps_per_s"] / sb3})
            print(f"K={k} {what}: {r['env_steps_per_s']:,.0f} env steps/s", flush=True)
    table = [[str(c["k"]), c["what"], f"{c['env_steps_per_s']:,.0f}",
              f"{4 * c['env_steps_per_s']:,.0f}", f"{c['vs_sb3']:.2f}×"] for c in rows]  # fmt: skip
    head = ["K", "collector", "env steps/s", "frames/s (×4)", "vs SB3"]
    title = f"Atari actor throughput, {args.atari} (one process, one thread)"
    lines = [*md_head(title, results), "", *md_table(head, table)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "atari_throughput.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "atari_throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--widths", type=ints, default=[64, 256, 1024, 2048])
    ap.add_argument("--ks", type=ints, default=[1, 16])
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per cell")
    ap.add_argument("--trials", type=int, default=3, help="the timed steps are split in trials")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--atari", metavar="GAME", help="Atari instead: actorq's actor vs SB3's")
    args = ap.parse_args(argv)
    if min(args.seconds, args.trials, *args.widths, *args.ks, 1) <= 0:
        ap.error("--seconds, --trials, --widths and --ks must be positive")
    if args.atari:
        return atari_main(args)

    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    config = {
        "command": "python benchmarks/actor_throughput.py "
        f"--widths {','.join(map(str, args.widths))} --ks {','.join(map(str, args.ks))} "
        f"--seconds {args.seconds:g} --trials {args.trials} --out {args.out}", "env": ENV_ID,
        "widths": args.widths, "depth": DEPTH, "ks": args.ks, "seconds": args.seconds,
        "trials": args.trials, "epsilon": EPSILON, "n_step": N_STEP, "gamma": GAMMA, "seed": SEED,
        "threads": 1,
    }  # fmt: skip
    print(f"actor throughput on {machine['cpu_model']} ({machine['cores']} cores)", flush=True)

    raw: dict[int, dict[str, Any]] = {}
    for k in args.ks:
        raw[k] = raw_env_sps(k, args.seconds, args.trials)
        print(f"raw env K={k}: {raw[k]['env_steps_per_s']:,.0f} env steps/s", flush=True)

    cells: list[dict[str, Any]] = []
    for width in args.widths:
        snaps = snapshots_for(width)
        for k in args.ks:
            row: dict[str, dict[str, Any]] = {}
            for label, kind, precision in RUNTIMES:
                r = actor_sps(snaps[precision], kind, k, args.seconds, args.trials)
                r.update(
                    width=width, k=k, runtime=label, runtime_kind=kind, precision=precision,
                    snapshot_bytes=len(snaps[precision].to_bytes()),
                    raw_env_steps_per_s=raw[k]["env_steps_per_s"],
                    cost_vs_raw=raw[k]["env_steps_per_s"] / r["env_steps_per_s"],
                )  # fmt: skip
                row[label] = r
                print(f"  3×{width} K={k} {label}: {r['env_steps_per_s']:,.0f} env steps/s")
            for r in row.values():
                sps = r["env_steps_per_s"]
                r["speedup_vs_torch_fp32"] = sps / row[TORCH_FP32]["env_steps_per_s"]
                r["speedup_vs_ort_fp32"] = sps / row[ORT_FP32]["env_steps_per_s"]
                cells.append(r)

    checks = check_targets(cells, args.ks)

    results = {
        "benchmark": "actor_throughput", "machine": machine, "config": config,
        "raw_env": list(raw.values()), "cells": cells, "targets": checks,
    }  # fmt: skip
    json_path = args.out / "actor_throughput.json"
    md_path = args.out / "actor_throughput.md"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    write_markdown(md_path, machine, config, raw, cells, checks)
    print(md_path.read_text() + f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
