"""``actorq graphopt``: the graph suite and the classical baselines from the command line.

    actorq graphopt list [--build]
    actorq graphopt baselines --graph rnnlm-s --cluster 4xgpu-pcie [--budget 100] [--json F]
    actorq graphopt place --graph rnnlm-s --cluster 4xgpu-pcie [--policy RUN] [--out p.json]
    actorq graphopt train ...   (``actorq train go``: GO's policy, resumable)

Bad input (unknown graph or cluster, a broken graph or cluster file) raises
:class:`~actorq.errors.GraphError`, which ``actorq`` prints as one line, exiting with status 2.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actorq.cli.args import parse
from actorq.errors import ActorQError, GraphError, first_line, short, shown
from actorq.inputs import is_dir
from actorq.output import check_output, write_output
from actorq.quant.onnx import ONNX_PRECISIONS

if TYPE_CHECKING:
    from actorq.config import ExperimentConfig
    from actorq.graphopt.ir import Graph

MAX_BUDGET = 10**6
"""Most simulator calls ``--budget`` may give each search baseline: ten times ``--samples``'s
bound (each a simulator call too), minutes on a small graph; past it a run only never ends."""


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
    """Preset NxDEV-LINK (DEV gpu, a100, h100; LINK pcie, nvlink: 8xh100-nvlink) or a .json."""
    budget: int = 100
    """Simulator calls for each search baseline (random, anneal, climb)."""
    seed: int = 0
    """Seed of METIS and the search baselines."""
    only: str | None = None
    """Comma-separated subset of baselines (default: all)."""
    json: str | None = None
    """Also write the rows to this JSON file."""
    force: bool = False
    """Overwrite --json if it exists."""


@dataclasses.dataclass
class PlaceArgs:
    """Place a graph's ops with a GO policy, print its step time beside the classical baselines,
    and write the placement as JSON."""

    graph: str
    """Suite name (see `actorq graphopt list`), synthetic-<ops>-s<seed>, or a .json/.npz file."""
    cluster: str = "4xgpu-pcie"
    """Preset NxDEV-LINK (DEV gpu, a100, h100; LINK pcie, nvlink: 8xh100-nvlink) or a .json."""
    policy: str | None = None
    """A GO run directory (actorq graphopt train) or a policy .safetensors file; default: the
    policy shipped with actorq for the cluster's device count. A run that trained the placement
    task on this graph and cluster adds the best placement it found as a candidate."""
    samples: int = 16
    """Placements sampled from the policy besides its greedy one; the fastest is kept (0: greedy
    only). Each costs one simulator call."""
    precision: str = "int8"
    """The policy's precision (int8, as the shipped policies are judged, or fp32; one inference
    per graph, so speed does not decide it)."""
    guide: float = 1.0
    """Also decode the policy's device choices through HEFT's list scheduler: each op to the
    device minimising its finish time + guide x its mean time x how much less likely the
    policy finds that device (nats); one more simulator call, the fastest candidate is kept.
    0 skips it (HEFT alone is among the baselines)."""
    seed: int = 0
    """Seed of the samples, METIS and the search baselines."""
    budget: int = 100
    """Simulator calls for each search baseline (random, anneal, climb)."""
    baselines: bool = True
    """Run the classical baselines beside the policy (--no-baselines: the policy only)."""
    out: str | None = None
    """Write the placement (op name -> device) and every step time to this JSON file."""
    force: bool = False
    """Overwrite --out if it exists."""


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
    print(
        "also: <family>-v<seed> (a seeded variant of a family: inception-v3, txl-v0, ...), "
        "synthetic-<ops>-s<seed> (seeded layered DAG), or a graph .json/.npz file"
    )
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


def _check_budget(budget: int) -> None:
    """One line unless ``--budget`` is in 1..:data:`MAX_BUDGET`."""
    if not 1 <= budget <= MAX_BUDGET:
        raise GraphError(f"--budget must be in 1..{MAX_BUDGET}, got {short(budget)}")


def baseline_rows(
    graph: str,
    cluster: str,
    budget: int,
    seed: int,
    only: str | None,
    *,
    placements: bool = False,
) -> dict[str, Any]:
    """Run the baselines and return JSON-able rows (shared with the docs benchmark); with
    ``placements`` each row also holds its decision: ``placement`` (a device per op, in the
    graph's order) and ``priority`` (its schedule; None: the simulator's topological order)."""
    from actorq.graphopt.baselines import NAMES, run_baselines
    from actorq.graphopt.cluster import get_cluster
    from actorq.graphopt.simulator import Simulator
    from actorq.graphopt.suite import get_graph

    _check_budget(budget)
    if not 0 <= seed < 2**31:  # numpy's generators take no negative seed, METIS a C int
        raise GraphError(f"--seed must be in 0..{2**31 - 1}, got {seed}")
    names = NAMES if only is None else tuple(s.strip() for s in only.split(",") if s.strip())
    if not names:  # "" or ",": nothing would run, and the command would still succeed
        raise GraphError(f"--only names no baseline; give some of {', '.join(NAMES)}")
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
        if placements:
            prio = b.decision.priority
            rows[-1]["placement"] = [int(d) for d in b.decision.placement]
            rows[-1]["priority"] = None if prio is None else [float(x) for x in prio]
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


def _write_json(p: Path, data: Any, flag: str) -> None:
    """``allow_nan=False``: the file is always valid JSON (a non-finite time is written as
    null before it gets here)."""
    try:
        text = json.dumps(data, indent=1, allow_nan=False)
    except ValueError as e:
        raise GraphError(f"cannot write {flag} {shown(p)}: {first_line(e)}") from None
    write_output(p, text, flag, error=GraphError)


def cmd_baselines(a: BaselinesArgs) -> int:
    from rich.console import Console
    from rich.table import Table

    out_path = check_output(a.json, "--json", force=a.force, error=GraphError) if a.json else None
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
        _write_json(out_path, out, "--json")
        print(f"wrote {out_path}")
    return 0


def _check_place_args(a: PlaceArgs) -> Path | None:
    if not 0 <= a.samples <= 100_000:
        raise GraphError(f"--samples must be in 0..100000, got {a.samples}")
    if a.precision not in ONNX_PRECISIONS:
        raise GraphError(f"--precision must be int8 or fp32, got {a.precision!r}")
    if not 0 <= a.seed < 2**31:
        raise GraphError(f"--seed must be in 0..{2**31 - 1}, got {a.seed}")
    _check_budget(a.budget)
    if not (math.isfinite(a.guide) and 0 <= a.guide <= 1e6):  # NaN fails too
        raise GraphError(f"--guide must be in 0..1e6 (0: off), got {a.guide}")
    out = check_output(a.out, "--out", force=a.force, error=GraphError) if a.out else None
    from actorq.graphopt.suite import synthetic_ops

    ops = synthetic_ops(a.graph)
    if ops is not None:
        place_fits(ops, a.graph)  # before generating it (other graphs: once loaded)
    return out


#: Peak bytes per op of ``actorq graphopt place``: measured ~9 KB (20k and 80k ops; a 2M-op
#: graph held 18.8 GB before it finished), with slack for what was not measured.
PLACE_BYTES_PER_OP = 16 << 10


def place_fits(ops: int, graph: str) -> None:
    """Refuse (one line) to place a graph whose ``ops`` would not fit in memory here: the
    policy's inputs and inference, the simulator and the baselines hold ~9 KB per op at their
    peak (synthetic graphs of 20k and 80k ops: 594 MB and 1.14 GB resident)."""
    from actorq.resources import check_memory

    check_memory({f"{ops:,} ops": ops * PLACE_BYTES_PER_OP}, f"placing {graph}")


def go_run_config(source: str | None) -> ExperimentConfig | None:
    """The config of ``--policy``'s run when it is a run directory (None for a policy file or
    the shipped policy); an unreadable one is one :class:`GraphError` line naming the flag."""
    from actorq.run import load_run_config

    if source is None or not is_dir(source, f"--policy {shown(Path(source))}", GraphError):
        return None
    try:
        return load_run_config(Path(source), device="cpu")
    except ActorQError as e:
        raise GraphError(f"--policy {shown(Path(source))}: {first_line(e)}") from None


def _judged(task: Any, actions: Any) -> dict[str, Any]:
    """One simulated placement of ``task`` (a :class:`GraphTask`) as ``place`` reports it."""
    from actorq.agents.go.pretrained import finite_or_none

    _, _, res = task.judge(actions)
    return {
        "step_time_s": finite_or_none(float(res["step_time"])),
        "score_s": float(res["score"]),  # penalised when infeasible: what ranks them
        "feasible": bool(res["feasible"]),
        "reason": res["reason"],
        "devices_used": len(set(actions[:, 0].tolist())),
    }


def place(a: PlaceArgs) -> dict[str, Any]:
    """The policy's greedy placement and the fastest of ``a.samples`` sampled ones on
    ``a.graph``: JSON-able, with the placement as ``{op name: device}``."""
    import time

    import numpy as np

    from actorq.agents.go.actor import GraphTask
    from actorq.agents.go.inputs import InputSpec, OnnxGOPolicy
    from actorq.agents.go.networks import onnx_bytes
    from actorq.agents.go.pretrained import load_policy, run_best_placement
    from actorq.graphopt.cluster import get_cluster
    from actorq.graphopt.suite import get_graph

    cluster = get_cluster(a.cluster)
    run_cfg = go_run_config(a.policy)
    model, info = load_policy(a.policy, cluster.num_devices, run_cfg)
    graph = get_graph(a.graph)
    place_fits(graph.num_ops, a.graph)
    t0 = time.perf_counter()
    # judged as the policy was trained: the reference's priorities schedule its placement
    spec = InputSpec.of_policy(model.config)
    task = GraphTask(graph, "placement", a.cluster, info.reference, spec)
    runtime = OnnxGOPolicy(onnx_bytes(model, a.precision))
    out = runtime(task.inputs)
    infer_s = time.perf_counter() - t0
    print(
        f"  policy inference on {graph.num_ops:,} ops: {infer_s:.1f} s; simulating "
        f"{a.samples + 1} placement(s) ...",
        flush=True,
    )

    greedy_actions, _ = task.decide(out, None)
    greedy = _judged(task, greedy_actions)
    best, best_actions, best_at = greedy, greedy_actions, 0
    rng = np.random.default_rng(a.seed)
    for k in range(1, a.samples + 1):
        actions, _ = task.decide(out, rng)
        r = _judged(task, actions)
        if r["score_s"] < best["score_s"]:
            best, best_actions, best_at = r, actions, k
    g, ref_prio = task.env.graph, task.env.reference.priority
    calls = a.samples + 1
    guided = None
    if a.guide > 0:
        guided_actions = task.guided(out, a.guide)
        guided = _judged(task, guided_actions)
        calls += 1
        if guided["score_s"] < best["score_s"]:
            best, best_actions, best_at = guided, guided_actions, -2
    # a run that trained on this graph kept the best placement it found (with --explore, its
    # search result): it is a candidate too
    run_best = None
    if a.policy is not None and run_cfg is not None:
        found = run_best_placement(
            Path(a.policy), run_cfg, g.name, g.num_ops, cluster.name, info.reference
        )
        if found is not None:
            actions = greedy_actions.copy()
            actions[:, 0] = found
            run_best = _judged(task, actions)
            calls += 1
            if run_best["score_s"] < best["score_s"]:
                best, best_actions, best_at = run_best, actions, -1
    return {
        "graph": g.name,
        "ops": g.num_ops,
        "cluster": cluster.name,
        "cluster_desc": cluster.describe(),
        "policy": {
            "source": info.source,
            "task": info.task,
            "trained_for": info.cluster,
            "trained_on": list(info.trained_on),
            "command": info.command,
            "reference": info.reference,
        },
        "precision": a.precision,
        "samples": a.samples,
        "seed": a.seed,
        "simulator_calls": calls,
        "seconds": time.perf_counter() - t0,
        "inference_s": infer_s,
        "greedy": greedy,
        # sample 0 is the greedy placement, -1 the run's best found, -2 the guided one
        "best": {**best, "sample": best_at},
        "guide": a.guide,
        "guided": guided,
        "run_best": run_best,
        "placement": {name: int(d) for name, d in zip(g.op_names, best_actions[:, 0], strict=True)},
        # the schedule GO's placements are judged with (its reference's, e.g. HEFT's ranks: a
        # number per op, higher first; None: topological order), so the file reproduces the time
        "priority": None if ref_prio is None else [float(x) for x in ref_prio],
    }


def _fastest(res: dict[str, Any], rows: list[dict[str, Any]], ops: list[str]) -> dict[str, Any]:
    """The fastest feasible placement `place` simulated, GO's or a baseline's (GO's on a tie),
    as ``{"source", "step_time_s", "placement", "priority"}`` (the schedule it was simulated
    with: a number per op, higher first; None: topological order); takes each baseline row's
    decision out of it. GO's policy can lose badly on a graph unlike its training graphs (an
    imported GPT-2: over 4x one device's step time greedy), and the user who asked for a placement
    should not have to rerun a baseline to get the better one."""
    best = res["best"]
    out = {"source": "GO", "step_time_s": best["step_time_s"], "placement": res["placement"],
           "priority": res["priority"]}  # fmt: skip
    score = best["score_s"] if best["feasible"] else math.inf
    for r in rows:
        placement, priority = r.pop("placement"), r.pop("priority")
        if r["feasible"] and r["step_time_s"] < score:
            score = r["step_time_s"]
            out = {"source": r["baseline"], "step_time_s": r["step_time_s"],
                   "placement": dict(zip(ops, placement, strict=True)),
                   "priority": priority}  # fmt: skip
    return out


def cmd_place(a: PlaceArgs) -> int:
    from rich.console import Console
    from rich.table import Table

    from actorq.graphopt.baselines import PLACEMENT, simulator_calls

    out_path = _check_place_args(a)
    print(f"placing {a.graph} on {a.cluster} ...", flush=True)
    res = place(a)
    rows: list[tuple[str, float, bool, int, str]] = [
        (
            "GO, greedy",
            res["greedy"]["score_s"],
            res["greedy"]["feasible"],
            res["greedy"]["devices_used"],
            "1",
        ),
    ]
    if res["guided"] is not None:
        gd = res["guided"]
        rows.append((f"GO, HEFT-guided ({a.guide:g})", gd["score_s"], gd["feasible"],
                     gd["devices_used"], "1"))  # fmt: skip
    if a.samples:
        b = res["best"]
        rows.append(
            (
                f"GO, best of {a.samples + 1}",
                b["score_s"],
                b["feasible"],
                b["devices_used"],
                str(a.samples + 1),
            )
        )
    if res["run_best"] is not None:
        rb = res["run_best"]
        rows.append(("GO run's best found", rb["score_s"], rb["feasible"], rb["devices_used"], "1"))
    if a.baselines:
        print(
            f"running the baselines (random, anneal, climb: {a.budget} simulator calls each) ...",
            flush=True,
        )
        # placement against placement: no baseline fuses ops (GO's placement does not)
        base = baseline_rows(
            a.graph, a.cluster, a.budget, a.seed, ",".join(PLACEMENT), placements=True
        )
        res["baselines"] = base["rows"]
        res["fastest"] = _fastest(res, base["rows"], list(res["placement"]))
        for r in base["rows"]:
            calls = str(simulator_calls(r["baseline"], a.budget))
            rows.append((r["baseline"], r["step_time_s"], r["feasible"], r["devices_used"], calls))
    t = Table(title=f"{res['graph']} ({res['ops']:,} ops) on {res['cluster_desc']}")
    for col in ("placement", "step ms", "feasible", "devices", "simulator calls"):
        t.add_column(col, justify="left" if col in ("placement", "feasible") else "right")
    feasible = [r for r in rows if r[2]]
    fastest = min(feasible, key=lambda r: r[1])[0] if feasible else None
    for name, s, ok, devices, calls in rows:
        shown_name = f"[bold]{name}[/bold]" if name == fastest else name
        t.add_row(shown_name, _ms(s) if ok else "-", "yes" if ok else "NO", str(devices), calls)
    Console(width=140).print(t)
    b = res["best"]
    if not b["feasible"]:
        print(f"  GO's placement does not fit: {b['reason']}")
    others = [r for r in rows if not r[0].startswith("GO") and r[2]]
    if b["feasible"] and others:
        ref = min(others, key=lambda r: r[1])
        gain = (ref[1] - b["score_s"]) / ref[1]
        word = "faster" if gain >= 0 else "slower"
        print(f"GO vs the best placement baseline ({ref[0]}): {abs(gain):.1%} {word}")
    if res.get("fastest") and res["fastest"]["source"] != "GO":
        print(
            f"the fastest placement here is {res['fastest']['source']}'s"
            + (
                f": {out_path} holds it as 'fastest', beside GO's as 'placement'"
                if out_path is not None
                else " (--out writes it beside GO's)"
            )
        )
    print(
        f"policy: {res['policy']['source']} ({res['precision']}); "
        f"{res['seconds']:.1f} s for the policy's placements"
    )
    if out_path is not None:
        _write_json(out_path, res, "--out")
        print(f"wrote {out_path}")
    return 0


USAGE = """usage: actorq graphopt {list,baselines,place,train} ...

  actorq graphopt list [--build] [--family F]
  actorq graphopt baselines --graph NAME [--cluster 4xgpu-pcie] [--budget 100] [--json F]
  actorq graphopt place --graph NAME [--cluster 4xgpu-pcie] [--policy RUN_OR_FILE]
                        [--samples 16] [--out placement.json]
  actorq graphopt train [--env graphopt:TASK/GRAPH] [--graphs G ...] [--cluster C] ...
                        (the same as `actorq train go`; --help lists every setting)
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
    if sub == "place":
        return cmd_place(parse(PlaceArgs, rest, "actorq graphopt place"))
    if sub == "train":  # GO's policy: the `go` agent, through the one training loop
        from actorq.cli.train import cmd_train

        return cmd_train("go", rest)
    print(
        f"actorq: error: unknown graphopt command {sub!r}; expected list, baselines, place or "
        "train",
        file=sys.stderr,
    )
    return 2
