"""Input files are read only when they are regular files, and no further than a bound:
``actorq bench /dev/zero`` filled the memory (a MemoryError traceback), a FIFO given as a spec
(or left at a run's ``metrics.csv``) hung the command forever."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actorq.cli import main
from actorq.errors import ActorQError, GraphError
from actorq.inputs import exists, is_dir, is_file, read_input, stat_path


def _in_time(fn: object, seconds: float = 60.0) -> object:
    """``fn()``'s result; fails (instead of hanging the suite) if it does not return in time."""
    out: list[object] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())  # type: ignore[operator]
        except BaseException as e:  # handed to the test's thread
            failed.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if failed:
        raise failed[0]
    assert out, f"did not return within {seconds} s (blocked on a FIFO?)"
    return out[0]


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=64), limit=st.integers(0, 80))
def test_a_regular_file_is_read_whole_up_to_its_bound(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, limit: int
) -> None:
    p = tmp_path_factory.mktemp("in") / "f"
    p.write_bytes(data)
    if len(data) <= limit:
        assert read_input(p, "f", limit=limit) == data
    else:
        with pytest.raises(ActorQError, match=f"f: {len(data)} bytes, more than {limit} bytes"):
            read_input(p, "f", limit=limit)


def test_what_is_not_a_regular_file_is_one_line_before_a_byte_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = [("/dev/zero", "a character device"), (fifo, "a FIFO"), (tmp_path, "a directory")]
    for path, kind in cases:
        with pytest.raises(ActorQError, match=f"^x: {kind}, not a regular file; give a file$"):
            _in_time(lambda p=path: read_input(p, "x"))  # type: ignore[misc]
    with pytest.raises(ActorQError, match=r"^x: cannot read \(No such file or directory\)$"):
        read_input(tmp_path / "nope", "x")
    big = tmp_path / "big"
    big.write_bytes(b"0" * 100)
    with pytest.raises(ActorQError, match="more than 99 bytes"):
        read_input(big, "x", limit=99)


def test_a_spec_or_a_run_dir_that_is_a_device_or_fifo_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    for spec, kind in (("/dev/zero", "a character device"), (str(fifo), "a FIFO")):
        assert _in_time(lambda s=spec: main(["bench", s, "--dry-run"])) == 2  # type: ignore[misc]
        err = capsys.readouterr().err
        assert err == f"actorq: error: spec {spec}: {kind}, not a regular file; give a file\n"
    run = tmp_path / "run"  # a FIFO where a run's metrics.csv goes: was a hang before any check
    run.mkdir()
    os.mkfifo(run / "metrics.csv")
    train = ["train", "dqn", "--run-dir", str(run), "--total-steps", "100", "--no-progress"]
    assert _in_time(lambda: main(train)) == 2
    err = capsys.readouterr().err
    assert "holds what is not a run's (metrics.csv)" in err and err.count("\n") == 1


LONG = "a" * 300  # one path component past the 255 bytes Linux's filesystems take


def test_what_is_at_a_path_is_asked_in_one_line(tmp_path: Path) -> None:
    """Python 3.11's ``Path.is_file()`` raises OSError for a name too long; ``stat_path`` says
    None where nothing is (as pathlib does) and one line for what it cannot tell."""
    (tmp_path / "f").write_text("x")
    assert is_file(tmp_path / "f", "x") and not is_dir(tmp_path / "f", "x")
    assert is_dir(tmp_path, "x") and exists(tmp_path, "x")
    for absent in (tmp_path / "nope", tmp_path / "f" / "under-a-file", "nul\x00byte"):
        assert stat_path(absent, "x") is None and not exists(absent, "x")
    with pytest.raises(GraphError, match=r"^x: cannot read \(File name too long\)$"):
        is_file(tmp_path / LONG, "x", GraphError)


@pytest.mark.parametrize(
    "argv",
    [
        ["chip", "cost", LONG, "x.plc"],
        ["chip", "place", LONG, "--out", "o.plc"],
        ["report", LONG],
        ["report", f"{LONG}/results"],
        ["bench", "SPEC", "--results", f"{LONG}/results", "--dry-run"],
        ["graphopt", "baselines", "--graph", f"{LONG}.json"],
        ["graphopt", "baselines", "--graph", "rnnlm-s", "--cluster", LONG],
        ["graphopt", "place", "--graph", "rnnlm-s", "--policy", LONG],
        ["train", "go", "--graphs", f"{LONG}.json"],
        ["train", "go", "--cluster", f"{LONG}.json"],
        ["train", "ppo", "--env", f"chip:{LONG}"],
    ],
    ids=[
        "chip-cost",
        "chip-place",
        "report",
        "report-under",
        "bench-results",
        "graphopt-graph",
        "graphopt-cluster",
        "graphopt-policy",
        "go-graphs",
        "go-cluster",
        "chip-env",
    ],
)
def test_a_name_too_long_for_the_filesystem_is_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)  # relative names: nothing written where the tests run
    spec = tmp_path / "spec.toml"
    spec.write_text('[[tasks]]\nagent = "dqn"\nenv = "gym:CartPole-v1"\n')
    argv = [str(spec) if a == "SPEC" else a for a in argv]
    if argv[0] == "train":
        argv += ["--run-dir", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("actorq: error: "), err
    # (GO's config quotes a cluster's error cut at 300 characters: the name fills them)
    assert "File name too long" in err or "--cluster" in argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


def test_an_os_error_no_reader_caught_is_one_line(
    monkeypatch: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The backstop: a file system error from a path this project has not guarded yet."""
    import errno

    import actorq.cli.bench

    def report(argv: list[str]) -> int:
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), "two\nlines")

    monkeypatch.setattr(actorq.cli.bench, "cmd_report", report)
    assert main(["report", "x"]) == 2
    assert capsys.readouterr().err == "actorq: error: 'two\\nlines': File name too long\n"
