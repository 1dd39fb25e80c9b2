"""HEFT with a cut cost against the five classical placements, and what it does to GO's lead.

What it measures
----------------
HEFT (Topcuoglu et al., IEEE TPDS 2002) places each op where it would finish earliest, counting
only the input that arrives last: the other transfers are free to it. The simulator queues
transfers on links and keeps every received tensor in memory, so a split HEFT finds faster on
paper is often slower. ``heft-cut`` (:func:`actorq.graphopt.baselines.heft_cut`) adds ``w``
times each cut input edge's mean transfer time to the choice and keeps the fastest of five
``w`` (0.5, 1, 2, 4, 8; five simulator calls).

1. The suite: for every suite graph of at most ``--max-ops`` ops and every cluster, the fastest
   of the five classical baselines GO's tables use (single device, expert split, METIS+cp,
   HEFT, m-ETF), HEFT, ``heft-cut`` and each weight alone, as a ratio to that fastest (below
   1: faster); geomeans per cluster, and on how many graphs ``heft-cut`` wins.
2. With ``--go FOLDER ...`` (placement folders of ``benchmarks/go_transfer.py``): per held-out
   graph, ``heft-cut`` beside the folder's cells (best of the five, hill climbing at
   fine-tuning's and from-scratch's calls, ``heft-search`` at fine-tuning's, GO fine-tuned and
   from scratch), and the geomean of GO fine-tuned against the best classical with and without
   ``heft-cut``, and with the searches at fine-tuning's calls added.

Results: ``<out>/graphopt_heft_cut.json`` and ``.md`` (the table is printed too).

    .venv/bin/python benchmarks/graphopt_heft_cut.py --go \\
        benchmarks/results/go_transfer/placement-4xgpu-pcie-refheft-imitate-best5-400-...
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_transfer import FAMILIES, placement_folder, smallest
from peers import machine_info, say, write_json_atomic

FIVE = ("single", "expert", "metis+cp", "heft", "m-etf")
CLUSTERS = ("2xgpu-pcie", "4xgpu-pcie", "8xgpu-pcie", "4xgpu-nvlink", "8xgpu-nvlink")


def heft_cut_time(graph: str, cluster: str) -> float:
    """heft-cut's penalised step time (s) on ``graph``."""
    from actorq.graphopt import Simulator, get_cluster
    from actorq.graphopt.baselines import heft_cut, penalized
    from actorq.graphopt.suite import get_graph

    sim = Simulator(get_graph(graph), get_cluster(cluster))
    d = heft_cut(sim)
    return penalized(sim, sim.run(d.placement, d.priority))


def judge_graph(graph: str, cluster: str) -> dict[str, Any]:
    """Penalised step times (s): the five, heft-cut and each cut weight alone."""
    from actorq.graphopt import Simulator, get_cluster
    from actorq.graphopt.baselines import CUT_WEIGHTS, heft, penalized, run_baselines
    from actorq.graphopt.suite import get_graph

    sim = Simulator(get_graph(graph), get_cluster(cluster))

    def time_of(d: Any) -> float:
        return penalized(sim, sim.run(d.placement, d.priority))

    five = {b.name: penalized(sim, b.result) for b in run_baselines(sim, FIVE)}
    weights = {f"{w:g}": time_of(heft(sim, cut=w)) for w in CUT_WEIGHTS}
    return {
        "graph": graph,
        "cluster": cluster,
        "ops": sim.graph.num_ops,
        "five": five,
        "heft_cut": min(weights.values()),  # heft_cut's pick: the fastest of these weights
        "weights": weights,
    }


def gm(x: list[float]) -> float:
    return float(np.exp(np.mean(np.log(x)))) if x else float("nan")


def suite_table(rows: list[dict[str, Any]], clusters: tuple[str, ...]) -> list[str]:
    weights = list(rows[0]["weights"]) if rows else []
    out = [
        "Step time / the fastest of the five classical placements (single, expert, METIS+cp, "
        "HEFT, m-ETF), geomean over the graphs; wins: graphs where heft-cut is faster than all "
        "five (by more than 0.1%):",
        "",
        "| cluster | graphs | HEFT | heft-cut | min(five, heft-cut) | wins | "
        + " | ".join(f"w {w}" for w in weights)
        + " |",
        "|---|---:|---:|---:|---:|---:|" + "---:|" * len(weights),
    ]
    for c in clusters:
        rs = [r for r in rows if r["cluster"] == c]
        if not rs:
            continue
        best = [min(r["five"].values()) for r in rs]
        cut = [r["heft_cut"] / b for r, b in zip(rs, best, strict=True)]
        cols = [
            gm([r["five"]["heft"] / b for r, b in zip(rs, best, strict=True)]),
            gm(cut),
            gm([min(1.0, x) for x in cut]),
        ]
        per_w = [gm([r["weights"][w] / b for r, b in zip(rs, best, strict=True)]) for w in weights]
        out.append(
            f"| {c} | {len(rs)} | "
            + " | ".join(f"{x:.3f}" for x in cols)
            + f" | {sum(x < 0.999 for x in cut)} | "
            + " | ".join(f"{x:.3f}" for x in per_w)
            + " |"
        )
    out += ["", "Per graph (ms): the fastest of the five (which), HEFT, heft-cut:", ""]
    out += ["| cluster | graph | ops | fastest of five | HEFT | heft-cut |",
            "|---|---|---:|---|---:|---:|"]  # fmt: skip
    for r in rows:
        name, t = min(r["five"].items(), key=lambda kv: kv[1])
        out.append(
            f"| {r['cluster']} | {r['graph']} | {r['ops']:,} | {1e3 * t:.1f} ({name}) | "
            f"{1e3 * r['five']['heft']:.1f} | {1e3 * r['heft_cut']:.1f} |"
        )
    return out


def go_rows(folder: Path, seed: int) -> list[dict[str, Any]] | None:
    """Per held-out graph: heft-cut beside the folder's seed cells (None: not a folder)."""
    found = placement_folder(folder)
    if found is None:
        return None
    _, cluster = found
    rows = []
    for fam in FAMILIES:
        cells = {}
        for stage in ("baselines", "finetune", "scratch"):
            p = folder / f"{fam}-{stage}-s{seed}.json"
            if p.is_file():
                cells[stage] = json.loads(p.read_text())
        if "baselines" not in cells or "finetune" not in cells:
            continue
        b = cells["baselines"]
        say(f"  {cluster} {smallest(fam)}")
        rows.append({
            "cluster": cluster,
            "graph": smallest(fam),
            "five": min(b[n]["time"] for n in FIVE if n in b),
            "heft_cut": heft_cut_time(smallest(fam), cluster),
            "climb_ft": b.get("climb_ft", {}).get("time"),
            "climb": b.get("climb", {}).get("time"),
            "search_ft": b.get("heft-search_ft", {}).get("time"),
            "finetuned": cells["finetune"]["time_int8"],
            "scratch": cells.get("scratch", {}).get("time_int8"),
        })  # fmt: skip
    return rows


def vs_searches(rs: list[dict[str, Any]], *keys: str) -> float:
    """Fine-tuned GO's geomean speedup over the best of the six classical placements and these
    searches at fine-tuning's calls (nan where a row lacks one: older cells have no
    heft-search)."""
    extra = [[r.get(k) for k in keys] for r in rs]
    if any(None in e for e in extra):
        return float("nan")
    best = [min(r["five"], r["heft_cut"], *e) for r, e in zip(rs, extra, strict=True)]
    return gm([b / r["finetuned"] for b, r in zip(best, rs, strict=True)])


def go_table(rows: list[dict[str, Any]]) -> list[str]:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{1e3 * v:.1f}"

    out = [
        "GO's held-out graphs (the folders' cells; heft-cut judged here), ms; climbing at "
        "fine-tuning's / from-scratch's simulator calls:",
        "",
        "| cluster | graph | best of five | heft-cut | climb | heft-search @ft | GO fine-tuned | "
        "GO from scratch |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['cluster']} | {r['graph']} | {ms(r['five'])} | {ms(r['heft_cut'])} | "
            f"{ms(r['climb_ft'])} / {ms(r['climb'])} | {ms(r.get('search_ft'))} | "
            f"{ms(r['finetuned'])} | {ms(r['scratch'])} |"
        )
    out += [
        "",
        "Fine-tuned GO against the best classical per graph, geomean speedup (+: GO faster):",
        "",
        "| cluster | graphs | vs best of five | vs best of five and heft-cut | "
        "vs the same and climbing at equal calls | and heft-search at equal calls |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in dict.fromkeys(r["cluster"] for r in rows):
        rs = [r for r in rows if r["cluster"] == c]
        five = gm([r["five"] / r["finetuned"] for r in rs])
        six = gm([min(r["five"], r["heft_cut"]) / r["finetuned"] for r in rs])

        eq, eq2 = vs_searches(rs, "climb_ft"), vs_searches(rs, "climb_ft", "search_ft")
        out.append(
            f"| {c} | {len(rs)} | {100 * (five - 1):+.1f}% | {100 * (six - 1):+.1f}% | "
            f"{100 * (eq - 1):+.1f}% | {100 * (eq2 - 1):+.1f}% |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clusters", default=",".join(CLUSTERS))
    p.add_argument("--max-ops", type=int, default=21000, help="suite graphs of at most this many")
    p.add_argument("--go", type=Path, nargs="*", default=[], help="go_transfer placement folders")
    p.add_argument("--seed", type=int, default=0, help="the --go folders' cells of this seed")
    p.add_argument("--no-suite", action="store_true", help="only the --go folders")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    a = p.parse_args(argv)
    from actorq.graphopt.cluster import get_cluster
    from actorq.graphopt.suite import get_graph, suite_names

    clusters = tuple(c for c in a.clusters.split(",") if c)
    try:
        for c in clusters:
            get_cluster(c)
    except Exception as e:  # one line, as the CLI says it
        say(f"--clusters: {e}")
        return 2
    if a.max_ops < 1:
        say("--max-ops must be >= 1")
        return 2
    suite: list[dict[str, Any]] = []
    if not a.no_suite:
        names = [n for n in suite_names() if n.split("-")[0] != "synthetic"]
        names = [n for n in names if get_graph(n).num_ops <= a.max_ops]
        for c in clusters:
            for n in names:
                say(f"{c} {n}")
                suite.append(judge_graph(n, c))
    go: list[dict[str, Any]] = []
    for f in a.go:
        rows = go_rows(f, a.seed)
        if rows is None:
            return 2
        go += rows
    meta = {
        "command": "python benchmarks/graphopt_heft_cut.py "
        + shlex.join([str(x) for x in (argv if argv is not None else sys.argv[1:])]),
        "machine": machine_info(),
    }
    lines = ["# HEFT with a cut cost", "", f"Command: `{meta['command']}`", ""]
    if suite:
        lines += [*suite_table(suite, clusters), ""]
    if go:
        lines += [*go_table(go), ""]
    lines.append(f"Machine: {meta['machine'].get('cpu_model', '?')}.")
    text = "\n".join(lines) + "\n"
    a.out.mkdir(parents=True, exist_ok=True)
    stem = ("graphopt_heft_cut" if suite else "graphopt_heft_cut_go") + (
        f"_s{a.seed}" if go and a.seed else ""
    )
    write_json_atomic(a.out / f"{stem}.json", {**meta, "suite": suite, "go": go})
    (a.out / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
