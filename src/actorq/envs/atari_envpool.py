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
envs alone (EnvPool steps a subset with ``env_id``) before returning.

Lives and the frame stack are the adapter's, so that a lost life is what
:class:`~actorq.envs.atari.EpisodicLife` and :class:`~actorq.envs.atari.FireReset` make it on
the Python path: EnvPool plays whole games (its own episodic life would, after a lost life,
take 0..29 random no-ops and keep the old life's frames in the stack); the adapter ends the
learner's episode there (``mode="train"``), steps that env's no-op, FIRE and action 2 (FIRE
games), and starts its stack afresh (the new life's first frame ×4), so the frames the actors
see and the ones the frame replay rebuilds agree. A new game starts with EnvPool's own reset:
``1..noop_max`` no-ops where the Python path takes ``1..noop_max``, but FIRE alone where it
takes FIRE and action 2 (one step fewer at a game's start).

``engine`` (``--atari-engine``; an ``env_kwargs`` key of ``atari:`` ids): ``"envpool"``,
``"ale"`` (the Python wrappers) or ``"auto"`` (the default: EnvPool where it is installed).
EnvPool 1.2.5 is the newest with a wheel here (1.2.7 has none for Python 3.11); its package
pulls ~750 MB of other suites' assets, so it is an extra of its own and CI runs without it.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np

from actorq.envs import GAME_OVER, SCORE
from actorq.envs.atari import AtariOptions, resolve_engine
from actorq.errors import EnvIdError


@functools.cache
def _fire_game(name: str) -> bool:
    """:func:`~actorq.envs.atari.waits_for_fire` for the game, from ale-py's minimal action
    set, which EnvPool's actions follow."""
    from actorq.envs.atari import _ale, waits_for_fire

    _ale()
    env = gym.make(f"ALE/{name}-v5")
    try:
        return waits_for_fire(env.unwrapped.get_action_meanings())  # type: ignore[attr-defined]
    finally:
        env.close()


class EnvPoolVector:
    """``num_envs`` copies of an Atari game in one EnvPool pool (one thread: an actor process
    owns its core), with same-step autoreset, lives and frame stacks as the module docstring
    says."""

    def __init__(self, name: str, num_envs: int, **options: Any) -> None:
        o = AtariOptions.parse(options)
        self.num_envs = num_envs
        self._train = o.mode == "train"
        self._stack_n = int(o.frame_stack)
        self._kwargs = {
            "task_id": f"{name}-v5",
            "env_type": "gymnasium",
            "num_envs": num_envs,
            "batch_size": num_envs,
            "num_threads": 1,
            "episodic_life": False,  # whole games: a lost life is the adapter's (step())
            "reward_clip": self._train,
            "repeat_action_probability": float(o.sticky),
            # EnvPool draws 1..noop_max no-ops (0..noop_max-1 where FIRE starts the game) and
            # crashes at 0 (1.2.5): its 1 is "no random start", what 0 means here
            "noop_max": max(1, int(o.noop_max)),
            "frame_skip": int(o.frame_skip),
            "img_height": int(o.screen_size),
            "img_width": int(o.screen_size),
            "stack_num": 1,  # stacks are the adapter's (a new life starts a fresh one)
            "use_fire_reset": bool(o.fire_reset),
        }
        self._pool: Any = None
        self._seed: int | None = None
        probe = self._make(0)  # the spaces, and one error line for a game EnvPool lacks
        frame = probe.observation_space
        self.single_observation_space = gym.spaces.Box(
            0, 255, (self._stack_n, *frame.shape[1:]), np.uint8
        )
        self.single_action_space = probe.action_space
        probe.close()
        self._serve = (0, 1, 2) if o.fire_reset and _fire_game(name) else (0,)
        n = int(self.single_action_space.n)
        self.action_space = gym.spaces.MultiDiscrete(np.full(num_envs, n))
        self._stacks = np.zeros((num_envs, *self.single_observation_space.shape), np.uint8)
        self._lives = np.zeros(num_envs, np.int64)
        self._points = np.zeros(num_envs, np.float64)  # raw points of steps taken off-step

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
        """New games in every env; a new pool for a new seed (EnvPool seeds its envs when it
        makes them: env ``i`` with ``seed + i``, so a list of seeds counts from its first)."""
        first = seed[0] if isinstance(seed, list) else seed
        if first is not None:
            # EnvPool's seeds are int32 (it asserts so) and env i takes seed + i: a run's
            # seeds reach 2**32 - 1 (numpy's, torch's), and a resumed run's actors' grow with
            # its steps, so they are taken modulo what fits
            first = int(first) % (2**31 - self.num_envs)
        if self._pool is None or (first is not None and first != self._seed):
            if self._pool is not None:
                self._pool.close()
            self._seed = 0 if first is None else first
            self._pool = self._make(self._seed)
        obs, info = self._pool.reset()
        self._points[:] = 0.0
        self._stacks[:] = np.asarray(obs)[:, -1:]  # the first frame, stack_n times
        self._lives[:] = np.asarray(info.get("lives", 0))
        return self._stacks.copy(), {"lives": self._lives.copy()}

    def _step_some(self, ids: np.ndarray, action: int) -> tuple[np.ndarray, np.ndarray, Any]:
        """Step envs ``ids`` alone with ``action``: (last frames, game ended, lives), in
        ``ids``' order; their raw points go to the next step's score."""
        obs, rew, term, trunc, info = self._pool.step(
            np.full(len(ids), action, np.int32), env_id=ids
        )
        got = np.asarray(info["env_id"]) if "env_id" in info else np.sort(ids)
        row = {int(e): r for r, e in enumerate(got)}  # one thread returns env-id order
        order = np.array([row[int(i)] for i in ids], np.int64)
        ended = np.logical_or(term, trunc)[order]
        lives = np.asarray(info["lives"])[order] if "lives" in info else np.zeros(len(ids), int)
        self._points[ids] += _raw(rew, info)[order]
        return np.asarray(obs)[order, -1], ended, lives

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rew, term, trunc, got = self._pool.step(np.asarray(actions, np.int32))
        if "env_id" in got:  # rows in env order: one thread returns them so, more might not
            order = np.argsort(np.asarray(got["env_id"]), kind="stable")
            obs, rew, term, trunc = (np.asarray(x)[order] for x in (obs, rew, term, trunc))
            got = {k: np.asarray(v)[order] if isinstance(v, np.ndarray) and len(v) == len(order)
                   else v for k, v in got.items()}  # fmt: skip
        term, trunc = np.asarray(term, bool).copy(), np.asarray(trunc, bool).copy()
        score = self._points + _raw(rew, got)  # the serve's points before this step's
        self._points[:] = 0.0
        lives = np.asarray(got.get("lives", self._lives)).astype(np.int64)
        self._stacks[:, :-1] = self._stacks[:, 1:]  # numpy buffers an overlapping copy
        self._stacks[:, -1] = np.asarray(obs)[:, -1]
        game_over = np.logical_or(term, trunc)
        lost = ~game_over & (lives > 0) & (lives < self._lives)
        restart = game_over.copy()  # envs whose next step is EnvPool's reset (a new game)
        if lost.any():  # training's reset after a lost life: no-op, FIRE, 2; a fresh stack
            ids = np.flatnonzero(lost).astype(np.int32)
            last = self._stacks[ids, -1].copy()
            for action in self._serve:
                going = ~restart[ids]  # an env whose game the serve ended steps no further
                if not going.any():
                    break
                frames, ended, now = self._step_some(ids[going], action)
                last[going], lives[ids[going]] = frames, now
                restart[ids[going]] = ended
            if self._train:
                term |= lost
            else:  # a game that ended during the serve is cut there, as FullGames does
                trunc |= lost & restart
        served_out = lost & restart  # games the serve after a lost life ended
        if served_out.any():  # the serve's points are the game's that ended: its last
            score[served_out] += self._points[served_out]
            self._points[served_out] = 0.0
        done = np.logical_or(term, trunc)
        info: dict[str, Any] = {}
        if done.any():
            final = np.empty(self.num_envs, object)
            for i in np.flatnonzero(done):  # (an object array takes arrays one by one)
                final[i] = self._stacks[i].copy()
            info["final_obs"] = final
        if lost.any():
            self._stacks[ids] = last[:, None]
        if restart.any():  # EnvPool's reset of an ended game is its next step (action ignored)
            ids = np.flatnonzero(restart).astype(np.int32)
            frames, _, now = self._step_some(ids, 0)
            self._stacks[ids] = frames[:, None]
            lives[ids] = now
        self._lives = lives
        info["lives"] = lives.copy()
        if self._train:  # games on the raw score for the actors' training curves
            # a game the serve after a lost life ended is over too; a restart's own points
            # (the next game's) go to self._points, for its first step
            info[SCORE], info[GAME_OVER] = score, game_over | served_out
        return self._stacks.copy(), np.asarray(rew, np.float64), term, trunc, info

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _raw(rew: Any, info: dict[str, Any]) -> np.ndarray:
    """A step's raw points: EnvPool's ``info["reward"]`` (the reward before its clipping; in
    evaluation, unclipped, the reward itself)."""
    return np.asarray(info.get("reward", rew), np.float64)


def make_atari_vector(
    name: str, num_envs: int, engine: str = "auto", **kwargs: Any
) -> EnvPoolVector | None:
    """The family's vector hook (:attr:`~actorq.envs.EnvFamily.vector`): an EnvPool pool when
    ``engine`` resolves to it, else ``None`` (one Python env per copy)."""
    if resolve_engine(engine) != "envpool":
        return None
    return EnvPoolVector(name, num_envs, **kwargs)
