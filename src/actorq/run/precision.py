"""``--precision auto``: timing each precision where the actors will run, and choosing the fastest
that acts like fp32. Where that is (this process, this machine, each Ray node) is the backend's
answer (:meth:`actorq.distributed.backend.BackendClass.select_precision`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from actorq.agents.policy_io import ModelPolicyIO, learner_snapshot
from actorq.config import ExperimentConfig
from actorq.core.interfaces import MLPLearner
from actorq.distributed.backend import PrecisionTrial, backend_class
from actorq.rundir import RunDir


def random_states(cfg: ExperimentConfig, spec: Any, n: int = 1024) -> np.ndarray:
    """About ``n`` states from random-action steps of the config's environment (in their own
    dtype and shape: pixels stay uint8 stacks). Each step's observations are copied: a
    Gymnasium vector env made with ``copy=False`` returns one buffer it rewrites every step."""
    from actorq.envs import make_vector_env

    env = make_vector_env(cfg.env, cfg.envs_per_actor, **cfg.env_kwargs())
    obs, _ = env.reset(seed=cfg.seed)
    env.action_space.seed(cfg.seed)
    states = [np.array(obs, copy=True)]
    for _ in range(max(1, n // cfg.envs_per_actor)):
        obs, *_ = env.step(env.action_space.sample())
        states.append(np.array(obs, copy=True))
    env.close()
    shape = tuple(spec.observation.shape)
    return np.concatenate(states).reshape(-1, *shape).astype(spec.observation.dtype, copy=False)


def select_run_precision(
    cfg: ExperimentConfig, spec: Any, learner: MLPLearner, pspec: Any, run_dir: Path
) -> str:
    """``--precision auto``: time every precision's runtime at the actors' batch where the
    actors run and keep the fastest that acts like fp32 (:func:`actorq.quant.autoselect.
    select_precision`), on states from a few random-action steps of the environment. The
    backend decides where it measures (local backends in this process, the actors' machine;
    Ray on every node that will host actors). The table goes to the console and to
    ``precision_auto.md`` in the run directory."""
    trial = PrecisionTrial(
        layers=learner.policy_layers(),
        spec=pspec,
        extras=learner.policy_extras(),
        snapshot=lambda: learner_snapshot(learner, pspec, "fp32", 0).to_bytes(),
        observations=random_states(cfg, spec).astype(np.float32).reshape(-1, spec.obs_dim),
        gptq=dataclasses.replace(cfg, precision="int8").uses_gptq(),
    )
    return _select(cfg, trial, run_dir)


def select_model_run_precision(
    cfg: ExperimentConfig, spec: Any, io: ModelPolicyIO, run_dir: Path
) -> str:
    """``--precision auto`` for a policy exported whole (the convolutional actors): the same
    choice over the IO's own ``precisions``, timing the very snapshots it publishes (int8
    calibrated on every other state, as a publish calibrates on replay; agreement on all)."""
    states = random_states(cfg, spec)
    trial = PrecisionTrial(
        layers=[],
        spec=None,
        extras={},
        snapshot=lambda: io.snapshot(0, "fp32"),
        observations=states,
        # int8 calibrated on as many states as a publish takes (every other one)
        models=lambda: {
            p: io.snapshot(0, p, states[::2][: io.calibration_states(p) or None])
            for p in io.precisions
        },
    )
    return _select(cfg, trial, run_dir)


def _select(cfg: ExperimentConfig, trial: PrecisionTrial, run_dir: Path) -> str:
    precision, table = backend_class(cfg).select_precision(cfg, trial)
    RunDir(run_dir).precision_auto.write_text(table + "\n")
    print(table, flush=True)
    return precision
