"""The framework axis of a benchmark matrix: cells trained by another framework, side by side.

A spec's ``frameworks = ["sb3", "actorq"]`` runs each task's cells by actorq (crossed with the
precisions) and by each other framework named, through a small adapter: an object that checks
the task's ``[tasks.<framework>]`` table, says which optional package it needs, and trains one
cell in the cell's process, writing the files the report reads (``summary.json`` with the keys
every run has, ``metrics.csv`` with the periodic evaluations and the evaluation time). Both sides
evaluate on actorq's seeds (periodic: 10000.., final: held-out 20000..), so they play the same
episodes; timings are compared as ratios within one run, the frameworks alternating cell by cell.
"""

from __future__ import annotations

import csv
import importlib
import importlib.util
import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from actorq.core.seeds import CONFIRM_SEED as CONFIRM_SEED  # the adapters' names
from actorq.core.seeds import EVAL_SEED, confirm_seed
from actorq.core.seeds import FINAL_EVAL_SEED as FINAL_EVAL_SEED
from actorq.errors import ActorQError, shown
from actorq.inputs import read_input
from actorq.logging import (
    CONFIRM_METRIC,
    EVAL_METRIC,
    EVAL_S_METRIC,
    RUN_CLOCK_METRIC,
    rewrite_metrics,
    whole_lines,
)
from actorq.output import write_output

if TYPE_CHECKING:
    from actorq.config import ExperimentConfig

#: the framework whose cells are actorq's own runs (``actorq.train``)
NATIVE = "actorq"
#: other frameworks a spec may list: name -> the "module:attr" of its adapter (as AGENTS)
FRAMEWORKS: dict[str, str] = {"sb3": "actorq.bench.sb3:SB3"}


class Adapter(Protocol):
    def missing(self) -> str | None:
        """What is not installed, with how to install it (None when all is there)."""

    def check(self, agent: str, settings: dict[str, Any]) -> None:
        """Raise ActorQError for settings this adapter does not take (without importing it)."""

    def run(self, cfg: ExperimentConfig, cell: dict[str, Any], run_dir: Path) -> bool:
        """Train the cell ``cfg`` describes into ``run_dir`` (see the module docstring);
        continue from ``run_dir/checkpoint`` when ``cell["resume"]``. Returns whether it was
        interrupted (Ctrl-C, SIGTERM: checkpointed, no summary)."""


def get_adapter(name: str) -> Adapter:
    module, attr = FRAMEWORKS[name].split(":")
    adapter: Adapter = getattr(importlib.import_module(module), attr)()
    return adapter


def missing_module(module: str, package: str, extra: str) -> str | None:
    """``package (pip install 'actorq[extra]')`` when ``module`` cannot be imported."""
    if importlib.util.find_spec(module) is not None:
        return None
    return f"{package}, which is not installed: pip install 'actorq[{extra}]'"


def check_keys(agent: str, settings: dict[str, Any], keys: dict[str, frozenset[str]]) -> None:
    if agent not in keys:
        raise ActorQError(f"takes agents {', '.join(keys)}, not {agent!r}")
    unknown = sorted(set(settings) - keys[agent])
    if unknown:
        raise ActorQError(
            f"unknown key {unknown[0]!r}; expected some of {', '.join(sorted(keys[agent]))}"
        )


class PolicyEval:
    """Evaluation of another framework's policy as actorq evaluates its own: the same loop
    (:func:`~actorq.core.evaluation.play`), environments (the family's evaluation settings on
    the cell's engine, ``env_kwargs``: an Atari cell's EnvPool or ALE, as actorq's cells of the
    same spec) and seeds; greedy, or sampled where the env family says (``self.sampled``;
    ``predict(obs, rng)`` then samples from ``rng``: PPO from its policy, DQN ε-greedy, as
    :func:`~actorq.core.exploration.sampled_actions`)."""

    def __init__(
        self, env_id: str, episodes: int, env_kwargs: dict[str, Any] | None = None
    ) -> None:
        from actorq.envs import eval_sampled

        self.env_id, self.episodes, self.env_kwargs = env_id, episodes, dict(env_kwargs or {})
        self.sampled = eval_sampled(env_id)

    def __call__(
        self,
        predict: Callable[[np.ndarray, np.random.Generator], np.ndarray],
        seed: int,
        normalize: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> np.ndarray:
        from actorq.core.evaluation import play
        from actorq.envs import eval_env_kwargs, make_vector_env

        kw = eval_env_kwargs(self.env_id, self.env_kwargs)
        env = make_vector_env(self.env_id, self.episodes, **kw)
        try:
            return play(
                env,
                seed,
                lambda obs, rng: predict(obs if normalize is None else normalize(obs), rng),
            )
        finally:
            env.close()


def _metric_rows(path: Path, last_step: int) -> list[list[str]]:
    """metrics.csv's rows (header dropped) at env steps up to ``last_step``; [] if absent. A
    last line cut short (a stop mid-write) is dropped, as a resume's trim drops it: ``17.3`` cut
    to ``1`` is four fields, but not the value logged (:func:`~actorq.logging.whole_lines`)."""
    if not os.path.lexists(path):
        return []
    data = whole_lines(read_input(path, f"{shown(path)} (to resume)"))
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))[1:]
    except (UnicodeDecodeError, csv.Error) as e:
        raise ActorQError(f"cannot read {path} to resume: {e}") from None
    return [r for r in rows if len(r) == 4 and r[0].isdigit() and int(r[0]) <= last_step]


class Record:
    """One cell's evaluations, written as actorq writes them: ``metrics.csv`` rows
    (``charts/eval_return``, the run's clock ``perf/run_s``, the cumulative ``perf/eval_s``)
    and, at the end, ``summary.json`` with the keys every run's summary has. Times run from
    :meth:`start` (the other framework's training call); time to target is taken at the start
    of the evaluation that reached it, earlier evaluations included, as actorq's is (the report
    subtracts them for both)."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        run_dir: Path,
        framework: str,
        keep: list[list[str]] | None = None,
    ) -> None:
        """A new metrics.csv holding ``keep`` (a resumed cell's earlier rows), then appended."""
        self.cfg, self.run_dir, self.framework = cfg, run_dir, framework
        self.eval_s = 0.0
        self.t0 = time.perf_counter()
        self.prior_s = 0.0  # training seconds of earlier segments (a resumed cell)
        self.hit: tuple[int, float] | None = None  # (env steps, seconds) at the target
        rewrite_metrics(run_dir / "metrics.csv", keep or [], ActorQError)
        self.csv = open(run_dir / "metrics.csv", "a", newline="")  # noqa: SIM115 (closed in finish)
        self.rows = csv.writer(self.csv)

    @classmethod
    def resumed(
        cls, cfg: ExperimentConfig, run_dir: Path, framework: str, state: dict[str, Any], step: int
    ) -> Record:
        """The record of a cell resumed at env step ``step`` with the counters ``state`` (of
        :meth:`state`, checked): metrics.csv keeps its rows up to ``step`` (later ones are
        redone), and the clock, evaluation seconds and target go on."""
        self = cls(cfg, run_dir, framework, keep=_metric_rows(run_dir / "metrics.csv", step))
        self.prior_s, self.eval_s = state["wall_time_s"], state["eval_time_s"]
        self.hit = None if state["hit"] is None else (int(state["hit"][0]), state["hit"][1])
        return self

    def state(self) -> dict[str, Any]:
        """The counters a checkpoint keeps: seconds of training so far, of evaluation, target."""
        return {"wall_time_s": time.perf_counter() - self.t0, "eval_time_s": self.eval_s,
                "hit": None if self.hit is None else list(self.hit)}  # fmt: skip

    def start(self) -> None:
        self.t0 = time.perf_counter() - self.prior_s

    def evaluate(
        self,
        step: int,
        returns: Callable[[int], np.ndarray],
        stopping: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Run one periodic evaluation at ``step`` (``returns(seed)``: the policy's returns
        over the episodes from ``seed``); True when it reached the target first, confirmed.
        No confirmation once ``stopping()`` (a stop signal: the resumed cell redoes both)."""
        start = time.perf_counter()
        rets = returns(EVAL_SEED)
        mean, now = float(rets.mean()), time.time()
        # the cell's log.txt, as actorq's loop prints its evaluations: progress of a long cell
        print(f"eval @ {step:>8} steps, {start - self.t0:8.1f}s: {mean:7.4g} ± {rets.std():.4g} "
              f"({self.framework})", flush=True)  # fmt: skip
        target, reached, confirmed = self.cfg.target_return, False, None
        if self.hit is None and target is not None and mean >= target and not stopping():
            # fresh seeds per evaluation (actorq's loop takes them per publish)
            conf = returns(confirm_seed(step // self.cfg.eval_every, self.cfg.eval_episodes))
            print(f"  confirmation on fresh seeds: {conf.mean():.1f} ± {conf.std():.1f}",
                  flush=True)  # fmt: skip
            confirmed = float(conf.mean())
            if confirmed >= target:
                self.hit, reached = (step, start - self.t0), True
        self.eval_s += time.perf_counter() - start
        self.rows.writerow([step, now, EVAL_METRIC, mean])
        self.rows.writerow([step, now, RUN_CLOCK_METRIC, start - self.t0])
        self.rows.writerow([step, now, EVAL_S_METRIC, self.eval_s])
        if confirmed is not None:
            self.rows.writerow([step, now, CONFIRM_METRIC, confirmed])
        self.csv.flush()
        return reached

    def finish(self, env_steps: int, wall_s: float, final: np.ndarray, **extra: Any) -> None:
        """Write summary.json: ``wall_s`` of training (evaluations included), the final
        evaluation's ``final`` returns."""
        self.csv.close()
        summary = {
            "run_dir": str(self.run_dir), "env": self.cfg.env, "agent": self.cfg.agent,
            "framework": self.framework, "precision": self.framework, "seed": self.cfg.seed,
            "env_steps": int(env_steps), "wall_time_s": wall_s,
            "eval_time_s": self.eval_s, "eval_return": float(final.mean()),
            "eval_return_std": float(final.std()), "target_return": self.cfg.target_return,
            "reached_target": self.hit is not None,
            "steps_to_target": None if self.hit is None else self.hit[0],
            "time_to_target_s": None if self.hit is None else self.hit[1],
            "interrupted": False, **extra,
        }  # fmt: skip
        write_output(
            self.run_dir / "summary.json", json.dumps(summary, indent=1, allow_nan=False), ""
        )
