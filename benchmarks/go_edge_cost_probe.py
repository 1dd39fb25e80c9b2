"""Can a cut cost per edge, learned on five families, speed up HEFT on the sixth?

Why: GO's zero-shot placement does not transfer to an unseen family (docs/graphopt-transfer.md,
"GO's own joint zero-shot, per head"): a device per op is a global partition whose labels mean
nothing on another graph, while its schedule and fusion, local decisions, do transfer. A cut
cost per edge is local and label-free, and HEFT turns any set of them into a coherent
placement; searched on the graph itself (``heft-search``) such costs beat HEFT's best uniform
one by up to 16% ("Searching HEFT's cut cost per edge"). This probe asks whether a *rule* for
them learned on five families' smallest graphs beats the uniform cost on the held-out sixth,
before anyone builds a policy head for it.

The rule is linear in per-edge features, ``log w_e = theta . phi_e`` (the bias starts at the
training graphs' best uniform cost), fitted by evolution strategies (antithetic Gaussian
perturbations, rank-shaped fitness, Adam; Salimans et al. 2017) to the mean over the training
graphs of ``log(step time / heft-cut's step time)``, each candidate decoded by HEFT and judged
by the simulator with HEFT's ranks as priorities (as ``heft-search``). Two feature sets:

* ``raw``: the edge's bytes, its mean transfer time over the graph's mean op time, and both
  endpoints' node features (:func:`actorq.agents.go.inputs.node_features`, the op type left out);
* ``go``: ``raw`` and both endpoints' embeddings from a GO network pre-trained without the
  held-out family (``--encoder-from``: a ``go_transfer.py --task joint`` folder with
  ``runs/pretrain-<family>-s<seed>``), so the rule can read each op's graph context.

Held-out step times (ms) against HEFT (uniform cost 0), the training graphs' best uniform cost
(no call on the held-out graph, like the rule), ``heft-cut`` (the best of five uniform costs:
five simulator calls on it), the rule with the same five-scale sweep, and ``heft-search`` at
2,000 calls (an oracle); with ``--finetuned FOLDER`` (a placement ``go_transfer.py`` folder)
also each as a multiple of fine-tuned GO's step time, the zero-shot goal's measure.

    .venv/bin/python benchmarks/go_edge_cost_probe.py --cluster 4xgpu-pcie \\
        --encoder-from benchmarks/results/go_transfer/joint-4xgpu-pcie-imitate-best6-... \\
        --finetuned benchmarks/results/go_transfer_ptsteps/placement-4xgpu-pcie-...-best6-...

Writes ``<out>/<cluster>.json`` and ``.md`` (each held-out family a cell, kept when done).
Minutes per family on one core.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_transfer import FAMILIES, run_learner_on, smallest
from peers import machine_info, say, write_json_atomic


class EdgeGraph:
    """One graph's HEFT inputs, per-in-edge features, and a judge of per-edge weights."""

    def __init__(self, graph: str, cluster: str) -> None:
        from actorq.agents.go.inputs import node_features
        from actorq.graphopt import Simulator, get_cluster
        from actorq.graphopt.baselines import CUT_WEIGHTS, CutSearch
        from actorq.graphopt.suite import get_graph

        sim = Simulator(get_graph(graph), get_cluster(cluster))
        self.h = CutSearch(sim).h
        g = sim.graph
        self.dst = np.repeat(np.arange(g.num_ops), np.diff(self.h.ptr))  # each in-edge's consumer
        self.src = self.h.in_src
        nf = node_features(g)[:, 1:]  # the op type index is a category, not a magnitude
        mean_t = float(self.h.times.mean())
        rel = np.log1p(self.h.transfer / max(mean_t, 1e-12))[:, None]
        self.raw = np.concatenate(
            [np.log1p(self.h.in_bytes)[:, None] / 20, rel, nf[self.src], nf[self.dst]], axis=1
        ).astype(np.float64)
        self.uniform = {w: self.score(np.full(len(self.src), w)) for w in CUT_WEIGHTS}
        self.heft = self.score(np.zeros(len(self.src)))
        self.heft_cut = min(self.uniform.values())

    def score(self, weights: np.ndarray) -> float:
        return float(self.h.score(self.h.decode(weights)))


def go_embeddings(run_dir: Path, graph: str) -> np.ndarray:
    """Node embeddings ``(n, hidden)`` of a GO run's final network on ``graph``."""
    import torch

    learner, _, _ = run_learner_on(run_dir, f"graphopt:joint/{graph}")
    with torch.no_grad():
        h = learner.model.encode(**learner.tasks[0].inputs.tensors())
    return h.numpy().astype(np.float64)


def features(eg: EdgeGraph, emb: np.ndarray | None) -> np.ndarray:
    if emb is None:
        return eg.raw
    return np.concatenate([eg.raw, emb[eg.src], emb[eg.dst], emb[eg.src] * emb[eg.dst]], axis=1)


def fit_rule(
    train: list[tuple[EdgeGraph, np.ndarray]], iters: int, pairs: int, sigma: float, seed: int
) -> tuple[np.ndarray, float, list[float]]:
    """ES over ``theta`` (the last entry the bias); the mean training objective per iteration."""
    from actorq.graphopt.baselines import CUT_WEIGHTS

    rng = np.random.default_rng(seed)
    # the best single uniform cost over the training graphs starts the bias
    w0 = min(CUT_WEIGHTS, key=lambda w: np.mean([math.log(g.uniform[w] / g.heft_cut)
                                                    for g, _ in train]))  # fmt: skip
    dim = train[0][1].shape[1] + 1
    theta = np.zeros(dim)
    theta[-1] = math.log(w0)
    m, v = np.zeros(dim), np.zeros(dim)

    def objective(th: np.ndarray) -> float:
        out = 0.0
        for g, phi in train:
            logw = np.clip(phi @ th[:-1] + th[-1], -6, 6)
            out += math.log(g.score(np.exp(logw)) / g.heft_cut)
        return out / len(train)

    curve = [objective(theta)]
    best, best_f = theta.copy(), curve[0]
    for t in range(1, iters + 1):
        eps = rng.standard_normal((pairs, dim))
        f = np.array([[objective(theta + sigma * e), objective(theta - sigma * e)] for e in eps])
        ranks = np.argsort(np.argsort(f.ravel())).reshape(f.shape) / (f.size - 1) - 0.5
        grad = ((ranks[:, 0] - ranks[:, 1])[:, None] * eps).sum(0) / (pairs * sigma)
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        theta = theta - 0.05 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        curve.append(objective(theta))
        if curve[-1] < best_f:
            best, best_f = theta.copy(), curve[-1]
    return best, w0, curve


def probe_cell(family: str, args: argparse.Namespace) -> dict[str, Any]:
    from actorq.graphopt.baselines import CUT_WEIGHTS
    from actorq.graphopt.suite import PREFIX

    t0 = time.time()
    others = [f for f in FAMILIES if f != family]
    train_names, test_name = [smallest(f) for f in others], smallest(family)
    # seeded variants of the training families: more graphs for the rule to fit (suite.variant)
    train_names += [f"{PREFIX[f]}-v{k}" for f in others for k in range(args.variants)]
    graphs = {n: EdgeGraph(n, args.cluster) for n in [*train_names, test_name]}
    out: dict[str, Any] = {"family": family, "graph": test_name}
    test = graphs[test_name]
    out["heft"], out["heft_cut"] = test.heft, test.heft_cut
    run = None
    if args.encoder_from:
        run = Path(args.encoder_from) / "runs" / f"pretrain-{family}-s{args.seed}"
    for arm in [a for a in args.arms if a == "raw" or run is not None]:
        embs = {n: go_embeddings(run, n) if arm == "go" and run else None for n in graphs}
        phi = {n: features(graphs[n], embs[n]) for n in graphs}
        stack = np.concatenate([phi[n] for n in train_names])
        mu, sd = stack.mean(0), stack.std(0) + 1e-6  # standardised on the training edges
        phi = {n: (p - mu) / sd for n, p in phi.items()}
        theta, w0, curve = fit_rule([(graphs[n], phi[n]) for n in train_names], args.iters,
                                    args.pairs, args.sigma, args.seed)  # fmt: skip
        logw = np.clip(phi[test_name] @ theta[:-1] + theta[-1], -6, 6)
        rule = test.score(np.exp(logw))
        # the rule's relative costs with heft-cut's five scales, as heft-cut sweeps its one
        swept = min(test.score(np.exp(logw - theta[-1]) * w) for w in CUT_WEIGHTS)
        out[arm] = {"train_uniform_w": w0, "train_uniform": test.uniform[w0], "rule": rule,
                    "rule_swept": swept, "train_objective": [curve[0], min(curve)],
                    "features": int(theta.size)}  # fmt: skip
        say(f"{args.cluster} {family} {arm}: heft {test.heft * 1e3:.2f} ms, uniform w={w0:g} "
            f"{test.uniform[w0] * 1e3:.2f}, heft-cut {test.heft_cut * 1e3:.2f}, rule "
            f"{rule * 1e3:.2f}, rule swept {swept * 1e3:.2f}; training objective "
            f"{curve[0]:+.4f} -> {min(curve):+.4f}")  # fmt: skip
    out["seconds"] = time.time() - t0
    return out


def report(cells: dict[str, Any], args: argparse.Namespace) -> str:
    ft = {}
    if args.finetuned:
        for f in cells:
            p = Path(args.finetuned) / f"{f}-finetune-s{args.seed}.json"
            if p.is_file():
                ft[f] = json.loads(p.read_text())["time_int8"]
    oracle = {}
    op = Path(args.oracle)
    if op.is_file():
        for c in json.loads(op.read_text())["cells"]:
            if c["cluster"] == args.cluster:
                oracle[c["graph"]] = c["oracle"][str(args.oracle_calls)]
    arms = [a for a in ("raw", "go") if any(a in c for c in cells.values())]
    head = ["held-out graph", "HEFT", "training's uniform cost", "heft-cut (5 calls)"]
    for a in arms:
        head += [f"rule, {a}", f"rule, {a}, swept (5 calls)"]
    head += ["heft-search @2,000 (oracle)", "GO fine-tuned"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    ratios: dict[str, list[float]] = {}
    for f, c in cells.items():
        arm0 = c.get(arms[0], {})
        vals: list[tuple[str, float | None]] = [
            ("heft", c["heft"]), ("uniform", arm0.get("train_uniform")), ("heft-cut", c["heft_cut"])
        ]  # fmt: skip
        for a in arms:
            vals += [
                (f"{a}", c.get(a, {}).get("rule")),
                (f"{a} swept", c.get(a, {}).get("rule_swept")),
            ]
        vals += [("oracle", oracle.get(c["graph"])), ("fine-tuned", ft.get(f))]
        row = [c["graph"]] + ["–" if v is None else f"{v * 1e3:.2f}" for _, v in vals]
        lines.append("| " + " | ".join(row) + " |")
        if f in ft:
            for k, v in vals:
                if v is not None:
                    ratios.setdefault(k, []).append(v / ft[f])
    if ft and len(ft) == len(cells):
        gm = ["geomean / fine-tuned"]
        for k, _ in vals:
            r = ratios.get(k, [])
            gm.append(f"{math.exp(np.mean(np.log(r))):.3f}x" if len(r) == len(cells) else "–")
        lines.append("| " + " | ".join(gm) + " |")
    lines += [
        "",
        "On the training graphs (mean log step time / heft-cut's; negative is faster), at the "
        "training's best uniform cost and at the fitted rule:",
        "",
        "| held-out family | " + " | ".join(f"{a}: uniform -> rule" for a in arms) + " |",
        "|---|" + "---:|" * len(arms),
    ]
    for f, c in cells.items():
        objs = [c[a]["train_objective"] for a in arms if a in c]
        lines.append(f"| {f} | " + " | ".join(f"{o[0]:+.4f} -> {o[1]:+.4f}" for o in objs) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="4xgpu-pcie")
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--encoder-from", default="", help="go_transfer.py --task joint folder")
    ap.add_argument("--finetuned", default="", help="placement go_transfer.py folder")
    ap.add_argument("--oracle", default="benchmarks/results/go_edge_weight_oracle.json")
    ap.add_argument("--oracle-calls", type=int, default=2000)
    ap.add_argument("--iters", type=int, default=150)
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--sigma", type=float, default=0.1)
    ap.add_argument(
        "--arms", nargs="+", default=["raw", "go"], choices=["raw", "go"],
        help="feature sets (go needs --encoder-from)",
    )  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--variants", type=int, default=0, help="train also on K seeded variants per family"
    )
    ap.add_argument("--out", default="benchmarks/results/go_edge_cost_probe")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.cluster + (f"-var{args.variants}" if args.variants else "")
    stem += "" if "raw" in args.arms else "-go"  # a go-only run keeps its own file
    path = out / f"{stem}.json"
    doc = json.loads(path.read_text()) if path.is_file() else {"cells": {}}
    for f in args.families:
        if f in doc["cells"]:
            say(f"{f}: done before, skipped")
            continue
        doc["cells"][f] = probe_cell(f, args)
        doc["command"] = "python " + shlex.join(sys.argv)
        doc["machine"] = machine_info()
        write_json_atomic(path, doc)
    cells = {f: doc["cells"][f] for f in FAMILIES if f in doc["cells"]}
    table = report(cells, args)
    more = f", {args.variants} variants each" if args.variants else ""
    md = (f"# A cut cost per edge learned on five families{more} ({args.cluster}, seed "
          f"{args.seed})\n\n"
          f"Command: `{doc.get('command', '')}`\n\nStep times in ms on each held-out family's "
          "smallest graph (HEFT's ranks as priorities).\n\n" + table + "\n")  # fmt: skip
    (out / f"{stem}.md").write_text(md)
    print(table)


if __name__ == "__main__":
    main()
