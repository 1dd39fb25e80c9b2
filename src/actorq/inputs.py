"""Reading a file a user names: a regular file, read once, no further than a bound.

Every reader of an input file (bench specs, graph and cluster JSON, netlists and placements,
bench results, a run's ``config.json`` and ``summary.json``) reads through :func:`read_input`,
so what is not a regular file is one line before a byte is read: ``/dev/zero`` (it never ends:
a MemoryError after filling the memory), ``/dev/stdin`` or a FIFO (opening one waits for a
writer: a hang), a directory. A file larger than its bound (by default, a quarter of the memory
this process can still use: decoding and parsing hold several bytes per byte) is one line too,
and nothing past the bound is read even from a file that grows while it is read.

What is at a path a user names is asked through :func:`stat_path` (and :func:`is_file`,
:func:`is_dir`, :func:`exists`): Python 3.11's ``Path.is_file()``, ``is_dir()`` and ``exists()``
raise a bare OSError for a name longer than the filesystem takes (ENAMETOOLONG) or a directory
that may not be searched (EACCES), which is one line here too.

JSON a user can hand actorq (a run's files, a checkpoint's manifest, a snapshot's or a policy
file's metadata) is parsed through :func:`load_json`: besides what is not JSON, Python's parser
raises a bare ValueError for an integer of more than 4,300 digits and a RecursionError for
nesting deeper than its stack, and both are one line there.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from actorq.errors import ActorQError, first_line
from actorq.resources import available_memory, gib

#: What a reader may hold by default: this share of the memory available (module docstring).
MEMORY_SHARE = 4

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


#: What ``os.stat`` raises where nothing is at a path: pathlib's ``exists()`` says False for
#: these (a missing file, a file used as a directory, a symbolic link loop)
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


def stat_path(
    path: str | Path, where: str, error: type[ActorQError] = ActorQError
) -> os.stat_result | None:
    """``os.stat(path)``, or None where nothing is there (as pathlib's ``exists()`` says);
    one ``error`` line starting with ``where`` for any other failure (module docstring)."""
    try:
        return os.stat(path)
    except ValueError:  # an embedded NUL: no file has that name (pathlib: False)
        return None
    except OSError as e:
        if e.errno in _ABSENT:
            return None
        raise error(f"{where}: cannot read ({e.strerror or type(e).__name__})") from None


def is_file(path: str | Path, where: str, error: type[ActorQError] = ActorQError) -> bool:
    """``Path(path).is_file()``, with :func:`stat_path`'s one line for what it cannot tell."""
    st = stat_path(path, where, error)
    return st is not None and stat.S_ISREG(st.st_mode)


def is_dir(path: str | Path, where: str, error: type[ActorQError] = ActorQError) -> bool:
    """``Path(path).is_dir()``, with :func:`stat_path`'s one line for what it cannot tell."""
    st = stat_path(path, where, error)
    return st is not None and stat.S_ISDIR(st.st_mode)


def exists(path: str | Path, where: str, error: type[ActorQError] = ActorQError) -> bool:
    """``Path(path).exists()``, with :func:`stat_path`'s one line for what it cannot tell."""
    return stat_path(path, where, error) is not None


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 1 << 20 else gib(n)


def read_input(
    path: str | Path,
    where: str,
    error: type[ActorQError] = ActorQError,
    limit: int | None = None,
) -> bytes:
    """The bytes of the regular file ``path``; one ``error`` line starting with ``where`` for a
    file that cannot be opened, is not a regular file, or is larger than ``limit`` bytes
    (default: :data:`MEMORY_SHARE` of the memory available)."""
    try:
        if not stat.S_ISREG(mode := os.stat(path).st_mode):  # never opened (a tape rewinds)
            raise error(f"{where}: {_kind(mode)}, not a regular file; give a file")
        # O_NONBLOCK: were a FIFO swapped in since, its open returns at once (refused below)
        fd = os.open(Path(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise error(f"{where}: cannot read ({e.strerror or type(e).__name__})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise error(f"{where}: {_kind(st.st_mode)}, not a regular file; give a file")
    with os.fdopen(fd, "rb") as f:
        size = st.st_size
        if limit is None:
            have, bound = available_memory()
            limit, why = have // MEMORY_SHARE, f"a quarter of the {gib(have)} {bound}"
        else:
            why = "the most this file may be"
        if size > limit:
            raise error(f"{where}: {_size(size)}, more than {_size(limit)} ({why})")
        try:
            # what fstat said, and one byte more: a read allocates the whole size it is asked
            data = f.read(min(size, limit) + 1)
            while len(data) <= limit and (more := f.read(min(1 << 24, limit + 1 - len(data)))):
                data += more  # it grew since (a running bench's metrics.csv): on, to the bound
        except OSError as e:
            raise error(f"{where}: cannot read ({e.strerror or type(e).__name__})") from None
    if len(data) > limit:  # it grew while being read
        raise error(f"{where}: more than {_size(limit)} ({why})")
    return data


def load_json(data: str | bytes, where: str, error: type[ActorQError] = ActorQError) -> Any:
    """``json.loads(data)``; one ``error`` line starting with ``where`` for what is not JSON
    (or not UTF-8), an integer past Python's digit limit or nesting past its stack."""
    try:  # UTF-8 only: json.loads would take bytes in UTF-16 and UTF-32 too
        return json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except RecursionError:
        raise error(f"{where}: not valid JSON (nested too deeply)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{where}: not valid JSON ({first_line(e, 160)})") from None
    except ValueError:  # the parser's only other one: int()'s limit on digits
        digits = sys.get_int_max_str_digits()
        raise error(f"{where}: not valid JSON (a number of more than {digits:,} digits)") from None
