"""A Stable-Baselines3 cell's checkpoint in safe formats, so a long cell resumes across sessions.

SB3's own ``save()``/``load()`` zip holds cloudpickled objects (schedules, spaces): loading one
runs code from the file. Here a checkpoint is actorq's (:mod:`actorq.checkpoint`: safetensors,
JSON, a sha256 manifest) in the cell's ``checkpoint/``: the policy's weights, the optimizer's
tensors, the RNG streams, VecNormalize's statistics, and the counters as JSON. A resume rebuilds
the model from the cell's settings (as the first segment did) and loads these into it.

DQN's replay buffer goes with every checkpoint (``replay.npz``, frames stored once:
:mod:`actorq.bench.sb3_replay`), as actorq's DQN saves its own. Not saved: the environments (an
episode in progress restarts). A checkpoint without a replay (one from before it was kept)
makes a resumed DQN refill it with the restored policy's ε-greedy actions before learning goes
on (:func:`refill_replay`); those steps are not counted in the budget and their seconds are
kept apart (``resume_refill_s``), both recorded in the summary.

Checkpoints are written at points where the weights and the counters agree: every counter is
the one at the start of the current collection (PPO's weights change only after a rollout,
DQN's only between its collections), so steps collected since are redone after a resume.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from actorq import checkpoint as ckpt
from actorq.bench import sb3_replay
from actorq.errors import CheckpointError, first_line

#: counters of the algorithm saved at a collection's start (attribute names of SB3's models)
ALGO_COUNTERS = ("num_timesteps", "_n_updates", "_episode_num", "_n_calls")


def algo_counters(model: Any) -> dict[str, int]:
    return {k: int(getattr(model, k, 0)) for k in ALGO_COUNTERS}


def save(
    run_dir: Path,
    model: Any,
    counters: dict[str, int],
    record: dict[str, Any],
    extra: dict[str, Any],
    replay_at: tuple[int, bool] | None = None,
) -> None:
    """Write ``run_dir/checkpoint``: the model's tensors, ``counters`` (the algorithm's, from
    :func:`algo_counters` at the collection's start), ``record`` (the Record's state),
    ``extra`` (the adapter's: next evaluation, refills) and, for DQN, its replay buffer with
    ``replay_at``, its (pos, full) at that start."""
    import torch

    from actorq.agents.state import pack

    # the policy and its optimizer as every actorq learner checkpoints them
    tensors, learner = pack({"policy": model.policy}, {"optim": model.policy.optimizer})
    tensors["rng.torch"] = torch.get_rng_state()
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    tensors["rng.numpy"] = torch.from_numpy(np.asarray(keys, dtype=np.int64))
    norm = _vecnormalize(model)
    if norm is not None:
        for name in ("obs_rms", "ret_rms"):
            rms = getattr(norm, name)
            tensors[f"{name}.mean"] = torch.as_tensor(np.asarray(rms.mean, np.float64))
            tensors[f"{name}.var"] = torch.as_tensor(np.asarray(rms.var, np.float64))
            extra = {**extra, f"{name}.count": float(rms.count)}
    learner["counters"] = counters
    rng = {"python": list(random.getstate()[1]),
           "numpy": [kind, int(pos), int(has_gauss), float(gauss)],
           # SB3's random actions (learning_starts, epsilon) draw from the action space's own
           "action_space": ckpt.rng_state(model.action_space.np_random)}  # fmt: skip
    state = {"learner": learner, "counters": {**record, **extra}, "rng": rng}
    buffer = getattr(model, "replay_buffer", None)
    write = None if buffer is None or replay_at is None else sb3_replay.writer(buffer, *replay_at)
    ckpt.save(run_dir / "checkpoint", tensors, state, write)


def _vecnormalize(model: Any) -> Any:
    from stable_baselines3.common.vec_env import VecNormalize

    env = model.get_env()
    return env if isinstance(env, VecNormalize) else None


def load(run_dir: Path, model: Any) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """Load ``run_dir/checkpoint`` into ``model`` (built from the cell's settings); returns
    the Record's state and the adapter's extra counters, checked (one CheckpointError line for
    a checkpoint of another model, a damaged state.json or replay), and whether it restored a
    DQN's replay buffer."""
    tensors, state, replay = ckpt.load(run_dir / "checkpoint")
    buffer = getattr(model, "replay_buffer", None)
    try:
        record, extra = check_counters(state["counters"])
        learner = state["learner"]
        _load_model(model, tensors, learner)
        for k, v in learner["counters"].items():
            if k not in ALGO_COUNTERS or not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"counter {k}: {v!r}")
            if hasattr(model, k):
                setattr(model, k, v)
        _load_rng(tensors, state["rng"], model.action_space)
        _load_vecnormalize(model, tensors, extra)
        if replay is not None and buffer is not None:
            sb3_replay.load_replay(replay, buffer, getattr(model.action_space, "n", None))
            sb3_replay.cut_episodes(buffer)  # the resumed envs start new episodes
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(
            f"{run_dir / 'checkpoint'} does not fit this SB3 cell: {first_line(e)}"
        ) from None
    return record, extra, replay is not None and buffer is not None


def _load_model(model: Any, tensors: dict[str, Any], learner: dict[str, Any]) -> None:
    from actorq.agents.state import unpack

    for name, t in tensors.items():  # a diverged or damaged checkpoint never resumes
        if t.is_floating_point() and not bool(t.isfinite().all()):
            raise ValueError(f"tensor {name} is NaN or infinite")
    optim = {"optim": model.policy.optimizer}
    unpack(tensors, learner, {"policy": model.policy}, optim, model.device)


def _load_rng(tensors: dict[str, Any], rng: dict[str, Any], space: Any) -> None:
    """The random streams, the action space's too (checkpoints from before it kept none: it
    then starts again from the cell's seed, repeating the first segment's random actions)."""
    import torch

    torch.set_rng_state(tensors["rng.torch"])
    kind, pos, has_gauss, gauss = rng["numpy"]
    keys = tensors["rng.numpy"].numpy().astype(np.uint32)
    np.random.set_state((kind, keys, int(pos), int(has_gauss), float(gauss)))
    random.setstate((3, tuple(int(x) for x in rng["python"]), None))
    if "action_space" in rng:  # np_random has no setter: its generator's state, in place
        space.np_random.bit_generator.state = ckpt.restore_rng(
            rng["action_space"]
        ).bit_generator.state


def _load_vecnormalize(model: Any, tensors: dict[str, Any], extra: dict[str, Any]) -> None:
    norm = _vecnormalize(model)
    if norm is None:
        return
    for name in ("obs_rms", "ret_rms"):
        rms = getattr(norm, name)
        rms.mean = tensors[f"{name}.mean"].numpy().copy()
        rms.var = tensors[f"{name}.var"].numpy().copy()
        rms.count = float(extra[f"{name}.count"])


def check_counters(d: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint's ``counters`` as (the Record's state, the adapter's extra), checked:
    finite non-negative seconds, a target hit of [step, seconds] or null, a next evaluation
    step, refills as a list of [steps, seconds], the Atari engine or null. Raises ValueError
    naming the bad key."""

    def step(v: Any, key: str) -> int:
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 10**15:
            raise ValueError(f"{key} = {v!r}: an env step count")
        return v

    if not isinstance(d, dict):
        raise ValueError("counters: not a table")
    hit = d.get("hit")
    if hit is not None and not (isinstance(hit, list) and len(hit) == 2):
        raise ValueError(f"hit = {hit!r}: [steps, seconds] or null")
    if hit is not None:
        hit = [step(hit[0], "hit"), _finite(hit[1], "hit")]
    refills = d.get("refills", [])
    if not isinstance(refills, list) or not all(isinstance(r, list) and len(r) == 2
                                                for r in refills):  # fmt: skip
        raise ValueError(f"refills = {refills!r}: a list of [steps, seconds]")
    engine = d.get("engine")  # an Atari cell's; absent before it was kept (the ALE then)
    if engine not in (None, "envpool", "ale"):
        raise ValueError(f"engine = {engine!r}: 'envpool', 'ale' or null")
    record: dict[str, Any] = {k: _finite(d.get(k), k) for k in ("wall_time_s", "eval_time_s")}
    record["hit"] = hit
    extra = {
        "engine": engine,
        "next_eval": step(d.get("next_eval"), "next_eval"),
        "refills": [[step(n, "refills"), _finite(s, "refills")] for n, s in refills],
        **{k: _finite(d[k], k) for k in ("obs_rms.count", "ret_rms.count") if k in d},
    }
    return record, extra


def _finite(v: Any, key: str) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < math.inf:
        raise ValueError(f"{key}: {v!r} is not a finite number >= 0")
    return float(v)


def resume_exploration(model: Any, total_steps: int) -> None:
    """A resumed DQN's ε where its schedule is at the resumed step: a new model's is 0.0 until
    SB3's first ``_on_step``, so the resumed segment's first action was greedy."""
    model.exploration_rate = model.exploration_schedule(1.0 - model.num_timesteps / total_steps)


def refill_replay(model: Any, steps: int) -> tuple[int, float]:
    """Collect ``steps`` transitions into a resumed DQN's empty replay buffer with its
    restored policy's ε-greedy actions (ε where the schedule is at the resumed step: set by
    :func:`resume_exploration` first), without counting them in ``num_timesteps``; returns
    (steps, seconds)."""
    t = time.perf_counter()
    env = model.get_env()
    model._last_obs = env.reset()
    if model._vec_normalize_env is not None:
        model._last_original_obs = model._vec_normalize_env.get_original_obs()
    done = 0
    while done < steps:
        actions, _ = model.predict(model._last_obs, deterministic=False)
        new_obs, rewards, dones, infos = env.step(actions)
        model._store_transition(model.replay_buffer, actions, new_obs, rewards, dones, infos)
        done += env.num_envs
    return done, time.perf_counter() - t
