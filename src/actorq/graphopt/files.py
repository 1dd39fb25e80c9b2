"""The one place where graphopt turns a user's file into Python values, or into one GraphError line.

Graph files (:func:`actorq.graphopt.ir.load_graph`) and cluster files
(:func:`actorq.graphopt.cluster.load_cluster`) read JSON through :func:`read_json` (an ``.npz``
graph's header through :func:`parse_json`, its parser) and check every number with
:func:`number`, so the rules are the same everywhere:

* the file is UTF-8 JSON; ``NaN``/``Infinity`` (which Python's ``json`` accepts) and numbers that
  overflow a float (``1e400``) are rejected where they are parsed, so no non-finite value, in a
  cost or in free-form ``meta``, gets any further;
* a number is an ``int`` or ``float`` (never a ``bool``, never a numeric string) whose magnitude is
  at most :data:`LIMIT`; a rate or capacity is also at least ``1 / LIMIT``.

Every error names the file and says what is wrong on one line.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from actorq.errors import GraphError, short, shown
from actorq.inputs import read_input

__all__ = ["short", "shown"]  # re-exported: graphopt's readers import them from here

LIMIT = 1e30
"""Largest magnitude of any size, cost, rate or time in a graph or cluster. Far beyond any real
op (1e30 FLOPs) or machine, yet small enough that every time the simulator derives (a cost over a
rate >= 1 / LIMIT: at most 1e60 s), and every sum of those over millions of ops, stays finite in
float64; without it ``1e308`` FLOPs or a denormal FLOP/s reach the baselines as inf and NaN."""

_MAX_INT_DIGITS = 400
"""Integers are parsed only up to this many digits: Python refuses to convert more than 4,300
(a ValueError, not a JSON error), and anything past ~31 digits is out of range anyway."""


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; raise :class:`GraphError` naming the file for anything unreadable."""
    p = Path(path)
    where = shown(p)
    raw = read_input(p, where, GraphError)
    try:
        text = raw.decode("utf-8-sig")  # a leading BOM (some Windows editors add it) is harmless
    except UnicodeDecodeError as e:
        raise GraphError(f"{where}: not UTF-8 text (bad byte at offset {e.start})") from None
    return parse_json(text, where)


def parse_json(text: str, where: str) -> Any:
    """Parse JSON ``text`` by this module's rules (a file's, or the header an ``.npz`` graph
    holds, so both refuse the same values); one :class:`GraphError` starting with ``where``."""

    def bad_constant(s: str) -> Any:
        raise GraphError(f"{where}: {s} is not allowed (numbers must be finite)")

    def parse_float(s: str) -> float:
        v = float(s)
        if not math.isfinite(v):
            raise GraphError(f"{where}: number {short(s, 30)} is out of range")
        return v

    def parse_int(s: str) -> int:
        if len(s) > _MAX_INT_DIGITS:
            raise GraphError(f"{where}: integer with {len(s)} digits is out of range")
        return int(s)

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        # json keeps the last of two equal keys: a typo'd copy would silently win
        d: dict[str, Any] = {}
        for k, v in pairs:
            if k in d:
                raise GraphError(f"{where}: key {short(k)} appears twice in one object")
            d[k] = v
        return d

    try:
        value = json.loads(
            text,
            parse_constant=bad_constant,
            parse_float=parse_float,
            parse_int=parse_int,
            object_pairs_hook=no_duplicates,
        )
        check_unicode(value, where)
        return value
    except GraphError:  # from the hooks above; a ValueError too, so it must come first
        raise
    except ValueError as e:  # JSONDecodeError is one, so is int()'s digit limit
        msg = getattr(e, "msg", None) or str(e).splitlines()[0]
        line = getattr(e, "lineno", None)
        at = f" at line {line}" if line is not None else ""
        raise GraphError(f"{where}: not valid JSON ({msg}{at})") from None
    except RecursionError:
        raise GraphError(f"{where}: not valid JSON (nested too deeply)") from None


def check_unicode(value: Any, where: str) -> None:
    """Reject lone surrogates (JSON's ``"\\ud800"``, or numpy strings): Python holds them, but
    no UTF-8 terminal or file can, so a name with one crashes whatever prints or saves it."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        bad = short(e.object[e.start : e.end], 30)
        raise GraphError(
            f"{where}: text holds a lone surrogate {bad} (not valid Unicode)"
        ) from None
    except RecursionError:
        raise GraphError(f"{where}: nested too deeply") from None


def number(v: Any, where: str, field: str, *, positive: bool = False) -> float:
    """``v`` as a float if it is a number in ``[0, LIMIT]`` (``[1 / LIMIT, LIMIT]`` if
    ``positive``), else a GraphError ``"{where}: {field}=... (must be ...)"``; ``where`` locates
    the object, e.g. ``"c.json: devices[0]"``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise GraphError(f"{where}: {field} must be a number, got {short(v)}")
    try:
        f = float(v)
    except OverflowError:  # an int past float range: out of range like any other
        f = math.inf
    lo = 1 / LIMIT if positive else 0.0
    if not lo <= f <= LIMIT:  # also false for NaN
        raise GraphError(f"{where}: {field}={short(v, 30)} (must be between {lo:g} and {LIMIT:g})")
    return f


def index(v: Any, n: int, where: str, field: str) -> int:
    """``v`` as an index into ``n`` things (an int, not a bool or a float), else a GraphError."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise GraphError(f"{where}: {field} must be an index (an integer), got {short(v)}")
    if not 0 <= v < n:
        raise GraphError(f"{where}: {field}={short(v, 30)} does not exist (0..{n - 1})")
    return v


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Prefix a GraphError raised inside with the file's name, unless it already starts with it
    (errors about a graph's content name the graph, not the file it came from)."""
    where = shown(path)
    try:
        yield
    except GraphError as e:
        msg = str(e)
        if msg.startswith(f"{where}:"):
            raise
        raise GraphError(f"{where}: {msg}") from None
