"""The one validation layer for configs: types, finiteness, ranges — one ConfigError line, or a
config that trains. Property-based: random values in every field of every agent's config."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actorq import D4PGConfig, DQNConfig, PPOConfig
from actorq.agents import AGENTS, config_class
from actorq.agents.go.config import GOConfig
from actorq.errors import ConfigError
from actorq.settings import flat_hints, flat_items, group_types

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"samples_per_insert": NAN}, "--samples-per-insert must be a finite number"),
        ({"learning_rate": NAN}, "--learning-rate must be a finite number"),
        ({"learning_rate": INF}, "--learning-rate must be a finite number"),
        ({"n_step": 100_000}, "--n-step must be in [1, 1000]"),
        ({"adam_eps": -1.0}, "--adam-eps must be > 0"),
        ({"seed": -1}, "--seed must be in [0, 4294967295]"),
        ({"device": "foo"}, "--device must be cpu, cuda or cuda:N"),
        ({"huber_delta": -1.0}, "--huber-delta must be > 0"),
        ({"gamma": 0.0}, "--gamma must be in (0, 1]"),
        ({"actors": True}, "--actors has the wrong type"),
        ({"hidden": (1 << 20,)}, "at most 64 layers of at most 65536 units"),
        ({"target_return": NAN}, "--target-return must be a finite number"),
        ({"energy_country": "xx"}, "--energy-country must be an ISO 3166 alpha-3 code"),
        ({"backend": "k8s"}, "--backend must be one of local, ray"),
    ],
)
def test_bad_values_are_one_line_errors(kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        DQNConfig(**kw).validate()
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_defaults_are_valid() -> None:
    for name in AGENTS:
        config_class(name)().validate()


def _value_strategy() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.tuples(st.integers(-5, 70_000)),
    )


@settings(max_examples=300, deadline=None)
@given(
    agent=st.sampled_from([DQNConfig, D4PGConfig, PPOConfig, GOConfig]),
    data=st.data(),
)
def test_random_field_values_give_one_line_or_a_valid_config(agent: type, data: Any) -> None:
    # every setting by its flat name (groups' too), and the groups themselves
    names = [*flat_hints(agent), *group_types(agent)]
    fields = [n for n in names if n not in ("resume", "run_dir")]
    changed = data.draw(st.dictionaries(st.sampled_from(fields), _value_strategy(), max_size=3))
    try:
        cfg = agent(**changed)
        cfg.validate()
    except ConfigError as e:
        assert str(e) and "\n" not in str(e)
        return
    # accepted: every number is finite and every field has its type
    for name, v in flat_items(cfg):
        if isinstance(v, float):
            assert math.isfinite(v), (name, v)


def test_json_round_trip_validates_too() -> None:
    d = PPOConfig().to_json()
    d["num_steps"] = "128"  # a hand-edited config.json
    with pytest.raises(ConfigError, match="--num-steps has the wrong type"):
        PPOConfig.from_json(d).validate()


def test_sticky_actions_are_an_atari_setting_below_one() -> None:
    with pytest.raises(ConfigError, match="--atari-sticky applies to atari: ids"):
        DQNConfig(env="gym:CartPole-v1", atari_sticky=0.25).validate()
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ConfigError, match="--atari-sticky"):
            DQNConfig(env="atari:Pong", atari_sticky=bad).validate()
