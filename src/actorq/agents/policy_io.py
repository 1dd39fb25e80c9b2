"""The policy seam between a learner and the experiment loop: snapshots out, judgements back.

The loop (:func:`actorq.experiment.train`) never looks inside a policy. It asks a
:class:`PolicyIO` for the bytes to broadcast at a precision, for a greedy evaluation of those
bytes, and for how alike the quantized and fp32 snapshots act. :class:`MLPPolicyIO` serves every
agent whose actors run an MLP :class:`~actorq.quant.snapshot.PolicySnapshot` on Gymnasium
environments (DQN, D4PG, PPO); a workload with a policy of its own (GO's graph network,
:mod:`actorq.agents.go`) brings its own, and the loop, the backends and the checkpoints stay
the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from actorq.config import ExperimentConfig
from actorq.core.evaluation import evaluate
from actorq.core.interfaces import MLPLearner
from actorq.errors import DivergedError
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.runtimes import make_runtime, snapshot_head
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot


@dataclasses.dataclass(frozen=True)
class Comparison:
    """How alike the quantized and fp32 snapshots of one policy act."""

    agreement: float
    """Share of identical greedy decisions (continuous actions: within 0.05 in [-1, 1])."""
    items: int
    """What the share is over: replay states, or a graph policy's decided ops."""
    items_label: str = "replay states"
    mean_abs_diff: float | None = None
    """Continuous actions: mean |a_quantized - a_fp32|."""
    logprob_gap: float | None = None
    """Stochastic policies: mean |log π_quantized(a) − log π_fp32(a)|, a from the quantized."""


class PolicyIO(Protocol):
    #: What one evaluation "return" is, for the summary and ``actorq eval`` (e.g. "held-out,
    #: {episodes} ep": ``{episodes}`` stands for the episodes that evaluation ran)
    eval_label: str

    def is_finite(self) -> bool:
        """Whether every weight actors would get is a finite number."""

    def snapshot(
        self, version: int, precision: str, calibration: np.ndarray | None = None
    ) -> bytes:
        """The learner's acting policy as snapshot bytes (what actors decode and run)."""

    def evaluate(self, data: bytes, episodes: int, seed: int) -> np.ndarray:
        """Greedy returns of the snapshot ``data`` (one per episode, or per evaluation item)."""

    def compare(
        self, quant: bytes, fp32: bytes, states: np.ndarray | None, seed: int
    ) -> Comparison:
        """How alike two snapshots of one policy act (on ``states``, where the policy reads
        states: replay's)."""

    def summary_rows(self, data: bytes) -> list[tuple[str, str]]:
        """The agent's own rows for the run's summary table, about the snapshot ``data``
        (what its evaluation's "return" stands for, in the units its users read)."""


@runtime_checkable
class FreezableIO(Protocol):
    """A :class:`PolicyIO` whose snapshots can be made off the learner's thread: what the
    publisher's background thread needs (:class:`MLPPolicyIO`, the pixel policies')."""

    def freeze(
        self, version: int, precision: str, calibration: np.ndarray | None = None
    ) -> Callable[[], bytes]:
        """A copy of the policy's weights now, and a function making their snapshot later."""


@runtime_checkable
class ModelPolicyIO(FreezableIO, Protocol):
    """A :class:`PolicyIO` exporting a whole network (the Nature-CNN,
    :class:`actorq.agents.pixels.PixelPolicyIO`) at its own ``precisions``: the publisher
    gives each publish ``calibration_states(precision)`` replay states (int8's static
    activation scales), and ``--precision auto`` times its snapshots."""

    precisions: tuple[str, ...]

    def calibration_states(self, precision: str) -> int:
        """Replay states a publish at ``precision`` calibrates on (0: none)."""

    def snapshot(
        self, version: int, precision: str, calibration: np.ndarray | None = None
    ) -> bytes: ...


def learner_snapshot(
    learner: MLPLearner,
    pspec: PolicySpec,
    precision: str,
    version: int,
    granularity: Any = "per_channel",
    calibration: np.ndarray | None = None,
) -> PolicySnapshot:
    """The learner's acting network as a snapshot at ``precision`` (with the extra tensors its
    spec needs: observation normalisation, a Gaussian's log-std)."""
    return make_snapshot(
        learner.policy_layers(),
        pspec,
        precision,
        version,
        granularity,
        calibration,
        learner.policy_extras(),
    )


def policy_is_finite(learner: MLPLearner) -> bool:
    """Whether every weight actors would get is a finite number (a pass over the policy's
    weights: milliseconds at 3×2048, paid once per publish)."""
    return all_finite(learner.policy_layers(), learner.policy_extras())


def all_finite(layers: list[tuple[np.ndarray, np.ndarray]], extras: dict[str, np.ndarray]) -> bool:
    """Whether every weight, bias and extra tensor is a finite number."""
    arrays = [a for layer in layers for a in layer] + list(extras.values())
    return all(bool(np.isfinite(a).all()) for a in arrays)


def compare_policies(
    a: PolicySnapshot | ModelSnapshot,
    b: PolicySnapshot | ModelSnapshot,
    states: np.ndarray,
    batch: int = 16,
    seed: int = 0,
) -> tuple[float, float | None, float | None]:
    """How alike two snapshots of one policy act on ``states`` (onnxruntime for both; MLP
    snapshots or ``obs-logits`` model snapshots):
    ``(agreement, mean |Δa| or None, log-prob gap or None)`` (:meth:`Head.compare`).

    Inference runs in batches of ``batch`` (the actors' K); int8 activations are quantized per
    state, so the batch size does not change the result (tests/quant/test_runtimes.py). For a
    stochastic head the gap is the mean |log π_a(x|s) − log π_b(x|s)| with x drawn from ``a``.
    """
    if not len(states):
        return float("nan"), None, None
    ra, rb = make_runtime(a), make_runtime(b)
    out_a = np.concatenate([ra(states[i : i + batch]) for i in range(0, len(states), batch)])
    out_b = np.concatenate([rb(states[i : i + batch]) for i in range(0, len(states), batch)])
    head = snapshot_head(a)
    agree, mad = head.compare(out_a, out_b)
    gap = None
    if head.stochastic:
        from actorq.core.exploration import PolicySampler

        sampler = PolicySampler(seed)
        sampler.set_snapshot(a)
        x, extras = sampler.act(out_a)
        log_std = b.tensors.get("log_std") if isinstance(b, PolicySnapshot) else None
        gap = float(np.abs(extras["log_prob"] - head.log_prob(out_b, x, log_std)).mean())
    return agree, mad, gap


class MLPPolicyIO:
    """An MLP policy (:class:`PolicySpec`) quantized layer by layer, evaluated greedily on the
    config's Gymnasium environment with the actors' runtime."""

    def __init__(self, cfg: ExperimentConfig, learner: MLPLearner, pspec: PolicySpec) -> None:
        self.cfg, self.learner, self.pspec = cfg, learner, pspec
        self.eval_label = "held-out, {episodes} ep"

    def is_finite(self) -> bool:
        return policy_is_finite(self.learner)

    def snapshot(
        self, version: int, precision: str, calibration: np.ndarray | None = None
    ) -> bytes:
        snap = learner_snapshot(
            self.learner, self.pspec, precision, version, self.cfg.granularity, calibration
        )
        return snap.to_bytes()

    def freeze(
        self, version: int, precision: str, calibration: np.ndarray | None = None
    ) -> Callable[[], bytes]:
        """A copy of the policy's weights now, and a function that makes their snapshot bytes
        later, on any thread, whatever the learner does meanwhile (``None`` from the function:
        the copied weights are not finite)."""
        layers = self.learner.policy_layers()
        # a learner on the CPU hands out views of its live weights: copy them (order K: a
        # transposed view is copied as it lies in memory, not re-laid out); one on a GPU has
        # already copied them to the host, and a second copy would cost the learner's thread
        if getattr(getattr(self.learner, "device", None), "type", "cpu") == "cpu":
            layers = [
                (np.array(w, copy=True, order="K"), np.array(b, copy=True)) for w, b in layers
            ]
        extras = {k: np.array(v, copy=True) for k, v in self.learner.policy_extras().items()}
        pspec, granularity = self.pspec, self.cfg.granularity

        def make() -> bytes:
            if not all_finite(layers, extras):
                raise DivergedError("the learner's policy weights are NaN or infinite")
            snap = make_snapshot(
                layers, pspec, precision, version, granularity, calibration, extras
            )
            return snap.to_bytes()

        return make

    def evaluate(self, data: bytes, episodes: int, seed: int) -> np.ndarray:
        cfg = self.cfg
        rt = make_runtime(PolicySnapshot.from_bytes(data), cfg.runtime)
        return evaluate(rt, cfg.env, episodes, seed, cfg.env_kwargs())

    def compare(
        self, quant: bytes, fp32: bytes, states: np.ndarray | None, seed: int
    ) -> Comparison:
        if states is None:
            states = np.zeros((0, self.pspec.obs_dim), np.float32)
        a, b = PolicySnapshot.from_bytes(quant), PolicySnapshot.from_bytes(fp32)
        agree, mad, gap = compare_policies(a, b, states, self.cfg.envs_per_actor, seed)
        return Comparison(agree, len(states), "replay states", mad, gap)

    def summary_rows(self, data: bytes) -> list[tuple[str, str]]:
        return []  # the evaluation's return is the environment's own: nothing to add
