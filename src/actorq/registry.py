"""The one registry idiom: an entry names what it registers as ``"module:attr"``, imported on
first use, so ``import actorq`` stays light and an actor process loads only what it runs.

Agents (:data:`actorq.agents.AGENTS`), env families (:data:`actorq.envs.ENV_FAMILIES`),
backends (:data:`actorq.distributed.backend.BACKENDS`) and actor kinds
(:data:`actorq.core.loop.ACTOR_KINDS`) are such tables: adding one is a module and one line.
"""

from __future__ import annotations

import importlib
from typing import Any


def load(path: str) -> Any:
    """The object ``"package.module:attr"`` names (importing its module)."""
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"a registry entry is 'module:attr', got {path!r}")
    return getattr(importlib.import_module(module), attr)
