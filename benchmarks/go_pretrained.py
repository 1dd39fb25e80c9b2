"""Train, package and judge the GO placement policy that ships with actorq.

``train``: ``actorq train go`` (placement, int8 actors, deterministic for a seed) on each
family's smallest graph and ``--train-extra``'s graphs but ``--hold-out``'s, ``--steps``
decisions; arguments after ``--`` go to ``actorq train go``. ``package``: the final weights to
the policy file (``--policy-out``, default the shipped path; <= 10 MB). ``judge``: through
``actorq graphopt place``, on the training graphs, each family's second-smallest and the extra
graphs: greedy, guided, best of ``--samples``, and the baselines (``--budget`` calls). Resumable;
one JSON per graph under ``--results``, then ``report.md``.

    .venv/bin/python benchmarks/go_pretrained.py --cluster 4xgpu-pcie --steps 256 \\
        --results /tmp/go_pretrained_smoke --policy-out /tmp/smoke.safetensors   # smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from _machine import machine_info, say, write_json_atomic
from go_transfer import FAMILIES, geomean

ROOT = Path(__file__).resolve().parents[1]


def by_size(family: str) -> list[str]:
    from actorq.graphopt.suite import get_graph, suite_names

    return sorted(suite_names(family), key=lambda n: get_graph(n).num_ops)


def training_graphs(extra_train: list[str]) -> list[str]:
    """The six families' smallest graphs, then ``--train-extra``'s."""
    return [by_size(f)[0] for f in FAMILIES] + extra_train


def train_policy(
    args: argparse.Namespace, extra: list[str], run_dir: Path, graphs: list[str]
) -> dict[str, Any]:
    from actorq.agents.go.config import GOConfig
    from actorq.cli.args import parse
    from actorq.experiment import train

    # int8 actors unless the extra arguments say otherwise: the shipped files were made so
    pinned = ["--precision", "int8", *extra]
    base = parse(GOConfig, pinned, "go_pretrained.py -- (actorq train go settings)")
    cfg = dataclasses.replace(
        base, env=f"graphopt:placement/{graphs[0]}", graphs=tuple(graphs[1:]), cluster=args.cluster,
        actors=0, total_steps=args.steps, eval_every=max(1, args.steps // 10), seed=args.seed,
        run_dir=str(run_dir), progress=False, energy=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    r = train(cfg)
    if r.interrupted:  # not a finished training run: nothing recorded, nothing judged
        raise SystemExit(130)
    return {
        "graphs": graphs, "decisions": r.env_steps, "updates": r.updates,
        "train_gain": r.eval_return, "seconds": time.perf_counter() - t0,
    }  # fmt: skip


def judge(graph: str, args: argparse.Namespace, policy: Path) -> dict[str, Any]:
    from actorq.cli.graphopt import PlaceArgs, baseline_rows, place
    from actorq.graphopt.baselines import PLACEMENT

    a = PlaceArgs(graph=graph, cluster=args.cluster, policy=str(policy), samples=args.samples,
                  seed=args.seed, budget=args.budget)  # fmt: skip
    res = place(a)
    # placement-only, as `place` runs them: annealing and climbing start from the best
    # unfused placement (with best+fuse among them they fused, which GO's placement cannot)
    rows = baseline_rows(graph, args.cluster, args.budget, args.seed, ",".join(PLACEMENT))
    res["baselines"] = rows["rows"]
    del res["placement"], res["priority"]
    return res


PLACEMENT_BASELINES = (
    "single", "expert", "metis+cp", "heft", "heft-cut", "m-etf", "random", "anneal", "climb",
    "heft-search",
)  # fmt: skip


#: What a judged graph is to the policy: a training graph, an unseen suite graph, or another
#: architecture (``--train-extra``), trained on or held out.
KINDS = {"training": "training graphs", "unseen": "unseen graphs",
         "other-trained": "graphs of other architectures trained on",
         "other": "graphs of other architectures not trained on"}  # fmt: skip
TRAINED = ("training", "other-trained")


def shown_name(graph: str) -> str:
    return Path(graph).stem if graph.endswith(".npz") else graph


def shared_baselines(cells: list[dict[str, Any]]) -> list[str]:
    """The placement baselines every judge cell has (cells from before a baseline joined, e.g.
    climb, lack its row), in table order: one device first."""
    return [n for n in PLACEMENT_BASELINES
            if all(n in {b["baseline"] for b in c["baselines"]} for c in cells)]  # fmt: skip


def best_baseline(cell: dict[str, Any], names: list[str]) -> tuple[str, float]:
    """A judge cell's fastest feasible baseline among ``names`` but the first (one device, which
    every table shows beside the others and none counts as a baseline to beat)."""
    rows = {b["baseline"]: b for b in cell["baselines"]}
    return min(((n, rows[n]["step_time_s"]) for n in names[1:] if rows[n]["feasible"]),
               key=lambda x: x[1])  # fmt: skip


def report(cells: list[tuple[str, str, dict[str, Any]]], meta: dict[str, Any]) -> str:
    names = shared_baselines([r for _, _, r in cells])
    from actorq.graphopt.baselines import SEARCH

    searches = ", ".join(n for n in names if n in SEARCH)
    # judge cells from before `place --guide` lack the HEFT-guided candidate
    guided = all(r.get("guided") for _, _, r in cells)
    calls = meta["samples"] + 1 + guided
    lines = [
        f"# The shipped GO placement policy ({meta['cluster']})",
        "", f"Command: `{meta['command']}`", "",
        f"Policy file: `{meta['policy']}` ({meta['policy_bytes']:,} bytes); trained on "
        f"{', '.join(map(shown_name, meta['train']['graphs']))} for "
        f"{meta['train']['decisions']:,} decisions "
        f"({meta['train']['seconds'] / 60:.1f} min). Step times in ms (simulated; `-` "
        f"infeasible). GO: int8, greedy"
        + (
            ", its device logits decoded by HEFT guided by them (`place --guide 1`)"
            if guided
            else ""
        )
        + f" and the fastest of {calls} placements (the samples besides greedy"
        + (" and guided" if guided else "")
        + f"); {searches}: {meta['budget']} simulator calls.",
        "",
        "| graph | trained on | "
        + " | ".join(names)
        + " | GO greedy | "
        + ("GO guided | " if guided else "")
        + f"GO best of {calls} | GO best vs expert | GO best vs best baseline |",
        "|---|---|" + "---:|" * (len(names) + 4 + guided),
    ]  # fmt: skip
    ratios: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in KINDS}
    for graph, kind, r in cells:
        rows = {b["baseline"]: b for b in r["baselines"]}

        def ms(row: dict[str, Any]) -> str:
            return f"{1e3 * row['step_time_s']:.2f}" if row["feasible"] else "-"

        best = best_baseline(r, names)[1]
        go = r["best"]["score_s"]
        expert = rows["expert"]["step_time_s"]  # the expert split fits every suite graph
        ratios[kind][0].append(expert / go)
        ratios[kind][1].append(best / go)
        lines.append(
            f"| {shown_name(graph)} | {'yes' if kind in TRAINED else 'no'} | "
            + " | ".join(ms(rows[n]) for n in names)
            + f" | {ms(r['greedy'])} | "
            + (f"{ms(r['guided'])} | " if guided else "")
            + f"{ms(r['best'])} | {expert / go - 1:+.1%} | "
            f"{best / go - 1:+.1%} |"
        )
    lines.append("")
    for kind, label in KINDS.items():
        e, b = ratios[kind]
        if e:
            lines.append(
                f"Geomean over {len(e)} {label}: GO (best of {calls}) is "
                f"{geomean(e) - 1:+.1%} vs the expert split and {geomean(b) - 1:+.1%} vs the "
                "best baseline per graph (positive: GO faster)."
            )
    m = meta["machine"]
    lines += ["", f"Machine: {m.get('cpu_model', '?')} ({m.get('cores', '?')} cores)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="4xgpu-pcie")
    ap.add_argument("--steps", type=int, default=12_000, help="whole-graph decisions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=16, help="sampled placements besides greedy")
    ap.add_argument("--budget", type=int, default=100, help="each search baseline's calls")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks/results/go_pretrained")
    ap.add_argument("--policy-out", type=Path, help="default: the shipped policy's path")
    ap.add_argument(
        "--train-extra", type=Path, nargs="+", metavar="DIR",
        help="train also on every .npz graph in these folders but --hold-out's; judge on all",
    )  # fmt: skip
    ap.add_argument(
        "--hold-out", default="", metavar="NAMES",
        help="with --train-extra: comma-separated file stems in its folders not to train on",
    )  # fmt: skip
    a = ap.parse_args(argv)
    if a.hold_out and not a.train_extra:
        say("--hold-out needs --train-extra")
        return 2
    from actorq.agents.go.pretrained import load_policy_run, save_policy, shipped_path
    from actorq.graphopt.cluster import get_cluster
    from actorq.run import load_run_config

    n = get_cluster(a.cluster).num_devices
    root = a.results / a.cluster
    root.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "benchmarks/go_pretrained.py", *(sys.argv[1:] if argv is None
                                                                    else argv)])  # fmt: skip
    if extra:
        command += " -- " + shlex.join(extra)
    train_json = root / "train.json"
    policy = a.policy_out or shipped_path(n)
    extra_dirs: list[Path] = a.train_extra or []
    flag = "--train-extra"
    extra_graphs = []  # as the settings and reports name them: relative to the repository
    for d in extra_dirs:
        found = [p.resolve() for p in sorted(d.glob("*.npz"))]
        if not found:
            say(f"{flag} {d}: no .npz graph there")
            return 2
        extra_graphs += [str(g.relative_to(ROOT) if g.is_relative_to(ROOT) else g) for g in found]
    stems = [Path(g).stem for g in extra_graphs]
    twice = sorted({n for n in stems if stems.count(n) > 1})
    if twice:  # judge cells and --hold-out name graphs by file stem
        say(f"{flag}: {twice[0]}.npz is in more than one of its folders")
        return 2
    held = {n.strip() for n in a.hold_out.split(",") if n.strip()}
    unknown = sorted(held - {Path(g).stem for g in extra_graphs})
    if unknown:
        say(f"--hold-out: no {', '.join(unknown)}.npz in {' '.join(map(str, extra_dirs))}")
        return 2
    extra_train = [g for g in extra_graphs if Path(g).stem not in held]
    planned = training_graphs(extra_train)
    if train_json.is_file():
        trained = json.loads(train_json.read_text())
        say(f"trained before: {trained['decisions']:,} decisions ({train_json})")
        if trained["graphs"] != planned:
            say(f"{train_json} was trained on other graphs: use another --results")
            return 2
    else:
        where = " ".join(map(str, extra_dirs))
        more = f" and {len(extra_train)} graphs of {where}" if extra_train else ""
        say(f"training on the six families' smallest graphs{more}, {a.steps:,} decisions ...")
        trained = train_policy(a, extra, root / "runs" / "train", planned)
        write_json_atomic(train_json, trained)
    policy.parent.mkdir(parents=True, exist_ok=True)
    run = root / "runs" / "train"
    model, run_info = load_policy_run(run, load_run_config(run, device="cpu"))
    save_policy(model, policy, task="placement", cluster=a.cluster,
                trained_on=trained["graphs"], command=command,
                reference=run_info.reference)  # fmt: skip
    size = policy.stat().st_size
    say(f"wrote {policy} ({size:,} bytes)")
    if size > 10 * 2**20:
        say("error: the policy file is over 10 MB")
        return 1
    cells: list[tuple[str, str, dict[str, Any]]] = []
    smallest = [by_size(f)[0] for f in FAMILIES]
    graphs = [(g, "training") for g in smallest] + [(by_size(f)[1], "unseen") for f in FAMILIES]
    seen = set(trained["graphs"])
    graphs += [(g, "other-trained" if g in seen else "other") for g in extra_graphs]
    for g, kind in graphs:
        p = root / (f"judge-extra-{Path(g).stem}.json" if g.endswith(".npz") else f"judge-{g}.json")
        if p.is_file():
            cells.append((g, kind, json.loads(p.read_text())))
            continue
        say(f"judging {g} ...")
        res = judge(g, a, policy)
        write_json_atomic(p, res)
        cells.append((g, kind, res))
        say(f"  GO best {1e3 * res['best']['score_s']:.2f} ms, greedy "
            f"{1e3 * res['greedy']['score_s']:.2f} ms")  # fmt: skip
    shown = policy.relative_to(ROOT) if policy.is_relative_to(ROOT) else policy
    meta = {"cluster": a.cluster, "command": command, "policy": str(shown), "policy_bytes": size,
            "train": trained, "samples": a.samples, "budget": a.budget,
            "machine": machine_info()}  # fmt: skip
    text = report(cells, meta)
    (root / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
