"""Classical placement baselines on the whole graph suite, on 2, 4 and 8 GPUs.

For every suite graph and cluster, the rows of ``actorq graphopt baselines`` (step time, peak
memory, feasibility within 16 GiB, decision time), reported as the speedup over the best single
device with infeasible cells marked, and each graph's winner. Resumable: cells in
``<out>/graphopt_baselines.json`` are kept (``--fresh`` redoes all).

    .venv/bin/python benchmarks/graphopt_baselines.py --graphs gnmt-s,txl-s --budget 5 \\
        --out /tmp/bench_smoke                                  # a smoke run
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _machine import command, machine_info, md_head
from actorq.cli.graphopt import baseline_rows
from actorq.graphopt.baselines import NAMES, SEARCH
from actorq.graphopt.suite import SUITE

CLUSTERS = ("2xgpu-pcie", "4xgpu-pcie", "8xgpu-pcie")


def winner(cell: dict[str, Any]) -> str | None:
    feas = [r for r in cell["rows"] if r["feasible"]]
    return min(feas, key=lambda r: r["step_time_s"])["baseline"] if feas else None


def origin(cell: dict[str, Any], name: str | None) -> str:
    """The winner with the baseline its placement came from (best+fuse, anneal)."""
    if name is None:
        return "none feasible"
    start = next(r.get("start", "") for r in cell["rows"] if r["baseline"] == name)
    return f"{name} (from {start})" if start else name


def write_md(path: Path, results: dict[str, Any]) -> None:
    lines = [
        *md_head("Classical baselines on the graph suite", results),
        f"- search budget: {results['budget']} simulator calls each ({', '.join(SEARCH)}), seed "
        f"{results['seed']}",
        "- cell: speedup over the best single device (its step time / the baseline's); "
        "`✗` = infeasible (some device over 16 GiB); **bold** = fastest feasible",
        "",
    ]
    cells = results["cells"]
    for cl in results["clusters"]:
        lines += [
            f"## {cl}",
            "", "| graph | ops | single ms | " + " | ".join(NAMES[1:]) + " | winner |",
            "|---|---|---|" + "---|" * len(NAMES),
        ]  # fmt: skip
        wins: Counter[str] = Counter()
        for g in results["graphs"]:
            cell = cells.get(f"{g}@{cl}")
            if cell is None:
                continue
            rows = {r["baseline"]: r for r in cell["rows"]}
            w = winner(cell)
            wins[origin(cell, w)] += 1
            single = rows["single"]
            tag = "" if single["feasible"] else " ✗"
            out = [g, f"{cell['ops']:,}", f"{single['step_time_s'] * 1e3:,.1f}{tag}"]
            for name in NAMES[1:]:
                r = rows[name]
                s = f"{r['vs_single']:.2f}x"
                out.append(f"**{s}**" if name == w else (s if r["feasible"] else f"✗ {s}"))
            out.append(origin(cell, w))
            lines.append("| " + " | ".join(out) + " |")
        lines += ["", "Wins: " + ", ".join(f"{k} {v}" for k, v in wins.most_common()), ""]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--graphs", default=",".join(SUITE), help="comma-separated graph names")
    ap.add_argument("--clusters", default=",".join(CLUSTERS))
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fresh", action="store_true", help="ignore earlier results")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    a = ap.parse_args(argv)
    graphs = [g for g in a.graphs.split(",") if g]
    clusters = [c for c in a.clusters.split(",") if c]
    a.out.mkdir(parents=True, exist_ok=True)
    jpath = a.out / "graphopt_baselines.json"
    cells: dict[str, Any] = {}
    if jpath.is_file() and not a.fresh:
        old = json.loads(jpath.read_text())
        if old.get("budget") == a.budget and old.get("seed") == a.seed:
            cells = old["cells"]
    results: dict[str, Any] = {
        "command": command("graphopt_baselines.py", argv), "machine": machine_info(),
        "budget": a.budget, "seed": a.seed, "graphs": graphs, "clusters": clusters, "cells": cells,
    }  # fmt: skip
    for g in graphs:
        for cl in clusters:
            key = f"{g}@{cl}"
            if key in cells:
                continue
            t = time.perf_counter()
            cells[key] = baseline_rows(g, cl, a.budget, a.seed, None)
            cells[key]["wall_s"] = time.perf_counter() - t
            print(f"{key}: winner {winner(cells[key])} ({cells[key]['wall_s']:.0f} s)", flush=True)
            jpath.write_text(json.dumps(results, indent=1) + "\n")  # resumable
    jpath.write_text(json.dumps(results, indent=1) + "\n")
    write_md(a.out / "graphopt_baselines.md", results)
    print(f"wrote {jpath} and graphopt_baselines.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
