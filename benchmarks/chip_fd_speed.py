"""Seconds per force-directed run (circuit_training's default schedule, 300 steps) on the shipped
netlists: the overlap test over all pairs against the sweep over x-sorted boxes that
:class:`actorq.chip.force.ForcePlacer` uses above ``_ALL_PAIRS`` pairs, and whether both end at
the same positions (they must, to the bit).

Each netlist starts from its ``initial.plc``; each mode runs ``--repeats`` times on one core
(``OMP_NUM_THREADS=1``), the fastest run reported (the machine is shared). Writes
``chip_fd_speed.json`` and ``.md`` under ``--out`` and prints the table.

    .venv/bin/python benchmarks/chip_fd_speed.py          # ~30 s on an idle core
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import machine_info, say, write_json_atomic

NETLISTS = ("toy_macro_stdcell", "sample_clustered", "macro_tiles_10x10", "ariane133")


def run(name: str, all_pairs: bool, repeats: int) -> tuple[float, np.ndarray, float, int]:
    """The fastest of ``repeats`` FD runs: seconds, final positions, proxy, movable nodes."""
    import actorq.chip.force as force
    from actorq.chip.cost import PlacementCost
    from actorq.chip.netlist import get_netlist, netlist_dir
    from actorq.chip.plc import load_plc

    nl = get_netlist(name)
    old = force._ALL_PAIRS
    force._ALL_PAIRS = 1 << 62 if all_pairs else 0  # one mode whatever the size
    try:
        best, pos, proxy, m = float("inf"), np.zeros(0), float("nan"), 0
        for _ in range(repeats):
            pc = PlacementCost.from_placement(nl, load_plc(netlist_dir(name) / "initial.plc"))
            fp = force.ForcePlacer(pc)
            t = time.perf_counter()
            res = fp.place(force.FDConfig(seed=0))
            dt = time.perf_counter() - t
            if dt < best:
                best, proxy, m = dt, res.after.proxy, len(fp.movable)
                pos = np.concatenate([pc.x, pc.y])
    finally:
        force._ALL_PAIRS = old
    return best, pos, proxy, m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--netlists", nargs="+", default=list(NETLISTS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/chip_fd_speed"))
    args = ap.parse_args(argv)
    if args.repeats < 1:
        say("--repeats must be >= 1")
        return 2
    command = "python benchmarks/chip_fd_speed.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    rows: list[dict[str, Any]] = []
    for name in args.netlists:
        a = run(name, True, args.repeats)
        s = run(name, False, args.repeats)
        rows.append({
            "netlist": name, "movable": a[3], "all_pairs_s": a[0], "sweep_s": s[0],
            "identical": bool(np.array_equal(a[1], s[1])), "proxy": s[2],
        })  # fmt: skip
        say(f"{name}: all pairs {a[0]:.3f} s, sweep {s[0]:.3f} s")
    machine = machine_info()
    lines = [
        "# Force-directed placement: seconds per run (300 steps, one core)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine.get('cpu_model', '?')}; fastest of {args.repeats} runs per mode.",
        "",
        "| netlist | soft macros | all pairs (s) | sweep (s) | speed-up | same positions | proxy |",
        "|---|---:|---:|---:|---:|---|---:|",
        *(
            f"| {r['netlist']} | {r['movable']} | {r['all_pairs_s']:.3f} | {r['sweep_s']:.3f} "
            f"| {r['all_pairs_s'] / r['sweep_s']:.2f}x | {'yes' if r['identical'] else 'NO'} "
            f"| {r['proxy']:.4f} |"
            for r in rows
        ),
        "",
    ]
    text = "\n".join(lines)
    write_json_atomic(args.out / "chip_fd_speed.json",
                      {"rows": rows, "command": command, "machine": machine})  # fmt: skip
    (args.out / "chip_fd_speed.md").write_text(text)
    print(text)
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
