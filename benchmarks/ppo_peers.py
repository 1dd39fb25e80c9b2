"""actorq's PPO vs Stable-Baselines3 PPO, side by side, with the rl-baselines3-zoo settings.

    .venv/bin/python benchmarks/ppo_peers.py --case cartpole --seeds 0 1 2 \\
        --frameworks sb3 actorq-int8 actorq-fp32 --results benchmarks/results/ppo_peers
    .venv/bin/python benchmarks/ppo_peers.py --case halfcheetah --seeds 0 1 2
    .venv/bin/python benchmarks/ppo_peers.py --case walker --frameworks sb3 --seeds 0

Needs the ``[peers]`` extra (stable-baselines3) and, for halfcheetah and walker, ``[control]``.

Cells (``benchmarks/peers.py``, shared with ``dqn_peers.py``). Each (case, framework, seed) is
one cell, trained in its own subprocess, and written to ``<results>/<case>/<framework>-s<seed>
.json`` (atomically) when it finishes. A cell whose JSON exists is skipped, so an interrupted
matrix resumes where it stopped, across sessions; a crash or Ctrl-C loses at most the cell that
was running. After the cells, a Markdown table goes to stdout and to
``<results>/<case>/report.md`` (built from every cell JSON of the case found there).

Exit status: 0 when every asked cell is done, 1 when a cell failed, 2 when cells with other
budget settings are there, 130 when interrupted.

Evaluation, the same for both frameworks. Every ``--eval-every`` env steps (default 10k for
cartpole, 50k for halfcheetah and walker): 10 deterministic episodes on separately seeded envs,
seeds 10000..10009 (actorq's own periodic evaluation uses exactly these seeds). After training:
10 episodes on held-out seeds 20000..20009 (actorq's final evaluation seeds); that is the "final
return". Time spent evaluating is excluded from the training time: SB3 through the callback
here, which times its own evaluations; actorq through ``TrainResult.eval_time_s`` or the
cumulative ``perf/eval_s`` metric when actorq records one, otherwise its wall time includes its
periodic evaluations and the report says how many. With ``normalize: true`` the SB3 policy is
evaluated on the training VecNormalize's observation statistics, copied and frozen at the start
of each evaluation (training=False, norm_reward=False: returns are raw env returns).

Hyperparameters. Source: DLR-RM/rl-baselines3-zoo, hyperparams/ppo.yml (commit 22e3ff2 of
2026-04-23; the same values at 208b6fd). Quoted exactly::

    # Tuned
    CartPole-v1:
      n_envs: 8
      n_timesteps: !!float 1e5
      policy: 'MlpPolicy'
      n_steps: 32
      batch_size: 256
      gae_lambda: 0.8
      gamma: 0.98
      n_epochs: 20
      ent_coef: 0.0
      learning_rate: lin_0.001
      clip_range: lin_0.2

    HalfCheetah-v4:
      normalize: true
      n_envs: 1
      policy: 'MlpPolicy'
      n_timesteps: !!float 1e6
      batch_size: 64
      n_steps: 512
      gamma: 0.98
      learning_rate: 2.0633e-05
      ent_coef: 0.000401762
      clip_range: 0.1
      n_epochs: 20
      gae_lambda: 0.92
      max_grad_norm: 0.8
      vf_coef: 0.58096
      policy_kwargs: "dict(
                        log_std_init=-2,
                        ortho_init=False,
                        activation_fn=nn.ReLU,
                        net_arch=dict(pi=[256, 256], vf=[256, 256])
                      )"

(The older HalfCheetah-v3 entry has the same values.) How rl-zoo reads them:

- ``lin_X``: linear schedule from X at the start to 0 at the end of training (SB3 calls the
  schedule with the remaining progress, 1 -> 0). ``lin_0.001`` = learning rate 1e-3 -> 0.
- ``normalize: true``: ``VecNormalize`` on observations and rewards, with ``gamma`` set to the
  algorithm's gamma (rl-zoo's ExperimentManager does this); its evaluation env uses the training
  statistics with ``training=False, norm_reward=False``.
- Keys not listed take SB3's PPO defaults: ``vf_coef=0.5``, ``max_grad_norm=0.5``,
  ``clip_range_vf=None``, ``normalize_advantage=True``, ``target_kl=None``; MlpPolicy:
  ``net_arch=dict(pi=[64, 64], vf=[64, 64])``, Tanh, ``ortho_init=True``, ``log_std_init=0``.
- HalfCheetah-v5 (Gymnasium 1.x) takes the HalfCheetah-v4 values. rl-zoo has no PPO entry for
  DeepMind Control walker-walk: the walker case uses the HalfCheetah values too (an assumption
  of this benchmark, not a tuned setting), with ``actorq.envs.make_env("dmc:walker-walk")``
  (1000-step episodes, action repeat 1) as the env for both frameworks.

Mapping onto actorq's PPOConfig (``ACTORQ_PPO`` below, one dict per case; adjust it there).
actorq runs 2 actor processes; ``actors * envs_per_actor * num_steps`` equals rl-zoo's
``n_envs * n_steps`` (the rollout per update). Known differences from the SB3 side:

- cartpole: rl-zoo anneals ``clip_range`` linearly (``lin_0.2``); PPOConfig has only
  ``anneal_lr``, so actorq's clip coefficient stays at 0.2. Envs: 2 x 4 = 8, as rl-zoo's 8.
- halfcheetah, walker: rl-zoo collects 512 steps from 1 env; so does actorq (1 actor process
  with 1 env, 512-step chunks), the learner in its own process.
- SB3's value loss is the plain MSE times ``vf_coef``; actorq's is CleanRL's 0.5 × MSE.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from peers import (
    CURVE_METRIC,
    EVAL_TIME_METRIC,
    GreedyEval,
    eval_seconds,
    first_at_or_above,
    machine_info,
    matrix_args,
    mean_std,
    num,
    plain,
    ratio_ci,
    read_metrics_csv,
    report_head,
    result_fields,
    run_cell_main,
    run_matrix,
    say,
    write_json_atomic,
)

# --------------------------------------------------------------------------------------------
# Settings (edit here)
# --------------------------------------------------------------------------------------------

#: rl-baselines3-zoo's PPO entries, as in hyperparams/ppo.yml (see the module docstring);
#: ``policy_kwargs`` written as data (activation by name) instead of a Python string.
_HALFCHEETAH_ZOO: dict[str, Any] = {
    "normalize": True,
    "n_envs": 1,
    "policy": "MlpPolicy",
    "n_timesteps": 1_000_000,
    "batch_size": 64,
    "n_steps": 512,
    "gamma": 0.98,
    "learning_rate": 2.0633e-05,
    "ent_coef": 0.000401762,
    "clip_range": 0.1,
    "n_epochs": 20,
    "gae_lambda": 0.92,
    "max_grad_norm": 0.8,
    "vf_coef": 0.58096,
    "policy_kwargs": {
        "log_std_init": -2,
        "ortho_init": False,
        "activation_fn": "relu",
        "net_arch": {"pi": [256, 256], "vf": [256, 256]},
    },
}
ZOO_PPO: dict[str, dict[str, Any]] = {
    "cartpole": {
        "n_envs": 8,
        "n_timesteps": 100_000,
        "policy": "MlpPolicy",
        "n_steps": 32,
        "batch_size": 256,
        "gae_lambda": 0.8,
        "gamma": 0.98,
        "n_epochs": 20,
        "ent_coef": 0.0,
        "learning_rate": "lin_0.001",
        "clip_range": "lin_0.2",
    },
    "halfcheetah": _HALFCHEETAH_ZOO,
    "walker": _HALFCHEETAH_ZOO,  # no rl-zoo entry for dm_control walker-walk: HalfCheetah's
}

#: The same settings as actorq PPOConfig fields: ONE dict per case.
ACTORQ_PPO: dict[str, dict[str, Any]] = {
    "cartpole": {
        "learning_rate": 1e-3,
        "anneal_lr": True,  # lin_0.001
        "gamma": 0.98,
        "gae_lambda": 0.8,
        "actors": 2,
        "envs_per_actor": 4,  # 2 x 4 envs = rl-zoo's n_envs 8
        "num_steps": 32,  # 2 x 4 x 32 = 256 = 8 x 32
        "update_epochs": 20,
        "minibatch_size": 256,
        "clip_coef": 0.2,  # rl-zoo: lin_0.2 (annealed); PPOConfig has no clip schedule
        "ent_coef": 0.0,
        "vf_coef": 0.5,  # SB3 default
        "clip_vloss": False,  # SB3's clip_range_vf defaults to None
        "max_grad_norm": 0.5,  # SB3 default
        "policy_hidden_sizes": (64, 64),  # SB3 MlpPolicy default
        "value_hidden_sizes": (64, 64),
        "activation": "tanh",
        "log_std_init": 0.0,  # unused: discrete actions
        "ortho_init": True,
        "normalize_obs": False,
        "normalize_reward": False,
    },
    "halfcheetah": {
        "learning_rate": 2.0633e-05,
        "anneal_lr": False,
        "gamma": 0.98,
        "gae_lambda": 0.92,
        "actors": 1,
        "envs_per_actor": 1,
        "num_steps": 512,  # 1 actor x 1 env x 512 = rl-zoo's 1 x 512
        "update_epochs": 20,
        "minibatch_size": 64,
        "clip_coef": 0.1,
        "ent_coef": 0.000401762,
        "vf_coef": 0.58096,
        "clip_vloss": False,  # SB3's clip_range_vf defaults to None
        "max_grad_norm": 0.8,
        "policy_hidden_sizes": (256, 256),
        "value_hidden_sizes": (256, 256),
        "activation": "relu",
        "log_std_init": -2.0,
        "ortho_init": False,
        "normalize_obs": True,
        "normalize_reward": True,
    },
}
ACTORQ_PPO["walker"] = dict(ACTORQ_PPO["halfcheetah"])  # HalfCheetah's settings (see above)


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark environment: its id (actorq's prefixed form) and default budget."""

    env_id: str  # for actorq.envs.make_env and PPOConfig(env=...)
    total_steps: int
    eval_every: int
    target: float | None = None  # CartPole: steps and time to the first evaluation >= this


CASES: dict[str, Case] = {
    "cartpole": Case("gym:CartPole-v1", 100_000, 10_000, target=475.0),
    "halfcheetah": Case("gym:HalfCheetah-v5", 1_000_000, 50_000),
    "walker": Case("dmc:walker-walk", 1_000_000, 50_000),
}

FRAMEWORKS = ("sb3", "actorq-int8", "actorq-fp32", "actorq-fp16")
EVAL_EPISODES = 10
EVAL_SEED = 10_000  # periodic evaluations: seeds 10000..10009
FINAL_EVAL_SEED = 20_000  # final evaluation: held-out seeds 20000..20009
# --------------------------------------------------------------------------------------------
# SB3 cell
# --------------------------------------------------------------------------------------------


def _schedule(value: float | str) -> float | Callable[[float], float]:
    """rl-zoo's ``lin_X`` as an SB3 schedule: X * progress_remaining (1 -> 0); numbers as-is."""
    if isinstance(value, str):
        if not value.startswith("lin_"):
            raise ValueError(f"unsupported schedule {value!r} (only lin_X)")
        start = float(value[len("lin_") :])
        return lambda progress_remaining: progress_remaining * start
    return float(value)


def sb3_kwargs(zoo: dict[str, Any]) -> dict[str, Any]:
    """rl-zoo's entry as keyword arguments of ``stable_baselines3.PPO`` (env-side keys dropped)."""
    import torch.nn as nn

    kw = {k: v for k, v in zoo.items() if k not in ("n_envs", "n_timesteps", "normalize")}
    for key in ("learning_rate", "clip_range"):
        if key in kw:
            kw[key] = _schedule(kw[key])
    if "policy_kwargs" in kw:
        pk = copy.deepcopy(kw["policy_kwargs"])
        acts = {"relu": nn.ReLU, "tanh": nn.Tanh}
        if "activation_fn" in pk:
            pk["activation_fn"] = acts[pk["activation_fn"]]
        kw["policy_kwargs"] = pk
    return kw


def _frozen_normalizer(venv: Any) -> Callable[[np.ndarray], np.ndarray] | None:
    """The training VecNormalize's observation normalization with its statistics copied now
    (frozen: evaluation never updates them); None without VecNormalize."""
    from stable_baselines3.common.vec_env import VecNormalize

    if not isinstance(venv, VecNormalize) or not venv.norm_obs:
        return None
    rms = copy.deepcopy(venv.obs_rms)
    eps, clip = venv.epsilon, venv.clip_obs

    def normalize(obs: np.ndarray) -> np.ndarray:
        return np.clip((obs - rms.mean) / np.sqrt(rms.var + eps), -clip, clip).astype(np.float32)

    return normalize


def run_sb3_cell(cell: dict[str, Any]) -> dict[str, Any]:
    """Train SB3 PPO for one cell; evaluate periodically (timed apart) and at the end."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from actorq.envs import make_env

    torch.set_num_threads(1)
    case = CASES[cell["case"]]
    zoo = ZOO_PPO[cell["case"]]
    every, seed = cell["eval_every"], cell["seed"]
    greedy = GreedyEval(case.env_id, EVAL_EPISODES)

    class PeriodicEval(BaseCallback):
        """Every ``every`` env steps: 10 deterministic episodes (seeds 10000..10009) on separate
        envs with frozen normalization stats; keeps its own evaluation time to subtract."""

        def __init__(self) -> None:
            super().__init__()
            self.next_eval = every
            self.eval_time = 0.0
            self.t0 = 0.0
            self.curve: list[dict[str, Any]] = []

        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                start = time.perf_counter()
                train_s = start - self.t0 - self.eval_time
                rets = greedy(self.model, EVAL_SEED, _frozen_normalizer(self.training_env))
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
            return True

    def factory() -> Any:
        return make_env(case.env_id)

    venv: Any = DummyVecEnv([factory for _ in range(zoo["n_envs"])])
    if zoo.get("normalize"):
        venv = VecNormalize(venv, gamma=zoo.get("gamma", 0.99))  # rl-zoo: the algorithm's gamma
    model = PPO(env=venv, seed=seed, device="cpu", verbose=0, **sb3_kwargs(zoo))
    cb = PeriodicEval()
    t0 = time.perf_counter()
    model.learn(total_timesteps=cell["total_steps"], callback=cb, progress_bar=False)
    wall = time.perf_counter() - t0
    train_s = wall - cb.eval_time
    final = greedy(model, FINAL_EVAL_SEED, _frozen_normalizer(venv))
    greedy.close()
    venv.close()
    steps = int(model.num_timesteps)
    return {
        "env_steps": steps,
        "train_time_s": train_s,
        "wall_time_s": wall,
        "eval_time_s": cb.eval_time,
        "eval_time_source": "measured (callback)",
        "evals_in_train_time": 0,
        "steps_per_s": steps / train_s if train_s > 0 else None,
        "curve": cb.curve,
        "final_return": float(final.mean()),
        "final_return_std": float(final.std()),
        "hyperparams": {"rl_zoo": zoo, "vec_env": "DummyVecEnv"},
    }


# --------------------------------------------------------------------------------------------
# actorq cell
# --------------------------------------------------------------------------------------------


def run_actorq_cell(cell: dict[str, Any]) -> dict[str, Any]:
    """Train actorq's PPO for one cell through ``actorq.train(PPOConfig(...))``."""
    import torch

    torch.set_num_threads(1)
    from actorq import PPOConfig, train

    case = CASES[cell["case"]]
    precision = cell["framework"].removeprefix("actorq-")
    run_dir = Path(cell["run_dir"])
    hp = ACTORQ_PPO[cell["case"]]
    cfg = PPOConfig(
        env=case.env_id,
        precision=precision,
        seed=cell["seed"],
        total_steps=cell["total_steps"],
        eval_every=cell["eval_every"],
        eval_episodes=EVAL_EPISODES,
        stop_at_target=False,
        progress=False,
        energy=False,
        run_dir=str(run_dir),
        **hp,
    )
    t_call = time.time()
    r = train(cfg)
    if getattr(r, "interrupted", False):
        raise KeyboardInterrupt  # an interrupted run is not a result
    metrics = read_metrics_csv(run_dir / "metrics.csv")
    eval_points = metrics.get(EVAL_TIME_METRIC, [])
    # Evaluation time: TrainResult.eval_time_s, else perf/eval_s (cumulative), else unknown.
    eval_s: float | None = getattr(r, "eval_time_s", None)
    source = "TrainResult.eval_time_s"
    if eval_s is None and eval_points:
        eval_s, source = eval_points[-1][1], f"{EVAL_TIME_METRIC} (cumulative)"
    curve_rows = metrics.get(CURVE_METRIC, [])
    curve = []
    for step, value, wall in curve_rows:
        # From the train() call (actorq's start-up included) to the end of this evaluation,
        # less the evaluation time known at that step.
        t = None if wall is None else wall - t_call - eval_seconds(eval_points, step, False)
        curve.append({"step": step, "return": value, "std": None, "train_time_s": t})
    wall_s = float(r.wall_time_s)
    train_s = wall_s - eval_s if eval_s is not None else wall_s
    return {
        "env_steps": int(r.env_steps),
        "train_time_s": train_s,
        "wall_time_s": wall_s,
        "eval_time_s": eval_s,
        "eval_time_source": source if eval_s is not None else "not recorded (included)",
        "evals_in_train_time": 0 if eval_s is not None else len(curve_rows),
        "steps_per_s": int(r.env_steps) / train_s if train_s > 0 else None,
        "curve": curve,
        "final_return": float(r.eval_return),
        "final_return_std": float(r.eval_return_std),
        "hyperparams": {"PPOConfig": {k: plain(v) for k, v in hp.items()}},
        "actorq_result": result_fields(r),
    }


# --------------------------------------------------------------------------------------------
# One cell, in its own process
# --------------------------------------------------------------------------------------------


def run_cell(cell: dict[str, Any]) -> None:
    """Child-process entry: train, evaluate, write the cell's JSON (atomically)."""
    case = CASES[cell["case"]]
    started = machine_info()
    runner = run_sb3_cell if cell["framework"] == "sb3" else run_actorq_cell
    out = runner(cell)
    hit = first_at_or_above(out["curve"], case.target)
    out.update(
        {
            "case": cell["case"],
            "env": case.env_id,
            "framework": cell["framework"],
            "seed": cell["seed"],
            "total_steps": cell["total_steps"],
            "eval_every": cell["eval_every"],
            "eval_episodes": EVAL_EPISODES,
            "eval_seeds": [EVAL_SEED, EVAL_SEED + EVAL_EPISODES - 1],
            "final_eval_seeds": [FINAL_EVAL_SEED, FINAL_EVAL_SEED + EVAL_EPISODES - 1],
            "target": case.target,
            "steps_to_target": hit["step"] if hit else None,
            "time_to_target_s": hit["train_time_s"] if hit else None,
            "command": cell["command"],
            "machine": started,
            "finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        }
    )
    write_json_atomic(Path(cell["out"]), out)
    say(
        f"    final (seeds {FINAL_EVAL_SEED}..{FINAL_EVAL_SEED + EVAL_EPISODES - 1}): "
        f"{out['final_return']:.1f} ± {out['final_return_std']:.1f}; "
        f"{out['env_steps']:,} steps in {out['train_time_s']:.1f} s of training "
        f"({out['steps_per_s'] or 0:,.0f} steps/s)"
    )


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


SESSION_H = 3.0  # a working session: cells further apart than this ran on different machines


def render_report(case: str, cells: list[dict[str, Any]], command: str) -> str:
    """The Markdown report for one case from its cell JSONs."""
    spec = CASES[case]
    frameworks = list(dict.fromkeys(c["framework"] for c in cells))
    title = f"PPO: actorq vs Stable-Baselines3 on {spec.env_id} ({case})"
    lines = report_head(title, command, cells)
    budgets = sorted({(c["total_steps"], c["eval_every"]) for c in cells})
    if budgets:
        lines.append(
            "- budget: "
            + "; ".join(f"{t:,} env steps, evaluation every {e:,}" for t, e in budgets)
            + (" (**cells differ**)" if len(budgets) > 1 else "")
        )
    lines += [
        f"- evaluation: {EVAL_EPISODES} deterministic episodes, seeds {EVAL_SEED}.."
        f"{EVAL_SEED + EVAL_EPISODES - 1}; final return: seeds {FINAL_EVAL_SEED}.."
        f"{FINAL_EVAL_SEED + EVAL_EPISODES - 1} after training; ± over seeds is the std (ddof 0)",
        "- training time excludes evaluation time except where the last column says otherwise; "
        "steps/s = env steps / training time",
        "",
    ]
    if not cells:
        return "\n".join([*lines, "No finished cells yet.", ""])

    target = spec.target
    head = ["framework", "seeds", "final return", "per seed", "train time (s)", "env steps/s"]
    if target is not None:
        head += [f"reached {target:g}", f"steps to {target:g}", f"time to {target:g} (s)"]
    head.append("evaluation time")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fw in frameworks:
        cs = [c for c in cells if c["framework"] == fw]
        finals = [c["final_return"] for c in cs]
        row = [
            fw,
            str(len(cs)),
            mean_std(finals),
            ", ".join(f"s{c['seed']}: {c['final_return']:.1f}" for c in cs),
            mean_std([c["train_time_s"] for c in cs]),
            f"{np.mean([c['steps_per_s'] or 0.0 for c in cs]):,.0f}",
        ]
        if target is not None:
            hits = [c for c in cs if c["steps_to_target"] is not None]
            times = [(c["seed"], c["time_to_target_s"]) for c in hits]
            row += [
                f"{len(hits)}/{len(cs)}",
                ", ".join(f"s{c['seed']}: {c['steps_to_target']:,}" for c in hits) or "—",
                ", ".join(f"s{sd}: {num(t, '.1f')}" for sd, t in times) or "—",
            ]
        incl = sorted({c["evals_in_train_time"] for c in cs})
        row.append(
            "excluded"
            if incl == [0]
            else f"**included** ({'/'.join(map(str, incl))} evaluations in the time)"
        )
        lines.append("| " + " | ".join(row) + " |")

    # Training time of each actorq framework against SB3's, when every cell ran the same budget
    # (cells of different sessions are not comparable: the head lists when each ran).
    done = sorted(dt.datetime.fromisoformat(c["finished"]) for c in cells)
    span_h = (done[-1] - done[0]).total_seconds() / 3600
    if "sb3" in frameworks and len(budgets) == 1 and span_h > SESSION_H:
        lines += [
            "",
            f"- no training-time ratio: the cells finished {span_h:.1f} h apart, longer than one "
            "session (timings of different sessions are not compared)",
        ]
    elif "sb3" in frameworks and len(budgets) == 1:
        sb3 = np.array([c["train_time_s"] for c in cells if c["framework"] == "sb3"])
        lines.append("")
        for fw in frameworks:
            if fw == "sb3":
                continue
            mine = np.array([c["train_time_s"] for c in cells if c["framework"] == fw])
            r, lo, hi, _ = ratio_ci(sb3, mine)
            lines.append(
                f"- training time, SB3 / {fw}: median {r:.2f}x (95% bootstrap CI {lo:.2f}-"
                f"{hi:.2f}, seeds resampled; > 1: {fw} trains faster)"
            )

    # Learning curves: mean over seeds at each nominal evaluation point.
    every = max(c["eval_every"] for c in cells)
    points: dict[str, dict[int, list[float]]] = {fw: {} for fw in frameworks}
    for c in cells:
        for p in c["curve"]:
            k = (p["step"] // every) * every
            points[c["framework"]].setdefault(k, []).append(p["return"])
    steps = sorted({k for d in points.values() for k in d})
    lines += [
        "",
        "Evaluation return during training (mean over seeds; seeds 10000..10009, deterministic):",
        "",
        "| env steps | " + " | ".join(frameworks) + " |",
        "|---|" + "---|" * len(frameworks),
    ]
    for k in steps:
        vals = [
            f"{np.mean(points[fw][k]):.1f} (n={len(points[fw][k])})" if k in points[fw] else "—"
            for fw in frameworks
        ]
        lines.append(f"| {k:,} | " + " | ".join(vals) + " |")

    lines += [
        "",
        "Per cell:",
        "",
        "| framework | seed | env steps | train time (s) | eval time (s) | steps/s | "
        "final return | last eval | eval time source | finished |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        last = c["curve"][-1]["return"] if c["curve"] else None
        lines.append(
            f"| {c['framework']} | {c['seed']} | {c['env_steps']:,} | {c['train_time_s']:.1f} | "
            f"{num(c['eval_time_s'], '.1f')} | {num(c['steps_per_s'])} | "
            f"{c['final_return']:.1f} ± {c['final_return_std']:.1f} | {num(last, '.1f')} | "
            f"{c['eval_time_source']} | {c['finished']} |"
        )
    lines += [
        "",
        "Notes: actorq times run from its training loop (TrainResult.wall_time_s); its time to "
        "target runs from the train() call (start-up included). SB3 times run from learn(). "
        "Hyperparameters and their differences: the docstring of benchmarks/ppo_peers.py.",
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = matrix_args(__doc__.split("\n\n")[0], "benchmarks/results/ppo_peers", FRAMEWORKS)
    ap.add_argument("--total-steps", type=int, help="env steps per cell (default: rl-zoo's)")
    a = ap.parse_args(argv)
    if a.cell is not None:
        return run_cell_main(a.cell, run_cell)
    if a.case not in CASES:
        ap.error(f"--case must be one of {', '.join(sorted(CASES))}")
    spec = CASES[a.case]
    settings = {
        "total_steps": a.total_steps or spec.total_steps,
        "eval_every": a.eval_every or spec.eval_every,
    }
    return run_matrix(
        Path(__file__),
        a.case,
        a.results / a.case,
        a.frameworks,
        a.seeds if a.seeds is not None else [0, 1, 2],
        settings,
        lambda cells, command: render_report(a.case, cells, command),
        FRAMEWORKS,
    )


if __name__ == "__main__":
    sys.exit(main())
