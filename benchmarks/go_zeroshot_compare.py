"""Compare GO's zero-shot step times across pre-trainings, against one fine-tuned table.

``benchmarks/go_transfer.py --stages pretrain zeroshot`` with different pre-training settings
(e.g. ``--pretrain-extra``: more model families) gives zero-shot cells without fine-tuning
again; this puts each arm's zero-shot (the greedy int8 decision, and decoded through HEFT's list
scheduler guided by the policy, beta 1) beside the fine-tuned step time and the best classical
placement of a complete results folder, per held-out graph, with the geometric mean of each over
fine-tuned (the issue's goal: zero-shot within 5% of fine-tuned, i.e. <= 1.05x). Run::

    .venv/bin/python benchmarks/go_zeroshot_compare.py --finetuned FOLDER \\
        --arms control=FOLDER_A extra=FOLDER_B [--seed 0] [--out FILE.md]

It prints the table and writes it (``--out``, default ``<first arm>/zeroshot-compare.md``)
with a ``.json`` beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from go_transfer import BASELINES, FAMILIES, geomean, read_cells

GUIDE_BETA = "1"  # the guided decode's beta in the tables of docs/graphopt.md


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--finetuned", type=Path, required=True, help="a complete results folder")
    ap.add_argument("--arms", nargs="+", required=True, metavar="NAME=FOLDER")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    arms: dict[str, Path] = {}
    for a in args.arms:
        name, sep, folder = a.partition("=")
        if not sep or not name or not Path(folder).is_dir():
            print(f"--arms {a!r}: want NAME=FOLDER with an existing folder", file=sys.stderr)
            return 2
        arms[name] = Path(folder)
    rows: list[dict[str, Any]] = []
    for fam in FAMILIES:
        ref = read_cells(args.finetuned, fam, args.seed)
        if "finetune" not in ref or "baselines" not in ref:
            print(f"{args.finetuned}: no fine-tuned {fam} seed {args.seed}", file=sys.stderr)
            return 2
        b = ref["baselines"]
        row: dict[str, Any] = {
            "family": fam,
            "graph": ref["finetune"]["graph"],
            "finetuned": ref["finetune"]["time_int8"],
            "best_classical": min(b[n]["time"] for n in BASELINES[1:] if n in b),
        }
        for name, folder in arms.items():
            zs = read_cells(folder, fam, args.seed).get("zeroshot")
            row[name] = None if zs is None else zs["time_int8"]
            # cells from before the guided decode lack it
            guided = {} if zs is None else zs.get("guided_int8", {})
            row[f"{name}_guided"] = guided.get(GUIDE_BETA)
        rows.append(row)
    cols = [(n, n) for n in arms] + [(f"{n}, guided", f"{n}_guided") for n in arms]
    cols += [("best classical", "best_classical"), ("fine-tuned", "finetuned")]
    lines = [
        f"# GO zero-shot across pre-trainings (seed {args.seed})",
        "",
        f"Command: `python benchmarks/go_zeroshot_compare.py {' '.join(sys.argv[1:])}`",
        "",
        f"Fine-tuned and best classical placement from `{args.finetuned}`; arms: "
        + "; ".join(f"{n}: `{f}`" for n, f in arms.items())
        + f". Step times in ms; guided: decoded through HEFT guided by the policy (beta "
        f"{GUIDE_BETA}).",
        "",
        "| held-out graph | " + " | ".join(h for h, _ in cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for r in rows:
        cells = ["-" if r[k] is None else f"{1e3 * r[k]:.1f}" for _, k in cols]
        lines.append(f"| {r['graph']} | " + " | ".join(cells) + " |")
    summary: dict[str, float | None] = {}
    for _, k in cols:
        done = [r[k] / r["finetuned"] for r in rows if r[k] is not None]
        summary[k] = geomean(done) if len(done) == len(rows) else None
    lines.append(
        "| geomean / fine-tuned | "
        + " | ".join("-" if summary[k] is None else f"{summary[k]:.2f}x" for _, k in cols)
        + " |"
    )
    text = "\n".join(lines) + "\n"
    out = args.out or next(iter(arms.values())) / f"zeroshot-compare-s{args.seed}.md"
    out.write_text(text)
    out.with_suffix(".json").write_text(
        json.dumps({"rows": rows, "geomean_over_finetuned": summary}, indent=1) + "\n"
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
