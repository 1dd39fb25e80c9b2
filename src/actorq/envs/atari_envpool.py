"""EnvPool as the actors' Atari engine: the same games and preprocessing as
:mod:`actorq.envs.atari`, stepped by EnvPool's C++ pool instead of Python wrappers.

Weng et al., "EnvPool: A Highly Parallel Reinforcement Learning Environment Execution Engine"
(NeurIPS 2022 Datasets and Benchmarks). EnvPool's Atari defaults are DQN's preprocessing as
:mod:`actorq.envs.atari` applies it (1..30 no-op starts, frame skip 4 max-pooled, 84×84
grayscale with ``INTER_AREA``, 4 stacked frames, FIRE on reset, 27,000 agent steps a game,
no sticky actions); ``mode="train"`` adds episodic life and reward clipping, ``mode="eval"``
plays full games on the raw score. One difference stays: EnvPool turns the RGB screen gray with
OpenCV (as SB3's and CleanRL's ``WarpFrame`` do), the Python path takes ALE's own grayscale
(Gymnasium's ``AtariPreprocessing``), so intensities differ (Pong's background: 107 against 87)
where the layout agrees (Breakout's black screen: under 2% of pixels differ,
``tests/envs/test_atari_envpool.py``). A policy trained on one engine sees shifted pixels on
the other, so a run keeps the engine it started with (``--atari-engine``, saved in its config).

The pool is a vector env with the interface the actors use (:class:`gymnasium.vector.
SyncVectorEnv` in same-step autoreset mode): an episode that ends returns the next episode's
first observation at once and its last one in ``info["final_obs"]``. EnvPool itself resets an
ended env on that env's next step; :meth:`EnvPoolVector.step` takes that step for the ended
envs alone (EnvPool steps a subset with ``env_id``) before returning, so a life lost under
episodic life goes on with the same game, as :class:`~actorq.envs.atari.EpisodicLife` does.

``engine`` (``--atari-engine``; an ``env_kwargs`` key of ``atari:`` ids): ``"envpool"``,
``"ale"`` (the Python wrappers) or ``"auto"`` (the default: EnvPool where it is installed).
EnvPool 1.2.5 is the newest with a wheel here (1.2.7 has none for Python 3.11); its package
pulls ~750 MB of other suites' assets, so it is an extra of its own and CI runs without it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from actorq.envs.atari import AtariOptions, resolve_engine
from actorq.errors import EnvIdError


class EnvPoolVector:
    """``num_envs`` copies of an Atari game in one EnvPool pool (one thread: an actor process
    owns its core), with same-step autoreset (the module docstring)."""

    def __init__(self, name: str, num_envs: int, **options: Any) -> None:
        o = AtariOptions.parse(options)
        self.num_envs = num_envs
        self._full_games = o.mode == "eval"
        self._kwargs = {
            "task_id": f"{name}-v5",
            "env_type": "gymnasium",
            "num_envs": num_envs,
            "batch_size": num_envs,
            "num_threads": 1,
            # eval too: its life ends are hidden in step(), so a lost life is followed by the
            # reset training takes (no-ops, FIRE) and the game goes on (atari.FullGames)
            "episodic_life": True,
            "reward_clip": o.mode == "train",
            "repeat_action_probability": float(o.sticky),
            # EnvPool draws 1..noop_max no-ops (0..noop_max-1 where FIRE starts the game) and
            # crashes at 0 (1.2.5): its 1 is "no random start", what 0 means here
            "noop_max": max(1, int(o.noop_max)),
            "frame_skip": int(o.frame_skip),
            "img_height": int(o.screen_size),
            "img_width": int(o.screen_size),
            "stack_num": int(o.frame_stack),
            "use_fire_reset": bool(o.fire_reset),
        }
        self._pool: Any = None
        self._seed: int | None = None
        probe = self._make(0)  # the spaces, and one error line for a game EnvPool lacks
        self.single_observation_space = probe.observation_space
        self.single_action_space = probe.action_space
        probe.close()
        n = int(self.single_action_space.n)
        self.action_space = gym.spaces.MultiDiscrete(np.full(num_envs, n))

    def _make(self, seed: int) -> Any:
        import envpool

        kw = dict(self._kwargs)
        task = kw.pop("task_id")
        if task not in envpool.list_all_envs():
            raise EnvIdError(f"EnvPool has no Atari game {task!r}; use --atari-engine ale")
        return envpool.make(task, seed=int(seed), **kw)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """A new pool for a new seed (EnvPool seeds its envs when it makes them: env ``i`` with
        ``seed + i``, so a list of seeds counts from its first); otherwise every env resets."""
        first = seed[0] if isinstance(seed, list) else seed
        if self._pool is None or (first is not None and first != self._seed):
            if self._pool is not None:
                self._pool.close()
            self._seed = 0 if first is None else int(first)
            self._pool = self._make(self._seed)
        obs, _ = self._pool.reset()
        return obs, {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rew, term, trunc, got = self._pool.step(np.asarray(actions, np.int32))
        ended = np.flatnonzero(np.logical_or(term, trunc)).astype(np.int32)
        if self._full_games and len(ended):  # a lost life is not the end of the game
            term = np.logical_and(term, np.asarray(got["terminated"], bool))
        done = np.logical_or(term, trunc)
        info: dict[str, Any] = {}
        lives = got.get("lives")
        if len(ended):
            over = np.flatnonzero(done)
            final = np.empty(self.num_envs, object)
            final[over] = list(obs[over])
            # EnvPool's own reset of an ended env is its next step (the action is ignored):
            # taken now for those envs alone, so the caller sees the new episode at once
            first, _, _, _, again = self._pool.step(np.zeros(len(ended), np.int32), env_id=ended)
            obs = obs.copy()
            obs[ended] = first
            if len(over):
                info["final_obs"] = final
            if lives is not None and "lives" in again:
                lives = np.array(lives)
                lives[ended] = again["lives"]
        if lives is not None:
            info["lives"] = np.asarray(lives)  # after a lost life: the same game's, one fewer
        return obs, rew.astype(np.float64), term, trunc, info

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def make_atari_vector(
    name: str, num_envs: int, engine: str = "auto", **kwargs: Any
) -> EnvPoolVector | None:
    """The family's vector hook (:attr:`~actorq.envs.EnvFamily.vector`): an EnvPool pool when
    ``engine`` resolves to it, else ``None`` (one Python env per copy)."""
    if resolve_engine(engine) != "envpool":
        return None
    return EnvPoolVector(name, num_envs, **kwargs)
