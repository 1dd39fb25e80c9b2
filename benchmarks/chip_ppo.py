"""PPO trains the chip macro placement policy through the actor-learner loop, int8 or fp32 actors.

One cell per (netlist, precision, seed): ``train(PPOConfig(env="chip:<netlist>", network="chip"))``
(circuit-training's policy, Mirhoseini et al., Nature 2021, trained by PPO with one in-process
actor: deterministic for a seed) for ``SETTINGS``' env steps (macros placed; ``--steps``
overrides). Recorded: the final greedy proxy at the run's precision and fp32, untrained and over
training; random legal placements and, on the small netlists, annealing (also snapped to the
policy's grid); speed, int8-vs-fp32 agreement, snapshot bytes. One JSON per cell under ``--out``,
skipped when it exists; ``--report`` prints the table.

    .venv/bin/python benchmarks/chip_ppo.py                       # small netlists, int8 + fp32
    .venv/bin/python benchmarks/chip_ppo.py --netlists ariane133 --steps 1064 \\
        --out /tmp/chip_ppo_smoke                                 # a one-update smoke run
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from _machine import command, machine_info, md_table, write_json_atomic
from actorq import PPOConfig, train
from actorq.agents.ppo.chip import ChipPolicyIO
from actorq.agents.ppo.learning import PPOLearner
from actorq.checkpoint import load
from actorq.chip.env import ChipPlacementEnv, random_legal_proxies
from actorq.envs import env_spec, make_env
from actorq.logging import read_metrics
from actorq.rundir import RunDir


@dataclasses.dataclass(frozen=True)
class Settings:
    steps: int
    """env steps (macros placed), all actors together"""
    envs: int = 4
    num_steps: int = 64
    minibatch: int = 64
    lr: float = 1e-3
    epochs: int = 4
    ent_coef: float = 0.01
    eval_every: int = 2048
    random_episodes: int = 100
    sa_steps: int = 0
    """simulated-annealing proposals for the SA baseline (0: none)"""


SETTINGS: dict[str, Settings] = {
    # 2 macros, a 10 × 20 grid: ~10 ms per placement (FD included); ~1 minute per cell
    "toy_macro_stdcell": Settings(8192, 4, 64, 64, 1e-3, eval_every=1024, sa_steps=2000),
    # 100 macros, a 20 × 20 grid, no soft macros: ~12 ms per placement, the learner dominates;
    # ~8 minutes per cell
    "macro_tiles_10x10": Settings(
        51_200, 4, 100, 100, 1e-3, eval_every=5120, random_episodes=50, sa_steps=20_000
    ),
    # 133 macros, a 21 × 24 grid: ~2.4 s of FD per placement (circuit-training's PPO lr 4e-4)
    "ariane133": Settings(100_000, 4, 133, 133, 4e-4, eval_every=10_640, random_episodes=5),
}


def _costs(info: dict[str, Any]) -> dict[str, float]:
    c = info.get("costs") or {}
    keys = ("wirelength_cost", "density_cost", "congestion_cost", "proxy")
    return {k: float(c[k]) for k in keys if k in c}


def _greedy(io: ChipPolicyIO, version: int, precision: str) -> dict[str, Any]:
    ret = float(io.evaluate(io.snapshot(version, precision), 1, 0)[0])
    return {"return": ret, "reason": io.last_info.get("reason"), **_costs(io.last_info)}


def random_legal(env: ChipPlacementEnv, episodes: int, seed: int) -> dict[str, Any]:
    """Placements of uniformly random legal cells, in the env (the policy's action space)."""
    t = time.perf_counter()
    p = random_legal_proxies(env, episodes, seed)
    return {
        "episodes": episodes, "mean": float(p.mean()), "std": float(p.std()), "min": float(p.min()),
        "p10": float(np.percentile(p, 10)), "s_per_episode": (time.perf_counter() - t) / episodes,
    }  # fmt: skip


def annealing(netlist: str, env: ChipPlacementEnv, steps: int, seed: int) -> dict[str, Any]:
    """SA with FD (as ``actorq chip place``), and its macros snapped into the env's grid."""
    from actorq.chip.anneal import AnnealConfig, anneal
    from actorq.chip.cost import PlacementCost
    from actorq.chip.force import FDConfig
    from actorq.chip.netlist import get_netlist, netlist_dir
    from actorq.chip.plc import load_plc

    nl = get_netlist(netlist)
    pc = PlacementCost.from_placement(nl, load_plc(netlist_dir(netlist) / "initial.plc"))
    res = anneal(pc, AnnealConfig(steps=steps, seed=seed, fd=FDConfig(seed=seed)))
    # like for like: each macro (in the env's order) to the nearest cell where it is legal
    _, info = env.reset(seed=0)
    for node in env.order:
        d = (env.cx - pc.x[node]) ** 2 + (env.cy - pc.y[node]) ** 2
        d[~info["action_mask"].astype(bool)] = np.inf
        _, _, term, trunc, info = env.step(int(np.argmin(d)))
        if term or trunc:
            break
    return {
        "steps": steps, "proxy": float(res.best_proxy), "cpu_s": float(res.cpu_seconds),
        "snapped_proxy": float(info["proxy"]) if "proxy" in info else None,
        "snapped_reason": info.get("reason"),
    }  # fmt: skip


def _eval_history(run_dir: Path) -> list[tuple[int, float]]:
    return [(step, -v) for step, v in read_metrics(run_dir).get("charts/eval_return", [])]


def run_cell(
    netlist: str, precision: str, seed: int, s: Settings, actors: int, out: Path
) -> dict[str, Any]:
    run_dir = out / "runs" / f"{netlist}-{precision}-s{seed}"
    RunDir(run_dir).clear()  # a cell killed midway starts again (never a user's folder)
    cfg = PPOConfig(
        env=f"chip:{netlist}", network="chip", precision=precision, seed=seed, actors=actors,
        envs_per_actor=s.envs, num_steps=s.num_steps, minibatch_size=s.minibatch,
        learning_rate=s.lr, update_epochs=s.epochs, ent_coef=s.ent_coef, gamma=1.0,
        total_steps=s.steps, eval_every=s.eval_every, stop_at_target=False, progress=False,
        log_every=30.0, energy=False, run_dir=str(run_dir),
    )  # fmt: skip
    # time the learner's updates (the rest of the loop is the actor: env steps and inference)
    update_s: list[float] = []
    plain_update = PPOLearner.update

    def timed_update(self: PPOLearner, batch: Any) -> dict[str, float]:
        t = time.perf_counter()
        out = plain_update(self, batch)
        update_s.append(time.perf_counter() - t)
        return out

    PPOLearner.update = timed_update
    try:
        r = train(cfg)
    finally:
        PPOLearner.update = plain_update
    if r.interrupted:  # checkpointed, not finished: no cell file (a rerun goes on from it)
        raise SystemExit(130)
    spec = env_spec(cfg.env)
    learner = PPOLearner(cfg, spec)
    tensors, state, _ = load(run_dir / "checkpoint")
    learner.load_state(tensors, state["learner"])
    io = ChipPolicyIO(cfg, learner)
    version = int(state["counters"]["version"])
    trained = {p: _greedy(io, version, p) for p in dict.fromkeys((precision, "fp32"))}
    untrained_io = ChipPolicyIO(cfg, PPOLearner(cfg, spec))
    env = make_env(cfg.env)
    assert isinstance(env, ChipPlacementEnv)
    row: dict[str, Any] = {
        "netlist": netlist, "precision": precision, "seed": seed, "actors": actors,
        "settings": dataclasses.asdict(s), "macros": env.n, "grid": [env.rows, env.cols],
        "env_steps": r.env_steps, "placements": r.env_steps // max(env.n, 1), "updates": r.updates,
        "wall_s": r.wall_time_s, "eval_s": r.eval_time_s,
        "env_steps_per_s": r.env_steps / r.wall_time_s,
        "ms_per_env_step": 1e3 * r.wall_time_s / r.env_steps, "learner_s": float(sum(update_s)),
        "s_per_update": float(np.mean(update_s)) if update_s else None,
        # what is left of the loop: the actor (env steps with FD, inference, sampling)
        "actor_ms_per_env_step": 1e3
        * (r.wall_time_s - sum(update_s) - r.eval_time_s)
        / r.env_steps, "greedy": trained[precision], "greedy_fp32_weights": trained["fp32"],
        "untrained_greedy": _greedy(untrained_io, 0, precision),
        "eval_history_proxy": _eval_history(run_dir), "action_agreement": r.action_agreement,
        "agreement_states": r.agreement_states, "logprob_gap": r.logprob_gap,
        "snapshot_bytes": r.snapshot_bytes, "fp32_snapshot_bytes": r.fp32_snapshot_bytes,
        "publish_ms": r.publish_ms, "random_legal": random_legal(env, s.random_episodes, seed + 1),
    }  # fmt: skip
    if s.sa_steps:
        row["sa"] = annealing(netlist, env, s.sa_steps, seed)
    return row


def report(out: Path) -> None:  # fmt: skip
    cells = sorted(out.glob("*.json"))
    print(f"PPO --network chip ({out}); proxy cost, lower is better")
    rows = []
    cols = ["netlist", "prec", "seed", "env steps", "placements", "greedy proxy", "wl", "den"]
    cols += ["cong", "fp32 weights", "untrained", "random mean±std (best)", "SA (snapped)"]
    cols += ["wall s", "steps/s", "agree", "logp gap"]
    for path in cells:
        r = json.loads(path.read_text())
        g, rnd = r["greedy"], r["random_legal"]
        sa = r.get("sa")
        snapped = sa.get("snapped_proxy") if sa else None  # None: the grid's snap did not fit
        shown = "—" if snapped is None else f"{snapped:.4f}"
        sa_txt = f"{sa['proxy']:.4f} ({shown})" if sa else "-"
        gap = r["logprob_gap"]
        rows.append([
            r["netlist"], r["precision"], str(r["seed"]), f"{r['env_steps']:,}",
            f"{r['placements']:,}", f"{g.get('proxy', float('nan')):.4f}",
            f"{g.get('wirelength_cost', float('nan')):.4f}",
            f"{g.get('density_cost', float('nan')):.4f}",
            f"{g.get('congestion_cost', float('nan')):.4f}",
            f"{r['greedy_fp32_weights'].get('proxy', float('nan')):.4f}",
            f"{r['untrained_greedy'].get('proxy', float('nan')):.4f}",
            f"{rnd['mean']:.4f}±{rnd['std']:.4f} ({rnd['min']:.4f})", sa_txt,
            f"{r['wall_s']:.0f}", f"{r['env_steps_per_s']:.1f}",
            f"{100 * r['action_agreement']:.1f}%", "-" if gap is None else f"{gap:.4f}",
        ])  # fmt: skip
    print("\n".join(md_table(cols, rows)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--netlists", default="toy_macro_stdcell,macro_tiles_10x10")
    ap.add_argument("--precisions", default="int8,fp32")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--steps", type=int, help="env-step budget (default: SETTINGS per netlist)")
    ap.add_argument("--actors", type=int, default=0, help="0: one in-process actor")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/chip_ppo"))
    ap.add_argument("--report", action="store_true", help="print the table of --out only")
    a = ap.parse_args(argv)
    if not a.report:
        overrides = {} if a.steps is None else {"steps": a.steps}
        a.out.mkdir(parents=True, exist_ok=True)
        for netlist in a.netlists.split(","):
            base = SETTINGS.get(netlist)
            if base is None:  # another netlist: one placement per env per chunk
                n = make_env(f"chip:{netlist}", use_fd=False).unwrapped.n
                base = Settings(50 * 4 * n, num_steps=max(n, 2), minibatch=max(n, 2))
            s = dataclasses.replace(base, **overrides)
            for precision in a.precisions.split(","):
                for seed in (int(x) for x in a.seeds.split(",")):
                    path = a.out / f"{netlist}-{precision}-s{seed}.json"
                    if path.exists():
                        have = json.loads(path.read_text())["settings"]
                        note = "" if have == dataclasses.asdict(s) else " (other settings)"
                        print(f"skip {path.name}: done{note}")
                        continue
                    print(f"running {path.name}: {s}", flush=True)
                    row = run_cell(netlist, precision, seed, s, a.actors, a.out)
                    row["command"] = command("chip_ppo.py", argv)
                    row["machine"] = machine_info()
                    write_json_atomic(path, row)  # never a half-written cell
    report(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
