"""`resume = true`: a partial cell holding a checkpoint continues from it on the next `actorq
bench` (actorq's runs and SB3's), its counters and clock going on; without it, it starts over."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import actorq.experiment
from actorq.bench import cell as bench_cell
from actorq.bench.results import ResultsError
from actorq.bench.runner import plan_matrix, run_matrix
from actorq.bench.sb3_checkpoint import check_counters
from actorq.bench.spec import Cell, SpecError, load_spec
from actorq.cli import main

DQN = """
name = "resume"
resume = true
precisions = ["fp32"]
seeds = [0]
frameworks = ["{fw}"]
[defaults]
actors = 0
energy = false
[[tasks]]
agent = "dqn"
env = "gym:CartPole-v1"
label = "cartpole"
widths = ["16,16"]
[tasks.config]
envs_per_actor = 2
total_steps = 1200
eval_every = 400
eval_episodes = 2
target_return = 10000
min_replay_size = 100
replay_size = 2000
checkpoint_every = 20
log_every = 0.01
"""
SB3 = """[tasks.sb3]
learning_starts = 100
buffer_size = 2000
train_freq = 4
target_update_interval = 100
exploration_fraction = 0.5
"""


def _spec(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    spec = load_spec(path)
    spec.validate()
    return spec


def _in_process(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
    return bench_cell.main([str(cell_dir / "cell.json")])


def _state(cell_dir: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((cell_dir / "checkpoint" / "state.json").read_text())
    return state


def test_an_interrupted_actorq_cell_continues_from_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(tmp_path, DQN.format(fw="actorq"))
    results, cell = tmp_path / "r", spec.cells[0]
    real = actorq.experiment.train

    def stop_midway(info: dict[str, Any]) -> None:
        if info["env_steps"] >= 500:
            raise KeyboardInterrupt  # what Ctrl-C / SIGTERM becomes in the learner loop

    monkeypatch.setattr(actorq.experiment, "train", lambda cfg: real(cfg, callback=stop_midway))
    out = run_matrix(spec, results, _in_process, progress=False)
    assert out.failed == [cell.name]  # interrupted: no complete summary
    first = _state(results / cell.name)["counters"]
    assert 500 <= first["env_steps"] < 1200 and first["eval_time_s"] > 0

    assert plan_matrix(spec, results).resumes == {cell.name}
    monkeypatch.setattr(actorq.experiment, "train", real)
    out = run_matrix(spec, results, _in_process, progress=False)
    assert out.ran == [cell.name]
    cell_dir = results / cell.name
    summary = json.loads((cell_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 1200 and not (cell_dir / "failed.json").exists()
    assert summary["wall_time_s"] > first["wall_time_s"]  # the clock went on, not restarted
    assert summary["eval_time_s"] > first["eval_time_s"]
    assert json.loads((cell_dir / "cell.json").read_text())["segment"] == 2
    steps = [int(line.split(",")[0]) for line in (cell_dir / "metrics.csv").read_text().split()
             if ",charts/eval_return," in line]  # fmt: skip
    assert steps[0] == 400 and steps[-1] >= 1200  # both segments' evaluations, one file


class _StopAfter:
    """StopOnSignal whose flag goes up at its ``n``-th look (an SB3 callback looks once a
    step): a Ctrl-C in the middle of training, without a signal."""

    n = 600

    def __init__(self) -> None:
        self.looks = 0

    @property
    def requested(self) -> bool:
        self.looks += 1
        return self.looks >= self.n

    def restore(self) -> None:
        pass

    @contextlib.contextmanager
    def at_once(self) -> Iterator[None]:
        yield


def test_an_interrupted_sb3_cell_continues_from_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("stable_baselines3")
    import actorq.run.monitor

    spec = _spec(tmp_path, DQN.format(fw="sb3") + SB3)
    results, cell = tmp_path / "r", spec.cells[0]
    monkeypatch.setattr(actorq.run.monitor, "StopOnSignal", _StopAfter)
    out = run_matrix(spec, results, _in_process, progress=False)
    assert out.failed == [cell.name]
    cell_dir = results / cell.name
    first = _state(cell_dir)
    steps = first["learner"]["counters"]["num_timesteps"]
    assert 400 < steps < 1200 and first["counters"]["next_eval"] == 800
    assert first["learner"]["counters"]["_n_updates"] > 0

    monkeypatch.undo()
    out = run_matrix(spec, results, _in_process, progress=False)
    assert out.ran == [cell.name]
    summary = json.loads((cell_dir / "summary.json").read_text())
    assert summary["env_steps"] == 1200 and summary["segments"] == 2
    assert summary["wall_time_s"] > first["counters"]["wall_time_s"]
    assert "resume_refill_steps" not in summary  # its replay came back with its checkpoint
    rows = (cell_dir / "metrics.csv").read_text().split()
    evals = [int(r.split(",")[0]) for r in rows if ",charts/eval_return," in r]
    assert evals == [400, 800, 1200]  # the interrupted segment's kept, none twice


def test_an_sb3_dqn_cell_resumes_with_the_replay_it_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay buffer saved at the stop is the one the resumed model learns on, exactly
    (at the collection's start), and its action space's random stream goes on; a checkpoint
    without one (from before it was kept) refills it off the budget instead."""
    pytest.importorskip("stable_baselines3")
    import actorq.run.monitor
    from actorq.bench import sb3_checkpoint

    spec = _spec(tmp_path, DQN.format(fw="sb3") + SB3)
    results, cell = tmp_path / "r", spec.cells[0]
    monkeypatch.setattr(actorq.run.monitor, "StopOnSignal", _StopAfter)
    saved: dict[str, Any] = {}
    real_save = sb3_checkpoint.save

    def keep(run_dir: Path, model: Any, *args: Any) -> None:
        real_save(run_dir, model, *args)
        rb = model.replay_buffer
        saved.update(obs=rb.observations.copy(), acts=rb.actions.copy(), at=args[-1])
        saved["space"] = model.action_space.np_random.bit_generator.state

    monkeypatch.setattr(sb3_checkpoint, "save", keep)
    run_matrix(spec, results, _in_process, progress=False)
    cell_dir = results / cell.name
    assert (cell_dir / "checkpoint" / "replay.npz").is_file()
    monkeypatch.undo()
    from actorq.bench.sb3 import SB3 as Adapter
    from actorq.bench.spec import run_config

    cfg = run_config("dqn", cell.config, "USA")
    cfg.validate()
    model = Adapter().build(cfg, list(cell.width), cell.settings)
    _, _, replayed = sb3_checkpoint.load(cell_dir, model)
    rb = model.replay_buffer
    pos, full = saved["at"]
    assert replayed and (rb.pos, rb.full) == (pos, full) and pos > 100
    assert np.array_equal(rb.observations[:pos], saved["obs"][:pos])
    assert np.array_equal(rb.actions[:pos], saved["acts"][:pos])
    # its random actions (learning_starts, epsilon) go on where they were, not from the seed
    assert model.action_space.np_random.bit_generator.state == saved["space"]
    assert model.exploration_rate == 0.0  # a new model's, until SB3's first step sets it
    sb3_checkpoint.resume_exploration(model, cfg.total_steps)
    assert (
        model.exploration_rate
        == pytest.approx(model.exploration_schedule(1.0 - model.num_timesteps / cfg.total_steps))
        and model.exploration_rate > 0
    )
    model.get_env().close()
    # an older checkpoint: no replay in it (the manifest re-sealed without it)
    manifest = cell_dir / "checkpoint" / "manifest.json"
    (cell_dir / "checkpoint" / "replay.npz").unlink()
    entries = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({k: v for k, v in entries.items() if k != "replay.npz"}))
    run_matrix(spec, results, _in_process, progress=False)
    summary = json.loads((cell_dir / "summary.json").read_text())
    assert summary["resume_refill_steps"] == 100  # learning_starts, off the budget


class _StopAfterEvaluation(_StopAfter):
    """The flag goes up during the evaluation at 400 (seen at the next step's look)."""

    n = 401


def test_a_stop_during_an_sb3_evaluation_inside_a_collection_redoes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train_freq 3: the evaluation at 400 falls inside a collection (397..399 + 1). A stop
    while it runs checkpoints the collection's start (399 steps), so the resume redoes the
    collection and the evaluation: one row at 400, none lost (SB3 PPO's evaluations in the
    Atari spec all fall inside a 1,024-step collection)."""
    pytest.importorskip("stable_baselines3")
    import actorq.run.monitor

    spec = _spec(tmp_path, DQN.format(fw="sb3") + SB3.replace("train_freq = 4", "train_freq = 3"))
    results, cell = tmp_path / "r", spec.cells[0]
    monkeypatch.setattr(actorq.run.monitor, "StopOnSignal", _StopAfterEvaluation)
    run_matrix(spec, results, _in_process, progress=False)
    cell_dir = results / cell.name
    first = _state(cell_dir)
    assert first["learner"]["counters"]["num_timesteps"] < 400
    assert first["counters"]["next_eval"] == 400  # the collection's start's
    monkeypatch.undo()
    run_matrix(spec, results, _in_process, progress=False)
    rows = (cell_dir / "metrics.csv").read_text().split()
    evals = [int(r.split(",")[0]) for r in rows if ",charts/eval_return," in r]
    assert evals == [400, 800, 1200]


def test_without_resume_a_partial_cell_starts_over(tmp_path: Path) -> None:
    spec = _spec(tmp_path, DQN.format(fw="actorq").replace("resume = true\n", ""))
    cell_dir = tmp_path / "r" / spec.cells[0].name
    (cell_dir / "checkpoint").mkdir(parents=True)
    assert plan_matrix(spec, tmp_path / "r").resumes == set()


def test_a_partial_cell_with_other_settings_is_refused_and_kept(tmp_path: Path) -> None:
    """A checkpoint is never deleted because the spec changed: what a resume may change (the
    run's length, how updates run) goes on from it; anything else is one line, nothing run,
    nothing removed (an Atari cell's checkpoint is days of training)."""
    spec = _spec(tmp_path, DQN.format(fw="actorq"))
    cell = spec.cells[0]
    cell_dir = tmp_path / "r" / cell.name
    (cell_dir / "checkpoint").mkdir(parents=True)
    (cell_dir / "checkpoint" / "weights").write_text("kept")
    old = {"name": cell.name, "defaults": "agent",
           "config": {**cell.config, "total_steps": 999, "learner_threads": 2}}  # fmt: skip
    (cell_dir / "cell.json").write_text(json.dumps(old))
    assert plan_matrix(spec, tmp_path / "r").resumes == {cell.name}  # a longer or shorter run
    for key, value, needle in [
        ("gamma", 0.5, "(gamma: 0.5 -> None)"),
        ("batch_size", 7, "(batch_size: 7 -> "),
    ]:
        (cell_dir / "cell.json").write_text(
            json.dumps({**old, "config": {**cell.config, key: value}})
        )
        with pytest.raises(ResultsError, match=r"^[^\n]*$") as e:
            plan_matrix(spec, tmp_path / "r")
        assert "holds a checkpoint of a run with other settings" in str(e.value)
        assert needle in str(e.value) and "remove that cell" in str(e.value)
        assert main(["bench", str(spec.path), "--results", str(tmp_path / "r")]) == 2
        assert (cell_dir / "checkpoint" / "weights").read_text() == "kept"
    moved = {**old, "config": {**cell.config, "device": "cuda"}}  # --resume --device's change
    (cell_dir / "cell.json").write_text(json.dumps(moved))
    assert plan_matrix(spec, tmp_path / "r").resumes == {cell.name}
    (cell_dir / "cell.json").write_text(json.dumps({**old, "framework": "sb3"}))
    with pytest.raises(ResultsError, match="checkpoint of framework 'sb3'"):
        plan_matrix(spec, tmp_path / "r")
    (cell_dir / "cell.json").unlink()
    with pytest.raises(ResultsError, match=r"holds a checkpoint but no cell\.json"):
        plan_matrix(spec, tmp_path / "r")
    assert (cell_dir / "checkpoint" / "weights").read_text() == "kept"


@pytest.mark.parametrize("value", ["1", '"yes"', "[true]"])
def test_a_bad_resume_key_is_one_line(value: str, tmp_path: Path) -> None:
    path = tmp_path / "spec.toml"
    path.write_text(DQN.format(fw="actorq").replace("resume = true", f"resume = {value}"))
    with pytest.raises(SpecError, match="resume must be true or false"):
        load_spec(path)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=12), kids),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["wall_time_s", "eval_time_s", "hit", "next_eval", "refills", "engine"]),
        _JSON,
    )
    | _JSON
)
def test_sb3_checkpoint_counters_are_checked_or_refused_with_one_error(d: Any) -> None:
    """Whatever a damaged state.json holds, the counters are read or refused with a
    ValueError (one CheckpointError line for the cell), never another exception."""
    try:
        record, extra = check_counters(d)
    except ValueError:
        return
    assert record["wall_time_s"] >= 0 and record["eval_time_s"] >= 0
    assert isinstance(extra["next_eval"], int)
    assert extra["engine"] in (None, "envpool", "ale")


def test_a_stop_during_an_sb3_evaluation_at_a_collections_end_redoes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train_freq 4: the evaluation at 400 is a collection's last step (the Atari DQN cell's
    every evaluation). A stop while it ran was seen only at the next collection, whose start
    (the evaluation done, its confirmation skipped) was saved: the target it reached was lost."""
    pytest.importorskip("stable_baselines3")
    import actorq.run.monitor

    spec = _spec(tmp_path, DQN.format(fw="sb3") + SB3)
    results, cell = tmp_path / "r", spec.cells[0]
    monkeypatch.setattr(actorq.run.monitor, "StopOnSignal", _StopAfterEvaluation)
    run_matrix(spec, results, _in_process, progress=False)
    first = _state(results / cell.name)
    assert first["learner"]["counters"]["num_timesteps"] < 400
    assert first["counters"]["next_eval"] == 400  # the resume evaluates (and confirms) again


class _StopInFinalEvaluation(_StopAfter):
    """No stop while training; a signal during the final evaluation."""

    n = 10**9

    @contextlib.contextmanager
    def at_once(self) -> Iterator[None]:
        raise KeyboardInterrupt
        yield


def test_a_stop_during_an_sb3_cells_final_evaluation_keeps_its_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final evaluation (10 full Atari games) ran with no checkpoint after training: a stop
    there resumed from before the last periodic evaluation and trained the tail again."""
    pytest.importorskip("stable_baselines3")
    import actorq.run.monitor

    spec = _spec(tmp_path, DQN.format(fw="sb3") + SB3)
    results, cell = tmp_path / "r", spec.cells[0]
    monkeypatch.setattr(actorq.run.monitor, "StopOnSignal", _StopInFinalEvaluation)
    run_matrix(spec, results, _in_process, progress=False)
    cell_dir = results / cell.name
    assert not (cell_dir / "summary.json").exists()
    assert _state(cell_dir)["learner"]["counters"]["num_timesteps"] == 1200  # all of it
    monkeypatch.undo()
    run_matrix(spec, results, _in_process, progress=False)
    summary = json.loads((cell_dir / "summary.json").read_text())
    assert summary["env_steps"] == 1200 and summary["eval_return"] is not None


def test_an_sb3_cell_resumes_with_other_threads_but_not_other_settings(tmp_path: Path) -> None:
    from unittest import mock

    from actorq.bench.sb3 import SB3 as Adapter

    with mock.patch.object(Adapter, "missing", return_value=None):  # nothing of SB3 runs
        spec = _spec(tmp_path, DQN.format(fw="sb3") + SB3)
    cell = spec.cells[0]
    cell_dir = tmp_path / "r" / cell.name
    (cell_dir / "checkpoint").mkdir(parents=True)
    old = {"name": cell.name, "framework": "sb3", "frameworks": ["sb3"], "config": cell.config}
    # SB3's schedules run over the budget the cell started with: another is refused
    (cell_dir / "cell.json").write_text(
        json.dumps(
            {**old, "config": {**cell.config, "total_steps": 999}, "settings": cell.settings}
        )
    )
    with pytest.raises(ResultsError, match=r"a 999-step sb3 run .* its schedules"):
        plan_matrix(spec, tmp_path / "r")
    for sb3_settings, resumes in [
        ({**cell.settings, "torch_threads": 2, "checkpoint_minutes": 1.0}, True),
        ({**cell.settings, "train_freq": 3}, False),
    ]:
        (cell_dir / "cell.json").write_text(json.dumps({**old, "settings": sb3_settings}))
        if resumes:
            assert plan_matrix(spec, tmp_path / "r").resumes == {cell.name}
        else:
            with pytest.raises(ResultsError, match=r"\(settings\.train_freq: 3 -> 4\)"):
                plan_matrix(spec, tmp_path / "r")


def test_a_cell_still_running_is_not_readied_to_resume(tmp_path: Path) -> None:
    """A resumed cell's stale files are removed before it runs again: never under a segment
    still running (left by a killed bench), which is refused with one line, nothing touched."""
    import subprocess
    import sys

    from actorq.errors import ConfigError

    spec = _spec(tmp_path, DQN.format(fw="actorq"))
    results = tmp_path / "r"

    def partial(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
        (cell_dir / "checkpoint").mkdir()
        return 1

    run_matrix(spec, results, partial, progress=False)
    cell_dir = results / spec.cells[0].name
    assert plan_matrix(spec, results).resumes == {spec.cells[0].name}
    before = {p.name: p.read_bytes() for p in cell_dir.iterdir() if p.is_file()}
    hold = (
        "import sys, time; from pathlib import Path; from actorq.rundir import lock_file; "
        "lock_file(Path(sys.argv[1]), 'held'); print('locked', flush=True); time.sleep(120)"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", hold, str(cell_dir / ".lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=rf"is still being written \(pid {p.pid}\)"):
            run_matrix(spec, results, lambda c, d, t: 0, progress=False)
        after = {p.name: p.read_bytes() for p in cell_dir.iterdir() if p.is_file()}
        assert after.keys() == before.keys() | {".lock"} and "failed.json" in after
        assert all(after[k] == v for k, v in before.items() if k != ".lock")
    finally:
        p.kill()
        p.wait()
