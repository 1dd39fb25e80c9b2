"""Typed specs of the replay side of the data path: the learner's table, an actor's adder and
the gate it obeys.

An agent's builder makes them (``table_config``, ``actor_setup``); backends ask them their
questions (on-policy or not, the most items one step emits, how many items an actor's channel
must hold, what a checkpoint keeps) and let them build their objects, so no backend branches
on a kind. They cross process and Ray boundaries as JSON (:meth:`to_json`;
:func:`table_from_json`, :func:`gate_from_json`, :func:`adder_from_json` read it back), the one
place a ``"kind"`` is looked at.

numpy only: actor processes import this module.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.tables import QueueGate, RatioGate, TrajectoryQueue, UniformTable

if TYPE_CHECKING:
    from actorq.replay.adders import NStepAdder, TrajectoryAdder
    from actorq.replay.frames import FrameAdder, FrameTable
    from actorq.types import ArraySpec, EnvSpec


def _limiter_json(limiter: SampleToInsertRatio) -> dict[str, Any]:
    return dataclasses.asdict(limiter)


# -- tables: the learner's side ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class UniformSpec:
    """Off-policy (DQN, D4PG): a ring of ``capacity`` transitions sampled uniformly in batches
    of ``batch_size``, behind a Reverb-style samples-per-insert ``limiter``."""

    capacity: int
    batch_size: int
    limiter: SampleToInsertRatio
    kind: ClassVar[str] = "uniform"
    on_policy: ClassVar[bool] = False
    #: checkpoints keep its contents
    persistent: ClassVar[bool] = True

    def ring_capacity(self) -> int | None:
        """Items of a ring the learner samples from (what a device mirror holds)."""
        return self.capacity

    def build(self, specs: dict[str, ArraySpec], device: str | None = None) -> UniformTable:
        """The table; ``device``: mirror its ring there (:mod:`actorq.replay.device`)."""
        return UniformTable(self.capacity, specs, self.limiter, self.batch_size, device)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "capacity": self.capacity,
            "batch_size": self.batch_size,
            "limiter": _limiter_json(self.limiter),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> UniformSpec:
        return cls(int(d["capacity"]), int(d["batch_size"]), SampleToInsertRatio(**d["limiter"]))


@dataclasses.dataclass(frozen=True)
class QueueSpec:
    """On-policy (PPO, GO): a consume-once FIFO handing the learner ``batch_items`` items
    collected at most ``max_lag - 1`` policy versions ago."""

    batch_items: int
    max_lag: int
    kind: ClassVar[str] = "queue"
    on_policy: ClassVar[bool] = True
    persistent: ClassVar[bool] = False  # consumed once: nothing to keep

    def ring_capacity(self) -> int | None:
        return None

    def build(self, specs: dict[str, ArraySpec], device: str | None = None) -> TrajectoryQueue:
        return TrajectoryQueue(specs, self.batch_items, self.max_lag)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "batch_items": self.batch_items, "max_lag": self.max_lag}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> QueueSpec:
        return cls(int(d["batch_items"]), int(d["max_lag"]))


@dataclasses.dataclass(frozen=True)
class FramesSpec(UniformSpec):
    """Off-policy on frame-stacked pixels (DQN on Atari): the ``uniform`` rule over a replay
    that stores each frame once (:mod:`actorq.replay.frames`): ``capacity`` slots over
    ``streams`` environment instances, rebuilt into ``stack``-frame, ``n``-step transitions."""

    streams: int = 1
    stack: int = 4
    n: int = 1
    gamma: float = 0.99
    kind: ClassVar[str] = "frames"

    def ring_capacity(self) -> int | None:
        return None  # no device mirror: stacks are rebuilt on the host

    def build(self, specs: dict[str, ArraySpec], device: str | None = None) -> FrameTable:
        from actorq.replay.frames import FrameStackReplay, FrameTable

        replay = FrameStackReplay(
            self.capacity,
            self.streams,
            specs["frame"],
            specs["action"],
            self.stack,
            self.n,
            self.gamma,
        )
        return FrameTable(replay, specs, self.limiter, self.batch_size)

    def to_json(self) -> dict[str, Any]:
        layout = {"streams": self.streams, "stack": self.stack, "n": self.n, "gamma": self.gamma}
        return {**super().to_json(), **layout}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FramesSpec:
        base = UniformSpec.from_json(d)
        return cls(
            base.capacity,
            base.batch_size,
            base.limiter,
            int(d["streams"]),
            int(d["stack"]),
            int(d["n"]),
            float(d["gamma"]),
        )


TableSpec = UniformSpec | QueueSpec | FramesSpec


# -- adders: what an actor's steps become ------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NStepSpec:
    """n-step transitions with discount ``gamma`` (DQN, D4PG)."""

    n: int
    gamma: float
    kind: ClassVar[str] = "nstep"

    @property
    def items_per_env_step(self) -> int:
        """The most items one environment's step can emit: an ending episode flushes up to
        ``n`` windows."""
        return self.n

    def build(self, num_envs: int, spec: EnvSpec, actor: int = 0) -> NStepAdder:
        from actorq.replay.adders import NStepAdder

        return NStepAdder(self.n, self.gamma, num_envs, spec.observation, spec.action)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n, "gamma": self.gamma}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> NStepSpec:
        return cls(int(d["n"]), float(d["gamma"]))


@dataclasses.dataclass(frozen=True)
class TrajectorySpec:
    """Trajectory chunks of ``length`` steps with the behaviour's log-probs (PPO)."""

    length: int
    kind: ClassVar[str] = "trajectory"
    items_per_env_step: ClassVar[int] = 1  # one chunk per environment, at its last step

    def build(self, num_envs: int, spec: EnvSpec, actor: int = 0) -> TrajectoryAdder:
        from actorq.replay.adders import TrajectoryAdder

        return TrajectoryAdder(self.length, num_envs, spec, actor)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "length": self.length}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrajectorySpec:
        return cls(int(d["length"]))


@dataclasses.dataclass(frozen=True)
class FrameAdderSpec:
    """Frame records of stacked-pixel steps (:class:`~actorq.replay.frames.FrameAdder`): actor
    ``i``'s environments are streams ``i * K .. i * K + K - 1``."""

    kind: ClassVar[str] = "frames"
    items_per_env_step: ClassVar[int] = 2  # an ending episode: its final frame, the next first

    def build(self, num_envs: int, spec: EnvSpec, actor: int = 0) -> FrameAdder:
        from actorq.replay.frames import FrameAdder

        return FrameAdder(num_envs, actor * num_envs, spec.action)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FrameAdderSpec:
        return cls()


@dataclasses.dataclass(frozen=True)
class NoAdderSpec:
    """An actor that writes its items itself (GO's one-shot graph decisions)."""

    kind: ClassVar[str] = "none"
    items_per_env_step: ClassVar[int] = 1

    def build(self, num_envs: int, spec: EnvSpec, actor: int = 0) -> NoReturn:
        raise TypeError("an actor with no adder writes its items itself")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> NoAdderSpec:
        return cls()


AdderSpec = NStepSpec | TrajectorySpec | FrameAdderSpec | NoAdderSpec


# -- gates: the actor's side of the table's rule -----------------------------------------------
@dataclasses.dataclass(frozen=True)
class RatioGateSpec:
    """Off-policy: inserts wait for the learner to sample (the table's ``limiter``)."""

    limiter: SampleToInsertRatio
    kind: ClassVar[str] = "uniform"
    on_policy: ClassVar[bool] = False

    def build(self) -> RatioGate:
        return RatioGate(self.limiter)

    def channel_items(self, envs_per_actor: int, adder: AdderSpec) -> int:
        """Items an actor's shared-memory channel holds: many steps' emissions."""
        return max(8192, 64 * envs_per_actor * adder.items_per_env_step)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "limiter": _limiter_json(self.limiter)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RatioGateSpec:
        return cls(SampleToInsertRatio(**d["limiter"]))


@dataclasses.dataclass(frozen=True)
class QueueGateSpec:
    """On-policy: an actor may start a chunk of ``chunk_items`` while it has fewer than
    ``max_lag`` chunks the learner has not consumed and published past
    (:class:`~actorq.replay.tables.QueueGate`)."""

    chunk_items: int
    max_lag: int
    kind: ClassVar[str] = "queue"
    on_policy: ClassVar[bool] = True

    def build(self) -> QueueGate:
        return QueueGate(self.chunk_items, self.max_lag)

    @property
    def unconsumed_items(self) -> int:
        """The most items one actor may have the learner not yet consume."""
        return self.chunk_items * self.max_lag

    def channel_items(self, envs_per_actor: int, adder: AdderSpec) -> int:
        """Room for every chunk the gate lets an actor have unconsumed, and the next one."""
        return self.chunk_items * (self.max_lag + 1)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "chunk_items": self.chunk_items, "max_lag": self.max_lag}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> QueueGateSpec:
        return cls(int(d["chunk_items"]), int(d["max_lag"]))


GateSpec = RatioGateSpec | QueueGateSpec

_TABLES: dict[str, type[UniformSpec] | type[QueueSpec] | type[FramesSpec]] = {
    "uniform": UniformSpec,
    "queue": QueueSpec,
    "frames": FramesSpec,
}
_ADDERS: dict[
    str, type[NStepSpec] | type[TrajectorySpec] | type[FrameAdderSpec] | type[NoAdderSpec]
] = {
    "nstep": NStepSpec,
    "trajectory": TrajectorySpec,
    "frames": FrameAdderSpec,
    "none": NoAdderSpec,
}
_GATES: dict[str, type[RatioGateSpec] | type[QueueGateSpec]] = {
    "uniform": RatioGateSpec,
    "queue": QueueGateSpec,
}


def _kind(d: dict[str, Any], kinds: dict[str, Any], what: str) -> Any:
    kind = d.get("kind")
    if kind not in kinds:
        raise ValueError(f"unknown {what} {kind!r}; expected one of {', '.join(kinds)}")
    return kinds[kind]


def table_from_json(d: dict[str, Any]) -> TableSpec:
    spec: TableSpec = _kind(d, _TABLES, "replay kind").from_json(d)
    return spec


def adder_from_json(d: dict[str, Any]) -> AdderSpec:
    spec: AdderSpec = _kind(d, _ADDERS, "adder").from_json(d)
    return spec


def gate_from_json(d: dict[str, Any]) -> GateSpec:
    spec: GateSpec = _kind(d, _GATES, "gate").from_json(d)
    return spec
