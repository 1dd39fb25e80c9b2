"""One factory for every environment: ``make_env("gym:CartPole-v1")``,
``make_env("dmc:walker-stand")``.

Ids carry a prefix naming the family; the rest is the family's own id. Gymnasium 1.x API only
(5-tuple ``step``, ``reset(seed=)``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from actorq.core.types import EnvSpec
from actorq.errors import EnvIdError, first_line

#: Prefixes accepted by :func:`make_env`. Families arrive with the issues that need them.
ACCEPTED_PREFIXES: tuple[str, ...] = ("gym:", "dmc:", "graphopt:", "chip:")


def _split(env_id: str) -> tuple[str, str]:
    prefix, sep, name = env_id.partition(":")
    if not sep or not name or f"{prefix}:" not in ACCEPTED_PREFIXES:
        raise EnvIdError(
            f"unknown environment id {env_id!r}: expected one of the prefixes "
            f"{', '.join(ACCEPTED_PREFIXES)} (e.g. 'gym:CartPole-v1')"
        )
    return prefix, name


def validate_env_id(env_id: str) -> None:
    """Raise :class:`EnvIdError` (one line) unless ``env_id`` names an environment we can make."""
    prefix, name = _split(env_id)
    if prefix == "dmc":
        from actorq.envs.dmc import parse_dmc_id

        parse_dmc_id(name)
        return
    if prefix == "graphopt":  # graphopt:<task>/<graph>, see actorq.graphopt.envs
        from actorq.graphopt.envs import validate_graphopt_id

        validate_graphopt_id(name)
        return
    if prefix == "chip":  # chip:<shipped netlist> or chip:<netlist file>, see actorq.chip.env
        from actorq.chip.env import validate_chip_id

        validate_chip_id(name)
        return
    if prefix == "gym" and name not in gym.registry:
        close = [k for k in gym.registry if k.lower().startswith(name.split("-")[0].lower()[:4])]
        hint = f"; did you mean {', '.join(sorted(close)[:5])}?" if close else ""
        raise EnvIdError(f"unknown Gymnasium id {name!r} in {env_id!r}{hint}")


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """Make one environment from a prefixed id: ``"gym:CartPole-v1"``, ``"dmc:walker-stand"``.

    ``kwargs`` go to the family's constructor (``gym.make``; for ``dmc:``, ``action_repeat``).
    """
    validate_env_id(env_id)
    prefix, name = _split(env_id)
    if prefix == "dmc":
        from actorq.envs.dmc import DMCEnv, parse_dmc_id

        return DMCEnv(*parse_dmc_id(name), **kwargs)
    if prefix == "graphopt":
        from actorq.graphopt.envs import make_graphopt_env

        return make_graphopt_env(name, **kwargs)
    if prefix == "chip":
        from actorq.chip.env import make_chip_env

        return make_chip_env(name, **kwargs)
    return gym.make(name, **kwargs)


def env_factory(env_id: str, **kwargs: Any) -> Callable[[], gym.Env]:
    validate_env_id(env_id)
    return lambda: make_env(env_id, **kwargs)


def make_vector_env(env_id: str, num_envs: int, **kwargs: Any) -> SyncVectorEnv:
    """K copies stepped together so an actor infers for all K in one batched call.

    Same-step autoreset: when an episode ends, ``step`` returns the first observation of the
    next episode and puts the last one in ``info["final_obs"]``, which the n-step adder needs.
    """
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
        return EnvSpec.from_spaces(env_id, env.observation_space, env.action_space)
    except TypeError as e:
        raise EnvIdError(str(e)) from None
    finally:
        env.close()


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
            raise EnvIdError(f"cannot make {env_id!r} here: {first_line(e)}") from None
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return env


__all__ = [
    "ACCEPTED_PREFIXES",
    "checked_make",
    "env_factory",
    "env_spec",
    "make_env",
    "make_vector_env",
    "validate_env_id",
]
