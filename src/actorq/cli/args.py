"""Command-line parsing for every ``actorq`` command: tyro, with its errors as one line.

tyro reports a bad flag in a multi-line box and exits; every other input error of actorq is
one ``actorq: error: ...`` line and exit status 2. :func:`parse` keeps ``--help`` as tyro
prints it and turns a parse error into an :class:`~actorq.errors.ActorQError` with the box's
message line.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Sequence
from typing import TypeVar

import tyro

from actorq.errors import ActorQError

T = TypeVar("T")

# box-drawing characters, Unicode or the ASCII fallback rich uses on some terminals
_BOX = re.compile(r"^[\s│╭╰─┃|+\-]*(.*?)[\s│─╮╯┃|+\-]*$")


def parse(cls: type[T], args: Sequence[str], prog: str) -> T:
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            result: T = tyro.cli(cls, args=list(args), prog=prog)
    except SystemExit as e:
        sys.stdout.write(out.getvalue())
        if e.code in (0, None):  # --help
            sys.stderr.write(err.getvalue())
            raise
        raise ActorQError(f"{_message(err.getvalue())} (see {prog} --help)") from None
    sys.stdout.write(out.getvalue())
    sys.stderr.write(err.getvalue())
    return result


def _message(text: str) -> str:
    """The first line of content inside tyro's box (its title is the second-best)."""
    lines = [m.group(1).strip() for m in map(_BOX.match, text.splitlines()) if m]
    content = [ln for ln in lines if ln and set(ln) - set("─-+|│ ")]
    for ln in content[1:]:  # content[0] is the box's title ("Value error", ...)
        return ln
    return content[0] if content else "invalid command-line arguments"
