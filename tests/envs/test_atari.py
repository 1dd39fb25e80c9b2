"""``atari:`` ids: the standard DQN preprocessing, frame for frame as Gymnasium's wrappers make it,
training-only life and reward handling, and one line for a bad id or a missing extra."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actorq.envs import ENV_FAMILIES, env_spec, eval_env_kwargs, make_env, validate_env_id
from actorq.errors import EnvIdError

ale_py = pytest.importorskip("ale_py")
pytest.importorskip("cv2")


def _reference(game: str, sticky: float = 0.0) -> gym.Env:
    """Gymnasium's own wrappers, as its docs compose them (no episodic life, raw rewards)."""
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=sticky)
    return FrameStackObservation(AtariPreprocessing(env, noop_max=30), 4)


def _same_frames(ours: gym.Env, ref: gym.Env, seed: int, steps: int) -> bool:
    """Whether ``ours`` and ``ref`` show the same frames for ``steps`` random actions."""
    same = np.array_equal(ours.reset(seed=seed)[0], ref.reset(seed=seed)[0])
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        a = int(rng.integers(ours.action_space.n))
        s1, s2 = ours.step(a), ref.step(a)
        same = same and np.array_equal(s1[0], s2[0])
        if s1[2] or s1[3] or s2[2] or s2[3]:
            break
    return same


def test_frames_match_gymnasium_atari_preprocessing() -> None:
    # eval mode without FIRE on reset is exactly AtariPreprocessing + FrameStackObservation
    ours = make_env("atari:Pong", mode="eval", fire_reset=False)
    ref = _reference("Pong")
    o1, _ = ours.reset(seed=3)
    o2, _ = ref.reset(seed=3)
    assert o1.shape == (4, 84, 84) and o1.dtype == np.uint8
    np.testing.assert_array_equal(o1, o2)
    rng = np.random.default_rng(0)
    for _ in range(150):
        a = int(rng.integers(ours.action_space.n))
        s1, s2 = ours.step(a), ref.step(a)
        np.testing.assert_array_equal(s1[0], s2[0])
        assert s1[1:4] == s2[1:4]
        if s1[2] or s1[3]:
            break
    assert not np.array_equal(s1[0][0], s1[0][3])  # the game moved: the test compared frames


def test_noop_starts_differ_by_seed_and_repeat_for_a_seed() -> None:
    env = make_env("atari:Pong", mode="eval")
    a, _ = env.reset(seed=1)
    b, _ = env.reset(seed=1)
    np.testing.assert_array_equal(a, b)
    firsts = {env.reset(seed=s)[0].tobytes() for s in range(6)}
    assert len(firsts) > 1  # 1..30 no-ops drawn per seed


def test_training_clips_rewards_and_ends_an_episode_per_life() -> None:
    train = make_env("atari:Breakout")  # 5 lives; FIRE on reset serves the ball
    train.reset(seed=0)
    rng = np.random.default_rng(0)
    rewards, lives_at_end = [], []
    for _ in range(3000):
        _, r, term, trunc, info = train.step(int(rng.integers(train.action_space.n)))
        rewards.append(r)
        if term or trunc:
            lives_at_end.append(info["lives"])
            if len(lives_at_end) == 2:
                break
            train.reset()
    assert set(np.unique(rewards)) <= {-1.0, 0.0, 1.0}
    assert lives_at_end[:2] == [4, 3]  # two lost lives, two learner episodes, one game


def test_evaluation_plays_full_games_on_the_raw_score() -> None:
    assert eval_env_kwargs("atari:Breakout") == {"mode": "eval"}
    assert eval_env_kwargs("gym:CartPole-v1", {"x": 1}) == {"x": 1}
    env = make_env("atari:Breakout", **eval_env_kwargs("atari:Breakout"))
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    lives = []
    for _ in range(5000):
        _, _, term, trunc, info = env.step(int(rng.integers(env.action_space.n)))
        lives.append(info["lives"])
        if term or trunc:
            break
    assert term and lives[-1] == 0 and max(lives) == 5  # one episode: every life of the game


def test_evaluation_goes_on_after_a_lost_life_as_training_resets() -> None:
    # A policy that never presses FIRE (training's reset serves for it after each lost life):
    # evaluation must serve too, or a trained policy waits out the 27,000-step cut after its
    # first lost life. Same seed and actions: eval's observation after a lost life is the one
    # training's reset returns, and the game ends on its own with every life played.
    train, ev = make_env("atari:Breakout"), make_env("atari:Breakout", mode="eval")
    train.reset(seed=4)
    ev.reset(seed=4)
    lost = 0
    for _ in range(3000):
        o_train, _, t_term, _, t_info = train.step(0)
        o_ev, _, term, trunc, info = ev.step(0)
        if t_term and t_info["lives"] > 0:  # a life lost: training's next episode starts
            o_train, _ = train.reset()
            lost += 1
            assert not term and info["lives"] == t_info["lives"]
        np.testing.assert_array_equal(o_ev, o_train)
        if term or trunc:
            break
    assert term and not trunc and info["lives"] == 0 and lost == 4


def test_spec_keeps_pixels_uint8() -> None:
    spec = env_spec("atari:Pong")
    assert spec.observation.shape == (4, 84, 84) and spec.observation.dtype == "uint8"
    assert spec.num_actions == 6 and spec.frame_stack == 4  # the frame replay applies


@pytest.mark.parametrize(
    ("env_id", "needle"),
    [("atari:Pongg", "did you mean 'atari:Pong'"), ("atari:pong", "'atari:Pong'")],
)
def test_bad_ids_are_one_line(env_id: str, needle: str) -> None:
    with pytest.raises(EnvIdError) as e:
        validate_env_id(env_id)
    assert "\n" not in str(e.value) and needle in str(e.value)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["train", "eval", 0.25, 30, 4, 84]),
)
_KEYS = st.sampled_from(
    ["mode", "sticky", "noop_max", "frame_skip", "screen_size", "frame_stack", "fire_reset", "x"]
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=4))
def test_options_are_checked_in_one_line(kwargs: dict[str, object]) -> None:
    """Every ``env_kwargs`` an ``atari:`` env takes is checked when it is read: a value out of
    range, of the wrong type or non-finite is one EnvIdError line, never the emulator's
    traceback (or, for a NaN sticky probability, a game that silently plays without it)."""
    from actorq.envs.atari import AtariOptions

    try:
        o = AtariOptions.parse(kwargs)
    except EnvIdError as e:
        assert "\n" not in str(e) and str(e).startswith("atari: ")
        return
    assert o.mode in ("train", "eval") and 0 <= o.sticky <= 1 and isinstance(o.fire_reset, bool)
    assert 1 <= o.frame_skip <= 64 and o.screen_size >= 36 and o.noop_max >= 0


def test_missing_extra_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py now raises ImportError
    with pytest.raises(EnvIdError) as e:
        env_spec("atari:Pong")
    assert "\n" not in str(e.value) and "pip install 'actorq[atari]'" in str(e.value)
    assert ENV_FAMILIES["atari"].extra == "atari"


def test_sticky_actions_from_the_config_reach_the_emulator() -> None:
    from actorq.agents.ppo.config import PPOConfig

    cfg = PPOConfig(env="atari:Pong", atari_engine="ale", atari_sticky=0.25)
    cfg.validate()
    kwargs = {**eval_env_kwargs(cfg.env, cfg.env_kwargs()), "fire_reset": False}
    assert _same_frames(make_env(cfg.env, **kwargs), _reference("Pong", 0.25), 5, 300)
    # and they change the game: the same actions without them play another one
    assert not _same_frames(make_env(cfg.env, **kwargs), _reference("Pong"), 5, 300)
    assert "sticky" not in PPOConfig(env="atari:Pong", atari_engine="ale").env_kwargs()


def _train_and_eval_game(engine: str, game: str, seed: int) -> tuple[Any, ...]:
    """One game played in both modes on the same seed and actions (the same trajectory: eval
    serves after a lost life as training's reset does): training's games as the actors tally
    them, its learner episodes and clipped rewards; evaluation's (score, steps)."""
    from actorq.core.loop import GameTally
    from actorq.envs import make_vector_env

    train = make_vector_env(f"atari:{game}", 1, engine=engine)
    ev = make_vector_env(f"atari:{game}", 1, engine=engine, mode="eval")
    tally, games, lives, clipped = GameTally(1), [], 0, 0.0
    try:
        train.reset(seed=seed)
        ev.reset(seed=seed)
        rng = np.random.default_rng(seed)
        score, steps = 0.0, 0
        for _ in range(5000):
            a = rng.integers(0, train.single_action_space.n, 1)
            _, r, term, trunc, info = train.step(a)
            _, er, eterm, etrunc, _ = ev.step(a)
            games += tally.step(info, term | trunc) or []
            lives += int(term[0] or trunc[0])
            clipped += float(r[0])
            score, steps = score + float(er[0]), steps + 1
            if eterm[0] or etrunc[0]:
                return games, lives, clipped, (score, steps)
    finally:
        train.close()
        ev.close()
    pytest.fail(f"no {game} game ended in 5,000 random steps")


@pytest.mark.parametrize("engine", ["ale", "envpool"])
def test_actors_count_training_as_whole_games_on_the_raw_score(engine: str) -> None:
    # what CleanRL's and SB3's training curves show: games, not lives, and points, not signs
    if engine == "envpool":
        pytest.importorskip("envpool")
    games, lives, clipped, played = _train_and_eval_game(engine, "SpaceInvaders", 0)
    assert games == [played]  # one game, its evaluation's score and length
    assert lives == 3  # three learner episodes: one a life
    assert played[0] > clipped > 0  # invaders score 5..30 points: clipping counts them 1


class _Lives(gym.Env[np.ndarray, int]):
    """An ALE-like game of 10 points a step and 3 lives: a life lost at step ``lose``, the game
    over at step ``over``."""

    observation_space = gym.spaces.Box(0, 255, (2, 2), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, lose: int, over: int) -> None:
        self.lose, self.over, self.t, self.n = lose, over, 0, 3
        self.ale = self  # EpisodicLife reads env.unwrapped.ale.lives()

    def lives(self) -> int:
        return self.n

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        self.t, self.n = 0, 3
        return np.zeros((2, 2), np.uint8), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        self.n -= int(self.t == self.lose)
        return np.full((2, 2), self.t, np.uint8), 10.0, self.t == self.over, False, {}


def test_a_game_the_serve_ends_is_reported_with_its_points() -> None:
    """The no-op after a lost life ends the game (inside the vector env's reset): the game's
    end and the no-op's points come with that step, then the next game counts from zero."""
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    from actorq.core.loop import GameTally
    from actorq.envs.atari import ClipReward, EpisodicLife, GameScore

    def make() -> gym.Env:
        life = EpisodicLife(_Lives(lose=2, over=3))
        return GameScore(ClipReward(life), life)

    vec = SyncVectorEnv([make], autoreset_mode=AutoresetMode.SAME_STEP)
    vec.reset(seed=0)
    tally, games = GameTally(1), []
    for _ in range(4):
        _, r, term, trunc, info = vec.step(np.zeros(1, np.int64))
        games += tally.step(info, term | trunc) or []
    assert r.tolist() == [1.0]  # clipped for the learner
    # game 1: steps 1, 2 (a life lost) and the serve's no-op (step 3, game over): 30 points in
    # 2 agent steps; game 2: a life lost at its step 2, its no-op ending it again
    assert games == [(30.0, 2), (30.0, 2)]
