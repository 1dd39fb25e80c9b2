"""What off-policy agents (DQN, D4PG) share: n-step transitions in one uniform replay behind
a samples-per-insert limiter (one copy of each, by design); they differ in networks, update
rule and exploration."""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from actorq.agents.builder import MLPBuilder, base_actor_setup
from actorq.config import OffPolicyConfig
from actorq.core.loop import ActorSetup
from actorq.errors import ConfigError
from actorq.replay.frames import record_specs
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.specs import FrameAdderSpec, FramesSpec, NStepSpec, RatioGateSpec, UniformSpec
from actorq.types import ArraySpec, EnvSpec, transition_specs


def make_rate_limiter(cfg: OffPolicyConfig) -> SampleToInsertRatio:
    return SampleToInsertRatio(
        cfg.samples_per_insert, cfg.min_replay_size, cfg.resolved_error_buffer()
    )


def check_frame_replay(cfg: OffPolicyConfig, streams: int, stack: int) -> None:
    """One :class:`ConfigError` line for a frame replay that cannot work: fewer slots a stream
    than one transition needs, or sampling allowed before every stream holds a complete one
    (each stream files its first frame, then one record a step: ``n + 1`` records before its
    first ``n``-step transition; the learner would wait on a replay that cannot give a batch
    while the rule holds the actors back)."""
    need = stack + cfg.n_step + 1
    if cfg.replay_size // streams < need:
        raise ConfigError(
            f"--replay-size {cfg.replay_size} over {streams} environments (--actors x "
            f"--envs-per-actor) leaves {cfg.replay_size // streams} frames each; a "
            f"{stack}-frame, {cfg.n_step}-step transition needs {need}: use --replay-size "
            f">= {need * streams}"
        )
    first = streams * (cfg.n_step + 1)
    if cfg.min_replay_size < first:
        raise ConfigError(
            f"--min-replay-size {cfg.min_replay_size} is below the {first} frame records "
            f"{streams} environments file before their first {cfg.n_step}-step transitions; "
            f"use --min-replay-size >= {first}"
        )


class OffPolicyBuilder(MLPBuilder, abc.ABC):
    """Data path of an off-policy agent; subclasses add the networks and the exploration."""

    #: :func:`~actorq.core.exploration.make_behaviour` kind
    behaviour = ""

    def behaviour_kind(self, cfg: Any) -> str:
        """The :func:`~actorq.core.exploration.make_behaviour` kind this config's actors run."""
        return self.behaviour

    @abc.abstractmethod
    def exploration_noise(self, cfg: Any, count: int) -> np.ndarray:
        """One exploration parameter per environment instance (actors × envs)."""

    def data_specs(self, cfg: OffPolicyConfig, spec: EnvSpec) -> dict[str, ArraySpec]:
        if spec.frame_stack:  # frame records: each frame crosses and is stored once
            frame = ArraySpec(spec.observation.shape[1:], spec.observation.dtype)
            return record_specs(frame, spec.action)
        return transition_specs(spec)

    def table_config(self, cfg: OffPolicyConfig, spec: EnvSpec) -> UniformSpec | FramesSpec:
        limiter = make_rate_limiter(cfg)
        if spec.frame_stack:  # pixels (Atari): 7 KB a transition, not 56 (replay/frames.py)
            streams = max(cfg.actors, 1) * cfg.envs_per_actor
            check_frame_replay(cfg, streams, spec.frame_stack)
            return FramesSpec(
                cfg.replay_size,
                cfg.batch_size,
                limiter,
                streams,
                spec.frame_stack,
                cfg.n_step,
                cfg.gamma,
            )
        return UniformSpec(cfg.replay_size, cfg.batch_size, limiter)

    def actor_setup(self, cfg: OffPolicyConfig, spec: EnvSpec) -> ActorSetup:
        # Exploratory to near-greedy across instances, interleaved so every actor gets the
        # whole spread.
        n_actors = max(cfg.actors, 1)
        noise = self.exploration_noise(cfg, n_actors * cfg.envs_per_actor)
        per_actor = [np.asarray(noise)[i::n_actors].tolist() for i in range(n_actors)]
        table = self.table_config(cfg, spec)
        return base_actor_setup(
            cfg,
            spec,
            self.behaviour_kind(cfg),
            per_actor,
            FrameAdderSpec() if spec.frame_stack else NStepSpec(cfg.n_step, cfg.gamma),
            RatioGateSpec(table.limiter),
        )
