"""What GO's priority head loses by deciding priorities in a few levels (joint task).

GO's policy decides each op's scheduling priority as one of ``PRIORITY_LEVELS`` (8) levels, ties
broken by topological order (:func:`actorq.agents.go.inputs.priorities`); the imitation warm start
turns a baseline's priorities into those levels by equal-count buckets of their order
(:func:`actorq.agents.go.targets.priority_levels`). The fusing search baselines keep HEFT's
upward ranks exact. This script measures the cost of the buckets on the suite's six smallest
graphs (the transfer protocol's held-out graphs), joint task: for each number of levels and for
exact ranks, the step time of HEFT's placement with greedy fusion, of the fastest of the
imitation candidates (:data:`actorq.agents.go.targets.BEST_OF`, each with greedy fusion), and of
hill climbing (annealing's run moves at zero temperature, whole-graph greedy fusion after each
move, ``--budget`` simulator calls) from that fastest start.

    .venv/bin/python benchmarks/go_priority_levels.py --cluster 4xgpu-pcie --budget 1000

One JSON per graph under ``--results`` (skipped when present), then a Markdown table to stdout
and ``report.md``.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import graph_cells, graph_setup_problem, machine_info, say

GRAPHS = ("inception-s", "resnet-152", "gnmt-s", "txl-s", "wavenet-s", "rnnlm-s")
LEVELS = (8, 16, 32, 64, 256)


def graph_cell(graph: str, cluster: str, budget: int, seed: int) -> dict[str, Any]:
    from actorq.agents.go.inputs import priorities
    from actorq.agents.go.targets import BEST_OF, priority_levels
    from actorq.graphopt.baselines import (
        anchor_groups,
        greedy_fusion,
        penalized,
        run_baselines,
        run_move,
        upward_rank,
    )
    from actorq.graphopt.envs import GraphOptEnv

    env = GraphOptEnv(graph, "joint", cluster, mode="oneshot")
    sim, g = env.sim, env.graph
    ranks = upward_rank(sim)
    _, gi, _ = anchor_groups(sim)
    k, nd = int(gi.max()) + 1, sim.cluster.num_devices
    starts = {b.name: b.decision.placement for b in run_baselines(sim, BEST_OF, seed=seed)}

    def judge(p: np.ndarray, prio: np.ndarray) -> float:
        return penalized(sim, sim.run(p, prio, greedy_fusion(sim, p)))

    out: dict[str, Any] = {"graph": graph, "ops": g.num_ops, "rows": []}
    for levels in (*LEVELS, 0):  # 0: exact ranks
        prio = ranks if levels == 0 else priorities(priority_levels(ranks, levels), g, levels)
        t0 = time.perf_counter()
        times = {name: judge(p, prio) for name, p in starts.items()}
        best = min(times, key=lambda n: times[n])
        rng = np.random.default_rng(seed)
        cur, cur_s = starts[best], times[best]
        for _ in range(budget):
            cand = run_move(cur, gi, k, nd, rng)
            s = judge(cand, prio)
            if s <= cur_s:
                cur, cur_s = cand, s
        out["rows"].append({
            "levels": levels, "heft": times["heft"], "best": times[best], "best_name": best,
            "climb": cur_s, "seconds": time.perf_counter() - t0,
        })  # fmt: skip
        say(f"{graph}: {levels or 'exact'} levels, best {best} {1e3 * times[best]:.2f} ms, "
            f"climb {1e3 * cur_s:.2f} ms")  # fmt: skip
    return out


def report(cells: list[dict[str, Any]], command: str) -> str:
    cols = [*(f"{n} levels" for n in LEVELS), "exact"]
    lines = [
        "# GO's priority levels: what the buckets cost (joint task)",
        "",
        f"Command: `{command}`",
        "",
        "Step time (ms) per graph with priorities in N levels of HEFT's upward ranks (the policy's "
        "decoding) or exact; greedy fusion throughout. Rows: HEFT's placement; the fastest "
        "imitation candidate; hill climbing from it.",
        "",
        f"| graph | row | {' | '.join(cols)} |",
        "|---|---|" + "---:|" * len(cols),
    ]
    for c in cells:
        for key, label in (("heft", "HEFT"), ("best", "best start"), ("climb", "climb")):
            vals = [f"{1e3 * r[key]:.2f}" for r in c["rows"]]
            lines.append(f"| {c['graph']} | {label} | {' | '.join(vals)} |")
    for key, label in (("best", "best start"), ("climb", "climb")):
        ratios = []
        for i in range(len(cols)):
            ratios.append(math.exp(np.mean([math.log(c["rows"][i][key] / c["rows"][-1][key])
                                            for c in cells])))  # fmt: skip
        lines.append(f"| geomean / exact | {label} | {' | '.join(f'{r:.3f}x' for r in ratios)} |")
    m = machine_info()
    lines += ["", f"Machine: {m['cpu_model']} ({m['cores']} cores)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="4xgpu-pcie")
    ap.add_argument("--budget", type=int, default=1000, help="hill climbing's simulator calls")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--graphs", nargs="+", default=list(GRAPHS))
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/go_priority_levels"))
    a = ap.parse_args(argv)
    problem = graph_setup_problem(a.cluster, a.graphs)
    if a.budget < 0:
        problem = "--budget must be >= 0"
    if problem:
        say(problem)
        return 2
    argv_shown = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "benchmarks/go_priority_levels.py", *argv_shown])
    root = a.results / a.cluster
    cells = graph_cells(
        root, a.graphs, f"-b{a.budget}-s{a.seed}", command,
        lambda graph: graph_cell(graph, a.cluster, a.budget, a.seed),
    )  # fmt: skip
    text = report(cells, command)
    (root / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
