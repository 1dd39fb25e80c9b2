"""Simulated annealing with force-directed soft-macro placement on a shipped netlist, and the
chip cost's and FD's speed (docs/chip.md has the protocol and the numbers).

Per seed: :func:`actorq.chip.anneal.anneal` from the hard macros of ``legalized.plc``,
``initial.plc`` (legalized first) or a random legal placement, FD every ``--fd-every`` accepted
moves and at the end; the proxy of the start, the best before and after the final FD, its terms,
CPU seconds, evaluations, FD runs. Resumable: rows of the same settings in ``--out`` are kept.
``--timing``: one FD run per ``.plc`` and ``ChipPlacementEnv`` episodes of random legal actions
(``chip_anneal_timing.json`` beside ``--out``). ``--cost``: per shipped netlist, parsing, a full
cost evaluation and one-macro moves + ``costs()`` (medians), incremental checked against full
(``chip_cost.json`` beside ``--out``).

    .venv/bin/python benchmarks/chip_anneal.py --start random --seeds 0 --steps 600000
    .venv/bin/python benchmarks/chip_anneal.py --netlist sample_clustered --start initial \\
        --steps 500 --out /tmp/chip_anneal_smoke.json                       # a smoke run
    .venv/bin/python benchmarks/chip_anneal.py --cost --repeats 1 --moves 200 --out /tmp/c.json
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from _machine import check, command, machine_info, md_table, timed, write_json_atomic
from actorq.chip.anneal import AnnealConfig, anneal, random_legal_placement
from actorq.chip.cost import PlacementCost
from actorq.chip.force import FDConfig
from actorq.chip.netlist import get_netlist, netlist_dir, netlist_names
from actorq.chip.plc import load_plc

PUBLISHED = {
    "SA best (MacroPlacement)": 0.7552, "SA go-with-the-winners": 0.8005,
    "circuit-training RL mean": 0.8419,
}  # fmt: skip


def _costs(c: Any) -> dict[str, float]:
    return {
        "wirelength_cost": c.wirelength_cost, "density_cost": c.density_cost,
        "congestion_cost": c.congestion_cost, "proxy": c.proxy,
    }  # fmt: skip


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
        "netlist": netlist, "start": start, "seed": seed, "steps": steps, "fd_every": fd_every,
        "start_costs": start_costs, "proxy_before_fd": res.proxy_before_fd,
        "proxy_after_fd": res.best_proxy, "final_costs": _costs(final), "cpu_s": res.cpu_seconds,
        "wall_s": wall, "evaluations": res.evaluations, "fd_runs": res.fd_runs,
        "fd_s": res.fd_seconds, "accepted": res.accepted, "illegal": res.illegal,
        "history_every_1pct": res.history,
    }  # fmt: skip


def timing(netlist: str, repeats: int, episodes: int) -> dict[str, Any]:
    """FD and environment-step times (module docstring)."""
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
                    "plc": f, "seed": k, "wall_s": r.seconds, "cpu_s": time.process_time() - c,
                    "before": _costs(r.before), "after": _costs(r.after),
                }
            )  # fmt: skip
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
            "episodes": episodes, "macros": env.n, "actions": int(env.action_space.n),
            "obs_size": int(env.observation_space.shape[0]),
            "macro_step_median_s": float(np.median(macro_steps)) if macro_steps else None,
            "last_step_median_s": float(np.median(last_steps)) if last_steps else None,
            "last_step_cpu_median_s": float(np.median(last_cpu)) if last_cpu else None,
            "episode_s_median": float(np.median(last_steps) + np.sum(macro_steps) / episodes),
            "episode_cpu_s_median": float(np.median(episode_cpu)) if episode_cpu else None,
            "results": rewards,
        },
    }  # fmt: skip


PARSE_TARGET_S = 2.0
MOVE_TARGET_S = 1e-3
BIG = "ariane133"  # --cost's check: it parses in <= 2 s, a hard-macro move <= 1 ms


def _move_time(pc: PlacementCost, nodes: np.ndarray, moves: int, seed: int) -> float | None:
    """Median seconds of one move + costs() of a random node of ``nodes`` (None: no nodes)."""
    if not len(nodes):
        return None
    rng = np.random.default_rng(seed)
    w, h = pc.canvas.width, pc.canvas.height
    pick = rng.choice(nodes, 2 * moves)
    xs, ys = rng.uniform(0, w, 2 * moves), rng.uniform(0, h, 2 * moves)
    orients = rng.choice([0, 1, 2, 3], 2 * moves)  # N, FN, S, FS: flips keep the footprint
    ts = []
    for k in range(2 * moves):
        t = time.perf_counter()
        pc.move(int(pick[k]), float(xs[k]), float(ys[k]), int(orients[k]))
        pc.costs()
        if k >= moves:  # the first half warms the per-node cache, as a long SA run would
            ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def measure(name: str, repeats: int, moves: int) -> dict[str, Any]:
    wall, cpu = timed(lambda: get_netlist(name), repeats)
    parse_s, parse_min_s, parse_cpu_s = statistics.median(wall), min(wall), statistics.median(cpu)
    nl = get_netlist(name)
    plc = load_plc(netlist_dir(name) / "initial.plc")
    t = time.perf_counter()
    pc = PlacementCost.from_placement(nl, plc)
    setup_s = time.perf_counter() - t
    full_s = statistics.median(timed(pc.full_costs, repeats)[0])
    c0 = pc.costs()
    hard_s = _move_time(pc, nl.hard_macros, moves, 0)
    soft_s = _move_time(pc, nl.soft_macros, moves, 1)
    inc = pc.costs()
    ref = PlacementCost(nl, pc.canvas, None, pc.x, pc.y, pc.orientation).costs()
    err = max(
        abs(inc.wirelength_cost - ref.wirelength_cost), abs(inc.density_cost - ref.density_cost),
        abs(inc.congestion_cost - ref.congestion_cost),
    )  # fmt: skip
    return {
        "netlist": name, "nodes": nl.num_nodes, "nets": nl.num_nets,
        "hard_macros": len(nl.hard_macros), "soft_macros": len(nl.soft_macros),
        "grid": f"{pc.grid.cols}x{pc.grid.rows}", "parse_s": parse_s, "parse_min_s": parse_min_s,
        "parse_cpu_s": parse_cpu_s, "setup_s": setup_s, "full_s": full_s, "hard_move_s": hard_s,
        "soft_move_s": soft_s,
        "initial_costs": {
            "wirelength": c0.wirelength, "wirelength_cost": c0.wirelength_cost,
            "density_cost": c0.density_cost, "congestion_cost": c0.congestion_cost,
            "proxy": c0.proxy,
        },
        "header_costs": plc.costs,
        "incremental_vs_full_max_abs_err": err,
    }  # fmt: skip


def cost_speed(a: argparse.Namespace, argv: list[str] | None) -> int:
    """``--cost``: parse, full evaluation and move times per shipped netlist (docstring)."""
    rows = [measure(name, a.repeats or 5, a.moves) for name in netlist_names()]
    ms = lambda v: "-" if v is None else f"{v * 1e3:.3f}"  # noqa: E731
    cols = ["netlist", "nodes", "nets", "grid", "parse ms", "parse cpu ms", "setup ms", "full ms"]
    cols += ["hard move ms", "soft move ms", "proxy", "inc-full err"]
    print("\n".join(md_table(cols, [[
        r["netlist"], f"{r['nodes']:,}", f"{r['nets']:,}", r["grid"], ms(r["parse_s"]),
        ms(r["parse_cpu_s"]), ms(r["setup_s"]), ms(r["full_s"]), ms(r["hard_move_s"]),
        ms(r["soft_move_s"]), f"{r['initial_costs']['proxy']:.4f}",
        f"{r['incremental_vs_full_max_abs_err']:.1e}"] for r in rows])))  # fmt: skip
    big = next(r for r in rows if r["netlist"] == BIG)
    # the fastest parse: the machine is shared, and the target is about the code, not the load
    passed = big["parse_min_s"] <= PARSE_TARGET_S and big["hard_move_s"] <= MOVE_TARGET_S
    verdict = check(
        f"{BIG} parses in <= {PARSE_TARGET_S:g} s (fastest {big['parse_min_s']:.3f} s, median "
        f"{big['parse_s']:.3f} s, CPU {big['parse_cpu_s']:.3f} s) and a hard-macro move + costs "
        f"takes <= {MOVE_TARGET_S * 1e3:g} ms ({big['hard_move_s'] * 1e3:.3f} ms)",
        bool(passed),
    )
    out = a.out.with_name("chip_cost.json")
    write_json_atomic(out, {"command": command("chip_anneal.py", argv), "machine": machine_info(),
                            "repeats": a.repeats or 5, "moves": a.moves, "rows": rows,
                            "check": verdict})  # fmt: skip
    print(f"wrote {out}")
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--netlist", default="ariane133")
    ap.add_argument("--start", choices=["legalized", "initial", "random"], default="legalized")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--steps", type=int, default=1_000_000, help="SA proposals per run")
    ap.add_argument("--fd-every", type=int, default=20_000, help="accepted moves between FDs")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/chip_anneal.json"))
    ap.add_argument("--timing", action="store_true", help="time FD and env steps only")
    ap.add_argument("--cost", action="store_true", help="time the proxy cost only")
    ap.add_argument("--episodes", type=int, default=3, help="env episodes for --timing")
    ap.add_argument("--repeats", type=int, help="FD runs per .plc (--timing, 2) or timed parse "
                    "and full calls (--cost, 5)")  # fmt: skip
    ap.add_argument("--moves", type=int, default=2000, help="timed moves per kind for --cost")
    a = ap.parse_args(argv)
    if a.cost:
        return cost_speed(a, argv)
    if a.timing:
        out = a.out.with_name("chip_anneal_timing.json")
        res = timing(a.netlist, a.repeats or 2, a.episodes)
        res["machine"] = machine_info()
        res["command"] = command("chip_anneal.py", argv)
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
        write_json_atomic(out, res)
        print(f"wrote {out}")
        return 0
    data: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {"rows": []}
    done = {(r["netlist"], r["start"], r["seed"], r["steps"], r["fd_every"]) for r in data["rows"]}
    for seed in [int(s) for s in a.seeds.split(",") if s.strip()]:
        key = (a.netlist, a.start, seed, a.steps, a.fd_every)
        if key in done:
            print(f"skip {key}: already in {a.out}")
            continue
        print(f"running {key} ...", flush=True)
        row = run_one(a.netlist, a.start, seed, a.steps, a.fd_every)
        row["command"] = command("chip_anneal.py", argv)
        data["rows"].append(row)
        data["machine"] = machine_info()
        data["published_ariane133"] = PUBLISHED
        write_json_atomic(a.out, data)  # a killed run never leaves a truncated results file
    cols = ["netlist", "start", "seed", "steps", "fd every", "start proxy", "SA best (before FD)"]
    cols += ["after FD", "wl", "den", "cong", "evals", "FD runs", "CPU s"]
    print("\n".join(md_table(cols, [[
        r["netlist"], r["start"], str(r["seed"]), f"{r['steps']:,}", f"{r['fd_every']:,}",
        f"{r['start_costs']['proxy']:.4f}", f"{r['proxy_before_fd']:.4f}",
        f"{r['proxy_after_fd']:.4f}", f"{f['wirelength_cost']:.4f}", f"{f['density_cost']:.4f}",
        f"{f['congestion_cost']:.4f}", f"{r['evaluations']:,}", str(r["fd_runs"]),
        f"{r['cpu_s']:.0f}"] for r in data["rows"] for f in [r["final_costs"]]])))  # fmt: skip
    print(
        "published on ariane133 (after FD): " + ", ".join(f"{k} {v}" for k, v in PUBLISHED.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
