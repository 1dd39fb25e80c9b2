"""Atari 2600 games through the Arcade Learning Environment: ``make_env("atari:Pong")``.

Bellemare et al., "The Arcade Learning Environment" (JAIR 2013); the preprocessing is DQN's
(Mnih et al., "Human-level control through deep reinforcement learning", Nature 2015) as
Gymnasium, Stable-Baselines3 and CleanRL apply it. ``atari:<Game>`` is ``ALE/<Game>-v5`` (the
game names of ale-py 0.12, e.g. ``Pong``, ``Breakout``, ``SpaceInvaders``), needing the
``[atari]`` extra (ale-py with its ROMs, and OpenCV for the resize Gymnasium's
:class:`~gymnasium.wrappers.AtariPreprocessing` uses).

Preprocessing, in this order (the Gymnasium wrappers where they exist, so frames are identical
to ``AtariPreprocessing`` + ``FrameStackObservation`` on the same seed,
``tests/envs/test_atari.py``):

- **no-op starts**: a random 1..30 no-ops after each reset (``noop_max``);
- **frame skip 4 with max-pooling** of the last two frames (the emulator's flicker);
- **84×84 grayscale** (ALE's grayscale screen, ``cv2.INTER_AREA``), uint8 (never scaled here:
  the learner divides by 255 on its device, so actors, channels and replay move bytes);
- **training only** (``mode="train"``, the default): *episodic life* — losing a life ends the
  learner's episode (``terminated``), but the game goes on and the next reset only steps a
  no-op (SB3's and CleanRL's ``EpisodicLifeEnv``; Gymnasium's ``terminal_on_life_loss`` would
  restart the game instead) — and *reward clipping* to {-1, 0, +1} (the sign);
- **FIRE on reset** for games whose second action is FIRE (Breakout would otherwise wait for
  it; SB3's and CleanRL's ``FireResetEnv``), in both modes (``fire_reset``);
- **the game's score for training curves** (training only): each step's ``info["score"]`` is
  its raw points (those of the serve's steps after a lost life included) and
  ``info["game_over"]`` says the game ended, so actors report games on the raw score where the
  learner sees lives and clipped rewards (:class:`GameScore`; ``actorq.envs.SCORE``);
- **4-frame stack**, observations ``(4, 84, 84)`` uint8, a new episode's stack padded with its
  first frame (``FrameStackObservation``'s ``padding_type="reset"``).

``mode="eval"`` keeps full games and the raw score: what evaluations report
(:data:`~actorq.envs.ENV_FAMILIES`' ``eval_kwargs``). A lost life there is followed by the
steps training takes after one (the no-op, then FIRE where the game waits for it), but the game
goes on (:class:`FullGames`): a policy trained never to serve (training's reset serves for it)
would otherwise wait out Breakout's 27,000-step cut after its first lost life. SB3's and
CleanRL's evaluations do the same (their training wrappers, scored per game).

**Sticky actions are off** (``repeat_action_probability=0``, where ``-v5`` defaults to 0.25,
Machado et al. 2018): the scores actorq is compared with — rl-baselines3-zoo's and CleanRL's
Atari tables, Pong +18 and Breakout 200 — were measured on ``<Game>NoFrameskip-v4``, which has
none. ``--atari-sticky 0.25`` (``make_env("atari:<Game>", sticky=0.25)``) gives Machado et
al.'s protocol; runs and benchmarks here use the tables'. Episodes are cut at v5's 108,000
emulator frames (27,000 agent steps, ``truncated``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.util
from typing import Any, Literal, SupportsFloat

import gymnasium as gym
import numpy as np

from actorq.envs import GAME_OVER, SCORE
from actorq.errors import EnvIdError, first_line

ATARI_EXTRA_HINT = "atari: environments need the [atari] extra: pip install 'actorq[atari]'"

ENGINES = ("auto", "envpool", "ale")
ENVPOOL_HINT = "--atari-engine envpool needs EnvPool: pip install 'actorq[envpool]'"

#: What ``actorq train ppo|dqn --env atari:<Game>`` starts from (flags override each field;
#: :func:`actorq.envs.preset`): rl-baselines3-zoo's ``atari`` hyperparameters (``ppo.yml`` at
#: 00128b5, ``dqn.yml`` at 22e3ff2; CleanRL's ``ppo_atari.py``/``dqn_atari.py`` differ in
#: details), on actorq's fields, over 10M frames (2.5M agent steps) with an evaluation of 10
#: full games every 1M frames: the settings ``benchmarks/specs/atari.toml`` runs (a test holds
#: them equal). The generic defaults are CartPole's and do not learn Atari in a useful time.
PRESETS: dict[str, dict[str, Any]] = {
    # Schulman et al. 2017's Atari setting: 8 envs x 128 steps, 4 epochs of 4 minibatches,
    # clip 0.1, lr 2.5e-4 annealed; rl-zoo anneals the clip too (actorq keeps it) and does not
    # clip the value loss (SB3's clip_range_vf None)
    "ppo": {
        "actors": 1,
        "envs_per_actor": 8,
        "num_steps": 128,
        "update_epochs": 4,
        "minibatch_size": 256,
        "learning_rate": 2.5e-4,
        "anneal_lr": True,
        "clip_coef": 0.1,
        "clip_vloss": False,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "gae_lambda": 0.95,
        "max_grad_norm": 0.5,
        "gamma": 0.99,
        "total_steps": 2_500_000,
        "eval_every": 250_000,
        "eval_episodes": 10,
        "checkpoint_every": 20,
        "learner_threads": 0,  # auto: every core while the actor waits (SB3: torch's default)
    },
    # Mnih et al. 2015's DQN as rl-zoo trains it: lr 1e-4, batch 32, learning from 100k steps,
    # one update per 4 steps (8 samples per insert at batch 32), target copied every 1,000
    # steps (250 updates), 1-step targets, no double Q or dueling head, grad clip 10, Adam eps
    # 1e-8; a 100k-transition frame replay (~0.7 GB). Not set: --learner-mode compile (1.27x
    # this learner on a CPU, docs/atari.md; it needs a C++ compiler) and --device cuda
    "dqn": {
        "actors": 1,
        "envs_per_actor": 8,
        "replay_size": 100_000,
        "min_replay_size": 100_000,
        "batch_size": 32,
        "samples_per_insert": 8.0,
        "target_update_period": 250,
        "n_step": 1,
        "double_q": False,
        "dueling": False,
        "learning_rate": 1e-4,
        "adam_eps": 1e-8,
        "max_grad_norm": 10.0,
        "gamma": 0.99,
        "total_steps": 2_500_000,
        "eval_every": 250_000,
        "eval_episodes": 10,
        "checkpoint_every": 25_000,
    },
}


@functools.cache
def envpool_problem() -> str | None:
    """None where EnvPool imports; else why not, in one line. Imported, not only found: a
    broken install (a dependency missing) would otherwise pass for EnvPool at the run's start
    and then fail in every actor."""
    if importlib.util.find_spec("envpool") is None:
        return "not installed"
    try:
        import envpool  # noqa: F401
    except Exception as e:  # any import failure: the engine is unusable, whatever the cause
        return f"installed but does not import ({first_line(e)})"
    return None


def envpool_installed() -> bool:
    return envpool_problem() is None


def resolve_engine(engine: str) -> Literal["envpool", "ale"]:
    """``engine`` as the one that will run: ``auto`` is EnvPool where it imports."""
    if engine not in ENGINES:
        raise EnvIdError(f"--atari-engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == "auto":
        return "envpool" if envpool_installed() else "ale"
    if engine == "envpool" and not envpool_installed():
        raise EnvIdError(f"{ENVPOOL_HINT} (EnvPool {envpool_problem() or 'unusable'})")
    return "envpool" if engine == "envpool" else "ale"


def _ale() -> Any:
    try:
        import ale_py
    except ImportError:
        raise EnvIdError(ATARI_EXTRA_HINT) from None
    gym.register_envs(ale_py)
    return ale_py


def atari_games() -> list[str]:
    """The game names ``atari:`` accepts (ale-py's ``ALE/<Game>-v5`` ids)."""
    _ale()
    return sorted(k[4:-3] for k in gym.registry if k.startswith("ALE/") and k.endswith("-v5"))


def validate_atari_id(name: str) -> None:
    """Raise :class:`EnvIdError` (one line) unless ``name`` is a game of ale-py
    (``Pong``, ``Breakout``; the nearest names as a hint)."""
    games = atari_games()
    if name not in games:
        close = difflib.get_close_matches(name, games, n=3, cutoff=0.5)
        close += [g for g in games if g.lower() == name.lower() and g not in close]
        hint = f"; did you mean {', '.join(repr(f'atari:{g}') for g in close)}?" if close else ""
        raise EnvIdError(
            f"unknown Atari game {name!r} in {'atari:' + name!r} (ale-py's ALE/<Game>-v5 "
            f"names, e.g. atari:Pong, atari:Breakout){hint}"
        )


class EpisodicLife(gym.Wrapper[np.ndarray, int, np.ndarray, int]):
    """A lost life ends the learner's episode, not the game (Mnih et al. 2015; SB3's
    ``EpisodicLifeEnv``): ``terminated`` on a life loss, and a reset that follows one only
    steps a no-op, so the agent sees every life of a game from the start of that life."""

    def __init__(self, env: gym.Env[np.ndarray, int]) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True
        self.new_game = True  # whether the last reset started a game (not a life)
        #: raw points since :class:`GameScore` last took them: every emulator step's through
        #: here, the serve's steps inside resets too (above, clipping changes the reward)
        self.points = 0.0
        #: set by :class:`GameScore` while its reset runs: a game that ends then (the serve
        #: after a lost life ended it) leaves its points in ``ended`` for GameScore to report
        self.in_reset = False
        self.ended: float | None = None

    def _game_ended_in_reset(self) -> None:
        self.ended, self.points = (self.ended or 0.0) + self.points, 0.0

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.points += float(reward)
        self.game_over = bool(terminated or truncated)
        if self.game_over and self.in_reset:  # FIRE's serve ended the game (FireReset's)
            self._game_ended_in_reset()
        lives = int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self.new_game = self.game_over or seed is not None
        if self.new_game:
            obs, info = self.env.reset(seed=seed, options=options)
        else:  # a life was lost: go on from where the game is
            obs, reward, terminated, truncated, info = self.env.step(0)
            self.points += float(reward)
            if terminated or truncated:  # the no-op ended the game (rare): start a new one
                if self.in_reset:
                    self._game_ended_in_reset()
                obs, info = self.env.reset(options=options)
                self.new_game = True
        self.game_over = False
        self.lives = int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]
        return obs, info


def waits_for_fire(meanings: list[str]) -> bool:
    """Whether a game with these action meanings waits for FIRE (its action 1, as SB3's
    ``FireResetEnv`` checks): the rule both engines' resets follow."""
    return len(meanings) >= 3 and meanings[1] == "FIRE"


class FireReset(gym.Wrapper[np.ndarray, int, np.ndarray, int]):
    """Press FIRE (then action 2) after a reset, for games that wait for it (SB3's and
    CleanRL's ``FireResetEnv``; Breakout serves the ball only then)."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        return obs, info


class FullGames(gym.Wrapper[np.ndarray, int, np.ndarray, int]):
    """Evaluation over whole games on top of training's wrappers (``mode="eval"``): a lost
    life's ``terminated`` is replaced by the reset training would take next (``life``'s no-op,
    FIRE, a fresh frame stack), so the episode is the game and its return the raw score."""

    def __init__(self, env: gym.Env[np.ndarray, int], life: EpisodicLife) -> None:
        super().__init__(env)
        self.life = life

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated and not truncated and not self.life.game_over:
            after, after_info = self.env.reset()
            if self.life.new_game:  # the game ended during the serve (rare): it is over
                return obs, reward, False, True, info
            obs, info, terminated = after, after_info, False
        return obs, reward, terminated, truncated, info


class GameScore(gym.Wrapper[np.ndarray, int, np.ndarray, int]):
    """Training's outermost wrapper: each step's raw points (``info["score"]``, taken from
    :class:`EpisodicLife` below the clipping, the serve's steps of the reset before included)
    and whether the game ended on it (``info["game_over"]``): what actors report as the
    training episode's return (:data:`actorq.envs.SCORE`). A game the serve after a lost life
    ended (inside the reset) is reported by the reset's info."""

    def __init__(self, env: gym.Env[np.ndarray, int], life: EpisodicLife) -> None:
        super().__init__(env)
        self.life = life

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:  # a new game from its start: earlier points are not its own
            self.life.points, self.life.ended = 0.0, None
        self.life.in_reset = True
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        finally:
            self.life.in_reset = False
        if self.life.ended is not None:  # the serve after a lost life ended that game: its
            # end and last points come with the reset (a vector env's info of that step)
            info = {**info, SCORE: self.life.ended, GAME_OVER: True}
            self.life.ended = None
        return obs, info

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = {**info, SCORE: self.life.points, GAME_OVER: self.life.game_over}
        self.life.points = 0.0
        return obs, reward, terminated, truncated, info


class ClipReward(gym.RewardWrapper[np.ndarray, int]):
    """Rewards to their sign, {-1, 0, +1} (Mnih et al. 2015): one learning rate for every
    game's score scale. Training only; evaluations report the raw score."""

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(float(reward)))


@dataclasses.dataclass(frozen=True)
class AtariOptions:
    """The preprocessing knobs of ``atari:`` envs (``env_kwargs``), one set for both engines
    (this module's wrappers and :mod:`actorq.envs.atari_envpool`)."""

    mode: Literal["train", "eval"] = "train"
    """train: episodic life and clipped rewards; eval: full games on the raw score."""
    sticky: float = 0.0
    """Probability of repeating the previous action (Machado et al. 2018: 0.25)."""
    noop_max: int = 30
    """Random no-ops after a reset: 1..noop_max (0: none)."""
    frame_skip: int = 4
    screen_size: int = 84
    frame_stack: int = 4
    fire_reset: bool = True
    """Press FIRE after a reset in games that wait for it."""

    @classmethod
    def parse(cls, kwargs: dict[str, Any]) -> AtariOptions:
        """From ``env_kwargs``; one :class:`EnvIdError` line for an unknown key or bad mode."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise EnvIdError(f"atari: unknown option {unknown[0]!r} (known: {', '.join(known)})")
        opts = cls(**kwargs)
        if opts.mode not in ("train", "eval"):
            raise EnvIdError(f"atari: mode must be 'train' or 'eval', got {opts.mode!r}")
        s = opts.sticky  # not (0 <= s <= 1): False for NaN too
        if not isinstance(s, int | float) or isinstance(s, bool) or not 0 <= s <= 1:
            raise EnvIdError(f"atari: sticky must be a probability in [0, 1], got {s!r}")
        for name, least, most in (
            ("noop_max", 0, 1_000), ("frame_skip", 1, 64), ("screen_size", 36, 1_024),
            ("frame_stack", 1, 64),
        ):  # fmt: skip
            v = getattr(opts, name)
            if not isinstance(v, int) or isinstance(v, bool) or not least <= v <= most:
                raise EnvIdError(
                    f"atari: {name} must be an integer in [{least}, {most}], got {v!r}"
                )
        if not isinstance(opts.fire_reset, bool):
            raise EnvIdError(f"atari: fire_reset must be true or false, got {opts.fire_reset!r}")
        return opts


def make_atari_env(name: str, engine: str = "auto", **options: Any) -> gym.Env[np.ndarray, int]:
    """``make_env("atari:<Game>")``: the preprocessed game (see the module docstring) with
    :class:`AtariOptions` (``mode="eval"`` for full games on the raw score). ``engine`` picks what
    vector envs step (:mod:`actorq.envs.atari_envpool`); one env is always this one."""
    o = AtariOptions.parse(options)
    resolve_engine(engine)  # a bad or missing engine is one line wherever the env is made
    validate_atari_id(name)
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    env: gym.Env[Any, Any] = gym.make(
        f"ALE/{name}-v5", frameskip=1, repeat_action_probability=float(o.sticky)
    )
    try:
        env = AtariPreprocessing(
            env, noop_max=o.noop_max, frame_skip=o.frame_skip, screen_size=o.screen_size
        )
    except gym.error.DependencyNotInstalled:  # OpenCV
        env.close()
        raise EnvIdError(f"{ATARI_EXTRA_HINT} (OpenCV is missing)") from None
    life = EpisodicLife(env)  # eval: FullGames turns its life ends back into one game
    env = life
    ale_env: Any = env.unwrapped  # AtariEnv (gymnasium types unwrapped as a plain Env)
    meanings = ale_env.get_action_meanings()
    if o.fire_reset and waits_for_fire(meanings):
        env = FireReset(env)
    if o.mode == "train":
        env = ClipReward(env)
    stacked = FrameStackObservation(env, o.frame_stack)
    return GameScore(stacked, life) if o.mode == "train" else FullGames(stacked, life)
