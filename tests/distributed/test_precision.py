"""Combining the actor nodes' precision choices (``--precision auto`` under Ray)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from actorq.distributed.precision import NodeChoice, report, vote


def _c(node: str, actors: int, precision: str) -> NodeChoice:
    return NodeChoice(node, f"host-{node}", actors, precision, f"table of {node}")


def test_the_precision_of_most_actors_wins() -> None:
    # two small int4 nodes do not outvote one node hosting most of the actors
    assert vote([_c("a", 6, "int8"), _c("b", 2, "int4"), _c("c", 2, "int4")]) == "int8"
    assert vote([_c("a", 3, "int8"), _c("b", 2, "int4"), _c("c", 2, "int4")]) == "int4"


def test_a_tie_goes_to_the_higher_precision() -> None:
    assert vote([_c("a", 2, "int4"), _c("b", 2, "fp32")]) == "fp32"
    assert vote([_c("a", 1, "int4"), _c("b", 1, "int8")]) == "int8"


def test_no_choices_is_an_error() -> None:
    with pytest.raises(ValueError, match="no node choices"):
        vote([])


def test_report_lists_every_node_and_the_vote() -> None:
    text = report([_c("a", 3, "int8"), _c("b", 1, "fp32")], "int8")
    first = text.splitlines()[0]
    assert "2 actor node(s): int8" in first
    assert "| a | host-a | 3 | int8 |" in text and "table of b" in text
