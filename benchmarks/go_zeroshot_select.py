"""Zero-shot as a choice: the pre-trained policy picks one of the classical placements.

GO's zero-shot decision on a family it was not trained on is 1.8-2.3x fine-tuned's step time
and, decoded through HEFT, 1.1-1.7x (docs/graphopt-transfer.md), while the fastest classical
placement is within 1.05x of fine-tuned: what pre-training transfers is the imitation of the
training graphs' fastest classical placements ("What zero-shot transfers"). This probe asks
whether it transfers *which* classical placement suits a graph: on each held-out graph the
policy scores every classical candidate by its mean per-op log-probability (the int8 ONNX
policy's device head, as zero-shot is judged; candidates relabelled by first use as the
imitation targets were) and the highest-scoring candidate is the decision. No simulator call
on the held-out graph chooses: the candidates come from algorithms that read the cost model
(one device, the expert split, METIS+cp, m-ETF, and HEFT with each cut cost
:data:`~actorq.graphopt.baselines.CUT_WEIGHTS` and none, each unjudged), and the policy picks.
(The table's "fastest candidate" is the oracle that simulates them all.)

The question is whether the choice beats a fixed rule: each candidate's geomean over the
held-out graphs is reported beside the policy's, so a policy that always picks, say, HEFT with
cut cost 1 has learned nothing a fixed rule would not give.

Reads a placement folder of ``benchmarks/go_transfer.py`` (its ``runs/pretrain-F-sN``);
fine-tuned step times from ``--finetuned FOLDER``'s ``F-finetune-sN.json`` cells. Writes
``zeroshot-select-sN.json`` and ``.md`` into the folder and prints the table.

    .venv/bin/python benchmarks/go_zeroshot_select.py FOLDER --finetuned HEADLINE_FOLDER --seed 1
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from go_guided_decode import add_folder_args, finetuned_ms, open_folder
from go_transfer import FAMILIES, smallest
from peers import machine_info, say, write_json_atomic

#: Candidates from :func:`actorq.graphopt.baselines.run_baselines` (the rest are HEFT's).
RUNNER = ("single", "expert", "metis+cp", "m-etf")


def placement_ms(task: Any, placement: np.ndarray) -> float:
    """``placement``'s step time on ``task``'s graph (ms, penalised when it does not fit), as
    the placement task judges it (its other decisions the reference's)."""
    from actorq.agents.go.inputs import HEADS

    a = np.zeros((task.num_ops, len(HEADS)), np.int64)
    a[:, 0] = placement
    return 1e3 * float(task.judge(a)[2]["score"])


def candidates(
    graph: str, cluster: str, reference: str, seed: int
) -> dict[str, tuple[np.ndarray, float]]:
    """Each classical candidate of ``graph`` by name: :func:`task_candidates` of its placement
    task."""
    from actorq.agents.go.actor import GraphTask

    return task_candidates(GraphTask(graph, "placement", cluster, reference), seed)


def task_candidates(task: Any, seed: int) -> dict[str, tuple[np.ndarray, float]]:
    """Each classical candidate of ``task``'s graph by name: its placement, relabelled by first
    use in topological order where the cluster is unchanged by it (the imitation targets'
    labels, :mod:`actorq.agents.go.targets`), and its step time (ms, penalised) as the task
    judges."""
    from actorq.agents.go.targets import first_use_labels, symmetric_under
    from actorq.graphopt.baselines import CUT_WEIGHTS, heft, run_baselines

    sim, g, c = task.env.sim, task.env.graph, task.env.cluster
    found = {b.name: b.decision.placement for b in run_baselines(sim, RUNNER, seed=seed)}
    for w in (0.0, *CUT_WEIGHTS):
        found["heft" if w == 0 else f"heft-cut{w:g}"] = heft(sim, cut=w).placement
    out = {}
    for k, p in found.items():
        p = np.asarray(p, np.int64)
        new = first_use_labels(p, g.topo_order, c.num_devices)
        p = new[p] if symmetric_under(c, new) else p  # the same step time either way
        out[k] = (p, placement_ms(task, p))
    return out


def trained_rule(times: dict[str, dict[str, float]], held_out: str) -> str:
    """The candidate a classical user would fix from the training graphs: the one whose step
    time over the fastest candidate's has the smallest geomean on every graph but
    ``held_out``."""
    train = [g for g in times if g != held_out]
    names = list(times[held_out])

    def cost(n: str) -> float:
        return float(np.mean([np.log(times[g][n] / min(times[g].values())) for g in train]))

    return min(names, key=cost)


def family_row(
    root: Path, fam: str, cluster: str, reference: str, seed: int,
    cands: dict[str, tuple[np.ndarray, float]],
) -> dict[str, Any]:  # fmt: skip
    """The pre-trained policy's choice among the held-out graph's candidates ``cands``."""
    from actorq.agents.go.actor import GraphTask, log_softmax
    from actorq.agents.go.inputs import InputSpec, OnnxGOPolicy
    from actorq.agents.go.networks import onnx_bytes
    from actorq.cli.graphopt import load_go_policy as load_policy
    from actorq.graphopt.cluster import get_cluster

    nd = get_cluster(cluster).num_devices
    model, info = load_policy(str(root / "runs" / f"pretrain-{fam}-s{seed}"), nd)
    runtime = OnnxGOPolicy(onnx_bytes(model, "int8"))
    graph = smallest(fam)
    task = GraphTask(
        graph, "placement", cluster, reference, InputSpec.of_policy(model.config, info.start)
    )
    out = runtime(task.inputs)
    lp = log_softmax(out["placement"])
    ops = np.arange(task.num_ops)

    score = {k: float(lp[ops, p].mean()) for k, (p, _) in cands.items()}
    # the same less each device's share of the policy's probability over the graph's ops: a
    # policy that puts most ops on its first device scores any placement by how much of it
    # lands there (one device wins); this asks how much more likely than its base rate
    log_share = np.log(np.exp(lp).mean(0))
    lift = {k: float((lp[ops, p] - log_share[p]).mean()) for k, (p, _) in cands.items()}
    times = {k: t for k, (_, t) in cands.items()}
    chosen = max(score, key=lambda k: score[k])
    chosen_lift = max(lift, key=lambda k: lift[k])
    by_score = sorted(score, key=lambda k: -score[k])
    fastest = min(times, key=lambda k: times[k])
    return {
        "family": fam,
        "held_out": graph,
        "chosen": chosen,
        "chosen_ms": times[chosen],
        "fastest": fastest,
        "fastest_ms": times[fastest],
        "fastest_rank": by_score.index(fastest) + 1,
        "chosen_lift": chosen_lift,
        "chosen_lift_ms": times[chosen_lift],
        "argmax_ms": placement_ms(task, task.decide(out, None)[0][:, 0]),
        "guided_ms": placement_ms(task, task.guided(out, 1.0)[:, 0]),
        "score": score,
        "lift": lift,
        "times": times,
    }


def report(rows: list[dict[str, Any]], tuned: dict[str, float], meta: dict[str, Any]) -> str:
    names = list(rows[0]["times"])
    lines = [
        f"# Zero-shot as a choice among classical placements ({meta['cluster']}, seed "
        f"{meta['seed']})",
        "",
        f"Command: `{meta['command']}`",
        "",
        "Held-out graphs, step time ms; chosen: the candidate the pre-trained policy gives the "
        "highest mean per-op log-probability (no simulator call chooses); by lift: the highest "
        "mean per-op log-probability less the log of the device's mean probability over the "
        "graph's ops (its base rate); fastest: the oracle "
        "over the same candidates (rank: its place in the policy's order, 1 = chosen); argmax "
        "and guided (HEFT guided by the policy, beta 1): the policy's own decisions; rule from "
        "the training graphs: the candidate whose step time over the fastest candidate's has "
        "the smallest geomean on the five other families' smallest graphs (a classical user's "
        "fixed choice, no policy and no simulator call on the held-out graph).",
        "",
        "| held-out graph | chosen | chosen ms | chosen by lift | its ms | fastest | fastest ms "
        "| rank | argmax ms | guided ms | rule from the training graphs | its ms | fine-tuned ms |",
        "|---|---|---:|---|---:|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        ft = tuned.get(r["held_out"])
        lines.append(
            f"| {r['held_out']} | {r['chosen']} | {r['chosen_ms']:.1f} | {r['chosen_lift']} | "
            f"{r['chosen_lift_ms']:.1f} | {r['fastest']} | "
            f"{r['fastest_ms']:.1f} | {r['fastest_rank']} of {len(names)} | {r['argmax_ms']:.1f}"
            f" | {r['guided_ms']:.1f} | {r['rule']} | {r['rule_ms']:.1f} | "
            f"{'-' if ft is None else f'{ft:.1f}'} |"
        )
    rated = [r for r in rows if r["held_out"] in tuned]
    if rated:

        def gm(key: Any) -> float:
            return float(np.exp(np.mean([np.log(key(r) / tuned[r["held_out"]]) for r in rated])))

        cols = {
            "the policy's choice": gm(lambda r: r["chosen_ms"]),
            "the policy's choice by lift": gm(lambda r: r["chosen_lift_ms"]),
            "fastest candidate (oracle)": gm(lambda r: r["fastest_ms"]),
            "the policy's argmax": gm(lambda r: r["argmax_ms"]),
            "guided through HEFT": gm(lambda r: r["guided_ms"]),
            "the rule fixed on the training graphs": gm(lambda r: r["rule_ms"]),
        }
        fixed = {n: gm(lambda r, n=n: r["times"][n]) for n in names}
        best_fixed = min(fixed, key=lambda n: fixed[n])
        lines += [
            "",
            f"Geomean step time / fine-tuned over {len(rated)} graphs:",
            "",
            "| decision | geomean / fine-tuned |",
            "|---|---:|",
            *(f"| {k} | {v:.3f}x |" for k, v in cols.items()),
            *(f"| always {n}{' (the best fixed rule in hindsight)' if n == best_fixed else ''} | "
              f"{fixed[n]:.3f}x |" for n in names),
        ]  # fmt: skip
    lines += ["", f"Machine: {meta['machine'].get('cpu_model', '?')}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_folder_args(p)
    a = p.parse_args(argv)
    opened = open_folder(a)
    if opened is None:
        return 2
    cluster, reference, families = opened
    say("judging every candidate on the six families' smallest graphs")
    cands = {smallest(f): candidates(smallest(f), cluster, reference, a.seed) for f in FAMILIES}
    times = {g: {k: t for k, (_, t) in c.items()} for g, c in cands.items()}
    rows = []
    for fam in families:
        say(f"{fam}: scoring the candidates")
        row = family_row(a.folder, fam, cluster, reference, a.seed, cands[smallest(fam)])
        rule = trained_rule(times, row["held_out"])
        rows.append({**row, "rule": rule, "rule_ms": row["times"][rule]})
    ref_seed, tuned = finetuned_ms(a, rows)
    meta = {"cluster": cluster, "seed": a.seed, "finetuned_seed": ref_seed,
            "machine": machine_info(),
            "command": "python benchmarks/go_zeroshot_select.py " + shlex.join(
                [str(x) for x in (argv if argv is not None else sys.argv[1:])])}  # fmt: skip
    text = report(rows, tuned, meta)
    write_json_atomic(a.folder / f"zeroshot-select-s{a.seed}.json",
                      {**meta, "rows": rows, "finetuned": tuned, "candidates": times})  # fmt: skip
    (a.folder / f"zeroshot-select-s{a.seed}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
