"""The learner's loop: one function drives every backend.

``train(config)`` builds the agent, starts the actors (in-process or as local processes), and
loops: drain actor transitions into replay, update while the rate limiter allows, publish a
quantized snapshot every ``publish_every`` updates, evaluate the actors' snapshot greedily every
``eval_every`` environment steps, checkpoint, log. Ctrl-C stops the actors, writes a checkpoint
and returns.
"""

from __future__ import annotations

import dataclasses
import json
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from actorq import checkpoint as ckpt
from actorq.agents import AGENTS, builder_for, config_class
from actorq.config import ExperimentConfig
from actorq.core.evaluation import evaluate
from actorq.core.types import Batch, transition_specs
from actorq.distributed.local import LocalBackend, SyncBackend
from actorq.energy import EnergyTracker
from actorq.envs import env_spec, validate_env_id
from actorq.errors import CheckpointError, ConfigError
from actorq.logging import MetricLogger
from actorq.quant.runtimes import make_runtime
from actorq.quant.snapshot import PolicySnapshot, make_snapshot

if TYPE_CHECKING:
    from actorq.distributed.ray_backend import RayBackend

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
    # Whole machine (learner + actors), codecarbon; None when not tracked. ``energy_estimated``:
    # CPU power modelled from TDP and load (no hardware counter), as on machines without RAPL.
    energy_kwh: float | None = None
    energy_kg_co2: float | None = None
    energy_estimated: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _default_run_dir(cfg: ExperimentConfig) -> Path:
    env = cfg.env.replace(":", "-").replace("/", "-")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.agent}-{env}-{cfg.precision}-s{cfg.seed}-{stamp}"


def _registered_threshold(env_id: str) -> float | None:
    import gymnasium as gym

    _, _, name = env_id.partition(":")
    spec = gym.registry.get(name)
    return None if spec is None else spec.reward_threshold


def load_run_config(run_dir: Path) -> ExperimentConfig:
    path = run_dir / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{run_dir} is not an actorq run directory (no config.json)")
    try:
        d = json.loads(path.read_text())
        agent = d.get("agent", "dqn")  # runs from before D4PG were all DQN
        if agent not in AGENTS:
            raise CheckpointError(f"{path}: unknown agent {agent!r}")
        return config_class(agent).from_json(d)
    except (json.JSONDecodeError, TypeError, AttributeError) as e:
        raise CheckpointError(f"corrupt config.json in {run_dir}: {e}") from None


def agreement(a: PolicySnapshot, b: PolicySnapshot, states: np.ndarray, batch: int = 16) -> float:
    """Share of states on which two snapshots' greedy actions agree (onnxruntime for both).

    Inference runs in batches of ``batch`` (the actors' K); int8 activations are quantized per
    state, so the batch size does not change the result (tests/quant/test_runtimes.py).
    """
    ra, rb = make_runtime(a), make_runtime(b)
    hits = 0
    for i in range(0, len(states), batch):
        x = states[i : i + batch]
        hits += int((ra(x).argmax(1) == rb(x).argmax(1)).sum())
    return hits / max(len(states), 1)


def action_closeness(
    a: PolicySnapshot, b: PolicySnapshot, states: np.ndarray, tol: float = 0.05
) -> tuple[float, float]:
    """Continuous policies: ``(mean |a - b|, share of states with every |a_i - b_i| <= tol)``,
    actions in the policy's [-1, 1] space."""
    da = np.abs(make_runtime(a)(states) - make_runtime(b)(states))
    return float(da.mean()), float((da.max(axis=1) <= tol).mean())


class _StopOnCtrlC:
    """Ctrl-C asks the learner loop to stop at its next iteration; a second Ctrl-C interrupts
    at once.

    A flag rather than Python's default KeyboardInterrupt: that exception is raised wherever
    the main thread happens to be, and when that is a finalizer (``__del__`` of an env or a
    session, run by the garbage collector) Python prints "Exception ignored" and drops it, so
    an unlucky Ctrl-C would be lost and the run would go on. Only installed in the main thread.
    """

    def __init__(self) -> None:
        self.requested = False
        self._prev: Any = None
        if threading.current_thread() is threading.main_thread():
            self._prev = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def restore(self) -> None:
        if self._prev is not None:
            signal.signal(signal.SIGINT, self._prev)
            self._prev = None


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


def train(
    cfg: ExperimentConfig, callback: Callable[[dict[str, Any]], bool | None] | None = None
) -> TrainResult:
    """Train an agent (DQN, D4PG: the config's type says which) with quantized actors;
    returns a :class:`TrainResult`.

    ``callback(info)`` is called after each log interval with the latest metrics; return
    ``False`` to stop training early.
    """
    if cfg.resume:
        resume_dir = Path(cfg.resume)
        saved = load_run_config(resume_dir)
        # the saved experiment, with this invocation's run-length and display options
        for f in ("total_steps", "progress", "log_every", "stop_at_target"):
            setattr(saved, f, getattr(cfg, f))
        saved.ray_address = cfg.ray_address or saved.ray_address  # a cluster's address may move
        saved.resume, saved.run_dir = str(resume_dir), str(resume_dir)
        cfg = saved
        loaded = ckpt.load(resume_dir / "checkpoint")
    cfg.validate()
    validate_env_id(cfg.env)
    builder = builder_for(cfg)
    env_kw = cfg.env_kwargs()
    spec = env_spec(cfg.env)
    builder.check_spec(spec)
    target = cfg.target_return if cfg.target_return is not None else _registered_threshold(cfg.env)

    run_dir = Path(cfg.run_dir) if cfg.run_dir else _default_run_dir(cfg)
    if not cfg.resume and (run_dir / "checkpoint").exists():
        raise ConfigError(
            f"{run_dir} already holds a run; use --resume {run_dir} or a new --run-dir"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg.run_dir = str(run_dir)
    if not cfg.resume:
        (run_dir / "config.json").write_text(json.dumps(cfg.to_json(), indent=1))

    torch.set_num_threads(cfg.learner_threads)
    random.seed(cfg.seed)
    learner = builder.make_learner(cfg, spec)
    if cfg.precision == "auto":
        cfg.precision = _select_precision(
            cfg, spec, learner, builder.policy_spec(cfg, spec), run_dir
        )
        (run_dir / "config.json").write_text(json.dumps(cfg.to_json(), indent=1))
    # backend="ray" keeps replay in shards (Ray actors); the local backends in this process.
    replay: Any = builder.make_replay(cfg, spec) if cfg.backend == "local" else None
    limiter = builder.make_rate_limiter(cfg)
    rng = np.random.default_rng(cfg.seed)
    pspec = builder.policy_spec(cfg, spec)
    c: dict[str, Any] = {
        "env_steps": 0, "updates": 0, "publishes": 0, "version": 0, "episodes": 0,
        "wall_time_s": 0.0, "time_to_target_s": None, "steps_to_target": None,
        "last_eval": None,
    }  # fmt: skip
    if cfg.resume:
        tensors, state, replay_path = loaded
        learner.load_state(tensors, state["learner"])
        c.update(state["counters"])
        rng = ckpt.restore_rng(state["rng"]["numpy"])
        torch.set_rng_state(tensors["rng.torch"])
        random.setstate((3, tuple(state["rng"]["python"]), None))
        if replay_path is not None and replay is not None:
            replay.load(replay_path)

    setup = builder.make_actor_setup(cfg, spec)
    if cfg.resume:
        setup.seed = cfg.seed + 104_729 * (c["env_steps"] // 1000 + 1)  # fresh env seeds
    fp32_bytes = len(make_snapshot(learner.policy_layers(), pspec, "fp32", 0).to_bytes())

    gptq = cfg.uses_gptq()

    def snapshot(version: int) -> PolicySnapshot:
        calib = None
        if gptq and replay is not None and replay.size:
            # Fresh replay states per publish, from a generator keyed by (seed, version):
            # reproducible, resume-safe, and independent of the learner's sampling stream.
            calib_rng = np.random.default_rng((cfg.seed, version))
            calib = replay.sample(min(cfg.calibration_states, replay.size), calib_rng)["obs"]
        return make_snapshot(
            learner.policy_layers(), pspec, cfg.precision, version, cfg.granularity, calib
        )

    first = snapshot(c["version"]).to_bytes()
    capacity = int(len(first) * 1.1) + 65536
    energy = EnergyTracker(cfg.energy_country) if cfg.energy else None
    if energy is not None:
        energy.start()  # ~1.5 s (hardware detection): before the actors and the run's clock
    # From here on Ctrl-C only sets a flag, so a run interrupted while its actors start still
    # stops through the loop's clean path (checkpoint, summary).
    stop = _StopOnCtrlC()
    backend: SyncBackend | LocalBackend | RayBackend
    data: LocalInput | RayBackend
    try:
        if cfg.backend == "ray":
            from actorq.distributed.ray_backend import RayBackend

            backend = RayBackend(cfg, setup, transition_specs(spec), capacity, c["env_steps"])
            replay = backend.replay
            if cfg.resume and loaded[2] is not None:
                replay.load(loaded[2])
            data = backend
        else:
            if cfg.actors == 0:
                backend = SyncBackend(setup)
            else:
                backend = LocalBackend(
                    setup, cfg.actors, run_dir, capacity, env_steps_offset=c["env_steps"]
                )
            data = LocalInput(backend, replay, limiter, cfg.batch_size, rng)
    except BaseException:
        stop.restore()
        if "backend" in locals():
            backend.close()
        raise
    logger = MetricLogger(run_dir)
    progress = _Progress(cfg.progress, cfg.total_steps, c["env_steps"])
    progress.print(f"run dir: {run_dir}")

    publish_times: list[float] = []
    latest_bytes = first
    backend.publish(c["version"], first)

    def publish() -> None:
        nonlocal latest_bytes
        t = time.perf_counter()
        c["version"] += 1
        data = snapshot(c["version"]).to_bytes()
        backend.publish(c["version"], data)
        publish_times.append(time.perf_counter() - t)
        latest_bytes = data
        c["publishes"] += 1

    def save_checkpoint() -> None:
        tensors, meta = learner.state()
        tensors["rng.torch"] = torch.get_rng_state()
        state = {
            "learner": meta,
            "counters": c,
            "rng": {"numpy": ckpt.rng_state(rng), "python": list(random.getstate()[1])},
        }
        ckpt.save(run_dir / "checkpoint", tensors, state, replay.save if cfg.save_replay else None)

    next_eval = (c["env_steps"] // cfg.eval_every + 1) * cfg.eval_every
    start_wall = time.perf_counter() - c["wall_time_s"]
    last_log = time.perf_counter()
    window: dict[str, list[float]] = {}
    ep_returns: list[float] = []
    ep_lengths: list[int] = []
    last = {"steps": c["env_steps"], "updates": c["updates"], "t": last_log, "busy": 0.0,
            "wait": 0.0, "lwait": 0.0}  # fmt: skip
    interrupted = False
    stop_reason = "budget"

    try:
        while True:
            if stop.requested:
                raise KeyboardInterrupt
            batch = data.next_batch()
            for ret, length in backend.drain_episodes():
                ep_returns.append(ret)
                ep_lengths.append(length)
            if batch is not None:
                metrics = learner.update(batch)
                c["updates"] += 1
                for k, v in metrics.items():
                    window.setdefault(k, []).append(v)
                if c["updates"] % cfg.publish_every == 0:
                    publish()
                if c["updates"] % cfg.checkpoint_every == 0:
                    save_checkpoint()
            elif backend.synchronous:
                backend.step_actor()  # type: ignore[union-attr]

            c["env_steps"] = backend.env_steps()  # cheap: the full stats are read per log interval
            now = time.perf_counter()
            if c["env_steps"] >= next_eval:
                next_eval = (c["env_steps"] // cfg.eval_every + 1) * cfg.eval_every
                publish()  # evaluate exactly the weights the actors now get
                snap = PolicySnapshot.from_bytes(latest_bytes)
                rets = evaluate(
                    make_runtime(snap, cfg.runtime), cfg.env, cfg.eval_episodes, EVAL_SEED, env_kw
                )
                c["last_eval"] = float(rets.mean())
                logger.log(c["env_steps"], {"charts/eval_return": c["last_eval"]})
                progress.print(
                    f"eval @ {c['env_steps']:>8} steps, {now - start_wall:6.1f}s: "
                    f"{rets.mean():7.1f} ± {rets.std():5.1f} ({cfg.precision})"
                )
                if target is not None and rets.mean() >= target and c["steps_to_target"] is None:
                    # confirm on fresh seeds before declaring the target reached
                    seed = CONFIRM_SEED + 100 * c["publishes"]
                    conf = evaluate(
                        make_runtime(snap, cfg.runtime), cfg.env, cfg.eval_episodes, seed, env_kw
                    )
                    progress.print(
                        f"  confirmation on fresh seeds: {conf.mean():.1f} ± {conf.std():.1f}"
                    )
                    if conf.mean() < target:
                        continue
                    c["steps_to_target"] = c["env_steps"]
                    c["time_to_target_s"] = now - start_wall
                    if cfg.stop_at_target:
                        _reached, stop_reason = True, "target"
                        break
            if c["env_steps"] >= cfg.total_steps:
                break
            if now - last_log >= cfg.log_every:
                st = backend.stats()
                restarted = backend.supervise()
                if restarted:
                    progress.print(f"[yellow]restarted {restarted} actor(s)[/]")
                dt = now - last["t"]
                busy = st.actor_busy_s - last["busy"]
                wait = st.actor_wait_s - last["wait"]
                learner_wait = data.learner_wait_s
                lw = learner_wait - last["lwait"]
                ep_returns_w, ep_lengths_w = ep_returns[-1000:], ep_lengths[-1000:]
                m: dict[str, float] = {k: float(np.mean(v)) for k, v in window.items()}
                m.update(
                    {
                        "perf/actor_sps": (c["env_steps"] - last["steps"]) / dt,
                        "perf/learner_ups": (c["updates"] - last["updates"]) / dt,
                        "perf/learner_wait_frac": lw / dt,
                        "perf/actor_wait_frac": wait / (busy + wait) if busy + wait > 0 else 0.0,
                        "comm/snapshot_bytes": float(len(latest_bytes)),
                        "comm/publishes": float(c["publishes"]),
                        "comm/publish_ms": 1e3 * float(np.mean(publish_times[-50:]))
                        if publish_times
                        else 0.0,
                        "faults/actor_restarts": float(st.actor_restarts),
                        "faults/rejected_snapshots": float(st.rejected_snapshots),
                        "replay/size": float(replay.size),
                        **(energy.snapshot().as_metrics() if energy is not None else {}),
                        **st.extra,
                    }
                )
                if ep_returns_w:
                    m["charts/episodic_return"] = float(np.mean(ep_returns_w))
                    m["charts/episodic_length"] = float(np.mean(ep_lengths_w))
                c["episodes"] += len(ep_returns)
                ep_returns.clear()
                ep_lengths.clear()
                logger.log(c["env_steps"], m)
                window.clear()
                last.update(steps=c["env_steps"], updates=c["updates"], t=now, busy=st.actor_busy_s,
                            wait=st.actor_wait_s, lwait=learner_wait)  # fmt: skip
                last_log = now
                ev = "-" if c["last_eval"] is None else f"{c['last_eval']:.1f}"
                ep_ret = m.get("charts/episodic_return")
                progress.update(
                    c["env_steps"],
                    f"ups {m['perf/learner_ups']:6.0f} | sps {m['perf/actor_sps']:7.0f} | "
                    f"return {'-' if ep_ret is None else f'{ep_ret:.1f}'} | eval {ev}",
                )
                if (
                    callback is not None
                    and callback({**m, **c, "backend": backend, "actor_pids": backend.pids()})
                    is False
                ):
                    stop_reason = "callback"
                    break
    except KeyboardInterrupt:
        interrupted, stop_reason = True, "interrupted"
    finally:
        stop.restore()
        try:
            st = backend.stats()
            reading = energy.stop() if energy is not None else None  # the run, not the report
            c["env_steps"] = st.env_steps
            c["wall_time_s"] = time.perf_counter() - start_wall
            # Whatever reads replay comes before close(): a Ray backend's replay is its shards.
            final_states = _final_states(replay, cfg.seed)
            final = snapshot(c["version"] + 1)
            save_checkpoint()
        finally:
            backend.close()
            progress.stop()

    # Final report: held-out greedy evaluation of the final weights, quantized and fp32,
    # and how often the two pick the same action on states the actors visited.
    fp32 = make_snapshot(learner.policy_layers(), pspec, "fp32", c["version"] + 1)
    q_rets = evaluate(
        make_runtime(final, cfg.runtime), cfg.env, cfg.eval_episodes, FINAL_EVAL_SEED, env_kw
    )
    f_rets = evaluate(
        make_runtime(fp32, cfg.runtime), cfg.env, cfg.eval_episodes, FINAL_EVAL_SEED, env_kw
    )
    states = final_states if final_states is not None else np.zeros((0, spec.obs_dim), np.float32)
    n_states = len(states)
    mad = None
    if not n_states:
        agree = float("nan")
    elif pspec.head == "q":
        agree = agreement(final, fp32, states, cfg.envs_per_actor)
    else:
        mad, agree = action_closeness(final, fp32, states)
    result = TrainResult(
        run_dir=str(run_dir),
        env=cfg.env,
        precision=cfg.precision,
        env_steps=c["env_steps"],
        updates=c["updates"],
        wall_time_s=c["wall_time_s"],
        eval_return=float(q_rets.mean()),
        eval_return_std=float(q_rets.std()),
        eval_return_fp32=float(f_rets.mean()),
        action_agreement=agree,
        agreement_states=n_states,
        snapshot_bytes=len(latest_bytes),
        fp32_snapshot_bytes=fp32_bytes,
        publishes=c["publishes"],
        publish_ms=1e3 * float(np.mean(publish_times)) if publish_times else 0.0,
        target_return=target,
        reached_target=c["steps_to_target"] is not None,
        time_to_target_s=c["time_to_target_s"],
        steps_to_target=c["steps_to_target"],
        actor_restarts=st.actor_restarts,
        rejected_snapshots=st.rejected_snapshots,
        interrupted=interrupted,
        agent=cfg.agent,
        action_mean_abs_diff=mad,
        **(reading.as_summary() if reading is not None else {}),
    )
    logger.log(
        c["env_steps"],
        {
            "charts/final_eval_return": result.eval_return,
            "charts/final_eval_return_fp32": result.eval_return_fp32,
            "quant/action_agreement": agree,
            **({} if mad is None else {"quant/action_mean_abs_diff": mad}),
        },
    )
    logger.close()
    (run_dir / "summary.json").write_text(
        json.dumps({**result.to_json(), "stop": stop_reason}, indent=1)
    )
    print_summary(result, stop_reason)
    return result


class LocalInput:
    """The learner's input on the local backends: move the actors' transitions into the
    in-process replay, then sample a batch whenever the rate limiter allows (sampling a numpy
    ring is microseconds, so no prefetch thread: it would only contend for the GIL)."""

    def __init__(
        self,
        backend: SyncBackend | LocalBackend,
        replay: Any,
        limiter: Any,
        batch_size: int,
        rng: np.random.Generator,
    ) -> None:
        self.backend, self.replay, self.limiter = backend, replay, limiter
        self.batch_size, self.rng = batch_size, rng
        # Counts this session's inserts and samples (a resumed replay is already in).
        self.inserts = self.samples = 0
        self.learner_wait_s = 0.0

    def next_batch(self) -> Batch | None:
        batch = self.backend.drain()
        if batch:
            self.replay.add(batch)
            self.inserts += len(batch["reward"])
        if self.limiter.can_sample(self.batch_size, self.inserts, self.samples):
            self.samples += self.batch_size
            self.backend.set_samples(self.samples)
            return self.replay.sample(self.batch_size, self.rng)
        if not self.backend.synchronous:
            t = time.perf_counter()
            time.sleep(0.0002)
            self.learner_wait_s += time.perf_counter() - t
        return None


def _select_precision(
    cfg: ExperimentConfig, spec: Any, learner: Any, pspec: Any, run_dir: Path
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
        )
        precision, table = choice.precision, choice.table()
    (run_dir / "precision_auto.md").write_text(table + "\n")
    print(table, flush=True)
    return precision


def _select_precision_on_nodes(
    cfg: ExperimentConfig, learner: Any, pspec: Any, observations: np.ndarray
) -> tuple[str, str]:
    from actorq.distributed import precision as node_precision
    from actorq.distributed.ray_backend import import_ray, init_ray

    started = init_ray(cfg.ray_address)
    try:
        choices = node_precision.node_choices(
            make_snapshot(learner.policy_layers(), pspec, "fp32", 0).to_bytes(),
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
    """Replay states for the final quantized-vs-fp32 comparison (None if replay is empty)."""
    try:
        size = replay.size
        if not size:
            return None
        return np.asarray(replay.sample(min(n, size), np.random.default_rng(seed + 1))["obs"])
    except Exception:  # a backend failing at shutdown must not lose the run's summary
        return None


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
        "eval return (held-out, 10 ep)",
        f"{r.eval_return:.1f} {pm} {r.eval_return_std:.1f} ({r.precision})",
    )
    t.add_row("eval return, same weights fp32", f"{r.eval_return_fp32:.1f}")
    if r.action_mean_abs_diff is None:
        t.add_row(
            "action agreement vs fp32",
            f"{100 * r.action_agreement:.2f}% of {r.agreement_states} replay states",
        )
    else:
        t.add_row(
            "actions vs fp32",
            f"mean |Δa| {r.action_mean_abs_diff:.4f}; {100 * r.action_agreement:.2f}% of "
            f"{r.agreement_states} replay states within 0.05",
        )
    tgt = "-" if r.target_return is None else f"{r.target_return:g}"
    reached = (
        f"yes, at {r.steps_to_target} steps / {r.time_to_target_s:.1f}s"
        if r.reached_target
        else "no"
    )
    t.add_row(f"reached target {tgt}", reached)
    t.add_row("env steps / learner updates", f"{r.env_steps} / {r.updates}")
    t.add_row("wall time", f"{r.wall_time_s:.1f}s ({stop_reason})")
    ratio = r.snapshot_bytes / r.fp32_snapshot_bytes
    t.add_row("snapshot bytes", f"{r.snapshot_bytes:,} ({100 * ratio:.1f}% of fp32)")
    t.add_row("publishes", f"{r.publishes} (mean {r.publish_ms:.2f} ms each)")
    if r.energy_kwh is not None and r.energy_kg_co2 is not None:
        how = "estimated: no power counter" if r.energy_estimated else "measured"
        t.add_row(
            "energy / CO2 (whole machine)",
            f"{1e3 * r.energy_kwh:.3f} Wh / {1e3 * r.energy_kg_co2:.3f} g CO2eq ({how})",
        )
    t.add_row("actor restarts / rejected snapshots", f"{r.actor_restarts} / {r.rejected_snapshots}")
    t.add_row("run dir", r.run_dir)
    Console().print(t)
