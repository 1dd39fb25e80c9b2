"""benchmarks/atari_summary.py joins the Atari rows of several results trees (one per machine
the spec ran on) into issue 50's summary.json, dropping a lost tree's partial row for a cell
that a later tree ran again."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "atari_summary.py"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("atari_summary", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(seed: int, finished: bool, framework: str = "actorq") -> dict[str, Any]:
    score = 19.0 if finished else None
    return {"game": "Pong", "agent": "ppo", "framework": framework, "precision": "int8",
            "seed": seed, "finished": finished, "final_score": score}  # fmt: skip


def _tree(root: Path, name: str, rows: list[dict[str, Any]]) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "summary.json").write_text(json.dumps(rows))


def test_rows_of_every_tree_are_joined_and_a_lost_partial_cell_is_left_out(
    tmp_path: Path,
) -> None:
    _tree(tmp_path, "1-xeon", [_row(0, True), _row(1, False), _row(0, False, "sb3")])
    _tree(tmp_path, "2-epyc", [_row(1, True), _row(2, False)])
    assert _module().main([str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "summary.json").read_text())
    got = [(r["framework"], r["seed"], r["finished"], r["results"]) for r in rows]
    assert got == [
        ("actorq", 0, True, "1-xeon"),
        ("sb3", 0, False, "1-xeon"),  # no later tree ran it: still where it stands
        ("actorq", 1, True, "2-epyc"),
        ("actorq", 2, False, "2-epyc"),
    ]


def test_a_tree_whose_summary_is_not_rows_is_refused(tmp_path: Path) -> None:
    _tree(tmp_path, "1-xeon", {"not": "rows"})  # type: ignore[arg-type]
    with pytest.raises(SystemExit, match="not a list of rows"):
        _module().main([str(tmp_path)])


def test_trees_are_taken_in_the_order_of_their_numbers(tmp_path: Path) -> None:
    """ "10-later" sorted before "2-epyc" as text: the later tree's finished row did not
    replace the earlier tree's partial one."""
    _tree(tmp_path, "2-epyc", [_row(1, False)])
    _tree(tmp_path, "10-later", [_row(1, True)])
    rows = _module().joined_rows(tmp_path)
    assert [(r["seed"], r["finished"], r["results"]) for r in rows] == [(1, True, "10-later")]
    _tree(tmp_path, "old", [_row(2, True)])
    with pytest.raises(SystemExit, match="number"):
        _module().joined_rows(tmp_path)
