"""Issue 50's ``benchmarks/results/atari/summary.json``: the Atari rows of every results tree
the spec ran into, one list.

``benchmarks/specs/atari.toml`` runs for days, resumed across sessions; a results tree lost with
its machine (partial cells and all) is started again in a new one. Each tree's ``actorq report``
files are kept in a folder of their own under ``benchmarks/results/atari/`` (timings compare
only within one tree: one machine), and this script joins their ``summary.json`` rows, each
tagged with its tree. A tree's unfinished row for a cell that a later tree ran again (the
lost partial cell) is left out; finished rows are all kept, whichever tree they are in.

    python benchmarks/atari_summary.py [benchmarks/results/atari]

Trees are taken oldest first by the number their names start with (``2-epyc`` before
``10-...``): name them so.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

KEY = ("game", "agent", "framework", "precision", "seed")


def _age(tree: Path) -> int:
    """The number ``tree``'s name starts with: its place among the trees (as text, "10-x"
    sorted before "2-epyc" and took the later tree for the older)."""
    number = re.match(r"\d+", tree.name)
    if number is None:
        raise SystemExit(f"atari_summary: {tree}: name it <number>-<machine>, oldest 1")
    return int(number.group())


def joined_rows(root: Path) -> list[dict[str, Any]]:
    """Every tree's rows under ``root`` (folders holding a ``summary.json``), tagged with the
    tree's folder name, without an unfinished row that a later tree has a row for."""
    trees = sorted((p.parent for p in root.glob("*/summary.json")), key=lambda t: (_age(t), t.name))
    if not trees:
        raise SystemExit(f"atari_summary: no */summary.json under {root}")
    per_tree = []
    for tree in trees:
        rows = json.loads((tree / "summary.json").read_text())
        if not (isinstance(rows, list) and all(isinstance(r, dict) for r in rows)):
            raise SystemExit(f"atari_summary: {tree / 'summary.json'} is not a list of rows")
        per_tree.append([{**r, "results": tree.name} for r in rows])
    out = []
    for i, rows in enumerate(per_tree):
        later = {tuple(r.get(k) for k in KEY) for t in per_tree[i + 1 :] for r in t}
        out += [r for r in rows if r.get("finished") or tuple(r.get(k) for k in KEY) not in later]
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).parent / "results" / "atari"
    rows = joined_rows(root)
    path = root / "summary.json"
    path.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"{path}: {len(rows)} rows from {len({r['results'] for r in rows})} results trees")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
