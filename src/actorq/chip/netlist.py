"""Reader for circuit-training netlists: protobuf text of a TensorFlow ``GraphDef``.

The format is the one Google's Circuit Training uses (google-research/circuit_training,
``docs/NETLIST_FORMAT.md``; Mirhoseini et al. 2021, "A graph placement methodology for fast chip
design", Nature 594). Each ``node { ... }`` block is one of:

* a **hard macro** (``type: MACRO`` or ``macro``; a memory block) with ``width``, ``height``,
  centre ``x``/``y`` and an ``orientation``;
* a **soft macro** (the same type, a name starting with ``Grp``): a cluster of standard cells;
* a **macro pin** (``MACRO_PIN`` / ``macro_pin``) with ``macro_name`` and ``x_offset``/``y_offset``
  from its macro's centre in the ``N`` orientation;
* a **port** (``PORT``) with ``x``/``y`` and a ``side``;
* a **standard cell** (``STDCELL``) with a size and a position;
* ``__metadata__``, whose attributes are kept as :attr:`Netlist.metadata` and which is not a node.

A net is implicit: a node's ``input`` fields list the nodes its output drives, so every node with
inputs drives one net (itself first, then its sinks), weighted by its ``weight`` attribute (default
1; a soft-macro pin's weight counts the wires it stands for).

:func:`parse_netlist` turns the text into flat numpy arrays (node kinds, positions, sizes, pin
offsets, the macro each pin belongs to, and nets as a CSR of node indices), which is what the
vectorised proxy cost in :mod:`actorq.chip.cost` needs. It is hand-written: a regex tokenizer
for the layout circuit-training writes (one attr block per match), falling back to a general line
scanner for anything else. The 11 MB Ariane netlist (813k lines, 19,888 nodes) parses in 0.25 s;
protobuf's ``text_format.Parse`` into TensorBoard's ``GraphDef`` takes 6.4 s on the same machine.
Anything it cannot read is a :class:`NetlistError` naming the file and line.
"""

from __future__ import annotations

import gc
import gzip
import io
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from actorq.errors import NetlistError, short, shown
from actorq.inputs import read_input
from actorq.resources import ResourceError, available_memory, gib

# node kinds (values of Netlist.kind)
HARD_MACRO = 0
SOFT_MACRO = 1
HARD_PIN = 2
SOFT_PIN = 3
PORT = 4
STDCELL = 5
KIND_NAMES = ("HARD_MACRO", "SOFT_MACRO", "HARD_MACRO_PIN", "SOFT_MACRO_PIN", "PORT", "STDCELL")

ORIENTATIONS = ("N", "FN", "S", "FS", "E", "FE", "W", "FW")
"""Macro orientations (LEF/DEF names). Their index is the code in :attr:`Netlist.orientation`."""

# A pin offset (dx, dy) given for N becomes (a*dx + b*dy, c*dx + d*dy) under each orientation:
# FN mirrors about the y axis, S rotates by 180 degrees, FS mirrors about the x axis, E/W rotate by
# -90/+90 degrees and FE/FW are their mirror images (circuit_training docs/image/macro_orientation).
ORIENT_MATRIX = np.array(
    [
        [1, 0, 0, 1],  # N
        [-1, 0, 0, 1],  # FN
        [-1, 0, 0, -1],  # S
        [1, 0, 0, -1],  # FS
        [0, 1, -1, 0],  # E
        [0, -1, -1, 0],  # FE
        [0, -1, 1, 0],  # W
        [0, 1, 1, 0],  # FW
    ],
    dtype=np.float64,
)

LIMIT = 1e12
"""Largest magnitude of a coordinate, size or weight, in microns: far past any die (a 1 m chip is
1e6 µm), small enough that sums of HPWL over millions of nets stay exact-ish and finite."""

_TYPES = {"MACRO": "macro", "MACRO_PIN": "pin", "PORT": "port", "STDCELL": "stdcell"}
_STR_FIELDS = ("placeholder", "s")
_NUM_FIELDS = ("f", "i")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# one protobuf text token: a string, `{`, `}`, `:` or a bare word/number
_TOKEN = re.compile(r'\s*("(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|[{}:]|[^\s{}:"\']+)')


@dataclass
class Netlist:
    """A netlist as flat arrays, indexed by node (file order, ``__metadata__`` left out, which is
    the ``node_index`` of ``.plc`` files).

    Positions are centres in microns. A hard-macro pin's position is its macro's centre plus its
    offset turned by the macro's orientation; the evaluator puts soft-macro pins at their
    cluster's centre (see :mod:`actorq.chip.cost`); ports and standard cells are their own pins.
    ``x``/``y``/``orientation`` are the netlist's initial placement; a
    :class:`actorq.chip.cost.PlacementCost` keeps its own copy to move.
    """

    name: str
    names: list[str]
    kind: np.ndarray  # int8, one of HARD_MACRO .. STDCELL
    x: np.ndarray  # float64 centre (macros, ports, cells); pins: as given, unused
    y: np.ndarray
    width: np.ndarray  # float64, 0 for pins and ports
    height: np.ndarray
    orientation: np.ndarray  # int8 index into ORIENTATIONS (N for everything but hard macros)
    parent: np.ndarray  # int64: a pin's macro; every other node: itself
    x_offset: np.ndarray  # float64 pin offset from the macro centre in orientation N
    y_offset: np.ndarray
    weight: np.ndarray  # float64 weight of the net a node drives (1 by default)
    side: list[str]  # a port's side ("" for others)
    net_driver: np.ndarray  # int64 node driving each net
    net_ptr: np.ndarray  # int64 CSR: net k's nodes are net_nodes[net_ptr[k]:net_ptr[k + 1]]
    net_nodes: np.ndarray  # int64, the driver first, then its sinks in file order
    metadata: dict[str, Any] = field(default_factory=dict)
    index: dict[str, int] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_nets(self) -> int:
        return len(self.net_driver)

    @property
    def net_weight(self) -> np.ndarray:
        return self.weight[self.net_driver]

    def indices(self, *kinds: int) -> np.ndarray:
        """Node indices of the given kinds, ascending."""
        return np.flatnonzero(np.isin(self.kind, kinds))

    @property
    def hard_macros(self) -> np.ndarray:
        return self.indices(HARD_MACRO)

    @property
    def soft_macros(self) -> np.ndarray:
        return self.indices(SOFT_MACRO)

    @property
    def movable(self) -> np.ndarray:
        """Nodes a placement gives a position to: macros, ports and standard cells."""
        return self.indices(HARD_MACRO, SOFT_MACRO, PORT, STDCELL)

    def counts(self) -> dict[str, int]:
        """Number of nodes of each kind, keyed by :data:`KIND_NAMES`."""
        c = np.bincount(self.kind, minlength=len(KIND_NAMES))
        return {k: int(n) for k, n in zip(KIND_NAMES, c, strict=True)}

    def area(self) -> float:
        """Total area of macros and standard cells (what circuit-training's ``get_area`` says)."""
        m = self.indices(HARD_MACRO, SOFT_MACRO, STDCELL)
        return float(np.sum(self.width[m] * self.height[m]))


# ---- reading --------------------------------------------------------------------------------


#: Peak bytes of memory per byte of netlist text while parsing (measured 4.2, with slack).
PARSE_BYTES_PER_BYTE = 6


def _too_big(where: str, size: str, have: int, bound: str) -> str:
    return (
        f"{where} {size} of text; parsing it needs about {PARSE_BYTES_PER_BYTE}x that in "
        f"memory and this machine has {gib(have)} {bound}"
    )


def read_text(path: str | Path) -> str:
    """A text file's contents, gunzipped if it ends in ``.gz`` (or starts with gzip's magic),
    or a :class:`NetlistError` naming the file."""
    p = Path(path)
    where = shown(p)
    # parsing holds ~4.2 bytes per byte of text at its peak (ariane133: 11 MB of text, 46 MB);
    # text that cannot be parsed in the memory here is refused before it is read or unpacked
    have, bound = available_memory()
    limit = have // PARSE_BYTES_PER_BYTE
    try:
        if p.stat().st_size > limit:
            raise ResourceError(_too_big(where, f"is {gib(p.stat().st_size)}", have, bound))
    except OSError as e:
        raise NetlistError(f"{where}: cannot read ({e.strerror or type(e).__name__})") from None
    raw = read_input(p, where, NetlistError, limit=limit)  # a regular file, read no further
    if raw[:2] == b"\x1f\x8b":
        try:  # at most limit + 1 bytes: a small file can unpack to gigabytes
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
                raw = f.read(limit + 1)
        except (OSError, EOFError, ValueError) as e:  # BadGzipFile is an OSError
            raise NetlistError(f"{where}: corrupt gzip data ({e})") from None
        if len(raw) > limit:
            raise ResourceError(_too_big(where, f"unpacks to over {gib(limit)}", have, bound))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise NetlistError(f"{where}: not UTF-8 text (bad byte at offset {e.start})") from None


def _unquote(tok: str, where: str, line: int) -> str:
    body = tok[1:-1]
    if "\\" in body:
        try:
            body = body.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError:
            raise NetlistError(f"{where}:{line}: bad escape in string {short(tok, 40)}") from None
    if not body.isprintable():
        raise NetlistError(f"{where}:{line}: string {short(tok, 40)} holds control characters")
    return body


def _number(tok: str, where: str, line: int) -> float:
    try:
        v = float(tok)
    except ValueError:
        raise NetlistError(f"{where}:{line}: {short(tok, 40)} is not a number") from None
    if not math.isfinite(v) or abs(v) > LIMIT:
        raise NetlistError(f"{where}:{line}: number {short(tok, 40)} is out of range (|x| <= 1e12)")
    return v


def _statements(text: str, where: str) -> Iterator[tuple[int, str, str | None]]:
    """Yield ``(line, name, value)``: ``value`` is the raw token after ``name:``, or ``None``
    for ``name {``; a closing brace is ``(line, "}", None)``.

    One-statement lines are split with string methods; any other line (``value { f: 1 }``,
    several fields on a line, a trailing comment) goes through a tokenizer.
    """
    for lineno, raw in enumerate(text.split("\n"), 1):
        s = raw.strip()
        if not s or s[0] == "#":
            continue
        if s == "}":
            yield lineno, "}", None
            continue
        if s[-1] == "{" and s.count("{") == 1 and '"' not in s and ":" not in s:
            yield lineno, s[:-1].rstrip(), None
            continue
        key, sep, val = s.partition(":")
        if sep and "{" not in s and "}" not in s and "#" not in s:
            yield lineno, key.rstrip(), val.strip()
            continue
        yield from _tokenized(s, lineno, where)


def _tokenized(s: str, lineno: int, where: str) -> Iterator[tuple[int, str, str | None]]:
    toks: list[str] = []
    pos = 0
    while pos < len(s):
        if s[pos:].lstrip().startswith("#"):
            break
        m = _TOKEN.match(s, pos)
        if m is None:
            if not s[pos:].strip():
                break
            raise NetlistError(f"{where}:{lineno}: cannot read {short(s[pos:].strip(), 40)}")
        toks.append(m.group(1))
        pos = m.end()
    i = 0
    while i < len(toks):
        t = toks[i]
        if t == "}":
            yield lineno, "}", None
            i += 1
        elif i + 1 < len(toks) and toks[i + 1] == "{":
            yield lineno, t, None
            i += 2
        elif i + 2 < len(toks) and toks[i + 1] == ":" and toks[i + 2] not in "{}:":
            yield lineno, t, toks[i + 2]
            i += 3
        elif i + 2 < len(toks) and toks[i + 1] == ":" and toks[i + 2] == "{":
            yield lineno, t, None  # `value: { ... }` is also valid protobuf text
            i += 3
        else:
            raise NetlistError(f"{where}:{lineno}: cannot read {short(s, 40)}")


@dataclass
class _Node:
    name: str
    line: int
    inputs: list[str] = field(default_factory=list)
    attrs: dict[str, float | str] = field(default_factory=dict)


def _parse_nodes(text: str, where: str) -> list[_Node]:
    """The ``node`` blocks of a GraphDef, checked for structure (not yet for meaning)."""
    nodes: list[_Node] = []
    node: _Node | None = None
    # depth: 0 top level, 1 in node, 2 in attr, 3 in value, 4+ inside something we skip
    depth = 0
    key: str | None = None
    value: float | str | None = None
    skip_depth = 0
    last = 0
    for line, name, val in _statements(text, where):
        last = line
        if skip_depth:  # inside a block we do not need (e.g. `list { ... }`, `versions { }`)
            if name == "}":
                skip_depth -= 1
            elif val is None:
                skip_depth += 1
            continue
        if name == "}":
            if depth == 0:
                raise NetlistError(f"{where}:{line}: '}}' without an open block")
            if depth == 1:
                assert node is not None
                if not node.name:
                    raise NetlistError(f"{where}:{node.line}: node without a name")
                nodes.append(node)
                node = None
            elif depth == 2:
                assert node is not None
                if key is None:
                    raise NetlistError(f"{where}:{line}: attr without a key")
                if value is not None:
                    node.attrs[key] = value
                key = None
                value = None
            depth -= 1
            continue
        if val is None:  # `name {`
            if depth == 0 and name == "node":
                node = _Node("", line)
            elif (depth == 1 and name == "attr") or (depth == 2 and name == "value"):
                pass
            elif depth == 0 and _IDENT.match(name):
                skip_depth = 1  # another top-level field of GraphDef (versions, library)
                continue
            elif depth == 3 and _IDENT.match(name):
                skip_depth = 1  # a list/tensor value: not used by the cost
                continue
            else:
                raise NetlistError(f"{where}:{line}: unexpected block {short(name, 40)}")
            depth += 1
            continue
        # `name: value`
        if depth == 1:
            assert node is not None
            if name == "name":
                node.name = _string(val, where, line)
            elif name == "input":
                node.inputs.append(_string(val, where, line))
            elif name in ("op", "device"):
                _string(val, where, line)
            else:
                raise NetlistError(f"{where}:{line}: unknown node field {short(name, 40)}")
        elif depth == 2 and name == "key":
            key = _string(val, where, line)
        elif depth == 3:
            if value is not None:
                raise NetlistError(f"{where}:{line}: attr value given twice")
            if name in _STR_FIELDS:
                value = _string(val, where, line)
            elif name in _NUM_FIELDS:
                value = _number(val, where, line)
            elif name == "b":
                if val not in ("true", "false"):
                    raise NetlistError(f"{where}:{line}: b must be true or false")
                value = 1.0 if val == "true" else 0.0
            else:
                raise NetlistError(f"{where}:{line}: unknown attr value field {short(name, 40)}")
        elif depth == 0 and _IDENT.match(name):
            pass  # another top-level scalar of GraphDef
        else:
            raise NetlistError(f"{where}:{line}: unexpected field {short(name, 40)}")
    if depth or skip_depth:
        raise NetlistError(f"{where}:{last}: file ends inside a block (truncated?)")
    return nodes


# The layout every circuit-training netlist uses, one whole attr block per match: the fast path
# tokenizes with this in C and falls back to the line scanner (which finds the precise error)
# at the first thing outside it.
_FAST = re.compile(
    r"""[ \t\r\n]*(?:
      (?P<node>node[ \t]*\{)
    | (?P<field>name|input):[ \t]*"(?P<fv>[^"\\\n]*)"
    | attr[ \t]*\{\s*key:[ \t]*"(?P<key>[^"\\\n]*)"\s*value[ \t]*\{\s*
        (?P<vt>placeholder|s|f|i):[ \t]*(?P<val>"[^"\\\n]*"|[^\s{}"\#]+)\s*\}\s*\}
    | (?P<close>\})
    | (?P<comment>\#[^\n]*)
    )""",
    re.X,
)


def _parse_nodes_fast(text: str) -> list[_Node] | None:
    """:func:`_parse_nodes` for files in circuit-training's own layout, about 4x faster; None
    as soon as anything is unusual (then the line scanner reads the file and words the error)."""
    nodes: list[_Node] = []
    node: _Node | None = None
    pos, end = 0, len(text)
    line, counted = 1, 0  # line number of `counted`, advanced lazily at each node start
    match = _FAST.match
    while True:
        m = match(text, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
        key = m["key"]
        if key is not None:
            if node is None:
                return None
            vt, val = m["vt"], m["val"]
            if vt == "f" or vt == "i":
                try:
                    v = float(val)
                except ValueError:
                    return None
                if not (abs(v) <= LIMIT):  # also false for NaN
                    return None
                node.attrs[key] = v
            else:
                if val[0] != '"' or not val.isprintable():
                    return None
                node.attrs[key] = val[1:-1]
            continue
        fv = m["fv"]
        if fv is not None:
            if node is None or not fv.isprintable():
                return None
            if m["field"] == "name":
                node.name = fv
            else:
                node.inputs.append(fv)
        elif m["node"] is not None:
            if node is not None:
                return None
            start = m.start("node")
            line += text.count("\n", counted, start)
            counted = start
            node = _Node("", line)
        elif m["close"] is not None:
            if node is None or not node.name:
                return None
            nodes.append(node)
            node = None
    if node is not None or text[pos:end].strip():
        return None
    return nodes


def _string(tok: str, where: str, line: int) -> str:
    if len(tok) >= 2 and tok[0] == tok[-1] and tok[0] in "\"'":
        return _unquote(tok, where, line)
    raise NetlistError(f"{where}:{line}: expected a quoted string, got {short(tok, 40)}")


def parse_netlist(text: str, name: str = "netlist", where: str | None = None) -> Netlist:
    """Parse netlist text into a :class:`Netlist`; ``where`` names the source in errors."""
    where = where or name
    meta, real, index = _split_nodes(_read_nodes(text, where), where)
    cols = _node_columns(real, index, where)
    drivers, ptr, members = _nets(real, cols["kind"], index, where)
    return Netlist(
        name=name,
        names=[nd.name for nd in real],
        kind=cols["kind"],
        x=cols["x"],
        y=cols["y"],
        width=cols["width"],
        height=cols["height"],
        orientation=cols["orientation"],
        parent=cols["parent"],
        x_offset=cols["x_offset"],
        y_offset=cols["y_offset"],
        weight=cols["weight"],
        side=cols["side"],
        net_driver=np.asarray(drivers, np.int64),
        net_ptr=np.asarray(ptr, np.int64),
        net_nodes=np.asarray(members, np.int64),
        metadata=meta,
        index=index,
    )


def _read_nodes(text: str, where: str) -> list[_Node]:
    """The file's nodes: the fast tokenizer, or the line scanner where it gives up."""
    # ~100k long-lived dicts and lists: the cyclic collector would rescan them all many times
    # over (seconds on a loaded machine) and can free nothing, since the parse makes no cycles
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        nodes = _parse_nodes_fast(text)
        return _parse_nodes(text, where) if nodes is None else nodes
    finally:
        if was_enabled:
            gc.enable()


def _split_nodes(
    nodes: list[_Node], where: str
) -> tuple[dict[str, Any], list[_Node], dict[str, int]]:
    """``(metadata, the real nodes, name -> index)``; no nodes or a name twice is an error."""
    meta: dict[str, Any] = {}
    real: list[_Node] = []
    for nd in nodes:
        if nd.name == "__metadata__":
            meta.update(nd.attrs)
        else:
            real.append(nd)
    if not real:
        raise NetlistError(f"{where}: no nodes (not a circuit-training netlist?)")
    index: dict[str, int] = {}
    for i, nd in enumerate(real):
        if nd.name in index:
            raise NetlistError(f"{where}:{nd.line}: node {short(nd.name, 40)} defined twice")
        index[nd.name] = i
    return meta, real, index


def _num(nd: _Node, k: str, where: str, default: float | None = None) -> float:
    v = nd.attrs.get(k, default)
    if v is None:
        raise NetlistError(f"{where}:{nd.line}: node {short(nd.name, 40)} has no {k}")
    if isinstance(v, str):
        raise NetlistError(f"{where}:{nd.line}: node {short(nd.name, 40)}: {k} must be a number")
    return v


def _text(nd: _Node, k: str, where: str, default: str | None = None) -> str:
    v = nd.attrs.get(k, default)
    if not isinstance(v, str):
        what = "has no" if v is None else "needs a text"
        raise NetlistError(f"{where}:{nd.line}: node {short(nd.name, 40)} {what} {k}")
    return v


def _node_columns(real: list[_Node], index: dict[str, int], where: str) -> dict[str, Any]:
    """Per-node columns of :class:`Netlist` (kind, position, size, orientation, pin parent and
    offset, weight, port side), each node's attributes checked."""
    n = len(real)
    kind = np.empty(n, np.int8)
    x, y, width, height = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    orient = np.zeros(n, np.int8)
    parent = np.arange(n, dtype=np.int64)
    x_off, y_off = np.zeros(n), np.zeros(n)
    weight = np.ones(n)
    side = [""] * n
    pins: list[int] = []
    for i, nd in enumerate(real):
        t = _text(nd, "type", where).upper()
        what = _TYPES.get(t)
        if what is None:
            raise NetlistError(f"{where}:{nd.line}: node {short(nd.name, 40)}: unknown type {t!r}")
        w = _num(nd, "weight", where, 1.0)
        if w < 0:
            raise NetlistError(f"{where}:{nd.line}: node {short(nd.name, 40)}: negative weight")
        weight[i] = w
        if what == "pin":
            kind[i] = HARD_PIN  # HARD or SOFT once the macro is known
            x_off[i] = _num(nd, "x_offset", where, 0.0)
            y_off[i] = _num(nd, "y_offset", where, 0.0)
            pins.append(i)
            continue
        x[i] = _num(nd, "x", where, 0.0)
        y[i] = _num(nd, "y", where, 0.0)
        if what == "port":
            kind[i] = PORT
            side[i] = _text(nd, "side", where, "")
            continue
        width[i] = _num(nd, "width", where)
        height[i] = _num(nd, "height", where)
        if width[i] < 0 or height[i] < 0:
            raise NetlistError(f"{where}:{nd.line}: node {short(nd.name, 40)}: negative size")
        if what == "stdcell":
            kind[i] = STDCELL
            continue
        # circuit-training tells standard-cell clusters from memories by name (NETLIST_FORMAT.md)
        kind[i] = SOFT_MACRO if nd.name.startswith("Grp") else HARD_MACRO
        o = _text(nd, "orientation", where, "N")
        if o not in ORIENTATIONS:
            raise NetlistError(
                f"{where}:{nd.line}: node {short(nd.name, 40)}: orientation {short(o, 40)} "
                f"is not one of {', '.join(ORIENTATIONS)}"
            )
        orient[i] = ORIENTATIONS.index(o) if kind[i] == HARD_MACRO else 0

    for i in pins:
        nd = real[i]
        m = index.get(_text(nd, "macro_name", where), -1)
        if m < 0 or kind[m] not in (HARD_MACRO, SOFT_MACRO):
            raise NetlistError(
                f"{where}:{nd.line}: pin {short(nd.name, 40)}: macro_name "
                f"{short(str(nd.attrs['macro_name']), 40)} is not a macro in this netlist"
            )
        parent[i] = m
        if kind[m] == SOFT_MACRO:
            kind[i] = SOFT_PIN
    return {
        "kind": kind, "x": x, "y": y, "width": width, "height": height,
        "orientation": orient, "parent": parent, "x_offset": x_off, "y_offset": y_off,
        "weight": weight, "side": side,
    }  # fmt: skip


def _nets(
    real: list[_Node], kind: np.ndarray, index: dict[str, int], where: str
) -> tuple[list[int], list[int], list[int]]:
    """``(drivers, ptr, members)``: one net per node with inputs (CSR: net k's nodes are
    ``members[ptr[k]:ptr[k + 1]]``, its driver first); macros drive nothing."""
    drivers: list[int] = []
    ptr = [0]
    members: list[int] = []
    for i, nd in enumerate(real):
        if not nd.inputs:
            continue
        if kind[i] in (HARD_MACRO, SOFT_MACRO):
            raise NetlistError(
                f"{where}:{nd.line}: macro {short(nd.name, 40)} has inputs (only pins, ports and "
                "standard cells drive nets)"
            )
        drivers.append(i)
        members.append(i)
        for s in nd.inputs:
            j = index.get(s, -1)
            if j < 0:
                raise NetlistError(
                    f"{where}:{nd.line}: node {short(nd.name, 40)}: "
                    f"input {short(s, 40)} is not a node"
                )
            members.append(j)
        ptr.append(len(members))
    return drivers, ptr, members


def load_netlist(path: str | Path, name: str | None = None) -> Netlist:
    """Read a netlist file (plain or ``.gz``)."""
    p = Path(path)
    nm = name or (p.parent.name if p.name.startswith("netlist") else p.name.split(".")[0])
    return parse_netlist(read_text(p), name=nm, where=shown(p))


# ---- the netlists shipped with actorq ----------------------------------------------------------

_DATA = "netlists"


def netlist_names() -> list[str]:
    """Names of the netlists shipped in ``actorq.chip`` (each with its license file)."""
    root = resources.files("actorq.chip") / _DATA
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))


def netlist_dir(name: str) -> Path:
    """The folder of a shipped netlist (``netlist.pb.txt[.gz]``, ``initial.plc``, license)."""
    names = netlist_names()
    if name not in names:
        raise NetlistError(f"unknown netlist {short(name, 40)} (known: {', '.join(names)})")
    return Path(str(resources.files("actorq.chip") / _DATA / name))


def get_netlist(name: str) -> Netlist:
    """A shipped netlist by name, e.g. ``get_netlist("ariane133")``."""
    d = netlist_dir(name)
    f = d / "netlist.pb.txt"
    return load_netlist(f if f.exists() else d / "netlist.pb.txt.gz", name=name)


# ---- writing --------------------------------------------------------------------------------


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _attr(out: list[str], key: str, value: float | str) -> None:
    v = f"placeholder: {_q(value)}" if isinstance(value, str) else f"f: {value!r}"
    out += ["  attr {", f"    key: {_q(key)}", "    value {", f"      {v}", "    }", "  }"]


def format_netlist(netlist: Netlist) -> str:
    """Protobuf text for ``netlist`` in circuit-training's layout; :func:`parse_netlist` reads
    it back to the same arrays. Positions are the netlist's own ``x``/``y``."""
    nl = netlist
    inputs: list[list[str]] = [[] for _ in range(nl.num_nodes)]
    for k, d in enumerate(nl.net_driver.tolist()):
        members = nl.net_nodes[nl.net_ptr[k] + 1 : nl.net_ptr[k + 1]]
        inputs[d] = [nl.names[j] for j in members.tolist()]
    out: list[str] = []
    if nl.metadata:
        out += ["node {", '  name: "__metadata__"']
        for key, v in nl.metadata.items():
            _attr(out, key, v)
        out.append("}")
    for i, name in enumerate(nl.names):
        out += ["node {", f"  name: {_q(name)}"]
        out += [f"  input: {_q(s)}" for s in inputs[i]]
        kd = int(nl.kind[i])
        if kd in (HARD_PIN, SOFT_PIN):
            _attr(out, "macro_name", nl.names[nl.parent[i]])
            _attr(out, "type", "MACRO_PIN" if kd == HARD_PIN else "macro_pin")
            _attr(out, "x_offset", float(nl.x_offset[i]))
            _attr(out, "y_offset", float(nl.y_offset[i]))
        else:
            typ = {HARD_MACRO: "MACRO", SOFT_MACRO: "macro", PORT: "PORT", STDCELL: "STDCELL"}
            _attr(out, "type", typ[kd])
            if kd in (HARD_MACRO, SOFT_MACRO, STDCELL):
                _attr(out, "width", float(nl.width[i]))
                _attr(out, "height", float(nl.height[i]))
            if kd == HARD_MACRO:
                _attr(out, "orientation", ORIENTATIONS[nl.orientation[i]])
            if kd == PORT and nl.side[i]:
                _attr(out, "side", nl.side[i])
            _attr(out, "x", float(nl.x[i]))
            _attr(out, "y", float(nl.y[i]))
        if nl.weight[i] != 1.0:
            _attr(out, "weight", float(nl.weight[i]))
        out.append("}")
    return "\n".join(out) + "\n"
