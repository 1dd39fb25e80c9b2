"""Agents, by name: each is a folder with config.py, networks.py, learning.py, builder.py
(Acme's seams). Imported lazily so ``import actorq`` stays light."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from actorq.config import ExperimentConfig

#: agent name -> its config class (module:attribute)
AGENTS: dict[str, str] = {
    "dqn": "actorq.agents.dqn.config:DQNConfig",
    "d4pg": "actorq.agents.d4pg.config:D4PGConfig",
}


def config_class(agent: str) -> type[ExperimentConfig]:
    module, _, attr = AGENTS[agent].partition(":")
    cls: type[ExperimentConfig] = getattr(importlib.import_module(module), attr)
    return cls


def builder_for(cfg: ExperimentConfig) -> ModuleType:
    """The agent's builder module (check_spec, make_learner, make_replay, policy_spec, ...)."""
    return importlib.import_module(f"actorq.agents.{cfg.agent}.builder")
