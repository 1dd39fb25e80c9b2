"""The summary table says what a run reached, in its users' units, without contradicting
itself (issue: "reached target 475: yes" above an eval return of 469.8)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from actorq.run.report import TrainResult, print_summary


def result(**kw: object) -> TrainResult:
    base = TrainResult(
        run_dir="runs/x", env="gym:CartPole-v1", precision="int8", env_steps=1000, updates=10,
        wall_time_s=1.0, eval_return=469.8, eval_return_std=53.3, eval_return_fp32=470.0,
        action_agreement=1.0, agreement_states=100, snapshot_bytes=10, fp32_snapshot_bytes=40,
        publishes=3, publish_ms=1.0, target_return=475.0, reached_target=True,
        time_to_target_s=0.5, steps_to_target=800, actor_restarts=0, rejected_snapshots=0,
    )  # fmt: skip
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one table row a line: rich wraps at 80 otherwise


def table(r: TrainResult, capsys: pytest.CaptureFixture[str]) -> str:
    print_summary(r, "target")
    return " ".join(capsys.readouterr().out.split())


def test_a_target_reached_in_training_is_not_contradicted_by_the_final_evaluation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = table(result(), capsys)
    assert "target 475 reached in training" in out
    assert "yes, at 800 steps" in out and "final evaluation above: below it" in out
    out = table(result(eval_return=500.0), capsys)
    assert "yes, at 800 steps" in out and "below it" not in out
    assert "│ no" in table(result(reached_target=False, steps_to_target=None), capsys)


def test_no_target_row_without_a_target_and_the_agents_own_rows_are_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    r = result(
        target_return=None, reached_target=False, eval_return=0.1276, eval_return_std=0.0,
        summary_rows=[["step time on g", "100.367 ms vs expert 115.038 ms (+12.8%)"]],
    )  # fmt: skip
    out = table(r, capsys)
    assert "reached" not in out
    assert "step time on g" in out and "115.038 ms" in out
    assert "0.128 ± 0.0 (int8)" in out  # a small return keeps its digits


def test_a_run_without_codecarbon_is_not_measured_and_says_how_to_measure_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`make run` installs no extras: its run must not warn about a missing extra at start,
    and its summary names the extra that measures energy."""
    import actorq.run.loop
    import actorq.run.report
    from actorq import train
    from actorq.agents.dqn import DQNConfig

    for module in (actorq.run.loop, actorq.run.report):
        monkeypatch.setattr(module, "codecarbon_installed", lambda: False)
    cfg = DQNConfig(actors=0, envs_per_actor=4, total_steps=400, min_replay_size=200,
                    progress=False, energy=True, run_dir=str(tmp_path / "r"))  # fmt: skip
    r = train(cfg)
    out = capsys.readouterr()
    assert "warning" not in out.err and r.energy_kwh is None
    assert "not measured: pip install 'actorq[bench]'" in " ".join(out.out.split())


def test_an_interrupted_run_says_its_final_evaluation_was_not_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    r = result(
        eval_return=None, eval_return_std=None, eval_return_fp32=None, action_agreement=None,
        agreement_states=None, reached_target=False, steps_to_target=None,
    )  # fmt: skip
    out = table(r, capsys)
    assert "final evaluation │ not run (interrupted)" in out
    assert "eval return" not in out and "agreement" not in out
    assert "1000 / 10" in out  # what it did is still reported
