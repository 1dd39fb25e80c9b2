"""The learner's physical limit on a device, beside the same learner inside ``train()``.

*Limit*: the update alone (DQN, D4PG, PPO's minibatch step; widths 64×64, 256×256, 3×2048, or
``nature-cnn``: DQN's and PPO's Nature-CNN on 4×84×84 uint8 frames; batches 32/128/256) on
device-resident batches in a tight loop, per mode that runs there (``eager``, ``compile``,
``graph``); the fastest is the limit. *System*: the same learner inside
``train()`` beside ``--actors`` actor processes for ``--system-seconds``: updates/s, its share
of the limit, the learner's wait for data; paths ``fast`` (the default loop), ``fast-k1`` (one
update per turn) and ``eager-host`` (the loop as it was). Writes ``OUT/<device>.json`` and
``.md``; resumable (rows in the JSON are kept); ``--render JSON`` only rewrites its table.
GO's learner per graph and device (``go``) is archived with GO's research line: ``git show
96d5aa1:benchmarks/learner_limit.py``.

    .venv/bin/python benchmarks/learner_limit.py                     # this machine's CPU
    python3 benchmarks/learner_limit.py --device cuda --actors 15    # on a GPU machine
    .venv/bin/python benchmarks/learner_limit.py --agents dqn ppo --hidden nature-cnn \
        --batches 32 256 --modes eager compile                      # Atari's learners
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actorq.agents.d4pg.learning import D4PGLearner
from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.learning import DQNLearner
from actorq.agents.ppo.config import PPOConfig
from actorq.agents.ppo.learning import PPOLearner
from actorq.agents.step import TorchLearner, resolve_mode
from actorq.bench.machine import cpu_model, git_commit
from actorq.rundir import RunDir
from actorq.types import ArraySpec, EnvSpec

NATURE: tuple[int, ...] = ()  # the Nature-CNN (pixels) in place of an MLP's widths
WIDTHS = {
    "64x64": (64, 64), "256x256": (256, 256), "3x2048": (2048, 2048, 2048), "nature-cnn": NATURE,
}  # fmt: skip
CARTPOLE = EnvSpec(
    "gym:CartPole-v1", ArraySpec((4,), np.dtype(np.float32)), ArraySpec((), np.dtype(np.int64)), 2
)
PONG = EnvSpec(
    "atari:Pong", ArraySpec((4, 84, 84), "uint8"), ArraySpec((), "int64"), 6, frame_stack=4
)


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return "cpu-" + re.sub(r"\s+", " ", cpu_model()).strip()


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_case(
    agent: str, hidden: tuple[int, ...], batch: int, device: str, mode: str
) -> tuple[TorchLearner, Callable[[], None]]:
    """A learner in ``mode`` and one update of it on device-resident data."""
    g = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device)

    pixels = hidden == NATURE and agent in ("dqn", "ppo")
    spec = PONG if pixels else CARTPOLE

    def obs(dim: int) -> torch.Tensor:
        if pixels:
            return torch.randint(0, 256, (batch, 4, 84, 84), generator=g, dtype=torch.uint8).to(
                device
            )
        return rand(batch, dim)

    def actions() -> torch.Tensor:
        return torch.randint(0, spec.num_actions, (batch,), generator=g).to(device)

    learner: TorchLearner
    if agent in ("dqn", "d4pg"):
        dim = 4 if agent == "dqn" else 5
        b = {"obs": obs(dim), "next_obs": obs(dim)}
        if agent == "dqn":
            learner = DQNLearner(DQNConfig(hidden=hidden, device=device, learner_mode=mode), spec)
            b["action"] = actions()
        else:
            learner = D4PGLearner(5, 1, hidden, hidden, device=device, learner_mode=mode)
            b["action"] = rand(batch, 1).clamp(-1, 1)
        b["reward"] = torch.ones(batch, device=device)
        b["discount"] = torch.full((batch,), 0.97, device=device)
        return learner, lambda: learner.learn(b)
    if agent == "ppo":
        pcfg = PPOConfig(
            policy_hidden_sizes=hidden, value_hidden_sizes=hidden, device=device, learner_mode=mode
        )
        ppo = PPOLearner(pcfg, spec)
        mb = {
            "obs": obs(4), "action": actions(),
            "log_prob": torch.full((batch,), -math.log(spec.num_actions), device=device),
            "adv": rand(batch),
            "ret": rand(batch), "value": rand(batch),
        }  # fmt: skip
        return ppo, lambda: ppo.metrics.add(ppo.runner(mb))
    raise ValueError(agent)


def time_updates(fn: Callable[[], None], device: str, seconds: float) -> float:
    """Updates per second of ``fn`` in a tight loop, synchronised at the ends only."""
    for _ in range(5):  # compiles, captures, warms the allocator
        fn()
    sync(device)
    n, elapsed = 8, 0.0
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        sync(device)
        elapsed = time.perf_counter() - t
        if elapsed >= seconds:
            return n / elapsed
        n = max(n * 2, int(n * 1.2 * seconds / max(elapsed, 1e-6)))


def measure_limit(
    agent: str, hidden: tuple[int, ...], batch: int, device: str, modes: list[str], seconds: float
) -> dict[str, Any]:
    rates: dict[str, float | str] = {}
    for mode in modes:
        try:
            resolve_mode(mode, torch.device(device))
        except ValueError:
            continue
        t0 = time.perf_counter()
        try:
            learner, fn = make_case(agent, hidden, batch, device, mode)
            rate = time_updates(fn, device, seconds)
            learner.read_metrics()
            rates[mode] = round(rate, 1)
        except Exception as e:  # a mode that does not run here is a finding, not a crash
            rates[mode] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        print(
            f"  {agent} {hidden} b{batch} {mode}: {rates[mode]} ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    ok = {m: r for m, r in rates.items() if isinstance(r, float)}
    best = max(ok, key=lambda m: ok[m]) if ok else None
    return {
        "limit_updates_s": ok[best] if best else None, "limit_mode": best, "modes_updates_s": rates,
    }  # fmt: skip


def linear_flops(module: torch.nn.Module) -> int:
    """Multiply-adds ×2 of one sample's forward pass through every Linear and Conv2d layer (a
    convolution's counted on one 4×84×84 frame stack, by forward hooks)."""
    convs = [m for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
    flops = [0]

    def hook(m: torch.nn.Module, _: Any, out: torch.Tensor) -> None:
        assert isinstance(m, torch.nn.Conv2d)
        flops[0] += 2 * out.numel() * m.in_channels * m.kernel_size[0] * m.kernel_size[1]

    if convs:
        hooks = [m.register_forward_hook(hook) for m in convs]
        with torch.no_grad():
            module(torch.zeros(1, 4, 84, 84, dtype=torch.uint8))
        for h in hooks:
            h.remove()
    linear = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    return flops[0] + sum(2 * m.in_features * m.out_features for m in linear)


def gflop_per_update(agent: str, hidden: tuple[int, ...], batch: int) -> float:
    """The matrix work of one update (a backward pass counts as two forwards). DQN: online net
    forward + backward on s, forward on s', target on s'. D4PG: target policy and critic on s',
    critic forward + backward, policy and critic forward + backward. PPO: both nets' forward +
    backward on the minibatch."""
    spec = PONG if hidden == NATURE else CARTPOLE
    if agent == "dqn":
        q = linear_flops(DQNLearner(DQNConfig(hidden=hidden), spec).q)
        per_sample = 5 * q
    elif agent == "d4pg":
        lrn = D4PGLearner(5, 1, hidden, hidden)
        p, c = linear_flops(lrn.policy), linear_flops(lrn.critic)
        per_sample = 4 * p + 7 * c
    else:
        cfg = PPOConfig(policy_hidden_sizes=hidden, value_hidden_sizes=hidden)
        ppo = PPOLearner(cfg, spec)
        # the Nature-CNN's value head shares the policy's trunk (one pass for both heads)
        value = ppo.value.head if hidden == NATURE else ppo.value
        per_sample = 3 * (linear_flops(ppo.policy) + linear_flops(value))
    return per_sample * batch / 1e9


def annotate(rows: list[dict[str, Any]]) -> None:
    """Each row's GFLOP per update and the TFLOP/s its limit reaches; a system row takes the
    limit of its (agent, widths, batch)."""
    cache: dict[tuple[str, str, int], float] = {}
    plain = {(r["agent"], r["hidden"], r["batch"]): r for r in rows if not r.get("system_path")}
    for r in rows:
        base = plain.get((r["agent"], r["hidden"], r["batch"]), {})
        if r.get("system_path"):
            r["limit_updates_s"] = base.get("limit_updates_s")
            # the mode the learner ran in: auto resolves by device; the old path is eager
            dev = "cuda" if "cpu-" not in r["device"] else "cpu"
            fast = r["system_path"].startswith("fast")
            mode = resolve_mode("auto", torch.device(dev)) if fast else "eager"
            r["system_mode"] = mode
            rate = base.get("modes_updates_s", {}).get(mode)
            r["system_mode_limit_updates_s"] = rate if isinstance(rate, float) else None
        key = (r["agent"], r["hidden"], r["batch"])
        if key not in cache:
            cache[key] = gflop_per_update(r["agent"], WIDTHS[r["hidden"]], r["batch"])
        r["gflop_per_update"] = round(cache[key], 4)
        if r.get("limit_updates_s"):
            r["limit_tflop_s"] = round(cache[key] * r["limit_updates_s"] / 1e3, 3)


def measure_system(
    agent: str, hidden: tuple[int, ...], batch: int, device: str, actors: int, seconds: float,
    warmup: float, path: str, run_root: Path,
) -> dict[str, Any]:  # fmt: skip
    """The learner inside train(): means over the log intervals after ``warmup`` seconds."""
    from actorq.agents.d4pg.config import D4PGConfig
    from actorq.experiment import train

    common: dict[str, Any] = dict(
        device=device, actors=actors, precision="int8", total_steps=10**12, eval_every=10**12,
        stop_at_target=False, energy=False, progress=False, log_every=1.0, checkpoint_every=10**9,
        learner_threads=1 if device == "cpu" else 4,
        run_dir=str(run_root / f"{agent}-{'x'.join(map(str, hidden))}-b{batch}-{path}"),
    )  # fmt: skip
    RunDir(common["run_dir"]).clear()  # a rerun of the row starts afresh (never a user's folder)
    if path.startswith("fast"):
        common["learner_mode"] = "auto"
        if path == "fast-k1":  # one update per loop turn (as on the first GPU lease)
            common["updates_per_turn"] = 1
    else:  # the loop as it was: eager updates, one per turn, batches from the host ring
        common["learner_mode"] = "eager"
        common["updates_per_turn"] = 1
    cfg: Any
    if agent == "dqn":
        cfg = DQNConfig(env="gym:CartPole-v1", hidden=hidden, batch_size=batch, **common)
    elif agent == "d4pg":
        cfg = D4PGConfig(
            env="gym:Pendulum-v1", policy_hidden_sizes=hidden, critic_hidden_sizes=hidden,
            batch_size=batch, **common,
        )  # fmt: skip
    else:
        cfg = PPOConfig(
            env="gym:CartPole-v1", policy_hidden_sizes=hidden, value_hidden_sizes=hidden,
            minibatch_size=batch, **common,
        )  # fmt: skip
    if agent != "ppo":
        cfg.replay_on_device = "auto" if path.startswith("fast") else "no"
    cfg.validate()
    rows: list[dict[str, float]] = []
    t0 = time.perf_counter()

    def callback(info: dict[str, Any]) -> bool:
        if time.perf_counter() - t0 > warmup:
            rows.append(info)
        return time.perf_counter() - t0 < warmup + seconds

    train(cfg, callback=callback)

    def mean(key: str) -> float | None:
        vals = [r[key] for r in rows if key in r and math.isfinite(r[key])]
        return round(float(np.mean(vals)), 4) if vals else None

    ups = mean("perf/learner_ups")
    extra: dict[str, Any] = {}
    if agent == "ppo" and ups is not None:
        # the limit's unit is one minibatch step: a PPO update is epochs x minibatches of them
        items = cfg.steps_per_update()
        steps = cfg.update_epochs * (items // min(cfg.minibatch_size, items))
        extra = {"system_ppo_updates_s": ups, "minibatch_steps_per_update": steps}
        ups = round(ups * steps, 1)
    return {
        **extra, "system_updates_s": ups, "learner_wait_frac": mean("perf/learner_wait_frac"),
        "actor_wait_frac": mean("perf/actor_wait_frac"), "actor_sps": mean("perf/actor_sps"),
        "system_intervals": len(rows),
    }  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| agent | hidden | batch | limit updates/s (mode) | eager | compile | graph "
        "| GFLOP / update | limit TFLOP/s | system path | system updates/s | % of limit "
        "| learner wait | actor wait |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(x: Any) -> str:
        if x is None:
            return "—"
        if isinstance(x, str):
            return "failed"
        return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"

    for r in rows:
        m = r.get("modes_updates_s", {})
        pct = (
            f"{100 * r['system_updates_s'] / r['limit_updates_s']:.0f}%"
            if r.get("system_updates_s") and r.get("limit_updates_s")
            else "—"
        )
        own = r.get("system_mode_limit_updates_s")
        if own and r.get("system_updates_s"):  # of the rate of the mode the system ran
            pct += f" ({100 * r['system_updates_s'] / own:.0f}% of {r['system_mode']})"
        lw, aw = r.get("learner_wait_frac"), r.get("actor_wait_frac")
        out.append(
            f"| {r['agent']} | {r['hidden']} | {r['batch']} | {f(r.get('limit_updates_s'))} "
            f"({r.get('limit_mode') or '—'}) | {f(m.get('eager'))} | {f(m.get('compile'))} | "
            f"{f(m.get('graph'))} | {r.get('gflop_per_update', 0):.3g} | "
            f"{r.get('limit_tflop_s', 0):.3g} | {r.get('system_path') or '—'} | "
            f"{f(r.get('system_updates_s'))} | {pct} | "
            f"{'—' if lw is None else f'{lw:.2f}'} | {'—' if aw is None else f'{aw:.2f}'} |"
        )
    return "\n".join(out)


def write_doc(path: Path, doc: dict[str, Any]) -> None:
    """The JSON (atomically) and its markdown table beside it."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    md = f"# The learner's limit on {doc['device']}\n\n`{doc['command']}` (commit "
    md += f"{doc['commit']}, torch {doc['torch']})\n\n{table(doc['rows'])}\n"
    path.with_suffix(".md").write_text(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--agents", nargs="+", default=["dqn", "d4pg", "ppo"])
    ap.add_argument("--hidden", nargs="+", default=list(WIDTHS), choices=list(WIDTHS))
    ap.add_argument("--batches", nargs="+", type=int, default=[32, 128, 256])
    ap.add_argument("--modes", nargs="+", default=["eager", "graph"])
    ap.add_argument(
        "--compile-rows", nargs="*", default=["dqn:3x2048:128", "dqn:256x256:128"],
        help="agent:hidden:batch rows that also try torch.compile (each compile takes tens of "
        "seconds; 'all' for every row)",
    )  # fmt: skip
    ap.add_argument("--seconds", type=float, default=1.0, help="timing per mode and row")
    ap.add_argument(
        "--system", nargs="*", default=["dqn:3x2048:128", "dqn:256x256:128", "d4pg:256x256:128",
                                        "ppo:64x64:256"],
        help="agent:hidden:batch[:path+path] rows measured inside train() too (paths: fast, "
        "the default, fast-k1, eager-host)",
    )  # fmt: skip
    ap.add_argument("--system-seconds", type=float, default=20.0)
    ap.add_argument("--system-warmup", type=float, default=8.0)
    ap.add_argument("--actors", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/learner_limit"))
    ap.add_argument("--runs", type=Path, default=Path("runs/learner_limit"))
    ap.add_argument("--render", type=Path, help="only rewrite this JSON's FLOP columns and table")
    a = ap.parse_args()
    if a.render:
        doc = json.loads(a.render.read_text())
        annotate(doc["rows"])
        write_doc(a.render, doc)
        return
    torch.set_num_threads(1 if a.device == "cpu" else 4)
    dev = device_name(a.device)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"{slug(dev)}.json"
    doc: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    rows: list[dict[str, Any]] = doc.get("rows", [])

    def find(agent: str, hidden: str, batch: int, system_path: str | None) -> dict[str, Any]:
        for r in rows:
            if (r["agent"], r["hidden"], r["batch"], r.get("system_path")) == (
                agent, hidden, batch, system_path,
            ):  # fmt: skip
                return r
        r = {"agent": agent, "hidden": hidden, "batch": batch, "device": dev}
        if system_path:
            r["system_path"] = system_path
        rows.append(r)
        return r

    def save() -> None:
        annotate(rows)
        doc.update(
            device=dev, commit=git_commit(), torch=torch.__version__, python=sys.version.split()[0],
            command="python benchmarks/learner_limit.py " + " ".join(sys.argv[1:]), rows=rows,
        )  # fmt: skip
        write_doc(path, doc)

    print(f"device: {dev}", flush=True)
    for agent in a.agents:
        for hname in a.hidden:
            if WIDTHS[hname] == NATURE and agent == "d4pg":
                continue  # no pixel D4PG
            for batch in a.batches:
                key = f"{agent}:{hname}:{batch}"
                r = find(agent, hname, batch, None)
                if r.get("limit_updates_s") is not None:
                    continue
                modes = list(a.modes)
                if ("all" in a.compile_rows or key in a.compile_rows) and "compile" not in modes:
                    modes.append("compile")
                r.update(measure_limit(agent, WIDTHS[hname], batch, a.device, modes, a.seconds))
                save()
    for key in a.system:
        agent, hname, batch_s, *paths = key.split(":")
        limit = find(agent, hname, int(batch_s), None).get("limit_updates_s")
        for sp in paths[0].split("+") if paths else ["fast"]:
            r = find(agent, hname, int(batch_s), sp)
            if r.get("system_updates_s") is not None:
                continue
            print(f"  system {key} {sp} ({a.actors} actors)", flush=True)
            r["limit_updates_s"] = limit
            try:
                r.update(measure_system(agent, WIDTHS[hname], int(batch_s), a.device, a.actors,
                                        a.system_seconds, a.system_warmup, sp, a.runs))  # fmt: skip
            except Exception as e:  # recorded; the other rows still run
                r["system_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                print(f"    failed: {r['system_error']}", flush=True)
                continue
            r["actors"] = a.actors
            ups, wait = r["system_updates_s"], r["learner_wait_frac"]
            print(f"    {ups} updates/s, learner wait {wait}", flush=True)
            save()
    save()
    print(table(rows))


if __name__ == "__main__":
    main()
