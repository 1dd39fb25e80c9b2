"""Stable-Baselines3 (Raffin et al., JMLR 2021) as a framework of a benchmark matrix.

A task with ``frameworks = [..., "sb3"]`` trains SB3's DQN or PPO (the task's agent) with the
settings of its ``[tasks.sb3]`` table: keyword arguments of ``stable_baselines3.DQN`` / ``PPO``
as rl-baselines3-zoo writes them (``lin_X`` a linear schedule from X to 0, ``policy_kwargs``'
``activation_fn`` by name), plus rl-zoo's env keys ``n_envs`` and ``normalize`` (VecNormalize on
observations and rewards, ``gamma`` the algorithm's; evaluated on frozen training statistics).
The cell's budget, evaluation interval and episodes, target and seed are the task's actorq
config fields, so both frameworks run the same schedule; ``net_arch`` defaults to the cell's
width (``MlpPolicy``). One process on the CPU, ``torch_threads`` torch threads (default 1; the
Atari spec gives both frameworks' learners the machine's 2). Needs the ``[peers]`` extra.

Atari (``atari:<Game>``, ``policy = "CnnPolicy"``): SB3 trains on actorq's own Atari vector
env on the cell's engine (EnvPool where actorq's cells of the spec run on it,
:mod:`actorq.bench.sb3_vecenv`; else the ALE wrappers): the preprocessing of SB3's
``AtariWrapper`` + ``VecFrameStack(4)`` that rl-zoo's ``atari`` entries use (no-op starts, frame
skip 4 with max-pooling, 84×84 grayscale, episodic life and clipped rewards in training, FIRE on
reset, 4 frames stacked, a new stack repeating its first frame where ``VecFrameStack`` pads
zeros, no sticky actions: :mod:`actorq.envs.atari`), frames channel-first, which SB3's
``CnnPolicy`` takes as they are. Evaluations run actorq's loop on actorq's seeds (full games on
the raw score; PPO samples from its logits with the evaluation's seeded generator).

A cell checkpoints every ``checkpoint_minutes`` (default 10), before each evaluation and on
Ctrl-C / SIGTERM, in safe formats (:mod:`actorq.bench.sb3_checkpoint`); a cell.json that says
``resume`` rebuilds the model from these settings, loads the checkpoint and goes on with
``learn(..., reset_num_timesteps=False)``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actorq.bench import sb3_checkpoint
from actorq.bench.frameworks import (
    FINAL_EVAL_SEED,
    PolicyEval,
    Record,
    check_keys,
    missing_module,
)
from actorq.config import MAX_LAYERS, MAX_WIDTH
from actorq.core.exploration import epsilon_greedy
from actorq.errors import ActorQError, short

if TYPE_CHECKING:
    from actorq.config import ExperimentConfig

_COMMON = {
    "policy", "learning_rate", "batch_size", "gamma", "max_grad_norm", "policy_kwargs",
    "checkpoint_minutes", "torch_threads",
}  # fmt: skip
KEYS = {
    "dqn": frozenset(_COMMON | {
        "buffer_size", "learning_starts", "tau", "train_freq", "gradient_steps",
        "target_update_interval", "exploration_fraction", "exploration_initial_eps",
        "exploration_final_eps", "optimize_memory_usage",
    }),
    "ppo": frozenset(_COMMON | {
        "n_envs", "normalize", "n_steps", "n_epochs", "gae_lambda", "clip_range",
        "clip_range_vf", "normalize_advantage", "ent_coef", "vf_coef", "target_kl",
    }),
}  # fmt: skip
_SCHEDULED = ("learning_rate", "clip_range")
_FLAGS = ("normalize", "normalize_advantage", "optimize_memory_usage")
_POLICIES = ("MlpPolicy", "CnnPolicy")
#: the adapter's own keys (not SB3's arguments)
_ENV_KEYS = ("n_envs", "normalize", "checkpoint_minutes", "torch_threads")
#: counts: whole numbers, at least 1 (learning_starts: at least 0)
_COUNTS = frozenset({
    "n_envs", "n_steps", "n_epochs", "batch_size", "buffer_size", "learning_starts",
    "train_freq", "gradient_steps", "target_update_interval", "torch_threads",
})  # fmt: skip
#: the most of each count: actorq's bounds of the same settings (envs_per_actor, num_steps,
#: update_epochs, minibatch_size, ...), the rest as its replay_size
_MOST = {
    "n_envs": 4096, "torch_threads": 1024, "n_steps": 10**6, "n_epochs": 10_000,
    "batch_size": 10**8, "gradient_steps": 10**6,
}  # fmt: skip
_COUNT_MAX = 10**10
#: ranges of SB3's numbers: (least, least excluded, most); a ``lin_X``'s X in the same range
_RANGES: dict[str, tuple[float, bool, float]] = {
    "learning_rate": (0.0, True, 1e15), "clip_range": (0.0, True, 1e15),
    "clip_range_vf": (0.0, True, 1e15), "max_grad_norm": (0.0, True, 1e15),
    "target_kl": (0.0, True, 1e15), "checkpoint_minutes": (0.0, True, 1e15),
    "gamma": (0.0, True, 1.0), "tau": (0.0, True, 1.0), "gae_lambda": (0.0, False, 1.0),
    "ent_coef": (0.0, False, 1e15), "vf_coef": (0.0, False, 1e15),
    "exploration_fraction": (0.0, False, 1.0), "exploration_initial_eps": (0.0, False, 1.0),
    "exploration_final_eps": (0.0, False, 1.0),
}  # fmt: skip
CHECKPOINT_MINUTES = 10.0
#: a resumed segment's training envs are seeded ``seed + SEGMENT_SEEDS * segment``: past the
#: evaluations' seeds (:mod:`actorq.core.seeds`, 10,000 up), which 1,000 apart reached at 10
SEGMENT_SEEDS = 10**6
#: SB3's PPO defaults of the settings checked together (its minibatch size, rollout length)
PPO_BATCH, PPO_STEPS = 64, 2048
_ACTIVATIONS = ("relu", "tanh")
#: ``policy_kwargs`` keys the adapter passes on (rl-zoo's entries use these)
_POLICY_KWARGS = ("activation_fn", "net_arch", "ortho_init", "log_std_init")


def _in_range(key: str, v: float) -> bool:
    lo, open_lo, hi = _RANGES.get(key, (-1e15, False, 1e15))
    return (v > lo if open_lo else v >= lo) and v <= hi


def _bounds(key: str) -> str:
    """``key``'s range as words: '> 0', '>= 0 and <= 1'."""
    lo, open_lo, hi = _RANGES[key]
    return f"{'>' if open_lo else '>='} {lo:g}" + (f" and <= {hi:g}" if hi < 1e15 else "")


def _widths(v: Any) -> bool:
    return (
        isinstance(v, list)
        and 0 < len(v) <= MAX_LAYERS
        and all(isinstance(w, int) and not isinstance(w, bool) and 0 < w <= MAX_WIDTH for w in v)
    )


def _check_policy_kwargs(agent: str, v: Any) -> None:
    """The keys SB3's policies take that rl-zoo's entries use, each value checked: anything
    else would reach SB3's constructor and fail the cell after the bench has started."""
    if not isinstance(v, dict):
        raise ActorQError("policy_kwargs: a table")
    for key, x in v.items():
        if key not in _POLICY_KWARGS:
            raise ActorQError(
                f"policy_kwargs: unknown key {key!r} (known: {', '.join(_POLICY_KWARGS)})"
            )
        if key == "activation_fn" and x not in _ACTIVATIONS:
            raise ActorQError("policy_kwargs: activation_fn 'relu' or 'tanh'")
        if key == "ortho_init" and not isinstance(x, bool):
            raise ActorQError(f"policy_kwargs: ortho_init = {x!r}: true or false")
        if key == "log_std_init" and not (
            isinstance(x, int | float) and not isinstance(x, bool) and abs(x) <= 20
        ):
            raise ActorQError(f"policy_kwargs: log_std_init = {x!r}: a number in [-20, 20]")
        if key == "net_arch":
            # DQN: a list of widths; PPO: that or a table {pi = [...], vf = [...]}
            table = agent == "ppo" and isinstance(x, dict) and set(x) == {"pi", "vf"}
            if not (_widths(x) or (table and all(_widths(w) for w in x.values()))):
                arch = "a list of widths"
                if agent == "ppo":
                    arch += " or a table {pi = [...], vf = [...]}"
                raise ActorQError(
                    f"policy_kwargs: net_arch = {short(x)}: {arch} (at most {MAX_LAYERS} "
                    f"layers of 1..{MAX_WIDTH})"
                )


def schedule(value: float | str) -> float | Callable[[float], float]:
    """rl-zoo's ``lin_X`` as an SB3 schedule: X × progress remaining (1 -> 0); numbers as-is."""
    if isinstance(value, str):
        start = float(value.removeprefix("lin_"))
        return lambda progress_remaining: progress_remaining * start
    return float(value)


def _frozen_normalizer(venv: Any) -> Callable[[np.ndarray], np.ndarray] | None:
    """The training VecNormalize's observation normalization, its statistics copied now
    (evaluation never updates them); None without VecNormalize."""
    from stable_baselines3.common.vec_env import VecNormalize

    if not isinstance(venv, VecNormalize) or not venv.norm_obs:
        return None
    rms: Any = copy.deepcopy(venv.obs_rms)  # one RunningMeanStd: observations are arrays
    eps, clip = venv.epsilon, venv.clip_obs

    def normalize(obs: np.ndarray) -> np.ndarray:
        return np.clip((obs - rms.mean) / np.sqrt(rms.var + eps), -clip, clip).astype(np.float32)

    return normalize


class SB3:
    def missing(self) -> str | None:
        return missing_module("stable_baselines3", "stable-baselines3", "peers")

    def check(self, agent: str, settings: dict[str, Any]) -> None:
        check_keys(agent, settings, KEYS)
        for key, v in settings.items():
            if key in _SCHEDULED and isinstance(v, str):
                try:
                    x = float(v.removeprefix("lin_")) if v.startswith("lin_") else math.nan
                except ValueError:
                    x = math.nan
                if not (math.isfinite(x) and _in_range(key, x)):
                    raise ActorQError(f"{key} = {v!r}: a number or 'lin_X', {_bounds(key)}")
            elif key in _FLAGS:
                if not isinstance(v, bool):
                    raise ActorQError(f"{key} = {v!r}: true or false")
            elif key == "policy":
                if v not in _POLICIES:
                    raise ActorQError(f"policy = {v!r}: {' or '.join(map(repr, _POLICIES))}")
            elif key == "policy_kwargs":
                _check_policy_kwargs(agent, v)
            # abs() <= 1e15: False for NaN and inf, and no float() of a huge int
            elif not isinstance(v, int | float) or isinstance(v, bool) or not abs(v) <= 1e15:
                raise ActorQError(f"{key} = {v!r}: a number")
            elif key == "checkpoint_minutes" and not v > 0:
                raise ActorQError(f"checkpoint_minutes = {v!r}: a positive number")
            elif key == "torch_threads" and not (isinstance(v, int) and 1 <= v <= 1024):
                raise ActorQError(f"torch_threads = {v!r}: an integer in [1, 1024]")
            elif key == "gradient_steps" and v == -1:
                pass  # SB3's "as many as the env steps collected" (rl-zoo's LunarLander DQN)
            elif key in _COUNTS:
                least, most = int(key != "learning_starts"), _MOST.get(key, _COUNT_MAX)
                if not (isinstance(v, int) and least <= v <= most):
                    raise ActorQError(f"{key} = {v!r}: a whole number in [{least}, {most:,}]")
            elif not _in_range(key, v):
                raise ActorQError(f"{key} = {v!r}: a number {_bounds(key)}")
        if agent == "ppo" and settings.get("normalize_advantage", True):
            # SB3 normalizes each minibatch's advantages (its assertions): one sample, or a
            # rollout of one step, has no spread to normalize by
            if settings.get("batch_size", PPO_BATCH) < 2:
                raise ActorQError(
                    "batch_size = 1: at least 2 while normalize_advantage (SB3's default) is on"
                )
            if settings.get("n_steps", PPO_STEPS) * settings.get("n_envs", 1) < 2:
                raise ActorQError(
                    "n_steps × n_envs = 1: at least 2 while normalize_advantage (SB3's default) "
                    "is on"
                )

    def kwargs(
        self, cfg: ExperimentConfig, width: list[int], settings: dict[str, Any]
    ) -> dict[str, Any]:
        """``settings`` as SB3's keyword arguments (the adapter's own keys dropped)."""
        import torch.nn as nn

        kw = {k: v for k, v in settings.items() if k not in _ENV_KEYS}
        kw.setdefault("policy", "MlpPolicy")
        for key in _SCHEDULED:
            if key in kw:
                kw[key] = schedule(kw[key])
        pk = copy.deepcopy(kw.get("policy_kwargs", {}))
        if "activation_fn" in pk:
            pk["activation_fn"] = {"relu": nn.ReLU, "tanh": nn.Tanh}[pk["activation_fn"]]
        if kw["policy"] == "MlpPolicy":  # the CNN's is Nature's, whatever the width axis
            pk.setdefault(
                "net_arch",
                list(width) if cfg.agent == "dqn" else {"pi": list(width), "vf": list(width)},
            )
        kw["policy_kwargs"] = pk
        if kw.get("optimize_memory_usage"):  # what rl-zoo passes with it (SB3 refuses both)
            kw["replay_buffer_kwargs"] = {"handle_timeout_termination": False}
        return kw

    def build(self, cfg: ExperimentConfig, width: list[int], settings: dict[str, Any]) -> Any:
        """SB3's model of a cell, on its vector env (``model.get_env()``), not yet trained."""
        from stable_baselines3 import DQN, PPO
        from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

        from actorq.envs import make_env, make_vector_env

        env_kwargs = cfg.env_kwargs()
        if "engine" in env_kwargs:  # an Atari cell's: "auto" resolved as actorq's cells resolve it
            from actorq.envs.atari import resolve_engine

            env_kwargs["engine"] = resolve_engine(env_kwargs["engine"])
        n_envs = int(settings.get("n_envs", 1))
        venv: Any
        if env_kwargs.get("engine") == "envpool":  # the pool actorq's cells train on
            from actorq.bench.sb3_vecenv import ActorQVecEnv

            venv = ActorQVecEnv(make_vector_env(cfg.env, n_envs, **env_kwargs))
        else:
            venv = DummyVecEnv([lambda: make_env(cfg.env, **env_kwargs)] * n_envs)
        if settings.get("normalize"):
            venv = VecNormalize(venv, gamma=settings.get("gamma", 0.99))  # rl-zoo: the algo's
        algo = DQN if cfg.agent == "dqn" else PPO
        try:
            return algo(env=venv, seed=cfg.seed, device="cpu", verbose=0,
                        **self.kwargs(cfg, width, settings))  # fmt: skip
        except BaseException:
            venv.close()
            raise

    def run(self, cfg: ExperimentConfig, cell: dict[str, Any], run_dir: Path) -> bool:
        import torch
        from stable_baselines3 import PPO

        from actorq.core.exploration import PolicySampler

        settings = cell.get("settings", {})
        torch.set_num_threads(int(settings.get("torch_threads", 1)))
        evaluate = PolicyEval(cfg.env, cfg.eval_episodes, cfg.env_kwargs())
        model = self.build(cfg, cell["width"], settings)
        venv, algo = model.get_env(), type(model)

        def predict(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
            if evaluate.sampled and algo is PPO:  # from its categorical policy, with ``rng``
                policy: Any = model.policy
                with torch.no_grad():
                    logits = policy.get_distribution(
                        policy.obs_to_tensor(obs)[0]
                    ).distribution.logits
                sampler = PolicySampler(rng)
                sampler.set_head("categorical")
                return sampler.act(logits.cpu().numpy())[0]
            action = np.asarray(model.predict(obs, deterministic=True)[0])
            if evaluate.sampled:  # actorq's ε, not SB3's exploration schedule's current one
                return epsilon_greedy(action, int(venv.action_space.n), rng)
            return action

        try:
            segment = _Segment(cfg, cell, run_dir, model)
            return segment.learn(
                lambda seed: evaluate(predict, seed, _frozen_normalizer(model.get_env())),
                float(settings.get("checkpoint_minutes", CHECKPOINT_MINUTES)) * 60.0,
            )
        finally:
            venv.close()


class _Segment:
    """One session's share of an SB3 cell: from the start or from its checkpoint, to the
    budget, the target or a stop signal (then checkpointed)."""

    def __init__(
        self, cfg: ExperimentConfig, cell: dict[str, Any], run_dir: Path, model: Any
    ) -> None:
        self.cfg, self.run_dir, self.model = cfg, run_dir, model
        self.next_eval = cfg.eval_every
        self.refills: list[list[float]] = []
        self.segment = int(cell.get("segment", 1)) if cell.get("resume") else 1
        self.engine = cfg.env_kwargs().get("engine")  # None off Atari
        self.counters = sb3_checkpoint.algo_counters(model)  # at the collection's start
        #: the record's counters, next evaluation and replay position at that start, saved
        self.at_start: tuple[dict[str, Any], int, tuple[int, bool] | None] | None = None
        if cell.get("resume"):
            state, extra, replayed = sb3_checkpoint.load(run_dir, model)
            saved = extra["engine"] or ("ale" if self.engine else None)  # older: the ALE
            if saved != self.engine:
                raise ActorQError(
                    f"{run_dir}: this cell trained on the {saved} engine and would resume on "
                    f"{self.engine} (their frames differ); install {saved} or start it over"
                )
            self.counters = sb3_checkpoint.algo_counters(model)
            self.next_eval, self.refills = extra["next_eval"], extra["refills"]
            self.record = Record.resumed(cfg, run_dir, "sb3", state, model.num_timesteps)
            # new episodes on this segment's seeds (the first segment's were cfg.seed)
            # (10**6 apart: a segment's seeds never reach the evaluations' from EVAL_SEED up)
            model.get_env().seed(cfg.seed + SEGMENT_SEEDS * int(cell.get("segment", 2)))
            if cfg.agent == "dqn":
                sb3_checkpoint.resume_exploration(model, cfg.total_steps)
                if not replayed:  # an older checkpoint: refill, off budget
                    kw = (
                        model.replay_buffer.buffer_size,
                        max(model.learning_starts, model.batch_size),
                    )
                    need = min(*kw, model.num_timesteps)
                    steps, secs = sb3_checkpoint.refill_replay(model, need)
                    self.refills.append([steps, secs])
        else:
            self.record = Record(cfg, run_dir, "sb3")

    def save(self) -> None:
        """Checkpoint the model with the counters, clock and next evaluation of its collection's
        start (SB3 changes no weights inside a collection): a resume redoes that collection with
        what happened in it, an evaluation that fell there included (its row, seconds, target)."""
        state, next_eval, replay_at = self.at_start or (
            self.record.state(),
            self.next_eval,
            self.replay_position(),
        )
        extra = {"next_eval": next_eval, "refills": self.refills, "engine": self.engine}
        sb3_checkpoint.save(self.run_dir, self.model, self.counters, state, extra, replay_at)

    def replay_position(self) -> tuple[int, bool] | None:
        """A DQN's replay buffer's (pos, full) now; None for PPO."""
        buffer = getattr(self.model, "replay_buffer", None)
        return None if buffer is None else (int(buffer.pos), bool(buffer.full))

    def learn(self, returns: Callable[[int], np.ndarray], checkpoint_s: float) -> bool:
        """Train to the budget; returns whether a stop signal interrupted it."""
        from stable_baselines3.common.callbacks import BaseCallback

        from actorq.run.monitor import StopOnSignal

        cfg, seg, stop = self.cfg, self, StopOnSignal()

        class Evaluate(BaseCallback):
            """Every eval_every env steps: checkpoint, evaluate, stop at the target if the
            config says so; every checkpoint_s: checkpoint; on a stop signal: stop."""

            last_save = time.monotonic()

            def _on_rollout_start(self) -> None:
                seg.counters = sb3_checkpoint.algo_counters(self.model)
                seg.at_start = (seg.record.state(), seg.next_eval, seg.replay_position())

            def _on_step(self) -> bool:
                if stop.requested:
                    return False
                if time.monotonic() - self.last_save >= checkpoint_s:
                    seg.save()
                    self.last_save = time.monotonic()
                if self.num_timesteps < seg.next_eval:
                    return True
                seg.save()  # the collection's start: a stop from here on redoes the evaluation
                self.last_save = time.monotonic()
                seg.next_eval = (self.num_timesteps // cfg.eval_every + 1) * cfg.eval_every
                hit = seg.record.evaluate(self.num_timesteps, returns, lambda: stop.requested)
                # a stop during it: now, so the checkpoint stays this collection's start and
                # the resume redoes the evaluation (and a confirmation it skipped); going on,
                # the next collection's start would be saved with it done, unconfirmed
                return not (stop.requested or (hit and cfg.stop_at_target))

        model, record = self.model, self.record
        record.start()
        try:
            left = cfg.total_steps - model.num_timesteps
            if left > 0 and (record.hit is None or not cfg.stop_at_target):
                model.learn(total_timesteps=left, callback=Evaluate(), progress_bar=False,
                            reset_num_timesteps=not model.num_timesteps)  # fmt: skip
            # the training's end, before its checkpoint is written, as actorq's run clock stops
            wall_s = time.perf_counter() - record.t0
            if not stop.requested:  # trained: kept before the final evaluation (minutes)
                self.counters, self.at_start = sb3_checkpoint.algo_counters(model), None
                self.save()
            final: np.ndarray | None
            try:
                with stop.at_once():  # a stop now: at once, the resumed cell evaluates
                    final = None if stop.requested else returns(FINAL_EVAL_SEED)
            except KeyboardInterrupt:
                final = None
        finally:
            stop.restore()
        if final is None:
            if stop.requested and self.at_start is not None:  # stopped while training
                self.save()
            record.csv.close()
            return True
        extra: dict[str, Any] = {"segments": self.segment} if self.segment > 1 else {}
        if self.refills:
            extra["resume_refill_steps"] = int(sum(r[0] for r in self.refills))
            extra["resume_refill_s"] = float(sum(r[1] for r in self.refills))
        record.finish(int(model.num_timesteps), wall_s, final, **extra)
        return False
