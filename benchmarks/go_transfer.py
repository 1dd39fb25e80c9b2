"""GO's transfer protocol, leave one family out (Zhou et al., NeurIPS 2020): pre-train on five
model families, place the sixth zero-shot and fine-tuned, against from-scratch and the baselines.

Per held-out family, on each family's smallest graph (docs/go-transfer.md: protocol, tables):
``pretrain`` (``actorq train go`` on the other five), ``zeroshot`` (its greedy decision, and its
logits decoded by HEFT), ``finetune`` (``--init-from`` it), ``scratch``, ``baselines`` (at
from-scratch's and at fine-tuning's simulator calls) and, only when named in ``--stages``,
``scratch-plain`` (no imitation warm start). GO settings are ``GOConfig``'s; each non-default
one is spelled in the results folder's name. One JSON cell per (family, stage, seed), skipped
when it exists; then the report to stdout and ``<folder>/report.md`` (``report-sN.md``).

    .venv/bin/python benchmarks/go_transfer.py --families gnmt --pretrain-steps 64 \\
        --finetune-steps 16 --scratch-steps 32 --results /tmp/go_smoke   # a quick smoke run
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from _machine import machine_info, say, write_json_atomic
from actorq.agents.go.targets import BEST_OF, CHOICES
from actorq.graphopt.baselines import REFERENCES, SEARCH
from actorq.logging import read_metrics

FAMILIES = ("inception", "resnet", "gnmt", "transformer-xl", "wavenet", "rnnlm")
#: The classical baselines (reports skip what an older cell lacks)
BASELINES = ("single", "expert", "metis+cp", "heft", "heft-cut", "m-etf")
#: ``beta`` of the zero-shot decision decoded by HEFT guided by the policy (``GraphTask.guided``)
GUIDE_BETAS = (0.25, 1.0, 4.0)
#: The joint task's extra baseline: greedy fusion of the best classical decision.
FUSED = ("best+fuse",)
#: Evaluations per run (its curve's points).
CURVE_POINTS = 10
STAGES = ("baselines", "pretrain", "zeroshot", "finetune", "scratch")
#: GO's own from-scratch baseline (only when named in --stages): no imitation warm start.
PLAIN = "scratch-plain"

#: Table headings of the baselines whose names are abbreviations.
PRETTY = {"metis+cp": "METIS+cp", "heft": "HEFT", "heft-cut": "HEFT-cut", "m-etf": "m-ETF"}


def baseline_names(task: str) -> tuple[str, ...]:
    return (*BASELINES, *(FUSED if task == "joint" else ()))


@functools.cache
def num_ops(name: str) -> int:
    """A suite graph's op count, read once per process (its largest graphs are 107k ops)."""
    from actorq.graphopt.suite import get_graph

    return get_graph(name).num_ops


def smallest(family: str) -> str:
    """The family's smallest suite graph."""
    from actorq.graphopt.suite import suite_names

    return min(suite_names(family), key=num_ops)


def pretrain_graphs(held_out: str, variants: int = 0) -> list[str]:
    """Each other family's smallest graph, then ``variants`` seeded variants of each."""
    from actorq.graphopt.suite import PREFIX

    others = [f for f in FAMILIES if f != held_out]
    out = [smallest(f) for f in others]
    return out + [f"{PREFIX[f]}-v{i}" for f in others for i in range(variants)]


def go_config(
    args: argparse.Namespace, run_dir: Path, graphs: list[str], steps: int, imitate: bool = False,
    **kw: Any,
) -> Any:  # fmt: skip
    from actorq.agents.go.config import GOConfig

    if imitate and args.imitate != "none":
        kw.update(imitate=args.imitate)
        kw.setdefault("imitate_steps", args.imitate_steps)
    if args.learning_rate is not None:
        kw.setdefault("learning_rate", args.learning_rate)
    if args.sil_coef:
        kw.setdefault("sil_coef", args.sil_coef)
    if args.reference != "expert":
        kw.setdefault("reference", args.reference)
    if args.priority_levels != 8:
        kw.setdefault("priority_levels", args.priority_levels)
    kw.setdefault("precision", "int8")  # the actors the committed results were made with
    return GOConfig(
        env=f"graphopt:{args.task}/{graphs[0]}", graphs=tuple(graphs[1:]), cluster=args.cluster,
        actors=0, total_steps=steps, eval_every=max(1, steps // CURVE_POINTS), seed=args.seed,
        run_dir=str(run_dir), progress=False, energy=False, log_every=30.0, **kw,
    )  # fmt: skip


def run_policy_on(run_dir: Path, env: str) -> tuple[Any, Any]:
    """A GO run's final policy on ``env``: its ``GraphTask`` and the policy's snapshot maker."""
    import dataclasses

    from actorq.agents.go.builder import BUILDER
    from actorq.run import load_run_config

    saved: Any = load_run_config(run_dir)
    cfg = dataclasses.replace(saved, env=env, graphs=(), init_from=str(run_dir))
    spec = BUILDER.env_spec(cfg)
    learner = BUILDER.make_learner(cfg, spec)  # the run's weights, via init_from
    return learner.tasks[0], BUILDER.policy_io(cfg, spec, learner)


def step_times(run_dir: Path, graph: str, args: argparse.Namespace) -> dict[str, Any]:
    """The run's final greedy decision on ``graph`` at int8 and fp32: step times, devices used."""
    from actorq.agents.go.actor import decode_snapshot
    from actorq.agents.go.inputs import OnnxGOPolicy

    task, io = run_policy_on(run_dir, f"graphopt:{args.task}/{graph}")
    out: dict[str, Any] = {"reference_time": task.env.reference_time}
    for prec in ("int8", "fp32"):
        rt = OnnxGOPolicy(decode_snapshot(io.snapshot(0, prec)).model)
        policy_out = rt(task.inputs)
        actions, _ = task.decide(policy_out, None)
        _, _, info = task.judge(actions)
        out[f"time_{prec}"] = float(info["score"])  # penalised when it does not fit
        # how many devices the decision uses: "all on one device" is a zero-shot failure mode
        out[f"devices_{prec}"] = len(set(actions[:, 0].tolist()))
        if not info["feasible"]:
            out[f"infeasible_{prec}"] = info["reason"]
        if prec == "int8":  # the same logits through HEFT's list scheduler, a few betas
            out["guided_int8"] = {
                f"{b:g}": float(task.judge(task.guided(policy_out, b))[2]["score"])
                for b in GUIDE_BETAS
            }
    return out


def imitation(run_dir: Path) -> dict[str, Any]:
    """The warm start's metrics (``imitate/*`` at step 0) and per-graph records, if it ran."""
    m = {k.partition("/")[2]: v[0][1] for k, v in read_metrics(run_dir).items()
         if k.startswith("imitate/")}  # fmt: skip
    if not m:
        return {}
    state = json.loads((run_dir / "checkpoint" / "state.json").read_text())
    return {**m, "graphs": state["learner"].get("imitation", [])}


def curve(run_dir: Path, reference_time: float) -> list[list[float]]:
    """``[[decisions, step time], ...]`` of a single-graph run's periodic evaluations."""
    pts = read_metrics(run_dir).get("charts/eval_return", [])
    return [[float(step), reference_time * (1.0 - v)] for step, v in pts]


def train_or_resume(cfg: Any) -> Any:
    """``train(cfg)``, resumed where a stopped cell left a checkpoint."""
    import dataclasses

    from actorq.experiment import train

    if (Path(cfg.run_dir) / "checkpoint").is_dir():
        say(f"resuming {cfg.run_dir}")
        cfg = dataclasses.replace(cfg, resume=cfg.run_dir)
    r = train(cfg)
    if r.interrupted:  # checkpointed, not finished: no cell file (a rerun resumes it)
        raise SystemExit(130)
    return r


def run_cell(stage: str, family: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    held = smallest(family)
    train_graphs = pretrain_graphs(family, args.pretrain_variants)
    runs = root / "runs"
    pre_dir = runs / f"pretrain-{family}-s{args.seed}"
    t0 = time.perf_counter()
    out: dict[str, Any] = {"stage": stage, "family": family, "graph": held}
    if stage == "pretrain":
        # the imitation warm start, no exploration (it made greedy decisions worse)
        r = train_or_resume(go_config(args, pre_dir, train_graphs, args.pretrain_steps, True))
        out.update(train_graphs=train_graphs, decisions=r.env_steps, updates=r.updates,
                   train_gain=r.eval_return, train_gain_fp32=r.eval_return_fp32)  # fmt: skip
        out["imitation"] = imitation(pre_dir)
    elif stage == "zeroshot":
        out.update(step_times(pre_dir, held, args))
    elif stage in ("finetune", "scratch"):
        rd = runs / f"{stage}-{family}-s{args.seed}"
        out.update(held_out_run(stage, held, rd, pre_dir, args))
    elif stage == PLAIN:  # GO's from scratch: a fresh network, no imitation warm start
        rd = runs / f"{PLAIN}-{family}-s{args.seed}"
        out.update(held_out_run("scratch", held, rd, pre_dir, args, warm_start=False))
    elif stage == "baselines":
        out.update(baseline_times(held, args, args.scratch_steps))
        out["budget"] = args.scratch_steps
        # annealing at fine-tuning's budget: the search GO's fine-tuning is weighed against
        # at equal simulator calls on the held-out graph (the protocol)
        # (from the same best classical start as the full-budget one)
        ft = baseline_times(held, args, args.finetune_steps, search_only=True)
        out.update({f"{k}_ft": v for k, v in ft.items()})
        out["budget_ft"] = args.finetune_steps
    out["seconds"] = time.perf_counter() - t0
    return out


def held_out_run(
    stage: str, graph: str, rd: Path, pre_dir: Path, args: argparse.Namespace,
    warm_start: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """A fine-tuning (from ``pre_dir``) or from-scratch run on the held-out graph: greedy step
    times, curve, best decision found, warm start (``warm_start=False``: ``scratch-plain``)."""
    steps = args.finetune_steps if stage == "finetune" else args.scratch_steps
    kw: dict[str, Any] = {}
    if stage == "finetune":
        kw["init_from"] = str(pre_dir)
    if args.explore:  # run moves from the actor's incumbent, taught by self-imitation
        kw["explore"] = args.explore
    if args.distill_steps:
        kw.update(distill_steps=args.distill_steps, distill_every=args.distill_every)
    if args.finetune_pos_freqs:  # octaves for the held-out graph's runs only
        kw["pos_freqs"] = args.finetune_pos_freqs
    warm = warm_start if stage == "scratch" else args.finetune_imitate
    if stage == "finetune" and args.finetune_imitate_steps is not None:
        kw["imitate_steps"] = args.finetune_imitate_steps
    r = train_or_resume(go_config(args, rd, [graph], steps, imitate=warm, **kw))
    out = step_times(rd, graph, args)
    out.update(decisions=r.env_steps, updates=r.updates)
    out["curve"] = curve(rd, out["reference_time"])
    state = json.loads((rd / "checkpoint" / "state.json").read_text())
    out["best_sampled"] = state["learner"]["best_time"][0]  # the run's best decision
    out["imitation"] = imitation(rd)
    return out


def baseline_times(
    graph: str, args: argparse.Namespace, budget: int, search_only: bool = False
) -> dict[str, dict[str, Any]]:
    """Each baseline's penalised step time on ``graph``, searches given ``budget`` calls."""
    from actorq.graphopt import Simulator, get_cluster
    from actorq.graphopt.baselines import penalized, run_baselines
    from actorq.graphopt.suite import get_graph

    sim = Simulator(get_graph(graph), get_cluster(args.cluster))
    names = (*baseline_names(args.task), *SEARCH)
    out = {}
    for b in run_baselines(sim, names, budget=budget, seed=args.seed):
        if not search_only or b.name in SEARCH:
            out[b.name] = {"time": penalized(sim, b.result), "feasible": b.result.feasible}
    return out


def geomean(x: Sequence[float]) -> float:
    return float(math.exp(np.mean(np.log(x)))) if x else float("nan")


def read_cells(root: Path, fam: str, seed: int) -> dict[str, Any]:
    """The finished cells of one family and seed, by stage."""
    cells = {}
    for stage in STAGES:
        p = root / f"{fam}-{stage}-s{seed}.json"
        if p.is_file():
            cells[stage] = json.loads(p.read_text())
    return cells


def ratios(cells: dict[str, Any]) -> tuple[float, float, float | None, float, float | None]:
    """One family's expert, best baseline, best at fine-tuning's calls (None before
    ``anneal_ft``), zero-shot and best protocol baseline (classical, random, anneal at
    fine-tuning's calls), each over fine-tuned's step time."""
    b, t = cells["baselines"], cells["finetune"]["time_int8"]
    fixed = [b[n]["time"] for n in (*BASELINES[1:], *FUSED) if n in b]
    search = [n for n in SEARCH if n in b]
    best = min(fixed + [b[n]["time"] for n in search])
    equal = named = None
    if "anneal_ft" in b:  # the best baseline at fine-tuning's number of simulator calls
        equal = min(fixed + [b[f"{n}_ft"]["time"] for n in search]) / t
        named = min([*fixed, b["random_ft"]["time"], b["anneal_ft"]["time"]]) / t
    return b["expert"]["time"] / t, best / t, equal, cells["zeroshot"]["time_int8"] / t, named


def seed_geomeans(root: Path, families: list[str]) -> dict[int, tuple[float, float, float, float]]:
    """Per finished seed: the geomeans of :func:`ratios`' first four (NaN where cells lack one)."""
    seeds = sorted({int(p.stem.rsplit("-s", 1)[1]) for p in root.glob("*-finetune-s*.json")})
    out = {}
    for seed in seeds:
        per = [read_cells(root, fam, seed) for fam in families]
        if all(len(c) == len(STAGES) for c in per):
            r = list(zip(*(ratios(c) for c in per), strict=True))
            eq = math.nan if None in r[2] else geomean(r[2])
            out[seed] = (geomean(r[0]), geomean(r[1]), eq, geomean(r[3]))
    return out


def decisions_to_reach(zs: dict[str, Any], ft: dict[str, Any], target: float) -> float | None:
    """Fine-tuning's decisions until its greedy step time reaches ``target`` (zero-shot at 0)."""
    ft_curve = [[0.0, zs["time_int8"]], *ft["curve"]]
    return next((s for s, t in ft_curve if t <= target * 1.0001), None)


def plain_report(root: Path, args: argparse.Namespace) -> list[str]:
    """The reach goal against ``scratch-plain`` cells, where a family has one."""
    rows, hits, every = [], 0, 0.0
    for fam in args.families:
        cells = read_cells(root, fam, args.seed)
        p = root / f"{fam}-{PLAIN}-s{args.seed}.json"
        if not p.is_file() or not {"zeroshot", "finetune", "scratch"} <= cells.keys():
            continue
        plain, zs, ft, sc = json.loads(p.read_text()), *(cells[k] for k in STAGES[2:])
        reach = decisions_to_reach(zs, ft, plain["time_int8"])
        tenth = reach is not None and reach <= plain["decisions"] / 10
        hits += tenth
        # the warm-started from-scratch run's decisions to the same: the warm start's share
        warm = next((x for x, t in sc["curve"] if t <= plain["time_int8"] * 1.0001), None)
        every = max(every, sc["curve"][0][0] if sc["curve"] else 0.0)
        rows.append(
            f"| {plain['graph']} | {1e3 * plain['time_int8']:.1f} | {1e3 * sc['time_int8']:.1f} "
            f"| {1e3 * ft['time_int8']:.1f} "
            f"| {'-' if reach is None else f'{reach:,.0f}'} / {plain['decisions']:,} "
            f"| {'yes' if tenth else 'no'} | {'-' if warm is None else f'{warm:,.0f}'} |"
        )
    if not rows:
        return []
    return [
        "GO's own from-scratch baseline (`--stages scratch-plain`: the from-scratch run's "
        "settings, a fresh network without the imitation warm start), ms:",
        "",
        "| held-out graph | scratch, no warm start | scratch, warm start (above) | GO fine-tuned "
        "| fine-tune decisions to reach the first's final / its decisions | within 1/10 "
        "| the warm-started run's decisions to reach it |",
        "|---|---:|---:|---:|---|---|---:|",
        *rows,
        "",
        f"Fine-tuning reaches the from-scratch run without a warm start in at most a tenth of "
        f"its decisions on {hits} of {len(rows)} held-out graphs"
        + (
            " (fine-tuning here first imitates the held-out graph's best classical decision, "
            "a warm start that run lacks: GO's protocol, neither side warm-started on the held-out "
            "graph, is the same command without --finetune-imitate)."
            if args.finetune_imitate
            else " (neither side is warm-started on the held-out graph: GO's protocol)."
        )
        + f" The warm-started run is evaluated every {every:,.0f} decisions, fine-tuning every "
        f"{max(1, args.finetune_steps // CURVE_POINTS):,}.",
        "",
    ]


def guided_report(root: Path, args: argparse.Namespace) -> list[str]:
    """Zero-shot decoded by HEFT guided by the policy beside argmax, HEFT, best classical."""
    rows, gaps = [], []
    betas = [f"{b:g}" for b in GUIDE_BETAS]
    for fam in args.families:
        cells = read_cells(root, fam, args.seed)
        zs, b = cells.get("zeroshot", {}), cells.get("baselines")
        if "guided_int8" not in zs or b is None:
            continue
        ft = cells.get("finetune", {}).get("time_int8")
        best = min(b[n]["time"] for n in BASELINES if n in b)
        vals = [zs["time_int8"], *(zs["guided_int8"][k] for k in betas), b["heft"]["time"], best]
        rows.append(
            f"| {b['graph']} | "
            + " | ".join(f"{1e3 * v:.1f}" for v in vals)
            + f" | {'-' if ft is None else f'{1e3 * ft:.1f}'} |"
        )
        if ft is not None:
            gaps.append([v / ft for v in vals])
    if not rows:
        return []
    out = [
        "Zero-shot decoded through HEFT's list scheduler guided by the policy's device "
        "log-probabilities (`GraphTask.guided`: each op to the device minimising finish time + "
        "beta x its mean time x its log-probability gap to the policy's choice; no simulator "
        "call on the held-out graph), ms:",
        "",
        "| held-out graph | GO argmax | "
        + " | ".join(f"guided, beta {k}" for k in betas)
        + " | HEFT | best classical | GO fine-tuned |",
        "|---|" + "---:|" * (len(betas) + 4),
        *rows,
    ]
    if gaps and len(gaps) == len(rows):
        g = np.exp(np.log(np.array(gaps)).mean(axis=0))
        out.append("| geomean / fine-tuned | " + " | ".join(f"{x:.2f}x" for x in g) + " | 1 |")
    return [*out, ""]


def whole_command(argv: list[str]) -> str:
    """The command that makes every cell of a report: ``argv`` less --stages and --families."""
    keep, skipping = [], False
    for a in argv:
        if a.startswith("--"):
            skipping = a.split("=")[0] in ("--stages", "--families")
        if not skipping:
            keep.append(a)
    return "python benchmarks/go_transfer.py " + " ".join(keep)


def report(root: Path, args: argparse.Namespace, command: str) -> str:
    rows, ft_gain, ft_best, zs_gap, ft_equal, ft_named = [], [], [], [], [], []
    found: list[float] = []  # fine-tuning's best decision per family (its search result)
    # numeric columns: the baselines, the searches (heading, key) at both budgets, then GO's
    searches = [(n + at, n + key) for n in SEARCH for at, key in (("", ""), (" @ft", "_ft"))]
    numeric = [PRETTY.get(n, n) for n in baseline_names(args.task)]
    numeric += [head for head, _ in searches] + ["GO zero-shot"]
    numeric += ["GO fine-tuned", "GO fine-tuned, best found", "GO scratch"]
    pre: list[str] = []  # per family: pre-training's own-graph gain (and imitation accuracy)
    for fam in args.families:
        cells = read_cells(root, fam, args.seed)
        if len(cells) < len(STAGES):
            rows.append(f"| {fam} | {len(cells)}/{len(STAGES)} cells done |" + " |" * len(numeric))
            continue
        b, zs, ft, sc = cells["baselines"], cells["zeroshot"], cells["finetune"], cells["scratch"]
        im = cells["pretrain"].get("imitation") or {}
        pre.append(
            f"{fam} {cells['pretrain']['train_gain']:+.2f}"
            + (f" (imitation {100 * im['accuracy']:.1f}% of ops)" if im else "")
        )
        reach = decisions_to_reach(zs, ft, sc["time_int8"])

        def ms(cell: dict[str, Any], key: str) -> str:
            v = cell.get(key)
            return "-" if v is None else f"{1e3 * (v['time'] if isinstance(v, dict) else v):.1f}"

        cols = [ms(b, n) for n in baseline_names(args.task)]
        cols += [ms(b, key) for _, key in searches]
        cols += [ms(zs, "time_int8"), ms(ft, "time_int8"), ms(ft, "best_sampled")]
        # the best found's speedup over the greedy
        found.append(ft["time_int8"] / (ft.get("best_sampled") or ft["time_int8"]))
        cols += [ms(sc, "time_int8")]
        reached = "-" if reach is None else f"{reach:,.0f} / {sc['decisions']:,}"
        rows.append(f"| {fam} ({b['graph']}) | {' | '.join(cols)} | {reached} |")
        for into, r in zip(
            (ft_gain, ft_best, ft_equal, zs_gap, ft_named), ratios(cells), strict=True
        ):
            if r is not None:
                into.append(r)
    notes = [  # the settings, in words
        f"Budgets (whole-graph decisions): pre-train {args.pretrain_steps:,} on the five other "
        "families' smallest graphs",
        f", and {args.pretrain_variants} seeded variants of each (`<family>-v0`...)"
        if args.pretrain_variants
        else "",
        f"; fine-tune {args.finetune_steps:,}; from scratch {args.scratch_steps:,}; random "
        "search, annealing and hill climbing (annealing's moves at zero temperature, from the "
        f'same start) {args.scratch_steps:,} simulator calls ("@ft": {args.finetune_steps:,}, '
        "fine-tuning's). Step times in ms (simulated, penalised when infeasible); GO columns "
        'are the greedy int8 decision, except "best found": the fastest decision fine-tuning\'s '
        "actors simulated (sampled, or with --explore moved).",
    ]
    if args.task == "joint":
        notes.append(
            " The joint task decides fusion too: best+fuse is greedy fusion on the best "
            "classical decision, and annealing starts from it."
        )
    if args.imitate != "none":
        what = (
            "decisions (placement, priorities as levels, greedy fusion where faster)"
            if args.task == "joint"
            else "placements"
        )
        steps = args.finetune_imitate_steps
        notes.append(
            f" Pre-training and from-scratch runs start with {args.imitate_steps:,} steps "
            f"imitating `{args.imitate}`'s {what}"
            + (
                ", and so does fine-tuning, from the pre-trained weights, on the held-out graph"
                + ("." if steps is None else f" ({steps:,} steps).")
                if args.finetune_imitate
                else " (fine-tuning does not imitate)."
            )
        )
    if args.learning_rate is not None:
        notes.append(f" PPO learning rate {args.learning_rate:g}.")
    if args.sil_coef:
        notes.append(f" Self-imitation, coefficient {args.sil_coef:g}.")
    if args.explore:
        notes.append(
            f" {100 * args.explore:g}% of fine-tuning's and from-scratch's decisions are run moves "
            "from the actor's incumbent (annealing's move; not PPO samples, taught through "
            "self-imitation); pre-training does not explore."
        )
    if args.distill_steps:
        notes.append(
            " The held-out graph's runs distill the best decision found into the policy "
            f"({args.distill_steps} steps, at the end and every {args.distill_every:,} decisions)."
        )
    if args.reference != "expert":
        notes.append(
            f" GO's decisions are judged with `{args.reference}`'s priorities (the placement "
            "task's schedule) and rewarded relative to its step time."
        )
    if args.priority_levels != 8:
        notes.append(f" Priority heads of {args.priority_levels} levels (--priority-levels).")
    head = [
        f"# GO transfer, leave one family out ({args.task}, {args.cluster}, seed {args.seed})",
        "", f"Command: `{command}`", "", "".join(notes), "",
        "| held-out family (graph) | " + " | ".join(numeric) + " "
        "| fine-tune decisions to reach scratch's final / scratch's |",
        "|---|" + "---:|" * len(numeric) + "---|",
        *rows,
        "",
    ]  # fmt: skip
    if ft_gain:
        g_gain, g_best, g_found = geomean(ft_gain), geomean(ft_best), geomean(found)
        eq = geomean(ft_equal) if len(ft_equal) == len(ft_gain) else None
        calls = f"{args.finetune_steps:,}"
        head += [
            f"Geomean over {len(ft_gain)} families: fine-tuned GO is {100 * (g_gain - 1):+.1f}% "
            f"faster than the expert split (speedup {g_gain:.3f}), {100 * (g_best - 1):+.1f}% vs "
            f"the best baseline per graph; zero-shot takes {geomean(zs_gap):.3f}x fine-tuned's "
            "step time."
            + ("" if eq is None else " At equal simulator calls on the held-out graph (the search "
               f"baselines given fine-tuning's {calls}), fine-tuned GO is {100 * (eq - 1):+.1f}% "
               "vs the best baseline per graph.")
            + ("" if len(ft_named) < len(ft_gain) else " Against the protocol's baselines (the "
               "classical ones, random search, annealing at fine-tuning's calls; hill climbing "
               f"and heft-search left out): {100 * (geomean(ft_named) - 1):+.1f}%.")
            + f" Fine-tuning's best found decision (the run's search result, within its {calls} "
            f"decisions) is {100 * (g_best * g_found - 1):+.1f}% vs the best baseline per graph"
            + ("." if eq is None else f" and {100 * (eq * g_found - 1):+.1f}% at equal simulator "
               "calls."),
            "",
            f"Pre-training's greedy gain over the reference (`{args.reference}`) on its own "
            f"training graphs (mean; the held-out family named): {'; '.join(pre)}.",
            "",
        ]  # fmt: skip
    head += guided_report(root, args)
    head += plain_report(root, args)
    per_seed = seed_geomeans(root, list(args.families))
    if len(per_seed) > 1:  # the same settings run with other --seed values: their spread
        cols = np.array(list(per_seed.values()))
        pct, sd = 100 * (cols.mean(axis=0) - 1), cols.std(axis=0, ddof=1)
        head += [
            f"Across seeds {', '.join(map(str, per_seed))} (geomeans over the families, each "
            "seed's own pre-training, fine-tuning and baselines):",
            "",
            "| seed | fine-tuned vs expert | fine-tuned vs best baseline "
            "| the same at equal simulator calls | zero-shot / fine-tuned |",
            "|---:|---:|---:|---:|---:|",
            *(
                f"| {seed} | {100 * (e - 1):+.1f}% | {100 * (b - 1):+.1f}% "
                f"| {100 * (q - 1):+.1f}% | {z:.3f}x |"
                for seed, (e, b, q, z) in per_seed.items()
            ),
            f"| mean ± sd | {pct[0]:+.1f}% ± {100 * sd[0]:.1f} | {pct[1]:+.1f}% ± {100 * sd[1]:.1f}"
            f" | {pct[2]:+.1f}% ± {100 * sd[2]:.1f} | {cols[:, 3].mean():.3f}x ± {sd[3]:.3f} |",
            "",
        ]
    return "\n".join(head)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = ap.add_argument  # GO settings are actorq train go's (GOConfig); defaults: off
    add("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    add("--stages", nargs="+", default=list(STAGES), choices=(*STAGES, PLAIN))
    add("--cluster", default="4xgpu-pcie")
    add("--task", default="placement", choices=("placement", "joint"))
    add("--pretrain-steps", type=int, default=6_000)
    add("--finetune-steps", type=int, default=1_000)
    add("--scratch-steps", type=int, default=4_000)
    add("--seed", type=int, default=0)
    add("--imitate", default="none", choices=CHOICES, help="warm start of pretrain and scratch")
    add("--imitate-steps", type=int, default=400)
    add("--learning-rate", type=float, default=None, help="every GO run's PPO learning rate")
    add("--sil-coef", type=float, default=0.0, help="every GO run's self-imitation coefficient")
    add("--finetune-imitate", action="store_true", help="fine-tuning starts with the warm start")
    add("--finetune-imitate-steps", type=int, default=None, help="default: --imitate-steps")
    add("--reference", default="expert", choices=REFERENCES, help="whose priorities schedule")
    add("--explore", type=float, default=0.0, help="run moves' share (held-out graph's runs)")
    add("--pretrain-variants", type=int, default=0, help="seeded variants of each family")
    add("--distill-steps", type=int, default=0, help="distil the best found (held-out runs)")
    add("--distill-every", type=int, default=0)
    add("--finetune-pos-freqs", type=int, default=0, help="octaves for the held-out runs only")
    add("--priority-levels", type=int, default=8, help="the priority head's levels (joint)")
    add("--results", type=Path, default=Path("benchmarks/results/go_transfer"))
    args = ap.parse_args(argv)
    command = "python benchmarks/go_transfer.py " + " ".join(sys.argv[1:] if argv is None else argv)
    for bad, msg in (
        (not 2 <= args.priority_levels <= 256 or not 0 <= args.pretrain_variants <= 1000,
         "--priority-levels: 2 to 256; --pretrain-variants: 0 to 1000 per family"),
        (args.finetune_imitate_steps is not None and not args.finetune_imitate,
         "--finetune-imitate-steps needs --finetune-imitate"),
        (args.finetune_imitate and args.imitate == "none", "--finetune-imitate needs --imitate"),
    ):  # fmt: skip
        if bad:
            say(msg)
            return 2
    # ``best``'s candidates grew (the single device, heft-cut joined): the folder names them,
    # so a folder's cells never mix targets chosen among different candidates
    imitated = f"best{len(BEST_OF)}" if args.imitate == "best" else args.imitate
    a, lr, ft = args, args.learning_rate, args.finetune_imitate_steps
    fts = "" if ft is None else str(ft)
    # (settings where not the default, the folder's spelling), in the order older folders were
    # named; settings.json records the values
    named = [(values, spelled) for on, values, spelled in (
        (a.reference != "expert", {"reference": a.reference}, f"-ref{a.reference}"),
        (a.imitate != "none", {"imitate": a.imitate, "imitate_steps": a.imitate_steps}
         | ({"best_of": list(BEST_OF)} if a.imitate == "best" else {}),
         f"-imitate-{imitated}-{a.imitate_steps}"),
        (lr is not None, {"learning_rate": lr}, f"-lr{lr or 0:g}"),
        (a.sil_coef, {"sil_coef": a.sil_coef}, f"-sil{a.sil_coef:g}"),
        (a.finetune_pos_freqs, {"finetune_pos_freqs": a.finetune_pos_freqs},
         f"-ftpos{a.finetune_pos_freqs}"),
        (a.priority_levels != 8, {"priority_levels": a.priority_levels},
         f"-prio{a.priority_levels}"),
        (a.explore, {"explore": a.explore}, f"-explore{a.explore:g}"),
        (a.distill_steps, {"distill_steps": a.distill_steps, "distill_every": a.distill_every},
         f"-distill{a.distill_steps}e{a.distill_every}"),
        (a.pretrain_variants, {"pretrain_variants": a.pretrain_variants},
         f"-ptvar{a.pretrain_variants}"),
        (a.finetune_imitate, {"finetune_imitate": True} | ({"finetune_imitate_steps": ft} if fts
                                                           else {}), f"-ftimitate{fts}"),
    ) if on]  # fmt: skip
    root = args.results / (f"{args.task}-{args.cluster}" + "".join(f for _, f in named))
    budget = {k: getattr(args, k) for k in ("pretrain_steps", "finetune_steps", "scratch_steps")}
    for values, _ in named:
        budget.update(values)
    settings = root / "settings.json"
    if settings.is_file() and json.loads(settings.read_text()) != budget:
        say(f"{root} holds cells of other budgets ({settings}); use another --results")
        return 2
    write_json_atomic(settings, budget)
    for fam in args.families:  # family-major: each family's stages run back to back
        for stage in (st for st in (*STAGES, PLAIN) if st in args.stages):
            path = root / f"{fam}-{stage}-s{args.seed}.json"
            if path.is_file():
                say(f"{fam}/{stage}: done before, skipped")
                continue
            pre = root / f"{fam}-pretrain-s{args.seed}.json"
            if stage in ("zeroshot", "finetune") and not pre.is_file():
                say(f"{fam}/{stage} needs {fam}'s pre-training: add pretrain to --stages")
                return 2
            say(f"{fam}/{stage}: running")
            cell = run_cell(stage, fam, args, root)
            write_json_atomic(path, {**cell, "command": command, "machine": machine_info()})
            say(f"{fam}/{stage}: {cell['seconds']:.0f} s")
    text = report(root, args, whole_command(sys.argv[1:] if argv is None else argv))
    # seed 0's report keeps the name docs link to; other seeds get their own
    (root / ("report.md" if args.seed == 0 else f"report-s{args.seed}.md")).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
