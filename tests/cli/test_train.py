"""``actorq train``'s command line with config groups: a backend's settings only with that
backend, GO's settings in sections, retired knobs refused in one line, every flag spelled as
before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from actorq import train
from actorq.agents.dqn.config import DQNConfig
from actorq.agents.go.config import GOConfig
from actorq.agents.ppo.config import PPOConfig
from actorq.cli import main
from actorq.cli.train import parse_config
from actorq.errors import ConfigError

RAY_FLAGS = ("--ray-address", "--replay-shards", "--cache", "--cache-relays", "--actor-cpus")


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main(["train", *argv, "--help"])
    assert e.value.code in (0, None)
    return capsys.readouterr().out


@pytest.mark.parametrize("agent", ["dqn", "ppo", "go"])
def test_rays_settings_are_listed_only_with_backend_ray(
    agent: str, capsys: pytest.CaptureFixture[str]
) -> None:
    local = _help(capsys, agent)
    assert "--backend" in local and not any(f in local for f in RAY_FLAGS)
    ray = _help(capsys, agent, "--backend", "ray")
    assert "ray options" in ray and all(f in ray for f in RAY_FLAGS)
    assert ("--prefetch" in ray) is (agent == "dqn")  # off-policy agents' batches only
    assert "ray options" in _help(capsys, agent, "--backend=ray")


def test_gos_settings_are_groups_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, "go")
    sections = ["policy options", "ppo options", "imitation options", "exploration options",
                "distillation options"]  # fmt: skip
    at = [text.index(s) for s in sections]
    assert at == sorted(at)
    where = {
        "--hidden": 0, "--priority-levels": 0, "--memory-input": 0, "--learning-rate": 1,
        "--clip-coef": 1, "--baseline-decay": 1, "--imitate ": 2, "--imitate-margin": 2,
        "--explore ": 3, "--sil-coef": 3, "--no-explore-sil": 3, "--distill-steps": 4,
    }  # fmt: skip
    bounds = [*at, len(text)]
    for flag, i in where.items():
        assert bounds[i] < text.index(flag) < bounds[i + 1], flag
    for retired in ("--cost-input", "--explore-guided", "--explore-cut", "--imitate-guide",
                    "--start "):  # fmt: skip
        assert retired not in text


def test_every_flag_keeps_its_spelling() -> None:
    cfg = parse_config(
        DQNConfig, ["--backend", "ray", "--ray-address", "auto", "--replay-shards", "4",
                    "--cache", "none", "--actor-cpus", "0.25", "--prefetch", "2"], "t"
    )  # fmt: skip
    assert cfg.backend == "ray" and type(cfg) is DQNConfig
    assert (cfg.ray.ray_address, cfg.ray.replay_shards, cfg.ray.cache) == ("auto", 4, "none")
    assert (cfg.ray.actor_cpus, cfg.ray.prefetch) == (0.25, 2)
    go = parse_config(
        GOConfig, ["--sil-coef", "1", "--imitate", "best", "--hidden", "32", "--clip-coef",
                   "0.1", "--explore", "0.5", "--no-explore-sil", "--distill-steps", "5"], "t"
    )  # fmt: skip
    assert type(go) is GOConfig and go.exploration.sil_coef == 1.0
    assert go.imitation.imitate == "best" and go.policy.hidden == 32 and go.ppo.clip_coef == 0.1
    assert go.exploration.explore == 0.5 and not go.exploration.explore_sil
    assert go.distillation.distill_steps == 5
    assert go == GOConfig(sil_coef=1.0, imitate="best", hidden=32, clip_coef=0.1, explore=0.5,
                          explore_sil=False, distill_steps=5)  # fmt: skip
    # a local run keeps Ray's defaults
    assert parse_config(PPOConfig, [], "t").ray == PPOConfig().ray


@pytest.mark.parametrize(
    "argv",
    [
        ["--replay-shards", "4"],
        ["--replay_shards=4"],
        ["--backend", "ray", "--ray-address", "auto", "--backend", "local"],  # the last wins
        ["--actor-cpus", "1", "--backend", "local"],
    ],
)
def test_a_ray_flag_without_backend_ray_is_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "dqn", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a setting of --backend ray" in err
    assert "add --backend ray" in err


@pytest.mark.parametrize(
    "flag, knob",
    [
        ("--cost-input", "--cost-input"),
        ("--no-cost-input", "--cost-input"),
        ("--explore-guided", "--explore-guided"),
        ("--explore-cut=0.5", "--explore-cut"),
        ("--imitate-guide", "--imitate-guide"),
        ("--start", "--start"),
    ],
)
def test_a_retired_flag_is_one_line_naming_the_archive(
    flag: str, knob: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "go", flag, "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{knob} was retired (" in err and "docs/go-transfer.md" in err and "67fd709" in err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--sil-coef", "-1"], "--sil-coef must be >= 0"),
        (["--hidden", "3"], "--hidden must be in [4, 4096]"),
        (["--learning-rate", "nan"], "--learning-rate must be a finite number"),
        (["--priority-levels", "1"], "--priority-levels must be in [2, 256]"),
        (["--distill-every", "5"], "--distill-every needs --distill-steps > 0"),
    ],
)
def test_settings_in_groups_are_validated_naming_the_flag(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "go", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


@pytest.mark.parametrize("name", ["--resume", "--run-dir"])
def test_an_empty_run_directory_is_one_line_and_writes_nothing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--resume ""` (and `--run-dir ""`) silently started a new run in runs/, exit 0."""
    monkeypatch.chdir(tmp_path)  # where the default run directory would go
    short = ["--total-steps", "100", "--min-replay-size", "50", "--actors", "0", "--no-energy",
             "--no-progress"]  # fmt: skip
    assert main(["train", "dqn", "--env", "gym:CartPole-v1", *short, name, ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"actorq: error: {name} is empty; give one" in err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match=f"{name} is empty"):
        train(DQNConfig(**{name[2:].replace("-", "_"): ""}, total_steps=100))
    assert list(tmp_path.iterdir()) == []


def test_ray_settings_are_validated_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "dqn", "--backend", "ray", "--replay-shards", "0"]) == 2
    assert "--replay-shards must be in [1, 4096]" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--actor-cpus must be in"):
        parse_config(DQNConfig, ["--backend", "ray", "--actor-cpus", "0"], "t").validate()


# -- env-family presets: `actorq train ppo --env atari:Pong` starts from rl-zoo's settings ------


@pytest.mark.parametrize("agent", ["ppo", "dqn"])
def test_an_atari_id_starts_from_the_family_preset_and_flags_override_it(agent: str) -> None:
    from actorq.agents import config_class
    from actorq.envs.atari import PRESETS

    cls = config_class(agent)
    cfg = parse_config(cls, ["--env", "atari:Pong"], "t")
    for name, value in PRESETS[agent].items():
        assert getattr(cfg, name) == value, name
    assert any(getattr(cls(), n) != v for n, v in PRESETS[agent].items())  # not the defaults
    mine = parse_config(cls, ["--env=atari:Breakout", "--total-steps", "1000", "--seed", "3"], "t")
    assert (mine.total_steps, mine.seed, mine.env) == (1000, 3, "atari:Breakout")
    assert mine.eval_every == PRESETS[agent]["eval_every"]
    # other families keep the class's defaults; the Python constructor keeps them everywhere
    assert parse_config(cls, ["--env", "gym:CartPole-v1"], "t") == cls()
    assert cls(env="atari:Pong").total_steps == cls().total_steps
    assert cls.for_env("atari:Pong", seed=2) == dataclasses.replace(cfg, seed=2)


def test_a_preset_shows_in_help_and_is_announced(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(_help(capsys, "ppo", "--env", "atari:Pong").split())
    assert "--clip-coef FLOAT Surrogate clipping ε. (default: 0.1)" in text
    assert "(default: 2500000)" in text
    assert "(default: 0.1)" not in " ".join(_help(capsys, "ppo").split())
    # a bad id before anything runs: one line, and the preset note comes only with a good one
    assert main(["train", "ppo", "--env", "atari:NoSuchGame", "--total-steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "preset" not in err
    # an id that names no family is the id's line after tyro's parse: --help still helps
    assert "--clip-coef" in _help(capsys, "ppo", "--env", "nowhere:Pong")
    assert main(["train", "ppo", "--env", "--seed", "3"]) == 2
    assert "--env" in capsys.readouterr().err


def test_the_atari_preset_is_what_the_atari_bench_spec_runs() -> None:
    """The preset and the committed learning runs (benchmarks/specs/atari.toml) are one set of
    settings: docs/atari.md's scores are what `actorq train` starts from."""
    from pathlib import Path

    from actorq.bench.spec import load_spec
    from actorq.envs.atari import PRESETS

    spec = load_spec(Path(__file__).parents[2] / "benchmarks/specs/atari.toml")
    # a task that is a deliberate variant of the preset, and the settings it varies
    variants = {"dqn-pong-ddn3": {"n_step", "double_q", "dueling"}}
    seen = set()
    for cell in spec.cells:
        if cell.framework != "actorq":
            continue
        cfg = cell.make_config()
        for name, value in PRESETS[cell.agent].items():
            if name == "learner_threads":  # auto in the preset, this 2-core machine's in the spec
                preset = dataclasses.replace(cfg, learner_threads=value)
                assert preset.learner_torch_threads(2) == cfg.learner_torch_threads(2)
                continue
            if name in variants.get(cell.task, set()):
                assert getattr(cfg, name) != value, (cell.name, name, "no longer varied")
                continue
            assert getattr(cfg, name) == value, (cell.name, name)
        seen.add(cell.agent)
    assert seen == set(PRESETS)
