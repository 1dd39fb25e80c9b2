"""Agents, by name: the one registry (the CLI, ``actorq.<Name>Config`` and bench specs all read
it). Each agent is a folder with config.py, networks.py, learning.py and builder.py (Acme's
seams); its builder module exposes ``BUILDER``. Imported lazily so ``import actorq`` stays
light."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from actorq.registry import load

if TYPE_CHECKING:
    from actorq.agents.builder import Builder
    from actorq.config import ExperimentConfig


@dataclasses.dataclass(frozen=True)
class AgentEntry:
    config: str  # "module:Class" of its config dataclass
    builder: str  # "module:attribute" of its builder object
    summary: str  # one line for the CLI's usage text


#: agent name -> where its config and builder live
AGENTS: dict[str, AgentEntry] = {
    "dqn": AgentEntry(
        "actorq.agents.dqn.config:DQNConfig",
        "actorq.agents.dqn.builder:BUILDER",
        "DQN (double, dueling, n-step): discrete actions",
    ),
    "d4pg": AgentEntry(
        "actorq.agents.d4pg.config:D4PGConfig",
        "actorq.agents.d4pg.builder:BUILDER",
        "D4PG (distributional critic, n-step): continuous actions",
    ),
    "ppo": AgentEntry(
        "actorq.agents.ppo.config:PPOConfig",
        "actorq.agents.ppo.builder:BUILDER",
        "PPO (clipped surrogate, GAE): discrete or continuous actions",
    ),
    "go": AgentEntry(
        "actorq.agents.go.config:GOConfig",
        "actorq.agents.go.builder:BUILDER",
        "GO (graph policy, PPO): place, schedule and fuse the ops of graphopt:<task>/<graph>",
    ),
}


def config_class(agent: str) -> type[ExperimentConfig]:
    cls: type[ExperimentConfig] = load(AGENTS[agent].config)
    return cls


def config_class_names() -> dict[str, str]:
    """``{"DQNConfig": "dqn", ...}``: the names ``actorq`` exports lazily."""
    return {AGENTS[a].config.rpartition(":")[2]: a for a in AGENTS}


def builder_for(cfg: ExperimentConfig) -> Builder:
    """The agent's builder (:class:`~actorq.agents.builder.Builder`)."""
    builder: Builder = load(AGENTS[cfg.agent].builder)
    return builder
