"""How fast can HEFT place a graph if every edge's cut cost is free to choose?

Why: HEFT with one cut cost for the whole graph (``heft-cut``: each cut input edge charged
``w`` times its mean transfer time, the fastest of five ``w``) is the strongest classical
placement on most suite graphs, and GO's zero-shot decision is no better than it on an unseen
family (docs/graphopt-transfer.md). A policy that outputs a cut cost per edge, decoded by
HEFT, is a transfer-friendly output (a cost, not a device label) and always yields a coherent
placement. Before building one, this measures its ceiling: the step time HEFT reaches when the
per-edge weights are searched on the graph itself (hill climbing over log-weights: a run of
consecutive in-edges in topological order scaled up or down, kept if HEFT's placement is not
slower: :func:`actorq.graphopt.baselines.heft_search`, which this probe led to), against the
uniform weights' best. It is an oracle (``--iters`` simulator calls on the graph, the uniform
sweep's five included), not something a zero-shot policy could do; a policy would have to
predict such weights.

Results: ``<out>/go_edge_weight_oracle.json`` and ``.md`` (the table is printed too); each
(graph, cluster) is a cell, kept when done (resumable).

    .venv/bin/python benchmarks/go_edge_weight_oracle.py       # ~4 min beside two other runs
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_transfer import FAMILIES, smallest
from peers import machine_info, say, write_json_atomic


def oracle_cell(graph: str, cluster: str, iters: int, seed: int) -> dict[str, Any]:
    """heft-search's step time at a tenth, a quarter and all of ``iters`` simulator calls (the
    same seed: each shorter search is the first part of the longer one), and heft-cut's."""
    from actorq.graphopt import Simulator, get_cluster
    from actorq.graphopt.baselines import CUT_WEIGHTS, heft, heft_search, penalized
    from actorq.graphopt.suite import get_graph

    t0 = time.time()
    sim = Simulator(get_graph(graph), get_cluster(cluster))

    def step_time(d: Any) -> float:
        return penalized(sim, sim.run(d.placement, d.priority))

    uniform = {f"{w:g}": step_time(heft(sim, cut=w)) for w in CUT_WEIGHTS}
    curve = {str(b): step_time(heft_search(sim, b, seed)) for b in (iters // 10, iters // 4, iters)}
    return {
        "graph": graph,
        "cluster": cluster,
        "ops": sim.graph.num_ops,
        "uniform": uniform,
        "heft_cut": min(uniform.values()),
        "oracle": curve,
        "iters": iters,
        "seed": seed,
        "seconds": time.time() - t0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clusters", nargs="+", default=["4xgpu-pcie", "8xgpu-nvlink"])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--iters", type=int, default=20000, help="simulator calls per graph")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    a = ap.parse_args()
    if a.iters < 10:
        say("--iters must be at least 10")
        return 2
    jpath = a.out / "go_edge_weight_oracle.json"
    cells = json.loads(jpath.read_text())["cells"] if jpath.is_file() else []
    for cluster in a.clusters:
        for fam in a.families:
            g = smallest(fam)
            if any(
                c["graph"] == g and c["cluster"] == cluster and c["iters"] == a.iters
                and c["seed"] == a.seed for c in cells
            ):  # fmt: skip
                continue
            cells.append(oracle_cell(g, cluster, a.iters, a.seed))
            say(f"{g}@{cluster}: {cells[-1]['seconds']:.0f} s")
            a.out.mkdir(parents=True, exist_ok=True)
            write_json_atomic(jpath, {"cells": cells, "machine": machine_info()})
    rows = [
        c for c in cells
        if c["cluster"] in a.clusters and c["iters"] == a.iters and c["seed"] == a.seed
        and any(c["graph"] == smallest(f) for f in a.families)
    ]  # fmt: skip
    marks = [str(a.iters // 10), str(a.iters // 4), str(a.iters)]
    command = ("python benchmarks/go_edge_weight_oracle.py " + shlex.join(sys.argv[1:])).strip()
    md = [
        "# HEFT with a searched cut cost per edge (an oracle)",
        "",
        f"Command: `{command}`",
        "",
        f"Step time in ms: heft-cut (the fastest uniform weight of five) and HEFT with per-edge "
        f"weights searched on the graph (hill climbing, seed {a.seed}) after "
        + " / ".join(f"{int(m):,}" for m in marks)
        + " simulator calls.",
        "",
        "| cluster | graph | ops | heft-cut | per-edge oracle | oracle / heft-cut |",
        "|---|---|---:|---:|---:|---:|",
    ]  # fmt: skip
    for c in rows:
        o = " / ".join(f"{1e3 * c['oracle'][m]:.1f}" for m in marks)
        md.append(
            f"| {c['cluster']} | {c['graph']} | {c['ops']:,} | {1e3 * c['heft_cut']:.1f} | {o} |"
            f" {c['oracle'][marks[-1]] / c['heft_cut']:.3f} |"
        )
    md += ["", f"Machine: {machine_info()['cpu_model']}."]
    (a.out / "go_edge_weight_oracle.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
