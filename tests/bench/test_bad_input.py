"""Hostile input to `actorq bench` and `actorq report`: one `actorq: error:` line (exit status 2)
or success, never a traceback, and nothing written when it fails."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from actorq.bench import cell as bench_cell
from actorq.bench.runner import run_matrix
from actorq.bench.spec import Cell, load_spec
from actorq.cli import main
from actorq.errors import ActorQError
from tests.bench.specs import SMALL

SPEC = """
name = "t"
precisions = ["fp32", "int8"]
seeds = [0, 1]
timeout_s = 300

[defaults]
actors = 0

[[tasks]]
agent = "dqn"
env = "gym:CartPole-v1"
label = "cartpole"
widths = ["64,64"]
[tasks.config]
total_steps = 2000

[[tasks]]
agent = "d4pg"
env = "dmc:cartpole-balance"
precisions = ["fp32"]
seeds = [3]
"""


def _err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


def _one_error(capsys: pytest.CaptureFixture[str], needle: str) -> str:
    err = _err_lines(capsys)
    assert len(err) == 1, err
    assert err[0].startswith("actorq: error: ") and needle in err[0], err
    return err[0]


def _dry_run(tmp_path: Path, spec: bytes | str, *extra: str) -> tuple[int, Path]:
    path = tmp_path / "spec.toml"
    if isinstance(spec, str):
        path.write_text(spec)
    else:
        path.write_bytes(spec)
    results = tmp_path / "results"
    return main(["bench", str(path), "--results", str(results), "--dry-run", *extra]), results


# ---------------------------------------------------------------- 1. spec files that are not text


def test_spec_that_is_not_utf8_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, results = _dry_run(tmp_path, SPEC.encode().replace(b'"t"', b'"\xff\xfe"'))
    assert rc == 2
    _one_error(capsys, "not UTF-8")
    assert not results.exists()


def test_spec_nested_too_deep_for_the_toml_parser_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, results = _dry_run(tmp_path, "seeds = " + "[" * 5000)
    assert rc == 2
    _one_error(capsys, "spec.toml")
    assert not results.exists()


@pytest.mark.parametrize(
    "value",
    ["9" * 4301, "-" + "9" * 5000, "0x" + "f" * 4000],
    ids=["decimal", "negative-decimal", "hex"],
)
@pytest.mark.parametrize("where", ["spec", "override"])
def test_an_integer_too_long_to_write_as_text_is_one_line(
    value: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Python writes no int of more than 4,300 digits as text: tomllib raises a ValueError
    (not its TOMLDecodeError) for a decimal one, and reads a hex one that every message
    quoting it would then fail on."""
    if where == "spec":
        rc, results = _dry_run(tmp_path, SPEC.replace("seeds = [0, 1]", f"seeds = [0, {value}]"))
    else:
        rc, results = _dry_run(tmp_path, SPEC, "--override", f"hidden=[64, {value}]")
    assert rc == 2
    _one_error(capsys, "an integer of more than 4,300 digits")
    assert not results.exists()


# ---------------------------------------------------------------- 2. values --dry-run must reject


def test_dry_run_builds_and_validates_every_cell_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # only the last task's cell is bad: every cell's config is built and validated
    bad = SPEC.replace("seeds = [3]\n", "seeds = [3]\n[tasks.config]\nbatch_size = 0\n")
    rc, results = _dry_run(tmp_path, bad)
    assert rc == 2
    _one_error(capsys, "cell d4pg-dmc-cartpole-balance-w256x256x256-fp32-s3: --batch-size")
    assert not results.exists()


# These rely on ExperimentConfig.validate() rejecting non-finite floats, negative or huge seeds
# and unknown devices (the config change in src/actorq/config.py); the spec only has to build
# every cell's config and call validate(), which the test above checks with a rule validate()
# has always had.
@pytest.mark.parametrize(
    "edit, override, needle",
    [
        (("total_steps = 2000", "learning_rate = nan"), None, "--learning-rate"),
        (("total_steps = 2000", "learning_rate = inf"), None, "--learning-rate"),
        (("total_steps = 2000", "target_return = -inf"), None, "--target-return"),
        (("seeds = [0, 1]", "seeds = [0, -1]"), None, "--seed"),
        (("seeds = [0, 1]", "seeds = [0, 9223372036854775807]"), None, "--seed"),
        (("total_steps = 2000", 'device = "foo"'), None, "--device"),
        (None, "device=foo", "--device"),
        (None, "log_every=nan", "--log-every"),
        (None, "actors=-3", "--actors"),
        (("timeout_s = 300", 'country = "Atlantis"'), None, "--energy-country"),
    ],
    ids=[
        "nan-float", "inf-float", "neg-inf-target", "negative-seed", "huge-seed",
        "unknown-device", "override-unknown-device", "override-nan", "override-negative",
        "bad-country",
    ],
)  # fmt: skip
def test_dry_run_rejects_config_values_that_validate_rejects(
    edit: tuple[str, str] | None,
    override: str | None,
    needle: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = SPEC if edit is None else SPEC.replace(*edit)
    assert edit is None or edit[0] in SPEC
    rc, results = _dry_run(tmp_path, text, *(("--override", override) if override else ()))
    assert rc == 2
    _one_error(capsys, needle)
    assert not results.exists()


@pytest.mark.parametrize(
    "edit, needle",
    [
        (("gym:CartPole-v1", "gym:Pendulum-v1"), "DQN needs discrete actions"),
        (("total_steps = 2000", "replay_size = 10000000000"), "--replay-size"),
    ],
    ids=["env-the-agent-cannot-act-in", "run-too-big-for-memory"],
)
@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_what_train_refuses_before_writing_the_spec_refuses_before_writing(
    edit: tuple[str, str],
    needle: str,
    dry: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The builder's env checks and the memory check ``train()`` makes before its first write
    are made for every cell up front: one line, and not a results directory, lock or cell dir."""
    assert edit[0] in SPEC
    path = tmp_path / "spec.toml"
    path.write_text(SPEC.replace(*edit))
    results = tmp_path / "results"
    args = ["bench", str(path), "--results", str(results), "--no-progress"]
    assert main([*args, "--dry-run"] if dry else args) == 2
    _one_error(capsys, needle)
    assert not results.exists()


@pytest.mark.parametrize(
    "edit, needle",
    [
        (("timeout_s = 300", "timeout_s = nan"), "timeout_s"),
        (("timeout_s = 300", "timeout_s = inf"), "timeout_s"),
        (("timeout_s = 300", "timeout_s = -inf"), "timeout_s"),
        (("timeout_s = 300", "timeout_s = true"), "timeout_s"),
        (("timeout_s = 300", "timeout_s = 0"), "timeout_s"),
        (("timeout_s = 300", "timeout_s = 1e300"), "timeout_s"),
        (("timeout_s = 300", 'timeout_s = "300"'), "timeout_s"),
        (("seeds = [0, 1]", "seeds = [true, false]"), "seeds"),
        (("seeds = [0, 1]", "seeds = [0.5]"), "seeds"),
        (("seeds = [0, 1]", "seeds = [nan]"), "seeds"),
        (("seeds = [0, 1]", "seeds = 3"), "seeds"),
        (("seeds = [0, 1]", "seeds = []"), "seeds"),
        (("seeds = [3]", "seeds = [[3]]"), "seeds"),
        (('precisions = ["fp32"]', "precisions = [1]"), "precisions"),
        (('widths = ["64,64"]', "widths = [64]"), "widths"),
        (('widths = ["64,64"]', 'widths = ["64,nan"]'), "widths"),
        (('widths = ["64,64"]', 'widths = ["64,-64"]'), "widths"),
        (('widths = ["64,64"]', 'widths = ["64,99999999999"]'), "widths"),
        (('name = "t"', 'name = "a\\u0000b"'), "name"),
        (('name = "t"', 'name = "two\\nlines"'), "name"),
        (('name = "t"', f'name = "{"n" * 300}"'), "name"),
        (('label = "cartpole"', 'label = "cart\\npole"'), "label"),
        (('label = "cartpole"', f'label = "{"c" * 300}"'), "label"),
        (("timeout_s = 300", "country = 5"), "country"),
        (("timeout_s = 300", "country = nan"), "country"),
    ],
)
def test_spec_fields_reject_bad_values_in_one_line(
    edit: tuple[str, str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert edit[0] in SPEC
    rc, results = _dry_run(tmp_path, SPEC.replace(*edit))
    assert rc == 2
    _one_error(capsys, needle)
    assert not results.exists()


@pytest.mark.parametrize(
    "item, needle",
    [
        ("actors=1\nseed = 3", "one TOML value"),
        ("actors=1\nactors=2", "one TOML value"),
        ("=3", "expected KEY=VALUE"),
    ],
)
def test_override_with_more_than_one_value_is_one_line(
    item: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, results = _dry_run(tmp_path, SPEC, "--override", item)
    assert rc == 2
    _one_error(capsys, needle)
    assert not results.exists()


def test_results_path_that_is_a_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "results").write_text("not a directory")
    rc, _ = _dry_run(tmp_path, SPEC)
    assert rc == 2
    _one_error(capsys, "not a directory")
    spec = load_spec(tmp_path / "spec.toml")
    with pytest.raises(ActorQError, match="not a directory"):
        run_matrix(spec, tmp_path / "results", lambda c, d, t: 0, progress=False)


def test_a_users_files_where_the_bench_would_clear_or_write_are_one_line_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory at a fresh cell's name was deleted to start the cell (a user's thesis in
    it too), and a spec.toml no bench wrote was overwritten at the results' root."""
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SPEC)
    results = tmp_path / "results"
    cell = results / load_spec(spec_path).cells[0].name
    cell.mkdir(parents=True)
    (cell / "thesis.tex").write_text("mine")
    argv = ["bench", str(spec_path), "--results", str(results), "--no-progress"]
    for extra in ([], ["--dry-run"]):
        assert main([*argv, *extra]) == 2
        _one_error(capsys, "holds what is not a cell's run (thesis.tex)")
    assert (cell / "thesis.tex").read_text() == "mine" and sorted(results.iterdir()) == [cell]
    (cell / "thesis.tex").unlink()
    (results / "spec.toml").write_text("# my other spec")
    assert main([*argv, "--dry-run"]) == 2
    _one_error(capsys, "spec.toml is not a bench's (no machine.json beside it)")
    assert (results / "spec.toml").read_text() == "# my other spec"
    (results / "spec.toml").write_text(SPEC)  # the spec kept in its own results: its own
    assert main([*argv, "--dry-run"]) == 0
    capsys.readouterr()
    cell.rmdir()
    cell.write_text("a file at a cell's name")  # refused before the lock or machine.json
    assert main(argv) == 2
    _one_error(capsys, "is not a cell's directory")
    assert sorted(p.name for p in results.iterdir()) == [cell.name, "spec.toml"]


def test_a_results_file_whose_metadata_cannot_be_read_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Path.exists raises for EACCES on Python 3.11: the results readers let it out."""
    from actorq.bench.results import ResultsError, read_json_object

    def denied(self: Path, *a: Any, **k: Any) -> bool:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "exists", denied)
    with pytest.raises(ResultsError, match="cannot read"):
        read_json_object(tmp_path / "cell.json")


# ---------------------------------------------------------------- 3. report options


@pytest.mark.parametrize("reps", ["0", "-1", "99", "1000000000", "100001"])
def test_report_reps_out_of_range_is_one_line(
    reps: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = _results(tmp_path)
    before = _listing(r)
    assert main(["report", str(r), "--reps", reps]) == 2
    _one_error(capsys, "--reps")
    assert _listing(r) == before


# ---------------------------------------------------------------- 4. results files


def _fake_summary(cell: Cell, cell_dir: Path, **extra: Any) -> None:
    summary = {
        "env": cell.env, "precision": cell.precision, "env_steps": 3000, "updates": 10,
        "eval_return": 100.0 + cell.seed, "wall_time_s": 20.0, "interrupted": False,
        "target_return": 475.0, "reached_target": True, "time_to_target_s": 10.0 + cell.seed,
        "snapshot_bytes": 300, "fp32_snapshot_bytes": 1000, "action_agreement": float("nan"),
        "energy_kwh": 0.001, "energy_kg_co2": 0.0004, "energy_estimated": True, **extra,
    }  # fmt: skip
    (cell_dir / "summary.json").write_text(json.dumps(summary))
    run = {"env": cell.env, "precision": cell.precision, "seed": cell.seed, "actors": 0,
           "total_steps": 3000, "run_dir": str(cell_dir)}  # a run's config has these  # fmt: skip
    (cell_dir / "config.json").write_text(
        json.dumps({**run, **cell.config, "agent": cell.agent, "hidden": list(cell.width)})
    )
    with open(cell_dir / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "wall_time", "metric", "value"])
        for i in range(1, 4):
            w.writerow([1000 * i, f"{1e9 + 2 * i:.3f}", "perf/actor_sps", 900.0])
            w.writerow([1000 * i, f"{1e9 + 2 * i:.3f}", "loss/td", "inf"])  # not reported
            w.writerow([1000 * i, f"{1e9 + 2 * i + 0.5:.3f}", "charts/eval_return", 50.0 * i])


def _results(tmp_path: Path, spec_text: str = SMALL) -> Path:
    """A results directory as `actorq bench` leaves it (cells faked, nothing trained); the
    int8 seed-1 cell crashed."""
    path = tmp_path / "small.toml"
    path.write_text(spec_text)
    spec = load_spec(path)
    results = tmp_path / "results"

    def runner(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
        if cell.precision == "int8" and cell.seed == 1:
            return 1
        _fake_summary(cell, cell_dir)
        return 0

    run_matrix(spec, results, runner, progress=False)
    return results


def _listing(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


FINISHED = "cartpole-w32x32-fp32-s0"
CRASHED = "cartpole-w32x32-int8-s1"


def _edit_json(path: Path, **fields: Any) -> None:
    d = json.loads(path.read_text())
    for k, v in fields.items():
        if v is _DELETE:
            del d[k]
        else:
            d[k] = v
    path.write_text(json.dumps(d))


_DELETE = object()


@pytest.mark.parametrize(
    "cell, name, corrupt, needle",
    [
        (FINISHED, "cell.json", "[1, 2]", "not a JSON object"),
        (FINISHED, "cell.json", {"seed": "zero"}, "seed"),
        (FINISHED, "cell.json", {"width": [32, "x"]}, "width"),
        (FINISHED, "cell.json", {"width": 32}, "width"),
        (FINISHED, "cell.json", {"task": None}, "task"),
        (FINISHED, "cell.json", b'{"name": "\xff"}', "not UTF-8"),
        (FINISHED, "cell.json", b'{"name": "cartpole-w3', "not valid JSON"),
        (FINISHED, "config.json", "[]", "not a JSON object"),
        (FINISHED, "config.json", {"log_every": float("nan")}, "log_every"),
        (FINISHED, "config.json", {"seed": 1.5}, "seed"),
        (FINISHED, "summary.json", "[]", "not a JSON object"),
        (FINISHED, "summary.json", "null", "not a JSON object"),
        (FINISHED, "summary.json", {"eval_return": _DELETE}, "eval_return"),
        (FINISHED, "summary.json", {"eval_return": "high"}, "eval_return"),
        (FINISHED, "summary.json", {"eval_return": float("nan")}, "eval_return"),
        (FINISHED, "summary.json", {"wall_time_s": float("inf")}, "wall_time_s"),
        (FINISHED, "summary.json", {"time_to_target_s": "soon"}, "time_to_target_s"),
        (FINISHED, "summary.json", {"target_return": [475]}, "target_return"),
        (FINISHED, "summary.json", {"energy_kwh": -1.0}, "energy_kwh"),
        (FINISHED, "summary.json", {"steps_to_target": "x"}, "steps_to_target"),
        (FINISHED, "summary.json", {"steps_to_target": float("nan")}, "steps_to_target"),
        (FINISHED, "summary.json", {"eval_time_s": "x"}, "eval_time_s"),
        (FINISHED, "summary.json", {"eval_time_s": float("inf")}, "eval_time_s"),
        (FINISHED, "summary.json", {"eval_time_s": 1e9}, "at most wall_time_s"),
        (FINISHED, "summary.json", {"reached_target": True, "time_to_target_s": None},
         "reached_target is true but time_to_target_s is missing"),
        (FINISHED, "config.json", {"target_return": "x"}, "target_return"),
        (FINISHED, "config.json", {"target_return": float("nan")}, "target_return"),
        (FINISHED, "summary.json", {"interrupted": "no"}, "interrupted"),
        (FINISHED, "summary.json", {"env_steps": 10**400}, "env_steps"),
        # finite, but past what any run logs: the statistics and plot axes would overflow
        (FINISHED, "summary.json", {"eval_return": 1.7e308}, "eval_return"),
        (FINISHED, "metrics.csv", "step,wall_time,metric,value\n1,2,charts/eval_return,1e308\n",
         "line 2"),
        (CRASHED, "failed.json", "[]", "not a JSON object"),
        (CRASHED, "failed.json", {"why": 5}, "why"),
        (FINISHED, "metrics.csv", b"step,wall_time,metric,value\n\xff\n", "not UTF-8"),
        (FINISHED, "metrics.csv", "a,b\n1,2\n", "header"),
        (FINISHED, "metrics.csv", "step,wall_time,metric,value\n1,x,perf/actor_sps,1\n1,2,a,3\n",
         "line 2"),
        (FINISHED, "metrics.csv", "step,wall_time,metric,value\n1,2,charts/eval_return,nan\n",
         "line 2"),
        (FINISHED, "metrics.csv", "step,wall_time,metric,value\n1,2\n1,2,perf/actor_sps,3\n",
         "line 2"),
        ("", "machine.json", "[]", "not a JSON object"),
        ("", "machine.json", {"sessions": "x"}, "sessions"),
        ("", "machine.json", {"sessions": [1]}, "sessions"),
        ("", "machine.json", b'{"sessions": [{"cpu', "not valid JSON"),
        ("", "machine.json", b"\xff\xfe", "not UTF-8"),
        # the report printed "nan cores" and "GPU {'name': inf}" and exited 0
        ("", "machine.json", {"sessions": [{"cores": float("nan")}]}, "sessions[0].cores"),
        ("", "machine.json", {"sessions": [{"cores": 0}]}, "sessions[0].cores"),
        ("", "machine.json", {"sessions": [{"cores": 10**9}]}, "sessions[0].cores"),
        ("", "machine.json", {"sessions": [{}, {"cores_usable": 2.5}]}, "sessions[1].cores_usable"),
        ("", "machine.json", {"sessions": [{"gpus": [{"name": float("inf")}]}]},
         "sessions[0].gpus"),
        ("", "machine.json", {"sessions": [{"gpus": "H100"}]}, "sessions[0].gpus"),
        ("", "machine.json", {"sessions": [{"load_avg_at_start": [0.5, float("nan"), 1]}]},
         "sessions[0].load_avg_at_start"),
        ("", "machine.json", {"sessions": [{"cpu_model": 5}]}, "sessions[0].cpu_model"),
        ("", "machine.json", {"sessions": [{"git_commit": ["x"]}]}, "sessions[0].git_commit"),
    ],
)  # fmt: skip
def test_corrupt_results_file_is_one_line_naming_it(
    cell: str,
    name: str,
    corrupt: str | bytes | dict[str, Any],
    needle: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("rliable")
    r = _results(tmp_path)
    path = r / cell / name
    if isinstance(corrupt, dict):
        _edit_json(path, **corrupt)
    elif isinstance(corrupt, bytes):
        path.write_bytes(corrupt)
    else:
        path.write_text(corrupt)
    before = _listing(r)
    capsys.readouterr()
    assert main(["report", str(r), "--reps", "100"]) == 2
    line = _one_error(capsys, needle)
    assert str(path) in line
    assert _listing(r) == before  # no report.md, report.json or plots, not even partly


def test_machine_json_as_bench_writes_it_is_read(tmp_path: Path) -> None:
    """What machine_info() writes passes read_sessions' checks, its nulls included."""
    from actorq.bench.machine import machine_info
    from actorq.bench.results import read_sessions

    facts = machine_info()
    nulls = dict.fromkeys(("cores", "cores_usable", "load_avg_at_start", "git_commit"))
    sessions = [facts, {**facts, **nulls}, {}]
    (tmp_path / "machine.json").write_text(json.dumps({"sessions": sessions}))
    assert read_sessions(tmp_path) == sessions


@pytest.mark.parametrize(
    "name, corrupt",
    [
        ("cell.json", b'{"name": "cartpole-w3'),
        ("cell.json", b"\xff"),
        ("config.json", b"{"),
        ("failed.json", b'{"status": 1, "why": "exit'),
        ("metrics.csv", b"step,wall_time,metric,value\n1,2,perf/\xe2\x82"),
        ("metrics.csv", b""),  # killed before its logger's header reached the disk
        ("metrics.csv", b"step,wall_t"),
    ],
)
def test_half_written_unfinished_cell_is_skipped_with_a_warning(
    name: str, corrupt: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cell killed while its files were written is a partial run (docs/bench.md: the next
    `actorq bench` clears it and runs it again); the report skips it and says so. A failed
    cell's metrics.csv so cut (its failed.json says why) leaves it a failed row."""
    pytest.importorskip("rliable")
    pytest.importorskip("matplotlib")
    r = _results(tmp_path)
    (r / CRASHED / name).write_bytes(corrupt)
    if name == "metrics.csv":
        capsys.readouterr()
        assert main(["report", str(r), "--reps", "100"]) == 0
        assert _err_lines(capsys) == []
        text = (r / "report.md").read_text()
        assert f"- {CRASHED}: exit status" in text and "skipped partial cell" not in text
        (r / CRASHED / "failed.json").unlink()  # killed, not failed: a partial cell
    capsys.readouterr()
    assert main(["report", str(r), "--reps", "100"]) == 0
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("actorq: warning: ") and CRASHED in err[0], err
    text = (r / "report.md").read_text()
    assert f"- {CRASHED}:" not in text and "| cartpole | 32x32 | fp32 | 2 |" in text
    assert f"- skipped partial cell {CRASHED}: " in text  # and listed as such


def test_half_written_summary_is_an_unfinished_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("rliable")
    pytest.importorskip("matplotlib")
    r = _results(tmp_path)
    s = r / FINISHED / "summary.json"
    s.write_bytes(s.read_bytes()[:40])
    (r / "cartpole-w32x32-fp32-s1" / "summary.json").write_bytes(b'{"env": "\xe2\x82')
    # a metrics.csv whose last line was cut short: that line is dropped, the rest is kept
    m = r / "cartpole-w32x32-int8-s0" / "metrics.csv"
    m.write_bytes(m.read_bytes() + b"4000,1000000008.0")
    assert main(["report", str(r), "--reps", "100"]) == 0
    assert _err_lines(capsys) == []
    text = (r / "report.md").read_text()
    assert f"- {FINISHED}: unfinished" in text
    assert "| cartpole | 32x32 | fp32 | 0 (+2 unfinished) |" in text
    assert "| cartpole | 32x32 | int8 | 1 (+1 failed) |" in text


def test_target_reached_at_time_zero_has_no_speedup(tmp_path: Path) -> None:
    pytest.importorskip("rliable")
    pytest.importorskip("matplotlib")
    r = _results(tmp_path)
    _edit_json(r / "cartpole-w32x32-int8-s0" / "summary.json", time_to_target_s=0.0)
    assert main(["report", str(r), "--reps", "100"]) == 0
    rows = {row["precision"]: row for row in json.loads((r / "report.json").read_text())["table"]}
    assert rows["int8"]["speedup"] is None and rows["fp32"]["speedup"] == pytest.approx(1.0)


def test_report_outputs_are_complete_or_absent(tmp_path: Path) -> None:
    pytest.importorskip("rliable")
    pytest.importorskip("matplotlib")
    r = _results(tmp_path)
    assert main(["report", str(r), "--reps", "100"]) == 0
    written = {p.name for p in r.iterdir() if p.is_file()}
    assert {"report.md", "report.json", "curves-cartpole-w32x32.png"} <= written
    assert not [n for n in written if n.endswith(".tmp")]


# ---------------------------------------------------------------- 4b. a resumed `actorq bench`


@pytest.mark.parametrize(
    "name, corrupt, needle",
    [
        ("summary.json", "[]", "not a JSON object"),
        ("summary.json", json.dumps({"env": "x"}), "missing"),
        ("summary.json", json.dumps({"env": 1, "precision": "fp32", "env_steps": 1,
                                     "eval_return": 1.0, "wall_time_s": 1.0}), "env"),
        ("../machine.json", "[]", "not a JSON object"),
        ("../machine.json", json.dumps({"sessions": {"a": 1}}), "sessions"),
        ("../machine.json", b"\xff", "not UTF-8"),
        ("../machine.json", '{"sessions": [', "not valid JSON"),
    ],
)  # fmt: skip
def test_resumed_bench_with_a_corrupt_results_file_is_one_line_and_runs_nothing(
    name: str, corrupt: str | bytes, needle: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    r = _results(tmp_path)
    path = (r / FINISHED / name).resolve()
    if isinstance(corrupt, bytes):
        path.write_bytes(corrupt)
    else:
        path.write_text(corrupt)
    before = _listing(r)
    spec = load_spec(tmp_path / "small.toml")
    ran: list[str] = []
    with pytest.raises(ActorQError) as e:
        run_matrix(spec, r, lambda c, d, t: ran.append(c.name) or 0, progress=False)
    assert "\n" not in str(e.value) and needle in str(e.value) and str(path) in str(e.value)
    assert ran == [] and _listing(r) == before
    # --dry-run reads the same files and says the same
    capsys.readouterr()
    args = ["bench", str(tmp_path / "small.toml"), "--results", str(r), "--dry-run"]
    assert main(args) == 2
    _one_error(capsys, needle)
    assert _listing(r) == before


def test_resumed_bench_reruns_a_half_written_summary(tmp_path: Path) -> None:
    """A summary.json cut short (a cell killed while writing it) is a partial run: the next
    `actorq bench` clears the cell and runs it again, as docs/bench.md says."""
    r = _results(tmp_path)
    s = r / FINISHED / "summary.json"
    s.write_bytes(s.read_bytes()[:25])
    (r / "cartpole-w32x32-fp32-s1" / "summary.json").write_bytes(b"\xff")
    spec = load_spec(tmp_path / "small.toml")
    ran: list[str] = []

    def runner(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
        ran.append(cell.name)
        _fake_summary(cell, cell_dir)
        return 0

    out = run_matrix(spec, r, runner, progress=False)
    assert sorted(ran) == sorted([FINISHED, "cartpole-w32x32-fp32-s1", CRASHED])
    assert sorted(out.ran) == sorted(ran)


def test_a_cell_that_writes_a_corrupt_summary_is_a_failed_cell(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    spec = load_spec(path)

    def runner(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
        (cell_dir / "summary.json").write_text("[]")
        return 0

    out = run_matrix(spec, tmp_path / "r", runner, progress=False)
    assert len(out.failed) == len(spec.cells) and not out.ran
    why = json.loads((tmp_path / "r" / out.failed[0] / "failed.json").read_text())["why"]
    assert "not a JSON object" in why


# ---------------------------------------------------------------- the cell process


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"[]", "not a JSON object"),
        (b"\xff", "not UTF-8"),
        (b'{"agent": "dqn"', "not valid JSON"),
        (json.dumps({"agent": "a2c", "config": {}}).encode(), "agent"),
        (json.dumps({"agent": "dqn", "config": []}).encode(), "config"),
        (json.dumps({"agent": "dqn", "config": {"batch_size": 0}}).encode(), "--batch-size"),
        (json.dumps({"agent": "dqn", "config": {}, "country": 7}).encode(), "country"),
    ],
)
def test_cell_process_with_a_bad_cell_json_is_one_line(
    content: bytes, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cell.json"
    path.write_bytes(content)
    assert bench_cell.main([str(path)]) == 2
    _one_error(capsys, needle)
    assert [p.name for p in tmp_path.iterdir()] == ["cell.json"]  # no run started


def test_cell_process_runs_the_config_the_spec_validated(tmp_path: Path) -> None:
    """What the cell process builds from a cell.json `actorq bench` wrote (no training here):
    the spec's fields, energy on the spec's grid, the run in the cell's directory."""
    path = tmp_path / "small.toml"
    path.write_text('country = "FRA"\n' + SMALL)
    spec = load_spec(path)
    spec.validate()
    seen: list[Any] = []

    def runner(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
        seen.append((cell, bench_cell._load(cell_dir / "cell.json")))
        return 0

    run_matrix(spec, tmp_path / "r", runner, progress=False)
    assert len(seen) == len(spec.cells)
    for cell, cfg in seen:
        assert (cfg.precision, cfg.seed, cfg.hidden, cfg.actors) == (
            cell.precision, cell.seed, (32, 32), 0,
        )  # fmt: skip
        assert (cfg.energy, cfg.energy_country, cfg.progress) == (True, "FRA", False)
        assert cfg.run_dir == str(tmp_path / "r" / cell.name)


def test_every_repeated_override_is_applied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--override device=cuda --override actors=15` once kept only the last flag: the first
    # override, checked here by being bad, must reach the spec whatever follows it
    rc, results = _dry_run(tmp_path, SPEC, "--override", "actors=-1", "--override", "energy=false")
    assert rc == 2
    _one_error(capsys, "actors")
    assert not results.exists()
    rc, _ = _dry_run(tmp_path, SPEC, "--override", "energy=false", "--override", "actors=2")
    assert rc == 0
