"""Builds the pieces of a PPO experiment (Acme's builder seam): trajectory chunks with the
behaviour's log-probabilities, a consume-once queue with a staleness bound, actors that sample
from their (quantized) snapshot: an MLP's layers, or with ``--network chip`` the exported macro
placement network (:mod:`actorq.agents.ppo.chip`)."""

from __future__ import annotations

from actorq.agents.builder import MLPBuilder, base_actor_setup
from actorq.agents.pixels import PixelPolicyIO, is_pixels
from actorq.agents.policy_io import PolicyIO
from actorq.agents.ppo.config import PPOConfig
from actorq.agents.ppo.learning import MLPPPOLearner, PPOLearner, resolve_auto
from actorq.agents.ppo.networks import NatureCNNPolicy
from actorq.config import ExperimentConfig
from actorq.core.interfaces import Learner
from actorq.core.loop import ActorSetup
from actorq.errors import ConfigError
from actorq.quant.snapshot import PolicySpec
from actorq.replay.specs import QueueGateSpec, QueueSpec, TrajectorySpec
from actorq.types import ArraySpec, EnvSpec, trajectory_specs


class PPOBuilder(MLPBuilder):
    def check_spec(self, spec: EnvSpec) -> None:
        return None  # categorical for discrete actions, Gaussian for continuous ones

    def runs_an_mlp(self, cfg: PPOConfig) -> bool:
        return cfg.network == "mlp"

    def policy_spec(self, cfg: PPOConfig, spec: EnvSpec) -> PolicySpec:
        if cfg.network == "chip":
            raise ConfigError("--network chip's policy is not an MLP (no --precision auto)")
        out = spec.num_actions if spec.discrete else spec.action.shape[0]
        return PolicySpec(
            spec.obs_dim,
            cfg.policy_hidden(),
            out,
            activation=cfg.activation,
            head="categorical" if spec.discrete else "gaussian",
            obs_norm=resolve_auto(cfg.normalize_obs, spec),
            obs_clip=cfg.obs_clip,
        )

    def data_specs(self, cfg: PPOConfig, spec: EnvSpec) -> dict[str, ArraySpec]:
        return trajectory_specs(spec, cfg.num_steps)

    def table_config(self, cfg: PPOConfig, spec: EnvSpec) -> QueueSpec:
        return QueueSpec(cfg.batch_items(), cfg.max_policy_lag)

    def actor_setup(self, cfg: PPOConfig, spec: EnvSpec) -> ActorSetup:
        n_actors = max(cfg.actors, 1)
        return base_actor_setup(
            cfg,
            spec,
            "sample",
            [[] for _ in range(n_actors)],
            TrajectorySpec(cfg.num_steps),
            QueueGateSpec(cfg.envs_per_actor, cfg.max_policy_lag),
        )

    def make_learner(self, cfg: PPOConfig, spec: EnvSpec) -> PPOLearner:
        # only the MLP has layers for the quantizer; the chip network is exported whole
        mlp = cfg.network == "mlp" and not is_pixels(spec)
        return MLPPPOLearner(cfg, spec) if mlp else PPOLearner(cfg, spec)

    def policy_io(self, cfg: ExperimentConfig, spec: EnvSpec, learner: Learner) -> PolicyIO:
        if is_pixels(spec):  # the Nature-CNN policy, exported whole
            assert isinstance(learner, PPOLearner) and isinstance(learner.policy, NatureCNNPolicy)
            return PixelPolicyIO(cfg, spec, learner.policy, "categorical")
        if isinstance(cfg, PPOConfig) and cfg.network == "chip":
            from actorq.agents.ppo.chip import ChipPolicyIO

            assert isinstance(learner, PPOLearner)
            return ChipPolicyIO(cfg, learner)
        return super().policy_io(cfg, spec, learner)


BUILDER = PPOBuilder()
