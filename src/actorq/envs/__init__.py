"""One factory for every environment: ``make_env("gym:CartPole-v1")``,
``make_env("dmc:walker-stand")``.

Ids carry a prefix naming the family; the rest is the family's own id. A family is one entry of
:data:`ENV_FAMILIES` (its validate and make functions, as ``"module:function"``): a new family
is its module and one line there. Gymnasium 1.x API only (5-tuple ``step``, ``reset(seed=)``).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from actorq.errors import EnvIdError, first_line
from actorq.registry import load
from actorq.types import EnvSpec


@dataclasses.dataclass(frozen=True)
class EnvFamily:
    """One family of environments, ids ``<prefix>:<name>``: where its functions live, as
    ``"module:function"`` (imported when an id of the family is used)."""

    validate: str
    """``validate(name)``: raise :class:`EnvIdError` (one line) unless ``name`` can be made."""
    make: str
    """``make(name, **kwargs) -> gymnasium.Env`` (Gymnasium 1.x API)."""
    example: str
    """An id of the family, for error messages."""
    extra: str | None = None
    """The pip extra the family needs (named when its packages are missing)."""
    eval_kwargs: tuple[tuple[str, Any], ...] = ()
    """``make`` keyword arguments evaluations add (Atari: full games on the raw score)."""
    vector: str | None = None
    """``vector(name, num_envs, **kwargs)``: a vector env of the family's own engine (Atari:
    EnvPool), or ``None`` for one ``make`` env per copy; :func:`make_vector_env` asks it first."""
    eval_sampled: bool = False
    """Evaluations sample actions (:func:`~actorq.core.exploration.sampled_actions`) instead
    of taking the greedy ones: Atari, whose games are deterministic without sticky actions, so
    a greedy policy replays one game from every no-op start (rl-baselines3-zoo evaluates Atari
    so)."""
    presets: str | None = None
    """``"module:NAME"`` of a dict ``{agent: {config field: value}}``: the settings
    ``actorq train AGENT`` starts from on the family's ids (:func:`preset`), or ``None``."""
    pixels: bool = False
    """Every id of the family observes pixels: the pixel path's settings are checked from the
    id alone, before an env is made (making one loads a ROM: seconds, and the emulator's
    banner on stderr above the error line)."""


#: ``info`` keys of a training env whose learner episodes are not its games or whose rewards are
#: not its score (Atari: an episode per life, clipped rewards): each step's points on the game's
#: own scale (``SCORE``) and whether the game ended on it (``GAME_OVER``). Actors then report
#: whole games on the raw score as training episodes (what CleanRL's and SB3's training curves
#: show); for envs without them an episode is a reported episode and its return the rewards'.
SCORE, GAME_OVER = "score", "game_over"

#: Env families by prefix: the one table :func:`make_env` and :func:`validate_env_id` read.
ENV_FAMILIES: dict[str, EnvFamily] = {
    "gym": EnvFamily(
        "actorq.envs.gym_family:validate_gym_id",
        "actorq.envs.gym_family:make_gym_env",
        "gym:CartPole-v1",
    ),
    "dmc": EnvFamily(
        "actorq.envs.dmc:parse_dmc_id",
        "actorq.envs.dmc:make_dmc_env",
        "dmc:walker-stand",
        "control",
    ),
    "graphopt": EnvFamily(
        "actorq.graphopt.envs:validate_graphopt_id",
        "actorq.graphopt.envs:make_graphopt_env",
        "graphopt:placement/inception-s",
        "graph",
    ),
    "chip": EnvFamily(
        "actorq.chip.env:validate_chip_id", "actorq.chip.env:make_chip_env", "chip:ariane133"
    ),
    "atari": EnvFamily(
        "actorq.envs.atari:validate_atari_id",
        "actorq.envs.atari:make_atari_env",
        "atari:Pong",
        "atari",
        (("mode", "eval"),),
        "actorq.envs.atari_envpool:make_atari_vector",
        eval_sampled=True,
        presets="actorq.envs.atari:PRESETS",
        pixels=True,
    ),
}


def _split(env_id: str) -> tuple[EnvFamily, str]:
    prefix, sep, name = env_id.partition(":")
    if not sep or not name or prefix not in ENV_FAMILIES:
        prefixes = ", ".join(f"{p}:" for p in ENV_FAMILIES)
        raise EnvIdError(
            f"unknown environment id {env_id!r}: expected one of the prefixes {prefixes} "
            "(e.g. 'gym:CartPole-v1')"
        )
    return ENV_FAMILIES[prefix], name


def validate_env_id(env_id: str) -> None:
    """Raise :class:`EnvIdError` (one line) unless ``env_id`` names an environment we can make."""
    family, name = _split(env_id)
    load(family.validate)(name)


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """Make one environment from a prefixed id: ``"gym:CartPole-v1"``, ``"dmc:walker-stand"``.

    ``kwargs`` go to the family's constructor (``gym.make``; for ``dmc:``, ``action_repeat``).
    """
    family, name = _split(env_id)
    load(family.validate)(name)
    env: gym.Env = load(family.make)(name, **kwargs)
    return env


def eval_env_kwargs(env_id: str, kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """``kwargs`` for an evaluation's environments: the family's ``eval_kwargs`` added (an
    Atari evaluation plays full games on the raw score; other families evaluate as they train)."""
    family, _ = _split(env_id)
    return {**(kwargs or {}), **dict(family.eval_kwargs)}


def eval_sampled(env_id: str) -> bool:
    """Whether evaluations on ``env_id`` sample actions (:attr:`EnvFamily.eval_sampled`)."""
    return _split(env_id)[0].eval_sampled


def observes_pixels(env_id: str) -> bool:
    """Whether ``env_id``'s family observes pixels (:attr:`EnvFamily.pixels`), known without
    making an env."""
    return _split(env_id)[0].pixels


def preset(env_id: str, agent: str) -> dict[str, Any]:
    """The config fields ``agent`` starts from on ``env_id``'s family (:attr:`EnvFamily.presets`;
    a copy, empty where the family has none): the command line's defaults there, and
    :meth:`~actorq.config.ExperimentConfig.for_env`'s. A bad id is one :class:`EnvIdError`."""
    family, _ = _split(env_id)
    if family.presets is None:
        return {}
    table: dict[str, dict[str, Any]] = load(family.presets)
    return dict(table.get(agent, {}))


def env_factory(env_id: str, **kwargs: Any) -> Callable[[], gym.Env]:
    validate_env_id(env_id)
    return lambda: make_env(env_id, **kwargs)


def make_vector_env(env_id: str, num_envs: int, **kwargs: Any) -> Any:
    """K copies stepped together so an actor infers for all K in one batched call: the family's
    own vector engine where it has one (:attr:`EnvFamily.vector`), else a
    :class:`~gymnasium.vector.SyncVectorEnv` of K envs.

    Same-step autoreset: when an episode ends, ``step`` returns the first observation of the
    next episode and puts the last one in ``info["final_obs"]``, which the n-step adder needs.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
        # configs bound their counts; Python callers reach this directly (0: an IndexError deep
        # in Gymnasium's vector env)
        raise EnvIdError(f"{env_id}: num_envs must be a positive integer, got {num_envs!r}")
    family, name = _split(env_id)
    if family.vector is not None:
        load(family.validate)(name)
        vec = load(family.vector)(name, num_envs, **kwargs)
        if vec is not None:
            return vec
    factory = env_factory(env_id, **kwargs)
    return SyncVectorEnv(
        [factory for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP, copy=False
    )


def env_spec(env_id: str) -> EnvSpec:
    """What an agent needs to know of an environment; one :class:`EnvIdError` line if it cannot
    be made here (a package it needs is missing) or its spaces are ones actorq does not
    support (e.g. discrete observations)."""
    env = checked_make(env_id)
    try:
        spec = EnvSpec.from_spaces(env_id, env.observation_space, env.action_space)
        return dataclasses.replace(spec, frame_stack=frame_stack(env))
    except TypeError as e:
        raise EnvIdError(str(e)) from None
    finally:
        env.close()


def frame_stack(env: gym.Env) -> int:
    """``k`` if ``env``'s observations are its last ``k`` frames stacked by Gymnasium's
    ``FrameStackObservation`` with "reset" padding (Atari's; under wrappers that keep its
    observations, e.g. ``gym.make``'s own), else 0."""
    from gymnasium.wrappers import FrameStackObservation

    inner: Any = env
    while isinstance(inner, gym.Wrapper):
        if isinstance(inner, FrameStackObservation):
            same = inner.observation_space == env.observation_space
            return int(inner.stack_size) if same and inner.padding_type == "reset" else 0
        inner = inner.env
    return 0


def checked_make(env_id: str, **kwargs: Any) -> gym.Env:
    """:func:`make_env`, with a missing dependency or a retired id reported as one line (and
    the warnings gymnasium printed on the way shown only if the env could be made)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            env = make_env(env_id, **kwargs)
        except EnvIdError:
            raise
        except (ImportError, gym.error.Error) as e:  # DependencyNotInstalled, retired versions
            extra = ENV_FAMILIES[env_id.partition(":")[0]].extra
            hint = (
                f" (pip install 'actorq[{extra}]')" if isinstance(e, ImportError) and extra else ""
            )
            raise EnvIdError(f"cannot make {env_id!r} here: {first_line(e)}{hint}") from None
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return env


__all__ = [
    "ENV_FAMILIES",
    "EnvFamily",
    "checked_make",
    "env_factory",
    "env_spec",
    "eval_env_kwargs",
    "make_env",
    "make_vector_env",
    "preset",
    "validate_env_id",
]
