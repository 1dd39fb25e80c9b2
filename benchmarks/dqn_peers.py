"""actorq's DQN vs Stable-Baselines3 DQN, side by side: time to CartPole-v1's threshold.

    .venv/bin/python benchmarks/dqn_peers.py --case cartpole \\
        --frameworks sb3 actorq-int8 actorq-fp32 --results benchmarks/results/dqn_peers
    .venv/bin/python benchmarks/dqn_peers.py --case wide --seeds 0 1 2

Needs the ``[peers]`` extra (stable-baselines3). Structure, cells, resumption and exit status:
``benchmarks/peers.py`` (the matrix runner both peers scripts share). Each (case, framework, seed)
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

import dataclasses
import datetime as dt
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from peers import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CURVE_METRIC,
    EVAL_TIME_METRIC,
    GreedyEval,
    eval_seconds,
    first_at_or_above,
    iqm,
    machine_info,
    matrix_args,
    num,
    plain,
    ratio_ci,
    read_metrics_csv,
    report_head,
    result_fields,
    run_cell_main,
    run_matrix,
    say,
    times_to_target,
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
    greedy = GreedyEval(case.env_id, EVAL_EPISODES)

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
            rets = greedy(self.model, EVAL_SEED)
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

    curve = [
        {"step": s, "return": v, "std": None, "train_time_s": None}
        for s, v, _ in metrics.get(CURVE_METRIC, [])
    ]
    wall_s, eval_s = float(r.wall_time_s), float(r.eval_time_s)
    train_s = wall_s - eval_s
    ttt = None
    if r.reached_target and r.time_to_target_s is not None:
        ttt = float(r.time_to_target_s) - eval_seconds(eval_points, int(r.steps_to_target), True)
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
        # CartPole's returns bound Q by 1/(1-gamma) = 100: a larger mean Q is divergence
        "max_mean_q": max((v for _, v, _ in metrics.get("losses/q_values", [])), default=None),
        "hyperparams": {"DQNConfig": {k: plain(v) for k, v in hp.items()}},
        "actorq_result": result_fields(r),
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


# --------------------------------------------------------------------------------------------
# Statistics and report
# --------------------------------------------------------------------------------------------


def _t(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return "∞ (failure)" if math.isinf(x) else f"{x:.1f}"


def render_report(case: str, cells: list[dict[str, Any]], command: str) -> str:
    """The Markdown report for one case from its cell JSONs."""
    spec = CASES[case]
    width = "x".join(map(str, spec.hidden))
    title = f"DQN: actorq vs Stable-Baselines3 on {spec.env_id}, {width} ({case})"
    lines = report_head(title, command, cells)
    if cells:
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
                f"{num(float(np.median(steps)) if steps else None)} | "
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
                lines.append(f"| {fw} | {num(r, '.2f')} | {num(lo, '.2f')} .. "
                             f"{num(hi, '.2f')} | {undef:.1%} |")  # fmt: skip
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
        f"time to {tgt} (s) | steps to {tgt} | first eval >= {tgt} | last eval | "
        "largest mean Q | finished |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    fail = math.inf if spec.stop_at_target else None  # wide: no target, no failure
    for c in cells:
        ttt = c["time_to_target_s"]
        lines.append(
            f"| {c['framework']} | {c['seed']} | {c['env_steps']:,} | {c['train_time_s']:.1f} | "
            f"{c['eval_time_s']:.1f} | {num(c['steps_per_s'])} | "
            f"{_t(ttt if ttt is not None else fail)} | {num(c['steps_to_target'])} | "
            f"{num(c['first_eval_at_target'])} | {num(c['return_at_end'], '.1f')} | "
            f"{num(c.get('max_mean_q'), '.1f')} | {c['finished']} |"
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


def main(argv: Sequence[str] | None = None) -> int:
    ap = matrix_args(__doc__.split("\n\n")[0], "benchmarks/results/dqn_peers", FRAMEWORKS)
    ap.add_argument("--budget", type=int, help="env steps per cell (default: the case's)")
    a = ap.parse_args(argv)
    if a.cell is not None:
        return run_cell_main(a.cell, run_cell)
    if a.case not in CASES:
        ap.error(f"--case must be one of {', '.join(sorted(CASES))}")
    spec = CASES[a.case]
    budget = a.budget or spec.budget
    settings = {"budget": budget, "eval_every": a.eval_every or spec.eval_every or budget}
    return run_matrix(
        Path(__file__),
        a.case,
        a.results / a.case,
        a.frameworks,
        a.seeds if a.seeds is not None else spec.seeds,
        settings,
        lambda cells, command: render_report(a.case, cells, command),
        FRAMEWORKS,
    )


if __name__ == "__main__":
    sys.exit(main())
