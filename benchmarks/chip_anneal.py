"""Simulated annealing with force-directed soft-macro placement on a shipped netlist (Ariane133).

What it measures
----------------
For each seed, on ``--netlist`` (default ``ariane133``), starting from the hard macros of
``legalized.plc`` (``--start legalized``: Google's legal version of the initial placement),
of ``initial.plc`` (``--start initial``; the annealing first moves its off-canvas and overlapping
macros to legal spots, :func:`actorq.chip.anneal.legalize`) or from a random legal placement
(``--start random``): :func:`actorq.chip.anneal.anneal` with ``AnnealConfig(steps, fd=FDConfig(),
fd_every)`` — the soft macros are placed by force-directed placement (circuit_training's default
schedule, :mod:`actorq.chip.force`) before the first step, every ``--fd-every`` accepted moves, and
around the best macros at the end. Recorded per run: the proxy of the start (with the ``.plc``'s
clusters), the best proxy the annealing reached (before the final FD) and after the final FD (what
the published numbers mean), its three terms, CPU seconds (process time: other work on a shared
machine does not inflate it), cost evaluations, FD runs and their seconds, accepted and illegal
moves.

Published on Ariane133 (proxy = wirelength + 0.5·density + 0.5·congestion after FD; TILOS
MacroPlacement's evaluation of Google's Circuit Training, Mirhoseini et al., Nature 2021):
simulated annealing best 0.7552, SA go-with-the-winners 0.8005, circuit-training RL mean 0.8419.

Commands (3 to 8 CPU minutes per run; resumable: runs already in the
results file with the same settings are skipped)::

    .venv/bin/python benchmarks/chip_anneal.py --start legalized --steps 1500000 --fd-every 20000
    .venv/bin/python benchmarks/chip_anneal.py --start random --seeds 0 --steps 600000

Quick smoke run::

    .venv/bin/python benchmarks/chip_anneal.py --netlist sample_clustered --start initial \\
        --steps 500 --out /tmp/chip_anneal_smoke.json

Results go to ``--out`` (default ``benchmarks/results/chip_anneal.json``), one row per
(netlist, start, seed, steps, fd_every).

Timings of the pieces (``--timing``, to ``benchmarks/results/chip_anneal_timing.json``): one FD
run (circuit_training's default schedule, 300 steps) on ``initial.plc`` and ``legalized.plc``
(wall and CPU seconds, the proxy before and after), and episodes of ``ChipPlacementEnv`` with
random legal actions (per-step time of the macro steps, and of the last step, which runs FD)::

    .venv/bin/python benchmarks/chip_anneal.py --timing
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _machine import machine_info
from actorq.chip.anneal import AnnealConfig, anneal, random_legal_placement
from actorq.chip.cost import PlacementCost
from actorq.chip.force import FDConfig
from actorq.chip.netlist import get_netlist, netlist_dir
from actorq.chip.plc import load_plc

PUBLISHED = {
    "SA best (MacroPlacement)": 0.7552,
    "SA go-with-the-winners": 0.8005,
    "circuit-training RL mean": 0.8419,
}


def _costs(c: Any) -> dict[str, float]:
    return {
        "wirelength_cost": c.wirelength_cost,
        "density_cost": c.density_cost,
        "congestion_cost": c.congestion_cost,
        "proxy": c.proxy,
    }


def run_one(netlist: str, start: str, seed: int, steps: int, fd_every: int) -> dict[str, Any]:
    nl = get_netlist(netlist)
    name = "legalized.plc" if start == "legalized" else "initial.plc"
    plc = load_plc(netlist_dir(netlist) / name)
    pc = PlacementCost.from_placement(nl, plc)
    if start == "random" and not random_legal_placement(pc, seed=seed):
        raise SystemExit(f"{netlist}: no random legal placement for seed {seed}")
    start_costs = _costs(pc.costs())
    t = time.perf_counter()
    res = anneal(
        pc, AnnealConfig(steps=steps, seed=seed, fd=FDConfig(seed=seed), fd_every=fd_every)
    )
    wall = time.perf_counter() - t
    final = pc.full_costs()
    return {
        "netlist": netlist,
        "start": start,
        "seed": seed,
        "steps": steps,
        "fd_every": fd_every,
        "start_costs": start_costs,
        "proxy_before_fd": res.proxy_before_fd,
        "proxy_after_fd": res.best_proxy,
        "final_costs": _costs(final),
        "cpu_s": res.cpu_seconds,
        "wall_s": wall,
        "evaluations": res.evaluations,
        "fd_runs": res.fd_runs,
        "fd_s": res.fd_seconds,
        "accepted": res.accepted,
        "illegal": res.illegal,
        "history_every_1pct": res.history,
    }


def timing(netlist: str, repeats: int, episodes: int) -> dict[str, Any]:
    """FD and environment-step times (module docstring)."""
    import numpy as np

    from actorq.chip.env import ChipPlacementEnv
    from actorq.chip.force import ForcePlacer

    nl = get_netlist(netlist)
    fd_rows = []
    for f in ("initial.plc", "legalized.plc"):
        path = netlist_dir(netlist) / f
        if not path.exists():
            continue
        for k in range(repeats):
            pc = PlacementCost.from_placement(nl, load_plc(path))
            placer = ForcePlacer(pc)
            c = time.process_time()
            r = placer.place(FDConfig(seed=k))
            fd_rows.append(
                {
                    "plc": f,
                    "seed": k,
                    "wall_s": r.seconds,
                    "cpu_s": time.process_time() - c,
                    "before": _costs(r.before),
                    "after": _costs(r.after),
                }
            )
    env = ChipPlacementEnv(netlist)
    macro_steps: list[float] = []
    last_steps: list[float] = []
    last_cpu: list[float] = []
    episode_cpu: list[float] = []
    rewards = []
    for ep in range(episodes):
        rng = np.random.default_rng(ep)
        _, info = env.reset(seed=ep)
        c0 = time.process_time()
        while True:
            a = int(rng.choice(np.flatnonzero(info["action_mask"])))
            t, c = time.perf_counter(), time.process_time()
            _, r, term, trunc, info = env.step(a)
            dt = time.perf_counter() - t
            if term or trunc:
                last_steps.append(dt)
                last_cpu.append(time.process_time() - c)
                episode_cpu.append(time.process_time() - c0)
                rewards.append({"reward": r, "reason": info["reason"]})
                break
            macro_steps.append(dt)
    return {
        "netlist": netlist,
        "fd": fd_rows,
        "env": {
            "episodes": episodes,
            "macros": env.n,
            "actions": int(env.action_space.n),
            "obs_size": int(env.observation_space.shape[0]),
            "macro_step_median_s": float(np.median(macro_steps)) if macro_steps else None,
            "last_step_median_s": float(np.median(last_steps)) if last_steps else None,
            "last_step_cpu_median_s": float(np.median(last_cpu)) if last_cpu else None,
            "episode_s_median": float(np.median(last_steps) + np.sum(macro_steps) / episodes),
            "episode_cpu_s_median": float(np.median(episode_cpu)) if episode_cpu else None,
            "results": rewards,
        },
    }


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["netlist"], r["start"], r["seed"], r["steps"], r["fd_every"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--netlist", default="ariane133")
    ap.add_argument("--start", choices=["legalized", "initial", "random"], default="legalized")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--steps", type=int, default=1_000_000, help="SA proposals per run")
    ap.add_argument("--fd-every", type=int, default=20_000, help="accepted moves between FDs")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/chip_anneal.json"))
    ap.add_argument("--timing", action="store_true", help="time FD and env steps only")
    ap.add_argument("--episodes", type=int, default=3, help="env episodes for --timing")
    ap.add_argument("--repeats", type=int, default=2, help="FD runs per .plc for --timing")
    a = ap.parse_args(argv)
    if a.timing:
        out = a.out.with_name("chip_anneal_timing.json")
        res = timing(a.netlist, a.repeats, a.episodes)
        res["machine"] = machine_info()
        res["command"] = "python benchmarks/chip_anneal.py " + " ".join(
            sys.argv[1:] if argv is None else argv
        )
        for r in res["fd"]:
            print(
                f"FD on {r['plc']} seed {r['seed']}: {r['wall_s']:.2f} s wall, "
                f"{r['cpu_s']:.2f} s CPU, proxy {r['before']['proxy']:.4f} -> "
                f"{r['after']['proxy']:.4f}"
            )
        e = res["env"]
        print(
            f"env {a.netlist}: {e['macros']} macros, {e['actions']} actions, obs {e['obs_size']}; "
            f"macro step {e['macro_step_median_s'] * 1e3:.3f} ms, last step (FD + cost) "
            f"{e['last_step_median_s']:.2f} s wall / {e['last_step_cpu_median_s']:.2f} s CPU, "
            f"episode {e['episode_s_median']:.2f} s wall / {e['episode_cpu_s_median']:.2f} s CPU"
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {out}")
        return 0
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    data: dict[str, Any] = {"rows": []}
    if a.out.exists():
        data = json.loads(a.out.read_text())
    done = {_key(r) for r in data["rows"]}
    for seed in seeds:
        key = (a.netlist, a.start, seed, a.steps, a.fd_every)
        if key in done:
            print(f"skip {key}: already in {a.out}")
            continue
        print(f"running {key} ...", flush=True)
        row = run_one(a.netlist, a.start, seed, a.steps, a.fd_every)
        row["command"] = "python benchmarks/chip_anneal.py " + " ".join(
            sys.argv[1:] if argv is None else argv
        )
        data["rows"].append(row)
        data["machine"] = machine_info()
        data["published_ariane133"] = PUBLISHED
        a.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = a.out.with_name(a.out.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(a.out)  # a killed run never leaves a truncated results file
    t = Table(title=f"simulated annealing + FD ({a.out})")
    cols = ["netlist", "start", "seed", "steps", "fd every", "start proxy", "SA best (before FD)"]
    cols += ["after FD", "wl", "den", "cong", "evals", "FD runs", "CPU s"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("netlist", "start") else "right")
    for r in data["rows"]:
        f = r["final_costs"]
        t.add_row(
            r["netlist"], r["start"], str(r["seed"]), f"{r['steps']:,}", f"{r['fd_every']:,}",
            f"{r['start_costs']['proxy']:.4f}", f"{r['proxy_before_fd']:.4f}",
            f"{r['proxy_after_fd']:.4f}", f"{f['wirelength_cost']:.4f}",
            f"{f['density_cost']:.4f}", f"{f['congestion_cost']:.4f}", f"{r['evaluations']:,}",
            str(r["fd_runs"]), f"{r['cpu_s']:.0f}",
        )  # fmt: skip
    Console(width=180).print(t)
    print(
        "published on ariane133 (after FD): " + ", ".join(f"{k} {v}" for k, v in PUBLISHED.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
