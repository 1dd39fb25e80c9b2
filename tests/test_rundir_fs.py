"""A run directory the filesystem does not let a run write is one line before anything of the
run is written (issue: a read-only filesystem, ``--run-dir`` below a file, ``metrics.csv`` a
directory, ``tb`` a file, and a disk filling up while logging each ended in a traceback), and
hypothesis tries the layouts a careless user leaves behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorq.cli import main
from actorq.errors import ActorQError, ConfigError, OutputError
from actorq.logging import MetricLogger
from actorq.rundir import RunDir

TRAIN = ["train", "dqn", "--actors", "0", "--total-steps", "120", "--min-replay-size", "60",
         "--eval-every", "120", "--eval-episodes", "1", "--no-progress", "--no-energy"]  # fmt: skip
#: a bench cell's record, as `actorq bench` writes it (the fields a cell.json must have)
CELL = '{"name": "c", "agent": "dqn", "env": "gym:CartPole-v1"}'
ENTRIES = ("config.json", "metrics.csv", "summary.json", "checkpoint", "best", "tb", "actors",
           "notes.txt")  # fmt: skip


def files_under(p: Path) -> dict[str, bytes | None]:
    return {
        str(q.relative_to(p)): (q.read_bytes() if q.is_file() and not q.is_symlink() else None)
        for q in sorted(p.rglob("*"))
    }


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: (d / "metrics.csv").mkdir(parents=True), "not a run's (metrics.csv)"),
        (lambda d: (d.mkdir(), (d / "tb").write_text("x")), "not a run's (tb)"),
        (lambda d: d.parent.joinpath("f").write_text("x"), "cannot create it (Not a directory)"),
    ],
)
def test_a_run_dir_it_cannot_write_is_one_line_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, needle: str
) -> None:
    run = tmp_path / "run"
    make(run)  # type: ignore[operator]
    target = tmp_path / "f" / "run" if (tmp_path / "f").exists() else run
    before = files_under(tmp_path)
    assert main([*TRAIN, "--run-dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert files_under(tmp_path) == before


def test_a_run_dir_named_in_bytes_that_are_not_utf8_is_one_line_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Linux allows such a name; tensorboard and safetensors take paths as UTF-8 text only (the
    run crashed after writing config.json, metrics.csv and tb/)."""
    run = os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xffname")
    assert main([*TRAIN, "--run-dir", run]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not valid UTF-8" in err, err
    assert files_under(tmp_path) == {}


def test_a_read_only_directory_is_refused_before_the_run_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root ignores permission bits, so the read-only filesystem is simulated where the run
    first writes: the probe file."""

    def read_only(directory: Path) -> tuple[int, str]:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr("actorq.rundir._probe", read_only)
    with pytest.raises(ConfigError, match=r"cannot write in it \(Read-only file system\)"):
        RunDir(tmp_path / "run").prepare()


def test_a_disk_filling_up_while_logging_is_one_line(tmp_path: Path) -> None:
    log = MetricLogger(tmp_path, tensorboard=False)

    class Full:
        def writerow(self, row: object) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    log._csv = Full()  # type: ignore[assignment]
    with pytest.raises(OutputError, match=r"metrics.csv: No space left on device"):
        log.log(1, {"x": 1.0})
    log.close()


KINDS = ("absent", "file", "dir", "symlink-file", "symlink-dir", "dangling", "fifo")


def make_entry(p: Path, kind: str, outside: Path) -> None:
    if kind == "file":
        p.write_text("users-data")
    elif kind == "dir":
        p.mkdir()
    elif kind == "symlink-file":
        p.symlink_to(outside / "target.txt")
    elif kind == "symlink-dir":
        p.symlink_to(outside, target_is_directory=True)
    elif kind == "dangling":
        p.symlink_to(outside / "nowhere")
    elif kind == "fifo":
        os.mkfifo(p)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(layout=st.dictionaries(st.sampled_from(ENTRIES), st.sampled_from(KINDS), max_size=3))
def test_random_run_dir_layouts_train_or_fail_in_one_line_without_touching_others(
    tmp_path_factory: pytest.TempPathFactory, layout: dict[str, str]
) -> None:
    """Whatever a user left in a run directory (files, directories, symlinks into another
    directory, dangling links, FIFOs at the layout's names): training either works or stops
    with one ActorQError line before writing anything; a file outside the run directory that
    a symlink points at is never written (a symlinked directory may get new files: that is
    what linking ``tb`` to another disk is for)."""
    base = tmp_path_factory.mktemp("fs")
    run, outside = base / "run", base / "outside"
    run.mkdir()
    outside.mkdir()
    (outside / "target.txt").write_text("not yours")
    for name, kind in layout.items():
        make_entry(run / name, kind, outside)
    before_outside = files_under(outside)
    before_run = files_under(run)
    try:
        code = main([*TRAIN, "--run-dir", str(run)])
    except ActorQError:  # main prints these; it does not raise them
        raise AssertionError("main let an ActorQError escape") from None
    after_outside = files_under(outside)
    assert {k: after_outside.get(k) for k in before_outside} == before_outside
    if code != 0:
        assert code == 2 and files_under(run) == before_run


def test_a_new_run_among_a_users_files_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``actorq train --run-dir /dev`` (as root) trained into /dev: a new run went into any
    existing directory, mixing its files with the user's and overwriting a ``config.json``
    that was not a run's. It goes into a new or empty directory (or a bench cell's) now."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (mine / "config.json").write_text('{"lr": 3}')
    before = files_under(mine)
    assert main([*TRAIN, "--run-dir", str(mine)]) == 2
    err = capsys.readouterr().err
    assert "holds what is not a run's (config.json, notes.txt): a new run goes into a new" in err
    assert err.count("\n") == 1
    assert files_under(mine) == before  # not even the lock file

    (mine / "notes.txt").unlink()  # a config.json alone is refused too, unless it is a run's
    assert main([*TRAIN, "--run-dir", str(mine)]) == 2
    assert (mine / "config.json").read_text() == '{"lr": 3}'
    capsys.readouterr()

    cell = tmp_path / "cell"  # what actorq bench leaves before a cell's run starts
    cell.mkdir()
    (cell / "cell.json").write_text(CELL)
    (cell / "log.txt").write_text("")
    assert main([*TRAIN, "--run-dir", str(cell)]) == 0
    assert RunDir(cell).foreign_entries() == []  # a finished run holds only its own names


def _make(d: Path, entries: dict[str, str | None]) -> Path:
    d.mkdir()
    for name, text in entries.items():
        if text is None:
            (d / name).mkdir()
            (d / name / "data.txt").write_text("irreplaceable")
        else:
            (d / name).write_text(text)
    return d


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        ({"config.json": '{"env": "CartPole-v1", "lr": 0.001}'}, "config.json"),  # a user's hparams
        ({"best.old": None}, "best.old"),  # a save's leftovers with no run: a save deletes them
        ({"checkpoint.tmp": None}, "checkpoint.tmp"),
        ({"metrics.csv": "a;b;c\r1;2;3\r4;5;6\r"}, "metrics.csv"),  # not a run's: no header
        ({"log.txt": "my notes"}, "log.txt"),  # a bench cell's only beside its cell.json
        ({".lock": "do not touch"}, ".lock"),
    ],
)
def test_a_users_entry_at_a_runs_name_is_not_taken_for_the_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entries: dict[str, str | None], named: str
) -> None:
    """Review of 9e260ed: a name a run writes was taken as the run's whatever it held, so a
    user's config.json with an "env" key was overwritten, best.old/ deleted, a CR-ended CSV
    appended to, a .lock's text replaced."""
    d = _make(tmp_path / "mine", entries)
    before = files_under(d)
    assert main([*TRAIN, "--run-dir", str(d)]) == 2
    assert f"holds what is not a run's ({named})" in capsys.readouterr().err
    assert files_under(d) == before


@pytest.mark.parametrize("name", [".lock", "precision_auto.md"])
def test_a_link_at_a_name_a_run_writes_is_refused_and_its_target_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """The lock's pid and --precision auto's table were written through a link left there."""
    target = tmp_path / "important.txt"
    target.write_text("precious")
    d = tmp_path / "run"
    d.mkdir()
    (d / name).symlink_to(target)
    assert main([*TRAIN, "--run-dir", str(d), "--precision", "auto"]) == 2
    assert f"holds what is not a run's ({name})" in capsys.readouterr().err
    assert target.read_text() == "precious"


def test_a_directory_that_cannot_be_listed_is_left_to_prepare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write-only directory (mode 333) trained before; listing it raised a traceback."""

    def denied(path: object) -> list[str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "listdir", denied)
    assert RunDir(tmp_path).foreign_entries() == []


@pytest.mark.parametrize(
    "entries",
    [
        {"cell.json.tmp": "{"},  # the bench killed writing cell.json (older versions)
        {".cell.json.0123456789ab.tmp": "{", "log.txt": ""},  # ... through write_output
        {"cell.json": CELL, "failed.json.tmp": "{", "log.txt": ""},  # ... writing failed.json
        {"cell.json": CELL, ".metrics.csv.299d41e70b6f.tmp": "step", "log.txt": ""},  # SB3's
        {"cell.json": CELL, "metrics.csv.tmp": "", "config.json": ""},  # older versions' temp
        {"cell.json": CELL, "config.json": '{"env": "gym:Cart'},  # a config write cut short
        {".lock": "", ".config.json.0123456789ab.tmp": "{"},  # a run killed writing its config
        {"cell.json": CELL, "checkpoint.tmp": None},  # a save cut short (safetensors' temp)
        {".lock": "2341\n", "tb": None, "actors": None},  # a run killed before its config
    ],
)
def test_what_actorq_leaves_when_killed_is_its_own(tmp_path: Path, entries: dict[str, Any]) -> None:
    """Review of 53bfb2e: temporary copies the bench and runs leave when killed between a
    write and its rename made the next `actorq bench` refuse the cell as not its own."""
    d = tmp_path / "cell"
    d.mkdir()
    for name, text in entries.items():
        (d / name).mkdir() if text is None else (d / name).write_text(text)
    if (d / "checkpoint.tmp").exists():
        (d / "checkpoint.tmp" / ".tmpVxF9mB").write_bytes(b"")
        (d / "checkpoint.tmp" / "state.json").write_text("{}")
    if (d / "actors").exists():
        (d / "actors" / ".actor1.json.0123456789ab.tmp").write_text("{")
    assert RunDir(d).foreign_entries() == []


@pytest.mark.parametrize("name", ["tb", "actors", "checkpoint", "best.old", "metrics.csv"])
def test_a_users_directory_at_a_runs_name_is_not_the_runs(tmp_path: Path, name: str) -> None:
    """A user's directory at a run's name (a thesis in tb/) was taken for the run's: a bench
    cell starting over deletes its directory, a run overwrites actors/actor0.json."""
    d = tmp_path / "cell"
    (d / name).mkdir(parents=True)
    (d / name / "thesis.tex").write_text("mine")
    (d / "cell.json").write_text(CELL)
    assert RunDir(d).foreign_entries() == [name]


def test_an_entry_that_cannot_be_looked_at_is_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.11's is_symlink raises for EACCES (a directory listable but not searchable)."""
    (tmp_path / "config.json").write_text("{}")

    def denied(self: Path) -> bool:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "is_symlink", denied)
    assert RunDir(tmp_path).foreign_entries() == ["config.json"]


def test_clear_removes_a_run_and_never_a_users_folder(tmp_path: Path) -> None:
    """Benchmarks start a killed cell over by removing its run directory: only a run's."""
    run = tmp_path / "run"
    assert main([*TRAIN, "--run-dir", str(run)]) == 0
    RunDir(run).clear()
    assert not run.exists()
    RunDir(run).clear()  # nothing there: nothing to do
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("mine")
    with pytest.raises(ConfigError, match=r"holds what is not a run's \(thesis.tex\)"):
        RunDir(mine).clear()
    assert (mine / "thesis.tex").read_text() == "mine"


@pytest.mark.parametrize(
    "entries",
    [
        {"summary.json": '{"my": "thesis results"}', "precision_auto.md": "notes"},
        {"cell.json": '{"my": 1}', "config.json": '{"my": 1}', "log.txt": "mine"},
        {"lost+found": None, ".lock": ""},
    ],
)
def test_clear_never_removes_what_no_run_or_cell_wrote(
    tmp_path: Path, entries: dict[str, Any]
) -> None:
    """Review of 8aba2b3: a summary or notes with no run beside them, any file named
    cell.json, filesystem litter: clear() (and a bench cell starting over) removed them."""
    d = tmp_path / "d"
    d.mkdir()
    for name, text in entries.items():
        (d / name).mkdir() if text is None else (d / name).write_text(text)
    before = files_under(d)
    with pytest.raises(ConfigError, match="not removed"):
        RunDir(d).clear()
    assert files_under(d) == before
    link = tmp_path / "link"
    link.symlink_to(d)
    with pytest.raises(ConfigError, match="is not a run's directory: not removed"):
        RunDir(link).clear()
