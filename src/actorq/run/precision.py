"""``--precision auto``: timing each precision where the actors will run, and choosing the fastest
that acts like fp32. Where that is (this process, this machine, each Ray node) is the backend's
answer (:meth:`actorq.distributed.backend.BackendClass.select_precision`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from actorq.agents.policy_io import learner_snapshot
from actorq.config import ExperimentConfig
from actorq.core.interfaces import MLPLearner
from actorq.distributed.backend import PrecisionTrial, backend_class


def select_run_precision(
    cfg: ExperimentConfig, spec: Any, learner: MLPLearner, pspec: Any, run_dir: Path
) -> str:
    """``--precision auto``: time every precision's runtime at the actors' batch where the
    actors run and keep the fastest that acts like fp32 (:func:`actorq.quant.autoselect.
    select_precision`), on states from a few random-action steps of the environment. The
    backend decides where it measures (local backends in this process, the actors' machine;
    Ray on every node that will host actors). The table goes to the console and to
    ``precision_auto.md`` in the run directory."""
    from actorq.envs import make_vector_env

    env = make_vector_env(cfg.env, cfg.envs_per_actor, **cfg.env_kwargs())
    obs, _ = env.reset(seed=cfg.seed)
    env.action_space.seed(cfg.seed)
    states = [np.asarray(obs, np.float32)]
    for _ in range(max(1, 1024 // cfg.envs_per_actor)):
        obs, *_ = env.step(env.action_space.sample())
        states.append(np.asarray(obs, np.float32))
    env.close()
    trial = PrecisionTrial(
        layers=learner.policy_layers(),
        spec=pspec,
        extras=learner.policy_extras(),
        snapshot=lambda: learner_snapshot(learner, pspec, "fp32", 0).to_bytes(),
        observations=np.concatenate(states).reshape(-1, spec.obs_dim),
    )
    precision, table = backend_class(cfg).select_precision(cfg, trial)
    (run_dir / "precision_auto.md").write_text(table + "\n")
    print(table, flush=True)
    return precision
