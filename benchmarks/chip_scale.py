"""Chip workload at scale (Menger's point): PPO, 1-64 Ray actors, cache vs none, int8 vs fp32.

What it measures
----------------
One cell per (netlist, actors N, cache, precision, max_policy_lag): ``train(PPOConfig(
env="chip:<netlist>", network="chip", backend="ray", actors=N, cache=..., precision=...))`` — PPO
(Schulman et al., 2017) training the circuit-training-style placement policy of
:mod:`actorq.agents.ppo.chip_networks` (Mirhoseini et al., Nature 594, 2021), its N Ray actors
sampling from the exported int8 or fp32 ONNX policy, snapshots reaching them through a node cache
(``cache="node"``: one cache per node, actors read its shared memory) or each pulling from the
learner's parameter server (``cache="none"``) — Menger's (Google, 2020) two settings. The run is
stopped by a callback once a measured window is over; measured over that window only (from the first
log interval at which every actor has delivered a chunk and the learner has updated: Ray's start-up,
the workers' imports and the first chunk are not in it):

* **env steps/s** (macros placed) and **episodes/s** (whole placements) the actors delivered;
* **learner updates/s** (between the window's first and last update), the share of the window
  the learner spent in updates (busy) and waiting for a batch (``perf/learner_wait_frac``:
  input starvation), and the actors' share of time spent waiting (``perf/actor_wait_frac``:
  for the learner's grant or an insert) — from the run's own metrics, one row per log interval
  in ``metrics.csv``;
* the actors' **inference share** of their busy time (onnxruntime, int8 vs fp32);
* **snapshot bytes**, **publish ms** (quantize + export + publish), learner **egress per
  publish** (``comm/learner_egress_bytes``; with ``cache="none"`` also the server's version
  reads), **actor restarts**, rejected snapshots, and the start-up time;
* the machine (cores!), the load average at the cell's start and end, memory available.

The learner's batch is the same for every N (``--batch-steps`` env steps per update, default
per netlist): each actor's chunk is ``ceil(batch_steps / (N × envs))`` steps, so learner
updates/s compare across N — what more actors cost the learner — instead of falling as 1/N
because the batch grows (``--num-steps`` fixes the chunk instead). ``--max-policy-lag 1`` (the
default) is synchronous PPO: every actor waits for each update, so env steps/s is bounded by the
learner; ``--max-policy-lag 4`` lets actors run up to 4 versions ahead (importance ratio
correcting it), which measures the actors' throughput until the learner, if slower, gates them
again (``actor wait`` says which happened).

Honest framing: **on a 2-core machine, 8-64 actors time-share 2 cores** with the learner,
the replay shards, the caches and Ray's daemons (and, here, whatever else is running: see the
load average). The numbers measure the framework's overhead and the cache's effect under
contention, **not scaling**: more actors cannot add throughput when there are no more cores.
Measuring scaling needs a multi-node Ray cluster (``ray start`` on each machine, docs/
distributed.md): ``--ray-address HEAD:6379`` joins it, actors go round-robin over its CPU nodes
(the learner's node included), one node cache per node, and ``--actor-cpus`` (default: the
cluster's CPUs shared out, at most 1 per actor) reserves their cores.

Default netlist: ``macro_tiles_10x10`` (100 hard macros, 20 × 20 grid, no soft macros, so no FD
placement at the end of an episode): an actor's step is the policy's inference and the env's
bookkeeping (~0.5 ms, docs/chip.md), not force-directed placement as on ``toy_macro_stdcell``
(an FD run every 2 steps, ~10 ms) or ``ariane133`` (~1-2 s of FD per placement).

Commands (results: one JSON per cell under ``--out``, default ``benchmarks/results/chip_scale``,
written atomically when the cell is done; a cell whose file exists is skipped, so a killed run
resumes where it stopped; ``<out>/report.md`` holds the table)::

    .venv/bin/python benchmarks/chip_scale.py                   # 1,8,32,64 × node,none × int8,fp32
    .venv/bin/python benchmarks/chip_scale.py --max-policy-lag 4            # actors not gated
    .venv/bin/python benchmarks/chip_scale.py --netlists ariane133
    .venv/bin/python benchmarks/chip_scale.py --ray-address HEAD:6379       # a real cluster
    .venv/bin/python benchmarks/chip_scale.py --actors 1,2 --precisions int8 --caches node \\
        --seconds 15 --batch-steps 200 --out /tmp/chip_scale_smoke          # smoke run
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import json
import math
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from _machine import machine_info
from actorq import PPOConfig, train
from actorq.agents.ppo.learning import PPOLearner
from actorq.envs import make_env

FRAMING = (
    "On a {cores}-core machine, 8-64 actors time-share {cores} cores with the learner, replay "
    "shards, caches and Ray's daemons: these numbers measure the framework's overhead and the "
    "cache's effect under contention, not scaling (that needs a multi-node cluster: "
    "--ray-address)."
)


@dataclasses.dataclass(frozen=True)
class Settings:
    batch_steps: int
    """env steps per learner update, all actors together (the chunk per env follows from N)"""
    minibatch: int
    envs: int = 1
    """envs per actor (Menger: one env per actor; N actors = N envs)"""
    epochs: int = 4
    lr: float = 1e-3


SETTINGS: dict[str, Settings] = {
    # 8 placements per update, 4 minibatches of 2 placements
    "macro_tiles_10x10": Settings(800, 200),
    # 128 placements of 2 macros per update (256 steps, as in docs/chip.md)
    "toy_macro_stdcell": Settings(256, 64),
    # 4 placements per update: ~6 s of learner per update at 532 steps (docs/chip.md)
    "ariane133": Settings(532, 133, lr=4e-4),
}


def num_steps(s: Settings, actors: int, fixed: int | None) -> int:
    return fixed if fixed else max(1, math.ceil(s.batch_steps / (actors * s.envs)))


def auto_actor_cpus(actors: int, ray_address: str | None) -> float:
    """Ray CPUs reserved per actor: the cluster's (or this machine's) CPUs shared out, at most 1;
    so that all N fit on 2 cores here (they time-share them)."""
    if ray_address:
        import ray

        cpus = float(ray.cluster_resources().get("CPU", 1.0))
    else:
        cpus = float(os.cpu_count() or 1)
    return max(1e-4, min(1.0, math.floor(0.9 * cpus / actors * 1e4) / 1e4))


def _mem_available_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return round(int(line.split()[1]) / 2**20, 2)
    except OSError:
        pass
    return None


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


class Probe:
    """The run's callback: samples the counters and metrics each log interval, finds the end of
    the warm-up (every actor has delivered a chunk, the learner has updated), and stops the run
    once the measured window is over."""

    def __init__(self, actors: int, a: argparse.Namespace) -> None:
        self.actors, self.a = actors, a
        self.t_call = time.perf_counter()
        self.samples: list[dict[str, Any]] = []
        self.start: dict[str, Any] | None = None
        self.failed: str | None = None
        self.ray_facts: dict[str, Any] = {}

    def _sample(self, info: dict[str, Any], now: float) -> dict[str, Any]:
        backend = info["backend"]
        st = backend.stats()
        # per-actor cumulative inference seconds, as the actors report them to their shard
        # (a private field of the Ray backend: absent, the inference share is left out)
        status = getattr(backend, "_status", {}) or {}
        inference = [float(v.get("inference_s", 0.0)) for v in status.values()]
        keep = ("perf/", "comm/", "faults/", "replay/", "charts/version_spread")
        return {
            "t": now,
            "env_steps": int(info["env_steps"]),
            "episodes": int(info["episodes"]),
            "updates": int(info["updates"]),
            "publishes": int(info["publishes"]),
            "actors_reporting": len(st.versions),
            "min_version": min(st.versions, default=-1),
            "actor_busy_s": float(st.actor_busy_s),
            "actor_wait_s": float(st.actor_wait_s),
            "inference_s": float(sum(inference)) if len(inference) == self.actors else None,
            "metrics": {
                k: float(v)
                for k, v in info.items()
                if k.startswith(keep) and isinstance(v, int | float) and not isinstance(v, bool)
            },
        }

    def __call__(self, info: dict[str, Any]) -> bool:
        now = time.perf_counter()
        s = self._sample(info, now)
        if self.start is None:
            if s["actors_reporting"] >= self.actors and s["min_version"] >= 0 and s["updates"]:
                self.start = s
                self.ray_facts = _ray_facts(self.a.ray_address)  # Ray is up (here, per cell)
                print(
                    f"  all {self.actors} actors up, {s['updates']} update(s) after "
                    f"{now - self.t_call:.0f} s: measuring",
                    flush=True,
                )
            elif now - self.t_call > self.a.startup_timeout:
                self.failed = (
                    f"start-up: {s['actors_reporting']}/{self.actors} actors reporting, "
                    f"{s['updates']} updates after {now - self.t_call:.0f} s"
                )
                return False
            return True
        self.samples.append(s)
        elapsed = now - self.start["t"]
        updates = s["updates"] - self.start["updates"]
        done = elapsed >= self.a.seconds and updates >= self.a.min_updates
        return not (done or elapsed >= self.a.max_seconds)


def _timed_update() -> tuple[Any, list[tuple[float, float]]]:
    """PPOLearner.update wrapped to record when each update ended and how long it took."""
    plain = PPOLearner.update
    ends: list[tuple[float, float]] = []

    def timed(self: PPOLearner, batch: Any) -> dict[str, float]:
        t = time.perf_counter()
        out = plain(self, batch)
        end = time.perf_counter()
        ends.append((end, end - t))
        return out

    PPOLearner.update = timed
    return plain, ends


def _window(probe: Probe, ends: list[tuple[float, float]]) -> dict[str, Any]:
    """Rates over the measured window (first to last sample after the warm-up)."""
    a, b = probe.start, probe.samples[-1]
    assert a is not None
    dt = b["t"] - a["t"]
    inside = [(t, d) for t, d in ends if a["t"] < t <= b["t"]]
    if len(inside) >= 2:
        ups = (len(inside) - 1) / (inside[-1][0] - inside[0][0])
    else:
        ups = len(inside) / dt
    rows = probe.samples  # one per log interval inside the window

    def mean_metric(key: str) -> float | None:
        vals = [r["metrics"][key] for r in rows if key in r["metrics"]]
        return sum(vals) / len(vals) if vals else None

    busy = b["actor_busy_s"] - a["actor_busy_s"]
    wait = b["actor_wait_s"] - a["actor_wait_s"]
    publishes = b["publishes"] - a["publishes"]
    egress = b["metrics"].get("comm/learner_egress_bytes", 0.0) - a["metrics"].get(
        "comm/learner_egress_bytes", 0.0
    )
    reads = b["metrics"].get("comm/server_requests", 0.0) - a["metrics"].get(
        "comm/server_requests", 0.0
    )
    inference = None
    if a["inference_s"] is not None and b["inference_s"] is not None and busy > 0:
        inference = (b["inference_s"] - a["inference_s"]) / busy
    steps = b["env_steps"] - a["env_steps"]
    served = "comm/server_requests" in b["metrics"]  # cache="none": the server counts reads
    return {
        "window_s": dt,
        "env_steps": steps,
        "episodes": b["episodes"] - a["episodes"],
        "updates": b["updates"] - a["updates"],
        "env_steps_per_s": steps / dt,
        "episodes_per_s": (b["episodes"] - a["episodes"]) / dt,
        "learner_updates_per_s": ups,
        "learner_busy_frac": sum(d for _, d in inside) / dt,
        "s_per_update": sum(d for _, d in inside) / len(inside) if inside else None,
        # the run's own per-interval metrics, averaged over the window's intervals
        "learner_wait_frac": mean_metric("perf/learner_wait_frac"),
        "actor_wait_frac": wait / (busy + wait) if busy + wait > 0 else None,
        "actor_wait_frac_metric": mean_metric("perf/actor_wait_frac"),
        "actor_sps_metric": mean_metric("perf/actor_sps"),
        "learner_ups_metric": mean_metric("perf/learner_ups"),
        "inference_share_of_actor_busy": inference,
        "actor_busy_s_per_env_step": busy / steps if steps else None,
        "publishes": publishes,
        "egress_bytes_per_publish": egress / publishes if publishes else None,
        "server_version_reads_per_s": reads / dt if served else None,
        "intervals": len(rows),
    }


def cell_key(
    netlist: str, n: int, cache: str, precision: str, s: Any, a: argparse.Namespace
) -> dict[str, Any]:
    """The fields that say which cell a row is (a finished or a failed one)."""
    return {
        "netlist": netlist,
        "actors": n,
        "cache": cache,
        "precision": precision,
        "max_policy_lag": a.max_policy_lag,
        "settings": dataclasses.asdict(s),
        "steps_per_update": n * s.envs * num_steps(s, n, a.num_steps),
    }


def run_cell(
    netlist: str, n: int, cache: str, precision: str, s: Settings, a: argparse.Namespace, out: Path
) -> dict[str, Any]:
    run_dir = out / "runs" / cell_name(netlist, n, cache, precision, a.max_policy_lag)
    shutil.rmtree(run_dir, ignore_errors=True)  # a cell killed midway starts again
    steps = num_steps(s, n, a.num_steps)
    actor_cpus = a.actor_cpus or auto_actor_cpus(n, a.ray_address)
    cfg = PPOConfig(
        env=f"chip:{netlist}",
        network="chip",
        precision=precision,
        backend="ray",
        ray_address=a.ray_address,
        actors=n,
        replay_shards=min(a.replay_shards, n),
        cache=cache,
        cache_relays=a.cache_relays,
        actor_cpus=actor_cpus,
        envs_per_actor=s.envs,
        num_steps=steps,
        minibatch_size=min(s.minibatch, n * s.envs * steps),
        update_epochs=s.epochs,
        learning_rate=s.lr,
        max_policy_lag=a.max_policy_lag,
        gamma=1.0,
        total_steps=10**12,  # the callback ends the run (constant lr: annealed over 10^12)
        eval_every=10**12,
        checkpoint_every=10**9,
        stop_at_target=False,
        progress=False,
        log_every=a.log_every,
        energy=False,
        seed=a.seed,
        run_dir=str(run_dir),
    )
    load_start, mem_start = _loadavg(), _mem_available_gb()
    probe = Probe(n, a)
    plain, ends = _timed_update()
    try:
        r = train(cfg, callback=probe)
    finally:
        PPOLearner.update = plain
    row: dict[str, Any] = {
        **cell_key(netlist, n, cache, precision, s, a),
        "num_steps": steps,
        "minibatch": cfg.minibatch_size,
        "actor_cpus": actor_cpus,
        "replay_shards": cfg.replay_shards,
        "cache_relays": a.cache_relays,
        "ray_address": a.ray_address,
        "load_avg_start": load_start,
        "load_avg_end": _loadavg(),
        "mem_available_gb_start": mem_start,
        "startup_s": None if probe.start is None else probe.start["t"] - probe.t_call,
        "run_wall_s": r.wall_time_s,
        "run_env_steps": r.env_steps,
        "run_updates": r.updates,
        "snapshot_bytes": r.snapshot_bytes,
        "fp32_snapshot_bytes": r.fp32_snapshot_bytes,
        "publish_ms": r.publish_ms,
        "actor_restarts": r.actor_restarts,
        "rejected_snapshots": r.rejected_snapshots,
        "action_agreement": r.action_agreement,
        "logprob_gap": r.logprob_gap,
        "final_metrics": probe.samples[-1]["metrics"] if probe.samples else None,
        "ray_facts": probe.ray_facts,
    }
    if probe.failed or not probe.samples:
        row["failed"] = probe.failed or "no log interval after the warm-up"
        return row
    row.update(_window(probe, ends))
    return row


def cell_name(netlist: str, n: int, cache: str, precision: str, lag: int) -> str:
    return f"{netlist}-n{n}-{cache}-{precision}-lag{lag}"


def _ray_facts(address: str | None) -> dict[str, Any]:
    import ray

    facts: dict[str, Any] = {"ray": ray.__version__, "address": address}
    if ray.is_initialized():
        nodes = [n for n in ray.nodes() if n["Alive"]]
        facts["nodes"] = len(nodes)
        facts["cluster_cpus"] = ray.cluster_resources().get("CPU")
    return facts


# -- report ------------------------------------------------------------------------------------
COLS = [
    "netlist", "actors", "cache", "prec", "lag", "actor CPUs", "steps/update", "window s",
    "env steps/s", "vs 1 actor", "episodes/s", "learner updates/s", "learner busy",
    "learner wait", "actor wait", "inference share", "snapshot KB", "publish ms",
    "egress KB/publish", "restarts", "start-up s", "load at start",
]  # fmt: skip


def _f(x: float | None, fmt: str, unit: str = "") -> str:
    return "-" if x is None else format(x, fmt) + unit


def _pct(x: float | None) -> str:
    return _f(None if x is None else 100 * x, ".0f", "%")


def report(out: Path) -> str:
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    key = ("netlist", "max_policy_lag", "cache", "precision", "actors")
    rows.sort(key=lambda r: tuple(r[k] for k in key))
    base = {
        (r["netlist"], r["max_policy_lag"], r["cache"], r["precision"]): r["env_steps_per_s"]
        for r in rows
        if r["actors"] == 1 and "failed" not in r
    }
    md = ["| " + " | ".join(COLS) + " |", "|" + "---|" * len(COLS)]
    for r in rows:
        head = [r["netlist"], str(r["actors"]), r["cache"], r["precision"],
                str(r["max_policy_lag"]), _f(r["actor_cpus"], "g"),
                str(r["steps_per_update"])]  # fmt: skip
        if "failed" in r:
            cells = [*head, f"FAILED: {r['failed']}", *[""] * (len(COLS) - len(head) - 1)]
        else:
            b = base.get((r["netlist"], r["max_policy_lag"], r["cache"], r["precision"]))
            egress = r["egress_bytes_per_publish"]
            cells = [
                *head,
                f"{r['window_s']:.0f}",
                f"{r['env_steps_per_s']:.1f}",
                _pct(r["env_steps_per_s"] / b if b else None),
                f"{r['episodes_per_s']:.2f}",
                f"{r['learner_updates_per_s']:.3f}",
                _pct(r["learner_busy_frac"]),
                _pct(r["learner_wait_frac"]),
                _pct(r["actor_wait_frac"]),
                _pct(r["inference_share_of_actor_busy"]),
                f"{r['snapshot_bytes'] / 1e3:.0f}",
                f"{r['publish_ms']:.0f}",
                _f(None if egress is None else egress / 1e3, ".0f"),
                str(r["actor_restarts"]),
                _f(r["startup_s"], ".0f"),
                "/".join(f"{x:.1f}" for x in r["load_avg_start"] or []),
            ]
        md.append("| " + " | ".join(cells) + " |")
    m = rows[0]["machine"] if rows else machine_info()
    cores = m.get("cores_usable") or m.get("cores")
    ray_facts = rows[0].get("ray_facts", {}) if rows else {}
    lines = [
        "# PPO on the chip workload with Ray actors: throughput by actors, cache and precision",
        "",
        f"**{FRAMING.format(cores=cores)}**",
        "",
        f"- command: `{rows[0]['command']}`" if rows else "- (no cells yet)",
        f"- machine: {m['cpu_model']}, {cores} usable cores, load average at start "
        f"{m['load_avg_at_start']}; ray {ray_facts.get('ray')}, "
        f"{ray_facts.get('nodes')} node(s), {ray_facts.get('cluster_cpus')} CPUs; "
        f"date {m['date']}; commit {str(m.get('git_commit'))[:10]}",
        "- measured window: after every actor has delivered a chunk and the learner has "
        "updated (start-up excluded); env steps/s and episodes/s the actors delivered, learner "
        "updates/s between the window's first and last update, learner busy = share of the "
        "window in updates, learner wait = waiting for a batch (input starvation), actor wait "
        "= actors' share of time waiting (for the learner's grant or an insert), inference "
        "share = onnxruntime's share of the actors' busy time; vs 1 actor = env steps/s against "
        "the same netlist, lag, cache and precision with 1 actor",
        "",
        *md,
        "",
    ]
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    return text


# -- main --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--netlists", default="macro_tiles_10x10")
    ap.add_argument("--actors", default="1,8,32,64")
    ap.add_argument("--caches", default="node,none")
    ap.add_argument("--precisions", default="int8,fp32")
    ap.add_argument("--max-policy-lag", type=int, default=1, help="1: synchronous PPO")
    ap.add_argument("--seconds", type=float, default=90.0, help="measured window per cell")
    ap.add_argument(
        "--min-updates", type=int, default=3, help="the window also spans this many updates"
    )
    ap.add_argument("--max-seconds", type=float, default=600.0, help="cap on the window")
    ap.add_argument(
        "--startup-timeout", type=float, default=900.0, help="seconds for all actors to report"
    )
    ap.add_argument("--batch-steps", type=int, help="env steps per update (default: SETTINGS)")
    ap.add_argument("--num-steps", type=int, help="fixed chunk per env instead of --batch-steps")
    ap.add_argument("--envs", type=int, help="envs per actor (default 1)")
    ap.add_argument("--minibatch", type=int)
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--replay-shards", type=int, default=2, help="at most one per actor")
    ap.add_argument("--cache-relays", type=int, default=0)
    ap.add_argument(
        "--actor-cpus", type=float, help="Ray CPUs per actor (default: the CPUs shared out, <= 1)"
    )
    ap.add_argument("--log-every", type=float, default=5.0, help="seconds per metrics row")
    ap.add_argument(
        "--cooldown", type=float, default=5.0, help="pause before each cell (the last one's exit)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--ray-address",
        default=None,
        help="join a running cluster (HEAD:6379, auto) instead of starting Ray per cell here",
    )
    ap.add_argument("--retry-failed", action="store_true", help="rerun cells recorded as failed")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/chip_scale"))
    ap.add_argument("--report", action="store_true", help="print the table of --out only")
    a = ap.parse_args(argv)
    if a.report:
        print(report(a.out))
        return 0
    command = "python benchmarks/chip_scale.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if a.ray_address:
        from actorq.distributed.ray_backend import init_ray

        init_ray(a.ray_address)  # once: every cell's backend joins this connection
    names = {"batch_steps": "batch_steps", "envs": "envs", "minibatch": "minibatch"}
    names |= {"epochs": "epochs", "lr": "lr"}
    overrides = {f: getattr(a, k) for k, f in names.items() if getattr(a, k) is not None}
    a.out.mkdir(parents=True, exist_ok=True)
    ran = False
    for netlist in a.netlists.split(","):
        base = SETTINGS.get(netlist)
        if base is None:  # another netlist: 8 placements per update, minibatches of 2
            nmac = make_env(f"chip:{netlist}", use_fd=False).unwrapped.n
            base = Settings(8 * nmac, 2 * nmac)
        s = dataclasses.replace(base, **overrides)
        for n in (int(x) for x in a.actors.split(",")):
            for cache in a.caches.split(","):
                for precision in a.precisions.split(","):
                    name = cell_name(netlist, n, cache, precision, a.max_policy_lag)
                    path = a.out / f"{name}.json"
                    if path.exists():
                        have = json.loads(path.read_text())
                        if not ("failed" in have and a.retry_failed):
                            note = "" if have["settings"] == dataclasses.asdict(s) else " (other"
                            note += " settings)" if note else ""
                            state = "failed" if "failed" in have else "done"
                            print(f"skip {path.name}: {state}{note}")
                            continue
                    if ran:
                        time.sleep(a.cooldown)
                    ran = True
                    print(f"running {name}: {s}", flush=True)
                    machine = machine_info()  # the load average at the cell's start
                    try:
                        row = run_cell(netlist, n, cache, precision, s, a, a.out)
                    except Exception as e:  # recorded, so the table shows it; --retry-failed
                        traceback.print_exc()
                        reason = (str(e).strip().splitlines() or [""])[0][:200]
                        row = {
                            **cell_key(netlist, n, cache, precision, s, a),
                            "actor_cpus": a.actor_cpus,
                            "failed": f"{type(e).__name__}: {reason}",
                        }
                    row["command"] = command
                    row["machine"] = machine
                    tmp = path.with_name(path.name + ".tmp")
                    tmp.write_text(json.dumps(row, indent=1) + "\n")
                    tmp.replace(path)  # a killed run never leaves a half-written cell
                    if "failed" in row:
                        print(f"  FAILED: {row['failed']}", flush=True)
                    else:
                        print(
                            f"  {row['env_steps_per_s']:.1f} env steps/s, "
                            f"{row['episodes_per_s']:.2f} episodes/s, "
                            f"{row['learner_updates_per_s']:.3f} updates/s over "
                            f"{row['window_s']:.0f} s",
                            flush=True,
                        )
    print(report(a.out))
    print(f"wrote {a.out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
