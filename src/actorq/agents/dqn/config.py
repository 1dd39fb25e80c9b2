"""DQN experiment configuration: one dataclass, every field documented (it is the CLI's --help)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from actorq.config import POSITIVE, Bound, OffPolicyConfig, Widths
from actorq.errors import ConfigError


@dataclasses.dataclass
class DQNConfig(OffPolicyConfig):
    """Train DQN with quantized actors (ActorQ) on the embedded local backend."""

    agent: ClassVar[str] = "dqn"
    width_fields: ClassVar[tuple[str, ...]] = ("hidden",)
    bounds: ClassVar[dict[str, Bound]] = {
        "learning_rate": POSITIVE,
        "adam_eps": POSITIVE,
        "target_update_period": Bound(1, 10**9),
        "max_grad_norm": POSITIVE,
        "huber_delta": POSITIVE,
        "epsilon": Bound(0, 1),
        "epsilon_alpha": Bound(0, 1000),
    }
    #: Runs saved before these settings existed (2c1b768) had a plain head and plain rounding.
    saved_run_defaults: ClassVar[dict[str, Any]] = {"dueling": False, "calibration": "none"}

    env: str = "gym:CartPole-v1"
    """Environment id with discrete actions, e.g. gym:CartPole-v1, gym:Acrobot-v1,
    gym:MountainCar-v0."""
    hidden: Widths = (256, 256)
    """Hidden layer widths of the Q-network, e.g. 2048,2048,2048 (the QuaRL paper's actors)."""
    learning_rate: float = 1e-3
    """Adam learning rate. 1e-3 rather than DQN's usual 2.5e-4: on CartPole-v1 the slower rate
    left half the seeds on a ~125-return plateau for 100k steps (`git show
    85997d5:docs/results.md`, "DQN that learns every seed")."""
    adam_eps: float = 1e-5
    """Adam epsilon (1e-5 rather than 1e-8: steadier on sparse, bootstrapped targets)."""
    target_update_period: int = 250
    """Learner updates between copies of the online network into the target network."""
    max_grad_norm: float = 10.0
    """Gradient norm clip."""
    double_q: bool = True
    """Double DQN targets (van Hasselt et al., 2016)."""
    dueling: bool = True
    """Dueling head (Wang et al., 2016): the greedy action then depends only on an advantage
    stream at the scale of the action gap, so int8 actors agree with fp32 far more often."""
    huber_delta: float = 1.0
    """Huber loss threshold."""
    publish_every: int = 100
    """Learner updates between published (quantized) snapshots. A GPTQ publish of a 256-wide
    layer costs about 20 updates' time (benchmarks/snapshot_publish.py learner-step): every 50
    updates it took a fifth of the learner's time."""
    epsilon: float = 0.4
    """Ape-X exploration base: environment instance i of N explores with
    epsilon^(1 + epsilon_alpha * i / (N - 1))."""
    epsilon_alpha: float = 7.0
    """Ape-X exploration exponent spread."""
    random_warmup: bool = False
    """Act uniformly at random while actors hold the untrained network (the snapshot of version
    0, until the learner's first publish once min_replay_size is reached), as SB3's and
    CleanRL's DQN do before learning starts. Off (Ape-X): epsilon-greedy on the untrained
    network from the first step; on Pong that network takes one action on every state, so
    most of the first replay is that action (docs/atari.md)."""

    def validate(self) -> None:
        super().validate()
        if self.dueling and self.hidden[-1] % 2:
            raise ConfigError(
                f"--dueling splits the last hidden layer in two; its width must be even, "
                f"got {self.hidden[-1]} (or pass --no-dueling)"
            )
