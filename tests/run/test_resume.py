"""What a resume takes from the command line and what it keeps from the saved run
(:mod:`actorq.run.resume`): run-length options only where given, and a family preset's values
(the command line's defaults on its ids) never read as options given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actorq.agents.dqn.config import DQNConfig
from actorq.agents.ppo.config import PPOConfig
from actorq.cli.train import parse_config
from actorq.config import ExperimentConfig
from actorq.errors import ConfigError
from actorq.run.resume import resolve_run


def _saved(run: Path, cfg: ExperimentConfig) -> str:
    """A run directory holding ``cfg`` and a checkpoint (what a resume resolves against)."""
    cfg.run_dir = str(run)
    (run / "config.json").write_text(json.dumps(cfg.to_json()))
    (run / "checkpoint").mkdir()
    return str(run)


def test_a_resume_keeps_the_saved_budget_unless_given_and_takes_its_own_display(
    tmp_path: Path,
) -> None:
    run = _saved(tmp_path, DQNConfig(total_steps=777, stop_at_target=False, progress=False))
    kept = resolve_run(DQNConfig(resume=run))  # budget: the run's; display: this invocation's
    assert (kept.total_steps, kept.stop_at_target, kept.progress) == (777, False, True)
    given = resolve_run(DQNConfig(resume=run, total_steps=900, log_every=1.0))
    assert (given.total_steps, given.log_every) == (900, 1.0)
    cli = resolve_run(parse_config(DQNConfig, ["--resume", run], "t"))
    assert cli.total_steps == 777


def test_a_preset_run_resumes_from_the_command_line(tmp_path: Path) -> None:
    run = _saved(tmp_path, PPOConfig.for_env("atari:Pong", envs_per_actor=16, seed=4))
    # --env atari:Pong makes the preset the flags' defaults: none of them counts as given
    out = resolve_run(parse_config(PPOConfig, ["--env", "atari:Pong", "--resume", run], "t"))
    assert (out.envs_per_actor, out.seed, out.total_steps, out.clip_coef) == (16, 4, 2_500_000, 0.1)
    # without --env the defaults are CartPole's: the saved Atari budget still stands
    assert resolve_run(parse_config(PPOConfig, ["--resume", run], "t")).total_steps == 2_500_000
    # an option given that differs from the saved run is refused, naming it
    argv = ["--env", "atari:Pong", "--resume", run, "--clip-coef", "0.3"]
    with pytest.raises(ConfigError, match=r"--clip-coef 0.3 \(saved: 0.1\)"):
        resolve_run(parse_config(PPOConfig, argv, "t"))
