"""The results directory's reader (actorq.bench.results): what a cell killed while writing
leaves is told apart from what it logged whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from actorq.bench.results import (
    HalfWrittenError,
    ResultsError,
    read_checkpoint_steps,
    read_metrics,
)
from actorq.errors import ConfigError
from actorq.rundir import RunDir

HEADER = b"step,wall_time,metric,value\r\n"
ROW = b"1000,1700000000.000,charts/eval_return,17.3\r\n"


def _read(tmp_path: Path, data: bytes) -> list[tuple[int, float, str, float]]:
    path = tmp_path / "metrics.csv"
    path.write_bytes(data)
    return read_metrics(path, lambda metric: True)


@pytest.mark.parametrize("data", [b"", b"step,wall_ti", b"step,wall_time,metric,value"])
def test_a_metrics_file_cut_short_before_its_first_line_is_half_written(
    tmp_path: Path, data: bytes
) -> None:
    """A cell killed as it started (the logger's header not yet on disk) is a partial cell,
    not a file whose header is wrong."""
    with pytest.raises(HalfWrittenError, match=r"empty|cut short in its header"):
        _read(tmp_path, data)


def test_a_last_line_without_its_newline_is_dropped_even_where_it_parses(tmp_path: Path) -> None:
    """``17.3`` cut to ``1`` is a number, but not the one logged."""
    assert _read(tmp_path, HEADER + ROW + ROW[:-5]) == [
        (1000, 1_700_000_000.0, "charts/eval_return", 17.3)
    ]
    # the newline's first half written: the row itself is whole
    assert len(_read(tmp_path, HEADER + ROW + ROW[:-1])) == 2


def test_a_checkpoint_read_from_its_old_copy_is_named_and_not_noted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A save cut between its renames leaves only ``checkpoint.old``: the report read it, but
    printed the resume's ``actorq: note:`` among its warnings, and a bad state in it was
    blamed on ``checkpoint/state.json``, which does not exist."""
    import torch

    from actorq import checkpoint as ckpt

    state = {"learner": {}, "counters": {"env_steps": 7}, "rng": {}}
    ckpt.save(tmp_path / "checkpoint", {"w": torch.zeros(1)}, state)
    (tmp_path / "checkpoint").rename(tmp_path / "checkpoint.old")
    assert read_checkpoint_steps(tmp_path, native=True) == 7
    assert capsys.readouterr().err == ""
    shutil.rmtree(tmp_path / "checkpoint.old")
    ckpt.save(tmp_path / "checkpoint", {"w": torch.zeros(1)}, {**state, "counters": 5})
    (tmp_path / "checkpoint").rename(tmp_path / "checkpoint.old")
    with pytest.raises(ResultsError) as e:
        read_checkpoint_steps(tmp_path, native=True)
    assert str(e.value) == f"{tmp_path}/checkpoint.old/state.json: counters must be an object"


@pytest.mark.parametrize("cut", range(1, len(HEADER) - 2))
def test_a_metrics_file_the_report_skips_as_cut_in_its_header_the_bench_clears(
    tmp_path: Path, cut: int
) -> None:
    """The report called ``step,wall_t`` a partial cell that the next bench clears, but the
    bench refused the whole tree: it took only an empty file or the whole header as a run's.
    One rule now for both, at every cut."""
    (tmp_path / "cell.json").write_text(json.dumps({"name": "c", "agent": "dqn", "env": "x"}))
    with pytest.raises(HalfWrittenError):
        _read(tmp_path, HEADER[:cut])
    assert RunDir(tmp_path).foreign_entries() == []
    (tmp_path / "metrics.csv").write_bytes(HEADER[:cut] + b"x")  # no header, cut or whole
    assert RunDir(tmp_path).foreign_entries() == ["metrics.csv"]


def test_write_atomic_follows_no_link_at_its_temporary_or_target_name(tmp_path: Path) -> None:
    """A link left at ``NAME.tmp`` (the name the bench wrote through) or at NAME itself: the
    file it points to is never written, truncated or replaced; NAME becomes a regular file."""
    from actorq.bench.results import write_atomic

    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / "cell.json.tmp").symlink_to(victim)
    write_atomic(tmp_path / "cell.json", '{"name": "c"}')
    assert victim.read_text() == "mine" and (tmp_path / "cell.json.tmp").is_symlink()
    (tmp_path / "spec.toml").symlink_to(victim)
    write_atomic(tmp_path / "spec.toml", b"name = 'x'")
    assert victim.read_text() == "mine"
    for name in ("cell.json", "spec.toml"):
        p = tmp_path / name
        assert not p.is_symlink() and p.is_file()
    assert json.loads((tmp_path / "cell.json").read_text()) == {"name": "c"}


def test_write_atomic_flushes_the_file_and_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole on disk before the rename, and the rename itself too (a power loss after it)."""
    import os
    import stat

    from actorq.bench.results import write_atomic

    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write_atomic(tmp_path / "machine.json", "{}")
    assert synced == ["file", "dir"]


@pytest.mark.parametrize("kind", ["dir", "link"])
@pytest.mark.parametrize("name", ["cell.json.tmp", ".cell.json.0123456789ab.tmp"])
def test_a_users_entry_at_a_cell_files_temporary_name_is_not_the_cells(
    tmp_path: Path, name: str, kind: str
) -> None:
    """A directory (or link) at the name of cell.json's temporary copy is no cell's file cut
    short: it does not make the directory a cell's, nor is it removed with one."""
    victim = tmp_path / "mine"
    victim.mkdir()
    (victim / "thesis.tex").write_text("mine")
    d = tmp_path / "d"
    d.mkdir()
    (d / "log.txt").write_text("a bench's?")
    if kind == "dir":
        shutil.move(victim, d / name)
    else:
        (d / name).symlink_to(victim, target_is_directory=True)
    assert name in RunDir(d).foreign_entries()
    with pytest.raises(ConfigError, match="not removed"):
        RunDir(d).clear()
    assert (d / name / "thesis.tex").read_text() == "mine"
