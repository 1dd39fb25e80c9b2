"""Output files are written whole, only where the user said, and never over something that is
not a regular file: a device node, a FIFO, another file through a symlink at a temporary name."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import pytest

from actorq.errors import ActorQError, GraphError
from actorq.output import check_output, write_output


def test_writes_whole_and_replaces_only_with_force(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    write_output(check_output(out, "--out"), "one", "--out")
    assert out.read_text() == "one"
    with pytest.raises(ActorQError, match="exists; pass --force"):
        check_output(out, "--out")
    write_output(check_output(out, "--out", force=True), b"two", "--out")
    assert out.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"]  # no temporary left


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_the_file_gets_the_users_permissions(tmp_path: Path, umask: int) -> None:
    out, usual = tmp_path / "o.bin", tmp_path / "usual"
    old = os.umask(umask)
    try:
        write_output(out, b"x", "--out")
        usual.write_bytes(b"x")  # what any new file gets here
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == usual.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "o.plc"
    out.write_text("old")

    def broken(f: BinaryIO) -> None:
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(GraphError, match=r"cannot write --out .*No space left on device"):
        write_output(out, broken, "--out", error=GraphError)
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.plc"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_non_regular_file_is_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for force in (False, True):
        with pytest.raises(ActorQError, match="not a regular file"):
            check_output(fifo, "--out", force=force)
    link = tmp_path / "null"
    link.symlink_to(os.devnull)  # a link to a device node counts as the node
    with pytest.raises(ActorQError, match="not a regular file"):
        check_output(link, "--out", force=True)
    assert fifo.exists() and Path(os.devnull).exists()


def test_a_symlink_at_the_old_temporary_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "policy.onnx"
    (tmp_path / "policy.onnx.tmp").symlink_to(victim)  # what export used to write through
    mine = tmp_path / "mine.tmp"
    mine.write_text("the user's")
    write_output(check_output(out, "--out"), b"model", "--out")
    assert out.read_bytes() == b"model"
    assert victim.read_text() == "keep me" and mine.read_text() == "the user's"
    assert (tmp_path / "policy.onnx.tmp").is_symlink()


@pytest.mark.parametrize(
    ("path", "message"),
    [("adir", "is a directory"), ("no/such/o.plc", "does not exist"), ("o.txt", "must end in")],
)
def test_bad_paths_are_one_line_before_any_work(tmp_path: Path, path: str, message: str) -> None:
    (tmp_path / "adir").mkdir()
    with pytest.raises(ActorQError, match=message) as e:
        check_output(tmp_path / path, "--out", suffixes=(".plc",))
    assert "\n" not in str(e.value)


def test_a_new_directory_named_with_a_trailing_slash_is_not_written_as_a_file(
    tmp_path: Path,
) -> None:
    with pytest.raises(ActorQError, match="is a directory; give a file name"):
        check_output(f"{tmp_path}/newdir/", "--out")
    assert not (tmp_path / "newdir").exists()


def test_a_directory_that_cannot_hold_a_new_file_is_one_line() -> None:
    """/proc: no file can be created there (root included); the error is the write's line."""
    out = check_output("/proc/policy.onnx", "--out")
    with pytest.raises(ActorQError, match=r"cannot write --out /proc/policy\.onnx: ") as e:
        write_output(out, b"x", "--out")
    assert "\n" not in str(e.value)


def test_open_append_takes_a_regular_file_and_nothing_else(tmp_path: Path) -> None:
    """A FIFO at a bench cell's log.txt hung the bench on resume (its open waited for a
    reader); a link at an actor's log would have been written through."""
    from actorq.output import open_append

    log = tmp_path / "log.txt"
    for line in (b"one\n", b"two\n"):
        with open_append(log) as f:
            f.write(line)
    assert log.read_bytes() == b"one\ntwo\n"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(log)
    for name in ("fifo", "link"):
        with pytest.raises(ActorQError, match=f"{name}: cannot append to it"):
            open_append(tmp_path / name)
    assert log.read_bytes() == b"one\ntwo\n"


def test_a_name_that_is_not_utf8_is_written(tmp_path: Path) -> None:
    """A name given in the filesystem's bytes (``--out $'\\xff.onnx'``): its temporary's name
    is cut in bytes, and a long one stays within a name's 255 bytes."""
    for raw in (b"\xff-policy.onnx", b"\xff" * 250 + b".onnx"):
        out = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/" + raw))
        write_output(check_output(out, "--out"), b"data", "--out")
        assert out.read_bytes() == b"data"
