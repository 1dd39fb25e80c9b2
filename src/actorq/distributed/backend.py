"""The Backend seam: what the learner loop drives, whatever runs the actors.

A backend starts the actors, moves their data into the agent's replay kind (built by the
builder's table spec, :mod:`actorq.replay.specs`), hands the learner its next
batch, broadcasts snapshots and reports what happened. Three implement it:

* ``sync``: one actor in the learner's process, stepped only when the learner has no batch
  (deterministic for a seed; ``actors=0``);
* ``local``: actor processes on this machine, sharing memory (the embedded default);
* ``ray``: Ray actors, sharded replay, a parameter cache per node (``[distributed]`` extra).

Backends come from :data:`BACKENDS` by name (:func:`backend_name` picks it from a config), so a
new one is a new entry, not a branch in the learner loop. A backend also answers
``--precision auto`` (:meth:`BackendClass.select_precision`): the precision is timed where its
actors will run. A backend with settings of its own declares them as a group of the config
(``ray``: :class:`actorq.distributed.settings.RaySettings`), listed only with ``--backend ray``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from actorq.core.loop import ActorSetup
from actorq.distributed.settings import RaySettings
from actorq.registry import load
from actorq.replay.specs import TableSpec
from actorq.types import ArraySpec, Batch


class BackendConfig(Protocol):
    """What a backend reads of the experiment's config (:class:`actorq.config.ExperimentConfig`
    is one; typed structurally, so the config may hold the backends' settings groups)."""

    @property
    def backend(self) -> str: ...

    @property
    def actors(self) -> int: ...

    @property
    def envs_per_actor(self) -> int: ...

    @property
    def device(self) -> str: ...

    @property
    def runtime(self) -> str: ...

    @property
    def actor_threads(self) -> int: ...

    @property
    def granularity(self) -> str: ...

    @property
    def ray(self) -> RaySettings: ...


@dataclasses.dataclass
class PrecisionTrial:
    """What ``--precision auto`` times (:func:`actorq.quant.autoselect.select_precision`): the
    learner's fp32 policy, and states the actors will see."""

    #: the policy's fp32 layers ``[(W (in, out), b), ...]``, with its spec and extra tensors
    layers: Sequence[tuple[np.ndarray, np.ndarray]]
    spec: Any
    extras: dict[str, np.ndarray]
    #: the fp32 snapshot as bytes, for timing on other machines (built only if needed)
    snapshot: Callable[[], bytes]
    observations: np.ndarray
    #: a policy exported whole (the convolutional actors): one snapshot per candidate
    #: precision, made by the learner (int8 calibrated); timed instead of ``layers``
    models: Callable[[], dict[str, bytes]] | None = None
    #: whether int8/int4 publishes round with GPTQ (``cfg.uses_gptq()`` at those
    #: precisions): the candidates are then rounded so too, calibrated on ``observations``
    gptq: bool = False


#: metrics in :attr:`BackendStats.extra` that count from a backend's start (faults, stale
#: chunks dropped, bytes served): a resumed run reports them with its earlier segments' added
CUMULATIVE = frozenset(
    {
        "faults/replay_shard_restarts",
        "faults/replay_items_lost",
        "faults/actor_lost_inserts",
        "faults/prefetch_errors",
        "replay/dropped_stale",
        "comm/learner_egress_bytes",
        "comm/server_requests",
    }
)


@dataclasses.dataclass
class BackendStats:
    env_steps: int
    actor_busy_s: float
    actor_wait_s: float
    actor_restarts: int
    rejected_snapshots: int
    versions: list[int]
    extra: dict[str, float] = dataclasses.field(default_factory=dict)  # backend-specific metrics
    # parts of actor_busy_s: inside the policy runtime, inside the environment (the rest is
    # sampling, the adder and writing items)
    actor_infer_s: float = 0.0
    actor_env_s: float = 0.0


@dataclasses.dataclass
class BackendContext:
    """Everything a backend is built from."""

    cfg: BackendConfig
    setup: ActorSetup
    #: fields of one replay item (the builder's data specs)
    specs: dict[str, ArraySpec]
    #: the builder's replay kind (:mod:`actorq.replay.specs`), which builds the table
    table_config: TableSpec
    snapshot_capacity: int
    run_dir: Path
    #: the learner's sampling stream (checkpointed by the learner loop)
    rng: np.random.Generator
    env_steps_offset: int = 0


class ReplayView(Protocol):
    """What the learner loop reads of a backend's replay besides batches."""

    persistent: bool

    @property
    def size(self) -> int: ...

    def sample_states(self, n: int, rng: np.random.Generator) -> np.ndarray: ...

    def save(self, path: str | Path) -> None: ...

    def load(self, path: str | Path) -> None: ...


class Backend(Protocol):
    #: True when actors only move when the learner steps them (``step`` inside next_batch)
    synchronous: bool
    replay: ReplayView

    def publish(self, version: int, data: bytes) -> None:
        """Broadcast a snapshot (and, for on-policy agents, release the consumed data)."""

    def next_batch(self) -> Batch | None:
        """The learner's next batch, or None when the replay rule says wait."""

    def ready_batch(self) -> Batch | None:
        """A batch the replay rule allows now, without collecting new data or waiting (the
        learner's further updates in one loop turn), or None."""

    def drain_episodes(self) -> list[tuple[float, int]]:
        """(return, length) of episodes finished since the last call."""

    def env_steps(self) -> int: ...

    def stats(self) -> BackendStats: ...

    def supervise(self) -> int:
        """Restart dead actors; returns how many were restarted now."""

    def pids(self) -> list[int]: ...

    def close(self) -> None: ...


class BackendClass(Protocol):
    """A backend's class: builds the backend, and answers ``--precision auto`` where its actors
    run, before any is started."""

    def __call__(self, ctx: BackendContext) -> Backend: ...

    def select_precision(self, cfg: BackendConfig, trial: PrecisionTrial) -> tuple[str, str]:
        """The precision the actors should run and the table of measurements (markdown)."""
        ...


def select_precision_here(cfg: BackendConfig, trial: PrecisionTrial) -> tuple[str, str]:
    """``--precision auto`` for backends whose actors run on this machine: measured in this
    process, at the actors' batch, runtime and threads."""
    from actorq.quant.autoselect import select_model_precision, select_precision

    if trial.models is not None:
        model_choice = select_model_precision(
            trial.models(), trial.observations, cfg.envs_per_actor, threads=cfg.actor_threads
        )
        return model_choice.precision, model_choice.table()
    choice = select_precision(
        trial.layers,
        trial.observations,
        cfg.envs_per_actor,
        spec=trial.spec,
        runtime=cfg.runtime,
        threads=cfg.actor_threads,
        granularity=cast(Any, cfg.granularity),
        extras=trial.extras,
        calibration=trial.observations if trial.gptq else None,  # as its publishes will
    )
    return choice.precision, choice.table()


#: backend name -> "module:class"; each class is built as ``cls(ctx)``
BACKENDS: dict[str, str] = {
    "sync": "actorq.distributed.local:SyncBackend",
    "local": "actorq.distributed.local:LocalBackend",
    "ray": "actorq.distributed.ray_backend:RayBackend",
}


def backend_name(cfg: BackendConfig) -> str:
    """``backend="local"`` with ``actors=0`` is the in-process synchronous backend."""
    return "sync" if cfg.backend == "local" and cfg.actors == 0 else cfg.backend


def backend_class(cfg: BackendConfig) -> BackendClass:
    cls: BackendClass = load(BACKENDS[backend_name(cfg)])
    return cls


def make_backend(ctx: BackendContext) -> Backend:
    return backend_class(ctx.cfg)(ctx)
