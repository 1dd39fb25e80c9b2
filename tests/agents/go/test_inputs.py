"""The policy's input switches as one object: run config -> workload -> actors, and policy
file -> ``place``."""

from __future__ import annotations

import dataclasses

import pytest

from actorq.agents.go.inputs import InputSpec
from actorq.agents.go.networks import GOPolicyConfig

SPECS = [InputSpec(), InputSpec(True, 64), InputSpec(priority_levels=16)]


@pytest.mark.parametrize("spec", SPECS)
def test_workload_round_trip(spec: InputSpec) -> None:
    assert InputSpec.from_json(spec.to_json()) == spec


def test_workload_written_before_a_switch_existed_means_off() -> None:
    assert InputSpec.from_json({"start": "none", "cost_input": False}) == InputSpec()
    assert InputSpec.from_json({}) == InputSpec()


@pytest.mark.parametrize("spec", SPECS)
def test_policy_config_round_trip(spec: InputSpec) -> None:
    config = GOPolicyConfig(num_devices=4, **spec.policy_switches())
    assert InputSpec.of_policy(config) == spec


def test_switches_name_policy_config_fields() -> None:
    fields = {f.name for f in dataclasses.fields(GOPolicyConfig)}
    assert set(InputSpec().policy_switches()) <= fields
