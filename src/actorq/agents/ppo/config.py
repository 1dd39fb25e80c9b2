"""PPO experiment configuration: one dataclass, every field documented (it is the CLI's --help).

Defaults follow CleanRL's ``ppo.py`` (Huang et al., "The 37 Implementation Details of PPO",
ICLR blog track 2022) for classic control: 64×64 tanh networks, Adam 2.5e-4 annealed to 0,
γ 0.99, GAE λ 0.95, clip 0.2, 4 epochs, entropy 0.01, value loss 0.5, gradient clip 0.5,
advantage normalisation. Observation and reward normalisation are on by default for continuous
actions (CleanRL's ``ppo_continuous_action.py``), off for discrete ones.

``network="chip"`` trains the macro-placement policy of Mirhoseini et al. (Nature 594, 2021;
google-research/circuit_training) on ``chip:<netlist>`` environments with this same PPO;
circuit-training's own PPO runs with an undiscounted return (``--gamma 1``), the reward being the
episode's only one, at its end.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

from actorq.config import (
    NON_NEGATIVE,
    POSITIVE,
    Bound,
    ExperimentConfig,
    Widths,
    check_action_repeat,
)
from actorq.errors import ConfigError
from actorq.quant.onnx import ONNX_PRECISIONS


@dataclasses.dataclass
class PPOConfig(ExperimentConfig):
    """Train PPO with quantized actors (ActorQ) on the embedded local backend."""

    agent: ClassVar[str] = "ppo"
    width_fields: ClassVar[tuple[str, ...]] = ("policy_hidden_sizes", "value_hidden_sizes")
    bounds: ClassVar[dict[str, Bound]] = {
        "action_repeat": Bound(1, 1000),
        "num_steps": Bound(1, 10**6),
        "max_policy_lag": Bound(1, 1000),
        "learning_rate": POSITIVE,
        "anneal_steps": Bound(0, 10**13),
        "adam_eps": POSITIVE,
        "gae_lambda": Bound(0, 1),
        "update_epochs": Bound(1, 10_000),
        "minibatch_size": Bound(1, 10**8),
        "clip_coef": NON_NEGATIVE,
        "ent_coef": NON_NEGATIVE,
        "vf_coef": NON_NEGATIVE,
        "max_grad_norm": POSITIVE,
        "target_kl": POSITIVE,
        "obs_clip": POSITIVE,
        "reward_clip": POSITIVE,
        "log_std_init": Bound(-20, 5),
    }

    env: str = "gym:CartPole-v1"
    """Environment id, discrete (categorical policy) or continuous actions (diagonal Gaussian
    policy, actions clipped to the env's bounds), e.g. gym:CartPole-v1, gym:HalfCheetah-v5,
    dmc:walker-walk, chip:ariane133 (with --network chip)."""
    network: Literal["mlp", "chip"] = "mlp"
    """Policy and value networks. mlp: MLPs of policy_hidden_sizes / value_hidden_sizes, any
    env; snapshots are the MLP's layers, quantized. chip: for chip:<netlist> envs only, the
    circuit-training-style macro placement networks of actorq.agents.ppo.chip_networks at their
    default sizes (ChipPolicy: GraphSAGE over the netlist's macros, a conv canvas encoder, one
    masked logit per grid cell; ChipValue, its own weights); actors run the exported ONNX policy,
    fp32 or int8 (no auto), in onnxruntime; observation normalisation is off (the network reads the
    env's raw features, already in [0, 1], and its graph and canvas parts by position); the MLP
    fields (hidden sizes, activation, ortho_init) do not apply."""
    action_repeat: int = 1
    """Control steps each action is repeated for (dmc: ids only); rewards are summed."""
    envs_per_actor: int = 4
    """Environments each actor steps together, with one batched inference per step."""
    num_steps: int = 128
    """Steps per environment in one trajectory chunk. One learner update consumes one chunk per
    environment of every actor: max(actors, 1) × envs_per_actor × num_steps env steps."""
    max_policy_lag: int = 1
    """Staleness bound in policy versions: the learner trains on chunks collected with one of
    its last K published snapshots, and actors wait rather than collect more. 1 = synchronous
    PPO (every chunk from the current policy); larger K lets actors run ahead (asynchronous,
    APPO-like), the importance ratio against the actors' recorded log-probs correcting it."""
    total_steps: int = 500_000
    """Budget of environment steps (all actors together): agent decisions, each `--action-repeat`
    control steps on a dmc: task."""
    learning_rate: float = 2.5e-4
    """Adam learning rate (policy and value networks, one optimizer)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over anneal_steps (default: total_steps)."""
    anneal_steps: int = 0
    """Env steps over which the learning rate decays to 0; 0: total_steps. The published
    Atari runs (CleanRL, rl-zoo) anneal over 10M agent steps (40M frames): 10000000 follows
    their schedule within a shorter budget."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    gae_lambda: float = 0.95
    """λ of generalized advantage estimation (Schulman et al., 2016)."""
    update_epochs: int = 4
    """Passes over each batch of chunks."""
    minibatch_size: int = 256
    """Steps per gradient step (the batch is shuffled into minibatches of this size)."""
    clip_coef: float = 0.2
    """Surrogate clipping ε."""
    clip_vloss: bool = True
    """Clip the value loss around the old values (as PPO's reference implementation does)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient norm clip."""
    target_kl: float | None = None
    """Stop an update's epochs early once the approximate KL exceeds this (None: never)."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    normalize_obs: bool | None = None
    """Normalise observations by a running mean/std (updated by the learner, carried in every
    snapshot so actors normalise identically); default: on for continuous actions; always off
    with --network chip."""
    normalize_reward: bool | None = None
    """Scale rewards by a running std of discounted returns; default: on for continuous
    actions."""
    obs_clip: float = 10.0
    """Clip normalised observations to ±obs_clip."""
    reward_clip: float = 10.0
    """Clip scaled rewards to ±reward_clip."""
    policy_hidden_sizes: Widths = (64, 64)
    """Hidden widths of the policy (what actors run, quantized), e.g. 2048,2048,2048."""
    value_hidden_sizes: Widths = (64, 64)
    """Hidden widths of the value network (learner only)."""
    activation: Literal["tanh", "relu"] = "tanh"
    """Hidden activation of both networks."""
    log_std_init: float = 0.0
    """Initial log standard deviation of a Gaussian policy (state-independent, learned)."""
    ortho_init: bool = True
    """Orthogonal initialisation (gain √2 hidden, 0.01 policy output, 1 value output)."""
    publish_every: int = 1
    """Learner updates between published snapshots: PPO publishes after every update."""
    checkpoint_every: int = 50
    """Learner updates between checkpoints (one is also written at the end and on Ctrl-C)."""

    def env_kwargs(self) -> dict[str, Any]:
        extra = {"action_repeat": self.action_repeat} if self.env.startswith("dmc:") else {}
        return {**super().env_kwargs(), **extra}

    def batch_items(self) -> int:
        """Trajectory chunks per learner update."""
        return max(self.actors, 1) * self.envs_per_actor

    def steps_per_update(self) -> int:
        return self.batch_items() * self.num_steps

    def uses_gptq(self) -> bool:
        # the chip network's int8 layers quantize per row at run time, and its exported graph
        # is not the MLP layers GPTQ rounds
        return self.network != "chip" and super().uses_gptq()

    def validate(self) -> None:
        super().validate()
        check_action_repeat(self.env, self.action_repeat)
        if self.network == "chip":
            self._validate_chip()
        if self.publish_every != 1:
            raise ConfigError("PPO publishes after every update (--publish-every 1)")
        if self.minibatch_size > self.steps_per_update():
            raise ConfigError(
                f"--minibatch-size {self.minibatch_size} exceeds the steps of one update "
                f"({self.steps_per_update()} = max(actors, 1) × envs_per_actor × num_steps)"
            )

    def _validate_chip(self) -> None:
        if not self.env.startswith("chip:"):
            raise ConfigError(
                f"--network chip trains chip:<netlist> environments, got --env {self.env!r}"
            )
        if self.precision not in ONNX_PRECISIONS:
            raise ConfigError(
                f"--network chip: actors run the fp32 or int8 chip policy, not --precision "
                f"{self.precision} (no auto: the policy is not an MLP)"
            )
        if self.normalize_obs:
            raise ConfigError(
                "--network chip reads the raw observation (its graph and canvas parts by "
                "position): --normalize-obs must be off"
            )
        if self.runtime != "ort":
            raise ConfigError(
                f"--network chip: actors run the exported ONNX policy (--runtime ort), not "
                f"--runtime {self.runtime}"
            )
