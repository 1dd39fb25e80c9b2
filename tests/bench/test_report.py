"""`actorq report` on a synthetic results directory whose numbers are worked out by hand."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actorq.bench.report import EVAL as EVAL_METRIC
from actorq.bench.report import bound, curve_iqm_ci, iqm, iqm_ci, load_runs
from actorq.cli import main
from actorq.logging import CONFIRM_METRIC
from tests.bench.specs import SMALL

pytest.importorskip("rliable")
pytest.importorskip("matplotlib")

T0 = 1_700_000_000.0


def _cell(
    results: Path,
    task: str,
    precision: str,
    seed: int,
    *,
    ttt: float | None,
    final: float,
    kwh: float | None = None,
    snapshot_bytes: int = 1000,
    target: float | None = 475.0,
    learner_wait: float = 0.5,
    actor_wait: float = 0.1,
    sps: float = 900.0,
    energy_rows: tuple[float, ...] = (),
    width: tuple[int, ...] = (64, 64),
) -> None:
    """A cell directory as `actorq bench` + experiment.train leave it."""
    name = f"{task}-w{'x'.join(map(str, width))}-{precision}-s{seed}"
    d = results / name
    d.mkdir(parents=True)
    cfg = {"agent": "dqn", "env": "gym:CartPole-v1", "precision": precision, "seed": seed,
           "hidden": list(width), "log_every": 2.0}  # fmt: skip
    cell = {"name": name, "task": task, "agent": "dqn", "env": "gym:CartPole-v1",
            "precision": precision, "seed": seed, "width": list(width), "config": cfg}  # fmt: skip
    (d / "cell.json").write_text(json.dumps(cell))
    (d / "config.json").write_text(json.dumps(cfg))
    summary: dict[str, Any] = {
        "run_dir": str(d), "env": "gym:CartPole-v1", "precision": precision,
        "env_steps": 30000, "updates": 900, "wall_time_s": (ttt or 200.0) + 1.0,
        "eval_return": final, "eval_return_std": 0.0, "eval_return_fp32": final,
        "action_agreement": 1.0, "agreement_states": 100, "snapshot_bytes": snapshot_bytes,
        "fp32_snapshot_bytes": 1000, "publishes": 10, "publish_ms": 1.0,
        "target_return": target, "reached_target": ttt is not None, "time_to_target_s": ttt,
        "steps_to_target": 20000 if ttt is not None else None, "actor_restarts": 0,
        "rejected_snapshots": 0, "interrupted": False, "agent": "dqn",
        "action_mean_abs_diff": None, "stop": "target" if ttt is not None else "budget",
    }  # fmt: skip
    if kwh is not None:
        summary.update(energy_kwh=kwh, energy_kg_co2=0.4 * kwh, energy_estimated=True)
    (d / "summary.json").write_text(json.dumps(summary))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "wall_time", "metric", "value"])
        for i in range(1, 4):  # log intervals of 2 s, evaluations every 10k steps
            t = T0 + 2.0 * i
            w.writerow([1000 * i, f"{t:.3f}", "perf/actor_sps", sps])
            w.writerow([1000 * i, f"{t:.3f}", "perf/learner_wait_frac", learner_wait])
            w.writerow([1000 * i, f"{t:.3f}", "perf/actor_wait_frac", actor_wait])
            w.writerow([1000 * i, f"{t:.3f}", "comm/snapshot_bytes", snapshot_bytes])
            w.writerow([10000 * i, f"{t + 0.5:.3f}", "charts/eval_return", 100.0 * i])
        for e in energy_rows:  # cumulative readings, as the experiment loop logs them
            w.writerow([30000, f"{T0 + 7:.3f}", "energy/kwh", e])
            w.writerow([30000, f"{T0 + 7:.3f}", "energy/kg_co2", 0.4 * e])


@pytest.fixture
def results(tmp_path: Path) -> Path:
    r = tmp_path / "results"
    # fp32: every seed reaches the target, mean 100 s; int8 too, mean 50 s -> speedup 2.00
    for seed, ttt, final in [(0, 100.0, 100.0), (1, 120.0, 200.0), (2, 80.0, 300.0),
                             (3, 100.0, 400.0)]:  # fmt: skip
        _cell(r, "cartpole", "fp32", seed, ttt=ttt, final=final, kwh=0.004)
    for seed, final in enumerate([500.0, 500.0, 500.0, 10.0]):
        _cell(r, "cartpole", "int8", seed, ttt=50.0, final=final, kwh=0.002,
              snapshot_bytes=280, learner_wait=0.05, actor_wait=0.6)  # fmt: skip
    # fp16: never reaches the target; energy only in one run's metrics.csv (last value 0.003)
    _cell(r, "cartpole", "fp16", 0, ttt=None, final=50.0)
    _cell(r, "cartpole", "fp16", 1, ttt=None, final=50.0, energy_rows=(0.001, 0.003))
    # int4: no energy recorded anywhere
    _cell(r, "cartpole", "int4", 0, ttt=60.0, final=50.0)
    # a cell that crashed: cell.json and failed.json only
    bad = r / "cartpole-w64x64-fp16-s2"
    bad.mkdir()
    (bad / "cell.json").write_text(json.dumps({"task": "cartpole", "agent": "dqn",
        "env": "gym:CartPole-v1", "precision": "fp16", "seed": 2, "width": [64, 64],
        "config": {"precision": "fp16", "seed": 2, "env": "gym:CartPole-v1"}}))  # fmt: skip
    (bad / "failed.json").write_text(json.dumps({"status": 1, "why": "exit status 1"}))
    return r


@pytest.mark.parametrize(
    ("fp32_ttt", "int8_ttt", "shown", "speedup"),
    [
        # int8 missed the target on a seed fp32 reached on every one: never, not 2× sooner
        ([100.0, 100.0], [50.0, None], "0× (1/2 vs fp32 2/2 reached)", 0.0),
        ([100.0, 100.0], [None, None], "0× (0/2 vs fp32 2/2 reached)", 0.0),  # on none
        # fp32 missed it on a seed, int8 reached it on every one
        ([100.0, None], [50.0, 50.0], "∞× (2/2 vs fp32 1/2 reached)", None),  # JSON: null
        # each side missed it once: no mean over every seed on either side, no ratio
        ([100.0, None], [50.0, None], "— (1/2 vs fp32 1/2 reached)", None),
    ],
)
def test_speedup_counts_seeds_that_never_reached_the_target(
    tmp_path: Path,
    fp32_ttt: list[float | None],
    int8_ttt: list[float | None],
    shown: str,
    speedup: float | None,
) -> None:
    r = tmp_path / "results"
    for precision, times in (("fp32", fp32_ttt), ("int8", int8_ttt)):
        for seed, ttt in enumerate(times):
            _cell(r, "cartpole", precision, seed, ttt=ttt, final=100.0)
    assert main(["report", str(r), "--reps", "100"]) == 0
    text = (r / "report.md").read_text()
    assert f"| {shown} |" in _row(text, "| cartpole | 64x64 | int8 |")
    fp32_all = None not in fp32_ttt
    assert ("| 1.00× |" if fp32_all else "| — (1/2 reached) |") in _row(
        text, "| cartpole | 64x64 | fp32 |"
    )
    rows = {x["precision"]: x for x in json.loads((r / "report.json").read_text())["table"]}
    assert rows["int8"]["speedup"] == speedup


def test_speedup_compares_the_seeds_finished_on_both_sides(tmp_path: Path) -> None:
    """fp32 finished seeds 0-2 (100, 100, 400 s), int8 seeds 0 and 1 (50 s each; seed 2 still
    running): 200 / 50 = 4.00× compared fp32's slow seed 2 with no int8 run at all."""
    r = tmp_path / "results"
    for seed, ttt in enumerate([100.0, 100.0, 400.0]):
        _cell(r, "cartpole", "fp32", seed, ttt=ttt, final=100.0)
        _cell(r, "cartpole", "int8", seed, ttt=50.0, final=100.0)
    (r / "cartpole-w64x64-int8-s2" / "summary.json").unlink()
    assert main(["report", str(r), "--reps", "100"]) == 0
    text = (r / "report.md").read_text()
    int8 = _row(text, "| cartpole | 64x64 | int8 |")
    assert "| 2.00× (2 common seeds of 2 vs fp32 3 finished) |" in int8
    assert "| 1.00× |" in _row(text, "| cartpole | 64x64 | fp32 |")
    rows = {x["precision"]: x for x in json.loads((r / "report.json").read_text())["table"]}
    assert rows["int8"]["speedup"] == pytest.approx(2.0)


def _row(text: str, prefix: str) -> str:
    """The one row of the first table (per task: speedup, return, energy) with this prefix."""
    table = text.split("## Where the time goes")[0]
    rows = [ln for ln in table.splitlines() if ln.startswith(prefix)]
    assert len(rows) == 1, (prefix, rows)
    return rows[0]


def test_report_table_matches_hand_computation(results: Path) -> None:
    assert main(["report", str(results), "--reps", "300"]) == 0
    text = (results / "report.md").read_text()
    data = json.loads((results / "report.json").read_text())

    fp32 = _row(text, "| cartpole | 64x64 | fp32 |")
    int8 = _row(text, "| cartpole | 64x64 | int8 |")
    fp16 = _row(text, "| cartpole | 64x64 | fp16 |")
    # mean time to target (100 + 120 + 80 + 100) / 4 = 100; IQM of 100..400 = 250
    assert "| 4/4 (≥ 475) | 100.0 | 1.00× | 250.0 [" in fp32
    # int8: 50 s -> 100 / 50 = 2.00×; IQM of [10, 500, 500, 500] trims 10 and one 500 -> 500
    assert "| 4/4 (≥ 475) | 50.0 | 2.00× | 500.0 [" in int8
    # energy: 0.004 vs 0.002 kWh per run -> 2.00×, CO2 at one intensity -> 2.00× as well
    assert "| 0.002 | 0.0008 | 2.00× | 2.00× |" in int8
    assert "| 0.004 | 0.0016 | 1.00× | 1.00× |" in fp32
    assert "| 0× (0/2 vs fp32 2/2 reached; 2 common seeds of 2 vs fp32 4 finished) |" in fp16
    assert "(+1 failed)" in fp16
    # fp16's one measured run (0.003 kWh) ran its budget where fp32's seed 1 stopped at the
    # target: different work, no ratio, and said so
    assert fp16.endswith(
        "| 0.003 (1/2 runs) | 0.0012 (1/2 runs) | — (0 of 2 vs fp32 4 seeds paired) "
        "| — (0 of 2 vs fp32 4 seeds paired) |"
    )
    int4 = _row(text, "| cartpole | 64x64 | int4 |")
    # one seed: no CI to give; fp32's seed 0 took 100 s
    assert (
        "| 1/1 (≥ 475) | 60.0 | 1.67× (1 common seeds of 1 vs fp32 4 finished) | 50.0 (1 seed) |"
        in int4
    )
    assert int4.endswith("| not recorded | not recorded | not recorded | not recorded |")

    rows = {r["precision"]: r for r in data["table"]}
    assert rows["int8"]["speedup"] == pytest.approx(2.0)
    assert rows["fp32"]["time_to_target_s"] == pytest.approx(100.0)
    assert rows["int8"]["return_iqm"] == pytest.approx(500.0)
    lo, hi = rows["fp32"]["return_ci"]
    assert 100.0 <= lo <= 250.0 <= hi <= 400.0
    assert rows["fp16"]["kwh"] == pytest.approx(0.003) and rows["fp16"]["failed"] == 1
    assert rows["int4"]["kwh"] is None and rows["int4"]["kwh_ratio"] is None

    # wait fractions and throughput: fp32 learner waits 0.5 -> actor-bound; int8 actors held
    # back 0.6 -> learner-bound; while busy: 900 / (1 - 0.6) = 2250
    perf = {r["precision"]: r for r in data["perf"]}
    assert perf["fp32"]["bound"] == "actor-bound" and perf["int8"]["bound"] == "learner-bound"
    assert perf["int8"]["busy_sps"] == pytest.approx(2250.0)
    # training time per 1k env steps (no eval_time_s: wall_time_s = time to target + 1, or 201;
    # 30k steps): fp32 (101 + 121 + 81 + 101) / 4 / 30 = 3.37 s; int8 51 / 30 = 1.7 s -> 1.98×
    assert "| 0.05 | 0.60 | learner-bound | 900 | 2250 | 1.70 | 1.98× | 280 | 28.0% |" in text
    assert "| 3.37 | 1.00× |" in text
    assert perf["int8"]["training_speedup_vs_fp32"] == pytest.approx(101 / 30 / 1.7)
    assert "Energy is estimated" in text
    assert "cartpole-w64x64-fp16-s2: exit status 1" in text
    png = results / "curves-cartpole-w64x64.png"
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    assert "(curves-cartpole-w64x64.png)" in text


def test_training_time_per_1k_steps_leaves_evaluations_out(tmp_path: Path) -> None:
    """Run time per 1k steps and its ratio to fp32 took periodic evaluations in, which every
    other training time of the report leaves out: int8 evaluating slower looked slower."""
    r = tmp_path / "results"
    for precision, evals in (("fp32", 141.0), ("int8", 81.0)):  # of 201 s each, 30k steps
        _cell(r, "cartpole", precision, 0, ttt=None, final=1.0)
        path = r / f"cartpole-w64x64-{precision}-s0" / "summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "eval_time_s": evals}))
    assert main(["report", str(r), "--reps", "100"]) == 0
    perf = {x["precision"]: x for x in json.loads((r / "report.json").read_text())["perf"]}
    # fp32 (201 - 141) / 30 = 2.00 s per 1k steps; int8 (201 - 81) / 30 = 4.00 s: 0.50×
    assert perf["fp32"]["training_s_per_1k_steps"] == pytest.approx(2.0)
    assert perf["int8"]["training_s_per_1k_steps"] == pytest.approx(4.0)
    assert perf["int8"]["training_speedup_vs_fp32"] == pytest.approx(0.5)
    assert "| 4.00 | 0.50× |" in (r / "report.md").read_text()


def test_throughput_against_policy_width(tmp_path: Path) -> None:
    r = tmp_path / "widths"
    for width, sps in (((64, 64), 1000.0), ((2048, 2048, 2048), 100.0)):
        for prec, wait in (("fp32", 0.0), ("int8", 0.75)):
            _cell(r, "cartpole", prec, 0, ttt=None, final=9.0, width=width, sps=sps,
                  actor_wait=wait, target=None)  # fmt: skip
    assert main(["report", str(r), "--reps", "100"]) == 0
    text = (r / "report.md").read_text()
    assert "![throughput](throughput_vs_width.png)" in text
    assert (r / "throughput_vs_width.png").read_bytes()[:4] == b"\x89PNG"
    perf = json.loads((r / "report.json").read_text())["perf"]
    busy = {(tuple(p["width"]), p["precision"]): p["busy_sps"] for p in perf}
    # while busy = sps / (1 - actor wait): int8 at 3×2048, 100 / 0.25 = 400
    assert busy == {
        ((64, 64), "fp32"): 1000.0, ((64, 64), "int8"): 4000.0,
        ((2048, 2048, 2048), "fp32"): 100.0, ((2048, 2048, 2048), "int8"): 400.0,
    }  # fmt: skip
    # runs without a target: no time-to-target columns, rather than "never reached"
    assert "| cartpole | 2048x2048x2048 | int8 | 1 | no target | — | no target |" in text


def test_eval_curve_origin_and_iqm() -> None:
    assert iqm(np.array([10.0, 500.0, 500.0, 500.0])) == pytest.approx(500.0)
    mid, lo, hi = iqm_ci([1.0, 2.0, 3.0, 4.0], reps=200)
    assert mid == pytest.approx(2.5) and lo <= mid <= hi
    assert bound(0.02, 0.05) == "balanced" and bound(None, 0.5) == "—"


def test_confidence_intervals_are_seeded_and_leave_numpy_alone() -> None:
    # rliable 1.2 ignores the random_state it is given and draws from numpy's global generator:
    # the report seeds that generator for the bootstrap, so a report is the same every time
    values = [9.4, 10.0, 11.6, 12.0, 15.6, 13.1, 8.2]
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first = iqm_ci(values, reps=200)
    assert (np.random.get_state()[1] == before).all()  # the caller's stream is untouched
    np.random.rand(5)  # whatever state numpy is in, the same interval comes back
    assert iqm_ci(values, reps=200) == first
    assert iqm_ci(values, reps=200, seed=1) != first
    curves = np.random.default_rng(0).normal(size=(7, 4))
    a, b = curve_iqm_ci(curves, reps=100), curve_iqm_ci(curves, reps=100)
    assert all((x == y).all() for x, y in zip(a, b, strict=True))


def test_curve_times_start_one_log_interval_before_the_first_row(results: Path) -> None:
    run = next(r for r in load_runs(results) if r.name == "cartpole-w64x64-int8-s0")
    # first perf row at T0 + 2 s with log_every 2 s -> origin T0; evals 0.5 s after each row
    assert run.eval_curve() == [(10000, 2.5, 100.0), (20000, 4.5, 200.0), (30000, 6.5, 300.0)]


def _resumed(results: Path, framework: str, rows: list[tuple[int, float, str, float]]) -> Path:
    """A cell of two segments (resumed once) whose metrics.csv holds ``rows``."""
    name = f"cartpole-w64x64-{'int8' if framework == 'actorq' else framework}-s0"
    d = results / name
    d.mkdir(parents=True)
    cfg = {"agent": "dqn", "env": "gym:CartPole-v1", "precision": "int8", "seed": 0,
           "log_every": 2.0}  # fmt: skip
    cell = {"name": name, "task": "cartpole", "agent": "dqn", "env": "gym:CartPole-v1",
            "precision": "int8", "seed": 0, "width": [64, 64], "config": cfg,
            "framework": framework, "segment": 2}  # fmt: skip
    (d / "cell.json").write_text(json.dumps(cell))
    (d / "config.json").write_text(json.dumps(cfg))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "wall_time", "metric", "value"])
        w.writerows([s, f"{T0 + t:.3f}", m, v] for s, t, m, v in rows)
    return results


def _segments(clock: bool) -> list[tuple[int, float, str, float]]:
    """Perf rows every 2 s over 0..20 s, an evaluation at 10k steps that held the loop for
    100 s (its rows at 110 s), 2 s more, a stop of 1,000 s, then 2 s rows and an evaluation
    at 20k steps: 122 s on the run's clock (its time to target's)."""
    rows = [(100 * i, 2.0 * i, "perf/actor_sps", 1.0) for i in range(1, 6)]  # 2..10 s
    rows += [(10000, 110.0, EVAL_METRIC, 1.0), (10000, 110.0, "perf/eval_s", 100.0)]
    rows += [(10100, 112.0, "perf/actor_sps", 1.0)]
    rows += [(10200 + 100 * i, 1112.0 + 2.0 * i, "perf/actor_sps", 1.0) for i in range(1, 5)]
    rows += [(20000, 1122.0, EVAL_METRIC, 2.0), (20000, 1122.0, "perf/eval_s", 100.0)]
    if clock:  # what the loop logs now: each evaluation's time on the run's clock
        rows += [(10000, 110.0, "perf/run_s", 10.0), (20000, 1122.0, "perf/run_s", 122.0)]
    return rows


def test_curves_are_on_the_runs_own_clock(tmp_path: Path) -> None:
    """A resumed run's curve leaves its stops out: the evaluations' own ``perf/run_s``; for
    runs logged before it, the machine's clock less the gaps that were neither logging nor
    evaluation; another framework's old cells, which log evaluations only: no time."""
    (run,) = load_runs(_resumed(tmp_path / "a", "actorq", _segments(clock=True)))
    assert run.eval_curve() == [(10000, 10.0, 1.0), (20000, 122.0, 2.0)]
    (run,) = load_runs(_resumed(tmp_path / "b", "actorq", _segments(clock=False)))
    # origin 0 s (first row 2 s less 2 s); the 100 s evaluation stays on the clock (its
    # point is where it ended), the 1,000 s stop does not
    assert run.eval_curve() == [(10000, 110.0, 1.0), (20000, 122.0, 2.0)]
    old_sb3 = [(s, t, m, v) for s, t, m, v in _segments(clock=False) if not m.startswith("perf/a")]
    (run,) = load_runs(_resumed(tmp_path / "c", "sb3", old_sb3))
    assert run.eval_curve() == [(10000, None, 1.0), (20000, None, 2.0)]
    (run,) = load_runs(
        _resumed(tmp_path / "d", "sb3", [*old_sb3, (20000, 1122.0, "perf/run_s", 9.0)])
    )
    assert run.eval_curve() == [(10000, None, 1.0), (20000, 9.0, 2.0)]


def test_report_of_nothing_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "no run directories" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_a_report_of_partial_cells_only_names_them_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every cell skipped as partial was reported as no cell found, the reasons lost."""
    r = tmp_path / "results"
    _cell(r, "cartpole", "fp32", 0, ttt=None, final=1.0)
    d = r / "cartpole-w64x64-fp32-s0"
    (d / "summary.json").unlink()
    (d / "cell.json").write_bytes(b'{"name": "cartpole-w6')  # killed while writing it
    capsys.readouterr()
    assert main(["report", str(r), "--reps", "100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no run directories" not in err
    assert "every cell is partial" in err and "skipped partial cell cartpole-w64x64-fp32-s0" in err
    assert f"{d / 'cell.json'}: not valid JSON" in err


@pytest.mark.parametrize("metrics", [b"", b"step,wall_t"])
def test_a_failed_cell_killed_as_it_started_stays_a_failed_row(
    results: Path, metrics: bytes
) -> None:
    """A failed cell whose metrics.csv was empty or cut in its header was skipped as partial,
    and its failed.json reason dropped out of the failed rows."""
    d = results / "cartpole-w64x64-fp16-s2"
    (d / "failed.json").write_text(json.dumps({"status": 1, "why": "out of memory"}))
    (d / "metrics.csv").write_bytes(metrics)
    assert main(["report", str(results), "--reps", "100"]) == 0
    report = json.loads((results / "report.json").read_text())
    assert {"name": d.name, "why": "out of memory"} in report["failed"]
    assert report["skipped"] == []
    assert f"- {d.name}: out of memory" in (results / "report.md").read_text()


def test_the_specs_cells_not_started_are_listed(tmp_path: Path) -> None:
    """A cell of the spec not started yet has no directory: it was in no table, no row, no
    list; the spec kept with the results (spec.toml) names it."""
    r = tmp_path / "results"
    for precision in ("fp32", "int8"):
        _cell(r, "cartpole", precision, 0, ttt=None, final=1.0, width=(32, 32))
    (r / "spec.toml").write_text(SMALL)
    assert main(["report", str(r), "--reps", "100"]) == 0
    text = (r / "report.md").read_text()
    names = ["cartpole-w32x32-fp32-s1", "cartpole-w32x32-int8-s1"]
    section = text.split("## Cells of the spec not started\n\n")[1].split("\n\n")[0]
    assert sorted(section.splitlines()) == [f"- {n}" for n in names]
    assert sorted(json.loads((r / "report.json").read_text())["not_started"]) == names
    (r / "spec.toml").write_text("tasks = 1")  # not a spec this actorq reads: said, no list
    assert main(["report", str(r), "--reps", "100"]) == 0
    text = (r / "report.md").read_text()
    assert "not started are not listed: spec.toml not read (" in text
    assert "## Cells of the spec not started" not in text


def test_the_cells_not_started_are_those_of_the_last_sessions_overrides(tmp_path: Path) -> None:
    """spec.toml is the spec's text without the bench's ``--override`` items (machine.json keeps
    them): an override of the width renames every cell, and the finished cells were listed as
    not started under their spec.toml names."""
    import shutil

    from actorq.bench.runner import run_matrix
    from actorq.bench.spec import Cell, load_spec

    def fake(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
        (cell_dir / "config.json").write_text(json.dumps({**cell.config, "agent": cell.agent}))
        return 1

    (tmp_path / "small.toml").write_text(SMALL)
    r = tmp_path / "results"
    run_matrix(load_spec(tmp_path / "small.toml", {"hidden": [16, 16]}), r, fake, progress=False)
    for precision in ("fp32", "int8"):  # as if the bench had stopped before its seed 1
        shutil.rmtree(r / f"cartpole-w16x16-{precision}-s1")
    assert main(["report", str(r), "--reps", "100"]) == 0
    not_started = json.loads((r / "report.json").read_text())["not_started"]
    assert sorted(not_started) == ["cartpole-w16x16-fp32-s1", "cartpole-w16x16-int8-s1"]


def test_report_header_names_the_gpu_of_the_last_session(results: Path) -> None:
    facts = {"cpu_model": "Some CPU", "cores": 16, "cores_usable": 16}
    sessions = [{**facts, "gpus": []}, {**facts, "gpus": ["NVIDIA H100 80GB HBM3"]}]
    (results / "machine.json").write_text(json.dumps({"sessions": sessions}))
    assert main(["report", str(results), "--reps", "100"]) == 0
    header = (results / "report.md").read_text().split("\n\n")[1]
    assert header.startswith("Machine: Some CPU, 16 cores (16 usable), GPU NVIDIA H100 80GB HBM3,")
    (results / "machine.json").write_text(json.dumps({"sessions": sessions[:1]}))
    assert main(["report", str(results), "--reps", "100"]) == 0
    assert "GPU" not in (results / "report.md").read_text().split("\n\n")[1]


def test_atari_cells_get_issue_50s_summary_rows(tmp_path: Path) -> None:
    """summary.json beside the report: frames are agent steps × 4; a finished cell's numbers
    come from its summary (time to target less the evaluations before it), an unfinished one's
    target from its periodic evaluations."""
    r = tmp_path / "results"
    for framework, seed, finished in [("actorq", 0, True), ("sb3", 0, False)]:
        name = f"ppo-pong-w64x64-{'int8' if framework == 'actorq' else 'sb3'}-s{seed}"
        d = r / name
        d.mkdir(parents=True)
        cfg = {"agent": "ppo", "env": "atari:Pong", "precision": "int8", "seed": seed,
               "target_return": 18.0, "log_every": 2.0}  # fmt: skip
        cell = {"name": name, "task": "ppo-pong", "agent": "ppo", "env": "atari:Pong",
                "precision": "int8", "seed": seed, "width": [64, 64], "config": cfg,
                "framework": framework}  # fmt: skip
        (d / "cell.json").write_text(json.dumps(cell))
        (d / "config.json").write_text(json.dumps(cfg))
        with open(d / "metrics.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "wall_time", "metric", "value"])
            for i, score in enumerate([-21.0, 5.0, 19.0], start=1):
                w.writerow([250_000 * i, f"{T0 + 100.0 * i:.3f}", "perf/actor_sps", 250.0])
                w.writerow([250_000 * i, f"{T0 + 100.0 * i + 1:.3f}", EVAL_METRIC, score])
                w.writerow([250_000 * i, f"{T0 + 100.0 * i + 1:.3f}", "perf/eval_s", 60.0 * i])
            # the evaluation at 19.0 was confirmed on fresh seeds (18.5)
            w.writerow([750_000, f"{T0 + 302.0:.3f}", CONFIRM_METRIC, 18.5])
        if finished:
            summary = {"env": "atari:Pong", "precision": "int8", "wall_time_s": 9000.0,
                       "eval_time_s": 1000.0, "env_steps": 2_500_000, "eval_return": 20.5,
                       "target_return": 18.0, "reached_target": True, "steps_to_target": 750_000,
                       "time_to_target_s": 3000.0}  # fmt: skip
            (d / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(r), "--reps", "100"]) == 0
    rows = json.loads((r / "summary.json").read_text())
    done, partial = sorted(rows, key=lambda x: x["framework"])
    assert done == {
        "game": "Pong", "agent": "ppo", "framework": "actorq", "precision": "int8", "seed": 0,
        "frames": 10_000_000, "final_score": 20.5, "frames_to_target": 3_000_000,
        "wall_to_target_s": 2880.0, "frames_per_s": 1250.0, "target": 18.0, "finished": True,
        "last_eval": 19.0,  # wall to target: 3000 s less the 120 s of evaluations before it
        "last_eval_frames": 3_000_000,
    }  # fmt: skip
    # the curves, for docs and plots: report.json's rows, [frames, mean score] per evaluation
    report = {
        (x["framework"], x["seed"]): x for x in json.loads((r / "report.json").read_text())["atari"]
    }
    assert report[("actorq", 0)]["evals"] == [
        [1_000_000, -21.0],
        [2_000_000, 5.0],
        [3_000_000, 19.0],
    ]
    assert {k: v for k, v in report[("actorq", 0)].items() if k != "evals"} == done
    assert partial["precision"] == "fp32" and partial["final_score"] is None
    assert partial["frames"] == 3_000_000 and partial["frames_to_target"] == 3_000_000
    assert partial["wall_to_target_s"] is None and not partial["finished"]
    # a running cell whose evaluation at the target was not confirmed: not reached (yet)
    sb3 = r / "ppo-pong-w64x64-sb3-s0" / "metrics.csv"
    sb3.write_text(sb3.read_text().replace(f"{CONFIRM_METRIC},18.5", f"{CONFIRM_METRIC},17.0"))
    assert main(["report", str(r), "--reps", "100"]) == 0
    partial = next(x for x in json.loads((r / "summary.json").read_text()) if not x["finished"])
    assert partial["last_eval"] == 19.0 and partial["frames_to_target"] is None
    # a finished cell whose evaluation at the target was not confirmed: no frames to target
    done_dir = r / "ppo-pong-w64x64-int8-s0"
    summary = json.loads((done_dir / "summary.json").read_text())
    summary.update(reached_target=False, steps_to_target=None, time_to_target_s=None)
    (done_dir / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(r), "--reps", "100"]) == 0
    done = next(x for x in json.loads((r / "summary.json").read_text()) if x["finished"])
    assert done["last_eval"] == 19.0 and done["frames_to_target"] is None
    assert done["wall_to_target_s"] is None
    assert partial["frames_per_s"] is None
    md = (r / "report.md").read_text()
    assert "## Atari" in md
    # the policy the cells ran, not the MLP widths in their names (unused by the Nature-CNN)
    assert "| ppo-pong | Nature-CNN | int8 |" in md and "### ppo-pong (Nature-CNN)" in md
    assert "64x64" not in md.replace("w64x64", "")


@pytest.mark.parametrize("framework", ["actorq", "sb3"])
def test_an_unfinished_atari_rows_frames_are_its_checkpoints(
    tmp_path: Path, framework: str
) -> None:
    """An SB3 cell logs only at its evaluations: at 5.46M frames its row said 5.0M (its last
    evaluation's step). Its checkpoint holds how far it trained (what a resume goes on from)."""
    import torch

    from actorq import checkpoint as ckpt

    r = tmp_path / "results"
    name = f"dqn-pong-w64x64-{'int8' if framework == 'actorq' else 'sb3'}-s0"
    d = r / name
    d.mkdir(parents=True)
    cfg = {"agent": "dqn", "env": "atari:Pong", "precision": "int8", "seed": 0, "log_every": 2.0}
    cell = {"name": name, "task": "dqn-pong", "agent": "dqn", "env": "atari:Pong",
            "precision": "int8", "seed": 0, "width": [64, 64], "config": cfg,
            "framework": framework}  # fmt: skip
    (d / "cell.json").write_text(json.dumps(cell))
    (d / "config.json").write_text(json.dumps(cfg))
    with open(d / "metrics.csv", "w", newline="") as f:
        csv.writer(f).writerows([["step", "wall_time", "metric", "value"],
                                 [1_250_000, f"{T0:.3f}", EVAL_METRIC, -21.0]])  # fmt: skip
    steps = 1_365_000  # agent steps: 5.46M frames
    state: dict[str, Any] = {"learner": {}, "counters": {"env_steps": steps}, "rng": {}}
    if framework == "sb3":  # SB3's model's own counter; the Record's carry no step
        state = {"learner": {"counters": {"num_timesteps": steps}}, "counters": {}, "rng": {}}
    ckpt.save(d / "checkpoint", {"w": torch.zeros(1)}, state)
    assert main(["report", str(r), "--reps", "100"]) == 0
    (row,) = json.loads((r / "summary.json").read_text())
    assert row["frames"] == 5_460_000 and row["last_eval_frames"] == 5_000_000
    # a checkpoint behind what the run logged since: the logged step
    with open(d / "metrics.csv", "a", newline="") as f:
        csv.writer(f).writerow([1_400_000, f"{T0 + 9:.3f}", "perf/actor_sps", 100.0])
    assert main(["report", str(r), "--reps", "100"]) == 0
    assert json.loads((r / "summary.json").read_text())[0]["frames"] == 5_600_000


def _running_atari_cell(r: Path, seed: int) -> Path:
    """An unfinished actorq Atari cell that logged up to agent step 1000 and has a checkpoint
    at step 5000."""
    import torch

    from actorq import checkpoint as ckpt

    name = f"dqn-pong-w64x64-int8-s{seed}"
    d = r / name
    d.mkdir(parents=True)
    cfg = {"agent": "dqn", "env": "atari:Pong", "precision": "int8", "seed": seed,
           "log_every": 2.0}  # fmt: skip
    (d / "cell.json").write_text(json.dumps({"name": name, "task": "dqn-pong", "config": cfg}))
    (d / "config.json").write_text(json.dumps(cfg))
    with open(d / "metrics.csv", "w", newline="") as f:
        csv.writer(f).writerows([["step", "wall_time", "metric", "value"],
                                 [1000, f"{T0:.3f}", EVAL_METRIC, -21.0]])  # fmt: skip
    state = {"learner": {}, "counters": {"env_steps": 5000}, "rng": {}}
    ckpt.save(d / "checkpoint", {"w": torch.zeros(1)}, state)
    return d


def test_an_unreadable_checkpoint_is_a_warning_not_the_reports_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged checkpoint of one unfinished Atari cell (in a failed cell, often why it failed)
    stopped the whole report, nothing written: now that row's frames are those it logged, a
    warning names the cell and why, and a failed cell keeps its failed.json reason."""
    r = tmp_path / "results"
    for seed in (0, 1):
        d = _running_atari_cell(r, seed)
        (d / "checkpoint" / "state.json").write_text("{}")  # fails its checksum
    failed = r / "dqn-pong-w64x64-int8-s1"
    (failed / "failed.json").write_text(json.dumps({"status": 1, "why": "checksum mismatch"}))
    _running_atari_cell(r, 2)  # a readable checkpoint, beside them
    capsys.readouterr()
    assert main(["report", str(r), "--reps", "100"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("actorq: warning: ") for line in err)
    for seed, line in enumerate(err):
        assert f"dqn-pong-w64x64-int8-s{seed}: checkpoint not read" in line
        assert f"s{seed}/checkpoint/state.json" in line and "checksum mismatch" in line
    rows = json.loads((r / "summary.json").read_text())
    assert sorted((x["seed"], x["frames"]) for x in rows) == [(0, 4000), (1, 4000), (2, 20_000)]
    report = json.loads((r / "report.json").read_text())
    assert {x["name"]: x["why"] for x in report["failed"]}[failed.name] == "checksum mismatch"
    assert len(report["checkpoints_not_read"]) == 2
    assert "## Checkpoints not read" in (r / "report.md").read_text()


@pytest.mark.parametrize("name", ["report.md", "report.json", "a plot"])
def test_an_output_that_cannot_be_written_writes_none(
    results: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory at report.md's name was one line, but report.json and the plots had been
    written: every output is checked before the first is written."""
    assert main(["report", str(results), "--reps", "100"]) == 0
    plots = sorted(p.name for p in results.glob("*.png"))
    for p in results.iterdir():
        if p.is_file():
            p.unlink()
    name = plots[-1] if name == "a plot" else name
    (results / name).mkdir()
    before = sorted(results.iterdir())
    capsys.readouterr()
    assert main(["report", str(results), "--reps", "100"]) == 2
    assert sorted(results.iterdir()) == before  # nothing written, not even partly
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("actorq: error: ")
    assert f"{results / name} is a directory" in err, err


def test_a_summary_json_the_report_did_not_write_is_kept(tmp_path: Path) -> None:
    """``summary.json`` is a common name: at a results root, one that is not the report's Atari
    rows is refused with one line and left as it was, the report not written."""
    r = tmp_path / "results"
    d = r / "ppo-pong-w64x64-int8-s0"
    d.mkdir(parents=True)
    cfg = {"agent": "ppo", "env": "atari:Pong", "precision": "int8", "seed": 0, "log_every": 2.0}
    (d / "config.json").write_text(json.dumps(cfg))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "wall_time", "metric", "value"])
        w.writerow([250_000, f"{T0 + 1:.3f}", "perf/actor_sps", 250.0])
        w.writerow([250_000, f"{T0 + 2:.3f}", EVAL_METRIC, -20.0])
    (r / "summary.json").write_text('{"mine": 1}')
    assert main(["report", str(r), "--reps", "100"]) == 2
    assert (r / "summary.json").read_text() == '{"mine": 1}'
    assert not (r / "report.md").exists()
    (r / "summary.json").unlink()
    assert main(["report", str(r), "--reps", "100"]) == 0
    assert main(["report", str(r), "--reps", "100"]) == 0  # its own: replaced


@pytest.mark.parametrize(("in_summary", "segment"), [(True, 1), (True, 2), (False, 2)])
def test_a_segments_energy_is_never_reported_as_the_runs(
    tmp_path: Path, in_summary: bool, segment: int
) -> None:
    """A summary's null energy (a resumed segment not measured) is not recorded, not the last
    energy row of metrics.csv (an earlier segment's); nor are a resumed run's rows when its
    summary predates the key."""
    r = tmp_path / "results"
    _cell(r, "cartpole", "fp32", 0, ttt=None, final=1.0, energy_rows=(0.001, 0.002))
    d = r / "cartpole-w64x64-fp32-s0"
    summary = json.loads((d / "summary.json").read_text())
    if in_summary:
        summary.update(energy_kwh=None, energy_kg_co2=None)
    (d / "summary.json").write_text(json.dumps(summary))
    cell = json.loads((d / "cell.json").read_text())
    (d / "cell.json").write_text(json.dumps({**cell, "segment": segment}))
    (run,) = load_runs(r)
    assert run.energy("energy_kwh") is None and run.energy("energy_kg_co2") is None


def test_energy_ratios_pair_seeds_that_ended_alike(tmp_path: Path) -> None:
    """fp32's seed 1 ran its whole budget (10× the energy) where int8's stopped at the target:
    a mean over every run on each side would say 11×; the one pair that ended alike says 2×."""
    r = tmp_path / "results"
    _cell(r, "cartpole", "fp32", 0, ttt=100.0, final=500.0, kwh=1.0)
    _cell(r, "cartpole", "fp32", 1, ttt=None, final=400.0, kwh=10.0)
    for seed in (0, 1):
        _cell(r, "cartpole", "int8", seed, ttt=50.0, final=500.0, kwh=0.5)
    assert main(["report", str(r), "--reps", "100"]) == 0
    rows = {x["precision"]: x for x in json.loads((r / "report.json").read_text())["table"]}
    assert rows["int8"]["kwh_ratio"] == pytest.approx(2.0)
    int8 = _row((r / "report.md").read_text(), "| cartpole | 64x64 | int8 |")
    assert "| 2.00× (1 of 2 vs fp32 2 seeds paired) |" in int8
    assert (
        "a ratio of estimated energies is about the ratio of the runs' wall times"
        in (r / "report.md").read_text()
    )
