"""GO (Zhou et al., NeurIPS 2020): one graph policy that places, schedules and fuses the ops of
computation graphs, trained with PPO through actorq's actor-learner loop."""

from actorq.agents.go.config import GOConfig

__all__ = ["GOConfig"]
