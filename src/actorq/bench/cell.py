"""One cell of a benchmark matrix, in its own process: ``python -m actorq.bench.cell CELL_JSON``.

A fresh process per cell, so a crash (or a leak, or a stuck actor) in one run is recorded as that
cell's failure and the matrix goes on. The whole run is wrapped in an
:class:`~actorq.energy.EnergyTracker`; its reading is added to ``summary.json`` under the
``energy_*`` keys unless the run recorded its own.
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
    from actorq.energy import DEFAULT_COUNTRY, SUMMARY_KWH, EnergyTracker
    from actorq.experiment import train

    path = Path(args[0])
    cell = json.loads(path.read_text())
    cfg = config_class(cell["agent"]).from_json(cell["config"])
    cfg.run_dir = str(path.parent)
    cfg.progress = False
    tracker = EnergyTracker(country_iso_code=cell.get("country", DEFAULT_COUNTRY))
    tracker.start()
    try:
        result = train(cfg)
    finally:
        reading = tracker.stop()
    summary_path = path.parent / "summary.json"
    summary = json.loads(summary_path.read_text())
    if summary.get(SUMMARY_KWH) is None:
        summary.update(reading.as_summary())
        tmp = summary_path.with_name("summary.json.tmp")
        tmp.write_text(json.dumps(summary, indent=1))
        tmp.replace(summary_path)
    return 130 if result.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
