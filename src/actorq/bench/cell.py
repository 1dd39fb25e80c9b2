"""One cell of a benchmark matrix, in its own process: ``python -m actorq.bench.cell CELL_JSON``.

A fresh process per cell, so a crash (or a leak, or a stuck actor) in one run is recorded as that
cell's failure and the matrix goes on. Energy and CO2 are the run's own (``train`` tracks them
with :class:`~actorq.energy.EnergyTracker` over its training loop, on the spec's grid), in
``summary.json`` under the ``energy_*`` keys. A cell.json that says ``resume`` continues the
run in its directory from its checkpoint (``train`` with ``resume``; an adapter's own resume).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actorq.config import ExperimentConfig

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m actorq.bench.cell CELL_JSON", file=sys.stderr)
        return 2
    from actorq.bench.frameworks import NATIVE, get_adapter
    from actorq.errors import ActorQError
    from actorq.rundir import RunDir

    path = Path(args[0])
    try:
        cfg, cell = _load_cell(path)
    except ActorQError as e:  # one line in the cell's log.txt, and the cell fails (status 2)
        print(f"actorq: error: {e}", file=sys.stderr)
        return 2
    framework = cell.get("framework", NATIVE)
    from actorq.experiment import train

    try:
        if framework != NATIVE:  # another framework's cell, through its adapter; locked as
            # train() locks its run, so that no bench clears the cell while it runs
            with RunDir(path.parent).lock("cell"):
                return 130 if get_adapter(framework).run(cfg, cell, path.parent) else 0
        result = train(cfg)
    except ActorQError as e:  # a diverging learner, a run dir it cannot write: the runner
        print(f"actorq: error: {e}", file=sys.stderr)  # shows this line beside the status
        return 2
    return 130 if result.interrupted else 0


def _load(path: Path) -> ExperimentConfig:
    """The validated config of the cell described by ``path`` (its cell.json)."""
    return _load_cell(path)[0]


def _load_cell(path: Path) -> tuple[ExperimentConfig, dict[str, Any]]:
    """The validated config of the cell described by ``path`` (its cell.json), and the cell."""
    from actorq.agents import AGENTS
    from actorq.bench.frameworks import FRAMEWORKS, NATIVE
    from actorq.bench.results import ResultsError, read_cell_json
    from actorq.bench.spec import run_config
    from actorq.energy import DEFAULT_COUNTRY
    from actorq.errors import shown

    cell = read_cell_json(path)
    if cell is None:
        raise ResultsError(f"cell file not found: {shown(path)}")
    agent, config = cell.get("agent"), cell.get("config")
    if agent not in AGENTS:
        raise ResultsError(f"{path}: unknown agent {agent!r}; expected one of {', '.join(AGENTS)}")
    if config is None:
        raise ResultsError(f"{path}: missing config")
    cfg = run_config(agent, config, cell.get("country", DEFAULT_COUNTRY))
    cfg.run_dir = str(path.parent)
    if cell.get("resume") and cell.get("framework", NATIVE) == NATIVE:
        cfg.resume = cfg.run_dir  # the runner found its checkpoint (spec ``resume = true``)
    cfg.validate()
    framework = cell.get("framework", NATIVE)
    if framework != NATIVE and framework not in FRAMEWORKS:
        raise ResultsError(f"{path}: unknown framework {framework!r}")
    return cfg, cell


if __name__ == "__main__":
    sys.exit(main())
