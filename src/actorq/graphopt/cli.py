"""``actorq graphopt``: the graph suite and the classical baselines from the command line.

    actorq graphopt list [--build]
    actorq graphopt baselines --graph rnnlm-s --cluster 4xgpu-pcie [--budget 100] [--json F]

Bad input (unknown graph or cluster, a broken graph or cluster file) raises
:class:`~actorq.errors.GraphError`, which ``actorq`` prints as one line, exiting with status 2.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actorq.cli_args import parse
from actorq.errors import GraphError
from actorq.graphopt.files import shown

if TYPE_CHECKING:
    from actorq.graphopt.ir import Graph


@dataclasses.dataclass
class ListArgs:
    """The built-in graph suite (sizes of graphs built before, or of all with --build)."""

    build: bool = False
    """Build (and cache) every graph to show its size; takes a few minutes the first time."""
    family: str | None = None
    """Only this family (inception, resnet, gnmt, transformer-xl, wavenet, rnnlm)."""


@dataclasses.dataclass
class BaselinesArgs:
    """Run the classical baselines on one graph and cluster: step time, memory, feasibility."""

    graph: str
    """Suite name (see `actorq graphopt list`), synthetic-<ops>-s<seed>, or a .json/.npz file."""
    cluster: str = "4xgpu-pcie"
    """Preset ({1,2,4,8}xgpu-{pcie,nvlink}) or a cluster .json file."""
    budget: int = 100
    """Simulator calls for each search baseline (random, anneal)."""
    seed: int = 0
    """Seed of METIS and the search baselines."""
    only: str | None = None
    """Comma-separated subset of baselines (default: all)."""
    json: str | None = None
    """Also write the rows to this JSON file."""


def cmd_list(a: ListArgs) -> int:
    from rich.console import Console
    from rich.table import Table

    from actorq.graphopt.suite import SUITE, SUITE_VERSION, cache_dir, get_graph

    if a.family is not None and a.family not in {e.family for e in SUITE.values()}:
        fams = sorted({e.family for e in SUITE.values()})
        raise GraphError(f"unknown family {a.family!r}; families: {', '.join(fams)}")
    t = Table(title="actorq graphopt suite (training steps: forward + backward + update)")
    for col in ("graph", "family", "ops", "edges", "GFLOP", "param state GiB", "configuration"):
        t.add_column(
            col, justify="right" if col in ("ops", "edges", "GFLOP", "param state GiB") else "left"
        )
    for name, e in SUITE.items():
        if a.family and e.family != a.family:
            continue
        path = cache_dir() / f"{name}-v{SUITE_VERSION}.npz"
        g = get_graph(name) if a.build else _cached(path)
        cells = (
            [f"{g.num_ops:,}", f"{g.num_edges:,}", f"{g.flops.sum() / 1e9:,.0f}",
             f"{g.param_bytes.sum() / 2**30:.2f}"]
            if g is not None
            else ["-"] * 4
        )  # fmt: skip
        t.add_row(name, e.family, *cells, e.note)
    Console(width=160).print(t)
    print("also: synthetic-<ops>-s<seed> (seeded layered DAG), or a graph .json/.npz file")
    if not a.build:
        print("('-': not built yet; `actorq graphopt list --build` builds and caches them all)")
    return 0


def _cached(path: Path) -> Graph | None:
    """A cached suite graph, or None if it is not built (or is corrupt: get_graph rebuilds it)."""
    from actorq.graphopt.ir import load_graph

    try:
        return load_graph(path) if path.is_file() else None
    except GraphError:
        return None


def baseline_rows(
    graph: str, cluster: str, budget: int, seed: int, only: str | None
) -> dict[str, Any]:
    """Run the baselines and return JSON-able rows (shared with the docs benchmark)."""
    from actorq.graphopt.baselines import NAMES, run_baselines
    from actorq.graphopt.cluster import get_cluster
    from actorq.graphopt.simulator import Simulator
    from actorq.graphopt.suite import get_graph

    if budget < 1:
        raise GraphError(f"--budget must be >= 1, got {budget}")
    if not 0 <= seed < 2**31:  # numpy's generators take no negative seed, METIS a C int
        raise GraphError(f"--seed must be in 0..{2**31 - 1}, got {seed}")
    names = NAMES if only is None else tuple(s.strip() for s in only.split(",") if s.strip())
    c = get_cluster(cluster)
    g = get_graph(graph)
    sim = Simulator(g, c)
    results = run_baselines(sim, names, budget=budget, seed=seed)
    single = next((b.result for b in results if b.name == "single"), None)
    ref = single.step_time if single is not None else None
    rows = []
    for b in results:
        r = b.result
        rows.append(
            {
                "baseline": b.name,
                "start": b.start,
                "step_time_s": r.step_time,
                # a graph of zero-cost ops on zero-overhead devices takes no time at all
                "vs_single": (ref / r.step_time) if ref and r.step_time > 0 else None,
                "feasible": r.feasible,
                "reason": r.reason,
                "peak_memory_gib": [float(x) / 2**30 for x in r.peak_memory],
                "comm_time_s": r.comm_time,
                "comm_gb": r.comm_bytes / 1e9,
                "utilization": [float(x) for x in r.utilization],
                "fusions": r.fusions_applied,
                "devices_used": len(set(b.decision.placement.tolist())),
                "decide_s": b.seconds,
            }
        )
    return {
        "graph": g.name,
        "ops": g.num_ops,
        "edges": g.num_edges,
        "cluster": c.name,
        "cluster_desc": c.describe(),
        "budget": budget,
        "seed": seed,
        "rows": rows,
    }


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:,.1f}" if ms >= 10 or ms == 0 else f"{ms:.3f}"


def _check_out_path(path: str) -> Path:
    """Where ``--json`` will go, checked before any work: a bad path fails in a second, not after
    the baselines have run."""
    p = Path(path)
    if p.is_dir():
        raise GraphError(f"--json {shown(p)} is a directory")
    if not p.parent.is_dir():
        raise GraphError(f"--json {shown(p)}: directory {shown(p.parent)} does not exist")
    return p


def _write_json(p: Path, data: Any) -> None:
    """Write all of ``data`` or nothing: through a temporary file renamed into place, so a failed
    write never leaves a truncated file; ``allow_nan=False`` so the file is always valid JSON."""
    tmp = p.with_name(p.name + ".tmp")
    try:
        text = json.dumps(data, indent=1, allow_nan=False)
        tmp.write_text(text)
        tmp.replace(p)
    except (OSError, ValueError) as e:
        tmp.unlink(missing_ok=True)
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
        raise GraphError(f"cannot write --json {shown(p)}: {why}") from None


def cmd_baselines(a: BaselinesArgs) -> int:
    from rich.console import Console
    from rich.table import Table

    out_path = _check_out_path(a.json) if a.json else None
    out = baseline_rows(a.graph, a.cluster, a.budget, a.seed, a.only)
    t = Table(title=f"{out['graph']} ({out['ops']:,} ops) on {out['cluster_desc']}")
    for col in ("baseline", "step ms", "speedup vs single", "max peak GiB", "feasible", "comm ms",
                "devices", "decide s"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("baseline", "feasible") else "right")
    feas = [r for r in out["rows"] if r["feasible"]]
    best = min(feas, key=lambda r: r["step_time_s"])["baseline"] if feas else None
    for r in out["rows"]:
        sp = f"{r['vs_single']:.2f}x" if r["vs_single"] else "-"
        t.add_row(
            f"[bold]{r['baseline']}[/bold]" if r["baseline"] == best else r["baseline"],
            _ms(r["step_time_s"]),
            sp,
            f"{max(r['peak_memory_gib']):.2f}",
            "yes" if r["feasible"] else "NO",
            _ms(r["comm_time_s"]),
            str(r["devices_used"]),
            f"{r['decide_s']:.2f}",
        )
    Console(width=140).print(t)
    for r in out["rows"]:
        if not r["feasible"]:
            print(f"  {r['baseline']}: infeasible: {r['reason']}")
    start = next((r["start"] for r in out["rows"] if r["baseline"] == best), "")
    print(f"best feasible: {best or 'none'}" + (f" (started from {start})" if start else ""))
    if out_path is not None:
        _write_json(out_path, out)
        print(f"wrote {out_path}")
    return 0


USAGE = """usage: actorq graphopt {list,baselines} ...

  actorq graphopt list [--build] [--family F]
  actorq graphopt baselines --graph NAME [--cluster 4xgpu-pcie] [--budget 100] [--json F]
"""


def main(argv: list[str]) -> int:
    """Entry from ``actorq graphopt ...``; GraphError propagates to ``actorq``'s handler."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    sub, rest = argv[0], argv[1:]
    if sub == "list":
        return cmd_list(parse(ListArgs, rest, "actorq graphopt list"))
    if sub == "baselines":
        return cmd_baselines(parse(BaselinesArgs, rest, "actorq graphopt baselines"))
    print(
        f"actorq: error: unknown graphopt command {sub!r}; expected list or baselines",
        file=sys.stderr,
    )
    return 2
