"""GO's zero-shot device logits decoded by a list scheduler instead of per-op argmax.

GO's one-shot policy decides every op's device independently; on a family it was not trained
on that decision is incoherent or wrong often enough that zero-shot runs 1.6-2.5x fine-tuned's
step time (docs/graphopt-transfer.md, "Why zero-shot is slow"), while HEFT, which places each
op where it would finish earliest given where its inputs are, needs no training and transfers by
construction. This script joins the two: HEFT's list scheduling (Topcuoglu et al., 2002) in
its upward-rank order, each op going to the device minimising

    earliest finish time(u, d) + beta * t_u * (-log p(d | u))

with ``p`` the pre-trained policy's device distribution for op ``u`` (greedy int8 ONNX, as
zero-shot is judged) and ``t_u`` the op's mean time over devices, so ``beta`` trades a
finish-time loss of ``t_u`` against an ``e``-fold drop in the policy's preference. ``beta`` 0
is HEFT; large ``beta`` the policy's argmax (placed one op at a time). No simulator call
judges a decision on the held-out graph before it is chosen: the scheduler reads the cost
model's op and transfer times, as HEFT does.

Reads a placement folder of ``benchmarks/go_transfer.py`` (its ``runs/pretrain-F-sN``) and
judges, per held-out family F, the policy's argmax, HEFT and the guided decodes on F's smallest
graph and, with ``--train``, on the five training families' smallest graphs (where ``beta``
may be chosen without looking at the held-out family). Fine-tuned step times come from
``--finetuned FOLDER``'s ``F-finetune-sN.json`` cells. Writes ``guided-decode-sN.json`` and
``.md`` into the folder and prints the table. ``--scheduler m-etf`` guides memory-bounded m-ETF
instead (files ``guided-decode-metf-sN``); ``--cut W`` gives HEFT a cut cost (each input edge
from another device costs W x its mean transfer time; files ``guided-decode-cutW-sN``), whose
``beta`` 0 column is that scheduler without the policy.

    .venv/bin/python benchmarks/go_guided_decode.py FOLDER --finetuned HEADLINE_FOLDER
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_transfer import BASELINES, FAMILIES, held_out_graphs, placement_folder, smallest
from peers import machine_info, say, write_json_atomic

BETAS = (0.0, 0.25, 1.0, 4.0, 16.0)
SCHEDULER_NAMES = {"heft": "HEFT", "m-etf": "m-ETF"}


def add_folder_args(p: argparse.ArgumentParser) -> None:
    """The arguments of a probe that reads a go_transfer placement folder's pre-trained runs
    and compares with fine-tuned cells."""
    p.add_argument("folder", type=Path, help="a go_transfer placement results folder")
    p.add_argument("--finetuned", type=Path, help="folder with the F-finetune-sN.json cells")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--finetuned-seed", type=int, help="seed of the --finetuned folder's cells "
                   "(default: --seed)")  # fmt: skip
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)


def open_folder(a: argparse.Namespace) -> tuple[str, str, list[str]] | None:
    """``add_folder_args``' folder: its cluster, its reference and the ``--families`` it has a
    seed-``--seed`` pre-trained run of (the others said and skipped); None, said, if it is not
    a placement folder or has none of them."""
    found = placement_folder(a.folder)
    if found is None:
        return None
    settings, cluster = found
    have = []
    for fam in a.families:
        if (a.folder / "runs" / f"pretrain-{fam}-s{a.seed}" / "checkpoint").is_dir():
            have.append(fam)
        else:
            say(f"{fam}: no pre-trained run in {a.folder}/runs, skipped")
    if not have:
        say("no pre-trained run of those families")
        return None
    return cluster, settings.get("reference") or "expert", have


def finetuned_cells(folder: Path, seed: int, rows: list[dict[str, Any]]) -> dict[str, float]:
    """Fine-tuned GO's int8 step time (ms) per held-out graph of ``rows`` (``family``,
    ``held_out``), where ``folder`` has the family's ``F-finetune-sN.json`` cell."""
    tuned = {}
    for r in rows:
        cell = folder / f"{r['family']}-finetune-s{seed}.json"
        if cell.is_file():
            tuned[r["held_out"]] = 1e3 * float(json.loads(cell.read_text())["time_int8"])
    return tuned


def finetuned_ms(a: argparse.Namespace, rows: list[dict[str, Any]]) -> tuple[int, dict[str, float]]:
    """The fine-tuned cells' seed and :func:`finetuned_cells` of the ``--finetuned`` folder (else
    the folder)."""
    seed = a.seed if a.finetuned_seed is None else a.finetuned_seed
    return seed, finetuned_cells(a.finetuned or a.folder, seed, rows)


def graph_row(
    task: Any, runtime: Any, betas: tuple[float, ...], scheduler: str = "heft", cut: float = 0.0
) -> dict[str, float]:
    """The policy's argmax and its guided decodings (:meth:`GraphTask.guided`), ms."""
    out = runtime(task.inputs)

    def ms(actions: np.ndarray) -> float:
        return 1e3 * float(task.judge(actions)[2]["score"])

    row = {"argmax": ms(task.decide(out, None)[0])}
    for b in betas:
        row[f"beta_{b:g}"] = ms(task.guided(out, b, scheduler, cut))
    return row


def family_rows(
    root: Path, fam: str, cluster: str, reference: str, seed: int, betas: tuple[float, ...],
    train: bool, larger_max_ops: int, scheduler: str, cut: float = 0.0,
) -> dict[str, Any]:  # fmt: skip
    from actorq.agents.go.actor import GraphTask
    from actorq.agents.go.inputs import InputSpec, OnnxGOPolicy
    from actorq.agents.go.networks import onnx_bytes
    from actorq.cli.graphopt import load_go_policy as load_policy
    from actorq.graphopt.cluster import get_cluster

    nd = get_cluster(cluster).num_devices
    model, info = load_policy(str(root / "runs" / f"pretrain-{fam}-s{seed}"), nd)
    runtime = OnnxGOPolicy(onnx_bytes(model, "int8"))
    spec = InputSpec.of_policy(model.config, info.start)
    graphs = [smallest(fam)] + ([smallest(f) for f in FAMILIES if f != fam] if train else [])
    rows = {}
    for g in graphs:
        task = GraphTask(g, "placement", cluster, reference, spec)
        rows[g] = graph_row(task, runtime, betas, scheduler, cut)
    larger = {}
    for g in held_out_graphs(fam, larger_max_ops) if larger_max_ops else []:
        say(f"  {g}")
        task = GraphTask(g, "placement", cluster, reference, spec)
        larger[g] = graph_row(task, runtime, betas, scheduler, cut)
    return {"family": fam, "held_out": smallest(fam), "graphs": rows, "larger": larger}


def report(
    res: list[dict[str, Any]], tuned: dict[str, float], classical: dict[str, float],
    meta: dict[str, Any],
) -> str:  # fmt: skip
    cols = ["argmax", *(f"beta_{b:g}" for b in meta["betas"])]
    sched = SCHEDULER_NAMES[meta.get("scheduler", "heft")]
    by = f"{sched}'s list scheduler"
    if meta.get("cut"):
        sched += f" with cut cost {meta['cut']:g}"
        by += f" with a cut cost of {meta['cut']:g}"
    names = [
        "GO argmax",
        *(f"beta {b:g}" + (f" ({sched})" if b == 0 else "") for b in meta["betas"]),
    ]
    lines = [
        f"# Zero-shot device logits decoded by {by} ({meta['cluster']}, seed {meta['seed']})",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Held-out graphs, step time ms (fine-tuned: the `--finetuned` folder's seed-"
        f"{meta['finetuned_seed']} cells):",
        "",
        "| held-out graph | " + " | ".join(names) + " | fine-tuned |",
        "|---|" + "---:|" * (len(cols) + 1),
    ]
    for r in res:
        g = r["held_out"]
        vals = " | ".join(f"{r['graphs'][g][c]:.1f}" for c in cols)
        ft = tuned.get(g)
        lines.append(f"| {g} | {vals} | {'-' if ft is None else f'{ft:.1f}'} |")
    rated = [r for r in res if r["held_out"] in tuned]
    if rated:
        gm = {c: float(np.exp(np.mean([np.log(r["graphs"][r["held_out"]][c] / tuned[r["held_out"]])
                                       for r in rated]))) for c in cols}  # fmt: skip
        lines.append(
            f"| geomean / fine-tuned ({len(rated)} graphs) | "
            + " | ".join(f"{gm[c]:.2f}x" for c in cols)
            + " | 1 |"
        )
    trains = [r for r in res if len(r["graphs"]) > 1]
    if trains:
        lines += ["", "Training graphs (the five other families' smallest), geomean step time / "
                  "the policy's argmax there, per held-out family:", "",
                  "| held out | " + " | ".join(names) + " |",
                  "|---|" + "---:|" * len(cols)]  # fmt: skip
        for r in trains:
            tg = [g for g in r["graphs"] if g != r["held_out"]]
            rel = [[np.log(r["graphs"][g][c] / r["graphs"][g]["argmax"]) for g in tg] for c in cols]
            gm = [float(np.exp(np.mean(x))) for x in rel]
            lines.append(f"| {r['family']} | " + " | ".join(f"{x:.3f}" for x in gm) + " |")
    big = [(g, row) for r in res for g, row in r["larger"].items()]
    if big:
        lines += ["", "The held-out families' larger graphs (penalised ms where a decision does "
                  "not fit); best classical: the fastest of the five deterministic baselines "
                  "(`--finetuned` folder's `larger` cells):", "",
                  "| graph | " + " | ".join(names) + " | best classical |",
                  "|---|" + "---:|" * (len(cols) + 1)]  # fmt: skip
        for g, row in big:
            bc = classical.get(g)
            lines.append(f"| {g} | " + " | ".join(f"{row[c]:.1f}" for c in cols)
                         + f" | {'-' if bc is None else f'{bc:.1f}'} |")  # fmt: skip
        rated_big = [(g, row) for g, row in big if g in classical]
        if rated_big:
            gmb = [float(np.exp(np.mean([np.log(row[c] / classical[g]) for g, row in rated_big])))
                   for c in cols]  # fmt: skip
            lines.append(f"| geomean / best classical ({len(rated_big)} graphs) | "
                         + " | ".join(f"{x:.2f}x" for x in gmb)
                         + " | 1 |")  # fmt: skip
    lines += ["", f"Machine: {meta['machine'].get('cpu_model', '?')}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_folder_args(p)
    p.add_argument("--betas", type=float, nargs="+", default=list(BETAS))
    p.add_argument(
        "--scheduler",
        default="heft",
        choices=tuple(SCHEDULER_NAMES),
        help="the list scheduler the logits guide (m-etf keeps its memory bound)",
    )
    p.add_argument(
        "--cut",
        type=float,
        default=0.0,
        metavar="W",
        help="HEFT's cut cost (each cut input edge costs W x its mean transfer time)",
    )
    p.add_argument("--train", action="store_true", help="judge the training graphs too")
    p.add_argument("--larger", type=int, default=0, metavar="MAX_OPS",
                   help="judge the held-out family's other graphs of at most MAX_OPS ops too, "
                   "beside the --finetuned folder's `--stages larger` baselines")  # fmt: skip
    a = p.parse_args(argv)
    if any(not np.isfinite(b) or b < 0 for b in a.betas):
        say(f"--betas must be finite and >= 0, got {a.betas}")
        return 2
    if not (np.isfinite(a.cut) and a.cut >= 0) or (a.cut and a.scheduler != "heft"):
        say(f"--cut must be finite, >= 0 and with --scheduler heft, got {a.cut}")
        return 2
    opened = open_folder(a)
    if opened is None:
        return 2
    cluster, reference, families = opened
    betas = tuple(a.betas)
    res = []
    for fam in families:
        say(f"{fam}: decoding")
        res.append(family_rows(a.folder, fam, cluster, reference, a.seed, betas, a.train,
                               a.larger, a.scheduler, a.cut))  # fmt: skip
    if not res:
        say("nothing to decode")
        return 2
    ref_seed, tuned = finetuned_ms(a, res)
    classical = {}  # the larger graphs' best classical step time, where cells have it
    for r in res:
        for g in r["larger"]:
            cell = (a.finetuned or a.folder) / f"larger-{g}-s{ref_seed}.json"
            if cell.is_file():
                b = json.loads(cell.read_text())["baselines"]
                classical[g] = 1e3 * min(b[n]["time"] for n in BASELINES if n in b)
    meta = {"cluster": cluster, "seed": a.seed, "finetuned_seed": ref_seed, "betas": betas,
            "scheduler": a.scheduler, "cut": a.cut,
            "machine": machine_info(),
            "command": "python benchmarks/go_guided_decode.py " + shlex.join(
                [str(x) for x in (argv if argv is not None else sys.argv[1:])])}  # fmt: skip
    text = report(res, tuned, classical, meta)
    stem = "guided-decode" + ("" if a.scheduler == "heft" else "-metf")
    stem += (f"-cut{a.cut:g}" if a.cut else "") + f"-s{a.seed}"
    write_json_atomic(a.folder / f"{stem}.json", {**meta, "rows": res, "finetuned": tuned})
    (a.folder / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
