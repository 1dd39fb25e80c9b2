"""Typed replay specs: each agent's table, adder and gate cross a process boundary as JSON and
come back equal, answer the backends' questions, and build their objects."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from actorq.agents import AGENTS, builder_for, config_class
from actorq.replay.adders import NStepAdder, TrajectoryAdder
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.specs import (
    NoAdderSpec,
    NStepSpec,
    QueueGateSpec,
    QueueSpec,
    RatioGateSpec,
    TrajectorySpec,
    UniformSpec,
    adder_from_json,
    gate_from_json,
    table_from_json,
)
from actorq.replay.tables import QueueGate, RatioGate, TrajectoryQueue, UniformTable
from actorq.types import ArraySpec, EnvSpec

SPEC = EnvSpec("x", ArraySpec((2,), "float32"), ArraySpec((), "int64"), num_actions=3)
LIMITER = SampleToInsertRatio(4.0, 100, 40.0)


def _wire(d: dict[str, Any]) -> dict[str, Any]:
    """What crosses a process or Ray boundary: JSON text."""
    out: dict[str, Any] = json.loads(json.dumps(d))
    return out


@pytest.mark.parametrize(
    "spec", [UniformSpec(1000, 32, LIMITER), QueueSpec(8, 2)], ids=["uniform", "queue"]
)
def test_tables_round_trip_and_build(spec: UniformSpec | QueueSpec) -> None:
    assert table_from_json(_wire(spec.to_json())) == spec
    specs = {"obs": ArraySpec((2,), "float32"), "reward": ArraySpec((), "float32")}
    table = spec.build(specs)
    assert isinstance(table, UniformTable if not spec.on_policy else TrajectoryQueue)
    assert table.persistent == spec.persistent  # what a checkpoint keeps
    assert (spec.ring_capacity() is None) == spec.on_policy


@pytest.mark.parametrize(
    ("spec", "items"),
    [(NStepSpec(3, 0.99), 3), (TrajectorySpec(128), 1), (NoAdderSpec(), 1)],
    ids=["nstep", "trajectory", "none"],
)
def test_adders_round_trip_and_say_what_a_step_emits(
    spec: NStepSpec | TrajectorySpec | NoAdderSpec, items: int
) -> None:
    assert adder_from_json(_wire(spec.to_json())) == spec
    assert spec.items_per_env_step == items
    if isinstance(spec, NoAdderSpec):
        with pytest.raises(TypeError, match="writes its items itself"):
            spec.build(4, SPEC)
    else:
        adder = spec.build(4, SPEC, actor=1)
        assert isinstance(adder, NStepAdder if isinstance(spec, NStepSpec) else TrajectoryAdder)


def test_gates_round_trip_build_and_size_the_channel() -> None:
    ratio, queue = RatioGateSpec(LIMITER), QueueGateSpec(4, 3)
    for g in (ratio, queue):
        assert gate_from_json(_wire(g.to_json())) == g
    assert isinstance(ratio.build(), RatioGate) and isinstance(queue.build(), QueueGate)
    assert not ratio.on_policy and queue.on_policy
    # off-policy: many steps' emissions, n-step windows flushing at episode ends
    assert ratio.channel_items(8, NStepSpec(3, 0.99)) == max(8192, 64 * 8 * 3)
    # on-policy: every chunk the gate lets an actor have unconsumed, and the next one
    assert queue.channel_items(8, TrajectorySpec(64)) == 4 * 4
    assert queue.unconsumed_items == 12


@pytest.mark.parametrize(
    ("load", "what"),
    [(table_from_json, "replay kind"), (adder_from_json, "adder"), (gate_from_json, "gate")],
)
def test_an_unknown_kind_is_one_line(load: object, what: str) -> None:
    assert callable(load)
    with pytest.raises(ValueError, match=f"unknown {what} 'ring'; expected one of") as e:
        load({"kind": "ring"})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("agent", list(AGENTS))
def test_every_agents_setup_crosses_a_process_boundary(agent: str) -> None:
    env = {"go": "graphopt:placement/synthetic-60-s0"}.get(agent)
    cfg = config_class(agent)(**({"env": env} if env else {}))
    builder = builder_for(cfg)
    spec = builder.env_spec(cfg)
    table = builder.table_config(cfg, spec)
    setup = builder.actor_setup(cfg, spec)
    assert table.on_policy == setup.gate.on_policy  # the two sides of one rule
    assert table_from_json(_wire(table.to_json())) == table
    actor_cfg = _wire(setup.actor_config(0))
    assert adder_from_json(actor_cfg["adder"]) == setup.adder
    assert gate_from_json(actor_cfg["gate"]) == setup.gate
    assert np.isfinite(setup.gate.channel_items(setup.envs_per_actor, setup.adder))
