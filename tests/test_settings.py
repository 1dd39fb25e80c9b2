"""Config groups (actorq.settings): settings nested by group, taken flat or nested everywhere a
setting is given by name, validated through the one layer, with errors naming the flag."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from actorq import DQNConfig, PPOConfig
from actorq.agents.go.config import ExplorationSettings, GOConfig
from actorq.distributed.settings import OffPolicyRaySettings, RaySettings
from actorq.errors import ConfigError
from actorq.settings import flat_hints, leaf_paths


def test_flat_and_nested_keywords_build_the_same_config() -> None:
    flat = GOConfig(sil_coef=1.0, imitate="best", hidden=32, learning_rate=1e-4)
    nested = GOConfig(
        exploration=ExplorationSettings(sil_coef=1.0),
        imitation={"imitate": "best"},  # type: ignore[arg-type]
        policy={"hidden": 32},  # type: ignore[arg-type]
        ppo={"learning_rate": 1e-4},  # type: ignore[arg-type]
    )
    assert flat == nested
    assert flat.exploration.sil_coef == 1.0 and flat.policy.hidden == 32
    # a flat key wins over its group's value, whichever comes first
    both = GOConfig(exploration=ExplorationSettings(sil_coef=3.0), sil_coef=2.0)
    assert both.exploration.sil_coef == 2.0


def test_flat_names_read_and_write_the_group() -> None:
    cfg = DQNConfig(backend="ray", replay_shards=3)
    assert cfg.ray.replay_shards == 3 and cfg.replay_shards == 3  # type: ignore[attr-defined]
    cfg.replay_shards = 5  # type: ignore[attr-defined]
    assert cfg.ray.replay_shards == 5
    with pytest.raises(AttributeError):
        cfg.no_such_setting  # type: ignore[attr-defined]  # noqa: B018
    # dataclasses.replace takes a flat key too, and leaves the original's group alone
    other = dataclasses.replace(cfg, replay_shards=7)  # type: ignore[call-arg]
    assert other.ray.replay_shards == 7 and cfg.ray.replay_shards == 5


def test_unknown_keywords_are_still_refused() -> None:
    with pytest.raises(TypeError):
        PPOConfig(prefetch=2)  # type: ignore[call-arg]  # an off-policy agent's Ray setting


def test_backends_own_their_settings() -> None:
    assert isinstance(DQNConfig().ray, OffPolicyRaySettings)
    assert type(PPOConfig().ray) is RaySettings
    assert leaf_paths(DQNConfig)["prefetch"] == "ray"
    assert leaf_paths(DQNConfig)["ray_address"] == "ray"
    assert leaf_paths(DQNConfig)["seed"] is None
    assert "prefetch" not in flat_hints(PPOConfig)


def test_config_json_is_flat_and_reads_back_flat_or_nested() -> None:
    cfg = GOConfig(sil_coef=1.0, explore=0.5, hidden=32, distill_steps=10)
    d = cfg.to_json()
    assert d["sil_coef"] == 1.0 and d["hidden"] == 32 and d["replay_shards"] == 2
    assert not any(isinstance(v, dict) for v in d.values())
    assert GOConfig.from_json(d) == cfg
    nested = {
        **{k: v for k, v in d.items() if leaf_paths(GOConfig).get(k) is None},
        "exploration": {"sil_coef": 1.0, "explore": 0.5},
        "policy": {"hidden": 32},
        "distillation": {"distill_steps": 10},
    }
    assert GOConfig.from_json(nested) == cfg


@pytest.mark.parametrize(
    "cls, kw, needle",
    [
        (GOConfig, {"sil_coef": -1.0}, "--sil-coef must be >= 0, got -1.0"),
        (GOConfig, {"hidden": "64"}, "--hidden has the wrong type"),
        (GOConfig, {"clip_coef": float("nan")}, "--clip-coef must be a finite number"),
        (GOConfig, {"explore": 1.0, "sil_coef": 1.0}, "--explore must be in [0, 1)"),
        (GOConfig, {"imitate_steps": True}, "--imitate-steps has the wrong type"),
        (GOConfig, {"distill_every": -1}, "--distill-every must be in [0,"),
        (DQNConfig, {"replay_shards": 0}, "--replay-shards must be in [1, 4096]"),
        (DQNConfig, {"cache": "disk"}, "--cache must be one of node, none"),
        (DQNConfig, {"actor_cpus": 0.0}, "--actor-cpus must be in (0, 1024]"),
        (DQNConfig, {"prefetch": 0}, "--prefetch must be in [1, 1024]"),
        (PPOConfig, {"ray_address": 3}, "--ray-address has the wrong type"),
    ],
)
def test_settings_in_groups_are_validated_naming_their_flag(
    cls: type, kw: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ConfigError) as e:
        cls(**kw).validate()
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_group_of_the_wrong_kind_is_one_line() -> None:
    with pytest.raises(ConfigError, match="ray settings must be OffPolicyRaySettings"):
        DQNConfig.from_json({"ray": 3, "replay_shards": 2})


def test_whole_numbers_in_float_settings_become_floats_and_huge_ones_are_one_line() -> None:
    """TOML's `log_std_init = 2` or Python's `ent_coef=0` is a float after validation (torch
    made an integer log-std parameter of it, which cannot take gradients); an int past float's
    range is a finite-number error, not an OverflowError."""
    cfg = PPOConfig(log_std_init=2, ent_coef=0)
    cfg.validate()
    assert type(cfg.log_std_init) is float and type(cfg.ent_coef) is float
    assert type(cfg.num_steps) is int  # ints stay ints
    with pytest.raises(ConfigError, match=r"^--learning-rate must be a finite number, got 1000"):
        PPOConfig(learning_rate=10**400).validate()
    # past Python's 4,300-digit limit on printing an int: still one line
    with pytest.raises(ConfigError, match=r"^--learning-rate must be .*an integer of 16610 bits"):
        PPOConfig(learning_rate=10**5000).validate()
    with pytest.raises(ConfigError, match=r"^--seed must be .*an integer of 16610 bits"):
        PPOConfig(seed=10**5000).validate()


def test_an_int_setting_takes_a_float_naming_a_whole_number() -> None:
    """``total_steps=1e5`` (Python, config.json, a bench spec's TOML) is the int 100000; a float
    naming no whole number is one line naming the flag."""
    cfg = DQNConfig(total_steps=1e5, actors=2.0)  # type: ignore[arg-type]
    cfg.validate()
    assert (cfg.total_steps, cfg.actors) == (100_000, 2)
    assert type(cfg.total_steps) is int and type(cfg.actors) is int
    for bad in (1.5, 1e-3, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match=r"--total-steps has the wrong type: .*, not a whole"):
            DQNConfig(total_steps=bad).validate()  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"--total-steps must be in \[1, "):
        DQNConfig(total_steps=0.0).validate()  # type: ignore[arg-type]
