"""The seams between components (after Acme's ``Actor``/``VariableSource``/``Learner``).

Each box of the data path (docs/architecture.md) is one implementation of one of these; backends
wire them together. Kept free of torch so actor processes can import them.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from actorq.types import Batch


class ParameterSource(abc.ABC):
    """Where actors read policy snapshots from: a cheap version read, then the bytes."""

    @abc.abstractmethod
    def latest_version(self) -> int:
        """Version of the newest published snapshot, or -1 before the first publish."""

    @abc.abstractmethod
    def fetch(self) -> tuple[int, bytes] | None:
        """``(version, bytes)`` of the newest snapshot, or None if none is published yet."""


class ParameterSink(abc.ABC):
    """Where the learner publishes snapshots: once per publish, whatever the number of actors."""

    @abc.abstractmethod
    def publish(self, version: int, data: bytes) -> None: ...


class Actor(abc.ABC):
    """Acts in K environments at once with the latest snapshot it has."""

    @abc.abstractmethod
    def select_action(self, obs: np.ndarray) -> np.ndarray:
        """Actions for a batch of observations (one per environment)."""

    @abc.abstractmethod
    def update(self) -> bool:
        """Poll the parameter source; swap in a newer snapshot. Returns True if swapped."""

    @abc.abstractmethod
    def step(self) -> tuple[Batch, list[tuple[float, int]]]:
        """One vector step: the transitions it completed and the (return, length) of the
        episodes that ended."""


class Learner(abc.ABC):
    """Owns the fp32 networks and the update rule."""

    @abc.abstractmethod
    def update(self, batch: Batch) -> dict[str, float]:
        """One update; its metrics as numbers (a device learner syncs for them)."""

    def learn(self, batch: Batch) -> None:
        """One update whose metrics stay with the learner until :meth:`read_metrics`: what the
        training loop calls, so a device learner never waits on the device between log
        intervals. By default :meth:`update`, its numbers kept."""
        pending: list[dict[str, float]] = self.__dict__.setdefault("_pending_metrics", [])
        pending.append(self.update(batch))

    def read_metrics(self) -> dict[str, float]:
        """Means of the metrics of the updates since the last read, and reset."""
        pending: list[dict[str, float]] = self.__dict__.pop("_pending_metrics", [])
        keys = {k for m in pending for k in m}
        return {k: float(np.mean([m[k] for m in pending if k in m])) for k in keys}

    def warm_start(self) -> dict[str, float]:
        """Called once by ``train()`` for a fresh run only (not on ``--resume``, not by
        ``eval``/``export``), after the learner is built and before its first snapshot is
        published, so actors start from what it does (GO's imitation of a classical baseline);
        returns metrics to log at step 0. Nothing by default."""
        return {}

    def finish(self) -> dict[str, float]:
        """Called once by ``train()`` when a run stops on its budget, target or callback (not
        on Ctrl-C or an error), before the final snapshot and checkpoint, so they hold what it
        does (GO's final distillation); returns metrics to log at the last step. Nothing by
        default."""
        return {}

    @abc.abstractmethod
    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(tensors, json_metadata)`` for a safe checkpoint."""

    @abc.abstractmethod
    def load_state(self, tensors: dict[str, Any], meta: dict[str, Any]) -> None: ...


class MLPLearner(Learner):
    """A learner whose acting network is an MLP the quantizer takes layer by layer (DQN, D4PG,
    PPO with ``--network mlp``): what :class:`~actorq.agents.policy_io.MLPPolicyIO`, snapshots
    and ``--precision auto`` read. Graph policies (GO, PPO's chip network) are plain
    :class:`Learner` s: their builders export the whole network through their own PolicyIO."""

    @abc.abstractmethod
    def policy_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The acting network as fp32 ``[(W (in, out), b), ...]`` for the quantizer."""

    def policy_extras(self) -> dict[str, np.ndarray]:
        """fp32 tensors the snapshot carries besides the layers (observation normalisation,
        a Gaussian policy's log-std); none by default."""
        return {}
