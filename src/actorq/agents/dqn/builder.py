"""Builds the pieces of a DQN experiment from its config (Acme's builder seam)."""

from __future__ import annotations

import numpy as np

from actorq.agents.common import OffPolicyBuilder
from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.learning import DQNLearner
from actorq.agents.dqn.networks import NatureQNetwork
from actorq.agents.pixels import PixelPolicyIO, is_pixels
from actorq.agents.policy_io import PolicyIO
from actorq.config import ExperimentConfig
from actorq.core.exploration import apex_epsilons
from actorq.core.interfaces import Learner
from actorq.errors import ConfigError
from actorq.quant.snapshot import PolicySpec
from actorq.types import EnvSpec


class DQNBuilder(OffPolicyBuilder):
    behaviour = "epsilon_greedy"

    def check_spec(self, spec: EnvSpec) -> None:
        if not spec.discrete:
            raise ConfigError(
                f"{spec.env_id} has a continuous action space; DQN needs discrete actions "
                "(use a continuous-control agent such as D4PG or PPO)"
            )

    def policy_io(self, cfg: ExperimentConfig, spec: EnvSpec, learner: Learner) -> PolicyIO:
        if is_pixels(spec):  # the Nature-CNN, exported whole
            assert isinstance(learner, DQNLearner) and isinstance(learner.q, NatureQNetwork)
            return PixelPolicyIO(cfg, spec, learner.q, "q")
        return super().policy_io(cfg, spec, learner)

    def policy_spec(self, cfg: DQNConfig, spec: EnvSpec) -> PolicySpec:
        return PolicySpec(spec.obs_dim, cfg.hidden, spec.num_actions, head="q")

    def behaviour_kind(self, cfg: DQNConfig) -> str:
        return "epsilon_greedy_warmup" if cfg.random_warmup else self.behaviour

    def exploration_noise(self, cfg: DQNConfig, count: int) -> np.ndarray:
        return apex_epsilons(count, cfg.epsilon, cfg.epsilon_alpha)

    def make_learner(self, cfg: DQNConfig, spec: EnvSpec) -> DQNLearner:
        self.check_spec(spec)
        return DQNLearner(cfg, spec)


BUILDER = DQNBuilder()
