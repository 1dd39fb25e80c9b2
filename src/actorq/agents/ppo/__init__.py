"""PPO (Schulman et al., "Proximal Policy Optimization Algorithms", 2017) with quantized actors:
the actors' snapshot is the behaviour policy, and the learner's importance ratio is taken against
the log-probabilities they recorded."""

from actorq.agents.ppo.config import PPOConfig

__all__ = ["PPOConfig"]
