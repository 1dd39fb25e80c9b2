"""What a run reports when it ends: :class:`TrainResult`, the final evaluation and comparison
(:func:`final_report`), ``summary.json`` and the summary table.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from actorq.agents.policy_io import PolicyIO
from actorq.config import ExperimentConfig
from actorq.core.seeds import CONFIRM_SEED as CONFIRM_SEED  # re-exported (actorq.experiment)
from actorq.core.seeds import EVAL_SEED as EVAL_SEED
from actorq.core.seeds import FINAL_EVAL_SEED
from actorq.energy import codecarbon_installed
from actorq.logging import MetricLogger
from actorq.run.publisher import Publisher
from actorq.run.resume import Counters
from actorq.rundir import RunDir


@dataclasses.dataclass
class TrainResult:
    """What a run achieved; also written to ``summary.json`` in the run directory."""

    run_dir: str
    env: str
    precision: str
    env_steps: int
    updates: int
    wall_time_s: float
    # The final held-out evaluation and comparison: None for an interrupted run, which skips
    # them (minutes on Atari, past a scheduler's grace period; `actorq eval` runs them later).
    eval_return: float | None  # final greedy eval, actors' (quantized) snapshot, held-out seeds
    eval_return_std: float | None
    eval_return_fp32: float | None  # the same weights at fp32
    # Quantized vs fp32 actions on replay states: share of identical greedy actions (discrete),
    # or share of states whose every action component is within 0.05 (continuous, in [-1, 1]).
    action_agreement: float | None
    agreement_states: int | None
    snapshot_bytes: int
    fp32_snapshot_bytes: int
    publishes: int
    publish_ms: float  # mean time to quantize + encode + publish one snapshot
    target_return: float | None
    reached_target: bool
    time_to_target_s: float | None
    steps_to_target: int | None
    actor_restarts: int
    rejected_snapshots: int
    interrupted: bool = False
    agent: str = "dqn"
    action_mean_abs_diff: float | None = None  # continuous: mean |a_quantized - a_fp32|
    # Stochastic policies (PPO): mean |log π_quantized(a|s) − log π_fp32(a|s)| on replay
    # states, actions drawn from the quantized policy (the behaviour the actors ran).
    logprob_gap: float | None = None
    eval_time_s: float = 0.0  # of wall_time_s, spent in periodic evaluations
    # What eval_return is and what agreement_states counts (a graph policy: decided ops)
    eval_label: str = "held-out, 10 ep"
    agreement_on: str = "replay states"
    # Whole machine (learner + actors), codecarbon; None when not tracked. ``energy_estimated``:
    # CPU power modelled from TDP and load (no hardware counter), as on machines without RAPL.
    energy_kwh: float | None = None
    energy_kg_co2: float | None = None
    energy_estimated: bool | None = None
    # What a publish cost the learner's thread (= publish_ms when publishing in line; a copy
    # of the weights with publish_async), and publishes skipped while one was in flight.
    publish_blocked_ms: float | None = None
    publishes_skipped: int = 0
    # The agent's own rows for the summary table (a graph policy's step times, a chip
    # placement's cost terms): [label, value] pairs from PolicyIO.summary_rows
    summary_rows: list[list[str]] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def registered_threshold(env_id: str) -> float | None:
    import gymnasium as gym

    prefix, _, name = env_id.partition(":")
    if prefix != "gym":
        return None
    spec = gym.registry.get(name)
    return None if spec is None else spec.reward_threshold


def write_summary(
    result: TrainResult, stop_reason: str, logger: MetricLogger, run_dir: Path, env_steps: int
) -> None:
    """The final report to the logs, ``summary.json`` and the console."""
    final = {
        k: v
        for k, v in (
            ("charts/final_eval_return", result.eval_return),
            ("charts/final_eval_return_fp32", result.eval_return_fp32),
            ("quant/action_agreement", result.action_agreement),
            ("quant/action_mean_abs_diff", result.action_mean_abs_diff),
            ("quant/logprob_gap", result.logprob_gap),
        )
        if v is not None  # an interrupted run has no final evaluation to log
    }
    if final:
        logger.log(env_steps, final)
    logger.close()
    RunDir(run_dir).write_summary({**result.to_json(), "stop": stop_reason})
    print_summary(result, stop_reason)


def final_report(
    run: TrainResult,
    cfg: ExperimentConfig,
    io: PolicyIO,
    final: bytes,
    states: np.ndarray | None,
    version: int,
) -> TrainResult:
    """``run`` (:func:`run_report`) with the held-out evaluation of the final weights,
    quantized and fp32 (greedy, or sampled where the env family says: Atari), and how alike
    the two act on states the actors visited."""
    fp32 = io.snapshot(version, "fp32")
    q_rets = io.evaluate(final, cfg.eval_episodes, FINAL_EVAL_SEED)
    f_rets = io.evaluate(fp32, cfg.eval_episodes, FINAL_EVAL_SEED)
    cmp = io.compare(final, fp32, states, cfg.seed)
    # no states to compare on (a replay not kept, resumed): not measured, not a NaN in summary.json
    measured = cmp.items > 0
    return dataclasses.replace(
        run,
        eval_return=float(q_rets.mean()),
        eval_return_std=float(q_rets.std()),
        eval_return_fp32=float(f_rets.mean()),
        action_agreement=cmp.agreement if measured else None,
        agreement_states=cmp.items,
        action_mean_abs_diff=cmp.mean_abs_diff if measured else None,
        logprob_gap=cmp.logprob_gap if measured else None,
        eval_label=io.eval_label.format(episodes=cfg.eval_episodes),
        agreement_on=cmp.items_label,
        summary_rows=[[k, v] for k, v in io.summary_rows(final)],
    )


def run_report(
    cfg: ExperimentConfig,
    c: Counters,
    publisher: Publisher,
    target: float | None,
    fp32_bytes: int,
) -> TrainResult:
    """What the run did, without the final evaluation: an interrupted run's whole report."""
    return TrainResult(
        run_dir=str(cfg.run_dir),
        env=cfg.env,
        precision=cfg.precision,
        env_steps=c.env_steps,
        updates=c.updates,
        wall_time_s=c.wall_time_s,
        eval_return=None,
        eval_return_std=None,
        eval_return_fp32=None,
        action_agreement=None,
        agreement_states=None,
        snapshot_bytes=len(publisher.latest),
        fp32_snapshot_bytes=fp32_bytes,
        publishes=c.publishes,
        publish_ms=c.mean_ms("publish"),  # every segment's publishes
        publish_blocked_ms=c.mean_ms("blocked"),
        publishes_skipped=c.publishes_skipped,
        target_return=target,
        reached_target=c.steps_to_target is not None,
        time_to_target_s=c.time_to_target_s,
        steps_to_target=c.steps_to_target,
        actor_restarts=c.actor_restarts,  # the run's, every segment's (st: this one's)
        rejected_snapshots=c.rejected_snapshots,
        agent=cfg.agent,
        eval_label="not run: interrupted",
    )


def final_states(replay: Any, seed: int, n: int = 10_000) -> np.ndarray | None:
    """Replay states for the final quantized-vs-fp32 comparison (None if there are none)."""
    try:
        states = np.asarray(replay.sample_states(n, np.random.default_rng(seed + 1)))
    except Exception:  # a backend failing at shutdown must not lose the run's summary
        return None
    return states if len(states) else None


def _ret(x: float, scale: float | None = None) -> str:
    """A return as its users read it: one decimal for game scores, three significant digits
    for the small ones (a graph policy's step-time gain of 0.128); ``scale``: the mean a
    spread goes with, so both get the same digits."""
    big = abs(x if scale is None else scale) >= 10
    return f"{x:.1f}" if big or x == 0 else f"{x:.3g}"


def print_summary(r: TrainResult, stop_reason: str = "") -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(
        title=f"actorq · {r.agent.upper()} on {r.env} · {r.precision} actors", show_header=False
    )
    t.add_column(style="bold")
    t.add_column()

    def add(label: str, value: str) -> None:
        t.add_row(escape(label), escape(value))  # "[bench]" and the like are text, not markup

    if r.eval_return is None or r.eval_return_std is None or r.eval_return_fp32 is None:
        add("final evaluation", "not run (interrupted): actorq eval RUN_DIR")
    else:
        pm = "±"
        add(
            f"eval return ({r.eval_label})",
            f"{_ret(r.eval_return)} {pm} {_ret(r.eval_return_std, r.eval_return)} ({r.precision})",
        )
        add("eval return, same weights fp32", _ret(r.eval_return_fp32))
        if r.action_agreement is None:
            add("action agreement vs fp32", "not measured: no replay states to compare on")
        elif r.action_mean_abs_diff is None:
            add(
                "action agreement vs fp32",
                f"{100 * r.action_agreement:.2f}% of {r.agreement_states} {r.agreement_on}",
            )
        else:
            add(
                "actions vs fp32",
                f"mean |Δa| {r.action_mean_abs_diff:.4f}; {100 * r.action_agreement:.2f}% of "
                f"{r.agreement_states} {r.agreement_on} within 0.05",
            )
    for label, value in r.summary_rows:
        add(label, value)
    if r.target_return is not None:
        # the target is judged by the periodic evaluations (and a confirmation on fresh seeds);
        # the final evaluation above runs on other held-out seeds and may land below it
        if r.reached_target:
            reached = f"yes, at {r.steps_to_target} steps / {r.time_to_target_s:.1f}s"
            if r.eval_return is not None and r.eval_return < r.target_return:
                reached += " (final evaluation above: below it)"
        else:
            reached = "no"
        add(f"target {r.target_return:g} reached in training", reached)
    if r.logprob_gap is not None:
        add("log-prob gap vs fp32", f"{r.logprob_gap:.4f} nats (mean |Δ log π|)")
    add("env steps / learner updates", f"{r.env_steps} / {r.updates}")
    add("wall time", f"{r.wall_time_s:.1f}s ({stop_reason})")
    ratio = r.snapshot_bytes / r.fp32_snapshot_bytes
    add("snapshot bytes", f"{r.snapshot_bytes:,} ({100 * ratio:.1f}% of fp32)")
    pub = f"{r.publishes} (mean {r.publish_ms:.2f} ms each"
    if r.publish_blocked_ms is not None and r.publish_blocked_ms < 0.5 * r.publish_ms:
        pub += f"; learner blocked {r.publish_blocked_ms:.2f} ms"  # published in the background
    if r.publishes_skipped:
        pub += f"; {r.publishes_skipped} skipped while one was in flight"
    add("publishes", pub + ")")
    if r.energy_kwh is not None and r.energy_kg_co2 is not None:
        how = "estimated: no power counter" if r.energy_estimated else "measured"
        add(
            "energy / CO2 (whole machine)",
            f"{1e3 * r.energy_kwh:.3f} Wh / {1e3 * r.energy_kg_co2:.3f} g CO2eq ({how})",
        )
    elif not codecarbon_installed():
        add("energy / CO2", "not measured: pip install 'actorq[bench]' (codecarbon)")
    add("actor restarts / rejected snapshots", f"{r.actor_restarts} / {r.rejected_snapshots}")
    add("run dir", r.run_dir)
    Console().print(t)
