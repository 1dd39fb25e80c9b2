"""Builds the pieces of a D4PG experiment from its config (Acme's builder seam). Replay, rate
limiter, snapshots and backends are the same objects DQN uses; only the networks, the update
rule and the exploration noise differ."""

from __future__ import annotations

import numpy as np

from actorq.agents.common import OffPolicyBuilder
from actorq.agents.d4pg.config import D4PGConfig
from actorq.agents.d4pg.learning import D4PGLearner
from actorq.core.exploration import gaussian_sigmas
from actorq.errors import ConfigError
from actorq.quant.snapshot import PolicySpec
from actorq.types import EnvSpec


class D4PGBuilder(OffPolicyBuilder):
    behaviour = "gaussian_noise"

    def check_spec(self, spec: EnvSpec) -> None:
        if spec.discrete:
            raise ConfigError(
                f"{spec.env_id} has a discrete action space; D4PG needs continuous actions "
                "(use DQN or PPO)"
            )

    def policy_spec(self, cfg: D4PGConfig, spec: EnvSpec) -> PolicySpec:
        act_dim = spec.action.shape[0]
        return PolicySpec(
            spec.obs_dim,
            cfg.policy_hidden(),
            act_dim,
            output_activation="tanh",
            head="deterministic",
        )

    def exploration_noise(self, cfg: D4PGConfig, count: int) -> np.ndarray:
        return gaussian_sigmas(count, cfg.sigma_min, cfg.sigma_max)

    def make_learner(self, cfg: D4PGConfig, spec: EnvSpec) -> D4PGLearner:
        self.check_spec(spec)
        return D4PGLearner(
            spec.obs_dim,
            spec.action.shape[0],
            cfg.policy_hidden(),
            tuple(cfg.critic_hidden_sizes),
            cfg.num_atoms,
            *cfg.support(),
            cfg.policy_learning_rate,
            cfg.critic_learning_rate,
            cfg.target_update_period,
            cfg.max_grad_norm,
            cfg.device,
            cfg.seed,
            cfg.learner_mode,
        )


BUILDER = D4PGBuilder()
