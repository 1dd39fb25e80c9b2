"""GO's transfer protocol, leave one family out: pre-train on five model families, then place
the sixth zero-shot and fine-tuned, against a policy trained from scratch and the classical
baselines.

GO (Zhou et al., NeurIPS 2020) pre-trains one policy on graphs of several families and reports
it on a held-out one, zero-shot and after fine-tuning. Here, per held-out family F of the
suite's six (``actorq graphopt list``), with the smallest graph of each family (1-2k ops: what a
2-core CPU trains in minutes):

* ``pretrain``: ``actorq train go`` on the five other families' graphs (``--pretrain-steps``
  whole-graph decisions, int8 actors, the sync backend: deterministic for a seed);
* ``zeroshot``: that policy's greedy decision on F's graph, int8 (no step on F);
* ``finetune``: ``--init-from`` the pre-trained run, ``--finetune-steps`` decisions on F's graph;
* ``scratch``: a fresh policy, ``--scratch-steps`` decisions on F's graph;
* ``baselines``: single device, the human-expert split, METIS+critical path, HEFT, HEFT with a
  cut cost, m-ETF, and random search, simulated annealing, hill climbing (annealing's moves at
  zero temperature) and HEFT with searched per-edge cut costs (``heft-search``; cells from
  before it lack it) given as many simulator calls as ``scratch`` made, and as fine-tuning made
  (``@ft``).

``--imitate B --imitate-steps N`` gives the fresh runs (``pretrain`` and ``scratch``) GO's
imitation warm start (``GOConfig.imitate``): before the first snapshot, the placement head is fit
to baseline B's placements of the run's training graphs (``best``: the fastest of HEFT, m-ETF,
METIS+cp, the expert split and the single device per graph; folders of runs from before the single
device was a candidate are named ``imitate-best-N``, newer ones ``imitate-best5-N``; in the joint
task every head is fit to the baseline's whole decision, fusion included). ``finetune`` starts
from the pre-trained policy without imitating the held-out graph (unless ``--finetune-imitate``),
so zero-shot and fine-tuned see nothing of it but its PPO decisions. ``--reference R`` sets every
GO run's reference decision, whose priorities schedule the placement task's decisions: ``heft``
runs them in HEFT's upward-rank order, as random search and annealing run theirs (folder
``<task>-<cluster>-refR-...``). In the joint task the baselines add ``best+fuse`` (greedy fusion
of the best classical decision), and annealing starts from it. PPO's default learning rate undoes an
imitation in its first update (docs/graphopt.md): ``--learning-rate`` sets every GO run's,
``--finetune-learning-rate`` fine-tuning's alone. Cells with imitation or another learning rate
live in their own folder (``<task>-<cluster>-imitate-B-N-lrX-ftlrY``) and their settings say so:
they never mix with cells of other settings.

``--explore P`` (``GOConfig.explore``, folder ``...-exploreP``) makes a share P of the held-out
graph's runs' decisions (fine-tuning and from scratch) annealing's run moves from each actor's
incumbent, kept out of PPO and taught through self-imitation: per-op samples almost never make
the coherent moves of whole runs of ops that annealing's wins come from. Pre-training does not
explore: its search results are specific to its graphs, and pulling the policy toward them made
its greedy decisions worse (4 PCIe GPUs, inception held out: the training graphs' gain over
HEFT fell from +0.10 to -0.13). ``--pretrain-explore`` (folder ``...-ptexplore``) makes it
explore too, for policies that decide from a start (``--start``): there the moves edit each
training graph's start, and self-imitation teaches the edits that won; ``--pretrain-max-ops N``
(folder ``...-ptmaxN``) pre-trains on every graph of the five families with at most N ops, not
only each one's smallest; ``--pretrain-variants K`` (folder ``...-ptvarK``) adds K seeded
variants of each of the five families (``<family>-v0`` ..., depth, width, length and batch drawn
around its smallest graph): GO's many training graphs per family; ``--pretrain-extra DIR``
(folder ``...-ptextraN``) adds every ``.npz`` graph in DIR (N of them), graphs of other
architectures that are never held out (``benchmarks/go_more_families.py`` imports them from
Hugging Face ``transformers``): more families to generalise from. ``--pretrained-in FOLDER``
takes the pre-training cells and runs from another results folder instead of training them
again, after checking that their run configuration is the one this command's would be (what
fine-tuning ablations share).
``--explore-guided`` (folder ``...-guided``) draws each run move's device from the policy
(``GOConfig.explore_guided``) rather than uniformly; ``--explore-cut F`` (folder ``...-cutF``)
makes a fraction F of the exploring decisions candidates of a search over HEFT's per-edge cut
costs (``GOConfig.explore_cut``, the ``heft-search`` baseline run by each actor, its placements
put into the incumbent) instead of run moves. ``--pos-freqs K`` (folder ``...-posK``)
gives every stage's network Fourier features of each op's position (``GOConfig.pos_freqs``), so
imitation and distillation can fit a split exactly; ``--finetune-pos-freqs K`` (folder
``...-ftposK``) gives them to fine-tuning and from-scratch only, pre-training without them
(fine-tuning starts the octaves' weights at zero, so zero-shot is the plain network's).
``--start B`` (folder ``...-startB``) makes every stage's policy decide from baseline B's
placement of each graph (``GOConfig.start``, Placeto's formulation; ``best`` as ``--imitate``
picks it): zero-shot then reads the held-out graph and its best classical placement, which
costs the ``zeroshot`` cell's ``start.sim_calls`` simulator calls. ``--priority-levels N``
(folder ``...-prioN``) gives every stage's priority head N levels instead of 8 (joint task;
``benchmarks/go_priority_levels.py`` measures what 8 cost).

The held-out family's other graphs (its larger sizes, up to 107k ops) have two more stages, run
only when named in ``--stages``: ``larger`` (per graph, the classical baselines with the search
ones at fine-tuning's budget, reused from another folder of the same task and cluster where it
ran them, and the pre-trained policy's zero-shot decision, whether it fits and if not why) and
``larger-finetune`` (the pre-trained policy fine-tuned on the graph as on the smallest);
``--held-out-max-ops N`` takes the graphs of at most N ops. The report adds their table.

Every step time is the simulator's, penalised when the placement does not fit
(:func:`actorq.graphopt.baselines.penalized`), so infeasible decisions rank last. Per family
the fine-tune curve is compared with the from-scratch one: the decisions fine-tuning needed to
reach the from-scratch policy's final step time (GO's "converges faster" claim). With
``--imitate`` the from-scratch run starts by imitating the held-out graph's best classical
decision; ``--stages scratch-plain`` (only when named) adds GO's own from-scratch baseline, a
fresh network without that warm start, and the report compares fine-tuning with it too.

Cells (one JSON per (cluster, task, family, stage, seed) under ``<results>/``, written
atomically when done) make the run resumable; a cell whose JSON exists is skipped; ``--stages``
runs only some stages now (every family's fine-tuning first, the from-scratch runs later). After the
cells, a Markdown table goes to stdout and ``<results>/report.md`` (``report-sN.md`` for
``--seed N`` > 0); when the folder holds other seeds run to the end, the report adds their
geomeans and the spread.

    .venv/bin/python benchmarks/go_transfer.py                       # all six families
    .venv/bin/python benchmarks/go_transfer.py --stages larger       # then their larger graphs
    .venv/bin/python benchmarks/go_transfer.py --families gnmt --pretrain-steps 512 \\
        --finetune-steps 128 --scratch-steps 256 --results /tmp/go_smoke   # a quick smoke run
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from actorq.agents.go.targets import BEST_OF, CHOICES
from actorq.graphopt.baselines import REFERENCES, SEARCH
from peers import machine_info, read_metrics_csv, say, write_json_atomic

FAMILIES = ("inception", "resnet", "gnmt", "transformer-xl", "wavenet", "rnnlm")
#: The classical baselines (cells from before heft-cut joined lack it: reports skip what a cell
#: lacks)
BASELINES = ("single", "expert", "metis+cp", "heft", "heft-cut", "m-etf")
#: ``beta`` of the zero-shot decision decoded by HEFT guided by the policy (``GraphTask.guided``)
GUIDE_BETAS = (0.25, 1.0, 4.0)
#: The joint task decides fusion too: its table adds greedy fusion of the best classical
#: decision, and annealing starts from that (``run_baselines``' order).
FUSED = ("best+fuse",)


#: Table headings of the baselines whose names are abbreviations.
PRETTY = {"metis+cp": "METIS+cp", "heft": "HEFT", "heft-cut": "HEFT-cut", "m-etf": "m-ETF"}


def baseline_names(task: str) -> tuple[str, ...]:
    return (*BASELINES, *(FUSED if task == "joint" else ()))


@functools.cache
def num_ops(name: str) -> int:
    """A suite graph's op count (the graph built and cached on first use; read once per
    process: sorting a family by size would otherwise load its 107k-op graphs again)."""
    from actorq.graphopt.suite import get_graph

    return get_graph(name).num_ops


def placement_folder(folder: Path) -> tuple[dict[str, Any], str] | None:
    """A placement results folder's settings and cluster (the folder is named
    ``placement-<cluster>-...``, presets ``<N>xgpu-<link>``); None, said, if it is not one."""
    settings = folder / "settings.json"
    if not settings.is_file() or not folder.name.startswith("placement-"):
        say(f"{folder}: not a go_transfer placement folder (no settings.json)")
        return None
    return json.loads(settings.read_text()), "-".join(folder.name.split("-")[1:3])


def smallest(family: str) -> str:
    """The family's smallest suite graph."""
    from actorq.graphopt.suite import suite_names

    return min(suite_names(family), key=num_ops)


def held_out_graphs(family: str, max_ops: int = 0) -> list[str]:
    """The held-out family's other suite graphs (all but its smallest, which the main cells
    use), by size; with ``max_ops``, those of at most that many ops."""
    from actorq.graphopt.suite import suite_names

    names = sorted(suite_names(family), key=num_ops)[1:]
    return [n for n in names if not max_ops or num_ops(n) <= max_ops]


def pretrain_graphs(
    held_out: str, max_ops: int = 0, variants: int = 0, extra: tuple[str, ...] = ()
) -> list[str]:
    """Pre-training's graphs: each other family's smallest, and with ``max_ops`` every other
    suite graph of those families with at most that many ops (after the five smallest, family by
    family, each family's by size), then with ``variants`` that many seeded variants of each
    other family (``<family>-v0`` ..., :func:`actorq.graphopt.suite.variant`), then the graph
    files ``extra`` (other architectures, in pre-training whichever family is held out)."""
    from actorq.graphopt.suite import PREFIX, suite_names

    others = [f for f in FAMILIES if f != held_out]
    by_size = {f: sorted(suite_names(f), key=num_ops) for f in others}
    out = [by_size[f][0] for f in others]
    if max_ops:
        for f in others:
            out += [n for n in by_size[f][1:] if num_ops(n) <= max_ops]
    for f in others:
        out += [f"{PREFIX[f]}-v{i}" for i in range(variants)]
    return out + list(extra)


def extra_graphs(folder: Path | None) -> tuple[str, ...]:
    """``--pretrain-extra``'s graph files: every ``.npz`` in ``folder``, by name."""
    return () if folder is None else tuple(str(p) for p in sorted(folder.glob("*.npz")))


def go_config(
    args: argparse.Namespace,
    run_dir: Path,
    graphs: list[str],
    steps: int,
    imitate: bool = False,
    **kw: Any,
) -> Any:
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
    if args.pos_freqs:
        kw.setdefault("pos_freqs", args.pos_freqs)
    if args.start != "none":
        kw.setdefault("start", args.start)
    if args.memory_input:
        kw.setdefault("memory_input", True)
    if args.cost_input:
        kw.setdefault("cost_input", True)
    if args.priority_levels != 8:
        kw.setdefault("priority_levels", args.priority_levels)
    kw.setdefault("precision", "int8")  # the actors the committed results were made with
    return GOConfig(
        env=f"graphopt:{args.task}/{graphs[0]}",
        graphs=tuple(graphs[1:]),
        cluster=args.cluster,
        actors=0,
        total_steps=steps,
        eval_every=max(1, steps // args.curve_points),
        seed=args.seed,
        run_dir=str(run_dir),
        progress=False,
        energy=False,
        log_every=30.0,
        **kw,
    )


def run_learner_on(run_dir: Path, env: str) -> tuple[Any, Any, Any]:
    """A GO run's final weights in a learner for one graph (``env``, graphopt:<task>/<graph>):
    the learner (its ``model`` and ``tasks[0]``, the graph's
    :class:`~actorq.agents.go.actor.GraphTask`), the run's config for that graph and its env
    spec."""
    import dataclasses

    from actorq.agents.go.builder import BUILDER
    from actorq.run import load_run_config

    saved: Any = load_run_config(run_dir)
    cfg = dataclasses.replace(saved, env=env, graphs=(), init_from=str(run_dir))
    spec = BUILDER.env_spec(cfg)
    return BUILDER.make_learner(cfg, spec), cfg, spec  # the run's weights, via init_from


def run_policy_on(run_dir: Path, env: str) -> tuple[Any, Any]:
    """A GO run's final policy on one graph (``env``, graphopt:<task>/<graph>): the
    :class:`~actorq.agents.go.actor.GraphTask` it decides on and the policy's snapshot maker."""
    from actorq.agents.go.builder import BUILDER

    learner, cfg, spec = run_learner_on(run_dir, env)
    return learner.tasks[0], BUILDER.policy_io(cfg, spec, learner)


def step_times(run_dir: Path, graph: str, args: argparse.Namespace) -> dict[str, Any]:
    """The run's final policy, greedy at int8 and fp32, on ``graph``: penalised step times and
    the number of devices each decision uses."""
    from actorq.agents.go.actor import decode_snapshot
    from actorq.agents.go.inputs import OnnxGOPolicy

    task, io = run_policy_on(run_dir, f"graphopt:{args.task}/{graph}")
    out: dict[str, Any] = {"reference_time": task.env.reference_time}
    if task.start is not None:  # the placement the policy decided from, and what it cost
        s = task.start
        out["start"] = {"baseline": s.baseline, "time": s.time, "sim_calls": s.sim_calls}
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
    m = {k.partition("/")[2]: v[0][1] for k, v in read_metrics_csv(run_dir / "metrics.csv").items()
         if k.startswith("imitate/")}  # fmt: skip
    if not m:
        return {}
    state = json.loads((run_dir / "checkpoint" / "state.json").read_text())
    return {**m, "graphs": state["learner"].get("imitation", [])}


def curve(run_dir: Path, reference_time: float) -> list[list[float]]:
    """``[[decisions, step time], ...]`` of a single-graph run's periodic evaluations."""
    pts = read_metrics_csv(run_dir / "metrics.csv").get("charts/eval_return", [])
    return [[float(step), reference_time * (1.0 - v)] for step, v, _ in pts]


def train_or_resume(cfg: Any) -> Any:
    """``train(cfg)``, or its resume where a cell was stopped mid-run (its run directory holds
    a checkpoint): a stopped cell goes on from its last checkpoint instead of failing on the
    run directory it left behind."""
    import dataclasses

    from actorq.experiment import train

    if (Path(cfg.run_dir) / "checkpoint").is_dir():
        say(f"resuming {cfg.run_dir}")
        cfg = dataclasses.replace(cfg, resume=cfg.run_dir)
    return train(cfg)


def run_cell(stage: str, family: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    held = smallest(family)
    train_graphs = pretrain_graphs(
        family, args.pretrain_max_ops, args.pretrain_variants, extra_graphs(args.pretrain_extra)
    )
    runs = root / "runs"
    pre_dir = pretrain_dir(args, root, family)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"stage": stage, "family": family, "graph": held}
    if stage == "pretrain" and args.pretrained_in is not None:
        return reused_pretrain(args, family, train_graphs)
    if stage == "pretrain":
        r = train_or_resume(pretrain_config(args, pre_dir, train_graphs))
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
    stage: str,
    graph: str,
    rd: Path,
    pre_dir: Path,
    args: argparse.Namespace,
    warm_start: bool = True,
) -> dict[str, Any]:
    """A fine-tuning (from ``pre_dir``'s policy) or from-scratch run on one held-out graph,
    with the command's settings for the held-out graph's runs; its greedy step times, curve,
    best decision found and warm start (``warm_start=False``: a from-scratch run without the
    imitation warm start, GO's own from-scratch baseline)."""
    steps = args.finetune_steps if stage == "finetune" else args.scratch_steps
    kw: dict[str, Any] = {}
    if stage == "finetune":
        kw["init_from"] = str(pre_dir)
        if args.finetune_learning_rate is not None:
            kw["learning_rate"] = args.finetune_learning_rate
    kw.update(explore_kw(args))
    if args.distill_steps:
        kw.update(distill_steps=args.distill_steps, distill_every=args.distill_every)
    if args.finetune_pos_freqs:  # octaves for the held-out graph's runs only
        kw["pos_freqs"] = args.finetune_pos_freqs
    warm = warm_start if stage == "scratch" else args.finetune_imitate
    if stage == "finetune" and args.finetune_imitate_steps is not None:
        kw["imitate_steps"] = args.finetune_imitate_steps
    if stage == "finetune" and args.finetune_imitate_guide:
        kw["imitate_guide"] = args.finetune_imitate_guide
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
    """Each baseline's penalised step time on ``graph`` (the search ones given ``budget``
    simulator calls, from the best classical start; ``search_only``: only those)."""
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


def larger_cell(stage: str, graph: str, seed: int) -> str:
    """The file name of a larger stage's cell (graph names are unique across families)."""
    return (
        f"larger-{graph}-s{seed}.json"
        if stage == "larger"
        else f"larger-tuned-{graph}-s{seed}.json"
    )


def sibling_baselines(
    root: Path, graph: str, args: argparse.Namespace
) -> tuple[dict[str, Any], str] | None:
    """``graph``'s baselines from another folder of the same task and cluster whose larger cell
    ran them with this seed and budget (a 77k-op graph's three searches take ~10 min), and
    that folder's name; None if there is none."""
    for other in sorted(root.parent.glob(f"{args.task}-{args.cluster}-*")):
        p = other / larger_cell("larger", graph, args.seed)
        if other == root or not p.is_file():
            continue
        c = json.loads(p.read_text())
        # the cluster recorded (in the cell, or in its command for cells from before that),
        # not the folder's name: "4xgpu" would match 4xgpu-nvlink's too
        cmd = c.get("command", "").split()
        cluster = c.get("cluster") or next(
            (b for a, b in itertools.pairwise(cmd) if a == "--cluster"), "4xgpu-pcie"
        )
        same = cluster == args.cluster and c.get("budget") == args.finetune_steps
        if same and "baselines_from" not in c:
            return c["baselines"], other.name
    return None


def run_larger(
    stage: str, family: str, graph: str, args: argparse.Namespace, root: Path
) -> dict[str, Any]:
    """One of the held-out family's other graphs (``--held-out-max-ops``): ``larger`` is the
    classical baselines (search at fine-tuning's budget) and the pre-trained policy's zero-shot
    decision; ``larger-finetune`` fine-tunes the pre-trained policy on it as on the smallest."""

    t0 = time.perf_counter()
    pre_dir = pretrain_dir(args, root, family)
    out: dict[str, Any] = {"stage": stage, "family": family, "graph": graph,
                           "cluster": args.cluster, "ops": num_ops(graph)}  # fmt: skip
    if stage == "larger":
        done = sibling_baselines(root, graph, args)
        if done is not None:  # the classical ones do not depend on GO's settings
            out["baselines"], out["baselines_from"] = done
        else:
            out["baselines"] = baseline_times(graph, args, args.finetune_steps)
        out["budget"] = args.finetune_steps
        out["zeroshot"] = step_times(pre_dir, graph, args)
    else:
        rd = root / "runs" / f"finetune-{graph}-s{args.seed}"
        out["finetune"] = held_out_run("finetune", graph, rd, pre_dir, args)
    out["seconds"] = time.perf_counter() - t0
    return out


def explore_kw(args: argparse.Namespace) -> dict[str, Any]:
    """GOConfig's exploration settings from --explore and its options (none without it)."""
    if not args.explore:
        return {}
    return {
        "explore": args.explore,
        "explore_sil": not args.no_explore_sil,
        "explore_guided": args.explore_guided,
        "explore_cut": args.explore_cut,
    }


def pretrain_config(args: argparse.Namespace, run_dir: Path, graphs: list[str]) -> Any:
    """The pre-training run's configuration: imitation warm start, and run moves only with
    --pretrain-explore (the held-out graph's runs explore with --explore alone)."""
    kw = explore_kw(args) if args.pretrain_explore else {}
    if args.pretrain_imitate_margin:
        kw["imitate_margin"] = args.pretrain_imitate_margin
    return go_config(args, run_dir, graphs, args.pretrain_steps, imitate=True, **kw)


def pretrain_dir(args: argparse.Namespace, root: Path, family: str) -> Path:
    """The pre-training run of ``family``'s cells (another folder's with --pretrained-in)."""
    return (args.pretrained_in or root) / "runs" / f"pretrain-{family}-s{args.seed}"


def reused_pretrain(args: argparse.Namespace, family: str, graphs: list[str]) -> dict[str, Any]:
    """``--pretrained-in F``: F's pre-training cell for ``family``, after checking that its
    run's configuration is the one this command's pre-training would run (SystemExit, one line,
    otherwise)."""
    import dataclasses

    from actorq.agents.go.config import GOConfig

    src = args.pretrained_in
    cell, run = src / f"{family}-pretrain-s{args.seed}.json", pretrain_dir(args, src, family)
    if not cell.is_file() or not (run / "config.json").is_file():
        raise SystemExit(f"--pretrained-in {src}: no finished pre-training of {family} seed "
                         f"{args.seed} there")  # fmt: skip
    ours = pretrain_config(args, run, graphs)
    saved = json.loads((run / "config.json").read_text())
    saved.pop("agent", None)
    theirs = GOConfig(**saved)
    skip = {"run_dir", "resume", "progress", "log_every"}
    diff = sorted(
        k for k, v in dataclasses.asdict(ours).items()
        if k not in skip and getattr(theirs, k) != v
    )  # fmt: skip
    if diff:
        raise SystemExit(f"--pretrained-in {src}: its {family} pre-training differs from this "
                         f"command's in {', '.join(diff)}")  # fmt: skip
    return {**json.loads(cell.read_text()), "reused_from": str(src)}


STAGES = ("baselines", "pretrain", "zeroshot", "finetune", "scratch")
#: Stages on the held-out family's other graphs, run only when named in --stages.
LARGER = ("larger", "larger-finetune")
#: GO's own from-scratch baseline, run only when named in --stages: the same settings as
#: ``scratch`` but a fresh network without the imitation warm start (``--imitate``), so the
#: reach goal is also judged against a policy that learns the graph from nothing, as GO's did.
PLAIN = "scratch-plain"


def geomean(x: list[float]) -> float:
    return float(math.exp(np.mean(np.log(x)))) if x else float("nan")


def read_cells(root: Path, fam: str, seed: int) -> dict[str, Any]:
    """The finished cells of one family and seed, by stage."""
    cells = {}
    for stage in STAGES:
        p = root / f"{fam}-{stage}-s{seed}.json"
        if p.is_file():
            cells[stage] = json.loads(p.read_text())
    return cells


def ratios(
    cells: dict[str, Any],
) -> tuple[float, float, float | None, float, float | None]:
    """One family's (expert / fine-tuned, best baseline / fine-tuned, the same at fine-tuning's
    simulator calls (None for cells from before ``anneal_ft``), zero-shot / fine-tuned, and the
    best of the protocol's baselines / fine-tuned: the classical ones, random search and
    annealing at fine-tuning's calls; hill climbing and ``heft-search``, added here, left out)."""
    b, zs, ft = cells["baselines"], cells["zeroshot"], cells["finetune"]
    # cells from before the joint task's fused baseline simply lack it
    fused = tuple(n for n in FUSED if n in b)
    # cells from before hill climbing joined the baselines lack it
    search = tuple(n for n in SEARCH if n in b)
    classical = tuple(n for n in BASELINES[1:] if n in b)
    best = min(b[n]["time"] for n in (*classical, *fused, *search))
    equal = None
    if "anneal_ft" in b:  # the best baseline at fine-tuning's number of simulator calls
        eq = min(b[f"{n}_ft"]["time"] for n in search)
        eq = min(eq, *(b[n]["time"] for n in (*classical, *fused)))
        equal = eq / ft["time_int8"]
    named = None
    if "anneal_ft" in b:
        named = min(b["random_ft"]["time"], b["anneal_ft"]["time"],
                    *(b[n]["time"] for n in (*classical, *fused))) / ft["time_int8"]  # fmt: skip
    t = ft["time_int8"]
    return b["expert"]["time"] / t, best / t, equal, zs["time_int8"] / t, named


def seed_geomeans(root: Path, families: list[str]) -> dict[int, tuple[float, float, float, float]]:
    """Per seed whose every family is done: the geomean speedup of fine-tuned GO over the expert
    split, over the best baseline and over the best at fine-tuning's simulator calls (NaN for
    cells from before those were run), and zero-shot's step time over fine-tuned's."""
    seeds = sorted({int(p.stem.rsplit("-s", 1)[1]) for p in root.glob("*-finetune-s*.json")})
    out = {}
    for seed in seeds:
        per = [read_cells(root, fam, seed) for fam in families]
        if all(len(c) == len(STAGES) for c in per):
            r = [ratios(c)[:4] for c in per]
            eq = [x[2] for x in r]
            out[seed] = (
                geomean([x[0] for x in r]),
                geomean([x[1] for x in r]),
                math.nan if None in eq else geomean([e for e in eq if e is not None]),
                geomean([x[3] for x in r]),
            )
    return out


def larger_report(root: Path, args: argparse.Namespace) -> list[str]:
    """The held-out families' other graphs (the larger stages' cells), if any were run."""
    names = baseline_names(args.task)
    rows: list[str] = []
    zs_best, zs_eq, zs_ft, ft_exp, ft_eq, small = [], [], [], [], [], []
    for fam in args.families:
        cells = read_cells(root, fam, args.seed)
        if "baselines" in cells and "zeroshot" in cells:  # the smallest graph, for comparison
            b = cells["baselines"]
            small.append(cells["zeroshot"]["time_int8"] / min(b[n]["time"] for n in names[1:]
                                                                if n in b))  # fmt: skip
        for graph in held_out_graphs(fam):  # every cell run, whatever this command's cap
            p = root / larger_cell("larger", graph, args.seed)
            if not p.is_file():
                continue
            c = json.loads(p.read_text())
            b, zs = c["baselines"], c["zeroshot"]["time_int8"]
            best = min(b[n]["time"] for n in names[1:])  # the classical ones (not single)
            eq = min(best, *(b[n]["time"] for n in SEARCH if n in b))
            zs_best.append(zs / best)
            zs_eq.append(zs / eq)
            tp = root / larger_cell("larger-finetune", graph, args.seed)
            ft = json.loads(tp.read_text())["finetune"]["time_int8"] if tp.is_file() else None
            if ft is not None:
                zs_ft.append(zs / ft)
                ft_exp.append(b["expert"]["time"] / ft)
                ft_eq.append(eq / ft)
            # cells from before a search baseline joined (heft-search) lack it: "-"
            cols = ["-" if n not in b else f"{1e3 * b[n]['time']:.1f}"
                    + ("" if b[n]["feasible"] else "*") for n in (*names, *SEARCH)]  # fmt: skip
            bad = " (does not fit)" if "infeasible_int8" in c["zeroshot"] else ""
            cols += [f"{1e3 * zs:.1f}{bad}", f"{zs / best:.3f}x",
                     "-" if ft is None else f"{1e3 * ft:.1f}"]  # fmt: skip
            rows.append(f"| {fam} ({graph}, {c['ops']:,} ops) | {' | '.join(cols)} |")
    if not rows:
        return []
    out = [
        "The held-out families' other graphs (`--stages larger larger-finetune`): the same "
        "pre-trained policy zero-shot, the classical baselines (search at fine-tuning's "
        f"{args.finetune_steps:,} simulator calls), and the pre-trained policy fine-tuned on "
        "each graph as on the smallest (`-` where not run); ms, `*` where a baseline's "
        "placement does not fit (penalised):",
        "",
        "| held-out family (graph) | "
        + " | ".join(PRETTY.get(n, n) for n in names)
        + "".join(f" | {n} @ft" for n in SEARCH)
        + " | GO zero-shot "
        "| zero-shot / best classical | GO fine-tuned |",
        "|---|" + "---:|" * (len(names) + len(SEARCH) + 3),
        *rows,
        "",
        f"Geomean over {len(zs_best)} graphs: zero-shot takes {geomean(zs_best):.3f}x the best "
        f"classical placement's step time and {geomean(zs_eq):.3f}x the best at fine-tuning's "
        "simulator calls"
        + (
            f" (on the families' smallest graphs, the main table: {geomean(small):.3f}x the "
            "best classical)"
            if small
            else ""
        )
        + "."
        + (
            f" Fine-tuned on {len(zs_ft)} of them: {100 * (geomean(ft_exp) - 1):+.1f}% vs the "
            f"expert split, {100 * (geomean(ft_eq) - 1):+.1f}% vs the best at equal simulator "
            f"calls; zero-shot {geomean(zs_ft):.3f}x fine-tuned's step time."
            if zs_ft
            else ""
        ),
        "",
    ]
    return out


def decisions_to_reach(zs: dict[str, Any], ft: dict[str, Any], target: float) -> float | None:
    """Fine-tuning's decisions until its greedy step time first reaches ``target`` (zero-shot
    is its curve's start, at 0), or None if it never does."""
    ft_curve = [[0.0, zs["time_int8"]], *ft["curve"]]
    return next((s for s, t in ft_curve if t <= target * 1.0001), None)


def plain_report(root: Path, args: argparse.Namespace) -> list[str]:
    """The reach goal judged against GO's own from-scratch baseline (``scratch-plain`` cells:
    a fresh network without the imitation warm start), where a family's cells have one."""
    rows, hits, every = [], 0, 0.0
    for fam in args.families:
        cells = read_cells(root, fam, args.seed)
        p = root / f"{fam}-{PLAIN}-s{args.seed}.json"
        if not p.is_file() or not {"zeroshot", "finetune", "scratch"} <= cells.keys():
            continue
        plain, zs, ft, sc = (
            json.loads(p.read_text()),
            *(cells[k] for k in ("zeroshot", "finetune", "scratch")),
        )
        reach = decisions_to_reach(zs, ft, plain["time_int8"])
        tenth = reach is not None and reach <= plain["decisions"] / 10
        hits += tenth
        # the warm-started from-scratch run's decisions to the same step time: how much of
        # fine-tuning's lead the warm start alone gives, without pre-training
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
        f"{max(1, args.finetune_steps // args.curve_points):,}.",
        "",
    ]


def guided_report(root: Path, args: argparse.Namespace) -> list[str]:
    """Zero-shot through HEFT guided by the policy (``guided_int8`` in the zero-shot cells,
    written since that decoding exists) beside the argmax, HEFT, the best classical
    decision and fine-tuned, where a family's cells have them."""
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
    """The command that makes every cell of a report: ``argv`` without ``--stages`` and
    ``--families`` (which only pick what one invocation runs now), so a report regenerated
    with ``--stages baselines`` does not tell its reader to run the baselines alone."""
    keep: list[str] = []
    skipping = False
    for a in argv:
        if a.startswith("--"):
            skipping = a.split("=")[0] in ("--stages", "--families")
            if skipping:
                continue
        elif skipping:
            continue
        keep.append(a)
    return "python benchmarks/go_transfer.py " + " ".join(keep)


def report(root: Path, args: argparse.Namespace, command: str) -> str:
    rows, ft_gain, ft_best, zs_gap, ft_equal, ft_named = [], [], [], [], [], []
    found: list[float] = []  # fine-tuning's best decision per family (its search result)
    # the table's numeric columns: every baseline's (HEFT with a cut cost, and the fusing
    # baselines of the joint task, included), the searches', then GO's
    # searches: (heading, cell key), at from-scratch's budget and at fine-tuning's ("-" where
    # an older cell lacks one)
    searches = [(n + at, n + key) for n in SEARCH for at, key in (("", ""), (" @ft", "_ft"))]
    numeric = [PRETTY.get(n, n) for n in baseline_names(args.task)]
    numeric += [head for head, _ in searches] + ["GO zero-shot"]
    numeric += ["GO fine-tuned", "GO fine-tuned, best found", "GO scratch"]
    pre: list[str] = []  # per family: pre-training's own-graph gain (and imitation accuracy)
    extras = extra_graphs(args.pretrain_extra)
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
        found.append(ft.get("best_sampled") or ft["time_int8"])
        cols += [ms(sc, "time_int8")]
        scratch_n = sc["decisions"]
        reached = "-" if reach is None else f"{reach:,.0f} / {scratch_n:,}"
        rows.append(f"| {fam} ({b['graph']}) | {' | '.join(cols)} | {reached} |")
        gain, vs_best, equal, gap, vs_named = ratios(cells)
        ft_gain.append(gain)
        ft_best.append(vs_best)
        if equal is not None:
            ft_equal.append(equal)
        if vs_named is not None:
            ft_named.append(vs_named)
        zs_gap.append(gap)
        found[-1] = ft["time_int8"] / found[-1]  # the best found's speedup over the greedy
    head = [
        f"# GO transfer, leave one family out ({args.task}, {args.cluster}, seed {args.seed})",
        "",
        f"Command: `{command}`",
        "",
        f"Budgets (whole-graph decisions): pre-train {args.pretrain_steps:,} on the five other "
        "families' smallest graphs"
        + (
            f" and their other graphs of at most {args.pretrain_max_ops:,} ops"
            if args.pretrain_max_ops
            else ""
        )
        + (
            f", and {args.pretrain_variants} seeded variants of each (`<family>-v0`...)"
            if args.pretrain_variants
            else ""
        )
        + (
            f", and {len(extras)} graphs of other architectures (`{args.pretrain_extra}`: "
            + ", ".join(Path(g).stem for g in extras)
            + ")"
            if extras
            else ""
        )
        + f"; fine-tune {args.finetune_steps:,}; from scratch "
        f"{args.scratch_steps:,}; random search, annealing and hill climbing (annealing's "
        f"moves at zero temperature, from the same start) {args.scratch_steps:,} simulator "
        f'calls ("@ft": {args.finetune_steps:,}, fine-tuning\'s). Step times in ms '
        "(simulated, penalised when infeasible); GO columns are the greedy int8 decision, "
        'except "best found": the fastest decision fine-tuning\'s actors simulated (sampled, '
        "or with --explore moved)."
        + (
            " The joint task decides fusion too: best+fuse is greedy fusion on the best "
            "classical decision, and annealing starts from it."
            if args.task == "joint"
            else ""
        )
        + (
            ""
            if args.imitate == "none"
            else f" Pre-training and from-scratch runs start with {args.imitate_steps:,} "
            f"steps imitating `{args.imitate}`'s "
            + (
                "decisions (placement, priorities as levels, greedy fusion where faster)"
                if args.task == "joint"
                else "placements"
            )
            + (
                ", and so does fine-tuning, from the pre-trained weights, on the held-out graph"
                + (
                    "."
                    if args.finetune_imitate_steps is None
                    else f" ({args.finetune_imitate_steps:,} steps)."
                )
                if args.finetune_imitate
                else " (fine-tuning does not imitate)."
            )
        )
        + ("" if args.learning_rate is None else f" PPO learning rate {args.learning_rate:g}.")
        + ("" if not args.sil_coef else f" Self-imitation, coefficient {args.sil_coef:g}.")
        + (
            ""
            if not args.explore
            else f" {100 * args.explore:g}% of "
            + ("pre-training's, " if args.pretrain_explore else "")
            + "fine-tuning's and from-scratch's decisions are run moves from the actor's "
            "incumbent (annealing's move; not PPO samples, taught through self-imitation)"
            + ("." if args.pretrain_explore else "; pre-training does not explore.")
            + (
                " Self-imitation follows the policy's own samples only (--no-explore-sil)."
                if args.no_explore_sil
                else ""
            )
            + (
                " The moves' devices are drawn from the policy (--explore-guided)."
                if args.explore_guided
                else ""
            )
        )
        + (
            ""
            if not args.distill_steps
            else f" The held-out graph's runs distill the best decision found into the policy "
            f"({args.distill_steps} steps, at the end and every {args.distill_every:,} "
            "decisions)."
        )
        + (
            ""
            if args.reference == "expert"
            else f" GO's decisions are judged with `{args.reference}`'s priorities (the "
            "placement task's schedule) and rewarded relative to its step time."
        )
        + (
            ""
            if args.start == "none"
            else f" Every policy decides from `{args.start}`'s placement of its graph (an "
            "input of the network, Placeto's formulation; --start)."
        )
        + (
            " Every policy reads each graph's memory need against a device's capacity "
            "(--memory-input)."
            if args.memory_input
            else ""
        )
        + (
            " Every policy reads each graph's costs as shares of its own total (--cost-input)."
            if args.cost_input
            else ""
        )
        + (
            " Pre-training imitates, per graph, the candidate on the fewest devices within "
            f"{100 * args.pretrain_imitate_margin:g}% of the fastest's step time "
            "(--pretrain-imitate-margin)."
            if args.pretrain_imitate_margin
            else ""
        )
        + (
            " Fine-tuning's imitation also weighs the pre-trained policy's decision decoded "
            f"through HEFT guided by it (beta {args.finetune_imitate_guide:g}; "
            "--finetune-imitate-guide) and imitates it where it is the fastest candidate."
            if args.finetune_imitate_guide
            else ""
        )
        + (
            f" Priority heads of {args.priority_levels} levels (--priority-levels)."
            if args.priority_levels != 8
            else ""
        )
        + (
            ""
            if args.finetune_learning_rate is None
            else f" Fine-tuning's learning rate {args.finetune_learning_rate:g}."
        ),
        "",
        "| held-out family (graph) | " + " | ".join(numeric) + " "
        "| fine-tune decisions to reach scratch's final / scratch's |",
        "|---|" + "---:|" * len(numeric) + "---|",
        *rows,
        "",
    ]
    if ft_gain:
        head += [
            f"Geomean over {len(ft_gain)} families: fine-tuned GO is "
            f"{100 * (geomean(ft_gain) - 1):+.1f}% faster than the expert split (speedup "
            f"{geomean(ft_gain):.3f}), {100 * (geomean(ft_best) - 1):+.1f}% vs the best "
            f"baseline per graph; zero-shot takes {geomean(zs_gap):.3f}x fine-tuned's step time."
            + (
                f" At equal simulator calls on the held-out graph (the search baselines "
                f"given fine-tuning's {args.finetune_steps:,}), fine-tuned GO is "
                f"{100 * (geomean(ft_equal) - 1):+.1f}% vs the best baseline per graph."
                if len(ft_equal) == len(ft_gain)
                else ""
            )
            + (
                " Against the protocol's baselines (the classical ones, random search, "
                "annealing at fine-tuning's calls; hill climbing and heft-search left out): "
                f"{100 * (geomean(ft_named) - 1):+.1f}%."
                if len(ft_named) == len(ft_gain)
                else ""
            )
            + (
                f" Fine-tuning's best found decision (the run's search result, within its "
                f"{args.finetune_steps:,} decisions) is "
                f"{100 * (geomean(ft_best) * geomean(found) - 1):+.1f}% vs the best baseline per "
                "graph"
                + (
                    f" and {100 * (geomean(ft_equal) * geomean(found) - 1):+.1f}% at equal "
                    "simulator calls."
                    if len(ft_equal) == len(ft_gain)
                    else "."
                )
            ),
            "",
            f"Pre-training's greedy gain over the reference (`{args.reference}`) on its own "
            "training graphs "
            f"(mean; the held-out family named): {'; '.join(pre)}.",
            "",
        ]
    head += larger_report(root, args)
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
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument(
        "--stages",
        nargs="+",
        default=list(STAGES),
        choices=(*STAGES, *LARGER, PLAIN),
        help="run only these stages' cells now (the rest stay to do: a later command without "
        "--stages runs them); e.g. every family's fine-tuning before the long from-scratch runs. "
        "larger: baselines and zero-shot on the held-out family's other graphs; "
        "larger-finetune: fine-tuning on them (both only when named); scratch-plain: a "
        "from-scratch run without the imitation warm start, GO's own baseline (only when named)",
    )
    ap.add_argument(
        "--held-out-max-ops",
        type=int,
        default=0,
        help="the larger stages take the held-out family's other graphs of at most this many "
        "ops (default 0: all of them, up to 107k ops)",
    )
    ap.add_argument("--cluster", default="4xgpu-pcie")
    ap.add_argument("--task", default="placement", choices=("placement", "joint"))
    ap.add_argument("--pretrain-steps", type=int, default=6_000)
    ap.add_argument("--finetune-steps", type=int, default=1_000)
    ap.add_argument("--scratch-steps", type=int, default=4_000)
    ap.add_argument("--curve-points", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--imitate",
        default="none",
        choices=CHOICES,
        help="imitation warm start of the fresh runs (pretrain, scratch)",
    )
    ap.add_argument("--imitate-steps", type=int, default=400)
    ap.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="PPO learning rate of every GO run (default: GOConfig's, 5e-4)",
    )
    ap.add_argument(
        "--sil-coef",
        type=float,
        default=0.0,
        help="self-imitation coefficient of every GO run (GOConfig.sil_coef; default off)",
    )
    ap.add_argument(
        "--finetune-learning-rate",
        type=float,
        default=None,
        help="fine-tuning's PPO learning rate (default: --learning-rate's)",
    )
    ap.add_argument(
        "--finetune-imitate",
        action="store_true",
        help="fine-tuning also starts with the warm start (on the held-out graph's baseline)",
    )
    ap.add_argument(
        "--finetune-imitate-steps",
        type=int,
        default=None,
        help="fine-tuning's warm-start steps (default: --imitate-steps); from pre-trained "
        "weights the fit takes longer (docs/graphopt-transfer.md)",
    )
    ap.add_argument(
        "--reference",
        default="expert",
        choices=REFERENCES,
        help="every GO run's reference decision (GOConfig.reference): the placement task "
        "schedules with its priorities and rewards relative to its step time; heft: HEFT's "
        "upward ranks, the schedule random search and annealing use (default: expert, "
        "topological order)",
    )
    ap.add_argument(
        "--explore",
        type=float,
        default=0.0,
        help="share of the held-out graph's runs' (fine-tuning, from scratch) decisions that "
        "are run moves from the actor's incumbent (GOConfig.explore; needs --sil-coef; "
        "default off); pre-training does not explore",
    )
    ap.add_argument(
        "--pretrain-explore",
        action="store_true",
        help="pre-training explores too, with --explore's share and options (folder "
        "...-ptexplore): with --start its run moves edit each training graph's start, and "
        "self-imitation teaches the edits that won",
    )
    ap.add_argument(
        "--pretrain-variants",
        type=int,
        default=0,
        help="pre-train also on this many seeded variants of each of the five families "
        "(<family>-v0 ...: depth, width, length and batch drawn around its smallest graph; "
        "folder ...-ptvarK; default 0)",
    )
    ap.add_argument(
        "--pretrain-extra",
        type=Path,
        default=None,
        metavar="DIR",
        help="pre-train also on every .npz graph in DIR, whichever family is held out "
        "(other architectures, e.g. benchmarks/go_more_families.py's imports; folder "
        "...-ptextraN)",
    )
    ap.add_argument(
        "--pretrain-max-ops",
        type=int,
        default=0,
        help="pre-train also on every other suite graph of the five families with at most this "
        "many ops (folder ...-ptmaxN; default 0: each family's smallest graph only)",
    )
    ap.add_argument(
        "--no-explore-sil",
        action="store_true",
        help="with --explore: self-imitation pulls toward the best policy sample only, the run "
        "moves are a search beside the policy (GOConfig.explore_sil)",
    )
    ap.add_argument(
        "--explore-guided",
        action="store_true",
        help="with --explore: each run move's device is drawn from the policy's placement "
        "probabilities (GOConfig.explore_guided), not uniformly",
    )
    ap.add_argument(
        "--explore-cut",
        type=float,
        default=0.0,
        help="with --explore: this fraction of the exploring decisions are candidates of a "
        "search over HEFT's per-edge cut costs instead of run moves (GOConfig.explore_cut; "
        "folder ...-cutF; default 0)",
    )
    ap.add_argument(
        "--distill-steps",
        type=int,
        default=0,
        help="the held-out graph's runs fit the policy to the best decision found, at the end "
        "and every --distill-every decisions (GOConfig.distill_steps; default off)",
    )
    ap.add_argument("--distill-every", type=int, default=0)
    ap.add_argument(
        "--finetune-imitate-guide",
        type=float,
        default=0.0,
        metavar="BETA",
        help="fine-tuning's --imitate best also weighs the pre-trained policy's decision "
        "decoded through HEFT guided by it (GOConfig.imitate_guide; folder -ftguideBETA)",
    )
    ap.add_argument(
        "--finetune-pos-freqs",
        type=int,
        default=0,
        help="position octaves for fine-tuning and from-scratch only: pre-training runs "
        "without them (zero-shot unchanged) and fine-tuning starts them at zero weights",
    )
    ap.add_argument(
        "--pos-freqs",
        type=int,
        default=0,
        help="Fourier features of each op's position, in octaves (GOConfig.pos_freqs; every "
        "stage, pre-training included: it changes the network); default 0, none",
    )
    ap.add_argument(
        "--start",
        default="none",
        choices=CHOICES,
        help="every stage's policy decides from this baseline's placement of each graph "
        "(GOConfig.start, Placeto's formulation; folder ...-startB); default none: GO's, "
        "from the graph alone",
    )
    ap.add_argument(
        "--memory-input",
        action="store_true",
        help="every stage's policy reads each graph's memory need against a device's capacity "
        "(GOConfig.memory_input; folder ...-mem)",
    )
    ap.add_argument(
        "--pretrain-imitate-margin",
        type=float,
        default=0.0,
        help="pre-training imitates, per graph, the --imitate best candidate on the fewest "
        "devices within 1 + M of the fastest (GOConfig.imitate_margin; fine-tuning and from "
        "scratch still imitate the fastest; folder ...-ptmarginM)",
    )
    ap.add_argument(
        "--cost-input",
        action="store_true",
        help="every stage's policy reads each graph's op and transfer times as shares of its "
        "total work (GOConfig.cost_input; folder ...-cost)",
    )
    ap.add_argument(
        "--priority-levels",
        type=int,
        default=8,
        help="levels of every stage's priority head (GOConfig.priority_levels; joint task; "
        "folder ...-prioN when not 8)",
    )
    ap.add_argument(
        "--pretrained-in",
        type=Path,
        default=None,
        help="take the pre-training cells and runs from this results folder instead of "
        "training them again (their run configuration must be the one this command's "
        "pre-training would run: checked)",
    )
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/go_transfer"))
    args = ap.parse_args(argv)
    command = "python benchmarks/go_transfer.py " + " ".join(sys.argv[1:] if argv is None else argv)
    folder = f"{args.task}-{args.cluster}"
    if args.reference != "expert":
        folder += f"-ref{args.reference}"
    if args.imitate != "none":
        # ``best``'s candidates grew (the single device joined): name them, so a folder's
        # cells never mix targets chosen among different candidates
        name = f"best{len(BEST_OF)}" if args.imitate == "best" else args.imitate
        folder += f"-imitate-{name}-{args.imitate_steps}"
    if args.learning_rate is not None:
        folder += f"-lr{args.learning_rate:g}"
    if args.finetune_learning_rate is not None:
        folder += f"-ftlr{args.finetune_learning_rate:g}"
    if args.sil_coef:
        folder += f"-sil{args.sil_coef:g}"
    if args.pos_freqs:
        folder += f"-pos{args.pos_freqs}"
    if args.finetune_pos_freqs:
        if args.pos_freqs:
            say(
                "--finetune-pos-freqs adds octaves to a pre-training without them: drop --pos-freqs"
            )
            return 2
        folder += f"-ftpos{args.finetune_pos_freqs}"
    if args.finetune_imitate_guide:
        if not (args.imitate == "best" and args.finetune_imitate
                and 0 < args.finetune_imitate_guide <= 1e6):  # fmt: skip
            say("--finetune-imitate-guide BETA needs --imitate best, --finetune-imitate and "
                "0 < BETA <= 1e6")  # fmt: skip
            return 2
        folder += f"-ftguide{args.finetune_imitate_guide:g}"
    if args.start != "none":
        folder += f"-start{args.start}"
    if args.memory_input:
        folder += "-mem"
    if args.cost_input:
        folder += "-cost"
    if args.pretrain_imitate_margin:
        if args.imitate != "best" or not 0 < args.pretrain_imitate_margin <= 10:
            say("--pretrain-imitate-margin M needs --imitate best and 0 < M <= 10")
            return 2
        folder += f"-ptmargin{args.pretrain_imitate_margin:g}"
    if args.priority_levels != 8:
        if not 2 <= args.priority_levels <= 256:
            say("--priority-levels: 2 to 256")
            return 2
        folder += f"-prio{args.priority_levels}"
    if args.explore:
        folder += f"-explore{args.explore:g}" + ("-nosil" if args.no_explore_sil else "")
        folder += "-guided" if args.explore_guided else ""
        folder += f"-cut{args.explore_cut:g}" if args.explore_cut else ""
        folder += "-ptexplore" if args.pretrain_explore else ""
    if args.distill_steps:
        folder += f"-distill{args.distill_steps}e{args.distill_every}"
    if min(args.pretrain_max_ops, args.held_out_max_ops, args.pretrain_variants) < 0:
        say("--pretrain-max-ops, --held-out-max-ops and --pretrain-variants must be >= 0")
        return 2
    if args.pretrain_variants > 1000:
        say("--pretrain-variants: at most 1000 per family")
        return 2
    if args.pretrain_max_ops:
        folder += f"-ptmax{args.pretrain_max_ops}"
    if args.pretrain_variants:
        folder += f"-ptvar{args.pretrain_variants}"
    extras = extra_graphs(args.pretrain_extra)
    if args.pretrain_extra is not None:
        if not extras:
            say(f"--pretrain-extra {args.pretrain_extra}: no .npz graph there")
            return 2
        folder += f"-ptextra{len(extras)}"
    if args.finetune_imitate_steps is not None and not args.finetune_imitate:
        say("--finetune-imitate-steps needs --finetune-imitate")
        return 2
    if (
        args.no_explore_sil or args.explore_guided or args.pretrain_explore or args.explore_cut
    ) and not args.explore:
        say("--no-explore-sil, --explore-guided, --explore-cut, --pretrain-explore need --explore")
        return 2
    if not 0 <= args.explore_cut <= 1:
        say("--explore-cut: a fraction in [0, 1]")
        return 2
    if args.finetune_imitate:
        if args.imitate == "none":
            say("--finetune-imitate needs --imitate")
            return 2
        folder += "-ftimitate"
        if args.finetune_imitate_steps is not None:
            folder += str(args.finetune_imitate_steps)
    root = args.results / folder
    budget = {k: getattr(args, k) for k in ("pretrain_steps", "finetune_steps", "scratch_steps")}
    if args.imitate != "none":  # settings without these keys are runs without imitation
        budget.update(imitate=args.imitate, imitate_steps=args.imitate_steps)
        if args.imitate == "best":
            budget["best_of"] = list(BEST_OF)
    if args.learning_rate is not None:
        budget["learning_rate"] = args.learning_rate
    if args.finetune_learning_rate is not None:
        budget["finetune_learning_rate"] = args.finetune_learning_rate
    if args.finetune_imitate:
        budget["finetune_imitate"] = True
    if args.finetune_imitate_steps is not None:
        budget["finetune_imitate_steps"] = args.finetune_imitate_steps
    if args.sil_coef:
        budget["sil_coef"] = args.sil_coef
    if args.reference != "expert":  # settings without the key: the expert reference
        budget["reference"] = args.reference
    if args.explore:
        budget["explore"] = args.explore
        if args.no_explore_sil:
            budget["explore_sil"] = False
        if args.explore_guided:
            budget["explore_guided"] = True
        if args.explore_cut:  # settings without the key: run moves only
            budget["explore_cut"] = args.explore_cut
        if args.pretrain_explore:
            budget["pretrain_explore"] = True
    if args.distill_steps:
        budget.update(distill_steps=args.distill_steps, distill_every=args.distill_every)
    if args.pos_freqs:
        budget["pos_freqs"] = args.pos_freqs
    if args.finetune_pos_freqs:
        budget["finetune_pos_freqs"] = args.finetune_pos_freqs
    if args.finetune_imitate_guide:  # settings without the key: no guided candidate
        budget["finetune_imitate_guide"] = args.finetune_imitate_guide
    if args.memory_input:
        budget["memory_input"] = True
    if args.cost_input:
        budget["cost_input"] = True
    if args.pretrain_imitate_margin:  # settings without the key: the fastest candidate
        budget["pretrain_imitate_margin"] = args.pretrain_imitate_margin
    if args.priority_levels != 8:  # settings without the key: 8 levels
        budget["priority_levels"] = args.priority_levels
    if args.start != "none":  # settings without the key: GO's policy, no start
        budget["start"] = args.start
    if args.pretrain_max_ops:  # settings without the key: the smallest graph per family
        budget["pretrain_max_ops"] = args.pretrain_max_ops
    if args.pretrain_variants:  # settings without the key: no variants
        budget["pretrain_variants"] = args.pretrain_variants
    if args.pretrain_extra is not None:  # settings without the key: no extra graphs
        budget["pretrain_extra"] = [Path(g).name for g in extras]
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
            if stage in ("zeroshot", "finetune") and not pre.is_file() and not args.pretrained_in:
                say(f"{fam}/{stage} needs {fam}'s pre-training: add pretrain to --stages")
                return 2
            say(f"{fam}/{stage}: running")
            cell = run_cell(stage, fam, args, root)
            write_json_atomic(path, {**cell, "command": command, "machine": machine_info()})
            say(f"{fam}/{stage}: {cell['seconds']:.0f} s")
        for stage in (st for st in LARGER if st in args.stages):
            pre = root / f"{fam}-pretrain-s{args.seed}.json"
            if not pre.is_file() and not args.pretrained_in:
                say(f"{fam}/{stage} needs {fam}'s pre-training: add pretrain to --stages")
                return 2
            for graph in held_out_graphs(fam, args.held_out_max_ops):
                path = root / larger_cell(stage, graph, args.seed)
                if path.is_file():
                    say(f"{graph}/{stage}: done before, skipped")
                    continue
                say(f"{graph}/{stage}: running")
                cell = run_larger(stage, fam, graph, args, root)
                write_json_atomic(path, {**cell, "command": command, "machine": machine_info()})
                say(f"{graph}/{stage}: {cell['seconds']:.0f} s")
    text = report(root, args, whole_command(sys.argv[1:] if argv is None else argv))
    # seed 0's report keeps the name docs link to; other seeds get their own
    (root / ("report.md" if args.seed == 0 else f"report-s{args.seed}.md")).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
