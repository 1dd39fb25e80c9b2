"""Adders: how an actor turns its steps into the items its agent learns from (Acme's seam).

* :class:`NStepAdder` (DQN, D4PG): n-step transitions, one per step and environment.
* :class:`TrajectoryAdder` (PPO): fixed-length chunks of consecutive steps per environment, with
  the behaviour policy's log-probabilities and the snapshot version.

Both are vectorized over the K environments an actor steps together, share one ``add`` call, and say
when a snapshot may be swapped in (``at_boundary``). :class:`~actorq.replay.specs.NStepSpec` /
:class:`~actorq.replay.specs.TrajectorySpec` build one from the plain data of an actor's config.

N-step transitions
------------------

For each environment it emits (s_t, a_t, R, discount, s_{t+m}) with
R = sum_{i<m} gamma^i r_{t+i}; m = n while the episode runs, and shorter at its end. When an
episode terminates the discount is 0 (no bootstrap); when it is truncated (a time limit) the
discount is gamma^m and s_{t+m} is the final observation, so the learner bootstraps from it —
the time limit is not part of the MDP (Pardo et al., 2018).

It runs once per actor step, so it is written to cost a few numpy calls whatever K is: the
n-step returns of every window age come from one small matrix product, and the transitions a
step completes are picked with one boolean mask (no Python loop over environments).
"""

from __future__ import annotations

import numpy as np

from actorq.types import ArraySpec, Batch, EnvSpec, trajectory_specs


class NStepAdder:
    def __init__(
        self, n: int, gamma: float, num_envs: int, obs: ArraySpec, action: ArraySpec
    ) -> None:
        if n < 1:
            raise ValueError(f"n-step must be >= 1, got {n}")
        self.n, self.gamma, self.k = n, float(gamma), num_envs
        self._obs = obs.zeros(n, num_envs)
        self._act = action.zeros(n, num_envs)
        self._rew = np.zeros((n, num_envs), np.float32)
        self._len = np.zeros(num_envs, np.int64)  # steps of the current episode in the window
        self._cur: np.ndarray | None = None
        self._t = 0
        self._powers = (self.gamma ** np.arange(n + 1)).astype(np.float32)
        # Ring rows of the reward window, oldest to newest, when the newest row is j.
        self._window = np.stack([(j - n + 1 + np.arange(n)) % n for j in range(n)])
        # G[a, p]: weight of window position p (p = n-1 is the newest reward) in the return of
        # the transition that started a steps ago: R_a = sum_{i<=a} gamma^i r_{t-a+i}.
        self._returns = np.zeros((n, n), np.float32)
        for a in range(n):
            for i in range(a + 1):
                self._returns[a, n - 1 - a + i] = self.gamma**i
        self._ages = np.arange(n)[:, None]
        self._full_discount = np.full(num_envs, self._powers[n], np.float32)

    #: A snapshot may be swapped in before any step (transitions carry no version).
    at_boundary = True

    def observe_first(self, obs: np.ndarray) -> None:
        self._cur = np.array(obs, copy=True)
        self._len[:] = 0

    def add(
        self,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        final_obs: np.ndarray | None = None,
        extras: dict[str, np.ndarray] | None = None,
        version: int = 0,
    ) -> Batch:
        """Record one vector step; return the transitions it completes (new arrays).

        ``next_obs`` is what the env returned (for ended envs: the next episode's first
        observation, same-step autoreset); ``final_obs`` holds the last observation of the
        episodes that ended (rows of other envs are ignored).
        """
        assert self._cur is not None, "call observe_first() before add()"
        n, j = self.n, self._t % self.n
        self._obs[j] = self._cur
        self._act[j] = action
        self._rew[j] = reward
        length = self._len
        np.minimum(length + 1, n, out=length)
        self._cur = np.array(next_obs, copy=True)
        self._t += 1
        done = np.logical_or(terminated, truncated)
        rets = self._returns @ self._rew[self._window[j]]  # (age, K)
        s = (j + 1) % n  # ring row of the oldest transition (age n - 1)

        if not done.any():
            if length[0] >= n and length.min() >= n:  # steady state: one window per env
                return {
                    "obs": self._obs[s].copy(),
                    "action": self._act[s].copy(),
                    "reward": rets[n - 1],
                    "discount": self._full_discount.copy(),
                    "next_obs": self._cur.copy(),
                }
            ks = np.flatnonzero(length >= n)
            if not len(ks):
                return {}
            return {
                "obs": self._obs[s, ks],
                "action": self._act[s, ks],
                "reward": rets[n - 1, ks],
                "discount": self._full_discount[ks],
                "next_obs": self._cur[ks],
            }

        assert final_obs is not None, "final_obs required when an episode ends"
        # Transitions to emit, by (age, env): every transition of an episode that ended, and
        # the full window of every env still running.
        emit = (self._ages < length) & done
        emit[n - 1] |= (length >= n) & ~done
        age, ks = np.nonzero(emit)
        rows = (j - age) % n
        ended = done[ks]
        discount = np.where(np.asarray(terminated)[ks], 0.0, self._powers[age + 1])
        nxt = np.where(ended.reshape(-1, *([1] * (next_obs.ndim - 1))), final_obs[ks], next_obs[ks])
        length[done] = 0
        return {
            "obs": self._obs[rows, ks],
            "action": self._act[rows, ks],
            "reward": rets[age, ks],
            "discount": discount.astype(np.float32),
            "next_obs": nxt.astype(self._obs.dtype, copy=False),
        }


class TrajectoryAdder:
    """Chunks of ``length`` consecutive steps per environment, emitted every ``length`` vector
    steps as K items (:func:`~actorq.types.trajectory_specs`).

    Episodes may end inside a chunk (``terminated``/``truncated`` mark where; ``next_obs`` then
    holds the ended episode's last observation) and continue into the next chunk: the learner
    computes GAE per chunk and bootstraps from ``next_obs`` at the chunk's end and at time-limit
    truncations (PPO with truncated rollouts, as in Schulman et al. 2017). A chunk is collected
    with one snapshot version: actors swap snapshots only between chunks (``at_boundary``).
    """

    def __init__(self, length: int, num_envs: int, spec: EnvSpec, actor: int = 0) -> None:
        if length < 1:
            raise ValueError(f"trajectory length must be >= 1, got {length}")
        self.length, self.k, self.actor = length, num_envs, actor
        self.specs = trajectory_specs(spec, length)
        # time-major buffers (T, K, ...); emitted env-major (K, T, ...)
        self._buf = {
            name: np.zeros((length, num_envs, *s.shape[1:]), s.dtype)
            for name, s in self.specs.items()
            if name not in ("version", "actor")
        }
        self._t = 0
        self._version = 0
        self._cur: np.ndarray | None = None

    @property
    def at_boundary(self) -> bool:
        return self._t == 0

    def observe_first(self, obs: np.ndarray) -> None:
        self._cur = np.array(obs, copy=True)

    def add(
        self,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        final_obs: np.ndarray | None = None,
        extras: dict[str, np.ndarray] | None = None,
        version: int = 0,
    ) -> Batch:
        assert self._cur is not None, "call observe_first() before add()"
        if extras is None or "log_prob" not in extras:
            raise ValueError("a trajectory step needs the behaviour's log_prob")
        t, b = self._t, self._buf
        if t == 0:
            self._version = version
        done = np.logical_or(terminated, truncated)
        b["obs"][t] = self._cur
        b["action"][t] = action
        b["log_prob"][t] = extras["log_prob"]
        b["reward"][t] = reward
        b["terminated"][t] = terminated
        b["truncated"][t] = truncated
        if done.any():
            assert final_obs is not None, "final_obs required when an episode ends"
            b["next_obs"][t] = np.where(
                done.reshape(-1, *([1] * (next_obs.ndim - 1))), final_obs, next_obs
            )
        else:
            b["next_obs"][t] = next_obs
        self._cur = np.array(next_obs, copy=True)
        self._t += 1
        if self._t < self.length:
            return {}
        self._t = 0
        out = {name: np.ascontiguousarray(v.swapaxes(0, 1)) for name, v in b.items()}
        out["version"] = np.full(self.k, self._version, np.int64)
        out["actor"] = np.full(self.k, self.actor, np.int32)
        return out
