"""Zero-shot as a choice by a learned graph cost model: a GraphSAGE network over the graph with
a placement as node features, trained on simulated placements of other graphs, ranks a new
graph's classical placements without simulating them.

``benchmarks/go_zeroshot_costmodel.py`` ranks the ten classical candidates with a linear model
over cheap analytic estimates (loads, critical path with transfers, link times) and reaches
1.09x / 1.06x fine-tuned GO's step time on 4 PCIe / 8 NVLink; it fails where only a schedule
shows the cost (devices idling while they wait on each other across a cut; a peak of memory).
This probe asks whether a graph network that sees the placement op by op learns those: a
learned performance model in the manner of Kaufman et al. ("A Learned Performance Model for
TPUs", MLSys 2021), GraphSAGE layers (Hamilton et al., NeurIPS 2017) over in- and out-neighbours
with each op's device (one-hot), its time on that device, and whether its inputs arrive over a
link; a readout that sums each device's ops (so loads are within reach) and reads the linear
probe's analytic estimates beside it; a pairwise logistic loss on the placements of each graph
(RankNet's, Burges et al., ICML 2005).

Training data: on every pool graph (``go_zeroshot_costmodel.py``'s pool: the suite's graphs of
up to ``--max-ops`` ops and the imports) the ten classical candidates and ``--moves`` perturbed
copies of each (1-8 of annealing's run moves), every one simulated. Protocol as there: each
suite family held out in turn (trained on the rest; imports never held out), its graphs' ten
candidates ranked; the chosen one's step time over the fastest candidate's, and over fine-tuned
GO's on the family's smallest graph where ``--finetuned`` has its cell.

    .venv/bin/python benchmarks/go_costmodel_gnn.py --cluster 4xgpu-pcie --seed 1 \\
        --finetuned benchmarks/results/go_transfer_ptsteps/placement-4xgpu-pcie-...
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_transfer import FAMILIES, smallest
from go_zeroshot_costmodel import EXTRA, analytic, estimates, finetuned_ms, gm, pool_graphs
from go_zeroshot_select import placement_ms, task_candidates
from peers import machine_info, say, write_json_atomic

RESULTS = Path("benchmarks/results/go_zeroshot_costmodel")


class Sample:
    """One pool graph's static tensors and its simulated placements."""

    def __init__(self, name: str, family: str | None, cluster: str, reference: str,
                 seed: int, moves: int) -> None:  # fmt: skip
        import torch

        from actorq.agents.go.actor import GraphTask
        from actorq.agents.go.inputs import node_features
        from actorq.graphopt.baselines import anchor_groups, run_move

        self.name, self.family = name, family
        task = GraphTask(name, "placement", cluster, reference)
        sim, g, c = task.env.sim, task.env.graph, task.env.cluster
        self.nd, n = c.num_devices, g.num_ops
        cands = task_candidates(task, seed)
        self.names = list(cands)
        rng = np.random.default_rng([seed, zlib.crc32(Path(name).stem.encode())])
        _, gi, _ = anchor_groups(sim)
        k = int(gi.max()) + 1

        places, times = [], []
        for p, t in cands.values():
            places.append(np.asarray(p, np.int64))
            times.append(t)
        for p0 in list(places):
            for _ in range(moves):
                p = p0
                for _ in range(int(rng.choice([1, 2, 4, 8]))):
                    p = run_move(p, gi, k, self.nd, rng)
                places.append(p)
                times.append(placement_ms(task, p))
        self.places = np.stack(places)  # (P, n), the ten candidates first
        self.log_ms = np.log(np.asarray(times))
        ana = {f"p{i}": analytic(task, p) for i, p in enumerate(self.places)}
        self.ana = torch.tensor(estimates(ana, list(ana)), dtype=torch.float32)
        op_t = sim.op_times()  # (n, D)
        nf = node_features(g)
        self.x = torch.tensor(nf[:, 1:], dtype=torch.float32)  # the type column is embedded
        self.typ = torch.tensor(nf[:, 0], dtype=torch.long)
        self.src, self.dst = torch.tensor(g.src), torch.tensor(g.dst)
        self.edges = torch.arange(len(g.src))
        # in- and out-degree (at least 1), the SAGE layers' means: static per graph
        ones = torch.ones(len(g.src))
        self.deg_in = torch.zeros(n).index_add_(0, self.dst, ones).clamp(min=1)[:, None]
        self.deg_out = torch.zeros(n).index_add_(0, self.src, ones).clamp(min=1)[:, None]
        total = op_t.min(1).sum()
        self.op_share = torch.tensor(np.log1p(n * op_t / total) / np.log1p(n), dtype=torch.float32)
        bw = np.where(np.isfinite(c.bandwidth), c.bandwidth, 1e30)
        xfer = c.latency[None] + g.edge_bytes[:, None, None] / np.maximum(bw[None], 1e-9)
        self.xfer = torch.tensor(
            np.log1p(n * xfer / total) / np.log1p(n), dtype=torch.float32
        )  # (m, D, D): an edge's transfer time on each device pair, as a share
        self.n = n


def build_model(nd: int, hidden: int, layers: int) -> Any:
    import torch
    from torch import nn

    from actorq.agents.go.inputs import NODE_FEATURES, OP_VOCAB

    class SAGE(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.lin = nn.Linear(3 * d + 2, d)
            self.norm = nn.LayerNorm(d)

        def forward(self, h: torch.Tensor, s: Sample, cut: torch.Tensor) -> torch.Tensor:
            # h (B, n, d); cut (B, m): the transfer share of each edge, 0 when not cut
            b, n, _ = h.shape
            agg_in = torch.zeros_like(h).index_add_(1, s.dst, h[:, s.src]) / s.deg_in
            agg_out = torch.zeros_like(h).index_add_(1, s.src, h[:, s.dst]) / s.deg_out
            cut_in = torch.zeros(b, n).index_add_(1, s.dst, cut)[..., None]
            cut_out = torch.zeros(b, n).index_add_(1, s.src, cut)[..., None]
            z = self.lin(torch.cat([h, agg_in, agg_out, cut_in, cut_out], dim=2))
            out: torch.Tensor = self.norm(h + torch.relu(z))
            return out

    class CostModel(nn.Module):
        def __init__(self, n_ana: int) -> None:
            super().__init__()
            d = hidden
            self.type_emb = nn.Embedding(len(OP_VOCAB), 8)
            self.inp = nn.Linear(8 + len(NODE_FEATURES) - 1 + nd + 1, d)
            self.sage = nn.ModuleList(SAGE(d) for _ in range(layers))
            self.per_dev = nn.Linear(d, d)
            self.out = nn.Sequential(nn.Linear(3 * d + n_ana, d), nn.ReLU(), nn.Linear(d, 1))

        def forward(self, s: Sample, idx: np.ndarray) -> torch.Tensor:
            p = torch.tensor(s.places[idx])  # (B, n)
            b = p.shape[0]
            onehot = torch.nn.functional.one_hot(p, nd).float()
            t = torch.gather(s.op_share.expand(b, -1, -1), 2, p[..., None])  # (B, n, 1)
            static = torch.cat([self.type_emb(s.typ), s.x], dim=1).expand(b, -1, -1)
            h = torch.relu(self.inp(torch.cat([static, onehot, t], dim=2)))
            a, z = p[:, s.src], p[:, s.dst]
            cut = s.xfer[s.edges, a, z] * (a != z)  # (B, m)
            for layer in self.sage:
                h = layer(h, s, cut)
            v = self.per_dev(h)  # (B, n, d): each op's share of its device's summary
            dev = (
                torch.zeros(b, nd, v.shape[2]).scatter_add_(
                    1, p[..., None].expand(-1, -1, v.shape[2]), v
                )
                / s.n
            )
            g = torch.cat([dev.max(1).values, dev.mean(1), h.mean(1), s.ana[idx]], dim=1)
            score: torch.Tensor = self.out(g)[:, 0]
            return score  # higher: slower

    return CostModel


def pair_loss(score: Any, log_ms: np.ndarray) -> Any:
    import torch

    y = torch.tensor(log_ms, dtype=torch.float32)
    slower = (y[:, None] - y[None, :]) > 0.01
    gap = score[:, None] - score[None, :]
    return torch.nn.functional.softplus(-gap[slower]).mean() if slower.any() else score.sum() * 0


def train_fold(samples: list[Sample], a: argparse.Namespace, n_ana: int) -> Any:
    import torch

    torch.manual_seed(a.seed)
    model = build_model(samples[0].nd, a.hidden, a.layers)(n_ana)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    rng = np.random.default_rng(a.seed)
    for _ in range(a.epochs):
        for i in rng.permutation(len(samples)):
            s = samples[i]
            idx = rng.choice(len(s.places), size=min(a.batch, len(s.places)), replace=False)
            loss = pair_loss(model(s, idx), s.log_ms[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="4xgpu-pcie")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reference", default="heft")
    p.add_argument("--max-ops", type=int, default=20_000, help="largest suite graph in the pool")
    p.add_argument("--train-max-ops", type=int, default=6_000, help="largest graph trained on")
    p.add_argument("--extra", type=Path, nargs="*", default=list(EXTRA))
    p.add_argument("--moves", type=int, default=8, help="perturbed copies of each candidate")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--batch", type=int, default=24, help="placements of a graph per step")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--finetuned", type=Path)
    p.add_argument("--finetuned-seed", type=int)
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    graphs = pool_graphs(a.max_ops, a.extra)
    samples = []
    for name, fam in graphs.items():
        samples.append(Sample(name, fam, a.cluster, a.reference, a.seed, a.moves))
    say(f"{len(samples)} graphs, {sum(len(s.places) for s in samples)} placements simulated "
        f"in {time.perf_counter() - t0:.0f} s")  # fmt: skip
    n_ana = samples[0].ana.shape[1]
    rows = []
    for fam in a.families:
        t1 = time.perf_counter()
        train = [s for s in samples if s.family != fam and s.n <= a.train_max_ops]
        model = train_fold(train, a, n_ana)
        model.eval()
        for s in (s for s in samples if s.family == fam):
            k = len(s.names)  # the classical candidates, the first rows of its placements
            with torch.no_grad():
                score = model(s, np.arange(k)).numpy()
            ms = np.exp(s.log_ms[:k])
            pick, best = int(np.argmin(score)), int(np.argmin(ms))
            rows.append({"family": fam, "graph": s.name, "smallest": s.name == smallest(fam),
                         "gnn_choice": s.names[pick], "gnn_ms": float(ms[pick]),
                         "oracle_choice": s.names[best], "oracle_ms": float(ms[best])})  # fmt: skip
            say(
                f"{s.name}: {s.names[pick]} {ms[pick] / ms[best]:.3f}x the fastest "
                f"({s.names[best]})"
            )
        say(f"{fam}: trained on {len(train)} graphs in {time.perf_counter() - t1:.0f} s")
    fseed = a.seed if a.finetuned_seed is None else a.finetuned_seed
    tuned = finetuned_ms(a.finetuned, fseed)
    sm = [r for r in rows if r["smallest"]]
    rated = [r["gnn_ms"] / tuned[r["graph"]] for r in sm if r["graph"] in tuned]
    summary = {
        "all_over_fastest": gm([r["gnn_ms"] / r["oracle_ms"] for r in rows]),
        "smallest_over_fastest": gm([r["gnn_ms"] / r["oracle_ms"] for r in sm]),
        "smallest_over_finetuned": gm(rated) if rated else None,
    }
    meta = {"cluster": a.cluster, "reference": a.reference, "seed": a.seed,
            "settings": {k: v for k, v in vars(a).items() if isinstance(v, (int, float, str))},
            "machine": machine_info(),
            "command": "python benchmarks/go_costmodel_gnn.py " + shlex.join(
                [str(x) for x in (argv if argv is not None else sys.argv[1:])])}  # fmt: skip
    a.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(a.out / f"gnn-{a.cluster}-ref{a.reference}-s{a.seed}.json",
                      {**meta, "rows": rows, "summary": summary, "finetuned": tuned})  # fmt: skip
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
