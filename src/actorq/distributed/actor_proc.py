"""Entry point of one local actor process: ``python -m actorq.distributed.actor_proc CONFIG``.

CONFIG is a JSON file written by the learner (plain data, no pickling). The process attaches to
the run's shared memory, acts until the control block says stop, and exits by itself if its
parent dies, so no actor outlives the run. It never imports torch.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

from actorq.core.loop import make_actor
from actorq.distributed import shm
from actorq.replay.specs import adder_from_json, gate_from_json
from actorq.replay.tables import GateCounters
from actorq.types import ArraySpec


def _die_with_parent() -> None:
    # Linux: ask the kernel to SIGTERM us when the parent exits (even by SIGKILL).
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # elsewhere the getppid() check in the loop does the same job


def run(cfg: dict) -> None:
    i = int(cfg["actor"])
    control = shm.ControlBlock(cfg["control"], int(cfg["num_actors"]))
    h = control.actor(i)
    k = int(cfg["envs_per_actor"])
    specs = {name: ArraySpec.from_json(v) for name, v in cfg["specs"].items()}
    channel = shm.TransitionChannel(cfg["channel"], specs, int(cfg["channel_capacity"]), h)
    actor = make_actor(cfg, shm.SharedSnapshotCache(cfg["cache"]))
    gate = gate_from_json(cfg["gate"]).build()
    parent = int(cfg["parent_pid"])
    h[shm.A_PID] = os.getpid()
    words = control.words
    # The most one vector step can emit: a chunk of K trajectories, or K n-step windows plus
    # the flush of episodes ending (up to n each).
    room = k * adder_from_json(cfg["adder"]).items_per_env_step
    busy, wait = int(h[shm.A_BUSY_NS]), int(h[shm.A_WAIT_NS])  # continue across restarts
    infer0, env0 = int(h[shm.A_INFER_NS]), int(h[shm.A_ENV_NS])  # a restarted actor counts anew
    rejected0 = int(h[shm.A_REJECTED])  # the slot's earlier processes' refusals stay counted
    while not words[shm.STOP]:
        now = time.monotonic_ns()
        h[shm.A_HEARTBEAT] = now
        if actor.update():
            h[shm.A_VERSION] = actor.version
        h[shm.A_REJECTED] = rejected0 + actor.rejected  # a refusal counts while it waits too
        # Mid-chunk an on-policy actor goes on: the gate let it start the chunk.
        if actor.runtime is None or (
            actor.at_boundary
            and not (
                channel.free() >= room
                and gate.allows(
                    GateCounters(
                        num=k,
                        total_inserts=control.total_inserts(),
                        samples=int(words[shm.SAMPLES]),
                        own_written=int(h[shm.A_WRITE]),
                        own_released=int(h[shm.A_RELEASED]),
                        version=actor.version,
                        min_version=int(words[shm.MIN_VERSION]),
                    )
                )
            )
        ):
            if os.getppid() != parent:
                break
            time.sleep(0.0005)
            wait += time.monotonic_ns() - now
            h[shm.A_WAIT_NS] = wait
            continue
        batch, episodes = actor.step()
        if batch:
            channel.write(batch)
        for ret, length in episodes:
            channel.write_episode(ret, length)
        busy += time.monotonic_ns() - now
        h[shm.A_ENV_STEPS] += k
        h[shm.A_BUSY_NS] = busy
        h[shm.A_INFER_NS] = infer0 + int(actor.inference_s * 1e9)
        h[shm.A_ENV_NS] = env0 + int(actor.env_s * 1e9)
    actor.close()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner owns Ctrl-C and stops us
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # and a hangup, which it checkpoints on
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _die_with_parent()
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    run(cfg)


if __name__ == "__main__":
    main()
