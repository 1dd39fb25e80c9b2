"""Writing a user's output file (``--out``, ``--json``): checked before any work, written whole
or not at all, and never anything but a regular file in the place the user named.

* :func:`check_output` runs before the work: the path is not a directory, its directory
  exists, an existing file is replaced only with ``--force``, and something that is not a
  regular file (a device node such as ``/dev/null``, a FIFO, a socket) is never replaced.
* :func:`write_output` writes to a fresh temporary file beside the target (created exclusively,
  so it never follows a symlink someone left at a predictable name and never touches a file of
  the user's), flushes it to disk, renames it over the target and flushes the directory (the
  rename survives a power loss); a failure leaves the target as it was and removes the
  temporary file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from actorq.errors import ActorQError, shown

Content = bytes | str | Callable[[BinaryIO], None]


def _not_regular(p: Path) -> bool:
    """Whether ``p`` exists and is not a regular file (a symlink counts as what it points to;
    a dangling one as absent)."""
    try:
        return not stat.S_ISREG(p.stat().st_mode)
    except FileNotFoundError:
        return False
    except OSError:  # unreadable metadata: treat as something we must not replace
        return True


def check_output(
    path: str | Path,
    flag: str,
    *,
    force: bool = False,
    suffixes: tuple[str, ...] = (),
    error: type[ActorQError] = ActorQError,
    force_name: str = "--force",
) -> Path:
    """The checked output path of ``flag`` (e.g. ``"--out"``); one ``error`` line if it cannot
    be written as asked (an existing file: unless ``force``, which the message calls
    ``force_name``, e.g. the API's ``force=True``)."""
    p = Path(path)
    try:  # a name too long, a directory we may not look into: OSError from the looks below
        if p.is_dir() or str(path).endswith(("/", os.sep)):  # Path() drops a trailing slash
            raise error(f"{flag} {shown(path)} is a directory; give a file name")
        if not p.parent.is_dir():
            raise error(f"{flag} {shown(p)}: directory {shown(p.parent)} does not exist")
        if suffixes and p.suffix.lower() not in suffixes:
            raise error(f"{flag} {shown(p)} must end in {' or '.join(suffixes)}")
        if _not_regular(p):
            raise error(f"{flag} {shown(p)} exists and is not a regular file; not replacing it")
        if (p.exists() or p.is_symlink()) and not force:
            raise error(f"{flag} {shown(p)} exists; pass {force_name} to overwrite")
    except OSError as e:
        raise error(f"cannot write {flag} {shown(path)}: {e.strerror}") from None
    return p


def write_output(
    path: Path, content: Content, flag: str, *, error: type[ActorQError] = ActorQError
) -> None:
    """Write ``content`` (bytes, text, or a function writing to a binary file) to ``path``
    whole or not at all; call :func:`check_output` first. ``flag`` names the output in a
    message ("" for none: the path alone)."""
    what = f"{flag} {shown(path)}" if flag else shown(path)
    try:
        fd, tmp = _new_temp(path)
    except OSError as e:  # a directory we may not write in (or cannot: /proc)
        raise error(f"cannot write {what}: {e.strerror or type(e).__name__}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(content, str):
                f.write(content.encode("utf-8"))
            elif isinstance(content, bytes | bytearray | memoryview):
                f.write(content)
            else:
                content(f)
            f.flush()
            os.fsync(f.fileno())
        if _not_regular(path):  # appeared while we worked
            raise error(f"{what} is not a regular file; not replacing it")
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError):
            why = e.strerror or type(e).__name__
            raise error(f"cannot write {what}: {why}") from None
        raise
    fsync(path.parent)


def fsync(path: Path) -> None:
    """Flush a file's data (or a directory's entries: a rename in it) to disk; where the
    filesystem cannot (some network mounts refuse a directory's fsync) it keeps its own
    guarantees."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _new_temp(path: Path) -> tuple[int, Path]:
    """A new file beside ``path``, created exclusively, open for writing: ``(fd, its path)``.

    Created with mode 0666, which the kernel narrows by the umask (and the directory's default
    ACL) as for any new file, so the output gets the user's usual permissions; mkstemp's 0600
    would need a chmod, and reading the umask (``os.umask`` sets it) races other threads."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    # within a name's 255 bytes, however long the output's own (cut in the filesystem's bytes)
    stem = os.fsdecode(os.fsencode(path.name)[:200])
    for _ in range(100):
        tmp = path.parent / f".{stem}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # another writer's temporary: draw another name
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def open_append(path: Path, error: type[ActorQError] = ActorQError) -> BinaryIO:
    """``path`` opened to append bytes (created if absent: a log); one ``error`` line if it is
    not a regular file: a FIFO (whose open would wait for a reader: a hang), a device node, or
    a link (not followed: it would write wherever it points)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:  # ELOOP: a link; ENXIO: a FIFO nobody reads
        raise error(
            f"{shown(path)}: cannot append to it ({e.strerror or e}); move it away"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error(f"{shown(path)} is not a regular file; move it away")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")
