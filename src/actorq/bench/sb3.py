"""Stable-Baselines3 (Raffin et al., JMLR 2021) as a framework of a benchmark matrix.

A task with ``frameworks = [..., "sb3"]`` trains SB3's DQN or PPO (the task's agent) with the
settings of its ``[tasks.sb3]`` table: keyword arguments of ``stable_baselines3.DQN`` / ``PPO``
as rl-baselines3-zoo writes them (``lin_X`` a linear schedule from X to 0, ``policy_kwargs``'
``activation_fn`` by name), plus rl-zoo's env keys ``n_envs`` and ``normalize`` (VecNormalize on
observations and rewards, ``gamma`` the algorithm's; evaluated on frozen training statistics).
The cell's budget, evaluation interval and episodes, target and seed are the task's actorq
config fields, so both frameworks run the same schedule; ``net_arch`` defaults to the cell's
width. One process, one torch thread, on the CPU. Needs the ``[peers]`` extra.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actorq.bench.frameworks import (
    EVAL_SEED,
    FINAL_EVAL_SEED,
    GreedyEval,
    Record,
    check_keys,
    missing_module,
)
from actorq.errors import ActorQError

if TYPE_CHECKING:
    from actorq.config import ExperimentConfig

_COMMON = {"policy", "learning_rate", "batch_size", "gamma", "max_grad_norm", "policy_kwargs"}
KEYS = {
    "dqn": frozenset(_COMMON | {
        "buffer_size", "learning_starts", "tau", "train_freq", "gradient_steps",
        "target_update_interval", "exploration_fraction", "exploration_initial_eps",
        "exploration_final_eps",
    }),
    "ppo": frozenset(_COMMON | {
        "n_envs", "normalize", "n_steps", "n_epochs", "gae_lambda", "clip_range",
        "clip_range_vf", "normalize_advantage", "ent_coef", "vf_coef", "target_kl",
    }),
}  # fmt: skip
_SCHEDULED = ("learning_rate", "clip_range")
_FLAGS = ("normalize", "normalize_advantage")
_ACTIVATIONS = ("relu", "tanh")


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
                    ok = v.startswith("lin_") and math.isfinite(float(v.removeprefix("lin_")))
                except ValueError:
                    ok = False
                if not ok:
                    raise ActorQError(f"{key} = {v!r}: a number or 'lin_X' (X a number)")
            elif key in _FLAGS:
                if not isinstance(v, bool):
                    raise ActorQError(f"{key} = {v!r}: true or false")
            elif key == "policy":
                if v != "MlpPolicy":
                    raise ActorQError(f"policy = {v!r}: only 'MlpPolicy'")
            elif key == "policy_kwargs":
                if not isinstance(v, dict) or v.get("activation_fn", "tanh") not in _ACTIVATIONS:
                    raise ActorQError("policy_kwargs: a table; activation_fn 'relu' or 'tanh'")
            # abs() <= 1e15: False for NaN and inf, and no float() of a huge int
            elif not isinstance(v, int | float) or isinstance(v, bool) or not abs(v) <= 1e15:
                raise ActorQError(f"{key} = {v!r}: a number")

    def kwargs(
        self, cfg: ExperimentConfig, width: list[int], settings: dict[str, Any]
    ) -> dict[str, Any]:
        """``settings`` as SB3's keyword arguments (env-side keys dropped)."""
        import torch.nn as nn

        kw = {k: v for k, v in settings.items() if k not in ("n_envs", "normalize")}
        kw.setdefault("policy", "MlpPolicy")
        for key in _SCHEDULED:
            if key in kw:
                kw[key] = schedule(kw[key])
        pk = copy.deepcopy(kw.get("policy_kwargs", {}))
        if "activation_fn" in pk:
            pk["activation_fn"] = {"relu": nn.ReLU, "tanh": nn.Tanh}[pk["activation_fn"]]
        pk.setdefault(
            "net_arch",
            list(width) if cfg.agent == "dqn" else {"pi": list(width), "vf": list(width)},
        )
        kw["policy_kwargs"] = pk
        return kw

    def run(self, cfg: ExperimentConfig, cell: dict[str, Any], run_dir: Path) -> None:
        import torch
        from stable_baselines3 import DQN, PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

        from actorq.envs import make_env

        torch.set_num_threads(1)
        settings = cell.get("settings", {})
        record = Record(cfg, run_dir, "sb3")
        greedy = GreedyEval(cfg.env, cfg.eval_episodes)
        venv: Any = DummyVecEnv([lambda: make_env(cfg.env)] * int(settings.get("n_envs", 1)))
        if settings.get("normalize"):
            venv = VecNormalize(venv, gamma=settings.get("gamma", 0.99))  # rl-zoo: the algo's
        algo = DQN if cfg.agent == "dqn" else PPO
        model = algo(env=venv, seed=cfg.seed, device="cpu", verbose=0,
                     **self.kwargs(cfg, cell["width"], settings))  # fmt: skip

        def returns(seed: int) -> np.ndarray:
            return greedy(
                lambda obs: model.predict(obs, deterministic=True)[0],
                seed,
                _frozen_normalizer(model.get_env()),
            )

        class Evaluate(BaseCallback):
            """Every eval_every env steps: evaluate; stop at the target if the config says so."""

            next_eval = cfg.eval_every

            def _on_step(self) -> bool:
                if self.num_timesteps < self.next_eval:
                    return True
                self.next_eval = (self.num_timesteps // cfg.eval_every + 1) * cfg.eval_every
                hit = record.evaluate(self.num_timesteps, lambda: returns(EVAL_SEED))
                return not (hit and cfg.stop_at_target)

        record.start()
        model.learn(total_timesteps=cfg.total_steps, callback=Evaluate(), progress_bar=False)
        wall_s = time.perf_counter() - record.t0
        record.finish(int(model.num_timesteps), wall_s, returns(FINAL_EVAL_SEED))
        greedy.close()
        venv.close()
