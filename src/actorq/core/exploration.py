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


class GaussianNoise:
    """Deterministic action in [-1, 1] plus N(0, sigma_k²) noise per environment k, clipped.

    D4PG's exploration (Barth-Maron et al., 2018), with a fixed sigma per environment instance
    spread across actors as Ape-X spreads epsilon. Actions stay in the policy's [-1, 1] space
    (what replay stores and the critic sees); :func:`to_env_action` maps them to the env's bounds.
    """

    def __init__(self, sigmas: np.ndarray, seed: int, block: int = 512) -> None:
        self.sigmas = np.asarray(sigmas, np.float32)
        self.rng = np.random.default_rng(seed)
        self.block = block
        self._noise = np.zeros((0, 0, 0), np.float32)
        self._i = 0

    def __call__(self, action: np.ndarray) -> np.ndarray:
        k, d = action.shape
        if self._i >= len(self._noise) or self._noise.shape[2] != d:
            self._noise = self.rng.standard_normal((self.block, len(self.sigmas), d), np.float32)
            self._noise *= self.sigmas[None, :, None]
            self._i = 0
        out = action + self._noise[self._i, :k]
        self._i += 1
        return np.clip(out, -1.0, 1.0, out=out)


def gaussian_sigmas(count: int, low: float = 0.05, high: float = 0.5) -> np.ndarray:
    """Per-instance exploration sigmas, log-spaced from ``low`` to ``high`` (Ape-X's idea of
    a spread from near-greedy to exploratory, applied to Gaussian noise)."""
    if count <= 1:
        return np.array([np.sqrt(low * high)], np.float64)
    return np.asarray(np.geomspace(low, high, count), np.float64)


def to_env_action(action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Map actions from the policy's [-1, 1] to the environment's [low, high]."""
    return low + (np.asarray(action, np.float32) + 1.0) * 0.5 * (high - low)


def make_exploration(
    num_actions: int, noise: list[float], seed: int
) -> EpsilonGreedy | GaussianNoise:
    """The actors' exploration for an action space: ``noise`` is epsilon per environment for
    discrete actions (``num_actions > 0``), sigma per environment for continuous ones."""
    if num_actions > 0:
        return EpsilonGreedy(np.asarray(noise), num_actions, seed)
    return GaussianNoise(np.asarray(noise), seed)
