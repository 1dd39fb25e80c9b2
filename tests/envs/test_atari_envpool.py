"""EnvPool as the actors' Atari engine: same-step autoreset over EnvPool's next-step reset, the
engine choice in one line, and (where EnvPool is installed) frames that agree with the Python
path and a game that goes on after a lost life."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from actorq.envs import atari, atari_envpool
from actorq.envs.atari import resolve_engine
from actorq.envs.atari_envpool import EnvPoolVector
from actorq.errors import EnvIdError


class FakePool:
    """EnvPool's contract as the adapter uses it (whole games, ``stack_num=1``): env ``i``'s
    frame is ``[[i, t], [game, action]]`` (``t`` its step in the game); it loses a life at its
    steps in ``lose[i]`` (lives 5 -> 4 -> ..., the game going on) and its game ends at its steps
    in ``over[i]``; a step of an ended env is its reset (a new game, ``t`` 0, FIRE's action 1)."""

    def __init__(
        self, n: int, over: dict[int, set[int]], lose: dict[int, set[int]] | None = None
    ) -> None:
        self.n, self.over, self.lose = n, over, lose or {}
        self.t = np.zeros(n, np.int64)
        self.game = np.zeros(n, np.int64)
        self.lives = np.full(n, 5)
        self.last = np.zeros(n, np.int64)
        self.ended = np.zeros(n, bool)
        self.calls: list[tuple[list[int], list[int]]] = []
        self.observation_space = gym.spaces.Box(0, 255, (1, 2, 2), np.uint8)
        self.action_space = gym.spaces.Discrete(4)

    def _frames(self, ids: list[int]) -> np.ndarray:
        return np.array([[[[i, self.t[i]], [self.game[i], self.last[i]]]] for i in ids], np.uint8)

    def reset(self) -> tuple[np.ndarray, dict[str, Any]]:
        self.t[:], self.lives[:], self.last[:] = 0, 5, 1
        return self._frames(list(range(self.n))), {"lives": self.lives.copy()}

    def step(self, actions: np.ndarray, env_id: np.ndarray | None = None) -> tuple[Any, ...]:
        ids = list(range(self.n)) if env_id is None else [int(i) for i in env_id]
        assert len(actions) == len(ids)
        self.calls.append((ids, [int(a) for a in actions]))
        term = np.zeros(len(ids), bool)
        for j, i in enumerate(ids):
            if self.ended[i]:  # EnvPool resets an ended env on its next step
                self.t[i], self.lives[i], self.last[i], self.ended[i] = 0, 5, 1, False
                self.game[i] += 1
                continue
            self.t[i] += 1
            self.last[i] = actions[j]
            if int(self.t[i]) in self.lose.get(i, set()):
                self.lives[i] -= 1
            term[j] = self.ended[i] = int(self.t[i]) in self.over.get(i, set())
        info = {"lives": self.lives[ids].copy(), "env_id": np.array(ids, np.int32)}
        return (
            self._frames(ids),
            np.ones(len(ids), np.float32),
            term,
            np.zeros(len(ids), bool),
            info,
        )

    def close(self) -> None:
        pass


def fake_vector(
    monkeypatch: pytest.MonkeyPatch,
    n: int,
    over: dict[int, set[int]],
    lose: dict[int, set[int]] | None = None,
    fire: bool = True,
    **options: Any,
) -> Any:
    pool = FakePool(n, over, lose)
    monkeypatch.setattr(EnvPoolVector, "_make", lambda self, seed: pool)
    monkeypatch.setattr(atari_envpool, "_fire_game", lambda name: fire)
    return EnvPoolVector("Breakout", n, **options), pool


def _t(obs: np.ndarray) -> list[list[int]]:
    """Each env's stack as the frames' steps in the game."""
    return obs[:, :, 0, 1].tolist()


def test_an_ended_game_returns_the_next_at_once_and_its_last_stack_as_final(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vec, pool = fake_vector(monkeypatch, 3, {1: {2}, 2: {2, 3}})
    assert vec._kwargs["stack_num"] == 1 and not vec._kwargs["episodic_life"]
    assert vec.single_observation_space.shape == (4, 2, 2)
    obs, _ = vec.reset(seed=5)
    assert _t(obs) == [[0, 0, 0, 0]] * 3  # a new stack repeats its first frame
    obs, rew, term, _, info = vec.step(np.zeros(3, np.int64))
    assert _t(obs) == [[0, 0, 0, 1]] * 3 and "final_obs" not in info
    pool.calls.clear()
    obs, rew, term, _, info = vec.step(np.zeros(3, np.int64))
    assert term.tolist() == [False, True, True]
    # the ended envs' reset step was taken for them alone, in the same call
    assert [c[0] for c in pool.calls] == [[0, 1, 2], [1, 2]]
    assert _t(obs) == [[0, 0, 1, 2], [0, 0, 0, 0], [0, 0, 0, 0]]  # new games' first frames
    assert obs[1, :, 1, 0].tolist() == [1] * 4  # game 1
    assert info["final_obs"][0] is None and info["final_obs"][1][:, 0, 1].tolist() == [0, 0, 1, 2]
    obs, rew, term, _trunc, info = vec.step(np.zeros(3, np.int64))
    assert _t(obs)[2] == [0, 0, 0, 1] and not term.any()  # env 2's second game goes on
    assert rew.dtype == np.float64 and vec.action_space.shape == (3,)


def test_training_ends_the_episode_at_a_lost_life_serves_and_starts_a_fresh_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the Python path's EpisodicLife + FireReset + FrameStackObservation: the no-op, FIRE
    and action 2 for that env alone, then the new life's frame ×4; the game goes on."""
    vec, pool = fake_vector(monkeypatch, 2, {}, {0: {3}})
    vec.reset(seed=0)
    vec.step(np.full(2, 3))
    vec.step(np.full(2, 3))
    pool.calls.clear()
    obs, _, term, _, info = vec.step(np.full(2, 3))  # env 0 loses a life at its step 3
    assert term.tolist() == [True, False] and info["lives"].tolist() == [4, 5]
    assert pool.calls == [([0, 1], [3, 3]), ([0], [0]), ([0], [1]), ([0], [2])]
    assert info["final_obs"][0][:, 0, 1].tolist() == [0, 1, 2, 3]
    assert _t(obs) == [[6, 6, 6, 6], [0, 1, 2, 3]]  # the same game, three steps on
    assert obs[0, :, 1, 1].tolist() == [2] * 4  # the last serve step's frame (action 2)
    obs, _, term, *_ = vec.step(np.full(2, 3))
    assert _t(obs)[0] == [6, 6, 6, 7] and not term.any()
    novec, nopool = fake_vector(monkeypatch, 1, {}, {0: {1}}, fire=False)
    novec.reset(seed=0)
    nopool.calls.clear()
    novec.step(np.zeros(1, np.int64))
    assert [c[1] for c in nopool.calls] == [[0], [0]]  # no FIRE in a game without it


def test_evaluation_plays_on_after_a_lost_life_and_ends_on_the_game_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vec, _ = fake_vector(monkeypatch, 2, {0: {9}}, {0: {2}}, mode="eval")
    assert not vec._kwargs["reward_clip"] and not vec._kwargs["episodic_life"]
    vec.reset(seed=0)
    vec.step(np.zeros(2, np.int64))
    obs, rew, term, trunc, info = vec.step(np.zeros(2, np.int64))  # env 0 loses a life
    assert not term.any() and not trunc.any() and "final_obs" not in info and rew[0] == 1.0
    assert _t(obs)[0] == [5, 5, 5, 5] and info["lives"][0] == 4  # served, a fresh stack
    for _ in range(4):
        obs, _, term, trunc, info = vec.step(np.zeros(2, np.int64))
    assert term.tolist() == [True, False] and not trunc.any()  # the game's end (its step 9)
    assert info["final_obs"][0][:, 0, 1].tolist() == [6, 7, 8, 9]
    train, _ = fake_vector(monkeypatch, 1, {}, {0: {2}})
    assert train._kwargs["reward_clip"]


def test_a_game_the_serve_ends_is_cut_in_evaluation_and_restarted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vec, pool = fake_vector(monkeypatch, 1, {0: {3}}, {0: {1}}, mode="eval")
    vec.reset(seed=0)
    pool.calls.clear()
    obs, _, term, trunc, info = vec.step(np.zeros(1, np.int64))  # a life lost; FIRE ends it
    assert trunc.tolist() == [True] and not term.any()
    assert [c[1] for c in pool.calls] == [[0], [0], [1], [0]]  # no action 2: EnvPool's reset
    assert _t(obs) == [[0, 0, 0, 0]] and obs[0, 0, 1, 0] == 1  # the next game
    assert info["final_obs"][0][:, 0, 1].tolist() == [0, 0, 0, 1]


def test_training_reports_the_games_raw_points_the_serves_and_their_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each step's ``info["score"]`` is its raw points (EnvPool's ``info["reward"]``, the
    reward before its clipping) plus those of the serve steps taken since (a lost life's: the
    same game's); ``info["game_over"]`` is the game's end, also where a serve ended it."""
    vec, pool = fake_vector(monkeypatch, 2, {0: {9}, 1: {3}}, {0: {2}, 1: {1}})
    real_step = pool.step

    def raw(actions: np.ndarray, env_id: np.ndarray | None = None) -> tuple[Any, ...]:
        out = real_step(actions, env_id)
        out[4]["reward"] = np.full(len(out[1]), 10.0)  # 10 points a step; clipped to 1
        return out

    monkeypatch.setattr(pool, "step", raw)
    vec.reset(seed=0)
    _, rew, _, _, info = vec.step(np.zeros(2, np.int64))  # env 1 loses a life; its serve's
    # no-op and FIRE (its steps 2, 3) end its game: their points are that game's last
    assert rew.tolist() == [1.0, 1.0] and info["score"].tolist() == [10.0, 30.0]
    assert info["game_over"].tolist() == [False, True]
    # env 0 loses a life at its step 2; env 1's second game goes as its first, its first
    # step's points with those of EnvPool's reset step that started it
    _, _, term, _, info = vec.step(np.zeros(2, np.int64))
    assert info["score"].tolist() == [10.0, 40.0] and term.tolist() == [True, True]
    assert info["game_over"].tolist() == [False, True]
    _, _, _, _, info = vec.step(np.zeros(2, np.int64))
    assert info["score"].tolist() == [40.0, 40.0]  # env 0: its serve's three steps and this
    ev, _ = fake_vector(monkeypatch, 1, {}, {}, mode="eval")
    ev.reset(seed=0)
    assert "score" not in ev.step(np.zeros(1, np.int64))[4]  # evaluation's rewards are raw


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
    # EnvPool's seeds are int32 and env i takes seed + i: a run's (numpy's range) fit
    vec.reset(seed=2**32 - 1)
    vec.reset(seed=2**32 - 1)  # the same seed: the same pool
    assert seeds[3:] == [(2**32 - 1) % (2**31 - 2)] and seeds[3] + 1 < 2**31


def test_rows_come_back_in_env_order_whatever_order_the_pool_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One EnvPool thread returns envs in id order; more threads need not: rows are put in env
    order by ``info["env_id"]`` (a frame filed under the wrong env corrupts its stacks)."""
    vec, pool = fake_vector(monkeypatch, 3, {})
    vec.reset(seed=0)
    real_step = pool.step

    def reversed_rows(actions: np.ndarray, env_id: np.ndarray | None = None) -> tuple[Any, ...]:
        obs, rew, term, trunc, info = real_step(actions, env_id)
        if env_id is not None:
            return obs, rew, term, trunc, info
        flip = slice(None, None, -1)
        info = {k: v[flip] for k, v in info.items()}
        return obs[flip], rew[flip], term[flip], trunc[flip], info

    monkeypatch.setattr(pool, "step", reversed_rows)
    obs, *_ = vec.step(np.array([1, 2, 3]))
    assert obs[:, -1, 0, 0].tolist() == [0, 1, 2]  # each env's own frame: [[i, t], ...]
    assert obs[:, -1, 1, 1].tolist() == [1, 2, 3]  # and the action it took


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
            obs, _, term, _, info = pool.step(rng.integers(0, 4, 1))
            if term[0]:
                assert info["final_obs"][0].shape == (4, 84, 84)
                assert info["lives"][0] == lives - 1
                # the new life's stack starts afresh, as the Python path's reset pads it
                assert all(np.array_equal(obs[0, k], obs[0, 3]) for k in range(3))
                obs, *_ = pool.step(np.array([0]))
                assert np.array_equal(obs[0, 2], obs[0, 0])
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


def test_the_frame_replay_rebuilds_the_stacks_the_adapter_returned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over lost lives, serves and game overs, every transition the frame replay rebuilds from
    single frames is one the naive n-step adder stores from the adapter's own stacks: the
    frames the actors act on are the ones the learner trains on."""
    from actorq.replay.adders import NStepAdder
    from actorq.replay.frames import FrameAdder, FrameStackReplay
    from actorq.types import ArraySpec, transition_specs
    from actorq.types import EnvSpec as Spec

    k, n = 3, 2
    rng = np.random.default_rng(0)
    lose = {i: set(rng.choice(np.arange(2, 150), 12, replace=False).tolist()) for i in range(k)}
    over = {i: set(rng.choice(np.arange(20, 150), 3, replace=False).tolist()) for i in range(k)}
    vec, _ = fake_vector(monkeypatch, k, over, lose)
    action, frame = ArraySpec((), "int64"), ArraySpec((2, 2), "uint8")
    spec = Spec("fake", ArraySpec((4, 2, 2), "uint8"), action, num_actions=4)
    naive, frames = NStepAdder(n, 0.9, k, spec.observation, action), FrameAdder(k, 0, action)
    obs, _ = vec.reset(seed=0)
    naive.observe_first(obs)
    frames.observe_first(obs)
    replay = FrameStackReplay(k * 1000, k, frame, action, 4, n, 0.9)
    out, ends = [], 0
    for _ in range(150):
        a = rng.integers(0, 4, k)
        obs, r, term, trunc, info = vec.step(a)
        done = term | trunc
        ends += int(done.sum())
        final = None
        if done.any():
            final = np.stack([info["final_obs"][i] if d else obs[i] for i, d in enumerate(done)])
        args = (a, r.astype(np.float32), obs, term, trunc, final)
        out.append(naive.add(*args))
        replay.insert(frames.add(*args))
    assert ends > 20
    want = {f: np.concatenate([o[f] for o in out if o]) for f in transition_specs(spec)}
    got = replay.transitions(*replay.valid_starts())

    def rows(b: Any) -> list[tuple[bytes, ...]]:
        return sorted(
            (b["obs"][i].tobytes(), b["action"][i].tobytes(), b["next_obs"][i].tobytes())
            for i in range(len(b["action"]))
        )

    assert rows(got) == rows(want)
