"""The ``actorq`` command.

    actorq train dqn --env gym:CartPole-v1 --precision int8 --actors 2
    actorq train d4pg --env dmc:cartpole-balance --precision int8
    actorq eval RUN_DIR [--precision fp32] [--episodes 10]
    actorq export RUN_DIR --out policy.onnx [--precision int8]

Errors caused by input (unknown env or precision, bad sizes, a missing or corrupt checkpoint)
print one line and exit with status 2; Ctrl-C or SIGTERM exits with 130 after writing a
checkpoint.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Annotated, Literal

import tyro

from actorq.cli.args import parse
from actorq.cli.train import cmd_train, fail
from actorq.errors import ActorQError, first_line, shown
from actorq.quant.formats import Precision


@dataclasses.dataclass
class EvalArgs:
    """Held-out evaluation of a run's latest (or best, --which best) checkpoint: greedy, or
    sampled where the env family says (Atari: docs/atari.md)."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """Run directory (holds config.json and checkpoint/)."""
    precision: Precision | None = None
    """Precision to evaluate at; default: the run's."""
    episodes: int = 10
    """Episodes (separately seeded environments)."""
    seed: int = 20_000
    """First environment seed."""
    runtime: Literal["ort", "numpy", "torch"] | None = None
    """Inference runtime; default: the run's (as ``actorq.load(...).evaluate()``)."""
    which: Literal["latest", "best"] = "latest"
    """The latest checkpoint, or the best policy the run's evaluations kept (RUN/best)."""


@dataclasses.dataclass
class ExportArgs:
    """Export a run's policy as a standalone ONNX model for deployment."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """Run directory (holds config.json and checkpoint/)."""
    out: str = "policy.onnx"
    """Output file (not overwritten unless --force)."""
    precision: Precision | None = None
    """Precision of the exported weights; default: the run's."""
    force: bool = False
    """Overwrite --out if it exists."""
    which: Literal["latest", "best"] = "latest"
    """The latest checkpoint, or the best policy the run's evaluations kept (RUN/best)."""


def cmd_eval(a: EvalArgs) -> int:
    from actorq.run import load_run_policy
    from actorq.run.policy import check_evaluation

    check_evaluation(a.episodes, a.seed, "--")
    cfg, io, data = load_run_policy(a.run_dir, a.precision, a.runtime, which=a.which)
    rets = io.evaluate(data, a.episodes, a.seed)
    prec = a.precision or cfg.precision
    over, what = _evaluated_over(io.eval_label, len(rets))
    spread = f"min {rets.min():.3g}, max {rets.max():.3g}"
    print(
        f"{cfg.env} {prec}: mean return {rets.mean():.3g} ± {rets.std():.3g}{over} "
        f"({'; '.join(p for p in (what, spread) if p)})"
    )
    return 0


def _evaluated_over(label: str, n: int) -> tuple[str, str]:
    """What ``actorq eval``'s ``n`` returns are over, the count said once: ``(" over N
    episodes", label)``. A label that counts episodes (``"held-out, {episodes} ep"``, as the
    summary says it) leaves its count to "over N episodes"; another (GO's "mean of 3
    graph(s)", chip's "1 episode") says its own, and the line no other."""
    if "{episodes}" not in label:
        return "", label
    rest = re.sub(r"[,;]?\s*\{episodes\}[^,;()]*", "", label).strip(" ,;")
    return f" over {n} episode{'' if n == 1 else 's'}", rest


def cmd_export(a: ExportArgs) -> int:
    from actorq.output import write_output
    from actorq.run import load_run_policy
    from actorq.run.policy import export_path, policy_onnx

    out = export_path(a.run_dir, a.out, "--out", a.force, "--force")  # before the checkpoint
    cfg, _, snap_bytes = load_run_policy(a.run_dir, a.precision, which=a.which)
    data, prec, io_names = policy_onnx(snap_bytes, cfg)
    write_output(out, data, "--out")
    print(f"wrote {out} ({len(data):,} bytes, {prec}, {io_names})")
    return 0


USAGE = """usage: actorq {train,eval,export,graphopt,chip,bench,report} ...

  actorq train dqn [--env ID] [--precision fp32|fp16|int8|int4|auto] [--actors N] ...   (see --help)
  actorq train d4pg [--env dmc:DOMAIN-TASK] [--precision P] [--device cuda] ...
  actorq train ppo [--env ID] [--precision P] [--num-steps T] [--max-policy-lag K] ...
  actorq train go [--env graphopt:TASK/GRAPH] [--graphs G ...] [--cluster C] [--init-from RUN]
  actorq eval RUN_DIR [--precision P] [--episodes N] [--which latest|best]
  actorq export RUN_DIR [--out policy.onnx] [--precision P] [--which latest|best]
  actorq graphopt list | baselines --graph NAME | place --graph NAME [--policy RUN] | train
                                                          (graph optimization, GO)
  actorq chip place NETLIST --out out.plc [--method sa|random|policy] [--policy RUN_DIR]
            | show FILE.plc | cost NETLIST PLC            (macro placement; policy: a PPO run)
  actorq bench SPEC.toml [--results DIR] [--dry-run]      (benchmark matrix, resumable)
  actorq report RESULTS_DIR                               (RESULTS_DIR/report.md + plots)
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "train":
            if not rest or rest[0].startswith("-"):
                if rest and rest[0] in ("-h", "--help"):
                    print(USAGE)
                    return 0
                from actorq.agents import AGENTS

                return fail(f"say which algorithm to train: actorq train {{{','.join(AGENTS)}}}")
            return cmd_train(rest[0], rest[1:])
        if cmd == "eval":
            return cmd_eval(parse(EvalArgs, rest, "actorq eval"))
        if cmd == "export":
            return cmd_export(parse(ExportArgs, rest, "actorq export"))
        if cmd == "graphopt":  # graph suite and placement baselines: actorq.cli.graphopt
            from actorq.cli.graphopt import main as graphopt_main

            return graphopt_main(rest)
        if cmd == "chip":  # macro placement on circuit-training netlists: actorq.cli.chip
            from actorq.cli.chip import main as chip_main

            return chip_main(rest)
        if cmd in ("bench", "report"):  # benchmark matrices and their reports: actorq.bench
            from actorq.cli.bench import cmd_bench, cmd_report

            return cmd_bench(rest) if cmd == "bench" else cmd_report(rest)
        return fail(
            f"unknown command {cmd!r}; expected train, eval, export, graphopt, chip, bench or "
            "report"
        )
    except ActorQError as e:
        return fail(str(e))
    except OSError as e:
        # a backstop: a file system error that no reader turned into its own line (readers ask
        # through actorq.inputs; Python 3.11's Path.is_file() and friends raise, e.g. for a
        # name longer than the filesystem takes) is still one line, not a traceback
        where = f"{shown(e.filename)}: " if e.filename is not None else ""
        return fail(f"{where}{e.strerror or first_line(e)}")
    except KeyboardInterrupt:
        return 130


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
