"""Builds the pieces of a DQN experiment from its config (Acme's builder seam)."""

from __future__ import annotations

from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.learning import DQNLearner
from actorq.core.exploration import apex_epsilons
from actorq.core.types import EnvSpec, transition_specs
from actorq.distributed.local import ActorSetup
from actorq.errors import ConfigError
from actorq.quant.snapshot import PolicySpec
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.ring import ReplayBuffer


def check_spec(spec: EnvSpec) -> None:
    if not spec.discrete:
        raise ConfigError(
            f"{spec.env_id} has a continuous action space; DQN needs discrete actions "
            "(use a continuous-control agent such as D4PG)"
        )


def policy_spec(cfg: DQNConfig, spec: EnvSpec) -> PolicySpec:
    return PolicySpec(spec.obs_dim, cfg.hidden, spec.num_actions, head="q")


def make_learner(cfg: DQNConfig, spec: EnvSpec) -> DQNLearner:
    check_spec(spec)
    return DQNLearner(cfg, spec)


def make_replay(cfg: DQNConfig, spec: EnvSpec) -> ReplayBuffer:
    return ReplayBuffer(cfg.replay_size, transition_specs(spec))


def make_rate_limiter(cfg: DQNConfig) -> SampleToInsertRatio:
    return SampleToInsertRatio(
        cfg.samples_per_insert, cfg.min_replay_size, cfg.resolved_error_buffer()
    )


def make_actor_setup(cfg: DQNConfig, spec: EnvSpec) -> ActorSetup:
    n_actors = max(cfg.actors, 1)
    eps = apex_epsilons(n_actors * cfg.envs_per_actor, cfg.epsilon, cfg.epsilon_alpha)
    # interleave so every actor gets a spread from exploratory to near-greedy
    per_actor = [eps[i::n_actors].tolist() for i in range(n_actors)]
    return ActorSetup(
        env_spec=spec,
        envs_per_actor=cfg.envs_per_actor,
        epsilons=per_actor,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        seed=cfg.seed,
        rate_limiter=make_rate_limiter(cfg),
        runtime=cfg.runtime,
        threads=cfg.actor_threads,
    )


__all__ = ["make_actor_setup", "make_learner", "make_rate_limiter", "make_replay"]
