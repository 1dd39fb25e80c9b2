"""DQN (Mnih et al., Nature 2015) with double Q-learning (van Hasselt et al., AAAI 2016),
n-step returns and Ape-X-style per-actor exploration (Horgan et al., ICLR 2018)."""

from actorq.agents.dqn.config import DQNConfig

__all__ = ["DQNConfig"]
