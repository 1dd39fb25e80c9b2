"""Which of a zero-shot joint decision's heads costs it against the best classical decision.

A policy that decides from a start (`--start best`, GOConfig.start) reads each graph's best
classical decision as an input; in the joint task it still chooses every op's device, priority
level and fusion bit. A policy without a start (GO's formulation) is compared with the same
decision (the best classical one, as `--imitate best` and `--start best` pick it; "start" in
the table). This takes each held-out family's pre-trained policy from a
`benchmarks/go_transfer.py --task joint` folder, makes its greedy zero-shot decision on the
family's smallest graph (int8 and fp32, as actors run it), and judges it again with one head's
columns replaced by the start's: the difference says which head's choices on an unseen graph
cost the step time. Also the share of ops on which each head agrees with the start, and the
start with only the policy's confident device edits.

    .venv/bin/python benchmarks/go_zeroshot_heads.py \\
        benchmarks/results/go_transfer/joint-4xgpu-pcie-imitate-best6-400-lr0.0001-sil1-ftpos10-startbest-prio64-explore0.5-distill400e500-ftimitate1200

Writes FOLDER/zeroshot_heads.md and .json (families whose pre-training has not finished are
skipped). Seconds per family.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_transfer import FAMILIES, run_policy_on, smallest

#: The decisions judged: the policy's own, then with these action columns (device, priority
#: level, fuse bit) taken from the start.
SWAPS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("policy", ()),
    ("start's devices", (0,)),
    ("start's priorities", (1,)),
    ("start's fusion", (2,)),
    ("start's priorities + fusion", (1, 2)),
    ("start's devices + fusion", (0, 2)),  # the policy schedules the start's placement alone
)


def family_rows(run_dir: Path, graph: str) -> list[dict[str, Any]]:
    from actorq.agents.go.actor import decode_snapshot
    from actorq.agents.go.inputs import OnnxGOPolicy
    from actorq.run import load_run_config

    if load_run_config(run_dir).task() != "joint":
        raise SystemExit(f"{run_dir}: not a joint-task policy")
    task, io = run_policy_on(run_dir, f"graphopt:joint/{graph}")
    if task.start is None:  # GO's formulation: the decision --start best would have given it
        from actorq.agents.go.targets import target

        ref = target(task, "best")
    else:
        ref = task.start
    start = ref.actions

    def ms(actions: np.ndarray) -> float:
        return 1e3 * float(task.judge(actions)[2]["score"])  # penalised when it does not fit

    rows = []
    for prec in ("int8", "fp32"):
        out = OnnxGOPolicy(decode_snapshot(io.snapshot(0, prec)).model)(task.inputs)
        a, _ = task.decide(out, None)
        row: dict[str, Any] = {"graph": graph, "precision": prec, "start": ms(start),
                               "start_baseline": ref.baseline,
                               "policy_decides_from_it": task.start is not None}  # fmt: skip
        for name, cols in SWAPS:
            b = a.copy()
            b[:, list(cols)] = start[:, list(cols)]
            row[name] = ms(b)
        fusable = task.mask[:, 2] > 0  # the fuse bit means something only where fusion can be
        row["agree"] = {
            "devices": float(np.mean(a[:, 0] == start[:, 0])),
            "priorities": float(np.mean(a[:, 1] == start[:, 1])),
            "fusion": float(np.mean(a[fusable, 2] == start[fusable, 2])) if fusable.any() else 1.0,
        }
        row["confident_edits"] = confident_edits(task, out, a, start)
        rows.append(row)
    return rows


#: Probabilities above which a device edit of the policy's is kept (``confident_edits``).
CONFIDENCE = (0.5, 0.8, 0.95, 0.99)


def confident_edits(
    task: Any, out: dict[str, np.ndarray], a: np.ndarray, start: np.ndarray
) -> dict[str, dict[str, float]]:
    """The start's devices and fusion with the policy's priorities, plus only the device edits
    the policy is sure of (its argmax device differs from the start's and has probability above
    each threshold; fusion re-decided around moved ops, as run moves do): do the edits the
    policy makes with confidence transfer, where its edits as a whole do not?"""
    from actorq.agents.go.inputs import log_softmax

    p = np.exp(log_softmax(out["placement"]))
    choice, sure = p.argmax(axis=1), p.max(axis=1)
    base = a.copy()
    base[:, [0, 2]] = start[:, [0, 2]]
    res = {}
    for tau in CONFIDENCE:
        edit = (choice != start[:, 0]) & (sure > tau)
        placed = np.where(edit, choice, start[:, 0])
        d = task.with_placement(base.copy(), placed)
        res[f"{tau:g}"] = {"ms": 1e3 * float(task.judge(d)[2]["score"]), "ops": int(edit.sum())}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a go_transfer.py results folder (--task joint)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rows = []
    for fam in FAMILIES:
        run = a.folder / "runs" / f"pretrain-{fam}-s{a.seed}"
        if not (a.folder / f"{fam}-pretrain-s{a.seed}.json").is_file():
            continue  # pre-training not finished
        rows += family_rows(run, smallest(fam))
    if not rows:
        raise SystemExit(f"{a.folder}: no finished pre-training (seed {a.seed})")
    names = [n for n, _ in SWAPS]
    lines = [
        f"# Zero-shot joint decisions against their start: {a.folder.name} (seed {a.seed})",
        "",
        "Step times in ms (simulated, penalised when infeasible); columns after `policy` judge "
        "the policy's greedy decision with one head's choices replaced by the start's. "
        "Agreement: share of ops on which the policy's choice is the start's (fusion: over "
        "fusable ops).",
        "",
        "| graph | precision | start | "
        + " | ".join(names)
        + " | devices agree | priorities agree | fusion agree |",
        "|---|---|" + "---:|" * (len(names) + 4),
    ]
    for r in rows:
        g = r["agree"]
        lines.append(
            f"| {r['graph']} | {r['precision']} | {r['start']:.2f} ({r['start_baseline']}) | "
            + " | ".join(f"{r[n]:.2f}" for n in names)
            + f" | {g['devices']:.1%} | {g['priorities']:.1%} | {g['fusion']:.1%} |"
        )
    lines += [
        "",
        "The start's devices and fusion with the policy's priorities, plus the policy's device "
        "edits whose probability is above a threshold (fusion re-decided around moved ops), ms "
        "(ops moved):",
        "",
        "| graph | precision | " + " | ".join(f"p > {c:g}" for c in CONFIDENCE) + " |",
        "|---|---|" + "---:|" * len(CONFIDENCE),
    ]
    for r in rows:
        e = r["confident_edits"]
        lines.append(
            f"| {r['graph']} | {r['precision']} | "
            + " | ".join(f"{e[f'{c:g}']['ms']:.2f} ({e[f'{c:g}']['ops']})" for c in CONFIDENCE)
            + " |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    suffix = "" if a.seed == 0 else f"_s{a.seed}"
    (a.folder / f"zeroshot_heads{suffix}.md").write_text(text)
    (a.folder / f"zeroshot_heads{suffix}.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
