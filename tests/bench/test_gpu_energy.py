"""benchmarks/gpu_energy.py: the GPU's energy over each cell's training up to its target (the
window its time to target measures), the power linear between samples, nothing where the
sampler left a gap."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

BENCH = Path(__file__).parents[2] / "benchmarks"
T0 = 1_800_000_000.0  # the loop's start, unix seconds


@pytest.fixture
def gpu_energy() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_energy", BENCH / "gpu_energy.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cell(root: Path, rows: list[tuple[int, float, str, float]], summary: dict[str, Any]) -> Path:
    cell = root / "cell"
    cell.mkdir()
    lines = ["step,wall_time,metric,value"] + [f"{s},{w},{m},{v}" for s, w, m, v in rows]
    (cell / "metrics.csv").write_text("\n".join(lines) + "\n")
    (cell / "summary.json").write_text(json.dumps(summary))
    return cell


def _evals(reach_step: int = 200) -> list[tuple[int, float, str, float]]:
    # evaluations starting at loop times 4 s (1 s long) and 10 s (2 s long: the target's,
    # the run's clock reading 10 s as it starts); then the final evaluation, logged at 20 s
    return [
        (100, T0 + 4.5, "charts/eval_return", 50.0),
        (100, T0 + 5.0, "perf/eval_s", 1.0),
        (150, T0 + 7.0, "losses/td_loss", 0.5),
        (reach_step, T0 + 11.0, "charts/eval_return", 480.0),
        (reach_step, T0 + 12.0, "perf/eval_s", 3.0),
        (reach_step, T0 + 20.0, "charts/final_eval_return", 500.0),
    ]


def test_energy_is_counted_to_the_target_not_to_the_logs_end(
    gpu_energy: Any, tmp_path: Path
) -> None:
    cell = _cell(tmp_path, _evals(), {"time_to_target_s": 10.0, "steps_to_target": 200})
    t0, t1, what = gpu_energy.cell_window(cell, json.loads((cell / "summary.json").read_text()))
    assert (t0, t1, what) == (T0, T0 + 10.0, "to target")
    ts = T0 - 5 + np.arange(0, 40, 0.5)
    wh, mean_w = gpu_energy.energy(ts, np.full(len(ts), 100.0), t0, t1)
    assert wh == pytest.approx(100 * 10 / 3600) and mean_w == pytest.approx(100.0)
    # edges between samples are interpolated: a ramp's mean over an off-grid window is exact
    wh, _ = gpu_energy.energy(ts, ts - T0, T0 + 0.2, T0 + 3.7)
    assert wh == pytest.approx((3.7**2 - 0.2**2) / 2 / 3600)


def test_a_gap_in_the_samples_or_a_window_they_miss_is_not_measured(gpu_energy: Any) -> None:
    ts = np.concatenate([np.arange(0, 5, 0.5), np.arange(8, 20, 0.5)])
    watts = np.full(len(ts), 100.0)
    assert gpu_energy.energy(ts, watts, 1.0, 4.0) is not None
    assert gpu_energy.energy(ts, watts, 1.0, 10.0) is None  # 4.5 -> 8: a 3.5 s gap
    assert gpu_energy.energy(ts, watts, -1.0, 4.0) is None  # the sampler started later


def test_a_cell_short_of_its_target_counts_its_whole_loop_where_the_clock_is_logged(
    gpu_energy: Any, tmp_path: Path
) -> None:
    # its clock read 3 s as its first evaluation started (at T0 + 4): the loop began at T0 + 1
    rows = [*_evals(), (100, T0 + 4.5, "perf/run_s", 3.0)]
    (tmp_path / "a").mkdir()
    cell = _cell(tmp_path / "a", rows, {"time_to_target_s": None, "wall_time_s": 15.0})
    assert gpu_energy.cell_window(cell, {"time_to_target_s": None, "wall_time_s": 15.0}) == (
        T0 + 1.0, T0 + 16.0, "whole loop, target not reached",
    )  # fmt: skip
    (tmp_path / "b").mkdir()
    old = _cell(tmp_path / "b", _evals(), {})
    assert gpu_energy.cell_window(old, {"time_to_target_s": None, "wall_time_s": 15.0}) is None


def test_a_cell_resumed_across_segments_is_not_placed(gpu_energy: Any, tmp_path: Path) -> None:
    # its clock (time to target) leaves out the stop between its segments; the samples do not
    summary = {"time_to_target_s": 10.0, "steps_to_target": 200}
    cell = _cell(tmp_path, _evals(), summary)
    (cell / "cell.json").write_text(json.dumps({"segment": 2}))
    assert gpu_energy.cell_window(cell, summary) is None
    (cell / "cell.json").write_text(json.dumps({"segment": 1}))
    assert gpu_energy.cell_window(cell, summary) is not None
