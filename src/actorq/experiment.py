"""The learner's loop: one short function drives every agent and every backend.

``train(config)`` reads like a CleanRL script over named pieces, each testable on its own:
resolve the config (on a copy), open the run directory, restore a checkpoint, publish
snapshots (:class:`Publisher`), checkpoint (:class:`Checkpointer`), run the backend
(:mod:`actorq.distributed.backend`), evaluate (:class:`Evaluator`), log each interval
(:class:`IntervalLogger`), shut down and report (:func:`final_report`). The loop itself:
take the backend's next batch, update, publish every ``publish_every`` updates, evaluate the
actors' snapshot greedily every ``eval_every`` environment steps, checkpoint, log. Ctrl-C stops
the actors, writes a checkpoint and returns.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actorq import checkpoint as ckpt
from actorq.agents import builder_for
from actorq.agents.builder import Builder
from actorq.agents.policy_io import (  # noqa: F401 - re-exported: the CLI and tests use them
    MLPPolicyIO,
    PolicyIO,
    compare_policies,
    learner_snapshot,
    policy_is_finite,
)
from actorq.config import ExperimentConfig, device_problem, is_device_name
from actorq.core.interfaces import Learner, MLPLearner
from actorq.distributed.backend import Backend, BackendContext, BackendStats, make_backend
from actorq.energy import EnergyTracker
from actorq.envs import validate_env_id
from actorq.errors import CheckpointError, ConfigError, DivergedError, first_line
from actorq.logging import MetricLogger
from actorq.run import load_run_config
from actorq.types import EnvSpec

EVAL_SEED = 10_000  # periodic evaluations
FINAL_EVAL_SEED = 20_000  # held-out seeds for the final report
CONFIRM_SEED = 30_000  # confirmation of a target reached


@dataclasses.dataclass
class TrainResult:
    """What a run achieved; also written to ``summary.json`` in the run directory."""

    run_dir: str
    env: str
    precision: str
    env_steps: int
    updates: int
    wall_time_s: float
    eval_return: float  # final greedy eval, actors' (quantized) snapshot, held-out seeds
    eval_return_std: float
    eval_return_fp32: float  # the same weights at fp32
    # Quantized vs fp32 actions on replay states: share of identical greedy actions (discrete),
    # or share of states whose every action component is within 0.05 (continuous, in [-1, 1]).
    action_agreement: float
    agreement_states: int
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

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _default_run_dir(cfg: ExperimentConfig) -> Path:
    env = cfg.env.replace(":", "-").replace("/", "-")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.agent}-{env}-{cfg.precision}-s{cfg.seed}-{stamp}"


def registered_threshold(env_id: str) -> float | None:
    import gymnasium as gym

    prefix, _, name = env_id.partition(":")
    if prefix != "gym":
        return None
    spec = gym.registry.get(name)
    return None if spec is None else spec.reward_threshold


# -- resolve the config and the run directory ------------------------------------------------
Loaded = tuple[dict[str, Any], dict[str, Any], Path | None]


def resolve_config(cfg: ExperimentConfig) -> tuple[ExperimentConfig, Loaded | None]:
    """The config this run uses — a copy: ``train(cfg)`` never changes the caller's object —
    and, for ``resume``, the checkpoint it continues from (the saved experiment, with this
    invocation's run-length and display options)."""
    if not cfg.resume:
        out = copy.deepcopy(cfg)
        out.validate()
        validate_env_id(out.env)
        return out, None
    resume_dir = Path(cfg.resume)
    if cfg.run_dir is not None and Path(cfg.run_dir).resolve() != resume_dir.resolve():
        raise ConfigError(
            f"--resume {resume_dir} continues in that directory; --run-dir {cfg.run_dir} "
            "names another (drop --run-dir, or copy the run directory first)"
        )
    saved = load_run_config(resume_dir, device="cpu")  # where it computes is decided below
    saved.device = resume_device(cfg, resume_dir)
    if saved.agent != cfg.agent:
        raise ConfigError(f"{resume_dir} is a {saved.agent} run; resume it with {saved.agent}")
    conflicts = resume_conflicts(cfg, saved)
    if conflicts:
        raise ConfigError(
            f"--resume continues {resume_dir} with its saved settings; these options differ "
            f"from them: {', '.join(conflicts)} (drop them, or start a new run)"
        )
    for f in RESUME_OVERRIDES:
        if hasattr(cfg, f):
            setattr(saved, f, getattr(cfg, f))
    saved.ray_address = cfg.ray_address or saved.ray_address  # a cluster's address may move
    saved.resume, saved.run_dir = str(resume_dir), str(resume_dir)
    loaded = ckpt.load(resume_dir / "checkpoint")
    saved.validate()
    validate_env_id(saved.env)
    return saved, loaded


#: What a resume may change: run length, display, and how updates run (not what they compute).
#: Anything else is the saved run's (but where the learner computes: :func:`resume_device`).
RESUME_OVERRIDES = (
    "total_steps", "progress", "log_every", "stop_at_target", "learner_mode", "updates_per_turn",
    "replay_on_device",
)  # fmt: skip
_RESUME_FREE = (
    *RESUME_OVERRIDES, "resume", "run_dir", "ray_address", "energy", "energy_country", "device",
)  # fmt: skip


def resume_device(cfg: ExperimentConfig, resume_dir: Path) -> str:
    """Where a resumed run's learner computes: ``--device`` when given; else the device the run
    trained on, if this machine has it; else the CPU, with a warning (a run trained on a GPU
    goes on on a machine without one). Checkpoints hold CPU tensors, so weights and optimizer
    state load onto either; updates on another device differ in the last bits."""
    if cfg.device != type(cfg)().device:
        return cfg.device  # validated with the rest of the config
    path = resume_dir / "config.json"
    ran_on = json.loads(path.read_bytes()).get("device", "cpu")  # valid JSON: loaded before
    if not is_device_name(ran_on):
        raise CheckpointError(f"{path}: device must be cpu, cuda or cuda:N, got {ran_on!r}")
    problem = device_problem(ran_on)
    if problem is None:
        return ran_on
    print(
        f"actorq: warning: {resume_dir} trained its learner on {ran_on}, which this machine "
        f"lacks ({problem.partition(': ')[2]}): resuming on the CPU (--device to choose)",
        file=sys.stderr,
    )
    return "cpu"


def resume_conflicts(cfg: ExperimentConfig, saved: ExperimentConfig) -> list[str]:
    """Options set on a resume (differing from the defaults) that differ from the saved run:
    they would be silently ignored, so they are refused (``--flag value (saved: x)``)."""
    defaults = type(cfg)()
    out = []
    for f in dataclasses.fields(cfg):
        if f.name in _RESUME_FREE:
            continue
        mine, default, was = (getattr(x, f.name) for x in (cfg, defaults, saved))
        if mine != default and mine != was:
            out.append(f"--{f.name.replace('_', '-')} {mine} (saved: {was})")
    return out


def open_run_dir(cfg: ExperimentConfig) -> Path:
    """Create (or, resuming, reuse) the run directory; write config.json for a new run."""
    run_dir = Path(cfg.run_dir) if cfg.run_dir else _default_run_dir(cfg)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"--run-dir {run_dir} is a file, not a directory")
    if not cfg.resume and (run_dir / "checkpoint").exists():
        raise ConfigError(
            f"{run_dir} already holds a run; use --resume {run_dir} or a new --run-dir"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg.run_dir = str(run_dir)
    if not cfg.resume:
        write_config(cfg, run_dir)
    return run_dir


def write_config(cfg: ExperimentConfig, run_dir: Path) -> None:
    (run_dir / "config.json").write_text(json.dumps(cfg.to_json(), indent=1))


# -- counters and restore --------------------------------------------------------------------
@dataclasses.dataclass
class Counters:
    """The run's progress; checkpointed as JSON (``state.json["counters"]``)."""

    env_steps: int = 0
    updates: int = 0
    publishes: int = 0
    version: int = 0
    episodes: int = 0
    wall_time_s: float = 0.0
    time_to_target_s: float | None = None
    steps_to_target: int | None = None
    last_eval: float | None = None
    #: ``updates`` when the latest snapshot was published (an evaluation publishes only if the
    #: weights changed since, so on-policy data is not made stale by evaluations)
    updates_at_publish: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Counters:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def restore(loaded: Loaded, learner: Learner, counters: Counters) -> np.random.Generator:
    """Load the learner's state, the counters and the RNG streams; returns the learner's
    sampling generator."""
    tensors, state, _ = loaded
    try:
        learner.load_state(tensors, state["learner"])
        restored = Counters.from_json(state["counters"])
        rng = ckpt.restore_rng(state["rng"]["numpy"])
        torch.set_rng_state(tensors["rng.torch"])
        random.setstate((3, tuple(state["rng"]["python"]), None))
    except Exception as e:  # a checkpoint of another config, or a hand-edited state.json
        raise CheckpointError(f"checkpoint does not match config.json: {first_line(e)}") from None
    for f in dataclasses.fields(Counters):
        setattr(counters, f.name, getattr(restored, f.name))
    return rng


def load_replay(replay: Any, path: Path) -> None:
    """Restore a checkpoint's replay; one CheckpointError line if it is unreadable or does not
    fit this run's replay (shapes, dtypes, non-finite values)."""
    try:
        replay.load(path)
    except Exception as e:
        raise CheckpointError(f"cannot read {path}: {first_line(e)}") from None


# -- snapshots ---------------------------------------------------------------------------------
def check_losses(metrics: dict[str, float], updates: int) -> None:
    """Stop at the first non-finite loss: a diverged learner must not publish, checkpoint or
    report success."""
    for k, v in metrics.items():
        if k.endswith("_loss") and not math.isfinite(v):
            # metrics are read once per log interval (no sync per update): "by", not "at"
            raise DivergedError(f"the learner diverged by update {updates}: {k} = {v}")


class Publisher:
    """Quantizes the learner's policy and broadcasts it through the backend.

    int8/int4 weights are rounded with GPTQ on replay states when the config asks for it
    (fresh states per publish, from a generator keyed by (seed, version): reproducible,
    resume-safe, and independent of the learner's sampling stream).

    ``asynchronous`` (off-policy agents with actor processes, ``publish_async``): a periodic
    publish copies the weights on the learner's thread and quantizes, encodes and sends them
    on one background thread (Menger: distributing parameters must not throttle the learner).
    While one is in flight the next is skipped (counted), never waited for. The first
    publish, a publish before an evaluation (:meth:`publish` with ``in_line``) and the final
    snapshot are in line, after the one in flight has landed. An error on the background
    thread (non-finite weights) is raised on the learner's at the next publish or :meth:`settle`.
    """

    def __init__(self, cfg: ExperimentConfig, io: PolicyIO, asynchronous: bool = False) -> None:
        self.cfg, self.io = cfg, io
        self.gptq = cfg.uses_gptq()
        self.replay: Any = None  # the backend's replay view, once there is a backend
        self.backend: Backend | None = None
        self.times: list[float] = []  # per publish: quantize + encode + send
        self.blocked: list[float] = []  # per publish: what the learner's thread paid
        self.skipped = 0
        self.latest = b""
        self._mlp = io if isinstance(io, MLPPolicyIO) else None  # the IO that can freeze
        self._pool = (
            ThreadPoolExecutor(1, thread_name_prefix="actorq-publish")
            if asynchronous and self._mlp is not None
            else None
        )
        self._inflight: Future[None] | None = None

    @property
    def asynchronous(self) -> bool:
        return self._pool is not None

    def _calibration(self, version: int) -> np.ndarray | None:
        if self.gptq and self.replay is not None and self.replay.size:
            calib_rng = np.random.default_rng((self.cfg.seed, version))
            return self.replay.sample_states(self.cfg.calibration_states, calib_rng)
        return None

    def snapshot(self, version: int, precision: str | None = None) -> bytes:
        """The learner's policy as snapshot bytes (the config's precision by default)."""
        calib = self._calibration(version)
        if not self.io.is_finite():
            raise DivergedError("the learner's policy weights are NaN or infinite")
        return self.io.snapshot(version, precision or self.cfg.precision, calib)

    def publish(self, c: Counters, first: bytes | None = None, in_line: bool = False) -> None:
        """Publish the next version (or ``first``, the initial one, as version ``c.version``);
        on the background thread if the publisher is asynchronous and neither is asked for."""
        assert self.backend is not None
        if self._pool is not None and first is None and not in_line:
            if self._inflight is not None and not self._inflight.done():
                self.skipped += 1
                return
            self.settle()  # the last one's error, if any, surfaces here
            t = time.perf_counter()
            c.version += 1
            c.publishes += 1
            assert self._mlp is not None
            make = self._mlp.freeze(c.version, self.cfg.precision, self._calibration(c.version))
            c.updates_at_publish = c.updates
            self._inflight = self._pool.submit(self._send, c.version, make, t)
            self.blocked.append(time.perf_counter() - t)
            return
        self.settle()
        t = time.perf_counter()
        if first is None:
            c.version += 1
            c.publishes += 1
        data = first if first is not None else self.snapshot(c.version)
        self.backend.publish(c.version, data)
        if first is None:
            self.times.append(time.perf_counter() - t)
            self.blocked.append(self.times[-1])
        self.latest = data
        c.updates_at_publish = c.updates

    def publish_for_evaluation(self, c: Counters) -> None:
        """Make ``latest`` exactly the weights the actors now get: the snapshot in flight lands
        first, then the current weights are published in line if updates came since."""
        self.settle()
        if c.updates != c.updates_at_publish:
            self.publish(c, in_line=True)

    def _send(self, version: int, make: Callable[[], bytes], t0: float) -> None:
        assert self.backend is not None
        data = make()
        self.backend.publish(version, data)
        self.latest = data
        self.times.append(time.perf_counter() - t0)

    def settle(self) -> None:
        """Wait for the publish in flight, if any; raise its error."""
        f, self._inflight = self._inflight, None
        if f is not None:
            f.result()

    def close(self) -> None:
        """Let the publish in flight finish (its error dropped: the run is ending) and stop
        the background thread."""
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self.settle()
            self._pool.shutdown(wait=True)

    @property
    def blocked_ms(self) -> float:
        return 1e3 * float(np.mean(self.blocked)) if self.blocked else 0.0

    @property
    def mean_ms(self) -> float:
        return 1e3 * float(np.mean(self.times)) if self.times else 0.0


class Checkpointer:
    """Writes the learner, counters, RNG streams and (if the replay kind keeps it) the replay."""

    def __init__(
        self,
        run_dir: Path,
        learner: Learner,
        counters: Counters,
        rng: np.random.Generator,
        replay: Any,
        save_replay: bool,
    ) -> None:
        self.dir = run_dir / "checkpoint"
        self.learner, self.c, self.rng, self.replay = learner, counters, rng, replay
        self.save_replay = save_replay and bool(getattr(replay, "persistent", False))

    def save(self) -> None:
        tensors, meta = self.learner.state()
        for name, t in tensors.items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise DivergedError(f"learner tensor {name!r} is NaN or infinite")
        tensors["rng.torch"] = torch.get_rng_state()
        state = {
            "learner": meta,
            "counters": self.c.to_json(),
            "rng": {"numpy": ckpt.rng_state(self.rng), "python": list(random.getstate()[1])},
        }
        ckpt.save(self.dir, tensors, state, self.replay.save if self.save_replay else None)


# -- evaluation ------------------------------------------------------------------------------
class Evaluator:
    """Greedy evaluation of the actors' snapshot every ``eval_every`` environment steps; a
    target counts as reached only if a confirmation on fresh seeds agrees."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        io: PolicyIO,
        target: float | None,
        logger: MetricLogger,
        say: Callable[[str], None],
        env_steps: int,
    ) -> None:
        self.cfg, self.io, self.target, self.logger, self.say = cfg, io, target, logger, say
        self.next = (env_steps // cfg.eval_every + 1) * cfg.eval_every
        self.seconds = 0.0  # time spent evaluating (periodic and confirmation)

    def due(self, env_steps: int) -> bool:
        return env_steps >= self.next

    def run(self, data: bytes, c: Counters, elapsed: float) -> bool:
        """Evaluate the snapshot ``data``; record it; returns True when the target is newly
        reached and confirmed."""
        cfg = self.cfg
        t = time.perf_counter()
        self.next = (c.env_steps // cfg.eval_every + 1) * cfg.eval_every
        rets = self.io.evaluate(data, cfg.eval_episodes, EVAL_SEED)
        c.last_eval = float(rets.mean())
        self.logger.log(c.env_steps, {"charts/eval_return": c.last_eval})
        self.say(
            f"eval @ {c.env_steps:>8} steps, {elapsed:6.1f}s: "
            f"{_num(rets.mean())} ± {_num(rets.std())} ({cfg.precision})"
        )
        reached = False
        if self.target is not None and rets.mean() >= self.target and c.steps_to_target is None:
            seed = CONFIRM_SEED + 100 * c.publishes
            conf = self.io.evaluate(data, cfg.eval_episodes, seed)
            self.say(f"  confirmation on fresh seeds: {conf.mean():.1f} ± {conf.std():.1f}")
            if conf.mean() >= self.target:
                c.steps_to_target = c.env_steps
                c.time_to_target_s = elapsed
                reached = True
        self.seconds += time.perf_counter() - t
        self.logger.log(c.env_steps, {"perf/eval_s": self.seconds})  # cumulative
        return reached


def _num(x: float) -> str:
    """A return for a log line: one decimal for episode returns (CartPole's 500.0), four
    significant digits for small ones (a proxy cost of 0.5417, a 4% gain over a baseline)."""
    return f"{x:7.1f}" if abs(x) >= 100 else f"{x:7.4g}"


# -- logging ---------------------------------------------------------------------------------
class IntervalLogger:
    """Every ``log_every`` seconds: learner metrics (means over the interval), throughput,
    waits, communication, faults, energy and episode returns, to CSV/TensorBoard and the
    progress bar."""

    def __init__(self, logger: MetricLogger, progress: _Progress, c: Counters) -> None:
        self.logger, self.progress = logger, progress
        self.window: dict[str, list[float]] = {}
        self.ep_returns: list[float] = []
        self.ep_lengths: list[int] = []
        self.last = {"steps": c.env_steps, "updates": c.updates, "t": time.perf_counter(),
                     "busy": 0.0, "wait": 0.0, "infer": 0.0, "env": 0.0}  # fmt: skip
        self.update_s = 0.0  # the learner's time inside update() this interval
        # the learner's time in loop turns that found no batch this interval: polling is
        # waiting, the backend's sleep and the look at every actor's channel alike (counting
        # only the sleep, an idle learner beside 15 actors read as 30% busy)
        self.wait_s = 0.0

    def add_update(self, metrics: dict[str, float], seconds: float = 0.0) -> None:
        for k, v in metrics.items():
            self.window.setdefault(k, []).append(v)
        self.update_s += seconds

    def add_metrics(self, metrics: dict[str, float], updates: int) -> None:
        """The learner's means since its last read (stops a diverged run: a non-finite loss)."""
        check_losses(metrics, updates)
        self.add_update(metrics)

    def add_episodes(self, episodes: list[tuple[float, int]]) -> None:
        for ret, length in episodes:
            self.ep_returns.append(ret)
            self.ep_lengths.append(length)

    def due(self, now: float, every: float) -> bool:
        return now - self.last["t"] >= every

    def log(
        self,
        now: float,
        c: Counters,
        st: BackendStats,
        publisher: Publisher,
        replay_size: int,
        energy: dict[str, float],
    ) -> dict[str, float]:
        last = self.last
        dt = now - last["t"]
        busy = st.actor_busy_s - last["busy"]
        wait = st.actor_wait_s - last["wait"]
        m: dict[str, float] = {k: float(np.mean(v)) for k, v in self.window.items()}
        m.update(
            {
                "perf/actor_sps": (c.env_steps - last["steps"]) / dt,
                "perf/learner_ups": (c.updates - last["updates"]) / dt,
                "perf/learner_wait_frac": self.wait_s / dt,
                "perf/learner_update_frac": self.update_s / dt,
                "perf/actor_wait_frac": wait / (busy + wait) if busy + wait > 0 else 0.0,
                "comm/snapshot_bytes": float(len(publisher.latest)),
                "comm/publishes": float(c.publishes),
                "comm/publish_ms": 1e3 * float(np.mean(publisher.times[-50:]))
                if publisher.times
                else 0.0,
                "comm/publish_blocked_ms": 1e3 * float(np.mean(publisher.blocked[-50:]))
                if publisher.blocked
                else 0.0,
                "comm/publishes_skipped": float(publisher.skipped),
                "faults/actor_restarts": float(st.actor_restarts),
                "faults/rejected_snapshots": float(st.rejected_snapshots),
                "replay/size": float(replay_size),
                **energy,
                **st.extra,
            }
        )
        if busy > 0:  # where the actors' busy time went (the rest: sampling, adder, writes)
            m["perf/actor_infer_frac"] = (st.actor_infer_s - last["infer"]) / busy
            m["perf/actor_env_frac"] = (st.actor_env_s - last["env"]) / busy
        if self.ep_returns:
            m["charts/episodic_return"] = float(np.mean(self.ep_returns[-1000:]))
            m["charts/episodic_length"] = float(np.mean(self.ep_lengths[-1000:]))
        c.episodes += len(self.ep_returns)
        self.ep_returns.clear()
        self.ep_lengths.clear()
        self.logger.log(c.env_steps, m)
        self.window.clear()
        last.update(steps=c.env_steps, updates=c.updates, t=now, busy=st.actor_busy_s,
                    wait=st.actor_wait_s, infer=st.actor_infer_s, env=st.actor_env_s)  # fmt: skip
        self.update_s = self.wait_s = 0.0
        ev = "-" if c.last_eval is None else f"{c.last_eval:.1f}"
        ep_ret = m.get("charts/episodic_return")
        self.progress.update(
            c.env_steps,
            f"ups {m['perf/learner_ups']:6.0f} | sps {m['perf/actor_sps']:7.0f} | "
            f"return {'-' if ep_ret is None else f'{ep_ret:.1f}'} | eval {ev}",
        )
        return m


# -- the run ---------------------------------------------------------------------------------
def train(
    cfg: ExperimentConfig, callback: Callable[[dict[str, Any]], bool | None] | None = None
) -> TrainResult:
    """Train an agent (the config's type says which: DQN, D4PG, PPO) with quantized actors;
    returns a :class:`TrainResult`. ``cfg`` itself is not changed.

    ``callback(info)`` is called after each log interval with the latest metrics; return
    ``False`` to stop training early.
    """
    cfg, loaded = resolve_config(cfg)
    builder = builder_for(cfg)
    spec = builder.env_spec(cfg)
    builder.check_spec(spec)
    warn = cfg.cores_warning()  # once the input is known good, from the settings in use
    if warn:
        print(f"actorq: warning: {warn}", file=sys.stderr)
    target = cfg.target_return if cfg.target_return is not None else registered_threshold(cfg.env)
    run_dir = open_run_dir(cfg)

    learner, io, c, rng, warm = _prepare_learner(cfg, builder, spec, loaded, run_dir)

    setup = builder.actor_setup(cfg, spec)
    if loaded is not None:
        setup.seed = cfg.seed + 104_729 * (c.env_steps // 1000 + 1)  # fresh env seeds
    asynchronous = bool(getattr(cfg, "publish_async", False)) and cfg.actors >= 1
    publisher = Publisher(cfg, io, asynchronous)
    fp32_bytes = len(publisher.snapshot(0, "fp32"))
    first = publisher.snapshot(c.version)
    energy = EnergyTracker(cfg.energy_country) if cfg.energy else None
    if energy is not None:
        energy.start()  # ~1.5 s (hardware detection): before the actors and the run's clock
    # From here on Ctrl-C only sets a flag, so a run interrupted while its actors start still
    # stops through the loop's clean path (checkpoint, summary).
    stop = _StopOnSignal()
    ctx = BackendContext(
        cfg=cfg,
        setup=setup,
        specs=builder.data_specs(cfg, spec),
        table_config=builder.table_config(cfg, spec),
        snapshot_capacity=int(len(first) * 1.1) + 65536,
        run_dir=run_dir,
        rng=rng,
        env_steps_offset=c.env_steps,
    )
    backend = start_backend(ctx, loaded, stop)
    replay = backend.replay
    publisher.replay, publisher.backend = replay, backend
    checkpointer = Checkpointer(
        run_dir, learner, c, rng, replay, bool(getattr(cfg, "save_replay", False))
    )
    logger = MetricLogger(run_dir)
    progress = _Progress(cfg.progress, cfg.total_steps, c.env_steps)
    progress.print(f"run dir: {run_dir}")
    past_budget = loaded is not None and c.env_steps >= cfg.total_steps
    if past_budget:
        progress.print(
            f"{run_dir} is already at {c.env_steps:,} env steps of --total-steps "
            f"{cfg.total_steps:,}: nothing to train, summarising its checkpoint (raise "
            "--total-steps to go on)"
        )
    evaluator = Evaluator(cfg, io, target, logger, progress.print, c.env_steps)
    interval = IntervalLogger(logger, progress, c)
    if warm:
        logger.log(c.env_steps, warm)
    publisher.publish(c, first)

    start_wall = time.perf_counter() - c.wall_time_s
    interrupted, stop_reason = False, "budget"
    try:
        while not past_budget:  # past it: not one env step or update, only the summary
            if stop.requested:
                raise KeyboardInterrupt
            t_poll = time.perf_counter()
            batch = backend.next_batch()
            interval.add_episodes(backend.drain_episodes())
            turn = 0
            while batch is not None:  # up to updates_per_turn while the replay rule allows
                t_update = time.perf_counter()
                # metrics stay with the learner (on its device) until read: no sync per update
                learner.learn(batch)
                c.updates += 1
                turn += 1
                interval.update_s += time.perf_counter() - t_update
                if c.updates % cfg.publish_every == 0:
                    publisher.publish(c)  # refuses non-finite weights
                if c.updates % cfg.checkpoint_every == 0:
                    interval.add_metrics(learner.read_metrics(), c.updates)
                    c.env_steps = backend.env_steps()
                    c.wall_time_s = time.perf_counter() - start_wall  # time to target on resume
                    checkpointer.save()
                batch = backend.ready_batch() if turn < cfg.updates_per_turn else None
            c.env_steps = backend.env_steps()  # cheap: the full stats are read per log interval
            now = time.perf_counter()
            if turn == 0:  # the poll found no batch: the learner waited for data
                interval.wait_s += now - t_poll
            if evaluator.due(c.env_steps):
                publisher.publish_for_evaluation(c)
                if evaluator.run(publisher.latest, c, now - start_wall) and cfg.stop_at_target:
                    stop_reason = "target"
                    break
            if c.env_steps >= cfg.total_steps:
                break
            if interval.due(now, cfg.log_every):
                interval.add_metrics(learner.read_metrics(), c.updates)
                info = log_interval(now, c, backend, interval, publisher, energy, progress)
                if callback is not None and callback(info) is False:
                    stop_reason = "callback"
                    break
        if not past_budget:  # the last interval's metrics, before the final checkpoint
            interval.add_metrics(learner.read_metrics(), c.updates)
        publisher.settle()  # its error, if any, is the run's
    except KeyboardInterrupt:
        interrupted, stop_reason = True, "interrupted"
    except BaseException as e:
        # A failed run (a diverged learner, a bug) writes nothing more: the checkpoint on disk
        # is the last good one, and a crashed resume must not replace it.
        publisher.close()
        _close_failed_run(stop, energy, backend, progress)
        if isinstance(e, DivergedError):
            if (checkpointer.dir / ckpt.MANIFEST).is_file():
                kept = f", the last finite checkpoint is kept in {checkpointer.dir}"
            else:  # nothing to point at: say so, and what usually fixes it
                kept = (
                    " before its first checkpoint, so none was written (lower the learning "
                    "rate or --max-grad-norm)"
                )
            raise DivergedError(f"{e}; stopped at {c.env_steps} env steps{kept}") from None
        raise
    stop.restore()
    publisher.close()
    try:
        st = backend.stats()
        reading = energy.stop() if energy is not None else None  # the run, not the report
        c.env_steps = st.env_steps
        if not interrupted and not past_budget:  # past it, the run's own end already ran
            _finish_learner(learner, logger, c)
        c.wall_time_s = time.perf_counter() - start_wall
        # Whatever reads replay comes before close(): a Ray backend's replay is its shards.
        final_states = _final_states(replay, cfg.seed)
        final = publisher.snapshot(c.version + 1)
        checkpointer.save()
    finally:
        backend.close()
        progress.stop()

    result = final_report(cfg, io, final, final_states, c, st, publisher, target, fp32_bytes)
    result = dataclasses.replace(
        result,
        interrupted=interrupted,
        eval_time_s=evaluator.seconds,
        **(reading.as_summary() if reading is not None else {}),
    )
    write_summary(result, stop_reason, logger, run_dir, c.env_steps)
    return result


def _prepare_learner(
    cfg: ExperimentConfig, builder: Builder, spec: EnvSpec, loaded: Loaded | None, run_dir: Path
) -> tuple[Learner, PolicyIO, Counters, np.random.Generator, dict[str, float]]:
    """The learner, its policy IO, the counters and the run's RNG: restored from ``loaded`` on a
    resume, else fresh, with the learner's warm start (its metrics returned, to log at step 0).
    ``--precision auto`` is settled here, before the first snapshot, and saved to the config."""
    torch.set_num_threads(cfg.learner_threads)
    random.seed(cfg.seed)
    learner = builder.make_learner(cfg, spec)
    if cfg.precision == "auto":
        # configs refuse auto for graph policies (GO, PPO's chip network) before this point
        if not isinstance(learner, MLPLearner):
            raise TypeError(f"--precision auto needs an MLP policy, not {type(learner).__name__}")
        pspec = builder.policy_spec(cfg, spec)
        cfg.precision = _select_precision(cfg, spec, learner, pspec, run_dir)
        write_config(cfg, run_dir)
    io = builder.policy_io(cfg, spec, learner)
    c = Counters()
    rng = np.random.default_rng(cfg.seed)
    warm: dict[str, float] = {}
    if loaded is not None:
        rng = restore(loaded, learner, c)
    else:
        warm = learner.warm_start()  # a fresh run: before the first snapshot is taken
    return learner, io, c, rng, warm


def _close_failed_run(
    stop: _StopOnSignal, energy: EnergyTracker | None, backend: Backend, progress: _Progress
) -> None:
    """Stop what a failed run started, writing nothing (no checkpoint, no summary)."""
    stop.restore()
    with contextlib.suppress(Exception):
        if energy is not None:
            energy.stop()
    backend.close()
    progress.stop()


def _finish_learner(learner: Learner, logger: MetricLogger, c: Counters) -> None:
    """The learner's end-of-run work (GO's final distillation), logged at the last step, before
    the final snapshot and checkpoint so that they hold it."""
    done = learner.finish()
    if done:
        check_losses(done, c.updates)
        logger.log(c.env_steps, done)


def log_interval(
    now: float,
    c: Counters,
    backend: Backend,
    interval: IntervalLogger,
    publisher: Publisher,
    energy: EnergyTracker | None,
    progress: _Progress,
) -> dict[str, Any]:
    """One log interval: supervise the actors, log the metrics; returns what a callback gets."""
    st = backend.stats()
    restarted = backend.supervise()
    if restarted:
        progress.print(f"[yellow]restarted {restarted} actor(s)[/]")
    m = interval.log(
        now,
        c,
        st,
        publisher,
        backend.replay.size,
        energy.snapshot().as_metrics() if energy is not None else {},
    )
    return {**m, **c.to_json(), "backend": backend, "actor_pids": backend.pids()}


def start_backend(ctx: BackendContext, loaded: Loaded | None, stop: _StopOnSignal) -> Backend:
    """Start the backend and, resuming, restore the checkpoint's replay into it; on failure
    nothing is left running (and Ctrl-C gets its default handler back)."""
    try:
        backend = make_backend(ctx)
    except BaseException:
        stop.restore()
        raise
    replay = backend.replay
    if loaded is not None and loaded[2] is not None and replay.persistent:
        try:
            load_replay(replay, loaded[2])
        except CheckpointError:
            backend.close()
            stop.restore()
            raise
    return backend


def write_summary(
    result: TrainResult, stop_reason: str, logger: MetricLogger, run_dir: Path, env_steps: int
) -> None:
    """The final report to the logs, ``summary.json`` and the console."""
    final = {
        "charts/final_eval_return": result.eval_return,
        "charts/final_eval_return_fp32": result.eval_return_fp32,
        "quant/action_agreement": result.action_agreement,
    }
    if result.action_mean_abs_diff is not None:
        final["quant/action_mean_abs_diff"] = result.action_mean_abs_diff
    if result.logprob_gap is not None:
        final["quant/logprob_gap"] = result.logprob_gap
    logger.log(env_steps, final)
    logger.close()
    (run_dir / "summary.json").write_text(
        json.dumps({**result.to_json(), "stop": stop_reason}, indent=1)
    )
    print_summary(result, stop_reason)


def final_report(
    cfg: ExperimentConfig,
    io: PolicyIO,
    final: bytes,
    states: np.ndarray | None,
    c: Counters,
    st: BackendStats,
    publisher: Publisher,
    target: float | None,
    fp32_bytes: int,
) -> TrainResult:
    """Held-out greedy evaluation of the final weights, quantized and fp32, and how alike the
    two act on states the actors visited."""
    fp32 = io.snapshot(c.version + 1, "fp32")
    q_rets = io.evaluate(final, cfg.eval_episodes, FINAL_EVAL_SEED)
    f_rets = io.evaluate(fp32, cfg.eval_episodes, FINAL_EVAL_SEED)
    cmp = io.compare(final, fp32, states, cfg.seed)
    return TrainResult(
        run_dir=str(cfg.run_dir),
        env=cfg.env,
        precision=cfg.precision,
        env_steps=c.env_steps,
        updates=c.updates,
        wall_time_s=c.wall_time_s,
        eval_return=float(q_rets.mean()),
        eval_return_std=float(q_rets.std()),
        eval_return_fp32=float(f_rets.mean()),
        action_agreement=cmp.agreement,
        agreement_states=cmp.items,
        snapshot_bytes=len(publisher.latest),
        fp32_snapshot_bytes=fp32_bytes,
        publishes=c.publishes,
        publish_ms=publisher.mean_ms,
        publish_blocked_ms=publisher.blocked_ms,
        publishes_skipped=publisher.skipped,
        target_return=target,
        reached_target=c.steps_to_target is not None,
        time_to_target_s=c.time_to_target_s,
        steps_to_target=c.steps_to_target,
        actor_restarts=st.actor_restarts,
        rejected_snapshots=st.rejected_snapshots,
        agent=cfg.agent,
        action_mean_abs_diff=cmp.mean_abs_diff,
        logprob_gap=cmp.logprob_gap,
        eval_label=io.eval_label,
        agreement_on=cmp.items_label,
    )


class _StopOnSignal:
    """Ctrl-C (SIGINT) and SIGTERM (what ``kill``, ``docker stop``, Slurm and Kubernetes send
    before they kill) ask the learner loop to stop at its next iteration, through the clean
    path: final checkpoint, summary, actors stopped, shared memory removed. A second one
    interrupts at once.

    A flag rather than Python's default KeyboardInterrupt: that exception is raised wherever
    the main thread happens to be, and when that is a finalizer (``__del__`` of an env or a
    session, run by the garbage collector) Python prints "Exception ignored" and drops it, so
    an unlucky Ctrl-C would be lost and the run would go on. Only installed in the main thread.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self._prev: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            self._prev = {s: signal.signal(s, self._handle) for s in self.SIGNALS}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def restore(self) -> None:
        for s, prev in self._prev.items():
            signal.signal(s, prev)
        self._prev = {}


class _Progress:
    def __init__(self, enabled: bool, total: int, start: int) -> None:
        self.enabled = enabled
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.p = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            transient=False,
        )
        self.task = self.p.add_task("train", total=total, completed=start, info="")
        self.p.start()

    def update(self, steps: int, info: str) -> None:
        if self.enabled:
            self.p.update(self.task, completed=steps, info=info)

    def print(self, msg: str) -> None:
        if self.enabled:
            self.p.console.print(msg)
        else:
            print(msg, flush=True)

    def stop(self) -> None:
        if self.enabled:
            self.p.stop()


def _select_precision(
    cfg: ExperimentConfig, spec: Any, learner: MLPLearner, pspec: Any, run_dir: Path
) -> str:
    """``--precision auto``: time every precision's runtime at the actors' batch where the
    actors run and keep the fastest that acts like fp32 (:func:`actorq.quant.autoselect.
    select_precision`), on states from a few random-action steps of the environment. Local
    backends measure in this process (the actors' machine); backend="ray" on every node that
    will host actors (:mod:`actorq.distributed.precision`). The table goes to the console and
    to ``precision_auto.md`` in the run directory."""
    from actorq.envs import make_vector_env

    env = make_vector_env(cfg.env, cfg.envs_per_actor, **cfg.env_kwargs())
    obs, _ = env.reset(seed=cfg.seed)
    env.action_space.seed(cfg.seed)
    states = [np.asarray(obs, np.float32)]
    for _ in range(max(1, 1024 // cfg.envs_per_actor)):
        obs, *_ = env.step(env.action_space.sample())
        states.append(np.asarray(obs, np.float32))
    env.close()
    observations = np.concatenate(states).reshape(-1, spec.obs_dim)
    if cfg.backend == "ray":
        precision, table = _select_precision_on_nodes(cfg, learner, pspec, observations)
    else:
        from actorq.quant.autoselect import select_precision

        choice = select_precision(
            learner.policy_layers(),
            observations,
            cfg.envs_per_actor,
            spec=pspec,
            runtime=cfg.runtime,
            threads=cfg.actor_threads,
            granularity=cfg.granularity,
            extras=learner.policy_extras(),
        )
        precision, table = choice.precision, choice.table()
    (run_dir / "precision_auto.md").write_text(table + "\n")
    print(table, flush=True)
    return precision


def _select_precision_on_nodes(
    cfg: ExperimentConfig, learner: MLPLearner, pspec: Any, observations: np.ndarray
) -> tuple[str, str]:
    from actorq.distributed import precision as node_precision
    from actorq.distributed.ray_backend import import_ray, init_ray

    started = init_ray(cfg.ray_address)
    try:
        choices = node_precision.node_choices(
            learner_snapshot(learner, pspec, "fp32", 0).to_bytes(),
            observations,
            cfg.actors,
            cfg.envs_per_actor,
            cfg.runtime,
            cfg.actor_threads,
            cfg.granularity,
            min(1.0, cfg.actor_cpus),
        )
    finally:
        if started:  # the backend starts (and later stops) its own Ray
            import_ray().shutdown()
    chosen = node_precision.vote(choices)
    return chosen, node_precision.report(choices, chosen)


def _final_states(replay: Any, seed: int, n: int = 10_000) -> np.ndarray | None:
    """Replay states for the final quantized-vs-fp32 comparison (None if there are none)."""
    try:
        states = np.asarray(replay.sample_states(n, np.random.default_rng(seed + 1)))
    except Exception:  # a backend failing at shutdown must not lose the run's summary
        return None
    return states if len(states) else None


def print_summary(r: TrainResult, stop_reason: str = "") -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"actorq · {r.agent.upper()} on {r.env} · {r.precision} actors", show_header=False
    )
    t.add_column(style="bold")
    t.add_column()
    pm = "±"
    t.add_row(
        f"eval return ({r.eval_label})",
        f"{r.eval_return:.1f} {pm} {r.eval_return_std:.1f} ({r.precision})",
    )
    t.add_row("eval return, same weights fp32", f"{r.eval_return_fp32:.1f}")
    if r.action_mean_abs_diff is None:
        t.add_row(
            "action agreement vs fp32",
            f"{100 * r.action_agreement:.2f}% of {r.agreement_states} {r.agreement_on}",
        )
    else:
        t.add_row(
            "actions vs fp32",
            f"mean |Δa| {r.action_mean_abs_diff:.4f}; {100 * r.action_agreement:.2f}% of "
            f"{r.agreement_states} {r.agreement_on} within 0.05",
        )
    tgt = "-" if r.target_return is None else f"{r.target_return:g}"
    reached = (
        f"yes, at {r.steps_to_target} steps / {r.time_to_target_s:.1f}s"
        if r.reached_target
        else "no"
    )
    t.add_row(f"reached target {tgt}", reached)
    if r.logprob_gap is not None:
        t.add_row("log-prob gap vs fp32", f"{r.logprob_gap:.4f} nats (mean |Δ log π|)")
    t.add_row("env steps / learner updates", f"{r.env_steps} / {r.updates}")
    t.add_row("wall time", f"{r.wall_time_s:.1f}s ({stop_reason})")
    ratio = r.snapshot_bytes / r.fp32_snapshot_bytes
    t.add_row("snapshot bytes", f"{r.snapshot_bytes:,} ({100 * ratio:.1f}% of fp32)")
    pub = f"{r.publishes} (mean {r.publish_ms:.2f} ms each"
    if r.publish_blocked_ms is not None and r.publish_blocked_ms < 0.5 * r.publish_ms:
        pub += f"; learner blocked {r.publish_blocked_ms:.2f} ms"  # published in the background
    if r.publishes_skipped:
        pub += f"; {r.publishes_skipped} skipped while one was in flight"
    t.add_row("publishes", pub + ")")
    if r.energy_kwh is not None and r.energy_kg_co2 is not None:
        how = "estimated: no power counter" if r.energy_estimated else "measured"
        t.add_row(
            "energy / CO2 (whole machine)",
            f"{1e3 * r.energy_kwh:.3f} Wh / {1e3 * r.energy_kg_co2:.3f} g CO2eq ({how})",
        )
    t.add_row("actor restarts / rejected snapshots", f"{r.actor_restarts} / {r.rejected_snapshots}")
    t.add_row("run dir", r.run_dir)
    Console().print(t)
