"""Behaviour policies for actors (numpy only): how the snapshot's output becomes the action an
actor takes, and which extras it records with it.

A behaviour is called on the runtime's output for the K environments of an actor and returns
``(action, extras)``; ``extras`` are per-environment arrays the agent's adder stores with the
step (PPO: ``log_prob``, the log-probability of the action under the snapshot that chose it).
:func:`make_behaviour` builds one from the plain data in an actor's config.
"""

from __future__ import annotations

import abc
import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from actorq.quant.heads import Head
    from actorq.quant.model_snapshot import ModelSnapshot
    from actorq.quant.snapshot import PolicySnapshot

Extras = dict[str, np.ndarray]
NO_EXTRAS: Extras = {}


class Behaviour(abc.ABC):
    """Base: ``act(out) -> (action, extras)``; ``set_snapshot`` sees every snapshot an actor
    swaps in (a Gaussian policy reads its log-std there)."""

    @abc.abstractmethod
    def act(self, out: np.ndarray) -> tuple[np.ndarray, Extras]: ...

    def set_snapshot(self, snap: PolicySnapshot | ModelSnapshot) -> None:
        return None


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


class EpsilonGreedy(Behaviour):
    """argmax of action values with probability 1 - eps_k, else uniform, per environment k.

    Random numbers are drawn in blocks of ``block`` steps: it runs once per actor step, and one
    generator call per step would cost more than the argmax itself at small K.
    """

    def __init__(
        self,
        epsilons: np.ndarray,
        num_actions: int,
        seed: int,
        block: int = 512,
        warmup: bool = False,
    ) -> None:
        self.eps = np.asarray(epsilons, np.float64)
        self.num_actions = num_actions
        self.rng = np.random.default_rng(seed)
        self.block = block
        self._explore = np.zeros((0, len(self.eps)), bool)
        self._i = 0
        #: ``warmup``: uniform actions while the snapshot is the untrained network (version 0)
        self.warmup = warmup
        self.untrained = warmup

    def set_snapshot(self, snap: PolicySnapshot | ModelSnapshot) -> None:
        self.untrained = self.warmup and snap.version == 0

    def __call__(self, q: np.ndarray) -> np.ndarray:
        if self.untrained:  # SB3's and CleanRL's start: the network has not learned yet
            return self.rng.integers(0, self.num_actions, len(q))
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

    def act(self, out: np.ndarray) -> tuple[np.ndarray, Extras]:
        return self(out), NO_EXTRAS


class GaussianNoise(Behaviour):
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

    def act(self, out: np.ndarray) -> tuple[np.ndarray, Extras]:
        return self(out), NO_EXTRAS


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class PolicySampler(Behaviour):
    """On-policy behaviour (PPO, Schulman et al. 2017): sample from the snapshot's policy and
    record ``log_prob``, the log-probability of the sampled action under *this* snapshot.

    The snapshot actors run is quantized, so it — not the learner's fp32 policy — is the
    behaviour policy; the learner's importance ratio is taken against this recorded value, so
    quantization error is corrected, not ignored.

    * ``categorical`` head: the output is logits; sample by inverse CDF of the softmax. Also
      what an ``obs-logits`` :class:`~actorq.quant.model_snapshot.ModelSnapshot` gives (the
      chip placement policy, whose illegal cells carry a logit of -1e9: probability exactly 0,
      so never sampled).
    * ``gaussian`` head: the output is the mean; the snapshot carries the state-independent
      ``log_std``. Actions are stored unclipped (their log-prob is exact); the actor clips them
      to [-1, 1] before mapping to the environment's bounds.
    """

    def __init__(self, seed: int | np.random.Generator) -> None:
        self.rng = np.random.default_rng(seed)  # a Generator is used as it is
        self.head = ""
        self.log_std = np.zeros(0, np.float32)

    def set_snapshot(self, snap: PolicySnapshot | ModelSnapshot) -> None:
        from actorq.quant.runtimes import snapshot_head  # lazy: runtimes imports onnx helpers

        name = snapshot_head(snap).name
        log_std = getattr(snap, "tensors", {})["log_std"] if name == "gaussian" else None
        self.set_head(name, log_std)

    def set_head(self, name: str, log_std: np.ndarray | None = None) -> None:
        """Sample from a ``categorical`` head, or a ``gaussian`` one with its ``log_std``."""
        if name == "gaussian":
            assert log_std is not None, "a gaussian head needs its log_std"
            self.log_std = np.asarray(log_std, np.float32)
        elif name != "categorical":
            raise ValueError(f"cannot sample from a {name!r} head")
        self.head = name

    def act(self, out: np.ndarray) -> tuple[np.ndarray, Extras]:
        out = np.asarray(out, np.float32)
        if self.head == "categorical":
            z = out - out.max(axis=1, keepdims=True)
            logp_all = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            cdf = np.cumsum(np.exp(logp_all), axis=1)
            # u > 0: the first action whose cdf reaches u then has probability > 0, so a masked
            # cell (probability 0) is never drawn, even when the generator returns exactly 0
            u = np.maximum(self.rng.random((len(out), 1)) * cdf[:, -1:], np.finfo(np.float64).tiny)
            action = np.minimum((cdf < u).sum(axis=1), out.shape[1] - 1)
            logp = logp_all[np.arange(len(out)), action]
            return action.astype(np.int64), {"log_prob": logp.astype(np.float32)}
        if self.head != "gaussian":
            raise RuntimeError("PolicySampler used before a snapshot set its head")
        std = np.exp(self.log_std)
        noise = self.rng.standard_normal(out.shape).astype(np.float32)
        action = out + std * noise
        logp = -(0.5 * noise**2 + self.log_std + _LOG_SQRT_2PI).sum(axis=1)
        return action.astype(np.float32), {"log_prob": logp.astype(np.float32)}


def gaussian_sigmas(count: int, low: float = 0.05, high: float = 0.5) -> np.ndarray:
    """Per-instance exploration sigmas, log-spaced from ``low`` to ``high`` (Ape-X's idea of
    a spread from near-greedy to exploratory, applied to Gaussian noise)."""
    if count <= 1:
        return np.array([np.sqrt(low * high)], np.float64)
    return np.asarray(np.geomspace(low, high, count), np.float64)


#: ε of a Q-network's sampled evaluation: Mnih et al. (Nature 2015) evaluate DQN ε-greedy at
#: 0.05, as CleanRL's ``dqn_atari.py`` does (rl-baselines3-zoo: its final exploration, 0.01)
EVAL_EPSILON = 0.05


def epsilon_greedy(
    greedy: np.ndarray, num_actions: int, rng: np.random.Generator, epsilon: float = EVAL_EPSILON
) -> np.ndarray:
    """``greedy`` actions, each replaced by a uniformly random one with probability ε (one
    evaluation step; actors use :class:`EpsilonGreedy`, which draws ahead in blocks)."""
    explore = rng.random(len(greedy)) < epsilon
    action = np.array(greedy, copy=True)
    action[explore] = rng.integers(0, num_actions, int(explore.sum()))
    return action


def sampled_actions(head: Head, out: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A sampled evaluation's actions (families whose greedy play repeats itself: Atari,
    rl-baselines3-zoo's protocol): a stochastic discrete head draws from its policy as the
    actors do (:class:`PolicySampler`), a Q head is ε-greedy (:func:`epsilon_greedy`);
    continuous heads stay greedy."""
    if not head.discrete:
        return head.greedy(out)
    if not head.stochastic:
        return epsilon_greedy(head.greedy(out), out.shape[1], rng)
    sampler = PolicySampler(rng)
    sampler.set_head(head.name)
    return sampler.act(out)[0]


def to_env_action(action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Map actions from the policy's [-1, 1] to the environment's [low, high]."""
    return low + (np.asarray(action, np.float32) + 1.0) * 0.5 * (high - low)


BEHAVIOURS = ("epsilon_greedy", "epsilon_greedy_warmup", "gaussian_noise", "sample")


def make_behaviour(kind: str, num_actions: int, noise: list[float], seed: int) -> Behaviour:
    """An actor's behaviour from plain data: ``epsilon_greedy`` (DQN; ``noise`` = epsilon per
    environment; ``epsilon_greedy_warmup``: uniform while the snapshot is untrained),
    ``gaussian_noise`` (D4PG; sigma per environment) or ``sample`` (PPO; sample from the
    snapshot's stochastic policy, ``noise`` unused)."""
    if kind in ("epsilon_greedy", "epsilon_greedy_warmup"):
        return EpsilonGreedy(np.asarray(noise), num_actions, seed, warmup=kind.endswith("up"))
    if kind == "gaussian_noise":
        return GaussianNoise(np.asarray(noise), seed)
    if kind == "sample":
        return PolicySampler(seed)
    raise ValueError(f"unknown behaviour {kind!r}; expected one of {BEHAVIOURS}")
