"""actorq's DQN vs Stable-Baselines3 DQN, side by side: time to CartPole-v1's threshold.

    .venv/bin/python benchmarks/dqn_peers.py --case cartpole \\
        --frameworks sb3 actorq-int8 actorq-fp32 --results benchmarks/results/dqn_peers
    .venv/bin/python benchmarks/dqn_peers.py --case wide --seeds 0 1 2

Needs the ``[peers]`` extra (stable-baselines3). Structure, cells, resumption and exit status as
in ``benchmarks/ppo_peers.py`` (whose helpers this script imports): each (case, framework, seed)
is one cell, trained in its own subprocess and written to ``<results>/<case>/<framework>-s<seed>
.json`` when it finishes; a cell whose JSON exists is skipped, so an interrupted matrix resumes
where it stopped; an existing cell with another budget is refused. After the cells a Markdown
table goes to stdout and to ``<results>/<case>/report.md``. Exit status: 0 when every asked cell
is done, 1 when a cell failed, 130 when interrupted.

Cases.

- ``cartpole``: CartPole-v1, Q-network 256x256 for both frameworks, at most 300k env steps
  (``--budget``), 10 seeds by default. Each run stops at the threshold: the first periodic
  evaluation with mean return >= 475. Reported: success rate, median and IQM (interquartile
  mean, rliable's: scipy's trim_mean(x, 0.25)) of the time to target, env steps to target, env
  steps/s, and the SB3/actorq ratio of the median times with a bootstrap 95% CI over seeds.
  A run that never reaches 475 within the budget is a **failure**: its time to target is +inf
  (so it counts in the median and IQM, as a loss), its steps to target missing.
- ``wide``: CartPole-v1 at QuaRL's width, 3 x 2048 hidden units, for both, a fixed budget of env
  steps (default 20k; no early stop), one evaluation at the budget. Reported: env steps/s and
  the return at the budget. SB3's single-process loop (act, step, train, in turn) is slow here.

Evaluation, the same for both frameworks: every 10k env steps (``--eval-every``; ``wide``: at the
budget), 10 deterministic (greedy) episodes on separately seeded envs, seeds 10000..10009
(actorq's own periodic evaluation uses exactly these seeds). Evaluation time is excluded from
training time and from time to target: SB3 through the callback here, which times its own
evaluations and returns False (stops ``learn``) at the threshold; actorq through the cumulative
``perf/eval_s`` in its metrics.csv. Times run from the start of SB3's ``learn`` and from the
start of actorq's training loop (``TrainResult`` times; actorq's process start-up excluded).

actorq's time to target: ``TrainResult.time_to_target_s`` is taken at the start of the
evaluation that reached the target and includes every earlier evaluation, so the cumulative
``perf/eval_s`` logged at the last evaluation *before* the target step is subtracted (the row
at the target step already includes that evaluation itself). actorq also confirms a hit on 10
fresh seeds before it stops (``stop_at_target=True``); an unconfirmed hit keeps training. Its
success is that confirmed hit (``reached_target``): stricter than SB3's, never in actorq's favour.
The cell JSON records the first unconfirmed evaluation >= 475 too (``first_eval_at_target``).

Hyperparameters, SB3. Source: DLR-RM/rl-baselines3-zoo, hyperparams/dqn.yml (commit 019107e).
Quoted exactly::

    # Almost Tuned
    CartPole-v1:
      n_timesteps: !!float 2e5
      policy: 'MlpPolicy'
      learning_rate: !!float 2.5e-4
      batch_size: 512
      buffer_size: 100000
      learning_starts: 0
      gamma: 0.99
      target_update_interval: 5000
      train_freq: 16
      gradient_steps: 4
      exploration_fraction: 0.06
      exploration_final_eps: 0.11

How they are used here (``sb3_dqn_kwargs``):

- ``net_arch``: [256, 256] (cartpole) or [2048, 2048, 2048] (wide), as actorq's, instead of
  MlpPolicy's default [64, 64] (the one change to rl-zoo's entry).
- ``exploration_fraction`` is a fraction of ``learn``'s ``total_timesteps``; rl-zoo's 0.06 of
  2e5 steps anneals epsilon 1 -> 0.11 over 12,000 env steps. Here ``learn`` gets the cell's
  budget, so the fraction is rescaled to keep those 12,000 steps (0.04 at 300k, 0.6 at 20k).
- Keys not listed take SB3's DQN defaults (``tau=1.0``, ``exploration_initial_eps=1.0``,
  ``max_grad_norm=10``, Huber loss, Adam eps 1e-8, one env). torch threads: 1.

actorq: ``DQNConfig`` defaults (double, dueling, 3-step, Ape-X epsilons, 2 actors), with
``hidden`` set per case; see ``ACTORQ_DQN``. The two configurations are each framework's own
tuned recipe, not a matched set of hyperparameters: this benchmark compares the systems as
shipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import ppo_peers
from ppo_peers import (
    EVAL_TIME_METRIC,
    _as_dict,
    _Greedy,
    _jsonable,
    _num,
    first_at_or_above,
    machine_info,
    read_metrics_csv,
    say,
    write_json_atomic,
)

# --------------------------------------------------------------------------------------------
# Settings (edit here)
# --------------------------------------------------------------------------------------------

#: rl-baselines3-zoo's DQN CartPole-v1 entry, as in hyperparams/dqn.yml (module docstring).
ZOO_DQN_CARTPOLE: dict[str, Any] = {
    "n_timesteps": 200_000,
    "policy": "MlpPolicy",
    "learning_rate": 2.5e-4,
    "batch_size": 512,
    "buffer_size": 100_000,
    "learning_starts": 0,
    "gamma": 0.99,
    "target_update_interval": 5000,
    "train_freq": 16,
    "gradient_steps": 4,
    "exploration_fraction": 0.06,
    "exploration_final_eps": 0.11,
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark setting: env, network width, default budget and evaluation interval."""

    env_id: str  # actorq's prefixed form, for actorq.envs.make_env and DQNConfig(env=...)
    hidden: tuple[int, ...]
    budget: int
    eval_every: int | None  # None: one evaluation, at the budget
    seeds: tuple[int, ...]
    target: float = 475.0
    stop_at_target: bool = True


CASES: dict[str, Case] = {
    "cartpole": Case("gym:CartPole-v1", (256, 256), 300_000, 10_000, tuple(range(10))),
    "wide": Case(
        "gym:CartPole-v1", (2048, 2048, 2048), 20_000, None, (0, 1, 2), stop_at_target=False
    ),
}

#: actorq's DQNConfig fields set by this benchmark (everything else: DQNConfig's defaults).
ACTORQ_DQN: dict[str, Any] = {"actors": 2}

FRAMEWORKS = ("sb3", "actorq-int8", "actorq-fp32", "actorq-fp16")
EVAL_EPISODES = 10
EVAL_SEED = 10_000  # periodic evaluations: seeds 10000..10009
CURVE_METRIC = "charts/eval_return"
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


# --------------------------------------------------------------------------------------------
# SB3 cell
# --------------------------------------------------------------------------------------------


def sb3_dqn_kwargs(hidden: Sequence[int], budget: int) -> dict[str, Any]:
    """rl-zoo's CartPole-v1 entry as ``stable_baselines3.DQN`` keyword arguments: ``net_arch``
    set to ``hidden``; ``exploration_fraction`` rescaled to rl-zoo's 12,000 annealing steps."""
    kw = {k: v for k, v in ZOO_DQN_CARTPOLE.items() if k != "n_timesteps"}
    anneal_steps = ZOO_DQN_CARTPOLE["exploration_fraction"] * ZOO_DQN_CARTPOLE["n_timesteps"]
    kw["exploration_fraction"] = min(1.0, anneal_steps / budget)
    kw["policy_kwargs"] = {"net_arch": list(hidden)}
    return kw


def run_sb3_cell(cell: dict[str, Any]) -> dict[str, Any]:
    """Train SB3 DQN for one cell, evaluating every ``eval_every`` steps (timed apart) and
    stopping at the first evaluation >= the target when the case says so."""
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    from actorq.envs import make_env

    torch.set_num_threads(1)
    case = CASES[cell["case"]]
    every, seed, budget = cell["eval_every"], cell["seed"], cell["budget"]
    greedy = _Greedy(case.env_id, EVAL_EPISODES)

    class EvalAndStop(BaseCallback):
        """Every ``every`` env steps: 10 deterministic episodes (seeds 10000..10009) on separate
        envs; keeps its own evaluation time; returns False (stop) at the target."""

        def __init__(self) -> None:
            super().__init__()
            self.next_eval = every
            self.eval_time = 0.0
            self.t0 = 0.0
            self.curve: list[dict[str, Any]] = []
            self.hit: dict[str, Any] | None = None

        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            start = time.perf_counter()
            train_s = start - self.t0 - self.eval_time
            rets = greedy(self.model, EVAL_SEED, None)
            self.eval_time += time.perf_counter() - start
            self.next_eval = (self.num_timesteps // every + 1) * every
            point = {
                "step": int(self.num_timesteps),
                "return": float(rets.mean()),
                "std": float(rets.std()),
                "train_time_s": train_s,
            }
            self.curve.append(point)
            say(
                f"    eval @ {point['step']:>9,} steps, {train_s:7.1f} s training: "
                f"{point['return']:8.1f} ± {point['std']:6.1f}"
            )
            if self.hit is None and point["return"] >= case.target:
                self.hit = point
                return not case.stop_at_target
            return True

    env = make_env(case.env_id)
    kw = sb3_dqn_kwargs(case.hidden, budget)
    model = DQN(env=env, seed=seed, device="cpu", verbose=0, **kw)
    cb = EvalAndStop()
    t0 = time.perf_counter()
    model.learn(total_timesteps=budget, callback=cb, progress_bar=False)
    wall = time.perf_counter() - t0
    greedy.close()
    env.close()
    train_s = wall - cb.eval_time
    steps = int(model.num_timesteps)
    hit = cb.hit
    return {
        "env_steps": steps,
        "train_time_s": train_s,
        "wall_time_s": wall,
        "eval_time_s": cb.eval_time,
        "steps_per_s": steps / train_s if train_s > 0 else None,
        "curve": cb.curve,
        "reached_target": hit is not None,
        "steps_to_target": hit["step"] if hit else None,
        "time_to_target_s": hit["train_time_s"] if hit else None,
        "first_eval_at_target": hit["step"] if hit else None,
        "hyperparams": {"rl_zoo": ZOO_DQN_CARTPOLE, "DQN": kw},
    }


# --------------------------------------------------------------------------------------------
# actorq cell
# --------------------------------------------------------------------------------------------


def run_actorq_cell(cell: dict[str, Any]) -> dict[str, Any]:
    """Train actorq's DQN for one cell through ``actorq.train(DQNConfig(...))``."""
    import torch

    from actorq import DQNConfig, train

    torch.set_num_threads(1)
    case = CASES[cell["case"]]
    run_dir = Path(cell["run_dir"])
    hp = {**ACTORQ_DQN, "hidden": case.hidden}
    cfg = DQNConfig(
        env=case.env_id,
        precision=cell["framework"].removeprefix("actorq-"),
        seed=cell["seed"],
        total_steps=cell["budget"],
        target_return=case.target,
        stop_at_target=case.stop_at_target,
        eval_every=cell["eval_every"],
        eval_episodes=EVAL_EPISODES,
        progress=False,
        energy=False,
        run_dir=str(run_dir),
        **hp,
    )
    r = train(cfg)
    if getattr(r, "interrupted", False):
        raise KeyboardInterrupt  # an interrupted run is not a result
    metrics = read_metrics_csv(run_dir / "metrics.csv")
    eval_points = metrics.get(EVAL_TIME_METRIC, [])

    def evals_before(step: int) -> float:
        """Cumulative evaluation seconds logged strictly before ``step``."""
        before = [v for s, v, _ in eval_points if s < step]
        return before[-1] if before else 0.0

    curve = [
        {"step": s, "return": v, "std": None, "train_time_s": None}
        for s, v, _ in metrics.get(CURVE_METRIC, [])
    ]
    wall_s, eval_s = float(r.wall_time_s), float(r.eval_time_s)
    train_s = wall_s - eval_s
    ttt = None
    if r.reached_target and r.time_to_target_s is not None:
        ttt = float(r.time_to_target_s) - evals_before(int(r.steps_to_target))
    first = first_at_or_above(curve, case.target)
    return {
        "env_steps": int(r.env_steps),
        "train_time_s": train_s,
        "wall_time_s": wall_s,
        "eval_time_s": eval_s,
        "steps_per_s": int(r.env_steps) / train_s if train_s > 0 else None,
        "curve": curve,
        "reached_target": bool(r.reached_target),
        "steps_to_target": int(r.steps_to_target) if r.reached_target else None,
        "time_to_target_s": ttt,
        "first_eval_at_target": first["step"] if first else None,
        "hyperparams": {
            "DQNConfig": {k: list(v) if isinstance(v, tuple) else v for k, v in hp.items()}
        },
        "actorq_result": {k: v for k, v in _as_dict(r).items() if _jsonable(v)},
    }


# --------------------------------------------------------------------------------------------
# One cell, in its own process
# --------------------------------------------------------------------------------------------


def run_cell(cell: dict[str, Any]) -> None:
    """Child-process entry: train, write the cell's JSON (atomically)."""
    case = CASES[cell["case"]]
    started = machine_info()
    runner = run_sb3_cell if cell["framework"] == "sb3" else run_actorq_cell
    out = runner(cell)
    out.update(
        {
            "case": cell["case"],
            "env": case.env_id,
            "hidden": list(case.hidden),
            "framework": cell["framework"],
            "seed": cell["seed"],
            "budget": cell["budget"],
            "eval_every": cell["eval_every"],
            "eval_episodes": EVAL_EPISODES,
            "eval_seeds": [EVAL_SEED, EVAL_SEED + EVAL_EPISODES - 1],
            "target": case.target,
            "return_at_end": out["curve"][-1]["return"] if out["curve"] else None,
            "command": cell["command"],
            "machine": started,
            "finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        }
    )
    write_json_atomic(Path(cell["out"]), out)
    ttt = out["time_to_target_s"]
    say(
        f"    {out['env_steps']:,} steps in {out['train_time_s']:.1f} s of training "
        f"({out['steps_per_s'] or 0:,.0f} steps/s); target {case.target:g}: "
        + (
            f"at {out['steps_to_target']:,} steps, {ttt:.1f} s"
            if ttt is not None
            else "not reached"
        )
    )


def spawn_cell(cell: dict[str, Any], log_path: Path) -> int:
    """One cell of this benchmark in its own subprocess (``ppo_peers.spawn_cell``)."""
    return int(ppo_peers.spawn_cell(cell, log_path, Path(__file__)))


# --------------------------------------------------------------------------------------------
# Statistics and report
# --------------------------------------------------------------------------------------------


def times_to_target(cells: Sequence[dict[str, Any]]) -> np.ndarray:
    """Time to target per cell; +inf for a cell that never reached it (a failure)."""
    return np.array(
        [c["time_to_target_s"] if c["time_to_target_s"] is not None else math.inf for c in cells],
        dtype=float,
    )


def iqm(x: np.ndarray) -> float:
    """Interquartile mean: the mean after trimming int(n/4) values from each end (rliable's
    ``scipy.stats.trim_mean(x, 0.25)``); +inf when a failure falls in the middle half."""
    xs = np.sort(np.asarray(x, dtype=float))
    k = int(0.25 * len(xs))
    mid = xs[k : len(xs) - k]
    return float(np.mean(mid)) if len(mid) else math.nan


def ratio_ci(
    num: np.ndarray, den: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float, float, float]:
    """median(num) / median(den) and its percentile-bootstrap 95% CI, seeds resampled with
    replacement within each framework (independently: seed i of one framework shares nothing
    with seed i of another). Returns (ratio, low, high, share of resamples undefined), where
    undefined is inf/inf (both medians failures); those resamples are dropped."""

    def ratio(a: float, b: float) -> float:
        if math.isinf(a) and math.isinf(b):
            return math.nan
        return a / b if b > 0 else math.inf

    point = ratio(float(np.median(num)), float(np.median(den)))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    a = np.median(rng.choice(num, size=(resamples, len(num))), axis=1)
    b = np.median(rng.choice(den, size=(resamples, len(den))), axis=1)
    rs = np.array([ratio(x, y) for x, y in zip(a, b, strict=True)])
    ok = rs[~np.isnan(rs)]
    if not len(ok):
        return point, math.nan, math.nan, 1.0
    lo, hi = np.quantile(ok, [0.025, 0.975], method="inverted_cdf")  # no interpolation: inf-safe
    return point, float(lo), float(hi), 1.0 - len(ok) / len(rs)


def _t(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return "∞ (failure)" if math.isinf(x) else f"{x:.1f}"


def load_cells(case_dir: Path) -> list[dict[str, Any]]:
    """Every finished cell JSON of a case, in framework order then seed."""
    cells = [json.loads(p.read_text()) for p in sorted(case_dir.glob("*-s*.json"))]
    order = {f: i for i, f in enumerate(FRAMEWORKS)}
    return sorted(cells, key=lambda c: (order.get(c["framework"], 99), c["framework"], c["seed"]))


def render_report(case: str, cells: list[dict[str, Any]], command: str) -> str:
    """The Markdown report for one case from its cell JSONs."""
    spec = CASES[case]
    m = machine_info()
    width = "x".join(map(str, spec.hidden))
    lines = [
        f"# DQN: actorq vs Stable-Baselines3 on {spec.env_id}, {width} ({case})",
        "",
        f"`{command}`",
        "",
        f"- report written {m['date']} on {m['cpu_model']} ({m['cores_usable']} usable cores, "
        f"load average {', '.join(map(str, m['load_avg']))}); git {m['git_commit']}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v),
    ]
    if cells:
        cpus = sorted({c["machine"]["cpu_model"] for c in cells})
        dates = sorted(c["machine"]["date"] for c in cells)
        lines.append(f"- cells ran {dates[0]} .. {dates[-1]} on: {'; '.join(cpus)}")
        budgets = sorted({(c["budget"], c["eval_every"]) for c in cells})
        lines.append(
            "- budget: "
            + "; ".join(f"{b:,} env steps, evaluation every {e:,}" for b, e in budgets)
            + (" (**cells differ**)" if len(budgets) > 1 else "")
        )
    lines += [
        f"- evaluation: {EVAL_EPISODES} deterministic episodes, seeds {EVAL_SEED}.."
        f"{EVAL_SEED + EVAL_EPISODES - 1}; evaluation time excluded from every time here; "
        "steps/s = env steps / training time",
        "",
    ]
    if not cells:
        return "\n".join([*lines, "No finished cells yet.", ""])
    frameworks = list(dict.fromkeys(c["framework"] for c in cells))
    by_fw = {fw: [c for c in cells if c["framework"] == fw] for fw in frameworks}
    tgt = f"{spec.target:g}"

    if spec.stop_at_target:
        lines += [
            f"Time to target: training seconds to the first evaluation >= {tgt} (actorq: "
            "confirmed on fresh seeds). A run that never reaches it is a failure, counted as "
            "∞ in the median and IQM.",
            "",
            "| framework | seeds | success | median time (s) | IQM time (s) | "
            "median steps (successes) | env steps/s |",
            "|---|---|---|---|---|---|---|",
        ]
        for fw, cs in by_fw.items():
            t = times_to_target(cs)
            steps = [c["steps_to_target"] for c in cs if c["steps_to_target"] is not None]
            lines.append(
                f"| {fw} | {len(cs)} | {len(steps)}/{len(cs)} ({len(steps) / len(cs):.0%}) | "
                f"{_t(float(np.median(t)))} | {_t(iqm(t))} | "
                f"{_num(float(np.median(steps)) if steps else None)} | "
                f"{np.mean([c['steps_per_s'] or 0.0 for c in cs]):,.0f} |"
            )
        if "sb3" in by_fw:
            lines += [
                "",
                "SB3 / actorq, median time to target (> 1: actorq faster); bootstrap 95% CI over "
                f"seeds ({BOOTSTRAP_RESAMPLES:,} resamples, numpy seed {BOOTSTRAP_SEED}):",
                "",
                "| actorq | ratio | 95% CI | resamples undefined (∞/∞) |",
                "|---|---|---|---|",
            ]
            sb3_t = times_to_target(by_fw["sb3"])
            for fw in frameworks:
                if fw == "sb3":
                    continue
                r, lo, hi, undef = ratio_ci(sb3_t, times_to_target(by_fw[fw]))
                lines.append(f"| {fw} | {_num(r, '.2f')} | {_num(lo, '.2f')} .. "
                             f"{_num(hi, '.2f')} | {undef:.1%} |")  # fmt: skip
    else:
        lines += [
            "Fixed budget, no early stop; return at the budget: the evaluation at the end.",
            "",
            "| framework | seeds | env steps/s | train time (s) | return at budget |",
            "|---|---|---|---|---|",
        ]
        for fw, cs in by_fw.items():
            rets = [c["return_at_end"] for c in cs if c["return_at_end"] is not None]
            lines.append(
                f"| {fw} | {len(cs)} | "
                f"{np.mean([c['steps_per_s'] or 0.0 for c in cs]):,.0f} | "
                f"{np.mean([c['train_time_s'] for c in cs]):.1f} | "
                + (f"{np.mean(rets):.1f} ± {np.std(rets):.1f}" if rets else "—")
                + " |"
            )

    lines += [
        "",
        "Per cell:",
        "",
        f"| framework | seed | env steps | train time (s) | eval time (s) | steps/s | "
        f"time to {tgt} (s) | steps to {tgt} | first eval >= {tgt} | last eval | finished |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    fail = math.inf if spec.stop_at_target else None  # wide: no target, no failure
    for c in cells:
        ttt = c["time_to_target_s"]
        lines.append(
            f"| {c['framework']} | {c['seed']} | {c['env_steps']:,} | {c['train_time_s']:.1f} | "
            f"{c['eval_time_s']:.1f} | {_num(c['steps_per_s'])} | "
            f"{_t(ttt if ttt is not None else fail)} | {_num(c['steps_to_target'])} | "
            f"{_num(c['first_eval_at_target'])} | {_num(c['return_at_end'], '.1f')} | "
            f"{c['finished']} |"
        )
    lines += [
        "",
        "Notes: SB3 times run from learn(); actorq's from its training loop (TrainResult; "
        "process start-up excluded). Hyperparameters and their sources: the docstring of "
        "benchmarks/dqn_peers.py.",
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--case", choices=sorted(CASES), help="setting (required)")
    ap.add_argument("--seeds", type=int, nargs="+", help="default: 0..9 (cartpole), 0 1 2 (wide)")
    ap.add_argument(
        "--frameworks", nargs="+", choices=FRAMEWORKS, default=["sb3", "actorq-int8", "actorq-fp32"]
    )
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/dqn_peers"))
    ap.add_argument("--budget", type=int, help="env steps per cell (default: the case's)")
    ap.add_argument("--eval-every", type=int, help="env steps between evaluations")
    ap.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell (JSON)
    a = ap.parse_args(argv)
    if a.cell is None and a.case is None:
        ap.error("--case is required")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    if a.cell is not None:
        try:
            run_cell(json.loads(a.cell))
        except KeyboardInterrupt:
            say("    interrupted: cell not recorded")
            return 130
        return 0

    spec = CASES[a.case]
    budget = a.budget or spec.budget
    every = a.eval_every or spec.eval_every or budget
    seeds = a.seeds if a.seeds is not None else list(spec.seeds)
    command = shlex.join(["python", *sys.argv])
    case_dir = a.results / a.case
    cells = [(fw, s) for fw in a.frameworks for s in seeds]

    for fw, s in cells:  # refuse to mix budgets
        p = case_dir / f"{fw}-s{s}.json"
        if p.exists():
            old = json.loads(p.read_text())
            if (old["budget"], old["eval_every"]) != (budget, every):
                say(
                    f"error: {p} exists with budget={old['budget']:,}, "
                    f"eval_every={old['eval_every']:,} (asked: {budget:,}, {every:,}); use "
                    "another --results folder or delete it"
                )
                return 2

    say(
        f"{a.case}: {spec.env_id} {'x'.join(map(str, spec.hidden))}, {budget:,} env steps per "
        f"cell, evaluation every {every:,}; {len(cells)} cells -> {case_dir}"
    )
    failed: list[str] = []
    interrupted = False
    for i, (fw, seed) in enumerate(cells, 1):
        name = f"{a.case}/{fw}-s{seed}"
        out = case_dir / f"{fw}-s{seed}.json"
        tag = f"[{i}/{len(cells)}] {name}"
        if out.exists():
            say(f"{tag}: done before, skipped ({out})")
            continue
        run_dir = case_dir / "runs" / f"{fw}-s{seed}"
        if run_dir.exists():  # an unfinished earlier attempt: start the cell afresh
            shutil.rmtree(run_dir)
        cell = {
            "case": a.case,
            "framework": fw,
            "seed": seed,
            "budget": budget,
            "eval_every": every,
            "out": str(out.resolve()),
            "run_dir": str(run_dir.resolve()),
            "command": command,
        }
        say(f"{tag}: training")
        t0 = time.perf_counter()
        try:
            rc = spawn_cell(cell, case_dir / "logs" / f"{fw}-s{seed}.log")
        except KeyboardInterrupt:
            say(f"{tag}: interrupted, not recorded; run the same command again to resume")
            interrupted = True
            break
        dt_s = time.perf_counter() - t0
        if rc == 0 and out.exists():
            say(f"{tag}: done in {dt_s:.0f} s")
        else:
            say(f"{tag}: FAILED (exit {rc}) after {dt_s:.0f} s; see {case_dir / 'logs'}")
            failed.append(name)

    report = render_report(a.case, load_cells(case_dir), command)
    case_dir.mkdir(parents=True, exist_ok=True)
    (case_dir / "report.md").write_text(report)
    say("")
    say(report)
    say(f"report: {case_dir / 'report.md'}")
    if failed:
        say(f"failed: {', '.join(failed)}")
    if interrupted:
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
