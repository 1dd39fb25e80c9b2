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
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import tyro

from actorq.cli_args import parse
from actorq.errors import ActorQError

if TYPE_CHECKING:
    from collections.abc import Callable

    from actorq.agents.policy_io import PolicyIO
    from actorq.config import ExperimentConfig


@dataclasses.dataclass
class EvalArgs:
    """Greedy evaluation of a run's latest checkpoint."""

    run_dir: tyro.conf.Positional[str]
    """Run directory (holds config.json and checkpoint/)."""
    precision: Literal["fp32", "fp16", "int8", "int4"] | None = None
    """Precision to evaluate at; default: the run's."""
    episodes: int = 10
    """Episodes (separately seeded environments)."""
    seed: int = 20_000
    """First environment seed."""
    runtime: Literal["ort", "numpy", "torch"] = "ort"
    """Inference runtime."""


@dataclasses.dataclass
class ExportArgs:
    """Export a run's policy as a standalone ONNX model for deployment."""

    run_dir: tyro.conf.Positional[str]
    """Run directory (holds config.json and checkpoint/)."""
    out: str = "policy.onnx"
    """Output file (not overwritten unless --force)."""
    precision: Literal["fp32", "fp16", "int8", "int4"] | None = None
    """Precision of the exported weights; default: the run's."""
    force: bool = False
    """Overwrite --out if it exists."""


def _fail(msg: str, code: int = 2) -> int:
    # one line whatever the input held: a control character typed into a flag (a carriage
    # return in a path, found by the fuzz tests) is shown escaped, not printed
    msg = "".join(c if c.isprintable() else repr(c)[1:-1] for c in msg)
    print(f"actorq: error: {msg}", file=sys.stderr)
    return code


def load_run_policy(
    run_dir: str,
    precision: str | None,
    runtime: str | None = None,
    require: Callable[[ExperimentConfig], None] | None = None,
) -> tuple[ExperimentConfig, PolicyIO, bytes]:
    """A run's config (evaluating with ``runtime`` if given), its policy seam, and its
    checkpointed policy as snapshot bytes (``actorq eval``, ``actorq export``, ``actorq chip
    place --method policy``). ``require(cfg)`` may refuse the run (raising an
    :class:`ActorQError`) before its checkpoint is read."""
    from actorq.agents import builder_for
    from actorq.checkpoint import load
    from actorq.errors import CheckpointError, SnapshotError, first_line, shown
    from actorq.experiment import load_run_config

    rd = Path(run_dir)
    if not rd.is_dir():
        raise ActorQError(f"run directory not found: {shown(rd)}")
    # validated (config.json is input too); the learner only holds weights here: on the CPU
    cfg = load_run_config(rd, device="cpu")
    if require is not None:
        require(cfg)
    if runtime is not None and runtime != cfg.runtime:
        cfg.runtime = runtime  # type: ignore[assignment]
        cfg.validate()  # e.g. a policy exported whole runs in onnxruntime only
    builder = builder_for(cfg)
    tensors, state, _ = load(rd / "checkpoint")
    spec = builder.env_spec(cfg)
    learner = builder.make_learner(cfg, spec)
    try:
        learner.load_state(tensors, state["learner"])
        version = int(state["counters"]["version"])
    except Exception as e:  # e.g. weights of another width than config.json says
        raise CheckpointError(
            f"checkpoint in {rd} does not match its config.json: {first_line(e)}"
        ) from None
    io = builder.policy_io(cfg, spec, learner)
    if not io.is_finite():
        raise SnapshotError(f"the policy in {rd} has NaN or infinite weights (a diverged run)")
    return cfg, io, io.snapshot(version, precision or cfg.precision)


def cmd_eval(a: EvalArgs) -> int:
    if not 1 <= a.episodes <= 100_000:
        return _fail(f"--episodes must be in [1, 100000], got {a.episodes}")
    if not 0 <= a.seed <= 2**32 - 1 - a.episodes:
        return _fail(f"--seed must be in [0, 2**32 - 1 - episodes], got {a.seed}")
    cfg, io, data = load_run_policy(a.run_dir, a.precision, a.runtime)
    rets = io.evaluate(data, a.episodes, a.seed)
    prec = a.precision or cfg.precision
    print(
        f"{cfg.env} {prec}: mean return {rets.mean():.3g} ± {rets.std():.3g} over "
        f"{len(rets)} {'episodes' if len(rets) == a.episodes else 'items'} ({io.eval_label}; "
        f"min {rets.min():.3g}, max {rets.max():.3g})"
    )
    return 0


def cmd_export(a: ExportArgs) -> int:
    from actorq.quant.model_snapshot import ModelSnapshot
    from actorq.quant.runtimes import to_onnx
    from actorq.quant.snapshot import PolicySnapshot

    out = Path(a.out)
    if out.is_dir():
        return _fail(f"--out {out} is a directory; give a file name such as {out / 'policy.onnx'}")
    if not out.parent.is_dir():
        return _fail(f"--out {out}: directory {out.parent} does not exist")
    if out.exists() and not a.force:
        return _fail(f"{out} exists; pass --force to overwrite")
    _, _, snap_bytes = load_run_policy(a.run_dir, a.precision)
    try:
        snap = PolicySnapshot.from_bytes(snap_bytes)
        data, prec, io_names = to_onnx(snap), snap.precision, "input 'obs', output 'out'"
    except ActorQError:  # a policy exported whole (GO's graph network)
        model = ModelSnapshot.from_bytes(snap_bytes)
        data, prec, io_names = model.model, model.precision, f"a {model.kind} policy"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)
    print(f"wrote {out} ({len(data):,} bytes, {prec}, {io_names})")
    return 0


def cmd_train(algo: str, argv: list[str]) -> int:
    from actorq.agents import AGENTS, config_class

    if algo not in AGENTS:
        return _fail(f"unknown algorithm {algo!r}; available: {', '.join(AGENTS)}")

    cfg = parse(config_class(algo), argv, f"actorq train {algo}")
    cfg.validate()
    from actorq.envs import validate_env_id

    validate_env_id(cfg.env)
    from actorq.experiment import train

    result = train(cfg)
    if result.interrupted:
        print(
            f"actorq: interrupted; checkpoint saved. Resume with: actorq train {algo} "
            f"--resume {result.run_dir}",
            file=sys.stderr,
        )
        return 130
    return 0


USAGE = """usage: actorq {train,eval,export,graphopt,chip,bench,report} ...

  actorq train dqn [--env ID] [--precision fp32|fp16|int8|int4|auto] [--actors N] ...   (see --help)
  actorq train d4pg [--env dmc:DOMAIN-TASK] [--precision P] [--device cuda] ...
  actorq train ppo [--env ID] [--precision P] [--num-steps T] [--max-policy-lag K] ...
  actorq train go [--env graphopt:TASK/GRAPH] [--graphs G ...] [--cluster C] [--init-from RUN]
  actorq eval RUN_DIR [--precision P] [--episodes N]
  actorq export RUN_DIR [--out policy.onnx] [--precision P]
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

                return _fail(f"say which algorithm to train: actorq train {{{','.join(AGENTS)}}}")
            return cmd_train(rest[0], rest[1:])
        if cmd == "eval":
            return cmd_eval(parse(EvalArgs, rest, "actorq eval"))
        if cmd == "export":
            return cmd_export(parse(ExportArgs, rest, "actorq export"))
        if cmd == "graphopt":  # graph suite and placement baselines: actorq.graphopt.cli
            from actorq.graphopt.cli import main as graphopt_main

            return graphopt_main(rest)
        if cmd == "chip":  # macro placement on circuit-training netlists: actorq.chip.cli
            from actorq.chip.cli import main as chip_main

            return chip_main(rest)
        if cmd in ("bench", "report"):  # benchmark matrices and their reports: actorq.bench
            from actorq.bench.cli import cmd_bench, cmd_report

            return cmd_bench(rest) if cmd == "bench" else cmd_report(rest)
        return _fail(
            f"unknown command {cmd!r}; expected train, eval, export, graphopt, chip, bench or "
            "report"
        )
    except ActorQError as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        return 130


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
