"""Zero-shot as a choice by a learned cost model: can a model trained on other graphs pick the
fastest classical placement of a new graph without simulating it?

``benchmarks/go_zeroshot_select.py`` found that GO's pre-trained policy does not know which
classical placement suits a held-out family (its choice 1.25-1.44x fine-tuned's step time),
that a rule fixed on the five training families does better (1.12-1.13x), and that the oracle
among the same ten candidates is 1.04-1.05x. This probe asks whether the missing piece is a
learned cost model (the idea of Kaufman et al., "A Learned Performance Model for TPUs", MLSys
2021, at the level of candidates): per candidate, cheap analytic estimates computed from the IR
and the cluster without the simulator (each device's compute load; the critical path with every
cut edge's transfer; each link's, sender's and receiver's transfer time; parameter bytes over
capacity; devices used), taken relative to the graph's best candidate on each, plus which
algorithm made the candidate. A linear model learns the simulated step time over the fastest
candidate's from them, by least squares (``ridge``) or by pairwise ranking (``pairs``:
logistic loss on every ordered pair of a graph's candidates, RankNet's loss with a linear
score, Burges et al., ICML 2005).

Protocol: the pool is every suite graph of at most ``--max-ops`` ops and every imported graph in
``--extra`` folders (Hugging Face models, never held out). For each of the suite's six families,
the models are trained on the pool less that family's graphs, and judged on each of its graphs:
the step time of the candidate with the lowest predicted cost, over the fastest candidate's.
Beside them: ``analytic`` (the lowest analytic estimate, no learning), ``rule`` (the one candidate
with the best geomean over the training pool, a classical user's fixed choice) and the oracle.
Where ``--finetuned`` has ``F-finetune-sN.json`` cells, the family's smallest graph (the one GO's
transfer tables hold out) is also reported over fine-tuned GO.

Candidates and features are computed once per graph and kept (``pool-<cluster>-sN.json``: a
rerun resumes); each takes a fraction of a second up to 20k ops.

    .venv/bin/python benchmarks/go_zeroshot_costmodel.py --cluster 4xgpu-pcie --seed 1 \\
        --finetuned benchmarks/results/go_transfer_ptsteps/placement-4xgpu-pcie-...
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
from go_guided_decode import finetuned_cells
from go_transfer import FAMILIES, num_ops, smallest
from go_zeroshot_select import task_candidates
from peers import machine_info, say, write_json_atomic

RESULTS = Path("benchmarks/results/go_zeroshot_costmodel")
EXTRA = (
    Path("benchmarks/results/go_more_families/graphs"),
    Path("benchmarks/results/go_more_families/relatives/graphs"),
)
#: The analytic estimates taken relative to the graph's smallest (log of the ratio).
RELATIVE = ("est", "max_dev", "cp", "max_load")
CHOOSERS = ("ridge", "pairs", "analytic", "rule", "oracle")


def analytic(task: Any, placement: np.ndarray) -> dict[str, float]:
    """Cheap estimates of ``placement``'s cost, read from the IR and the cluster (seconds, no
    simulator run): each device's compute load (roofline op times), the critical path with
    every cut edge's transfer (latency + bytes / bandwidth of its device pair), the busiest
    link's, sender's and receiver's transfer time, parameter bytes over capacity."""
    sim, g, c = task.env.sim, task.env.graph, task.env.cluster
    times = sim.op_times()  # (ops, devices)
    n, nd = times.shape
    p = placement
    t = times[np.arange(n), p]
    load = np.bincount(p, weights=t, minlength=nd)
    cut = p[g.src] != p[g.dst]
    a, b = p[g.src], p[g.dst]
    bw = np.where(cut, c.bandwidth[a, b], 1.0)
    xfer = np.where(cut, c.latency[a, b] + g.edge_bytes / bw, 0.0)
    finish = np.zeros(n)
    by_dst = np.argsort(g.dst, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(g.dst, minlength=n))])
    srcs, arrive = g.src[by_dst], xfer[by_dst]
    for i in g.topo_order:
        lo, hi = ptr[i], ptr[i + 1]
        finish[i] = t[i] + ((finish[srcs[lo:hi]] + arrive[lo:hi]).max() if hi > lo else 0.0)
    link = np.bincount((a * nd + b)[cut], weights=xfer[cut], minlength=nd * nd)
    send = np.bincount(a[cut], weights=xfer[cut], minlength=nd)
    recv = np.bincount(b[cut], weights=xfer[cut], minlength=nd)
    cap = np.array([d.memory for d in c.devices])
    params = np.bincount(p, weights=g.param_bytes, minlength=nd)
    cp = float(finish.max())
    return {
        "max_load": float(load.max()),
        "cp": cp,
        "est": max(float(load.max()), cp),
        "max_dev": max(float((load + send + recv).max()), cp),
        "comm": float(xfer.sum()),
        "max_link": float(link.max()),
        "param_frac": float((params / cap).max()),
        "used": float((load > 0).sum()),
        "work": float(times.min(1).sum()),
        "devices": float(nd),
    }


def pool_graphs(max_ops: int, extra: list[Path]) -> dict[str, str | None]:
    """Pool graph -> its suite family (None for imports), keyed by the name GraphTask takes."""
    from actorq.graphopt.suite import suite_names

    out: dict[str, str | None] = {}
    for fam in FAMILIES:
        for name in suite_names(fam):
            if num_ops(name) <= max_ops or name == smallest(fam):
                out[name] = fam
    for folder in extra:
        for f in sorted(folder.glob("*.npz")):
            out[str(f)] = None
    return out


def build_pool(
    path: Path, graphs: dict[str, str | None], cluster: str, reference: str, seed: int
) -> dict:
    """Each pool graph's candidates (step time, ms, under ``reference``'s schedule: the
    placement task keeps the reference decision's priorities) and their analytic estimates,
    computed once and kept in ``path`` (a rerun resumes)."""
    from actorq.agents.go.actor import GraphTask

    pool: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {"graphs": {}}
    for name, fam in graphs.items():
        if name in pool["graphs"]:
            continue
        task = GraphTask(name, "placement", cluster, reference)
        cands = task_candidates(task, seed)
        rows = {k: {"ms": ms, **analytic(task, p)} for k, (p, ms) in cands.items()}
        pool["graphs"][name] = {"family": fam, "ops": task.num_ops, "candidates": rows}
        write_json_atomic(path, pool)
        say(f"{Path(name).stem}: {task.num_ops} ops, {len(rows)} candidates")
    return pool


def estimates(cands: dict[str, dict[str, float]], names: list[str]) -> np.ndarray:
    """One row per placement (in ``names``' order): the log of each analytic estimate over the
    graph's smallest, transfer time and busiest link over the graph's work, infeasible
    parameters, share of devices used."""
    lo = {k: min(c[k] for c in cands.values()) for k in RELATIVE}
    rows = []
    for n in names:
        c = cands[n]
        rows.append(
            [np.log(c[k] / lo[k]) for k in RELATIVE]
            + [c["comm"] / c["work"], c["max_link"] / c["work"], float(c["param_frac"] > 1.0)]
            + [c["used"] / c["devices"]]
        )
    return np.asarray(rows, np.float64)


def features(cands: dict[str, dict[str, float]], names: list[str]) -> np.ndarray:
    """:func:`estimates` and the candidate's algorithm (one-hot)."""
    return np.concatenate([estimates(cands, names), np.eye(len(names))], axis=1)


def target(cands: dict[str, dict[str, float]], names: list[str]) -> np.ndarray:
    """log(step time / the graph's fastest candidate's)."""
    ms = np.array([cands[n]["ms"] for n in names])
    return np.log(ms / ms.min())


def fit_ridge(xs: list[np.ndarray], ys: list[np.ndarray], lam: float) -> np.ndarray:
    x, y = np.concatenate(xs), np.concatenate(ys)
    return np.linalg.solve(x.T @ x + lam * np.eye(x.shape[1]), x.T @ y)


def fit_pairs(xs: list[np.ndarray], ys: list[np.ndarray], lam: float) -> np.ndarray:
    """Linear scores by pairwise logistic loss over each graph's candidates (pairs whose step
    times differ by more than 1%), L2-regularised, by L-BFGS."""
    import torch

    data = []
    for x, y in zip(xs, ys, strict=True):
        slower = (y[:, None] - y[None, :]) > 0.01
        data.append((torch.tensor(x), torch.tensor(slower)))
    w = torch.zeros(xs[0].shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=300, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = lam * (w**2).sum()
        for x, slower in data:
            s = x @ w
            gap = s[:, None] - s[None, :]  # want the slower one scored higher
            loss = loss + torch.nn.functional.softplus(-gap[slower]).sum() / len(data)
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach().numpy()


def leave_family_out(pool: dict, lam: float) -> list[dict[str, Any]]:
    graphs = pool["graphs"]
    names = list(next(iter(graphs.values()))["candidates"])
    data = {g: (features(v["candidates"], names), target(v["candidates"], names))
            for g, v in graphs.items()}  # fmt: skip
    rows = []
    for fam in FAMILIES:
        train = [g for g, v in graphs.items() if v["family"] != fam]
        xs, ys = [data[g][0] for g in train], [data[g][1] for g in train]
        w = {"ridge": fit_ridge(xs, ys, lam), "pairs": fit_pairs(xs, ys, lam / 100)}
        rule = names[int(np.argmin(np.mean(ys, axis=0)))]
        for g in (g for g, v in graphs.items() if v["family"] == fam):
            x, y = data[g]
            pick = {k: int(np.argmin(x @ wk)) for k, wk in w.items()}
            pick["analytic"] = int(np.argmin(x[:, RELATIVE.index("est")]))
            pick["rule"] = names.index(rule)
            pick["oracle"] = int(np.argmin(y))
            ms = graphs[g]["candidates"]
            rows.append({
                "family": fam, "graph": g, "smallest": g == smallest(fam),
                **{f"{k}_choice": names[i] for k, i in pick.items()},
                **{f"{k}_ms": ms[names[i]]["ms"] for k, i in pick.items()},
            })  # fmt: skip
    return rows


def finetuned_ms(folder: Path | None, seed: int) -> dict[str, float]:
    """Fine-tuned GO's int8 step time (ms) on each family's smallest graph, where ``folder`` has
    its cell (:func:`go_guided_decode.finetuned_cells`)."""
    if folder is None:
        return {}
    return finetuned_cells(folder, seed, [{"family": f, "held_out": smallest(f)} for f in FAMILIES])


def gm(xs: list[float]) -> float:
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def report(rows: list[dict[str, Any]], tuned: dict[str, float], meta: dict[str, Any]) -> str:
    lines = [
        f"# Zero-shot as a choice by a learned cost model ({meta['cluster']}, reference "
        f"{meta['reference']}, seed {meta['seed']})",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Pool: {meta['pool_graphs']} graphs ({meta['imports']} imports, never held out); each "
        "family held out in turn, the models trained on the rest. Step time of each chooser's "
        "candidate over the fastest candidate's (the oracle), per held-out graph:",
        "",
        "| held-out graph | fastest | ridge | pairs | analytic | rule | " + " | ".join(
            f"{k} / fastest" for k in CHOOSERS[:-1]) + " |",
        "|---|---|---|---|---|---|" + "---:|" * (len(CHOOSERS) - 1),
    ]  # fmt: skip
    for r in rows:
        ratios = " | ".join(f"{r[f'{k}_ms'] / r['oracle_ms']:.3f}" for k in CHOOSERS[:-1])
        lines.append(
            f"| {r['graph']} | {r['oracle_choice']} | {r['ridge_choice']} | {r['pairs_choice']}"
            f" | {r['analytic_choice']} | {r['rule_choice']} | {ratios} |"
        )
    sm = [r for r in rows if r["smallest"]]
    lines += [
        "",
        "Geomean step time over the fastest candidate's (and over fine-tuned GO's on the "
        "families' smallest graphs, the graphs GO's transfer tables hold out):",
        "",
        "| chooser | all held-out graphs | smallest graphs | smallest / fine-tuned GO |",
        "|---|---:|---:|---:|",
    ]
    for k in CHOOSERS:
        over = gm([r[f"{k}_ms"] / r["oracle_ms"] for r in rows])
        small = gm([r[f"{k}_ms"] / r["oracle_ms"] for r in sm])
        rated = [r[f"{k}_ms"] / tuned[r["graph"]] for r in sm if r["graph"] in tuned]
        ft = f"{gm(rated):.3f}x ({len(rated)})" if rated else "-"
        lines.append(f"| {k} | {over:.3f}x | {small:.3f}x | {ft} |")
    lines += ["", f"Machine: {meta['machine'].get('cpu_model', '?')}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="4xgpu-pcie")
    p.add_argument("--seed", type=int, default=0, help="the baselines' seed (METIS)")
    p.add_argument(
        "--reference",
        default="heft",
        help="the decision whose schedule placements keep (GO's transfer tables: heft)",
    )
    p.add_argument("--max-ops", type=int, default=20_000, help="largest suite graph in the pool")
    p.add_argument("--extra", type=Path, nargs="*", default=list(EXTRA), help="import folders")
    p.add_argument("--lam", type=float, default=1.0, help="L2 weight (pairs: lam / 100)")
    p.add_argument("--finetuned", type=Path, help="folder with F-finetune-sN.json cells")
    p.add_argument("--finetuned-seed", type=int, help="its cells' seed (default: --seed)")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    for f in a.extra:
        if not f.is_dir():
            say(f"--extra {f}: not a folder")
            return 2
    a.out.mkdir(parents=True, exist_ok=True)
    graphs = pool_graphs(a.max_ops, a.extra)
    stem = f"{a.cluster}-ref{a.reference}-s{a.seed}"
    pool = build_pool(a.out / f"pool-{stem}.json", graphs, a.cluster, a.reference, a.seed)
    pool["graphs"] = {g: v for g, v in pool["graphs"].items() if g in graphs}
    rows = leave_family_out(pool, a.lam)
    fseed = a.seed if a.finetuned_seed is None else a.finetuned_seed
    tuned = finetuned_ms(a.finetuned, fseed)
    meta = {"cluster": a.cluster, "reference": a.reference, "seed": a.seed,
            "finetuned_seed": fseed, "lam": a.lam,
            "pool_graphs": len(pool["graphs"]),
            "imports": sum(v["family"] is None for v in pool["graphs"].values()),
            "machine": machine_info(),
            "command": "python benchmarks/go_zeroshot_costmodel.py " + shlex.join(
                [str(x) for x in (argv if argv is not None else sys.argv[1:])])}  # fmt: skip
    text = report(rows, tuned, meta)
    out = a.out / f"costmodel-{stem}"
    write_json_atomic(out.with_suffix(".json"), {**meta, "rows": rows, "finetuned": tuned})
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
