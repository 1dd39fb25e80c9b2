"""CPU an idle Ray actor costs its machine: why 256 actors saturate a core before they do anything.

Starts ``--actors`` Ray actors that do nothing (fractional CPUs, like param_fanout's light
actors), waits for them to settle, then reads each worker process's CPU time (all its threads,
from /proc) over ``--seconds``. Prints the mean share of a core per idle actor, the thread names
that used it, and what that means for 256 actors. Linux only.

Command (docs/results.md, "Parameter fan-out"; ~30 s)::

    .venv/bin/python benchmarks/ray_idle_cost.py

Results go to ``<out>/ray_idle_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path

import ray

from _machine import machine_info


class Idle:
    def pid(self) -> int:
        return os.getpid()


def _thread_ticks(pid: int) -> dict[tuple[int, str], int]:
    out = {}
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            st = (t / "stat").read_text()
        except OSError:
            continue
        name = st[st.index("(") + 1 : st.rindex(")")]
        fields = st[st.rindex(")") + 2 :].split()
        out[(int(t.name), name)] = int(fields[11]) + int(fields[12])  # utime + stime
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--actors", type=int, default=16)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--out", default="benchmarks/results")
    args = p.parse_args()
    info = machine_info()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="ERROR")
    try:
        cls = ray.remote(Idle)
        actors = [cls.options(num_cpus=0.001).remote() for _ in range(args.actors)]
        pids = ray.get([a.pid.remote() for a in actors])
        time.sleep(5.0)  # settle: start-up work done
        before = {p: _thread_ticks(p) for p in pids}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        after = {p: _thread_ticks(p) for p in pids}
        elapsed = time.monotonic() - t0
    finally:
        ray.shutdown()
    hz = os.sysconf("SC_CLK_TCK")
    by_thread: collections.Counter[str] = collections.Counter()
    for p in pids:
        for key, ticks in after[p].items():
            by_thread[key[1]] += ticks - before[p].get(key, 0)
    total = sum(by_thread.values())
    per_actor = total / hz / elapsed / len(pids)
    lines = [
        "# CPU cost of an idle Ray actor",
        "",
        "`python benchmarks/ray_idle_cost.py`",
        "",
        f"- date: {info['date']}; CPU: {info['cpu_model']} ({info['cores']} cores); "
        f"ray {ray.__version__}; {len(pids)} idle actors over {elapsed:.1f} s",
        f"- **{100 * per_actor:.2f}% of a core per idle actor**; 256 such actors: "
        f"{256 * per_actor:.2f} cores",
        "",
        "| thread | share of the total |",
        "|---|---|",
        *[
            f"| {name} | {100 * v / max(total, 1):.0f}% |"
            for name, v in by_thread.most_common(5)
            if v > 0
        ],
        "",
    ]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ray_idle_cost.md").write_text(text)
    (out / "ray_idle_cost.json").write_text(
        json.dumps(
            {
                "machine": info,
                "args": vars(args),
                "core_share_per_idle_actor": per_actor,
                "ticks_by_thread": dict(by_thread),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
