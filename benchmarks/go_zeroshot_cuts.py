"""Why GO's zero-shot placements are slow: how much of the graph they cut, against fine-tuning's.

Reads a placement folder of ``benchmarks/go_transfer.py`` (its ``runs/pretrain-F-sN`` and
``runs/finetune-F-sN``) and, per held-out family F, judges three placements of F's graph the way
the transfer table does (greedy int8, the folder's ``--reference`` schedule): the pre-trained
policy's (zero-shot), the fine-tuned policy's, and the fastest of the five classical ones
fine-tuning starts from (``best``). For each: the simulated step time, the share of edges whose
ends sit on different devices, the gigabytes the simulator moves between devices per step (a
tensor goes once to each device that reads it; the JSON also has ``cut_gb``, the bytes of the
cut edges summed) and the devices used. Then the zero-shot logits
smoothed along the edges (mean-field, Potts: ``z = logits + lam * mean over neighbours of
softmax(z)``, neighbours weighted by the bytes of their edge, 20 rounds), for a few ``lam``:
whether the zero-shot decision is slow because it is *incoherent* (neighbours scattered,
which smoothing repairs) or because it is *wrong* (which it does not).

Writes ``zeroshot-cuts-sN.json`` and ``.md`` into the folder and prints the table.

    .venv/bin/python benchmarks/go_zeroshot_cuts.py \\
        benchmarks/results/go_transfer/placement-4xgpu-pcie-refheft-...-ftimitate1200
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_transfer import BASELINES, FAMILIES, placement_folder, smallest
from peers import machine_info, say, write_json_atomic

LAMS = (4.0, 16.0, 64.0)


def smooth(logits: np.ndarray, src: np.ndarray, dst: np.ndarray, w: np.ndarray, lam: float,
           rounds: int = 20) -> np.ndarray:  # fmt: skip
    """Mean-field smoothing of per-op device logits along weighted edges."""
    n = logits.shape[0]
    deg = np.bincount(src, w, n) + np.bincount(dst, w, n) + 1e-12
    z = logits
    for _ in range(rounds):
        q = np.exp(z - z.max(1, keepdims=True))
        q /= q.sum(1, keepdims=True)
        m = np.zeros_like(q)
        np.add.at(m, dst, w[:, None] * q[src])
        np.add.at(m, src, w[:, None] * q[dst])
        z = logits + lam * m / deg[:, None]
    return z


def cuts(task: Any, placement: np.ndarray) -> dict[str, float]:
    g = task.env.graph
    src, dst, eb = np.asarray(g.src), np.asarray(g.dst), np.asarray(g.edge_bytes, np.float64)
    cut = placement[src] != placement[dst]
    return {
        "cut_share": float(cut.mean()) if len(cut) else 0.0,
        "cut_gb": float(eb[cut].sum() / 1e9),
        "devices": len(set(placement.tolist())),
    }


def judged(task: Any, actions: np.ndarray) -> dict[str, Any]:
    _, _, info = task.judge(actions)
    r = task.env.last_result
    return {"ms": 1e3 * float(info["score"]), "comm_gb": float(r.comm_bytes / 1e9),
            **cuts(task, actions[:, 0])}  # fmt: skip


def family_row(
    root: Path, fam: str, cluster: str, reference: str, start: str, seed: int
) -> dict[str, Any]:
    from actorq.agents.go.actor import GraphTask
    from actorq.agents.go.inputs import InputSpec, OnnxGOPolicy
    from actorq.agents.go.networks import onnx_bytes
    from actorq.agents.go.targets import target
    from actorq.cli.graphopt import load_go_policy as load_policy
    from actorq.graphopt.cluster import get_cluster

    graph = smallest(fam)
    nd = get_cluster(cluster).num_devices
    c = load_policy(str(root / "runs" / f"pretrain-{fam}-s{seed}"), nd)[0].config
    # the inputs the runs' policies read (fine-tuning keeps pre-training's)
    task = GraphTask(graph, "placement", cluster, reference, InputSpec.of_policy(c, start))
    row: dict[str, Any] = {"family": fam, "graph": graph}
    for stage in ("pretrain", "finetune"):
        run = root / "runs" / f"{stage}-{fam}-s{seed}"
        model, _ = load_policy(str(run), nd)
        out = OnnxGOPolicy(onnx_bytes(model, "int8"))(task.inputs)
        actions, _ = task.decide(out, None)
        row["zeroshot" if stage == "pretrain" else "finetuned"] = judged(task, actions)
        if stage == "pretrain":
            inp = task.inputs
            w = np.asarray(task.env.graph.edge_bytes, np.float64)
            w = w / (w.mean() + 1e-30)
            for lam in LAMS:
                o = dict(out)
                o["placement"] = smooth(out["placement"].astype(np.float64), inp.src, inp.dst,
                                        w, lam)  # fmt: skip
                a, _ = task.decide(o, None)
                row[f"smoothed_{lam:g}"] = judged(task, a)
    # fine-tuning's imitation target (the task's own start when it decides from best)
    best = task.start if start == "best" else target(task, "best")
    row["best"] = {"name": best.baseline, **judged(task, best.actions)}
    return row


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lam_cols = " | ".join(f"zero-shot smoothed, lam {lam:g}" for lam in LAMS)
    lines = [
        f"# Zero-shot placements: cuts ({meta['cluster']}, seed {meta['seed']})",
        "",
        f"Command: `{meta['command']}`",
        "",
        "Step time ms / share of edges cut / GB moved between devices per step (the simulator's"
        " transfers) / devices used; `best`: the fastest of "
        f"{', '.join(BASELINES)} (fine-tuning's imitation target).",
        "",
        f"| held-out graph | zero-shot | fine-tuned | best | {lam_cols} |",
        "|---|---|---|---|" + "---|" * len(LAMS),
    ]

    def cell(c: dict[str, Any]) -> str:
        return f"{c['ms']:.1f} / {c['cut_share']:.0%} / {c['comm_gb']:.2f} / {c['devices']}"

    for r in rows:
        sm = " | ".join(f"{r[f'smoothed_{lam:g}']['ms']:.1f}" for lam in LAMS)
        lines.append(f"| {r['graph']} | {cell(r['zeroshot'])} | {cell(r['finetuned'])} | "
                     f"{cell(r['best'])} ({r['best']['name']}) | {sm} |")  # fmt: skip

    def gm(key: str) -> float:
        return float(np.exp(np.mean([np.log(r[key]["ms"] / r["finetuned"]["ms"]) for r in rows])))

    smoothed = ", ".join(f"smoothed lam {lam:g} {gm(f'smoothed_{lam:g}'):.2f}x" for lam in LAMS)
    lines += ["", f"Geomean step time / fine-tuned's: zero-shot {gm('zeroshot'):.2f}x, best "
              f"classical {gm('best'):.2f}x, {smoothed}."]  # fmt: skip
    lines += ["", f"Machine: {meta['machine'].get('cpu_model', '?')}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, help="a go_transfer placement results folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    a = p.parse_args(argv)
    found = placement_folder(a.folder)
    if found is None:
        return 2
    settings, cluster = found
    reference = settings.get("reference") or "expert"
    rows = []
    for fam in a.families:
        runs = [a.folder / "runs" / f"{s}-{fam}-s{a.seed}" for s in ("pretrain", "finetune")]
        if not all((r / "checkpoint").is_dir() for r in runs):
            say(f"{fam}: no pre-trained and fine-tuned runs in {a.folder}/runs, skipped")
            continue
        say(f"{fam}: judging")
        start = settings.get("start", "none")
        rows.append(family_row(a.folder, fam, cluster, reference, start, a.seed))
    if not rows:
        say("nothing to judge")
        return 2
    meta = {"cluster": cluster, "seed": a.seed, "machine": machine_info(),
            "command": "python benchmarks/go_zeroshot_cuts.py " + shlex.join(
                [str(x) for x in (argv if argv is not None else sys.argv[1:])])}  # fmt: skip
    text = report(rows, meta)
    write_json_atomic(a.folder / f"zeroshot-cuts-s{a.seed}.json", {"rows": rows, **meta})
    (a.folder / f"zeroshot-cuts-s{a.seed}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
