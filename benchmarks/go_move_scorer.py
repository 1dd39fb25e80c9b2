"""Does a move scorer learned on five families make hill climbing on the sixth faster?

Why: GO's fine-tuning and a policy trained from scratch both start from the fastest classical
placement and improve it with annealing's run moves (``--explore``; docs/graphopt-transfer.md),
so the from-scratch run, climbing four times longer, ends faster, and fine-tuning does not reach its
final step time within 1/10 of its decisions. Pre-training could change that only by bringing
something that transfers to the search itself: which moves are worth a simulator call. This
measures the simplest such thing, before building it into the policy.

What it does, per cluster and held-out family (GO's leave-one-family-out protocol):

1. Traces: on the smallest graph of every family, ``--budget`` calls of hill climbing (uniform
   run moves, :func:`actorq.graphopt.baselines.run_move`, from the fastest of HEFT with a cut
   cost's weights, HEFT's ranks as priorities: the ``climb`` baseline) with every proposed move
   recorded: graph-independent features of the move against the current placement (does the
   run start or end at a device boundary, does it extend a neighbour's device, the run's length
   and share of the work, the target and source devices' loads) and whether it improved.
2. A logistic regression (numpy, class-balanced, L2) on the five other families' traces.
3. On the held-out graph: its ranking quality on the held-out trace (AUC), and climbing with
   learned proposals: ``--pool`` uniform candidates per call, the highest-scored one simulated
   (scoring is free, simulating costs a call), against uniform climbing from the same start,
   ``--seeds`` seeds each; the calls the learned climb needs to reach uniform climbing's step
   time at ``--budget`` and at 4x ``--budget`` calls.

Results: ``<out>/go_move_scorer.json`` (one cell per cluster and family: resumable) and
``.md`` (the table is printed too).

    .venv/bin/python benchmarks/go_move_scorer.py      # ~8 min beside two other runs
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_transfer import FAMILIES, smallest
from peers import machine_info, say, write_json_atomic

FEATURES = (
    "bias", "starts at boundary", "ends at boundary", "extends left", "extends right",
    "already on target", "log length / log groups", "work share", "mixed devices",
    "target load", "source load", "target unused", "target - source load",
)  # fmt: skip


class Climber:
    """Hill climbing over one graph's placements from heft-cut's, with its moves' features."""

    def __init__(self, graph: str, cluster: str) -> None:
        from actorq.graphopt import Simulator, get_cluster
        from actorq.graphopt.baselines import anchor_groups, heft_cut, upward_rank
        from actorq.graphopt.suite import get_graph

        self.sim = Simulator(get_graph(graph), get_cluster(cluster))
        _, self.gi, w = anchor_groups(self.sim)
        self.k = int(self.gi.max()) + 1
        self.share = w / w.sum() if w.sum() > 0 else np.full(self.k, 1 / self.k)
        self.nd = self.sim.cluster.num_devices
        self.prio = upward_rank(self.sim)
        self.start = self.sim.check_placement(heft_cut(self.sim).placement).copy()
        order = np.argsort(self.gi, kind="stable")  # a group's device: its first op's
        self.first = order[np.searchsorted(self.gi[order], np.arange(self.k))]

    def score(self, p: np.ndarray) -> float:
        from actorq.graphopt.baselines import penalized

        return penalized(self.sim, self.sim.run(p, self.prio))

    def draw(self, rng: np.random.Generator) -> tuple[int, int, int]:
        """run_move's distribution: a uniform start group, geometric length, uniform device."""
        a = int(rng.integers(self.k))
        run = min(self.k - a, int(rng.geometric(1 / max(1.0, self.k / (8 * self.nd)))))
        return a, run, int(rng.integers(self.nd))

    def features(self, p: np.ndarray, moves: list[tuple[int, int, int]]) -> np.ndarray:
        gd = p[self.first]
        load = np.bincount(gd, weights=self.share, minlength=self.nd)
        rows = []
        for a, run, d in moves:
            b = a + run
            left = gd[a - 1] if a > 0 else -1
            right = gd[b] if b < self.k else -1
            seg = gd[a:b]
            src = float(load[seg].mean())
            rows.append([
                1.0, float(left != gd[a]), float(right != gd[b - 1]), float(d == left),
                float(d == right), float((seg == d).mean()), np.log(run) / np.log(max(self.k, 2)),
                float(self.share[a:b].sum()), float(np.unique(seg).size > 1), float(load[d]), src,
                float(load[d] == 0), float(load[d]) - src,
            ])  # fmt: skip
        return np.asarray(rows)

    def climb(
        self, budget: int, rng: np.random.Generator, theta: np.ndarray | None = None, pool: int = 1
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step time after each call (index 0: the start), and every simulated move's features
        and label (1: it improved). With ``theta``, the best-scored of ``pool`` draws."""
        cur = self.start.copy()
        cur_s = self.score(cur)
        curve, xs, ys = [cur_s], [], []
        for _ in range(budget):
            moves = [self.draw(rng) for _ in range(pool if theta is not None else 1)]
            f = self.features(cur, moves)
            i = int(np.argmax(f @ theta)) if theta is not None else 0
            a, run, d = moves[i]
            cand = cur.copy()
            cand[(self.gi >= a) & (self.gi < a + run)] = d
            s = cur_s if np.array_equal(cand, cur) else self.score(cand)  # a no-op still counts
            xs.append(f[i])
            ys.append(float(s < cur_s * (1 - 1e-9)))
            if s <= cur_s:
                cur, cur_s = cand, s
            curve.append(cur_s)
        return np.asarray(curve), np.asarray(xs), np.asarray(ys)


def fit_logreg(x: np.ndarray, y: np.ndarray, l2: float = 1e-3, steps: int = 3000) -> np.ndarray:
    """Class-balanced L2 logistic regression by gradient descent on standardised features;
    returns weights on the raw features (column 0 is the bias)."""
    mu, sd = x[:, 1:].mean(0), x[:, 1:].std(0) + 1e-9
    xn = np.concatenate([x[:, :1], (x[:, 1:] - mu) / sd], axis=1)
    pos = float(y.mean())
    wts = np.where(y > 0, 0.5 / max(pos, 1e-9), 0.5 / max(1 - pos, 1e-9))
    th = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(xn @ th)))
        th -= 0.5 * (xn.T @ (wts * (p - y)) / len(y) + l2 * th)
    raw = th.copy()
    raw[1:] = th[1:] / sd
    raw[0] = th[0] - float((th[1:] * mu / sd).sum())
    return raw


def auc(score: np.ndarray, y: np.ndarray) -> float | None:
    """Probability that an improving move outranks a non-improving one (ties split)."""
    pos, neg = score[y > 0], score[y == 0]
    if not len(pos) or not len(neg):
        return None
    gt = (pos[:, None] > neg[None, :]).mean()
    eq = (pos[:, None] == neg[None, :]).mean()
    return float(gt + 0.5 * eq)


def calls_to(curve: np.ndarray, target: float) -> int | None:
    hit = np.flatnonzero(curve <= target * (1 + 1e-9))
    return int(hit[0]) if hit.size else None


def traces(cluster: str, budget: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for fam in FAMILIES:
        _, x, y = Climber(smallest(fam), cluster).climb(budget, np.random.default_rng(1))
        out[fam] = (x, y)
        say(f"  trace {smallest(fam)}@{cluster}: {100 * y.mean():.2f}% of moves improve")
    return out


def held_out_cell(
    cluster: str, fam: str, tr: dict[str, tuple[np.ndarray, np.ndarray]], a: argparse.Namespace
) -> dict[str, Any]:
    t0 = time.time()
    x = np.concatenate([tr[f][0] for f in FAMILIES if f != fam])
    y = np.concatenate([tr[f][1] for f in FAMILIES if f != fam])
    theta = fit_logreg(x, y)
    cl = Climber(smallest(fam), cluster)
    hx, hy = tr[fam]
    b = a.budget
    seeds = []
    for s in range(a.seeds):
        u, _, _ = cl.climb(4 * b, np.random.default_rng(100 + s))
        row: dict[str, Any] = {"uniform": [u[b // 10], u[b], u[-1]]}
        for pool in a.pools:
            le, _, _ = cl.climb(b, np.random.default_rng(100 + s), theta, pool)
            row[f"pool{pool}"] = {
                "at": [le[b // 10], le[b]],
                "calls_to_uniform_budget": calls_to(le, u[b]),
                "calls_to_uniform_4x": calls_to(le, u[-1]),
            }
        seeds.append(row)
    return {
        "cluster": cluster,
        "family": fam,
        "graph": smallest(fam),
        "start": float(cl.score(cl.start)),
        "improve_rate": float(hy.mean()),
        "train_auc": auc(x @ theta, y),
        "held_out_auc": auc(hx @ theta, hy),
        "theta": dict(zip(FEATURES, map(float, theta), strict=True)),
        "seeds": seeds,
        "seconds": time.time() - t0,
    }


def table(cells: list[dict[str, Any]], a: argparse.Namespace) -> list[str]:
    b = a.budget
    med = lambda xs: float(np.median(xs))  # noqa: E731
    out = [
        f"Step times in ms, median over {a.seeds} seeds; uniform: hill climbing's run moves; "
        f"learned (pool P): the best-scored of P uniform draws per simulator call. AUC: how "
        f"well the five other families' scorer ranks the held-out graph's improving moves "
        f"(0.5: chance). Last column: seeds on which the learned climb reaches uniform's "
        f"{b:,}-call step time within {b:,} calls (/ within {b // 10:,}).",
        "",
        f"| cluster | graph | start | moves improving | AUC held-out (train) | uniform @{b // 10:,}"
        f" / @{b:,} / @{4 * b:,} | "
        + " | ".join(f"learned pool {p} @{b // 10:,} / @{b:,} | reached (pool {p})"
                     for p in a.pools)
        + " |",
        "|---|---|---:|---:|---:|---:|" + "---:|---:|" * len(a.pools),
    ]  # fmt: skip
    for c in cells:
        u = [med([s["uniform"][i] for s in c["seeds"]]) * 1e3 for i in range(3)]
        cols = []
        for p in a.pools:
            rs = [s[f"pool{p}"] for s in c["seeds"]]
            at = [med([r["at"][i] for r in rs]) * 1e3 for i in range(2)]
            hit = [r["calls_to_uniform_budget"] for r in rs]
            n = sum(h is not None for h in hit)
            fast = sum(h is not None and h <= b // 10 for h in hit)
            cols += [f"{at[0]:.1f} / {at[1]:.1f}", f"{n}/{len(rs)} ({fast}/{len(rs)})"]
        ha, ta = c["held_out_auc"], c["train_auc"]
        out.append(
            f"| {c['cluster']} | {c['graph']} | {1e3 * c['start']:.1f} | "
            f"{100 * c['improve_rate']:.2f}% | "
            f"{'-' if ha is None else f'{ha:.2f}'} ({'-' if ta is None else f'{ta:.2f}'}) | "
            f"{u[0]:.1f} / {u[1]:.1f} / {u[2]:.1f} | " + " | ".join(cols) + " |"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clusters", nargs="+", default=["4xgpu-pcie", "8xgpu-nvlink"])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--budget", type=int, default=2000, help="simulator calls (default 2000)")
    ap.add_argument("--pools", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    a = ap.parse_args()
    if a.budget < 10 or a.seeds < 1 or min(a.pools) < 1:
        say("--budget must be at least 10, --seeds and --pools at least 1")
        return 2
    jpath = a.out / "go_move_scorer.json"
    done = json.loads(jpath.read_text())["cells"] if jpath.is_file() else []
    key = {(c["cluster"], c["family"]) for c in done}
    for cluster in a.clusters:
        todo = [f for f in a.families if (cluster, f) not in key]
        if not todo:
            continue
        say(f"{cluster}: climbing traces on the six families' smallest graphs")
        tr = traces(cluster, a.budget)
        for fam in todo:
            done.append(held_out_cell(cluster, fam, tr, a))
            say(f"{cluster}/{fam}: done ({done[-1]['seconds']:.0f} s)")
            a.out.mkdir(parents=True, exist_ok=True)
            write_json_atomic(jpath, {"cells": done, "machine": machine_info()})
    cells = [c for c in done if c["cluster"] in a.clusters and c["family"] in a.families]
    command = "python benchmarks/go_move_scorer.py " + shlex.join(sys.argv[1:])
    md = ["# A learned move scorer for hill climbing on an unseen family", "",
          f"Command: `{command.strip()}`", "", *table(cells, a), "",
          f"Machine: {machine_info()['cpu_model']}."]  # fmt: skip
    (a.out / "go_move_scorer.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
