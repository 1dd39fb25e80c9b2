"""``gym:<id>``: any environment registered with Gymnasium (``gym:CartPole-v1``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from actorq.errors import EnvIdError


def validate_gym_id(name: str) -> None:
    """Raise :class:`EnvIdError` unless ``name`` is a registered Gymnasium id (with the ids that
    start alike as a hint)."""
    if name not in gym.registry:
        close = [k for k in gym.registry if k.lower().startswith(name.split("-")[0].lower()[:4])]
        hint = f"; did you mean {', '.join(sorted(close)[:5])}?" if close else ""
        raise EnvIdError(f"unknown Gymnasium id {name!r} in {'gym:' + name!r}{hint}")


def make_gym_env(name: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make(name, **kwargs)``; a MuJoCo environment's warnings stay on the console
    instead of also landing in ``MUJOCO_LOG.TXT`` in the user's working directory."""
    if "mujoco" in str(gym.registry[name].entry_point):
        keep_mujoco_log_off_disk()
    return gym.make(name, **kwargs)


def keep_mujoco_log_off_disk() -> None:
    """MuJoCo writes every warning (e.g. a model's deprecated attribute) to ``MUJOCO_LOG.TXT``
    in the working directory as well as to the console: turn the file off (MuJoCo >= 3.17's
    log configuration; older versions keep their default)."""
    try:
        import mujoco
    except ImportError:
        return
    config = getattr(mujoco, "MjLogConfig", None)
    if config is None:
        return
    c = config.get()
    if c.logto_file:
        c.logto_file = False
        config.set(c)
