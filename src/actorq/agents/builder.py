"""The Builder seam (Acme's): each agent owns its data path, and backends only call this.

A builder says, for an agent's config and an environment:

* ``data_specs`` — the fields one replay item carries (n-step transitions; trajectory chunks
  with the behaviour's log-probabilities and the snapshot version);
* ``actor_setup`` — what actors run: the behaviour (ε-greedy, Gaussian noise, or sampling
  with its log-prob), the adder (n-step or trajectory chunks) and the gate (the actor side of
  the replay kind), typed specs an actor process or a Ray actor rebuilds from JSON;
* ``table_config`` — the replay kind (a uniform ring behind a samples-per-insert limiter, or
  a FIFO queue with a staleness bound in policy versions), a typed spec
  (:mod:`actorq.replay.specs`) every backend builds the table from;
* ``policy_spec`` and ``make_learner`` — the network actors run (what gets quantized) and the
  update rule;
* ``env_spec`` and ``policy_io`` — what the agent reads of the environment, and how the loop
  snapshots, evaluates and compares its policy (:mod:`actorq.agents.policy_io`;
  :class:`MLPBuilder` gives both for agents whose actors run an MLP on a Gymnasium env).

A new agent is one folder with a config, networks, the update rule and a builder, plus one
line in :data:`actorq.agents.AGENTS`.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

from actorq.agents.pixels import check_pixel_config, is_pixels
from actorq.agents.policy_io import MLPPolicyIO, PolicyIO
from actorq.config import ExperimentConfig
from actorq.core.interfaces import Learner, MLPLearner
from actorq.core.loop import ActorSetup
from actorq.errors import ConfigError
from actorq.quant.formats import quantizes_a_layer
from actorq.quant.snapshot import PolicySpec
from actorq.replay.specs import AdderSpec, GateSpec, TableSpec
from actorq.settings import flag
from actorq.types import ArraySpec, EnvSpec


class Builder(Protocol):
    def env_spec(self, cfg: Any) -> EnvSpec:
        """What the agent's networks and buffers need to know about ``cfg.env``."""

    def policy_io(self, cfg: Any, spec: EnvSpec, learner: Learner) -> PolicyIO:
        """How the loop snapshots, evaluates and compares the learner's policy."""

    def check_spec(self, spec: EnvSpec) -> None:
        """Raise :class:`~actorq.errors.ConfigError` if the agent cannot act in this env."""

    def check_new_run(self, cfg: Any, spec: EnvSpec) -> None:
        """Raise :class:`~actorq.errors.ConfigError` if a new run of ``cfg`` would not do what
        its settings say (a resumed run keeps what it ran with)."""

    def policy_spec(self, cfg: Any, spec: EnvSpec) -> PolicySpec: ...

    def data_specs(self, cfg: Any, spec: EnvSpec) -> dict[str, ArraySpec]: ...

    def table_config(self, cfg: Any, spec: EnvSpec) -> TableSpec: ...

    def actor_setup(self, cfg: Any, spec: EnvSpec) -> ActorSetup: ...

    def make_learner(self, cfg: Any, spec: EnvSpec) -> Learner: ...


class MLPBuilder(abc.ABC):
    """What agents whose actors run an MLP :class:`PolicySnapshot` on a Gymnasium environment
    (DQN, D4PG, PPO) share; on pixels, DQN and PPO export a Nature-CNN whole instead
    (:mod:`actorq.agents.pixels`)."""

    def env_spec(self, cfg: ExperimentConfig) -> EnvSpec:
        from actorq.envs import env_spec, observes_pixels

        # a setting the pixel path does not run yet: one line, up front (for a pixel family,
        # before an env, an emulator, is even made)
        known = observes_pixels(cfg.env)
        if known:
            check_pixel_config(cfg, cfg.env)
        spec = env_spec(cfg.env)
        if is_pixels(spec) and not known:
            check_pixel_config(cfg, spec.env_id)
        return spec

    def check_new_run(self, cfg: ExperimentConfig, spec: EnvSpec) -> None:
        """An int8 or int4 MLP snapshot rounds its hidden-to-hidden layers only (the first and
        last stay fp32, as QuaRL deploys them): with one hidden layer there are none, and the
        run would be fp32 in all but its name."""
        if cfg.precision in ("fp32", "auto") or is_pixels(spec) or not self.runs_an_mlp(cfg):
            return  # auto never picks a format that quantizes nothing (quant.autoselect)
        widths = cfg.policy_hidden()
        if not quantizes_a_layer(cfg.precision, len(widths) + 1):
            name = flag(cfg.width_fields[0])
            given = (
                f"{name} {','.join(map(str, widths))} is one hidden layer"
                if widths
                else "no hidden layer"
            )
            raise ConfigError(
                f"--precision {cfg.precision} rounds the layers between hidden layers (the first "
                f"and last stay fp32), and {given}: nothing would be {cfg.precision}; give two "
                f"or more widths ({name} 64,64) or --precision fp16"
            )

    def runs_an_mlp(self, cfg: Any) -> bool:
        """Whether the actors run an MLP snapshot (PPO's chip policy is a graph network)."""
        return True

    @abc.abstractmethod
    def policy_spec(self, cfg: Any, spec: EnvSpec) -> PolicySpec: ...

    def policy_io(self, cfg: ExperimentConfig, spec: EnvSpec, learner: Learner) -> PolicyIO:
        if not isinstance(learner, MLPLearner):  # a builder's invariant, not user input
            raise TypeError(
                f"{type(learner).__name__} has no MLP layers: its builder must give its own "
                "PolicyIO"
            )
        return MLPPolicyIO(cfg, learner, self.policy_spec(cfg, spec))


def base_actor_setup(
    cfg: ExperimentConfig,
    spec: EnvSpec,
    behaviour: str,
    noise: list[list[float]],
    adder: AdderSpec,
    gate: GateSpec,
) -> ActorSetup:
    """The fields of an :class:`ActorSetup` every agent fills the same way."""
    return ActorSetup(
        env_spec=spec,
        envs_per_actor=cfg.envs_per_actor,
        behaviour=behaviour,
        noise=noise,
        adder=adder,
        gate=gate,
        seed=cfg.seed,
        runtime=cfg.runtime,
        threads=cfg.actor_threads,
        env_kwargs=cfg.env_kwargs(),
    )
