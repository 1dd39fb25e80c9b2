"""Builder pieces every agent shares: the replay buffer and the samples-per-insert limiter are
the same objects for DQN and D4PG (one copy of each, by design)."""

from __future__ import annotations

import numpy as np

from actorq.config import ExperimentConfig
from actorq.core.types import EnvSpec, transition_specs
from actorq.distributed.local import ActorSetup
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.ring import ReplayBuffer


def make_replay(cfg: ExperimentConfig, spec: EnvSpec) -> ReplayBuffer:
    return ReplayBuffer(cfg.replay_size, transition_specs(spec))


def make_rate_limiter(cfg: ExperimentConfig) -> SampleToInsertRatio:
    return SampleToInsertRatio(
        cfg.samples_per_insert, cfg.min_replay_size, cfg.resolved_error_buffer()
    )


def make_actor_setup_with_noise(
    cfg: ExperimentConfig, spec: EnvSpec, noise: np.ndarray
) -> ActorSetup:
    """``noise``: one exploration parameter per environment instance (actors × envs), from
    exploratory to near-greedy; interleaved so every actor gets the whole spread."""
    n_actors = max(cfg.actors, 1)
    per_actor = [np.asarray(noise)[i::n_actors].tolist() for i in range(n_actors)]
    return ActorSetup(
        env_spec=spec,
        envs_per_actor=cfg.envs_per_actor,
        noise=per_actor,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        seed=cfg.seed,
        rate_limiter=make_rate_limiter(cfg),
        runtime=cfg.runtime,
        threads=cfg.actor_threads,
        env_kwargs=cfg.env_kwargs(),
    )
