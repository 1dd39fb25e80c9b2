"""Put GO placement policy files judged by ``go_pretrained.py`` side by side, in groups of graphs.

Each arm is one ``go_pretrained.py`` results folder for one cluster (its ``judge-*.json`` cells,
made with the same ``--seed`` and ``--budget`` so the baselines agree, which is checked; and its
``train.json``). The groups: the suite's six smallest graphs (the shipped recipe's training
graphs), the six next-larger ones, and the other architectures' graphs (``--judge-extra`` /
``--train-extra`` cells) split by ``--hold-out``'s names; each group's numbers are marked with
how many of its graphs the arm trained on. Per group and arm, the geometric mean of GO's best
placement against the expert split and against the best baseline per graph, as
``go_pretrained.py``'s report computes them. Run::

    .venv/bin/python benchmarks/go_pretrained_compare.py \\
        --arms shipped=FOLDER_A imports=FOLDER_B --hold-out gpt2,bert --out FILE.md

It prints the table and writes it to ``--out`` with a ``.json`` beside it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from go_pretrained import FAMILIES, best_baseline, by_size, geomean, shared_baselines


def read_arm(folder: Path) -> dict[str, dict[str, Any]]:
    """Graph name (a suite name or an extra graph's file stem) -> its judge cell."""
    cells = {}
    for p in sorted(folder.glob("judge-*.json")):
        # judge-<suite name>.json, judge-extra-<file stem>.json (no suite name starts "extra-")
        cells[p.stem.removeprefix("judge-").removeprefix("extra-")] = json.loads(p.read_text())
    return cells


def baseline_times(cell: dict[str, Any]) -> dict[str, float | None]:
    return {b["baseline"]: b["step_time_s"] if b["feasible"] else None for b in cell["baselines"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", nargs="+", required=True, metavar="NAME=FOLDER")
    ap.add_argument(
        "--hold-out",
        default="",
        metavar="NAMES",
        help="comma-separated extra graphs (file stems): grouped apart from the other extras",
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    arms: dict[str, dict[str, dict[str, Any]]] = {}
    seen: dict[str, set[str]] = {}  # arm -> the graphs it trained on (suite names, file stems)
    for a in args.arms:
        name, sep, folder = a.partition("=")
        if not sep or not name or not Path(folder).is_dir():
            print(f"--arms {a!r}: want NAME=FOLDER with an existing folder", file=sys.stderr)
            return 2
        arms[name] = read_arm(Path(folder))
        train_json = Path(folder) / "train.json"
        if not train_json.is_file():
            print(f"--arms {a!r}: no train.json in {folder}", file=sys.stderr)
            return 2
        seen[name] = {Path(g).stem for g in json.loads(train_json.read_text())["graphs"]}
    first = next(iter(arms.values()))
    common = [g for g in first if all(g in cells for cells in arms.values())]
    trained = [by_size(f)[0] for f in FAMILIES]
    unseen = [by_size(f)[1] for f in FAMILIES]
    held = [n.strip() for n in args.hold_out.split(",") if n.strip()]
    extras = sorted(g for g in common if g not in trained + unseen)
    missing = [g for g in trained + unseen + held if g not in common]
    if missing:
        print(f"not judged in every arm: {', '.join(missing)}", file=sys.stderr)
        return 2
    groups = {
        "suite, smallest": trained,
        "suite, next-larger": unseen,
        "other architectures, not in --hold-out": [g for g in extras if g not in held],
        "other architectures, in --hold-out": held,
    }
    names = shared_baselines([c[g] for c in arms.values() for g in common])
    rows: list[dict[str, Any]] = []
    for group, graphs in groups.items():
        for g in graphs:
            base = baseline_times(first[g])
            for arm, cells in arms.items():
                if baseline_times(cells[g]) != base:
                    print(
                        f"{g}: arm {arm}'s baselines differ from the first arm's (another "
                        "--seed or --budget?)",
                        file=sys.stderr,
                    )
                    return 2
            best_name, best = best_baseline(first[g], names)
            row = {
                "graph": g,
                "group": group,
                "expert": base["expert"],
                "best_baseline": best,
                "best_baseline_name": best_name,
            }
            row.update({arm: cells[g]["best"]["score_s"] for arm, cells in arms.items()})
            rows.append(row)
    command = shlex.join(
        ["python", "benchmarks/go_pretrained_compare.py", *(sys.argv[1:] if argv is None else argv)]
    )
    lines = [
        f"Command: `{command}`",
        "",
        "| graph | group | expert | best baseline | " + " | ".join(f"GO {a}" for a in arms) + " |",
        "|---|---|---:|---:|" + "---:|" * len(arms),
    ]
    for r in rows:
        lines.append(
            f"| {r['graph']} | {r['group']} | {1e3 * r['expert']:.2f} | "
            f"{1e3 * r['best_baseline']:.2f} ({r['best_baseline_name']}) | "
            + " | ".join(f"{1e3 * r[a]:.2f}" for a in arms)
            + " |"
        )
    lines += [
        "",
        "| group | graphs | "
        + " | ".join(f"GO {a} vs expert | vs best baseline" for a in arms)
        + " |",
        "|---|---:|" + "---:|---:|" * len(arms),
    ]
    summary: dict[str, dict[str, dict[str, float]]] = {}

    def trained_mark(arm: str, graphs: list[str]) -> str:
        k = sum(g in seen[arm] for g in graphs)
        return "" if k == 0 else " (all)" if k == len(graphs) else f" ({k} of {len(graphs)})"

    for group, graphs in groups.items():
        if not graphs:
            continue
        rs = [r for r in rows if r["group"] == group]
        summary[group] = {
            a: {
                "vs_expert": geomean([r["expert"] / r[a] for r in rs]) - 1,
                "vs_best": geomean([r["best_baseline"] / r[a] for r in rs]) - 1,
            }
            for a in arms
        }
        lines.append(
            f"| {group} | {len(rs)} | "
            + " | ".join(
                f"{s['vs_expert']:+.1%} | {s['vs_best']:+.1%}{trained_mark(a, graphs)}"
                for a, s in summary[group].items()
            )
            + " |"
        )
    lines += [
        "",
        "Per group, how many of its graphs each arm trained on: (all), (k of n); none unmarked. "
        "Step times in ms (simulated); GO: the fastest of its greedy, guided and sampled "
        "placements; geomeans positive where GO is faster.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(
        json.dumps(
            {"arms": args.arms, "hold_out": held, "rows": rows, "summary": summary}, indent=1
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
