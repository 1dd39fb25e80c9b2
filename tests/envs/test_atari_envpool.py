"""EnvPool as the actors' Atari engine: same-step autoreset over EnvPool's next-step reset, the
engine choice in one line, and (where EnvPool is installed) frames that agree with the Python
path and a game that goes on after a lost life."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from actorq.envs import atari
from actorq.envs.atari import resolve_engine
from actorq.envs.atari_envpool import EnvPoolVector
from actorq.errors import EnvIdError


class FakePool:
    """EnvPool's contract as the adapter uses it: observations count steps per env; env ``i``
    ends at its steps listed in ``ends[i]``; a step of an ended env is its reset (obs -1)."""

    def __init__(
        self, n: int, ends: dict[int, set[int]], games_over: dict[int, set[int]] | None = None
    ) -> None:
        self.n, self.ends = n, ends
        self.games_over = games_over or {}  # the ends that are game overs (else a life lost)
        self.t = np.zeros(n, np.int64)
        self.ended = np.zeros(n, bool)
        self.calls: list[list[int]] = []
        self.observation_space = gym.spaces.Box(-1, 10**6, (2,), np.int64)
        self.action_space = gym.spaces.Discrete(3)

    def reset(self) -> tuple[np.ndarray, dict[str, Any]]:
        self.t[:] = 0
        return self._obs(range(self.n)), {}

    def _obs(self, ids: Any) -> np.ndarray:
        return np.array([[i, -1 if self.ended[i] else self.t[i]] for i in ids], np.int64)

    def step(self, actions: np.ndarray, env_id: np.ndarray | None = None) -> tuple[Any, ...]:
        ids = list(range(self.n)) if env_id is None else [int(i) for i in env_id]
        assert len(actions) == len(ids)
        self.calls.append(ids)
        term = np.zeros(len(ids), bool)
        for j, i in enumerate(ids):
            if self.ended[i]:  # EnvPool resets an ended env on its next step
                self.t[i] = 0
                continue
            self.t[i] += 1
            term[j] = int(self.t[i]) in self.ends.get(i, set())
        obs = self._obs(ids)
        for j, i in enumerate(ids):
            self.ended[i] = term[j]
            if term[j]:
                obs[j, 1] = self.t[i]  # the last observation of the episode
        self.ended[[i for j, i in enumerate(ids) if not term[j]]] = False
        over = [term[j] and int(self.t[i]) in self.games_over.get(i, set()) for j, i in
                enumerate(ids)]  # fmt: skip
        info = {"terminated": np.array(over, np.int32)}
        return obs, np.ones(len(ids), np.float32), term, np.zeros(len(ids), bool), info

    def close(self) -> None:
        pass


def fake_vector(
    monkeypatch: pytest.MonkeyPatch,
    n: int,
    ends: dict[int, set[int]],
    games_over: dict[int, set[int]] | None = None,
    **options: Any,
) -> Any:
    pool = FakePool(n, ends, games_over)
    monkeypatch.setattr(EnvPoolVector, "_make", lambda self, seed: pool)
    return EnvPoolVector("Pong", n, **options), pool


def test_an_ended_env_returns_its_next_episode_at_once_and_its_last_obs_as_final(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vec, pool = fake_vector(monkeypatch, 3, {1: {2}, 2: {2, 3}})
    obs, _ = vec.reset(seed=5)
    assert obs[:, 1].tolist() == [0, 0, 0]
    obs, rew, term, _, info = vec.step(np.zeros(3, np.int64))
    assert obs[:, 1].tolist() == [1, 1, 1] and "final_obs" not in info
    pool.calls.clear()
    obs, rew, term, _, info = vec.step(np.zeros(3, np.int64))
    assert term.tolist() == [False, True, True]
    # the ended envs' reset step was taken for them alone, in the same call
    assert pool.calls == [[0, 1, 2], [1, 2]]
    assert obs[:, 1].tolist() == [2, -1, -1]  # their new episodes' first observations
    assert info["final_obs"][0] is None and info["final_obs"][1][1] == 2
    assert info["final_obs"][2][1] == 2
    obs, rew, term, _trunc, info = vec.step(np.zeros(3, np.int64))
    assert obs[:, 1].tolist() == [3, 1, 1] and not term.any()  # env 2's second episode goes on
    assert rew.dtype == np.float64 and vec.action_space.shape == (3,)


def test_evaluation_hides_a_lost_life_and_ends_on_the_game_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # eval: EnvPool runs with episodic life (its reset after a lost life serves, as training's
    # does) and the adapter turns that life's end into the game going on
    vec, pool = fake_vector(monkeypatch, 2, {0: {2}}, {0: set()}, mode="eval")
    assert vec._kwargs["episodic_life"] and not vec._kwargs["reward_clip"]
    vec.reset(seed=0)
    vec.step(np.zeros(2, np.int64))
    pool.calls.clear()
    obs, rew, term, _, info = vec.step(np.zeros(2, np.int64))  # env 0 loses a life
    assert not term.any() and "final_obs" not in info and rew[0] == 1.0
    assert pool.calls == [[0, 1], [0]] and obs[0, 1] == -1  # its serve was taken at once
    pool.games_over[0] = {2}  # its next end (2 steps on) is the game's
    vec.step(np.zeros(2, np.int64))
    obs, _, term, _, info = vec.step(np.zeros(2, np.int64))
    assert term.tolist() == [True, False] and info["final_obs"][0][1] == 2
    train, _ = fake_vector(monkeypatch, 1, {0: {2}}, {0: set()})
    assert train._kwargs["episodic_life"] and train._kwargs["reward_clip"]
    train.reset(seed=0)
    train.step(np.zeros(1, np.int64))
    assert train.step(np.zeros(1, np.int64))[2].tolist() == [True]  # training: a life ends it


def test_a_new_seed_makes_a_new_pool_and_a_list_of_seeds_counts_from_its_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seeds: list[int] = []

    def make(self: EnvPoolVector, seed: int) -> FakePool:
        seeds.append(seed)
        return FakePool(2, {})

    monkeypatch.setattr(EnvPoolVector, "_make", make)
    vec = EnvPoolVector("Pong", 2)
    vec.reset(seed=3)
    vec.reset()
    vec.reset(seed=[7, 8])
    assert seeds == [0, 3, 7]  # the spaces' probe, then one pool per seed


def test_engine_choice_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EnvIdError, match="atari-engine must be one of"):
        resolve_engine("gpu")
    monkeypatch.setattr(atari, "envpool_installed", lambda: False)
    assert resolve_engine("auto") == "ale"
    with pytest.raises(EnvIdError, match=r"actorq\[envpool\]"):
        resolve_engine("envpool")
    monkeypatch.setattr(atari, "envpool_installed", lambda: True)
    assert resolve_engine("auto") == "envpool" and resolve_engine("ale") == "ale"


def test_a_broken_envpool_install_is_not_chosen_and_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # found but failing to import (a dependency missing): `auto` must not pick it (every actor
    # would fail), and asking for it says why in one line
    import importlib.util
    import sys

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: object() if n == "envpool" else real(n, *a)
    )
    monkeypatch.setitem(sys.modules, "envpool", None)  # `import envpool` raises ImportError
    atari.envpool_problem.cache_clear()
    try:
        assert "does not import" in str(atari.envpool_problem())
        assert resolve_engine("auto") == "ale"
        with pytest.raises(EnvIdError, match=r"actorq\[envpool\].*does not import") as e:
            resolve_engine("envpool")
        assert "\n" not in str(e.value)
    finally:
        atari.envpool_problem.cache_clear()


def test_the_ale_engine_is_one_python_env_per_copy() -> None:
    pytest.importorskip("ale_py")
    from actorq.envs import make_vector_env

    vec = make_vector_env("atari:Pong", 2, engine="ale")
    try:
        assert isinstance(vec, gym.vector.SyncVectorEnv)
        assert vec.single_observation_space.shape == (4, 84, 84)
    finally:
        vec.close()


# -- EnvPool itself (the [envpool] extra; CI installs [atari] only) ---------------------------
def test_envpool_frames_agree_with_the_python_path_and_a_lost_life_goes_on() -> None:
    pytest.importorskip("envpool")
    pytest.importorskip("ale_py")
    from actorq.envs import make_vector_env
    from actorq.envs.atari import make_atari_env

    ale = make_atari_env("Breakout", noop_max=0)
    pool = make_vector_env("atari:Breakout", 1, engine="envpool", noop_max=0)
    try:
        assert isinstance(pool, EnvPoolVector)
        a, _ = ale.reset(seed=0)
        b, _ = pool.reset(seed=0)
        assert b.shape == (1, 4, 84, 84) and b.dtype == np.uint8
        for action in [1, 2, 2, 3, 3, 0] * 8:
            a, *_ = ale.step(action)
            b, *_ = pool.step(np.array([action]))
            # Breakout's screen is black: the engines' grayscale conversions differ little
            assert np.mean(a != b[0]) < 0.02
        # random play until a life is lost: the game goes on with one life fewer (episodic
        # life under same-step autoreset), not a new game of five
        rng = np.random.default_rng(0)
        lives = 5
        for _ in range(2000):
            _obs, _, term, _, info = pool.step(rng.integers(0, 4, 1))
            if term[0]:
                assert info["final_obs"][0].shape == (4, 84, 84)
                assert info["lives"][0] == lives - 1
                break
            lives = int(info["lives"][0])
        else:
            pytest.fail("no life lost in 2,000 random steps of Breakout")
    finally:
        ale.close()
        pool.close()


def test_envpool_evaluation_serves_after_a_lost_life() -> None:
    # a policy that never presses FIRE still plays the whole game: served after each lost life
    pytest.importorskip("envpool")
    from actorq.envs import make_vector_env

    pool = make_vector_env("atari:Breakout", 1, engine="envpool", mode="eval")
    try:
        pool.reset(seed=0)
        lives = []
        for _ in range(3000):
            _, _, term, trunc, info = pool.step(np.zeros(1, np.int64))
            lives.append(int(info["lives"][0]))
            if term[0] or trunc[0]:
                break
        # the info after the game's end is the next game's (5 lives): look before it
        assert term[0] and not trunc[0] and sorted(set(lives[:-1])) == [1, 2, 3, 4, 5]
    finally:
        pool.close()


def test_a_run_saves_the_engine_it_resolved_and_old_runs_read_as_ale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("ale_py")
    from actorq import DQNConfig
    from actorq.run.directory import run_config_from_json
    from actorq.rundir import RunDir

    monkeypatch.setattr(atari, "envpool_installed", lambda: True)
    cfg = DQNConfig(env="atari:Pong", precision="fp32")
    cfg.validate()
    assert cfg.atari_engine == "envpool" and cfg.env_kwargs() == {"engine": "envpool"}
    saved = cfg.to_json()
    assert saved["atari_engine"] == "envpool"
    monkeypatch.setattr(atari, "envpool_installed", lambda: False)
    with pytest.raises(EnvIdError, match=r"actorq\[envpool\]"):  # never silently ale's frames
        run_config_from_json(RunDir("r"), saved)
    legacy = {k: v for k, v in saved.items() if k != "atari_engine"}
    assert run_config_from_json(RunDir("r"), legacy).atari_engine == "ale"
    assert DQNConfig(env="gym:CartPole-v1").env_kwargs() == {}
