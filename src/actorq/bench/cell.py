"""One cell of a benchmark matrix, in its own process: ``python -m actorq.bench.cell CELL_JSON``.

A fresh process per cell, so a crash (or a leak, or a stuck actor) in one run is recorded as that
cell's failure and the matrix goes on. Energy and CO2 are the run's own (``train`` tracks them
with :class:`~actorq.energy.EnergyTracker` over its training loop, on the spec's grid), in
``summary.json`` under the ``energy_*`` keys.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m actorq.bench.cell CELL_JSON", file=sys.stderr)
        return 2
    from actorq.agents import config_class
    from actorq.energy import DEFAULT_COUNTRY
    from actorq.experiment import train

    path = Path(args[0])
    cell = json.loads(path.read_text())
    cfg = config_class(cell["agent"]).from_json(cell["config"])
    cfg.run_dir = str(path.parent)
    cfg.progress = False
    cfg.energy, cfg.energy_country = True, cell.get("country", DEFAULT_COUNTRY)
    result = train(cfg)
    return 130 if result.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
