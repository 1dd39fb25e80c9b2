"""``--precision auto``: timing each precision on the actors' machines (this one, or each Ray node)
and choosing the fastest that acts like fp32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from actorq.agents.policy_io import learner_snapshot
from actorq.config import ExperimentConfig
from actorq.core.interfaces import MLPLearner


def select_run_precision(
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
        precision, table = select_on_ray_nodes(cfg, learner, pspec, observations)
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


def select_on_ray_nodes(
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
