"""``actorq bench SPEC`` and ``actorq report RESULTS`` (dispatched from actorq.cli)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated

import tyro

from actorq.cli.args import parse


@dataclasses.dataclass
class BenchArgs:
    """Run a benchmark matrix (agent × env × precision × seed × policy width) from a TOML spec,
    one fresh process per cell; finished cells are skipped, so it resumes where it stopped."""

    spec: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="SPEC.toml")]
    """The TOML spec (see docs/bench.md; e.g. benchmarks/specs/smoke.toml)."""
    results: str | None = None
    """Results directory; default runs/bench-<spec name>."""
    # append: each --override adds one (a plain tuple would keep only the last flag given)
    override: tyro.conf.UseAppendAction[tuple[str, ...]] = ()
    """Config fields set for every cell, over the spec: KEY=VALUE, repeatable, e.g.
    --override device=cuda --override actors=15 (the learner on a GPU, actors on 15 cores)."""
    tasks: tyro.conf.UseAppendAction[tuple[str, ...]] = ()
    """Run only these tasks' cells (their labels; repeatable), e.g. --tasks ppo-cartpole: one
    claim of a spec that holds several, into its own results directory."""
    cells: tyro.conf.UseAppendAction[tuple[str, ...]] = ()
    """Run only the cells whose names match (shell-style, repeatable; with --tasks, of those
    tasks), e.g. --cells '*-s2': a long matrix split across machines or sessions."""
    dry_run: bool = False
    """Validate the spec and list the cells (finished or not) without running anything."""
    progress: bool = True
    """Show a progress bar."""


@dataclasses.dataclass
class ReportArgs:
    """Write RESULTS/report.md with PNG plots from a results directory of `actorq bench`."""

    results: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RESULTS_DIR")]
    """Results directory (one run directory per cell)."""
    reps: int = 2000
    """Bootstrap resamples for the 95% confidence intervals (rliable's stratified bootstrap),
    100 to 100000."""


def cmd_bench(argv: list[str]) -> int:
    from actorq.bench.runner import plan_matrix, run_matrix
    from actorq.bench.spec import load_spec, only_cells, only_tasks, parse_overrides

    a = parse(BenchArgs, argv, "actorq bench")
    spec = only_tasks(load_spec(a.spec, parse_overrides(a.override)), a.tasks)
    spec = only_cells(spec, a.cells)
    spec.validate()
    results = Path(a.results) if a.results else Path("runs") / f"bench-{spec.name}"
    if a.dry_run:
        # the same reads and checks as a run (summaries, machine.json), and no writes
        plan = plan_matrix(spec, results)
        finished = {c.name for c in plan.finished}
        for cell in spec.cells:
            state = "finished" if cell.name in finished else "to run"
            if cell.name in plan.resumes:
                state = "to run on from its checkpoint"
            print(f"{cell.name}  ({state})")
        print(f"{len(spec.cells)} cells -> {results}")
        return 0
    out = run_matrix(spec, results, progress=a.progress)
    print(
        f"bench {spec.name}: {len(out.ran)} ran, {len(out.skipped)} already finished, "
        f"{len(out.failed)} failed; report with: actorq report {results}"
    )
    return 1 if out.failed else 0


def cmd_report(argv: list[str]) -> int:
    from actorq.bench.report import write_report

    a = parse(ReportArgs, argv, "actorq report")
    path = write_report(Path(a.results), reps=a.reps)
    print(f"wrote {path}", file=sys.stdout)
    return 0
