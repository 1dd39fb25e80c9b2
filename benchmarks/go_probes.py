"""Small ablations behind GO's training defaults (docs/graphopt.md, "Training GO"): each a few
minutes on one core, the numbers the docs quote for why a default is what it is.

* ``relabel``: the imitation warm start's fit with and without renaming devices by first use
  (``GOConfig.imitate_relabel``), on the five pre-training graphs of the gnmt-held-out transfer
  cell (``--imitate best``), after 100 and 300 steps: loss, share of ops right, and the greedy
  decision's step time over the targets' (geomean).
* ``lr``: inception-s, imitating METIS+cp (400 steps), then PPO at learning rates 5e-4 (the
  default), 2e-4 and 1e-4 for 480 decisions (an evaluation every 32): the greedy gain over the
  expert split after the imitation, at its lowest evaluation and at the end.
* ``sil``: rnnlm-s from a random policy (no imitation), 2,000 decisions of PPO with and without
  self-imitation (``--sil-coef 1``): the greedy step time at the end, against HEFT's.

Placement on 4 PCIe GPUs, seed 0, int8 actors, the sync backend (deterministic for a seed on one
machine). One JSON per cell under ``benchmarks/results/go_probes/`` (written when the cell is
done; existing cells are skipped), then a Markdown table to stdout and ``report.md``.

    .venv/bin/python benchmarks/go_probes.py                 # all three, ~20 min on one core
    .venv/bin/python benchmarks/go_probes.py --probes lr     # one of them
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_transfer import pretrain_graphs
from peers import machine_info, read_metrics_csv, say, write_json_atomic

PROBES = ("relabel", "lr", "sil")
CLUSTER = "4xgpu-pcie"


def config(run_dir: Path, graphs: list[str], steps: int, **kw: Any) -> Any:
    from actorq.agents.go.config import GOConfig

    return GOConfig(
        env=f"graphopt:placement/{graphs[0]}",
        graphs=tuple(graphs[1:]),
        cluster=CLUSTER,
        actors=0,
        total_steps=steps,
        seed=0,
        run_dir=str(run_dir),
        progress=False,
        energy=False,
        log_every=60.0,
        **{"precision": "int8", **kw},  # the actors the committed results were made with
    )


def relabel_cell(relabel: bool, steps: int, _: Path) -> dict[str, Any]:
    """The warm start alone (no PPO): the learner's ``warm_start`` on the five graphs."""
    from actorq.agents.go.builder import BUILDER

    cfg = config(Path("/nonexistent"), pretrain_graphs("gnmt"), 1, imitate="best",
                 imitate_steps=steps, imitate_relabel=relabel)  # fmt: skip
    learner = BUILDER.make_learner(cfg, BUILDER.env_spec(cfg))
    m = learner.warm_start()
    return {k.partition("/")[2]: float(v) for k, v in m.items() if k.startswith("imitate/")}


def gains(run_dir: Path) -> list[list[float]]:
    """``[[decisions, greedy gain over the reference], ...]`` of a run's evaluations."""
    pts = read_metrics_csv(run_dir / "metrics.csv").get("charts/eval_return", [])
    return [[float(step), float(v)] for step, v, _ in pts]


def lr_cell(lr: float, _: int, run_dir: Path) -> dict[str, Any]:
    from actorq.experiment import train

    cfg = config(run_dir, ["inception-s"], 480, imitate="metis+cp", imitate_steps=400,
                 learning_rate=lr, eval_every=32)  # fmt: skip
    train(cfg)
    state = json.loads((run_dir / "checkpoint" / "state.json").read_text())
    rec = state["learner"]["imitation"][0]
    ref = reference_ms("inception-s", "expert") / 1e3  # the default reference
    return {
        "imitation": rec,
        "curve": gains(run_dir),
        "imitated_gain": 1 - rec["greedy_time"] / ref,
    }


def sil_cell(coef: float, _: int, run_dir: Path) -> dict[str, Any]:
    from actorq.experiment import train

    cfg = config(run_dir, ["rnnlm-s"], 2000, sil_coef=coef, eval_every=500)
    r = train(cfg)
    return {"gain": float(r.eval_return), "curve": gains(run_dir)}


def cells(probe: str) -> list[tuple[str, Any, int]]:
    """``(cell name, setting, steps)`` of one probe."""
    if probe == "relabel":
        return [(f"relabel-{r}-{n}", r, n) for r in (True, False) for n in (100, 300)]
    if probe == "lr":
        return [(f"lr-{lr:g}", lr, 480) for lr in (5e-4, 2e-4, 1e-4)]
    return [(f"sil-{c:g}", c, 2000) for c in (0.0, 1.0)]


RUN = {"relabel": relabel_cell, "lr": lr_cell, "sil": sil_cell}


def reference_ms(graph: str, baseline: str) -> float:
    from actorq.graphopt import Simulator, get_cluster
    from actorq.graphopt.baselines import penalized, run_baselines
    from actorq.graphopt.suite import get_graph

    sim = Simulator(get_graph(graph), get_cluster(CLUSTER))
    (b,) = run_baselines(sim, (baseline,), budget=0, seed=0)
    return 1e3 * penalized(sim, b.result)


def report(root: Path, command: str) -> str:
    def cell(name: str) -> dict[str, Any] | None:
        p = root / f"{name}.json"
        return json.loads(p.read_text()) if p.is_file() else None

    lines = ["# GO training probes (placement, 4 PCIe GPUs, seed 0)", "",
             f"Command: `{command}`", ""]  # fmt: skip
    rows = [(n, cell(n)) for n, _, _ in cells("relabel")]
    if any(c for _, c in rows):
        lines += ["Imitation warm start on the five pre-training graphs of the gnmt-held-out "
                  "cell (`--imitate best`), with and without relabelling devices by first use:",
                  "", "| relabel | steps | loss | ops right | greedy / target step time |",
                  "|---|---:|---:|---:|---:|"]  # fmt: skip
        for n, c in rows:
            if c:
                _, r, s = n.split("-")
                lines.append(f"| {r.lower()} | {s} | {c['loss']:.3f} | "
                             f"{100 * c['accuracy']:.1f}% | {c['time_ratio']:.3f}x |")  # fmt: skip
        lines.append("")
    rows = [(n, cell(n)) for n, _, _ in cells("lr")]
    if any(c for _, c in rows):
        lines += ["inception-s, imitating METIS+cp (400 steps), then PPO: greedy gain over the "
                  "expert split", "",
                  "| learning rate | after imitation | lowest evaluation (decisions) "
                  "| after 480 decisions |", "|---:|---:|---:|---:|"]  # fmt: skip
        for n, c in rows:
            if c:
                curve = c["curve"]
                im = c.get("imitated_gain")
                low = min(curve, key=lambda p: p[1]) if curve else [math.nan, math.nan]
                last = curve[-1][1] if curve else math.nan
                im_s = "-" if im is None else f"{im:+.2f}"
                lines.append(f"| {n[3:]} | {im_s} | {low[1]:+.2f} ({low[0]:.0f}) | {last:+.2f} |")
        lines.append("")
    rows = [(n, cell(n)) for n, _, _ in cells("sil")]
    if any(c for _, c in rows):
        expert = reference_ms("rnnlm-s", "expert")
        heft = reference_ms("rnnlm-s", "heft")
        lines += ["rnnlm-s from a random policy, 2,000 decisions, greedy step time (ms; HEFT "
                  f"{heft:.1f}, the expert split {expert:.1f}):", "",
                  "| self-imitation coefficient | greedy step time |", "|---:|---:|"]  # fmt: skip
        for n, c in rows:
            if c:
                lines.append(f"| {n[4:]} | {expert * (1 - c['gain']):.1f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", nargs="+", default=list(PROBES), choices=PROBES)
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/go_probes"))
    args = ap.parse_args(argv)
    command = "python benchmarks/go_probes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    root = args.results
    for probe in args.probes:
        for name, setting, steps in cells(probe):
            path = root / f"{name}.json"
            if path.is_file():
                say(f"{name}: done before, skipped")
                continue
            run_dir = root / "runs" / name
            if run_dir.exists():  # a cell stopped mid-run: these are short, start it again
                import shutil

                shutil.rmtree(run_dir)
            say(f"{name}: running")
            t0 = time.perf_counter()
            out = RUN[probe](setting, steps, run_dir)
            out["seconds"] = time.perf_counter() - t0
            write_json_atomic(path, {**out, "command": command, "machine": machine_info()})
            say(f"{name}: {out['seconds']:.0f} s")
    text = report(root, command)
    (root / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
