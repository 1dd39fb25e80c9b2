"""`actorq bench`: spec checking, resumable matrix, one process per cell."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from actorq.bench import runner as bench_runner
from actorq.bench.runner import is_finished, run_matrix
from actorq.bench.spec import Cell, SpecError, load_spec, parse_overrides
from actorq.cli import main

REPO = Path(__file__).resolve().parents[2]

GOOD = """
name = "t"
precisions = ["fp32", "int8"]
seeds = [0, 1]

[defaults]
actors = 0

[[tasks]]
agent = "dqn"
env = "gym:CartPole-v1"
widths = ["64,64", "128,128"]
[tasks.config]
total_steps = 2000

[[tasks]]
agent = "d4pg"
env = "dmc:cartpole-balance"
precisions = ["fp32"]
seeds = [3]
"""


def _spec(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(text)
    return p


def test_cells_are_the_product_of_the_axes_with_deterministic_names(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, GOOD))
    names = [c.name for c in spec.cells]
    assert len(names) == 2 * 2 * 2 + 1
    assert "dqn-gym-CartPole-v1-w128x128-int8-s1" in names
    assert "d4pg-dmc-cartpole-balance-w256x256x256-fp32-s3" in names  # the default width
    cell = next(c for c in spec.cells if c.name == "dqn-gym-CartPole-v1-w64x64-int8-s0")
    cfg = cell.make_config()
    assert (cfg.hidden, cfg.precision, cfg.seed, cfg.actors, cfg.total_steps) == (
        (64, 64), "int8", 0, 0, 2000,
    )  # fmt: skip
    assert cfg.progress is False
    spec.validate()
    assert load_spec(_spec(tmp_path, GOOD)).cells == spec.cells  # deterministic


def test_order_seeds_runs_every_tasks_first_seed_before_any_second(tmp_path: Path) -> None:
    by_task = load_spec(_spec(tmp_path, GOOD)).cells
    spec = load_spec(_spec(tmp_path, 'order = "seeds"\n' + GOOD))
    assert sorted(c.name for c in spec.cells) == sorted(c.name for c in by_task)
    # task 1's seed 0 (2 widths x 2 precisions), task 2's only seed (3), then task 1's seed 1
    assert [(c.task[:3], c.seed) for c in spec.cells] == (
        [("dqn", 0)] * 4 + [("d4p", 3)] + [("dqn", 1)] * 4
    )
    seed0 = [c.name for c in by_task if c.task.startswith("dqn") and c.seed == 0]
    assert [c.name for c in spec.cells[:4]] == seed0  # stable within a seed


@pytest.mark.parametrize(
    "edit, needle",
    [
        (('name = "t"', 'name = "t"\norder = "random"'), "order must be one of 'tasks', 'seeds'"),
        (('agent = "dqn"', 'agent = "a2c"'), "unknown agent 'a2c'"),
        (("total_steps = 2000", "total_stepz = 2000"), "'total_stepz' is not a DQNConfig field"),
        (("total_steps = 2000", 'total_steps = "many"'), "does not fit its type"),
        (("total_steps = 2000", "seed = 4"), "'seed' is set by the matrix"),
        (('env = "gym:CartPole-v1"\n', ""), "missing env"),
        (('"fp32", "int8"]', '"fp32", "int3"]'), "unknown precision 'int3'"),
        (("gym:CartPole-v1", "gym:NoSuchEnv-v0"), "unknown Gymnasium id"),
        (('widths = ["64,64", "128,128"]', 'widths = ["64,x"]'), "positive integers"),
        (("[defaults]", "[defaultz]"), "unknown key(s) defaultz"),
        (("actors = 0", "hidden = [32]"), "either widths or config.hidden"),
        (("seeds = [0, 1]", "seeds = [0, 0]"), "repeated values"),
    ],
)
def test_bad_spec_is_one_line_and_nothing_runs(
    edit: tuple[str, str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert edit[0] in GOOD
    path = _spec(tmp_path, GOOD.replace(*edit))
    results = tmp_path / "results"
    assert main(["bench", str(path), "--results", str(results), "--no-progress"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and needle in err[0], err
    assert not results.exists()


GO_TASK = """
precisions = ["fp32", "int8"]
[defaults]
actors = 0
[[tasks]]
agent = "go"
env = "graphopt:placement/synthetic-20-s0"
[tasks.config]
graphs = ["rnnlm-s"]
"""


def test_a_go_task_has_no_width_axis_and_names_its_graphs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GO's config has no width fields (its width is one int, ``hidden``): its cells are
    one per seed and precision, named without a width, and its ``graphs`` list is read."""
    path = _spec(tmp_path, GO_TASK)
    spec = load_spec(path)
    spec.validate()
    assert [c.name for c in spec.cells] == [
        "go-graphopt-placement-synthetic-20-s0-fp32-s0",
        "go-graphopt-placement-synthetic-20-s0-int8-s0",
    ]
    assert all(c.width == () for c in spec.cells)
    assert spec.cells[0].make_config().graphs == ("rnnlm-s",)  # type: ignore[attr-defined]
    results = tmp_path / "results"
    assert main(["bench", str(path), "--results", str(results), "--dry-run"]) == 0
    assert "2 cells" in capsys.readouterr().out and not results.exists()


@pytest.mark.parametrize(
    "edit, needle",
    [
        (('agent = "go"', 'agent = "go"\nwidths = ["64"]'), "agent 'go' has no widths axis"),
        (('graphs = ["rnnlm-s"]', "graphs = [1]"), "does not fit its type"),
        (("rnnlm-s", "no-such-graph"), "--graphs: unknown graph"),
    ],
)
def test_a_bad_go_task_is_one_line(
    edit: tuple[str, str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert edit[0] in GO_TASK
    results = tmp_path / "results"
    path = _spec(tmp_path, GO_TASK.replace(*edit))
    assert main(["bench", str(path), "--results", str(results), "--dry-run"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and needle in err[0], err
    assert not results.exists()


def test_a_go_cells_results_are_reported(tmp_path: Path) -> None:
    """What a GO cell writes (its config.json's ``hidden`` is one int, not a width list) is
    read by the report and by a resumed bench."""
    from actorq.bench.report import load_runs
    from actorq.bench.runner import plan_matrix

    spec = load_spec(_spec(tmp_path, GO_TASK))
    results = tmp_path / "results"

    def runner(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
        config = {**cell.make_config().to_json(), "hidden": 32}
        (cell_dir / "config.json").write_text(json.dumps(config))
        _fake_summary(cell, cell_dir)
        return 0

    run_matrix(spec, results, runner, progress=False)
    runs = load_runs(results)
    assert sorted(r.name for r in runs) == sorted(c.name for c in spec.cells)
    assert all(r.width == () and r.agent == "go" for r in runs)
    assert len(plan_matrix(spec, results).finished) == 2


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"spec .*nope.toml: cannot read \(No such file"):
        load_spec(tmp_path / "nope.toml")


def test_committed_specs_parse() -> None:
    smoke = load_spec(REPO / "benchmarks/specs/smoke.toml")
    smoke.validate()
    quarl = load_spec(REPO / "benchmarks/specs/quarl_table.toml")
    envs = {c.env for c in quarl.cells}
    assert {"gym:CartPole-v1", "gym:Acrobot-v1", "gym:MountainCar-v0"} <= envs
    assert {c.precision for c in quarl.cells} == {"fp32", "fp16", "int8", "int4"}
    assert {c.seed for c in quarl.cells} == {0, 1, 2}
    assert all(c.width == (2048, 2048, 2048) for c in quarl.cells if c.agent == "dqn")
    bound = load_spec(REPO / "benchmarks/specs/actor_bound_cpu.toml")
    bound.validate()
    spi = {c.agent: c.make_config().samples_per_insert for c in bound.cells}
    assert spi == {"dqn": 0.05, "d4pg": 0.2}  # the actor-bound replay ratios (results.md)


def test_overrides_apply_to_every_cell_and_change_the_hash(tmp_path: Path) -> None:
    plain = load_spec(_spec(tmp_path, GOOD))
    over = parse_overrides(["actors=3", "log-every=0.5", "energy=false", "energy_country=FRA"])
    assert over == {"actors": 3, "log_every": 0.5, "energy": False, "energy_country": "FRA"}
    spec = load_spec(_spec(tmp_path, GOOD), over)
    spec.validate()
    assert [c.name for c in spec.cells] == [c.name for c in plain.cells]
    for c in spec.cells:
        cfg = c.make_config()
        assert (cfg.actors, cfg.log_every, cfg.energy, cfg.energy_country) == (3, 0.5, False, "FRA")
    assert spec.sha256 != plain.sha256
    # an override of the width field replaces a task's widths axis
    wide = load_spec(_spec(tmp_path, GOOD), {"hidden": "32,32"})
    assert {c.width for c in wide.cells if c.agent == "dqn"} == {(32, 32)}


def test_an_int_override_takes_scientific_notation(tmp_path: Path) -> None:
    """``--override total_steps=1e5`` (TOML reads a float) is the int 100000, in the cells'
    configs and the spec's hash alike."""
    spec = load_spec(_spec(tmp_path, GOOD), parse_overrides(["total_steps=1e5", "actors=2e0"]))
    spec.validate()
    assert spec.overrides == {"total_steps": 100_000, "actors": 2}
    for c in spec.cells:
        cfg = c.make_config()
        assert (cfg.total_steps, cfg.actors) == (100_000, 2) and type(cfg.total_steps) is int
    plain = load_spec(_spec(tmp_path, GOOD), {"total_steps": 100_000, "actors": 2})
    assert spec.sha256 == plain.sha256


@pytest.mark.parametrize(
    "items, needle",
    [
        (["actors"], "expected KEY=VALUE"),
        (["actors=1.5"], "actors = 1.5 does not fit its type"),
        (["total_steps=1e-3"], "total_steps = 0.001 does not fit its type"),
        (["actors=inf"], "actors = inf does not fit its type"),
        (["actors=1e9"], "--actors must be in [0, 100000], got 1000000000"),
        (["seed=3"], "'seed' is set by the matrix"),
        (["actorz=3"], "'actorz' is not a config field of any"),
        (['actors="many"'], "does not fit its type"),
    ],
)
def test_bad_override_is_one_line(
    items: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _spec(tmp_path, GOOD)
    results = tmp_path / "results"
    args = [a for i in items for a in ("--override", i)]
    assert main(["bench", str(path), "--results", str(results), "--no-progress", *args]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and needle in err[0], err
    assert not results.exists()


def _fake_summary(cell: Cell, cell_dir: Path, **extra: object) -> None:
    (cell_dir / "summary.json").write_text(
        json.dumps(
            {"env": cell.env, "precision": cell.precision, "env_steps": 100,
             "eval_return": 1.0, "wall_time_s": 2.0, "interrupted": False, **extra}
        )
    )  # fmt: skip


def test_finished_cells_are_skipped_failures_recorded_partial_cells_rerun(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, GOOD))
    results = tmp_path / "results"
    calls: list[str] = []

    def runner(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
        calls.append(cell.name)
        assert json.loads((cell_dir / "cell.json").read_text())["config"] == cell.config
        if cell.precision == "int8" and cell.seed == 1:
            return 1  # a crash: recorded, and the matrix goes on
        _fake_summary(cell, cell_dir)
        return 0

    out = run_matrix(spec, results, runner, progress=False)
    assert calls == [c.name for c in spec.cells]
    assert sorted(out.failed) == sorted(c.name for c in spec.cells if c.name.endswith("int8-s1"))
    assert len(out.ran) == len(spec.cells) - 2
    failed = json.loads((results / out.failed[0] / "failed.json").read_text())
    assert failed["status"] == 1
    assert (results / "spec.toml").read_text() == spec.path.read_text()
    assert "cpu_model" in json.loads((results / "machine.json").read_text())["sessions"][0]

    # a partial cell (checkpoint, no summary) and an interrupted one start over, cleanly
    partial = results / out.ran[0]
    (partial / "summary.json").unlink()
    (partial / "checkpoint").mkdir()
    interrupted = results / out.ran[1]
    # as a stopped run writes it: no final evaluation (null), which is not a bad file
    _fake_summary(spec.cells[1], interrupted, interrupted=True, eval_return=None)
    calls.clear()
    out2 = run_matrix(spec, results, runner, progress=False)
    assert sorted(calls) == sorted([partial.name, interrupted.name, *out.failed])
    assert not (partial / "checkpoint").exists()
    assert len(out2.skipped) == len(spec.cells) - 4
    assert len(json.loads((results / "machine.json").read_text())["sessions"]) == 2

    calls.clear()
    run_matrix(spec, results, lambda c, d, t: _fake_summary(c, d) or 0, progress=False)
    assert all(is_finished(results / c.name) for c in spec.cells)
    calls.clear()
    out4 = run_matrix(spec, results, runner, progress=False)
    assert calls == [] and len(out4.skipped) == len(spec.cells)
    assert len(json.loads((results / "machine.json").read_text())["sessions"]) == 3


def test_real_cell_in_a_subprocess(tmp_path: Path) -> None:
    """One tiny real run through `actorq bench`: a fresh process, summary with energy keys."""
    path = _spec(
        tmp_path,
        """
precisions = ["int8"]
seeds = [0]
timeout_s = 120
[defaults]
actors = 0
envs_per_actor = 4
total_steps = 1500
min_replay_size = 500
eval_every = 1000
eval_episodes = 2
log_every = 0.5
save_replay = false
[[tasks]]
agent = "dqn"
env = "gym:CartPole-v1"
widths = ["32,32"]
""",
    )
    results = tmp_path / "r"
    assert main(["bench", str(path), "--results", str(results), "--no-progress"]) == 0
    cell_dir = results / "dqn-gym-CartPole-v1-w32x32-int8-s0"
    summary = json.loads((cell_dir / "summary.json").read_text())
    assert summary["precision"] == "int8" and summary["env_steps"] >= 1500
    assert {"energy_kwh", "energy_kg_co2", "energy_estimated"} <= set(summary)
    pytest.importorskip("codecarbon")
    assert summary["energy_kwh"] > 0
    assert "codecarbon INFO" not in (cell_dir / "log.txt").read_text()  # codecarbon kept quiet


def _hanging_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> Any:
    """A one-cell spec whose cell is ``python -c script`` with an 8 s time limit: long enough
    for two Python start-ups on a loaded 2-core machine (2 s failed in CI)."""
    spec = load_spec(_spec(tmp_path, GOOD))
    monkeypatch.setattr(bench_runner, "cell_command", lambda d: [sys.executable, "-c", script])
    spec.timeout_s = 8.0
    spec.cells = spec.cells[:1]
    return spec


def test_a_cell_past_its_time_limit_is_stopped_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "child.pid"
    # a "cell" that never ends, with a child that ignores Ctrl-C (an actor left behind)
    hang = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)']); "
        f"open({str(pidfile)!r}, 'w').write(str(c.pid)); time.sleep(600)"
    )
    spec = _hanging_cell(tmp_path, monkeypatch, hang)
    t = time.perf_counter()
    out = run_matrix(spec, tmp_path / "r", progress=False)
    assert time.perf_counter() - t < 40
    assert out.failed == [spec.cells[0].name]
    failed = json.loads((tmp_path / "r" / out.failed[0] / "failed.json").read_text())
    assert failed["why"] == "timed out"
    child = int(pidfile.read_text())
    for _ in range(50):  # the child is gone (reaped by init once its parent died)
        if not Path(f"/proc/{child}").exists():
            break
        time.sleep(0.1)
    assert (
        not Path(f"/proc/{child}").exists()
        or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    )


def _cell_recording_sigint(marker: Path) -> str:
    """A "cell" that sleeps until SIGINT, which it records in ``marker`` (a run checkpointing)."""
    return (
        "import time\n"
        "try:\n    time.sleep(600)\n"
        f"except KeyboardInterrupt:\n    open({str(marker)!r}, 'w').write('checkpointed')\n"
    )


def test_a_timed_out_cell_gets_sigint_even_when_the_runner_ignores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shell starts background jobs (``nohup actorq bench ... &``) with SIGINT ignored, and
    children inherit that: a timed-out cell then never saw the SIGINT that makes a run
    checkpoint and stop, and was killed 30 s later. The cell must see it."""
    marker = tmp_path / "got-sigint"
    hang = _cell_recording_sigint(marker)
    spec = _hanging_cell(tmp_path, monkeypatch, hang)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job
    try:
        out = run_matrix(spec, tmp_path / "r", progress=False)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # the runner's own: unchanged
    finally:
        signal.signal(signal.SIGINT, old)
    assert out.failed == [spec.cells[0].name]
    assert marker.read_text() == "checkpointed"


def test_sigterm_to_the_runner_stops_its_cell_as_ctrl_c_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM to `actorq bench` (kill, a scheduler's stop) reaches the cell in flight as the
    SIGINT that makes a run checkpoint and stop, instead of leaving it training as an orphan
    in its own session; the runner's SIGTERM disposition is put back."""
    import threading

    marker = tmp_path / "got-sigint"
    hang = _cell_recording_sigint(marker)
    spec = _hanging_cell(tmp_path, monkeypatch, hang)
    spec.timeout_s = 30.0

    def mine(signum: int, frame: object) -> None:  # this process's own (never dies here)
        pass

    old = signal.signal(signal.SIGTERM, mine)
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    t = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_matrix(spec, tmp_path / "r", progress=False)
        assert signal.getsignal(signal.SIGTERM) is mine  # put back
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, old)
    assert time.perf_counter() - t < 25  # stopped at once, not at the cell's time limit
    assert marker.read_text() == "checkpointed"


def test_a_second_sigterm_does_not_cut_the_cells_checkpoint_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler (or an impatient user) that sends SIGTERM twice: the cell's checkpoint, in
    flight after the first, is written whole before the runner stops (it was killed there)."""
    import threading

    marker = tmp_path / "got-sigint"
    hang = (
        "import time\n"
        "try:\n    time.sleep(600)\n"
        "except KeyboardInterrupt:\n"
        "    time.sleep(2.0)\n"  # a checkpoint being written
        f"    open({str(marker)!r}, 'w').write('checkpointed')\n"
    )
    spec = _hanging_cell(tmp_path, monkeypatch, hang)
    spec.timeout_s = 30.0

    def mine(signum: int, frame: object) -> None:
        pass

    old = signal.signal(signal.SIGTERM, mine)
    timers = [threading.Timer(s, os.kill, (os.getpid(), signal.SIGTERM)) for s in (3.0, 3.5)]
    for timer in timers:
        timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_matrix(spec, tmp_path / "r", progress=False)
    finally:
        for timer in timers:
            timer.cancel()
        signal.signal(signal.SIGTERM, old)
    assert marker.read_text() == "checkpointed"


def test_a_sigterm_while_a_timed_out_cell_checkpoints_stops_the_matrix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM that lands while a timed-out cell checkpoints waits for the checkpoint, then
    stops the matrix as asked (it was swallowed: the next cell started)."""
    import threading

    marker = tmp_path / "got-sigint"
    hang = (
        "import time\n"
        "try:\n    time.sleep(600)\n"
        "except KeyboardInterrupt:\n"
        "    time.sleep(4.0)\n"  # the checkpoint the time limit's SIGINT started
        f"    open({str(marker)!r}, 'w').write('checkpointed')\n"
    )
    spec = _hanging_cell(tmp_path, monkeypatch, hang)  # its time limit: 8 s

    def mine(signum: int, frame: object) -> None:
        pass

    old = signal.signal(signal.SIGTERM, mine)
    timer = threading.Timer(9.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_matrix(spec, tmp_path / "r", progress=False)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, old)
    assert marker.read_text() == "checkpointed"


def test_a_spec_that_turns_energy_off_is_obeyed() -> None:
    """Every cell tracks energy on the spec's grid, unless the spec says energy = false (the
    matrix turned it back on: issue 49, item 10)."""
    from actorq.bench.spec import run_config

    assert run_config("dqn", {}, "FRA").energy is True
    off = run_config("dqn", {"energy": False}, "FRA")
    assert off.energy is False and off.energy_country == "FRA" and off.progress is False


def test_a_second_runner_on_the_same_results_is_refused(tmp_path: Path) -> None:
    """Two `actorq bench` on one results directory would run every cell twice into the same
    cell directories: the second is refused with one line and runs nothing."""
    import subprocess
    import sys

    from actorq.errors import ConfigError

    spec = load_spec(_spec(tmp_path, GOOD))
    results = tmp_path / "results"
    results.mkdir()
    hold = (
        "import sys, time; from pathlib import Path; from actorq.rundir import lock_file; "
        "lock_file(Path(sys.argv[1]), 'held'); print('locked', flush=True); time.sleep(120)"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", hold, str(results / ".lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "locked"
        calls: list[str] = []
        with pytest.raises(ConfigError, match="another actorq bench is running these results"):
            run_matrix(spec, results, lambda c, d, t: calls.append(c.name) or 0, progress=False)
        assert calls == [] and sorted(f.name for f in results.iterdir()) == [".lock"]
    finally:
        p.kill()
        p.wait()
    out = run_matrix(spec, results, lambda c, d, t: _fake_summary(c, d) or 0, progress=False)
    assert len(out.ran) == len(spec.cells)  # the holder gone, the matrix runs


def test_a_finished_cell_run_with_other_settings_is_refused_not_reported(tmp_path: Path) -> None:
    """After the spec changes, a finished cell of the same name is not counted as finished under
    the new spec (issue 49 item 8): one line naming the setting, nothing run or removed."""
    from actorq.bench.results import ResultsError

    results = tmp_path / "results"
    spec = load_spec(_spec(tmp_path, GOOD))
    run_matrix(spec, results, lambda c, d, t: _fake_summary(c, d) or 0, progress=False)
    changed = load_spec(_spec(tmp_path, GOOD.replace("total_steps = 2000", "total_steps = 3000")))
    calls: list[str] = []
    with pytest.raises(ResultsError, match=r"other settings .*\(total_steps: 2000 -> 3000\)"):
        run_matrix(changed, results, lambda c, d, t: calls.append(c.name) or 0, progress=False)
    assert calls == [] and all(is_finished(results / c.name) for c in spec.cells)
    out = run_matrix(spec, results, lambda c, d, t: calls.append(c.name) or 0, progress=False)
    assert calls == [] and len(out.skipped) == len(spec.cells)  # the same spec: all finished


def test_a_cells_unnamed_settings_are_the_agents_defaults_as_in_train(tmp_path: Path) -> None:
    """A DQN cell whose spec names neither ``dueling`` nor ``calibration`` runs what
    ``actorq train dqn`` runs (the dueling head, GPTQ-calibrated rounding), not what a run saved
    before those settings existed ran (the bench built cells that way until 2026-11-30)."""
    from actorq import DQNConfig
    from actorq.bench.spec import run_config

    spec = load_spec(_spec(tmp_path, GOOD))
    cell = next(c for c in spec.cells if c.agent == "dqn")
    for cfg in (cell.make_config(), run_config("dqn", cell.config, "USA")):
        assert (cfg.dueling, cfg.calibration) == (DQNConfig.dueling, DQNConfig.calibration)
        assert (cfg.dueling, cfg.calibration) == (True, "auto")


def test_a_cell_finished_before_the_agents_defaults_counts_only_where_the_spec_names_its_own(
    tmp_path: Path,
) -> None:
    """A cell.json without ``defaults`` ran DQN without its dueling head and rounded to nearest:
    the spec must name those settings for the cell to count as finished (one line otherwise,
    naming what changed); a cell written now records its defaults."""
    from actorq.bench.results import ResultsError

    results = tmp_path / "results"
    spec = load_spec(_spec(tmp_path, GOOD))
    run_matrix(spec, results, lambda c, d, t: _fake_summary(c, d) or 0, progress=False)
    for c in spec.cells:  # as an older bench wrote them
        path = results / c.name / "cell.json"
        old = json.loads(path.read_text())
        assert old.pop("defaults") == "agent"
        path.write_text(json.dumps(old))
    calls: list[str] = []
    changed = r"other settings .*\((dueling: False -> True|calibration: 'none' -> 'auto')\)"
    with pytest.raises(ResultsError, match=changed):
        run_matrix(spec, results, lambda c, d, t: calls.append(c.name) or 0, progress=False)
    named = GOOD.replace("total_steps = 2000", "total_steps = 2000\ndueling = false\n"
                         'calibration = "none"')  # fmt: skip
    out = run_matrix(
        load_spec(_spec(tmp_path, named)),
        results,
        lambda c, d, t: calls.append(c.name) or 0,
        progress=False,
    )
    assert calls == [] and len(out.skipped) == len(spec.cells)  # D4PG's cell: no such settings


def test_a_failed_cell_says_why_not_just_its_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A diverging learner in a cell printed only "exit status 1": the run's one error line
    now comes with the status, on the console and in failed.json."""
    spec = load_spec(_spec(tmp_path, GOOD))
    results = tmp_path / "results"
    why = "the learner diverged (loss is nan at update 12); stopped at 300 env steps"

    def runner(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
        (cell_dir / "log.txt").write_text(f"run dir: {cell_dir}\nactorq: error: {why}\n")
        return 2

    out = run_matrix(spec, results, runner, progress=True)
    failed = json.loads((results / out.failed[0] / "failed.json").read_text())
    assert failed["why"] == f"exit status 2: {why}"
    assert why in " ".join(capsys.readouterr().out.split())


def _hold(lock: Path) -> Any:
    """A process holding ``lock``, as a cell's run left running by a killed bench does."""
    import subprocess

    hold = (
        "import sys, time; from pathlib import Path; from actorq.rundir import lock_file; "
        "lock_file(Path(sys.argv[1]), 'held'); print('locked', flush=True); time.sleep(120)"
    )
    p = subprocess.Popen([sys.executable, "-c", hold, str(lock)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "locked"
    return p


def test_a_cell_a_process_still_writes_is_not_cleared(tmp_path: Path) -> None:
    """A cell's run outlives a SIGKILLed `actorq bench` (its own session): the next bench
    refuses with one line rather than deleting the directory under it, and runs nothing."""
    from actorq.errors import ConfigError

    spec = load_spec(_spec(tmp_path, GOOD))
    results = tmp_path / "results"
    run_matrix(spec, results, lambda c, d, t: 0, progress=False)  # every cell partial
    cell_dir = results / spec.cells[0].name
    (cell_dir / "log.txt").write_text("still training")
    p = _hold(cell_dir / ".lock")
    try:
        calls: list[str] = []
        with pytest.raises(ConfigError, match=rf"is still being written \(pid {p.pid}\)"):
            run_matrix(spec, results, lambda c, d, t: calls.append(c.name) or 0, progress=False)
        assert calls == [] and (cell_dir / "log.txt").read_text() == "still training"
        assert (cell_dir / "cell.json").is_file()
    finally:
        p.kill()
        p.wait()


def test_sighup_to_the_runner_stops_its_cell_as_ctrl_c_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminal closing (SIGHUP) stops the cell in flight through its checkpoint, as
    SIGTERM does, instead of leaving it training in its own session; the disposition is put
    back."""
    import threading

    marker = tmp_path / "got-sigint"
    spec = _hanging_cell(tmp_path, monkeypatch, _cell_recording_sigint(marker))
    spec.timeout_s = 30.0

    def mine(signum: int, frame: object) -> None:  # this process's own (never dies here)
        pass

    old = signal.signal(signal.SIGHUP, mine)
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGHUP))
    timer.start()
    t = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_matrix(spec, tmp_path / "r", progress=False)
        assert signal.getsignal(signal.SIGHUP) is mine  # put back
    finally:
        timer.cancel()
        signal.signal(signal.SIGHUP, old)
    assert time.perf_counter() - t < 25  # stopped at once, not at the cell's time limit
    assert marker.read_text() == "checkpointed"


@pytest.mark.parametrize("first", ["cell.json", "log.txt"])
def test_a_cell_clear_cut_short_leaves_nothing_that_stops_the_next_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """Ctrl-C while a partial cell is removed to start over (its entries go in any order):
    what was left of it (a log.txt without its cell.json) counted as not a cell's, and every
    later bench refused the cell. Nothing of it stays at the cell's name; the next bench runs
    it, and the report does not list the remains as a cell."""
    import shutil

    from actorq.bench.report import load_runs

    spec = load_spec(_spec(tmp_path, GOOD))
    results = tmp_path / "results"

    def partial(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
        (cell_dir / "log.txt").write_text("killed")
        return 1

    run_matrix(spec, results, partial, progress=False)

    def cut(path: Any, *args: Any, **kwargs: Any) -> None:  # Ctrl-C after the first entry
        (Path(path) / first).unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", cut)
    with pytest.raises(KeyboardInterrupt):
        run_matrix(spec, results, partial, progress=False)
    monkeypatch.undo()
    runs = load_runs(results, skipped=[])
    assert sorted(r.name for r in runs) == sorted(c.name for c in spec.cells[1:])
    calls: list[str] = []
    out = run_matrix(spec, results, lambda c, d, t: calls.append(c.name) or 1, progress=False)
    assert calls == [c.name for c in spec.cells] and len(out.failed) == len(spec.cells)
    assert sorted(p.name for p in results.iterdir()) == sorted(
        [".lock", "machine.json", "spec.toml", *calls]
    )


def test_a_hangup_nohup_ignores_stays_ignored_by_the_runner() -> None:
    """``nohup actorq bench ...`` (docs/atari.md's long runs): the runner's SIGTERM handler
    leaves the ignored hangup ignored, so the bench outlives its ssh session."""
    from actorq.bench.runner import _TermAsInterrupt

    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        term = _TermAsInterrupt()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        term.restore()
    finally:
        signal.signal(signal.SIGHUP, old)


ONE_HIDDEN = """
name = "one"
precisions = ["fp32", "int8"]
seeds = [0]
[[tasks]]
agent = "dqn"
env = "gym:CartPole-v1"
label = "cp"
[tasks.config]
hidden = [64]
total_steps = 2000
"""


def test_a_cell_train_would_refuse_as_new_is_refused_only_where_it_would_start(
    tmp_path: Path,
) -> None:
    """An int8 MLP cell with one hidden layer is refused as a new run (nothing would be int8):
    one line before anything is written when the bench would start it, but a results tree that
    holds it finished (made before that check) is still read and the spec's other cells run."""
    from actorq.bench.spec import SpecError

    spec = load_spec(_spec(tmp_path, ONE_HIDDEN))
    spec.validate()  # as `actorq bench` checks a spec: every other check passes
    results = tmp_path / "results"
    with pytest.raises(SpecError, match=r"cell cp-w64-int8-s0: --precision int8 .* nothing would"):
        run_matrix(spec, results, lambda c, d, t: pytest.fail("ran a cell"), progress=False)
    assert not results.exists()
    spec.refused_if_new.clear()  # as a bench before the check made the cells
    run_matrix(spec, results, lambda c, d, t: _fake_summary(c, d) or 0, progress=False)
    again = load_spec(spec.path)
    again.validate()
    out = run_matrix(again, results, lambda c, d, t: 1, progress=False)
    assert len(out.skipped) == 2 and not out.failed
