"""Publishing snapshots (:class:`Publisher`: quantize, checksum, send; in the background when it
may) and checkpointing (:class:`Checkpointer`).
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actorq import checkpoint as ckpt
from actorq.agents.policy_io import FreezableIO, ModelPolicyIO, PolicyIO
from actorq.config import ExperimentConfig
from actorq.core.interfaces import Learner
from actorq.distributed.backend import Backend
from actorq.errors import DivergedError
from actorq.run.directory import saved_snapshot
from actorq.run.resume import Counters
from actorq.rundir import RunDir


def check_losses(metrics: dict[str, float], updates: int) -> None:
    """Stop at the first non-finite loss: a diverged learner must not publish, checkpoint or
    report success."""
    for k, v in metrics.items():
        if k.endswith("_loss") and not math.isfinite(v):
            # metrics are read once per log interval (no sync per update): "by", not "at"
            raise DivergedError(f"the learner diverged by update {updates}: {k} = {v}")


class Publisher:
    """Quantizes the learner's policy and broadcasts it through the backend.

    int8/int4 weights are rounded with GPTQ on replay states when the config asks for it, and
    a whole-network policy's int8 activation scales are calibrated on them
    (:class:`~actorq.agents.policy_io.ModelPolicyIO`: the convolutional actors): fresh states
    per publish, from a generator keyed by (seed, version): reproducible, resume-safe, and
    independent of the learner's sampling stream.

    ``asynchronous`` (off-policy agents with actor processes, ``publish_async``): a periodic
    publish copies the weights on the learner's thread and quantizes, encodes and sends them
    on one background thread (Menger: distributing parameters must not throttle the learner).
    While one is in flight the next is skipped (counted), never waited for. The first
    publish, a publish before an evaluation (:meth:`publish` with ``in_line``) and the final
    snapshot are in line, after the one in flight has landed. An error on the background
    thread (non-finite weights) is raised on the learner's at the next publish or :meth:`settle`.
    """

    def __init__(self, cfg: ExperimentConfig, io: PolicyIO, asynchronous: bool = False) -> None:
        self.cfg, self.io = cfg, io
        self.gptq = cfg.uses_gptq()
        self.replay: Any = None  # the backend's replay view, once there is a backend
        self.backend: Backend | None = None
        self.times: list[float] = []  # per publish: quantize + encode + send
        self.blocked: list[float] = []  # per publish: what the learner's thread paid
        self.skipped = 0
        self.latest = b""
        self.latest_updates = -1  # the learner updates ``latest`` was made from
        self._freezer = io if isinstance(io, FreezableIO) else None  # the IO that can freeze
        self._pool = (
            ThreadPoolExecutor(1, thread_name_prefix="actorq-publish")
            if asynchronous and self._freezer is not None
            else None
        )
        self._inflight: Future[None] | None = None

    @property
    def asynchronous(self) -> bool:
        return self._pool is not None

    def calibrates(self) -> bool:
        """Whether the run's snapshots depend on more than the weights (int8/int4 rounding or
        activation ranges calibrated on replay states): a checkpoint then keeps its own."""
        return self._states_needed(self.cfg.precision) > 0

    def _states_needed(self, precision: str) -> int:
        # a whole-network policy says what it calibrates on; an MLP takes GPTQ's states
        if isinstance(self.io, ModelPolicyIO):
            return self.io.calibration_states(precision)
        return self.cfg.calibration_states if self.gptq else 0

    def _calibration(self, version: int, precision: str) -> np.ndarray | None:
        n = self._states_needed(precision)
        if not n or self.replay is None:
            return None
        # not gated on replay.size: PPO's queue is empty right after the learner consumed it
        # (when it publishes), yet still holds the states of the batch it took
        states = self.replay.sample_states(n, np.random.default_rng((self.cfg.seed, version)))
        return states if len(states) else None

    def snapshot(self, version: int, precision: str | None = None) -> bytes:
        """The learner's policy as snapshot bytes (the config's precision by default)."""
        precision = precision or self.cfg.precision
        calib = self._calibration(version, precision)
        if not self.io.is_finite():
            raise DivergedError("the learner's policy weights are NaN or infinite")
        return self.io.snapshot(version, precision, calib)

    def resumed(self, version: int, where: Path, loaded: ckpt.Checkpoint, made: bytes) -> bytes:
        """The snapshot a resumed run's actors start from, once its replay is restored: the
        one its checkpoint keeps (the bytes the actors ran with these weights), else one made
        now, calibrated on the restored replay. ``made``: the one made before the replay was
        back, calibrated on nothing (int8 pixels: activation ranges bounded over every
        possible frame), which actors acted with until the learner's first publish and an
        evaluation redone on resume scored: from a Pong DQN checkpoint it took fp32's greedy
        action on 7% of replay states, calibrated on the restored replay on 94%."""
        found = saved_snapshot(where, loaded.state, self.cfg.precision, made, loaded.snapshot)
        if found is not None and found[1].version == version:  # not a final one (version + 1)
            return found[0]
        return self.snapshot(version)

    def publish(self, c: Counters, first: bytes | None = None, in_line: bool = False) -> None:
        """Publish the next version (or ``first``, the initial one, as version ``c.version``);
        on the background thread if the publisher is asynchronous and neither is asked for."""
        assert self.backend is not None
        if self._pool is not None and first is None and not in_line:
            if self._inflight is not None and not self._inflight.done():
                self.skipped += 1
                return
            self.settle()  # the last one's error, if any, surfaces here
            t = time.perf_counter()
            c.version += 1
            c.publishes += 1
            assert self._freezer is not None
            p = self.cfg.precision
            make = self._freezer.freeze(c.version, p, self._calibration(c.version, p))
            c.updates_at_publish = c.updates
            self._inflight = self._pool.submit(self._send, c.version, make, t, c.updates)
            self.blocked.append(time.perf_counter() - t)
            return
        self.settle()
        t = time.perf_counter()
        if first is None:
            c.version += 1
            c.publishes += 1
        data = first if first is not None else self.snapshot(c.version)
        self.backend.publish(c.version, data)
        if first is None:
            self.times.append(time.perf_counter() - t)
            self.blocked.append(self.times[-1])
        self.latest, self.latest_updates = data, c.updates
        c.updates_at_publish = c.updates

    def publish_for_evaluation(self, c: Counters) -> None:
        """Make ``latest`` exactly the weights the actors now get: the snapshot in flight lands
        first, then the current weights are published in line if updates came since."""
        self.settle()
        if c.updates != c.updates_at_publish:
            self.publish(c, in_line=True)

    def publish_for_checkpoint(self, c: Counters) -> None:
        """Before a checkpoint: where its snapshot is kept (:meth:`calibrates`), the weights it
        saves are the ones published, in flight or skipped while one was (a slow GPTQ or pixel
        publish); else the publish in flight lands (its error is the run's)."""
        if self.calibrates():
            self.publish_for_evaluation(c)
        else:
            self.settle()

    def _send(self, version: int, make: Callable[[], bytes], t0: float, updates: int) -> None:
        assert self.backend is not None
        data = make()
        self.backend.publish(version, data)
        self.latest, self.latest_updates = data, updates
        self.times.append(time.perf_counter() - t0)

    def settle(self) -> None:
        """Wait for the publish in flight, if any; raise its error."""
        f, self._inflight = self._inflight, None
        if f is not None:
            f.result()

    def close(self) -> None:
        """Let the publish in flight finish (its error dropped: the run is ending) and stop
        the background thread."""
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self.settle()
            self._pool.shutdown(wait=True)


class Checkpointer:
    """Writes the learner, counters, RNG streams and (if the replay kind keeps it) the replay."""

    def __init__(
        self,
        run_dir: Path,
        learner: Learner,
        counters: Counters,
        rng: np.random.Generator,
        replay: Any,
        save_replay: bool,
    ) -> None:
        self.run = RunDir(run_dir)
        self.dir = self.run.checkpoint
        self.learner, self.c, self.rng, self.replay = learner, counters, rng, replay
        self.save_replay = save_replay and bool(getattr(replay, "persistent", False))
        #: the run's publisher: a checkpoint keeps the snapshot the actors ran with its weights
        #: where that cannot be made again from them alone (:meth:`Publisher.calibrates`)
        self.publisher: Publisher | None = None

    def save(self, snapshot: bytes | None = None) -> None:
        """The latest checkpoint: learner, counters, RNG streams, replay if kept; ``snapshot``:
        the policy snapshot of these weights if it is not the last one published (the run's
        final one)."""
        self._write(self.dir, self.replay.save if self.save_replay else None, snapshot)

    def save_best(self) -> None:
        """The best policy so far (``RUN/best``): the same checkpoint without the replay (and
        with the snapshot just evaluated)."""
        self._write(self.run.best, None)

    def _snapshot(self, given: bytes | None) -> bytes | None:
        p = self.publisher
        if p is None or not p.calibrates():
            return None  # `actorq eval` makes the same bytes from the weights
        if given is not None:
            return given
        # the last publish, if it was made from these weights (not a publish still in flight)
        return p.latest if p.latest and p.latest_updates == self.c.updates else None

    def _write(self, where: Path, replay_writer: Any, snapshot: bytes | None = None) -> None:
        tensors, meta = self.learner.state()
        for name, t in tensors.items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise DivergedError(f"learner tensor {name!r} is NaN or infinite")
        tensors["rng.torch"] = torch.get_rng_state()
        tensors.update(ckpt.cuda_rng_states())
        lead = getattr(self.replay, "lead", None) if replay_writer is not None else None
        self.c.replay_lead = None if lead is None else float(lead)
        state = {
            "learner": meta,
            "counters": self.c.to_json(),
            "rng": {"numpy": ckpt.rng_state(self.rng), "python": list(random.getstate()[1])},
            # when (epoch seconds): a resume drops the metrics rows logged after it
            "saved_at": time.time(),
        }
        files = {}
        snap = self._snapshot(snapshot)
        if snap is not None and self.publisher is not None:
            files[ckpt.SNAPSHOT] = snap
            state["snapshot"] = {"precision": self.publisher.cfg.precision, "file": ckpt.SNAPSHOT}
        ckpt.save(where, tensors, state, replay_writer, files)
