"""The framework axis of `actorq bench`: other frameworks' cells through an adapter, side by side
with actorq's, alternating, checked on resume, compared in the report."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from actorq.bench import cell as bench_cell
from actorq.bench import frameworks
from actorq.bench.frameworks import Record
from actorq.bench.report import build_report
from actorq.bench.results import ResultsError, read_metrics
from actorq.bench.runner import run_matrix
from actorq.bench.spec import Cell, SpecError, load_spec
from actorq.cli import main
from actorq.logging import CONFIRM_METRIC

SPEC = """
name = "side"
precisions = ["fp32", "int8"]
seeds = [0, 1]
frameworks = ["toy", "actorq"]
[defaults]
actors = 0
[[tasks]]
agent = "dqn"
env = "gym:CartPole-v1"
label = "cartpole"
widths = ["32,32"]
[tasks.config]
total_steps = 300
eval_every = 100
target_return = 50
[tasks.toy]
speed = 2.0
"""


class Toy:
    """A framework that 'trains' by arithmetic: its evaluation returns climb 40 per evaluation
    (the target, 50, is reached at the second), and it writes what every adapter writes."""

    def missing(self) -> str | None:
        return None

    def check(self, agent: str, settings: dict[str, Any]) -> None:
        frameworks.check_keys(agent, settings, {"dqn": frozenset({"speed"})})

    def run(self, cfg: Any, cell: dict[str, Any], run_dir: Path) -> None:
        record = Record(cfg, run_dir, "toy")
        record.start()
        for i, step in enumerate(range(cfg.eval_every, cfg.total_steps + 1, cfg.eval_every)):
            record.evaluate(step, lambda seed, i=i: np.full(3, 40.0 * (i + 1)))
        record.finish(cfg.total_steps, 10.0 / cell["settings"]["speed"], np.array([120.0]))


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(frameworks.FRAMEWORKS, "toy", f"{__name__}:Toy")


def _spec(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def _actorq_summary(cell: Cell, cell_dir: Path) -> None:
    """A finished actorq run's summary, without training: 20 s, target at 8 s."""
    summary = {"env": cell.env, "precision": cell.precision, "env_steps": 300,
               "eval_return": 100.0, "wall_time_s": 20.0, "eval_time_s": 0.0,
               "target_return": 50.0, "reached_target": True, "time_to_target_s": 8.0,
               "steps_to_target": 200, "interrupted": False}  # fmt: skip
    (cell_dir / "summary.json").write_text(json.dumps(summary))


def _runner(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
    """The cell process's code, in this process (so the toy adapter registered here is seen)."""
    if cell.framework == "actorq":
        _actorq_summary(cell, cell_dir)
        return 0
    return bench_cell.main([str(cell_dir / "cell.json")])


def test_another_frameworks_target_counts_only_when_fresh_seeds_confirm_it(
    tmp_path: Path,
) -> None:
    """As actorq's loop: an evaluation at the target whose confirmation on fresh seeds falls
    short is no hit (one rule for both sides of a time-to-target ratio)."""
    from actorq.run import report

    assert (frameworks.EVAL_SEED, frameworks.FINAL_EVAL_SEED, frameworks.CONFIRM_SEED) == (
        report.EVAL_SEED, report.FINAL_EVAL_SEED, report.CONFIRM_SEED)  # fmt: skip
    cfg = SimpleNamespace(
        env="toy", agent="dqn", seed=0, target_return=50.0, eval_every=100, eval_episodes=3
    )
    record = Record(cfg, tmp_path, "toy")  # type: ignore[arg-type]
    asked: list[int] = []

    def returns(seed: int, lucky: bool) -> np.ndarray:
        asked.append(seed)
        return np.full(3, 60.0 if seed == frameworks.EVAL_SEED or not lucky else 40.0)

    record.start()
    # a stop signal pending: no confirmation (the resumed cell redoes the evaluation)
    assert not record.evaluate(100, lambda seed: returns(seed, lucky=False), lambda: True)
    assert record.hit is None and asked == [frameworks.EVAL_SEED]
    asked.clear()
    assert not record.evaluate(100, lambda seed: returns(seed, lucky=True))
    assert record.hit is None  # 60 on the evaluation's seeds, 40 on fresh ones
    assert record.evaluate(200, lambda seed: returns(seed, lucky=False))
    assert record.hit is not None and record.hit[0] == 200
    assert not record.evaluate(300, lambda seed: returns(seed, lucky=False))  # reached once
    fresh = [s for s in asked if s != frameworks.EVAL_SEED]
    assert len(fresh) == 2 and len(set(fresh)) == 2 and min(fresh) >= frameworks.CONFIRM_SEED
    record.finish(300, 1.0, np.array([60.0]))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps_to_target"] == 200
    # each confirmation is logged (a report reads a running cell's time to target from it)
    rows = read_metrics(tmp_path / "metrics.csv", lambda m: m == CONFIRM_METRIC)
    assert [(s, v) for s, _, _, v in rows] == [(100, 40.0), (200, 60.0)]


def test_cells_alternate_across_frameworks_seed_by_seed(toy: None, tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path))
    spec.validate()
    assert [c.name for c in spec.cells] == [
        "cartpole-w32x32-toy-s0", "cartpole-w32x32-fp32-s0", "cartpole-w32x32-int8-s0",
        "cartpole-w32x32-toy-s1", "cartpole-w32x32-fp32-s1", "cartpole-w32x32-int8-s1",
    ]  # fmt: skip
    toy_cell = spec.cells[0]
    assert (toy_cell.framework, toy_cell.settings) == ("toy", {"speed": 2.0})
    assert toy_cell.frameworks == ("toy", "actorq")
    # a spec without a framework axis keeps its cells and names, precisions alternating
    plain = load_spec(
        _spec(
            tmp_path,
            SPEC.split("frameworks =")[0] + SPEC.split('"actorq"]')[1].split("[tasks.toy]")[0],
        )
    )
    assert [c.name for c in plain.cells] == [
        "cartpole-w32x32-fp32-s0", "cartpole-w32x32-int8-s0",
        "cartpole-w32x32-fp32-s1", "cartpole-w32x32-int8-s1",
    ]  # fmt: skip
    assert all(c.framework == "actorq" for c in plain.cells)


def test_a_toy_framework_runs_through_the_matrix_and_the_report(toy: None, tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path))
    results = tmp_path / "r"
    out = run_matrix(spec, results, _runner, progress=False)
    assert not out.failed and len(out.ran) == 6
    summary = json.loads((results / "cartpole-w32x32-toy-s0/summary.json").read_text())
    assert (summary["precision"], summary["steps_to_target"], summary["eval_return"]) == (
        "toy", 200, 120.0,
    )  # fmt: skip
    text, data, _ = build_report(results, reps=100)
    assert "## Side by side with other frameworks" in text
    assert "| toy | 2 | 120.0 ± 0.0 | 2/2 | 200 |" in text
    ratios = {(d["what"], d["actorq"]): d["ratio"] for d in data["frameworks"]}
    # toy trains 5 s (10 / speed 2) against actorq's 20: a quarter of the time
    assert ratios[("training time", "int8")] == pytest.approx(0.25, rel=1e-3)
    assert set(ratios) == {(w, p) for w in ("training time", "time to target")
                           for p in ("fp32", "int8")}  # fmt: skip


def test_one_seed_a_side_is_shown_without_a_spread_or_a_ci(toy: None, tmp_path: Path) -> None:
    results = tmp_path / "r"
    run_matrix(load_spec(_spec(tmp_path)), results, _runner, progress=False)
    for d in results.glob("*-s1"):
        shutil.rmtree(d)
    text, data, _ = build_report(results, reps=100)
    assert "| toy | 1 | 120.0 (1 seed) | 1/1 |" in text  # not "± 0.0": one seed has no spread
    assert "(one seed each: no CI)" in text and "95% CI" not in text.split("## Side by side")[1]
    assert all(math.isnan(d["low"]) and math.isnan(d["high"]) for d in data["frameworks"])


def test_a_target_neither_side_reached_is_said_not_left_out(toy: None, tmp_path: Path) -> None:
    results = tmp_path / "r"
    run_matrix(load_spec(_spec(tmp_path)), results, _runner, progress=False)
    for s in results.glob("*/summary.json"):
        summary = json.loads(s.read_text())
        summary.update(reached_target=False, steps_to_target=None, time_to_target_s=None)
        s.write_text(json.dumps(summary))
    text, data, _ = build_report(results, reps=100)
    line = "- time to target, toy / actorq int8: no ratio (neither side's median run reached"
    assert line in text
    assert {d["what"] for d in data["frameworks"]} == {"training time"}


def test_a_time_to_target_from_before_steps_to_target_is_unknown_not_compared(
    toy: None, tmp_path: Path
) -> None:
    """An older summary names no target step, so the evaluations before the target cannot be
    taken out: its time to target, evaluations in, was compared as training time."""
    results = tmp_path / "r"
    run_matrix(load_spec(_spec(tmp_path)), results, _runner, progress=False)
    for s in results.glob("*-int8-*/summary.json"):
        summary = json.loads(s.read_text())
        del summary["steps_to_target"]
        s.write_text(json.dumps(summary))
    text, data, _ = build_report(results, reps=100)
    int8 = next(ln for ln in text.splitlines() if ln.startswith("| int8 | 2 |"))
    assert "| unknown: 2 run(s) from before steps_to_target |" in int8
    line = "- time to target, toy / actorq int8: no ratio (unknown: 2 run(s) from before"
    assert line in text
    assert {(d["what"], d["actorq"]) for d in data["frameworks"]} == {
        ("training time", "fp32"),
        ("training time", "int8"),
        ("time to target", "fp32"),
    }


def test_resume_with_another_framework_list_is_refused(toy: None, tmp_path: Path) -> None:
    results = tmp_path / "r"
    run_matrix(load_spec(_spec(tmp_path)), results, _runner, progress=False)
    fewer = load_spec(_spec(tmp_path, SPEC.replace('["toy", "actorq"]', '["actorq", "toy"]')))
    with pytest.raises(ResultsError, match=r"other settings .*\(frameworks: \['toy', 'actorq'\]"):
        run_matrix(fewer, results, _runner, progress=False)
    faster = load_spec(_spec(tmp_path, SPEC.replace("speed = 2.0", "speed = 3.0")))
    with pytest.raises(ResultsError, match=r"\(settings: \{'speed': 2.0\} -> \{'speed': 3.0\}\)"):
        run_matrix(faster, results, _runner, progress=False)
    again = run_matrix(load_spec(_spec(tmp_path)), results, _runner, progress=False)
    assert len(again.skipped) == 6 and not again.ran


@pytest.mark.parametrize(
    "edit, needle",
    [
        (('["toy", "actorq"]', '["toy", "keras"]'), "unknown framework 'keras'"),
        (("speed = 2.0", "sped = 2.0"), "tasks[0].toy: unknown key 'sped'"),
        (("[tasks.toy]", "[tasks.sb4]"), "unknown key(s) sb4"),
    ],
)
def test_a_bad_framework_axis_is_one_line(
    toy: None, edit: tuple[str, str], needle: str, tmp_path: Path
) -> None:
    assert edit[0] in SPEC
    with pytest.raises(SpecError, match=r"^[^\n]*$") as e:
        load_spec(_spec(tmp_path, SPEC.replace(*edit)))
    assert needle in str(e.value)


def test_a_missing_extra_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "stable_baselines3" else real(n, *a)
    )
    text = SPEC.replace('"toy"', '"sb3"').replace("[tasks.toy]\nspeed = 2.0", "")
    results = tmp_path / "r"
    assert main(["bench", str(_spec(tmp_path, text)), "--results", str(results), "--dry-run"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    assert "framework 'sb3' needs stable-baselines3" in err[0] and "actorq[peers]" in err[0]
    assert not results.exists()


def test_sb3_cell_trains_and_reports(tmp_path: Path) -> None:
    """The SB3 adapter for real, on a tiny budget: it trains, evaluates on actorq's seeds and
    writes what the report reads."""
    pytest.importorskip("stable_baselines3")
    text = SPEC.replace('"toy"', '"sb3"').replace(
        "[tasks.toy]\nspeed = 2.0", "[tasks.sb3]\nlearning_starts = 0\nexploration_fraction = 0.5"
    )
    spec = load_spec(_spec(tmp_path, text.replace("seeds = [0, 1]", "seeds = [0]")))
    spec.validate()
    sb3 = next(c for c in spec.cells if c.framework == "sb3")
    run_matrix(spec, tmp_path / "r", _runner, progress=False)
    run = tmp_path / "r" / sb3.name
    summary = json.loads((run / "summary.json").read_text())
    assert summary["framework"] == "sb3" and summary["env_steps"] == 300
    assert (run / "metrics.csv").read_text().count("charts/eval_return") == 3
    clock = [float(r.split(",")[3]) for r in (run / "metrics.csv").read_text().splitlines()
             if ",perf/run_s," in r]  # fmt: skip
    assert len(clock) == 3 and clock == sorted(clock) and clock[-1] <= summary["wall_time_s"]
    text, _, _ = build_report(tmp_path / "r", reps=100)
    assert "| sb3 | 1 |" in text


def test_an_sb3_cells_training_time_ends_before_its_final_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SB3's wall time took its final checkpoint's save in, actorq's does not: each save here
    moves the clock on by a day, so the summary's training time counts the saves it spans."""
    pytest.importorskip("stable_baselines3")
    import time

    from actorq.bench import sb3_checkpoint

    day, saves, real_save, real_clock = 86_400.0, [0], sb3_checkpoint.save, time.perf_counter

    def save(*args: Any, **kwargs: Any) -> None:
        real_save(*args, **kwargs)
        saves[0] += 1

    monkeypatch.setattr(sb3_checkpoint, "save", save)
    monkeypatch.setattr(time, "perf_counter", lambda: real_clock() + day * saves[0])
    text = SPEC.replace('"toy"', '"sb3"').replace(
        "[tasks.toy]\nspeed = 2.0", "[tasks.sb3]\nlearning_starts = 0"
    )
    spec = load_spec(_spec(tmp_path, text.replace("seeds = [0, 1]", "seeds = [0]")))
    sb3 = next(c for c in spec.cells if c.framework == "sb3")
    run_matrix(spec, tmp_path / "r", _runner, progress=False)
    summary = json.loads((tmp_path / "r" / sb3.name / "summary.json").read_text())
    # one save before each of the 3 evaluations, inside training; one after it
    assert saves[0] == 4 and summary["wall_time_s"] // day == 3


def _dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> Any:
    """``actorq bench --dry-run`` of a spec with two tasks (cartpole, other), fp32 and int8,
    seeds 0-2: (exit status, the cells to run, the error lines)."""
    task = '[[tasks]]\nagent = "dqn"\nenv = "gym:CartPole-v1"\nlabel = "{}"\n'
    text = 'precisions = ["fp32", "int8"]\nseeds = [0, 1, 2]\n' + task.format("cartpole")
    spec = _spec(tmp_path, text + task.format("other"))
    rc = main(["bench", str(spec), "--dry-run", "--results", str(tmp_path / "r"), *flags])
    out, err = capsys.readouterr()
    cells = [ln.split()[0] for ln in out.splitlines() if "(to run)" in ln]
    return rc, cells, [ln for ln in err.splitlines() if ln.strip()]


def test_tasks_runs_only_the_labelled_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, cells, _ = _dry_run(tmp_path, capsys, "--tasks", "other")
    assert rc == 0 and len(cells) == 6 and all(c.startswith("other-") for c in cells)
    rc, _, err = _dry_run(tmp_path, capsys, "--tasks", "nope")
    assert rc == 2 and len(err) == 1
    assert "no task labelled 'nope'" in err[0] and "cartpole, other" in err[0]


def test_cells_runs_only_the_matching_cells_in_the_specs_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, cells, _ = _dry_run(tmp_path, capsys, "--cells", "*-int8-s2", "--cells", "other-*-fp32-s0")
    assert rc == 0 and len(cells) == 3
    assert cells[0].startswith("cartpole-") and cells[0].endswith("-int8-s2")
    assert cells[1].endswith("-fp32-s0") and cells[2].endswith("-int8-s2")
    rc, cells, _ = _dry_run(tmp_path, capsys, "--tasks", "other", "--cells", "*-s1")
    assert rc == 0 and len(cells) == 2  # of those tasks' cells
    assert all(c.startswith("other-") and c.endswith("-s1") for c in cells)
    for bad in ("*-s3", ""):
        rc, _, err = _dry_run(tmp_path, capsys, "--cells", bad)
        assert rc == 2 and len(err) == 1
        assert "matches no cell" in err[0] and "(12 cells)" in err[0]


def test_the_agents_spec_holds_one_task_per_claim() -> None:
    spec = load_spec(Path(__file__).resolve().parents[2] / "benchmarks/specs/agents.toml")
    by_task: dict[str, set[str]] = {}
    for c in spec.cells:
        by_task.setdefault(c.task, set()).add(c.precision)
    assert by_task["dqn-cartpole"] == {"sb3", "int8", "fp32"}
    assert by_task["ppo-cartpole"] == {"sb3", "int8"}
    assert by_task["ppo-walker"] == {"int8", "fp32"}
    ppo = next(c for c in spec.cells if c.name == "ppo-cartpole-w64x64-sb3-s0")
    assert ppo.settings["learning_rate"] == "lin_0.001" and ppo.config["total_steps"] == 100_000


@pytest.mark.parametrize(
    "line, needle",
    [
        ('n_envs = "8"', "n_envs = '8': a number"),
        ("n_envs = nan", "n_envs = nan: a number"),
        ("normalize = 1", "normalize = 1: true or false"),
        ('learning_rate = "exp_0.1"', "'lin_X'"),
        ('policy = "LstmPolicy"', "'MlpPolicy' or 'CnnPolicy'"),
        ("checkpoint_minutes = 0", "a positive number"),
        ("torch_threads = 0", "an integer in [1, 1024]"),
        ("torch_threads = 1.5", "an integer in [1, 1024]"),
        ("n_envs = 0", "n_envs = 0: a whole number in [1, 4,096]"),
        ("n_envs = 1000000000000", "a whole number in [1, 4,096]"),  # not 10^12 env factories
        ("n_steps = 2.5", "n_steps = 2.5: a whole number in [1, "),
        ("batch_size = -4", "batch_size = -4: a whole number in [1, "),
        ("gamma = 2.0", "gamma = 2.0: a number > 0 and <= 1"),
        ("gae_lambda = -0.1", "gae_lambda = -0.1: a number >= 0 and <= 1"),
        ("learning_rate = -1.0", "learning_rate = -1.0: a number > 0"),
        ('clip_range = "lin_-1"', "'lin_X', > 0"),
        ("ent_coef = -0.01", "ent_coef = -0.01: a number >= 0"),
        ('policy_kwargs = { activation_fn = "gelu" }', "activation_fn 'relu' or 'tanh'"),
        ("policy_kwargs = { foo = 1 }", "unknown key 'foo'"),
        ('policy_kwargs = { net_arch = "x" }', "net_arch = 'x': a list of widths or a table"),
        ("policy_kwargs = { net_arch = { pi = [64], q = [64] } }", "net_arch = "),
        ("policy_kwargs = { net_arch = [0] }", "net_arch = [0]"),
        ("policy_kwargs = { ortho_init = 1 }", "ortho_init = 1: true or false"),
        ("policy_kwargs = { log_std_init = nan }", "log_std_init = nan: a number in [-20, 20]"),
        ("buffer_size = 1000", "unknown key 'buffer_size'"),  # a DQN key on a PPO task
        # SB3's PPO normalizes each minibatch's advantages: it asserts on these (hypothesis)
        ("batch_size = 1", "batch_size = 1: at least 2 while normalize_advantage"),
        ("n_steps = 1", "n_steps × n_envs = 1: at least 2"),
    ],
)
def test_bad_sb3_settings_are_one_line_at_load(line: str, needle: str, tmp_path: Path) -> None:
    """Checked when the spec is read, without SB3 installed: nothing runs to find out."""
    text = SPEC.replace('"toy"', '"sb3"').replace('agent = "dqn"', 'agent = "ppo"')
    text = text.replace('widths = ["32,32"]\n', "").replace("[tasks.toy]\nspeed = 2.0", "")
    with pytest.raises(SpecError, match=r"^[^\n]*$") as e:
        load_spec(_spec(tmp_path, text + f"[tasks.sb3]\n{line}\n"))
    assert "tasks[0].sb3" in str(e.value) and needle in str(e.value)


def test_sb3_gradient_steps_takes_minus_one_as_sb3_does() -> None:
    """-1: as many gradient steps as env steps collected (rl-zoo's LunarLander DQN uses it)."""
    from actorq.bench.sb3 import SB3
    from actorq.errors import ActorQError

    SB3().check("dqn", {"gradient_steps": -1, "train_freq": 4})
    SB3().check("dqn", {"batch_size": 1})  # DQN takes a minibatch of one
    SB3().check("ppo", {"batch_size": 1, "n_steps": 1, "normalize_advantage": False})
    for bad in (-2, 0, 1.5):
        with pytest.raises(ActorQError, match="gradient_steps"):
            SB3().check("dqn", {"gradient_steps": bad})
