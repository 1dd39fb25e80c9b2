"""Builds the pieces of a DQN experiment from its config (Acme's builder seam)."""

from __future__ import annotations

from actorq.agents.common import make_actor_setup_with_noise, make_rate_limiter, make_replay
from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.learning import DQNLearner
from actorq.core.exploration import apex_epsilons
from actorq.core.types import EnvSpec
from actorq.distributed.local import ActorSetup
from actorq.errors import ConfigError
from actorq.quant.snapshot import PolicySpec


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


def make_actor_setup(cfg: DQNConfig, spec: EnvSpec) -> ActorSetup:
    count = max(cfg.actors, 1) * cfg.envs_per_actor
    return make_actor_setup_with_noise(
        cfg, spec, apex_epsilons(count, cfg.epsilon, cfg.epsilon_alpha)
    )


__all__ = ["make_actor_setup", "make_learner", "make_rate_limiter", "make_replay"]
