"""``gym:<id>``: any environment registered with Gymnasium (``gym:CartPole-v1``)."""

from __future__ import annotations

import gymnasium as gym

from actorq.errors import EnvIdError


def validate_gym_id(name: str) -> None:
    """Raise :class:`EnvIdError` unless ``name`` is a registered Gymnasium id (with the ids that
    start alike as a hint)."""
    if name not in gym.registry:
        close = [k for k in gym.registry if k.lower().startswith(name.split("-")[0].lower()[:4])]
        hint = f"; did you mean {', '.join(sorted(close)[:5])}?" if close else ""
        raise EnvIdError(f"unknown Gymnasium id {name!r} in {'gym:' + name!r}{hint}")
