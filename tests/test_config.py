"""The one validation layer for configs: types, finiteness, ranges — one ConfigError line, or a
config that trains. Property-based: random values in every field of every agent's config."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actorq import D4PGConfig, DQNConfig, PPOConfig
from actorq.agents import AGENTS, config_class
from actorq.agents.go.config import GOConfig
from actorq.energy.tracker import grid_countries
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
        ({"energy_country": "usa"}, "--energy-country must be an ISO 3166 alpha-3 code"),
        ({"energy_country": "ÄÖÜ"}, "--energy-country must be an ISO 3166 alpha-3 code"),
        ({"energy_country": "U1A"}, "--energy-country must be an ISO 3166 alpha-3 code"),
        ({"backend": "k8s"}, "--backend must be one of local, ray"),
        # "" read as absent: train(DQNConfig(resume="")) started a new run
        ({"resume": ""}, "--resume is empty; give one"),
        ({"ray_address": ""}, "--ray-address is empty; give one"),
        ({"run_dir": ""}, "--run-dir is empty; give one"),
    ],
)
def test_bad_values_are_one_line_errors(kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        DQNConfig(**kw).validate()
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_country_codecarbon_has_no_energy_mix_for_is_one_line() -> None:
    """ZZZ has the form of an ISO 3166 alpha-3 code; codecarbon would take the world average
    for it, silently, and report that as the country's CO2."""
    pytest.importorskip("codecarbon")
    for code in ("USA", "FRA", "DEU"):
        DQNConfig(energy_country=code).validate()
    with pytest.raises(ConfigError, match=r"^--energy-country ZZZ: codecarbon has no energy mix"):
        DQNConfig(energy_country="ZZZ").validate()


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
        st.sampled_from(["USA", "ZZZ", "usa", "ÄÖÜ", "Usa"]),  # country codes, good and not
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
    code = cfg.energy_country  # a grid codecarbon knows (where it is installed)
    assert code.isascii() and code.isupper() and len(code) == 3
    known = grid_countries()
    assert known is None or code in known


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


def test_learner_threads_auto_takes_the_cores_nobody_else_computes_on() -> None:
    assert DQNConfig(learner_threads=3).learner_torch_threads(8) == 3  # as given
    # synchronous PPO: its actors wait while it updates, so every core
    assert PPOConfig(learner_threads=0, actors=2).learner_torch_threads(8) == 8
    # actors running ahead, or off-policy: what the actor processes leave, at least one
    assert PPOConfig(learner_threads=0, actors=2, max_policy_lag=2).learner_torch_threads(8) == 6
    dqn = DQNConfig(learner_threads=0, actors=3, actor_threads=2)
    assert dqn.learner_torch_threads(8) == 2 and dqn.learner_torch_threads(4) == 1
    assert DQNConfig(learner_threads=0, actors=0).learner_torch_threads(8) == 8  # in-process
    assert GOConfig(learner_threads=0, actors=2).learner_torch_threads(8) == 8  # synchronous too


def test_a_run_sets_the_learners_torch_threads(tmp_path: Path) -> None:
    import torch

    from actorq import train

    before = torch.get_num_threads()
    try:
        cfg = DQNConfig(actors=0, learner_threads=0, total_steps=300, min_replay_size=200,
                        eval_every=10**6, eval_episodes=1, stop_at_target=False, progress=False,
                        energy=False, run_dir=str(tmp_path / "r"))  # fmt: skip
        want = cfg.learner_torch_threads()
        torch.set_num_threads(want + 1)  # anything else, so a run that sets nothing fails
        train(cfg)
        assert torch.get_num_threads() == want
    finally:
        torch.set_num_threads(before)
