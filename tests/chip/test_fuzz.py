"""Fuzzing the chip readers and the cost with hypothesis.

Random text, truncated real files and real files with lines mutated (values replaced by huge,
negative, non-finite or wrong-typed ones, lines dropped or duplicated): reading a netlist or a
``.plc``, applying the placement and evaluating and moving, either succeeds or raises a
:class:`NetlistError` (an :class:`ActorQError`) whose message is one line, never another
exception. RuntimeWarnings are errors: an overflow or 0/0 in the cost means a value got past
the readers that should not have.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorq.chip.cost import PlacementCost
from actorq.chip.netlist import (
    _parse_nodes,
    _parse_nodes_fast,
    netlist_dir,
    netlist_names,
    parse_netlist,
    read_text,
)
from actorq.chip.plc import parse_plc
from actorq.errors import ActorQError, NetlistError

# ~100 examples per test keep the file at a few seconds; ACTORQ_FUZZ_EXAMPLES=5000 for more.
# Derandomized (seeded from each test's name) so a failure reproduces on the next run.
EXAMPLES = int(os.environ.get("ACTORQ_FUZZ_EXAMPLES", "100"))
FAST = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NETLISTS = {
    n: (netlist_dir(n) / "netlist.pb.txt").read_text()
    for n in ("sample_clustered", "toy_macro_stdcell")
}
PLCS = {n: (netlist_dir(n) / "initial.plc").read_text() for n in NETLISTS}

NASTY = st.sampled_from(
    [
        "nan",
        "-inf",
        "inf",
        "1e400",
        "1e13",
        "-1",
        "0",
        "-0.0",
        "1e-300",
        "5e-324",
        '"x"',
        "''",
        "{",
        "}",
        ":",
        "",
        "N",
        "R90",
        "999999999999999999999999",
        "\ud800",
        "\x00",
        '"\\"',
        "MACRO",
        "macro_pin",
        "PORT",
        "STDCELL",
        "#",
    ]
)
TOKENS = st.one_of(NASTY, st.text(max_size=6))


@st.composite
def mutated(draw: st.DrawFn, text: str) -> str:
    """``text`` with 1-4 lines changed: a token replaced, the line dropped or duplicated, or a
    random line inserted."""
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["token", "token", "drop", "dup", "insert"]))
        if kind == "drop":
            del lines[i]
        elif kind == "dup":
            lines.insert(i, lines[i])
        elif kind == "insert":
            lines.insert(i, draw(st.text(max_size=20)))
        else:
            parts = lines[i].split(" ")
            j = draw(st.integers(0, len(parts) - 1))
            parts[j] = draw(TOKENS)
            lines[i] = " ".join(parts)
        if not lines:
            lines = [""]
    return "\n".join(lines)


def _evaluate(net_text: str, plc_text: str, seed: int) -> None:
    """Everything a user's files reach: parse both, apply, evaluate, move a few nodes."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        try:
            nl = parse_netlist(net_text, where="n.pb.txt")
            p = parse_plc(plc_text, where="p.plc")
            pc = PlacementCost.from_placement(nl, p)
            c = pc.costs()
            assert np.isfinite([c.wirelength, c.density_cost, c.congestion_cost]).all()
            rng = np.random.default_rng(seed)
            movable = nl.movable
            for _ in range(3):
                i = int(rng.choice(movable))
                pc.move(i, float(rng.uniform(-10, 600)), float(rng.uniform(-10, 600)))
            c = pc.costs()
            assert np.isfinite([c.wirelength, c.density_cost, c.congestion_cost]).all()
        except ActorQError as e:
            assert isinstance(e, NetlistError)
            msg = str(e)
            assert msg and "\n" not in msg and len(msg) < 400, msg


NAMES = st.sampled_from(sorted(NETLISTS))


@FAST
@given(NAMES, st.data(), st.integers(0, 2**31))
def test_mutated_netlists(name: str, data: st.DataObject, seed: int) -> None:
    _evaluate(data.draw(mutated(NETLISTS[name])), PLCS[name], seed)


@FAST
@given(NAMES, st.data(), st.integers(0, 2**31))
def test_mutated_plc_files(name: str, data: st.DataObject, seed: int) -> None:
    _evaluate(NETLISTS[name], data.draw(mutated(PLCS[name])), seed)


@FAST
@given(NAMES, st.floats(0, 1), st.floats(0, 1))
def test_truncated_files(name: str, a: float, b: float) -> None:
    net, plc = NETLISTS[name], PLCS[name]
    _evaluate(net[: int(a * len(net))], plc, 0)
    _evaluate(net, plc[: int(b * len(plc))], 0)


@FAST
@given(st.text(max_size=300), st.text(max_size=300))
def test_random_text(net: str, plc: str) -> None:
    _evaluate(net, plc, 0)
    _evaluate(NETLISTS["sample_clustered"], plc, 0)
    _evaluate(net, PLCS["sample_clustered"], 0)


def _fast_agrees_with_slow(text: str) -> None:
    """Where the fast tokenizer accepts a text, the line scanner must read the same nodes."""
    fast = _parse_nodes_fast(text)
    if fast is None:
        return
    slow = _parse_nodes(text, "t")
    assert [(n.name, n.line, n.inputs, n.attrs) for n in fast] == [
        (n.name, n.line, n.inputs, n.attrs) for n in slow
    ]


def test_fast_path_reads_every_shipped_netlist() -> None:
    for name in netlist_names():
        d = netlist_dir(name)
        f = d / "netlist.pb.txt"
        text = read_text(f if f.exists() else d / "netlist.pb.txt.gz")
        if name == "ariane133":
            text = text[:200_000]  # the line scanner takes seconds on all of it
            text = text[: text.rindex("\nnode {") + 1]
        assert _parse_nodes_fast(text) is not None, name
        _fast_agrees_with_slow(text)


@FAST
@given(NAMES, st.data())
def test_fast_path_agrees_with_line_scanner(name: str, data: st.DataObject) -> None:
    _fast_agrees_with_slow(data.draw(mutated(NETLISTS[name])))
