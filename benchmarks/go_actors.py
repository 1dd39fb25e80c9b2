"""GO's decisions per second by number of actor processes: does adding actors speed training?

GO's actors sample a whole-graph decision from the exported policy and simulate it; the learner
runs PPO over batches of decisions. With ``--actors 0`` one process does both in turn (the sync
backend); with ``--actors N`` (the local backend) N actor processes sample and simulate while
the learner updates, one policy version behind at most. Per graph and actor count this trains
``--decisions`` decisions (placement, 4 PCIe GPUs, int8 actors, seed 0, no periodic evaluation)
and reports decisions per second of training (the run's wall time without its final
evaluation), and the speed-up over the sync backend.

On this 2-core machine the learner and two actors already share two cores, so the table says
how much of the learner's and the actors' work overlaps, not how far actors scale on a larger
machine; the same script there (``--actors 0 1 2 4 8``) measures that.

    .venv/bin/python benchmarks/go_actors.py                     # ~10 min on 2 idle cores
    .venv/bin/python benchmarks/go_actors.py --graphs gnmt-s --actors 0 1 --decisions 128
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import machine_info, num, read_metrics_csv, say, write_json_atomic


def cell(graph: str, actors: int, decisions: int, batch: int, lag: int) -> dict[str, Any]:
    from actorq.agents.go.config import GOConfig
    from actorq.experiment import train

    run = Path(tempfile.mkdtemp(prefix="go_actors-"))
    try:
        cfg = GOConfig(
            env=f"graphopt:placement/{graph}",
            actors=actors,
            total_steps=decisions,
            batch_graphs=batch,
            max_policy_lag=lag,
            precision="int8",  # the actors the committed results were made with
            eval_every=10 * decisions,  # none during the run: only the final one
            seed=0,
            run_dir=str(run / "run"),
            progress=False,
            energy=False,
            log_every=1.0,
        )
        t0 = time.perf_counter()
        r = train(cfg)
        total = time.perf_counter() - t0
        m = read_metrics_csv(run / "run" / "metrics.csv")
    finally:
        shutil.rmtree(run, ignore_errors=True)
    # steady state: decisions between the first and the last interval log (actor start-up and
    # the final evaluation left out)
    ups = [(s, w) for s, _, w in m.get("perf/learner_ups", []) if w is not None]
    steady = (ups[-1][0] - ups[0][0]) / (ups[-1][1] - ups[0][1]) if len(ups) > 2 else None
    waits = [v for _, v, _ in m.get("perf/learner_wait_frac", [])]
    return {
        "graph": graph,
        "actors": actors,
        "max_policy_lag": lag,
        "decisions": r.env_steps,
        "updates": r.updates,
        "wall_s": r.wall_time_s,
        "eval_s": r.eval_time_s,
        "total_s": total,
        "decisions_per_s": r.env_steps / max(r.wall_time_s - r.eval_time_s, 1e-9),
        "steady_decisions_per_s": steady,
        "learner_wait_frac": float(sum(waits) / len(waits)) if waits else None,
        "actor_restarts": r.actor_restarts,
    }


def report(rows: list[dict[str, Any]], command: str, machine: dict[str, Any]) -> str:
    lines = [
        "# GO: decisions per second by actor processes (placement, 4 PCIe GPUs, int8 actors)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores.",
        "",
        "Steady: decisions per second between the first and the last of the run's one-second "
        "logs (start-up left out); whole run: decisions over the run's wall time without the "
        "final evaluation; learner waiting: the share of the learner's time spent waiting for "
        "decisions (near 0: the learner is the bottleneck, more actors cannot help).",
        "",
        "| graph | actors | policy lag | decisions | learner updates | steady decisions/s "
        "| vs sync | whole run decisions/s | learner waiting |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    sync = {r["graph"]: r["steady_decisions_per_s"] for r in rows if r["actors"] == 0}

    for r in rows:
        base, st = sync.get(r["graph"]), r["steady_decisions_per_s"]
        vs = "-" if base is None or st is None else f"{st / base:.2f}x"
        lines.append(
            f"| {r['graph']} | {r['actors']} | {'-' if r['actors'] == 0 else r['max_policy_lag']} "
            f"| {r['decisions']:,} | {r['updates']} "
            f"| {num(st, '.1f')} | {vs} | {r['decisions_per_s']:.1f} "
            f"| {num(r['learner_wait_frac'], '.0%')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="+", default=["gnmt-s", "txl-m"])
    ap.add_argument("--actors", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--decisions", type=int, default=1536)
    ap.add_argument("--batch-graphs", type=int, default=32)
    ap.add_argument(
        "--max-policy-lag",
        type=int,
        nargs="+",
        default=[1, 2],
        help="1: synchronous PPO (actors collect with the newest policy, then wait for the "
        "learner); 2: actors collect one version ahead while the learner updates",
    )
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/go_actors"))
    args = ap.parse_args(argv)
    if min(args.actors) < 0 or args.decisions < 1:
        say("--actors must be >= 0 and --decisions >= 1")
        return 2
    command = "python benchmarks/go_actors.py " + " ".join(sys.argv[1:] if argv is None else argv)
    rows = []
    for graph in args.graphs:
        for lag in args.max_policy_lag:
            for n in args.actors:
                if n == 0 and lag != args.max_policy_lag[0]:
                    continue  # the sync backend has no lag: one row
                say(f"{graph}, {n} actors, lag {lag}: running")
                rows.append(cell(graph, n, args.decisions, args.batch_graphs, lag))
                say(f"{graph}, {n} actors: {rows[-1]['decisions_per_s']:.1f} decisions/s")
    machine = machine_info()
    text = report(rows, command, machine)
    write_json_atomic(args.out / "go_actors.json",
                      {"rows": rows, "command": command, "machine": machine})  # fmt: skip
    (args.out / "go_actors.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
