"""Command-line parsing for every ``actorq`` command: tyro, with its errors as one line.

tyro reports a bad flag in a multi-line box and exits; every other input error of actorq is
one ``actorq: error: ...`` line and exit status 2. :func:`parse` keeps ``--help`` as tyro
prints it and turns a parse error into an :class:`~actorq.errors.ActorQError` with the box's
message line.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import sys
import textwrap
from collections.abc import Iterator, Sequence
from typing import TypeVar, cast

import tyro
from tyro.constructors import ConstructorRegistry, PrimitiveConstructorSpec, PrimitiveTypeInfo

from actorq.errors import ActorQError
from actorq.settings import whole_number

T = TypeVar("T")

# box-drawing characters, Unicode or the ASCII fallback rich uses on some terminals
_BOX = re.compile(r"^[\s│╭╰─┃|+\-]*(.*?)[\s│─╮╯┃|+\-]*$")


def parse(cls: type[T], args: Sequence[str], prog: str, default: T | None = None) -> T:
    """``cls`` from ``args``; ``default``: an instance whose values are the flags' defaults."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            _docstring_lines_joined(),
        ):
            result = cast(
                T, tyro.cli(cls, args=list(args), prog=prog, default=default, registry=_REGISTRY)
            )
    except SystemExit as e:
        sys.stdout.write(out.getvalue())
        if e.code in (0, None):  # --help
            sys.stderr.write(err.getvalue())
            raise
        msg = _message(err.getvalue(), positional_fields(cls))
        raise ActorQError(f"{msg} (see {prog} --help)") from None
    sys.stdout.write(out.getvalue())
    sys.stderr.write(err.getvalue())
    return result


_REGISTRY = ConstructorRegistry()


@_REGISTRY.primitive_rule
def _int_rule(info: PrimitiveTypeInfo) -> PrimitiveConstructorSpec[int] | None:
    """Every integer on the command line (a flag, a tuple's item, an optional one) also in
    scientific or decimal notation when it names a whole number: ``--total-steps 1e5``, as
    SB3 and CleanRL users write it. One rule for every command, not one per flag."""
    if info.type is not int:
        return None
    return PrimitiveConstructorSpec(
        nargs=1,
        metavar="INT",
        instance_from_str=lambda args: read_int(args[0]),
        is_instance=lambda x: isinstance(x, int) and not isinstance(x, bool),
        str_from_instance=lambda instance: [str(instance)],
    )


def read_int(text: str) -> int:
    """``text`` as an int: a decimal integer, or a float's spelling of a finite whole number
    (``1e5``, ``2.5e5``, ``1000.0``). A ValueError (tyro's parse error) otherwise."""
    try:
        return int(text)
    except ValueError as e:
        try:
            x = float(text)
        except ValueError:  # not a number at all: int()'s own message
            raise e from None
        n = whole_number(x)
        if n is None:
            what = "a whole number" if math.isfinite(x) else "a finite number"
            raise ValueError(f"{text!r} is not {what}") from None
        return n


@contextlib.contextmanager
def _docstring_lines_joined() -> Iterator[None]:
    """Each paragraph of a field's docstring as one in ``--help``. tyro joins a docstring's
    lines only where the next starts with a letter, and dedents after joining: every
    continuation line of an indented attribute docstring started a new help line, the help
    broken where the source is. Here lines join within a paragraph (a blank line ends one; a
    ``- `` line starts a list item), for tyro's helper wherever it calls it."""
    strings = getattr(tyro, "_strings", None)
    tyros = getattr(strings, "remove_single_line_breaks", None)
    if tyros is None:
        yield
        return
    strings.remove_single_line_breaks = join_paragraph_lines  # type: ignore[union-attr]
    try:
        yield
    finally:
        strings.remove_single_line_breaks = tyros  # type: ignore[union-attr]


def join_paragraph_lines(text: str) -> str:
    """``text``'s lines joined by spaces within each paragraph (lines after the first
    dedented, as a docstring's); blank lines kept as paragraph breaks, ``- `` items on lines."""
    first, _, rest = text.partition("\n")
    out = ""
    for line in [first, *textwrap.dedent(rest).splitlines()]:
        line = line.rstrip()
        if not line:
            out = out.rstrip(" ") + ("\n\n" if out and not out.endswith("\n\n") else "")
        elif out and not out.endswith("\n") and not line.lstrip().startswith(("- ", "* ")):
            out += " " + line.lstrip()
        else:
            out += ("\n" if out and not out.endswith("\n") else "") + line
    return out.strip()


def _message(text: str, positionals: Sequence[str] = ()) -> str:
    """tyro's box as one line: its message, the missing arguments by name, and the flags it
    suggests for an unknown one. ``positionals``: the command's positional arguments in order
    (tyro shows a missing one by its type only)."""
    lines = [m.group(1).strip() for m in map(_BOX.match, text.splitlines()) if m]
    content = [ln for ln in lines if ln and set(ln) - set("─-+|│ ")]
    if not content:
        return "invalid command-line arguments"
    main = content[1] if len(content) > 1 else content[0]  # content[0]: the box's title
    raw = [re.sub(r"^[│|]", "", ln) for ln in text.splitlines()]  # a box border, if drawn
    at = next((i for i, ln in enumerate(raw) if main in ln), len(raw))
    indent = len(raw[at]) - len(raw[at].lstrip()) if at < len(raw) else 0
    # a message wrapped at the terminal's width goes on at its indent, up to a rule or blank
    # line ("invalid choice ... Expected one of (...)"); a deeper line is an argument's entry
    while at + 1 < len(raw):
        m = _BOX.match(raw[at + 1])
        more = m.group(1).strip() if m else ""
        deeper = len(raw[at + 1]) - len(raw[at + 1].lstrip()) > indent
        if not more or deeper or not set(more) - set("─-+|│ ") or "For full helptext" in more:
            break
        main += more if more[0] in ".,;:)" else " " + more
        at += 1
    # under the message, one entry per argument, four spaces deeper: "--flag TYPE" or "TYPE"
    entries: list[str] = []
    suggested: list[str] = []
    after_hint = False
    for ln in raw[at + 1 :]:
        if "For full helptext" in ln:
            break
        if "Perhaps you meant:" in ln:
            after_hint = True
            continue
        m = re.match(rf"^ {{{indent + 4}}}(\S+)", ln)
        if m:
            (suggested if after_hint else entries).append(m.group(1))
    if main.startswith("Missing from"):
        # positionals fill left to right: the missing ones are the last ones
        k = sum(not e.startswith("--") for e in entries)
        pos = iter(list(positionals)[-k:] if k and len(positionals) >= k else [])
        names = [e if e.startswith("--") else next(pos, e).upper() for e in entries]
        if names:
            return f"missing {', '.join(names)}"
    # tyro lists an option's choices in a set's order, with 'None' for one that may be unset
    main = re.sub(
        r"Expected one of \(([^)]*)\)",
        lambda m: (
            "expected one of "
            + ", ".join(sorted({c.strip(" '") for c in m.group(1).split(",")} - {"None", ""}))
        ),
        main,
    )
    flags = list(dict.fromkeys(e for e in suggested if e.startswith("--")))
    if flags:
        return f"{main}; did you mean {' or '.join(flags[:3])}?"
    return main


def positional_fields(cls: type) -> list[str]:
    """Names of ``cls``'s fields marked ``tyro.conf.Positional``, in order."""
    import dataclasses
    import typing

    if not dataclasses.is_dataclass(cls):
        return []
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        meta = getattr(hints.get(f.name), "__metadata__", ())
        if any("Positional" in repr(m) for m in meta):
            out.append(f.name)
    return out
