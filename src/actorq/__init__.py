"""actorq: fast, cheap, large-scale reinforcement learning.

The top-level package stays light: importing ``actorq`` does not import torch, so actor processes
(which only need numpy, gymnasium and onnxruntime) can import from it freely. The training API is
loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actorq.errors import ActorQError  # every error bad input causes (one line; light to import)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from actorq.agents.d4pg.config import D4PGConfig
    from actorq.agents.dqn.config import DQNConfig
    from actorq.agents.ppo.config import PPOConfig
    from actorq.experiment import TrainResult, train
    from actorq.run.policy import TrainedPolicy, load

__all__ = [
    "ActorQError",
    "D4PGConfig",
    "DQNConfig",
    "PPOConfig",
    "TrainResult",
    "TrainedPolicy",
    "__version__",
    "load",
    "make_env",
    "train",
]


def __getattr__(name: str) -> Any:
    # Lazy so that `import actorq` in an actor process never pulls in torch.
    if name in ("train", "TrainResult"):
        from actorq import experiment

        return getattr(experiment, name)
    if name.endswith("Config"):  # every agent's config, from the one registry
        from actorq.agents import config_class, config_class_names

        agent = config_class_names().get(name)
        if agent is not None:
            return config_class(agent)
    if name in ("load", "TrainedPolicy"):
        from actorq.run import policy

        return getattr(policy, name)
    if name == "make_env":
        from actorq.envs import make_env

        return make_env
    raise AttributeError(f"module 'actorq' has no attribute {name!r}")
