"""Parameter fan-out: does the learner slow down as actors multiply? (Menger's first finding.)

A learner doing real DQN updates of the paper's 3×2048 policy publishes every ``--publish-every``
updates through actorq's parameter tier; N light Ray actors poll, fetch and step CartPole. Per N,
cache mode (``off``: the control; ``node``: a node cache; ``none``: the parameter server) and
precision: learner updates/s, fetch latency, egress per publish (docs/distributed.md). On one
machine the learner has core 0, the actors core 1 (``--no-pin``: off; ``--pin-daemons``: Ray's
daemons and the kdamond thread too); ``--ray-address`` spreads actors over a cluster's nodes.

    .venv/bin/python benchmarks/param_fanout.py --actors 1,4 --seconds 5 --out /tmp/fanout
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import contextlib
import itertools
import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

from _machine import machine_info, md_table
from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.learning import DQNLearner
from actorq.distributed.ray_backend import ParameterTier, cpu_nodes, init_ray, node_affinity
from actorq.quant.snapshot import PolicySpec, make_snapshot
from actorq.types import ArraySpec, EnvSpec


def _pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


class LightActor:
    """Polls, fetches, steps a cheap env. Its loop runs in a thread so that attach/detach
    (switching cache mode between cells) are served while it runs."""

    def __init__(self, cpu: int | None, poll_s: float, env_steps: int, seed: int) -> None:
        import gymnasium as gym

        _pin(cpu)
        self.poll_s, self.env_steps = poll_s, env_steps
        self.env = gym.make("CartPole-v1")
        self.env.reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        self.lock = threading.Lock()
        self.source: Any = None
        self._reset()
        threading.Thread(target=self._loop, daemon=True).start()

    def _reset(self) -> None:
        self.version, self.latencies, self.steps, self.where = -1, [], 0, ""

    def attach(self, tier_json: str, namespace: str) -> None:
        from actorq.distributed.ray_actors import make_source

        tier = {**json.loads(tier_json), "namespace": namespace}
        source, where = make_source(tier, self.poll_s)
        with self.lock:
            self._reset()
            self.source, self.where = source, where

    def detach(self) -> dict[str, Any]:
        with self.lock:
            out = {"version": self.version, "latencies": self.latencies, "steps": self.steps,
                   "where": self.where}  # fmt: skip
            self.source = None
            self._reset()  # a cell without a tier (cache=off) must not report these again
            return out

    def version_now(self) -> int:
        return self.version

    def _loop(self) -> None:
        while True:
            t0 = time.monotonic()
            with self.lock:
                src = self.source
                if src is not None:
                    v = src.latest_version()
                    if v >= 0 and v != self.version:
                        t = time.perf_counter()
                        got = src.fetch()
                        if got is not None:
                            self.latencies.append(time.perf_counter() - t)
                            self.version = got[0]
                        del got  # the bytes are dropped: memory stays flat at 256 actors
            for _ in range(self.env_steps):
                _, _, term, trunc, _ = self.env.step(int(self.rng.integers(2)))
                self.steps += 1
                if term or trunc:
                    self.env.reset()
            time.sleep(max(0.0, self.poll_s - (time.monotonic() - t0)))


def _pin_procs(needles: tuple[str, ...], *cpus: int, field: str = "cmdline") -> None:
    """Pin every process (all its threads) whose command line (``field``: or its name) contains
    one of ``needles``. By name: kernel threads that allow it (e.g. kdamond, the kernel's
    memory-access monitor, which took ~5% of the learner's core with 256 actors to watch)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):  # it may have exited meanwhile
            if any(n in (d / field).read_bytes().decode(errors="replace") for n in needles):
                for t in (d / "task").iterdir():
                    os.sched_setaffinity(int(t.name), set(cpus))


def _cpu_ticks(cpu: int) -> tuple[int, int]:
    """(busy, total) clock ticks of one core so far, from /proc/stat; (0, 0) if unreadable."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:]]
                idle = v[3] + v[4]  # idle + iowait
                return sum(v) - idle, sum(v)
    return 0, 0


def _pin_own_threads(cpu: int) -> None:
    """Pin every thread of this process but the calling one (Ray's client threads) to ``cpu``."""
    me = threading.get_native_id()
    for t in Path("/proc/self/task").iterdir():
        if int(t.name) != me:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(t.name), {cpu})


def make_tiers(modes: list[str], capacity: int, pin: bool) -> dict[str, ParameterTier]:
    """One tier per cache mode, made before the actors: a Ray worker started later, with
    hundreds of actors sharing its core, can take minutes to import actorq."""
    tiers: dict[str, ParameterTier] = {}
    for mode in modes:
        if mode != "off":
            tiers[mode] = ParameterTier(mode, cpu_nodes(), capacity, f"fanout-{os.getpid()}-{mode}")
    if pin:
        _pin_procs(("ray::ParameterServer",), 0)  # naive: the learner's side serves reads
        _pin_procs(("ray::NodeCache",), 1)  # the actors' node
    return tiers


def run_cell(
    actors: list[Any], mode: str, precision: str, learner: DQNLearner, pspec: PolicySpec,
    batch: dict[str, np.ndarray], args: argparse.Namespace, tier: ParameterTier | None,
    versions: itertools.count[int],
) -> dict[str, Any]:  # fmt: skip
    layers = learner.policy_layers()
    snap = make_snapshot(layers, pspec, precision, 0).to_bytes()
    egress0: dict[str, float] = {}
    if tier is not None:  # versions grow across cells: a cache ignores older ones
        namespace = ray.get_runtime_context().namespace
        ray.get([a.attach.remote(tier.for_actors(), namespace) for a in actors])
        tier.publish(next(versions), snap)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # warm-up: every actor has a version
            if min(ray.get([a.version_now.remote() for a in actors])) >= 0:
                break
            time.sleep(0.2)
        egress0 = tier.egress()
    updates, publishes, publish_s, version = 0, 0, 0.0, -1
    t0, cpu0, ticks0 = time.perf_counter(), time.thread_time(), _cpu_ticks(1)
    while time.perf_counter() - t0 < args.seconds:
        learner.update(batch)
        updates += 1
        if updates % args.publish_every == 0:
            tp = time.perf_counter()
            version = next(versions)
            publishes += 1
            data = make_snapshot(learner.policy_layers(), pspec, precision, version).to_bytes()
            if tier is not None:
                tier.publish(version, data)
            publish_s += time.perf_counter() - tp
    elapsed = time.perf_counter() - t0
    # share of the window the learner's thread was on a CPU: below 1 means it was preempted
    cpu_share = (time.thread_time() - cpu0) / elapsed
    ticks1 = _cpu_ticks(1)
    core1_busy = (ticks1[0] - ticks0[0]) / max(1, ticks1[1] - ticks0[1])
    time.sleep(1.0)  # let in-flight fetches land before reading counters
    out = ray.get([a.detach.remote() for a in actors])
    egress1 = egress0
    if tier is not None:
        egress1 = tier.egress()
    lat = np.concatenate([np.asarray(o["latencies"][1:], np.float64) for o in out] + [np.zeros(0)])
    key = "comm/learner_egress_bytes"
    sent = egress1.get(key, 0.0) - egress0.get(key, 0.0)
    return {
        "actors": len(actors), "cache": mode, "precision": precision, "snapshot_bytes": len(snap),
        "updates_per_s": updates / elapsed, "learner_cpu_share": cpu_share,
        "actor_core_busy": core1_busy,  # core 1: the actors' core when pinned
        "publishes": publishes, "publish_ms": 1e3 * publish_s / max(publishes, 1),
        "fetch_p50_ms": float(np.percentile(lat, 50) * 1e3) if lat.size else None,
        "fetch_p99_ms": float(np.percentile(lat, 99) * 1e3) if lat.size else None,
        "fetches": int(lat.size), "egress_bytes_per_publish": sent / max(publishes, 1),
        "server_version_reads": egress1.get("comm/server_requests", 0.0)
        - egress0.get("comm/server_requests", 0.0),
        "actor_env_steps_per_s": sum(o["steps"] for o in out) / elapsed,
        "mean_version_lag": None
        if tier is None or version < 0
        else float(version - np.mean([o["version"] for o in out])),
        "reads_from": sorted({o["where"] for o in out}),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--actors", default="1,16,64,256")
    p.add_argument("--modes", default="off,node,none", help="off: publish to nobody (control)")
    p.add_argument("--precisions", default="int8,fp32")
    p.add_argument("--hidden", default="2048,2048,2048")
    p.add_argument("--seconds", type=float, default=30.0, help="measured window per cell")
    p.add_argument("--rounds", type=int, default=1, help="interleaved repeats (medians)")
    p.add_argument("--publish-every", type=int, default=50, help="learner updates per publish")
    p.add_argument("--fp32-max-actors", type=int, default=64, help="256 fp32 copies need > 24 GB")
    p.add_argument("--poll-ms", type=float, default=50.0)
    p.add_argument("--env-steps", type=int, default=10, help="CartPole steps per poll")
    p.add_argument("--actor-cpus", type=float, default=0.001)
    p.add_argument("--no-pin", action="store_true")
    p.add_argument("--pin-daemons", action="store_true", help="Ray's threads to core 1 too")
    p.add_argument("--ray-address", default=None, help="join a cluster (HEAD:PORT or auto)")
    p.add_argument("--out", default="benchmarks/results")
    args = p.parse_args()
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2

    torch.set_num_threads(1)
    torch.manual_seed(0)
    hidden = tuple(int(x) for x in args.hidden.split(","))
    cfg = DQNConfig(hidden=hidden, batch_size=32)
    spec = EnvSpec("gym:CartPole-v1", ArraySpec((4,), "float32"), ArraySpec((), "int64"), 2)
    learner = DQNLearner(cfg, spec)
    pspec = PolicySpec(4, hidden, 2, head="q")
    rng = np.random.default_rng(0)
    batch = {"obs": rng.standard_normal((32, 4)).astype(np.float32),
             "action": rng.integers(0, 2, 32), "reward": rng.standard_normal(32).astype(np.float32),
             "discount": np.full(32, 0.97, np.float32),
             "next_obs": rng.standard_normal((32, 4)).astype(np.float32)}  # fmt: skip
    learner.update(batch)  # warm-up (allocations, Adam state)

    if args.ray_address:
        init_ray(args.ray_address)  # one line, e.g. what to set for token authentication
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="ERROR")
    nodes = cpu_nodes()  # this (the learner's) node first
    actor_nodes = nodes[1:] if args.ray_address and len(nodes) > 1 else [None]
    if pin:
        _pin(0)  # after ray.init: Ray's daemons (children of this process) are not inherited

    modes = args.modes.split(",")
    fp32_bytes = len(make_snapshot(learner.policy_layers(), pspec, "fp32", 0).to_bytes())
    tiers = make_tiers(modes, int(fp32_bytes * 1.2) + 65536, pin)
    versions = itertools.count()
    rows: list[dict[str, Any]] = []
    remote_actor = ray.remote(LightActor)
    pool: list[Any] = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        daemons = ("/raylet", "gcs_server", "ray/_private", "ray/dashboard")
        for n in [int(x) for x in args.actors.split(",")]:
            if pin and args.pin_daemons:  # both cores while workers start (see below)
                _pin_procs(daemons, *range(os.cpu_count() or 1))
            t = time.perf_counter()
            while len(pool) < n:  # grow the pool: actors are reused across cells
                # in batches: starting 256 worker processes at once on 2 cores makes some
                # miss their connection handshake
                batch_start = len(pool)
                for _ in range(min(32, n - len(pool))):
                    node = actor_nodes[len(pool) % len(actor_nodes)]
                    placed = {} if node is None else {"scheduling_strategy": node_affinity(node)}
                    here = node is None  # pin only this machine's actors
                    pool.append(remote_actor.options(num_cpus=args.actor_cpus, **placed).remote(
                        1 if pin and here else None, args.poll_ms / 1e3, args.env_steps, len(pool)
                    ))  # fmt: skip
                _wait_ready(pool[batch_start:])
            print(f"{n} actors up in {time.perf_counter() - t:.1f}s", flush=True)
            if pin and args.pin_daemons:
                # Ray's node daemons (raylet, GCS, helpers) serve the actors' processes: with
                # the actors, as on actor machines. Only once the actors are up: pinned before,
                # 256 workers starting on one core never finish starting.
                _pin_procs((*daemons, "ray::LightActor", "ray::IDLE"), 1)
                _pin_own_threads(1)
                _pin_procs(("kdamond",), 1, field="comm")
            damaged = False
            for rnd in range(args.rounds):  # rounds interleave the cells: drift hits all alike
                for mode in modes:
                    for prec in args.precisions.split(","):
                        if prec == "fp32" and n > args.fp32_max_actors:
                            if rnd == 0:
                                print(f"  {mode:>4} {prec:>4}: skipped (memory)")
                            continue
                        try:
                            r = run_cell(
                                pool[:n], mode, prec, learner, pspec, batch, args,
                                tiers.get(mode), versions,
                            )  # fmt: skip
                        except Exception as e:  # e.g. Ray's memory monitor killing workers
                            reason = str(e).strip().splitlines()[0][:160]
                            print(f"  {mode:>4} {prec:>4}: FAILED: {reason}", flush=True)
                            rows.append({"actors": n, "cache": mode, "precision": prec,
                                         "failed": f"{type(e).__name__}: {reason}"})  # fmt: skip
                            _write(rows, args, hidden, out)
                            damaged = True  # the actor pool may be damaged: stop this size
                            break
                        rows.append({**r, "round": rnd})
                        p50, out_b = r["fetch_p50_ms"], r["egress_bytes_per_publish"]
                        print(f"  round {rnd} {mode:>4} {prec:>4}: {r['updates_per_s']:.2f} "
                              f"updates/s, fetch p50 {p50 or 0:.2f} ms, {out_b / 1e6:.1f} MB "
                              "per publish", flush=True)  # fmt: skip
                        _write(rows, args, hidden, out)  # results so far survive a crash
                    if damaged:
                        break
                if damaged:
                    break
    finally:
        for t in tiers.values():
            t.close()
        ray.shutdown()
    print(_write(rows, args, hidden, out))
    print(f"wrote {out / 'param_fanout.json'} and {out / 'param_fanout.md'}")


def _wait_ready(actors: list[Any], tries: int = 5) -> None:
    for attempt in range(tries):
        try:
            ray.get([a.version_now.remote() for a in actors], timeout=120)
            return
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            if attempt == tries - 1:
                raise
            time.sleep(2.0)  # still starting: ask again


_KEYS = frozenset({"actors", "round"})


def _medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (actors, cache, precision): the median of each number over its rounds."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["actors"], r["cache"], r["precision"]), []).append(r)
    out = []
    for g in groups.values():
        if any("failed" in r for r in g):
            out.append(next(r for r in g if "failed" in r))
            continue
        row = dict(g[0])
        for k, v in g[0].items():
            if isinstance(v, int | float) and not isinstance(v, bool) and k not in _KEYS:
                vals = [r[k] for r in g if r.get(k) is not None]
                row[k] = float(np.median(vals)) if vals else None
        row["rounds"] = len(g)
        row.pop("round", None)
        out.append(row)
    return out


def _pct(x: float | None) -> float | None:
    return None if x is None else 100 * x


def _write(rows: list[dict[str, Any]], args: argparse.Namespace, hidden: tuple[int, ...],
           out: Path) -> str:  # fmt: skip
    raw = rows
    rows = _medians(rows)
    ok = [r for r in rows if "failed" not in r]
    base = {(r["cache"], r["precision"]): r["updates_per_s"] for r in ok if r["actors"] == 1}
    off = {(r["actors"], r["precision"]): r["updates_per_s"] for r in ok if r["cache"] == "off"}
    for r in ok:
        b = base.get((r["cache"], r["precision"]))
        r["updates_vs_1_actor"] = r["updates_per_s"] / b if b else None
        o = off.get((r["actors"], r["precision"]))
        r["updates_vs_off"] = r["updates_per_s"] / o if o else None
    cols = ["actors", "cache", "prec", "updates/s", "vs 1 actor", "vs off", "fetch p50 ms",
            "fetch p99 ms", "MB out / publish", "server reads", "learner on CPU",
            "core 1 busy"]  # fmt: skip

    def f(x: float | None, fmt: str, unit: str = "") -> str:
        return "-" if x is None else format(x, fmt) + unit

    md = md_table(cols, [
        [str(r["actors"]), r["cache"], r["precision"], r["failed"]] + [""] * 8 if "failed" in r
        else [str(r["actors"]), r["cache"], r["precision"], f(r["updates_per_s"], ".2f"),
              f(_pct(r["updates_vs_1_actor"]), ".0f", "%"),
              f(_pct(r["updates_vs_off"]), ".0f", "%"),
              f(r["fetch_p50_ms"], ".2f"), f(r["fetch_p99_ms"], ".2f"),
              f(r["egress_bytes_per_publish"] / 1e6, ".2f"), f(r["server_version_reads"], ".0f"),
              f(_pct(r.get("learner_cpu_share")), ".0f", "%"),
              f(_pct(r.get("actor_core_busy")), ".0f", "%")]
        for r in rows
    ])  # fmt: skip
    res = {"args": vars(args), "machine": machine_info(), "rows": rows, "raw_rows": raw}
    (out / "param_fanout.json").write_text(json.dumps(res, indent=1))
    (out / "param_fanout.md").write_text("\n".join(md) + "\n")
    return "\n".join(md)


if __name__ == "__main__":
    main()
