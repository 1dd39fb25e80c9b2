"""Exploration for actors (numpy only)."""

from __future__ import annotations

import numpy as np


def apex_epsilons(count: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Ape-X's per-actor exploration (Horgan et al., "Distributed Prioritized Experience
    Replay", ICLR 2018): actor i of N explores with eps_i = base^(1 + alpha * i / (N - 1)).

    We give each *environment instance* (actors × envs per actor) its own eps, so a run with
    few actors still spans greedy to exploratory behaviour.
    """
    if count <= 1:
        return np.array([base], np.float64)
    i = np.arange(count)
    return np.asarray(base ** (1.0 + alpha * i / (count - 1)), np.float64)


class EpsilonGreedy:
    """argmax of action values with probability 1 - eps_k, else uniform, per environment k.

    Random numbers are drawn in blocks of ``block`` steps: it runs once per actor step, and one
    generator call per step would cost more than the argmax itself at small K.
    """

    def __init__(self, epsilons: np.ndarray, num_actions: int, seed: int, block: int = 512) -> None:
        self.eps = np.asarray(epsilons, np.float64)
        self.num_actions = num_actions
        self.rng = np.random.default_rng(seed)
        self.block = block
        self._explore = np.zeros((0, len(self.eps)), bool)
        self._i = 0

    def __call__(self, q: np.ndarray) -> np.ndarray:
        greedy = q.argmax(axis=1)
        k = len(greedy)
        if self._i >= len(self._explore):
            self._explore = self.rng.random((self.block, len(self.eps))) < self.eps
            self._i = 0
        explore = self._explore[self._i, :k]
        self._i += 1
        if explore.any():
            greedy[explore] = self.rng.integers(0, self.num_actions, int(explore.sum()))
        return greedy
