"""What GO's imitation warm start is asked to imitate: every candidate of ``--imitate best``
per graph, its step time and the devices it uses, and which one a margin picks.

``--imitate best`` imitates, per training graph, the fastest of the deterministic baselines in
:data:`actorq.agents.go.targets.BEST_OF`; with ``--imitate-margin M`` the candidate on the
fewest devices among those within ``1 + M`` of the fastest (:func:`actorq.agents.go.targets.
target`). Whether a family's graphs are split or kept on one device decides what a policy
pre-trained on them does with an unseen graph (docs/graphopt-transfer.md, "Simpler targets").
Default graphs: resnet's held-out cell of the transfer protocol with three seeded variants per
family (its 20 pre-training graphs) and resnet-152 itself. Placement task, judged with HEFT's
priorities (``--reference heft``, as the transfer runs).

    .venv/bin/python benchmarks/go_targets.py --cluster 8xgpu-nvlink --margins 0.05 0.2

One JSON per graph under ``--results/<cluster>/`` (skipped when present), then a Markdown table
to stdout and ``report.md``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_transfer import pretrain_graphs
from peers import graph_cells, graph_setup_problem, machine_info, say


def graph_cell(graph: str, cluster: str, reference: str, seed: int) -> dict[str, Any]:
    """Each candidate's penalised step time, feasibility and device count on ``graph``."""
    from actorq.agents.go.actor import GraphTask
    from actorq.agents.go.targets import BEST_OF, target

    task = GraphTask(graph, "placement", cluster, reference)
    cands = {}
    for name in BEST_OF:
        t = target(task, name, seed, relabel=False)  # judged as the task judges it
        cands[name] = {"time": t.time, "feasible": t.feasible,
                       "devices": len(np.unique(t.placement))}  # fmt: skip
    return {"graph": graph, "ops": task.num_ops, "candidates": cands}


def choice(cell: dict[str, Any], margin: float) -> str:
    """The candidate :func:`actorq.agents.go.targets.target` imitates with ``margin``."""
    from actorq.agents.go.targets import choose

    c = cell["candidates"]  # in BEST_OF's order
    names = list(c)
    i = choose([(c[n]["feasible"], c[n]["time"], c[n]["devices"]) for n in names], margin)
    return names[i]


def report(cells: list[dict[str, Any]], margins: list[float], command: str) -> str:
    lines = [
        "# What `--imitate best` imitates, with and without a margin",
        "",
        f"Command: `{command}`",
        "",
        "Per graph: the fastest candidate (step time in ms, [devices]), the single device's "
        "step time over it, and the candidate each margin picks (the fewest devices within "
        "1 + margin of the fastest).",
        "",
        "| graph | ops | fastest | one device / fastest | "
        + " | ".join(f"margin {m:g}" for m in margins)
        + " |",
        "|---|---:|---|---:|" + "---|" * len(margins),
    ]
    for cell in cells:
        c = cell["candidates"]
        best = choice(cell, 0.0)
        picks = []
        for m in margins:
            n = choice(cell, m)
            picks.append(f"{n} {1e3 * c[n]['time']:.1f} [{c[n]['devices']}]")
        lines.append(
            f"| {cell['graph']} | {cell['ops']} | {best} {1e3 * c[best]['time']:.1f} "
            f"[{c[best]['devices']}] | {c['single']['time'] / c[best]['time']:.3f} | "
            + " | ".join(picks)
            + " |"
        )
    m = machine_info()
    lines += ["", f"Machine: {m['cpu_model']} ({m['cores']} cores)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="8xgpu-nvlink")
    ap.add_argument("--reference", default="heft", help="whose priorities schedule a placement")
    ap.add_argument("--margins", nargs="+", type=float, default=[0.05, 0.2])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--graphs",
        nargs="+",
        default=[*pretrain_graphs("resnet", 0, 3), "resnet-152"],
        help="default: resnet's held-out cell with 3 variants per family, and resnet-152",
    )
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/go_targets"))
    a = ap.parse_args(argv)
    from actorq.graphopt.baselines import REFERENCES

    problem = graph_setup_problem(a.cluster, a.graphs)
    if not all(0 <= m <= 10 for m in a.margins):  # NaN fails too
        problem = "--margins must be between 0 and 10"
    if a.reference not in REFERENCES:
        problem = f"--reference must be one of {', '.join(REFERENCES)}"
    if problem:
        say(problem)
        return 2
    root = a.results / a.cluster
    argv_shown = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "benchmarks/go_targets.py", *argv_shown])

    def compute(graph: str) -> dict[str, Any]:
        cell = graph_cell(graph, a.cluster, a.reference, a.seed)
        say(f"{graph}: fastest {choice(cell, 0.0)}")
        return cell

    cells = graph_cells(root, a.graphs, f"-ref{a.reference}-s{a.seed}", command, compute)
    text = report(cells, a.margins, command)
    (root / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
