"""How a policy's output becomes an action: one object per head, so no caller tests a head's name.

A snapshot's :class:`~actorq.quant.snapshot.PolicySpec` names its head; :func:`head` returns the
object that knows what the output means:

* ``q`` (DQN): action values; act by argmax.
* ``categorical`` (PPO, discrete): logits of a categorical policy; greedy = argmax.
* ``deterministic`` (D4PG): the action itself in [-1, 1] (after the spec's tanh).
* ``gaussian`` (PPO, continuous): the mean of a diagonal Gaussian whose state-independent
  log-std rides in the snapshot (tensor ``log_std``); greedy = the mean, clipped to [-1, 1].

Continuous actions live in the policy's [-1, 1] space and are mapped to the environment's bounds
by :func:`~actorq.core.exploration.to_env_action`. numpy only (actors import this).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Head:
    name: str
    discrete: bool
    #: The policy is stochastic (PPO): actors sample and record the action's log-probability.
    stochastic: bool
    #: The snapshot carries a ``log_std`` tensor (out_dim,) for this head.
    needs_log_std: bool = False

    def greedy(self, out: np.ndarray) -> np.ndarray:
        """The greedy action for each row of the policy's output: an index for discrete heads,
        an action in [-1, 1] for continuous ones."""
        if self.discrete:
            return np.asarray(out.argmax(axis=1))
        return np.clip(out, -1.0, 1.0)

    def compare(
        self, a: np.ndarray, b: np.ndarray, tol: float = 0.05
    ) -> tuple[float, float | None]:
        """How alike two outputs act on the same states: ``(agreement, mean |Δa|)``.

        Discrete: the share of states with the same greedy action (no |Δa|). Continuous: the
        share of states whose greedy actions agree within ``tol`` in every component, and the
        mean absolute difference of the greedy actions.
        """
        ga, gb = self.greedy(a), self.greedy(b)
        if self.discrete:
            return float((ga == gb).mean()) if len(ga) else float("nan"), None
        d = np.abs(ga - gb)
        if not len(d):
            return float("nan"), None
        return float((d.max(axis=1) <= tol).mean()), float(d.mean())

    def log_prob(
        self, out: np.ndarray, action: np.ndarray, log_std: np.ndarray | None = None
    ) -> np.ndarray:
        """Stochastic heads: log-probability of ``action`` (one per row) under the policy whose
        output is ``out`` (logits, or the Gaussian mean with ``log_std``)."""
        out = np.asarray(out, np.float64)
        if self.name == "categorical":
            z = out - out.max(axis=1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            return np.asarray(logp[np.arange(len(out)), np.asarray(action, np.int64)])
        if self.name == "gaussian":
            assert log_std is not None, "a gaussian head needs its log_std"
            ls = np.asarray(log_std, np.float64)
            noise = (np.asarray(action, np.float64) - out) / np.exp(ls)
            return np.asarray(-(0.5 * noise**2 + ls + 0.5 * np.log(2 * np.pi)).sum(axis=1))
        raise ValueError(f"a {self.name!r} head has no log-probabilities")

    @property
    def agreement_metric(self) -> str:
        return "same greedy action" if self.discrete else "actions within tol"


HEADS: dict[str, Head] = {
    "q": Head("q", discrete=True, stochastic=False),
    "categorical": Head("categorical", discrete=True, stochastic=True),
    "deterministic": Head("deterministic", discrete=False, stochastic=False),
    "gaussian": Head("gaussian", discrete=False, stochastic=True, needs_log_std=True),
}


def head(name: str) -> Head:
    try:
        return HEADS[name]
    except KeyError:
        raise ValueError(f"unknown policy head {name!r}; expected one of {sorted(HEADS)}") from None
