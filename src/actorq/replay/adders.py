"""N-step transition adder, vectorized over the K environments an actor steps together.

For each environment it emits (s_t, a_t, R, discount, s_{t+m}) with
R = sum_{i<m} gamma^i r_{t+i}; m = n while the episode runs, and shorter at its end. When an
episode terminates the discount is 0 (no bootstrap); when it is truncated (a time limit) the
discount is gamma^m and s_{t+m} is the final observation, so the learner bootstraps from it —
the time limit is not part of the MDP (Pardo et al., 2018).
"""

from __future__ import annotations

import numpy as np

from actorq.core.types import ArraySpec, Batch


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
        self._powers = self.gamma ** np.arange(n + 1)

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
    ) -> Batch:
        """Record one vector step; return the transitions it completes.

        ``next_obs`` is what the env returned (for ended envs: the next episode's first
        observation, same-step autoreset); ``final_obs`` holds the last observation of the
        episodes that ended (rows of other envs are ignored).
        """
        assert self._cur is not None, "call observe_first() before add()"
        n, j = self.n, self._t % self.n
        self._obs[j] = self._cur
        self._act[j] = action
        self._rew[j] = reward
        self._len = np.minimum(self._len + 1, n)
        done = np.logical_or(terminated, truncated)
        true_next = next_obs
        if done.any():
            assert final_obs is not None, "final_obs required when an episode ends"
            true_next = np.where(
                done.reshape(-1, *([1] * (next_obs.ndim - 1))), final_obs, next_obs
            )

        parts: list[Batch] = []
        full = (self._len >= n) & ~done
        if full.any():
            s = (self._t - n + 1) % n
            rows = (s + np.arange(n)) % n
            ret = self._powers[:n] @ self._rew[rows]  # (K,)
            ks = np.flatnonzero(full)
            parts.append(
                {
                    "obs": self._obs[s, ks],
                    "action": self._act[s, ks],
                    "reward": ret[ks].astype(np.float32),
                    "discount": np.full(len(ks), self._powers[n], np.float32),
                    "next_obs": true_next[ks],
                }
            )
        for k in np.flatnonzero(done):
            m = int(self._len[k])
            ages = np.arange(m)  # age 0: started at this step; age a: started a steps ago
            rows = (self._t - ages) % n
            rew = self._rew[:, k]
            # R for the transition of age a: sum_{i<=a} gamma^i r_{t-a+i}
            rets = np.array(
                [self._powers[: a + 1] @ rew[(self._t - a + np.arange(a + 1)) % n] for a in ages],
                np.float32,
            )
            disc = np.zeros(m, np.float32) if terminated[k] else self._powers[ages + 1]
            parts.append(
                {
                    "obs": self._obs[rows, k],
                    "action": self._act[rows, k],
                    "reward": rets,
                    "discount": disc.astype(np.float32),
                    "next_obs": np.repeat(true_next[k][None], m, axis=0),
                }
            )
            self._len[k] = 0
        self._cur = np.array(next_obs, copy=True)
        self._t += 1
        if not parts:
            return {}
        if len(parts) == 1:
            return parts[0]
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
