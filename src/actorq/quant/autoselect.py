"""Precision auto-select: the fastest snapshot precision that still acts like fp32, measured here.

Which precision pays depends on the hardware and the policy: QuaRL (Lam et al., TMLR 2022)
reports int8 actors several times faster than fp32 at the paper's 3×2048 policies, while at
width 256 framework overhead dominates and quantization only adds noise
(docs/results.md). So rather than fix a precision, an experiment can
measure: :func:`select_precision` builds the actors' runtime at each candidate precision, times
it at the actors' batch size on this machine, checks how often it picks fp32's action, and
returns the fastest candidate that agrees often enough. int4 is block-wise 4-bit
(onnxruntime's ``MatMulNBits``, :mod:`actorq.quant.runtimes`).

``"auto"`` is a configuration-level choice that resolves to one of
:data:`~actorq.quant.quantizer.PRECISIONS` through this module; it is never a snapshot precision.

Wiring ``--precision auto`` (the intended use): resolve it once, before actors start, with the
learner's initial fp32 layers (``learner.policy_layers()`` and the builder's ``PolicySpec``), a
few thousand observations (random-policy steps, or the replay once ``min_replay_size`` is
reached — agreement on an untrained net is pessimistic: many near-ties), ``batch_size`` = the
config's envs per actor and ``threads`` = its actor threads; pass ``calibration=`` if publishes
will round with GPTQ. Set the config's precision to ``choice.precision`` and log
``choice.table()`` / ``choice.rows()``. Call it in a process on the actors' machine: the point
is to time this hardware.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from actorq.quant.formats import PRECISIONS, quantizes_a_layer
from actorq.quant.quantizer import Granularity
from actorq.quant.runtimes import PolicyRuntime, make_runtime
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, extra_shapes, make_snapshot

DEFAULT_CANDIDATES: tuple[str, ...] = PRECISIONS

#: A runtime to time: an MLP snapshot's :class:`PolicyRuntime` or a model snapshot's
#: :class:`~actorq.quant.runtimes.ModelRuntime` (observations in, outputs out).
Timed = Callable[[np.ndarray], np.ndarray]
#: ``timer(runtimes, batch) -> seconds per call of each runtime``; injectable so that tests can
#: fix the latencies. All candidates are timed in one call, so a timer can interleave them.
Timer = Callable[[Sequence[Timed], np.ndarray], Sequence[float]]


#: calls an actor makes of its one model in a row, as the choice times them (``burst``): the
#: int8 Nature-CNN's gain over fp32 at batch 8 is 2.63x so timed, 1.75x one call per turn
#: (its weights evicted by the other candidates'; docs/atari.md)
ACTOR_BURST = 10


def actor_latency(runtimes: Sequence[Timed], batch: np.ndarray) -> list[float]:
    """:func:`measure_latency` as an actor calls its model: :data:`ACTOR_BURST` calls in a row."""
    return measure_latency(runtimes, batch, burst=ACTOR_BURST)


def measure_latency(
    runtimes: Sequence[Timed],
    batch: np.ndarray,
    warmup: int = 10,
    repeats: int = 31,
    burst: int = 1,
) -> list[float]:
    """Median seconds of one ``runtime(batch)`` call for each runtime, after ``warmup`` calls.

    The runtimes are timed in turn (order rotating), not one after the other: on a shared
    machine the load changes within a second, and a burst then slows every candidate alike
    instead of one of them. The median of single calls, not a mean, so a call now and then
    slowed by another process does not count. ``burst``: calls timed in a row per turn, after
    one untimed call (``repeats`` calls in all, rounded up to whole turns). 1 times every call
    just after the other candidates ran, their weights in the caches; more times a model as an
    actor runs its one model, call after call, its own weights and buffers cached (the ratio
    between a 1.7 MB int8 and a 6.7 MB fp32 Nature-CNN differs between the two: docs/atari.md).
    """
    if burst < 1:
        raise ValueError(f"burst must be >= 1, got {burst}")
    for rt in runtimes:
        for _ in range(warmup):
            rt(batch)
    times: list[list[float]] = [[] for _ in runtimes]
    n = len(runtimes)
    for r in range(-(-repeats // burst)):
        for j in range(n):
            i = (r + j) % n
            if burst > 1:
                runtimes[i](batch)  # the turn's first call brings its model back into cache
            for _ in range(burst):
                t0 = time.perf_counter()
                runtimes[i](batch)
                times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One measured precision: a row of :meth:`PrecisionChoice.table`."""

    precision: str
    latency_us: float  # median µs per call at batch K
    agreement: float  # share of sample states acting like fp32 (fp32 itself: 1.0)
    snapshot_bytes: int
    eligible: bool  # agreement >= min_agreement
    chosen: bool
    latency_us_batch1: float | None = None  # median µs at batch 1, where it was measured too


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    """The result of :func:`select_precision`: ``precision`` and every candidate measured."""

    precision: str
    candidates: tuple[Candidate, ...]
    batch_size: int
    min_agreement: float
    agreement_metric: str  # how agreement was measured, for the log

    def rows(self) -> list[dict[str, Any]]:
        """One dict per candidate (JSON/CSV-ready), plus a ``speedup_vs_fp32`` column."""
        fp32 = next(c for c in self.candidates if c.precision == "fp32").latency_us
        return [
            {**dataclasses.asdict(c), "speedup_vs_fp32": fp32 / c.latency_us if c.latency_us else 0}
            for c in self.candidates
        ]

    def table(self) -> str:
        """A markdown table for logs and reports."""
        lines = [
            f"precision auto-select at batch {self.batch_size} ({self.agreement_metric}, "
            f"needs ≥ {self.min_agreement:.2%}): {self.precision}",
            "",
            "| precision | µs / call | vs fp32 | agreement | snapshot bytes | chosen |",
            "|---|---|---|---|---|---|",
        ]
        for r in self.rows():
            mark = "**yes**" if r["chosen"] else ("" if r["eligible"] else "below threshold")
            lines.append(
                f"| {r['precision']} | {r['latency_us']:,.1f} | {r['speedup_vs_fp32']:.2f}× | "
                f"{r['agreement']:.2%} | {r['snapshot_bytes']:,} | {mark} |"
            )
        if all(c.latency_us_batch1 is not None for c in self.candidates):
            lines.append("")
            lines.append(
                "µs / call at batch 1: "
                + ", ".join(f"{c.precision} {c.latency_us_batch1:,.1f}" for c in self.candidates)
            )
        return "\n".join(lines)


def select_precision(
    source: PolicySnapshot | Sequence[tuple[np.ndarray, np.ndarray]],
    observations: np.ndarray,
    batch_size: int,
    *,
    spec: PolicySpec | None = None,
    candidates: Sequence[str] = DEFAULT_CANDIDATES,
    min_agreement: float = 0.99,
    action_atol: float = 0.05,
    min_speedup: float = 1.3,
    runtime: str = "ort",
    threads: int = 1,
    granularity: Granularity = "per_channel",
    calibration: np.ndarray | None = None,
    timer: Timer | None = None,
    extras: dict[str, np.ndarray] | None = None,
    made: dict[str, PolicySnapshot] | None = None,
) -> PrecisionChoice:
    """Pick the fastest precision whose actions agree with fp32, measured on this machine.

    Contract (what ``--precision auto`` relies on):

    * ``source``: the policy in fp32 — an fp32 :class:`PolicySnapshot`, or the learner's
      exported layers ``[(W (in, out), b), ...]`` together with ``spec``. A quantized snapshot
      is refused (``ValueError``): quantizing it again would compound the rounding.
    * ``observations``: (n, obs_dim) sample states, e.g. from replay or a few random-policy
      episodes; agreement is measured on all n of them. Latency is measured on a batch of
      exactly ``batch_size`` rows (the first ones, repeated if n < K): ``batch_size`` is the
      actor's K (environments per actor), since which precision is fastest depends on it.
    * For each precision in ``candidates`` (fp32 is always measured too: it is the reference
      and the fallback), a snapshot is made with :func:`make_snapshot` (``granularity`` and
      ``calibration`` as the learner would use them; GPTQ calibration imports torch, so leave
      it ``None`` in a torch-free actor process) and ``make_runtime(snap, runtime,
      threads)`` is built — the actors' own runtime, so call this in a process placed like an
      actor. ``made``: candidates already made from this policy, timed as they are (the Ray
      backend's nodes time the learner's GPTQ-rounded ones, without torch).
      ``timer(runtimes, batch)`` gives each one's seconds per call (default
      :func:`actor_latency`: warm-up, then the median of 31 calls, candidates interleaved, in
      bursts of :data:`ACTOR_BURST` as an actor calls its one model).
    * Agreement vs fp32 (:meth:`~actorq.quant.heads.Head.compare`): for a discrete head, the
      share of states with the same greedy action; for a continuous one, the share whose
      greedy actions are all within ``action_atol`` of fp32's. A candidate is eligible when
      agreement ≥ ``min_agreement``.
    * Result: the eligible candidate with the lowest latency, provided it is at least
      ``min_speedup`` × faster than fp32 (a precision that is not clearly faster is not worth
      its rounding, and a noise-level difference must not flip the choice: on the loaded
      2-core development machine fp16 and fp32, which run the same fp32 kernels, measured up
      to 1.21× apart in one round at 3×2048, so the default is 1.3); otherwise ``"fp32"``.
      The returned :class:`PrecisionChoice` lists every candidate (latency, agreement,
      snapshot bytes, eligible, chosen) for the log: ``.table()`` (markdown) and ``.rows()``
      (dicts).
    * Cost: one snapshot and one runtime per candidate plus ~40 calls each: about a second
      at 3×2048 (fp32 dominates), once per experiment (not per publish).

    Raises ``ValueError`` for an unknown candidate (``"auto"`` included), ``batch_size < 1``,
    observations of the wrong shape, or ``min_agreement`` outside [0, 1].
    """
    layers, spec, extras = _fp32_source(source, spec, extras)
    obs = _checked_observations(observations, spec, candidates, batch_size, min_agreement)
    batch = np.ascontiguousarray(obs[np.arange(batch_size) % len(obs)])
    timer = timer or actor_latency
    head = spec.policy_head

    # a candidate that quantizes no layer (int8 of one hidden layer) is fp32 under another
    # name, which timing noise could pick
    picks = (c for c in candidates if c != "fp32" and quantizes_a_layer(c, spec.num_layers))
    precisions = ["fp32", *dict.fromkeys(picks)]
    runtimes: list[PolicyRuntime] = []
    agreement: list[float] = []
    nbytes: list[int] = []
    ref: np.ndarray | None = None
    for p in precisions:
        snap = made[p] if made and p in made else make_snapshot(
            layers, spec, p, 0, granularity, calibration, extras
        )  # fmt: skip
        rt = make_runtime(snap, runtime, threads)
        out = rt(obs)
        if ref is None:  # fp32 comes first
            ref = out
        agreement.append(head.compare(out, ref, action_atol)[0])
        runtimes.append(rt)
        nbytes.append(len(snap.to_bytes()))
    seconds = list(timer(runtimes, batch))
    if len(seconds) != len(runtimes):
        raise ValueError(f"timer returned {len(seconds)} latencies for {len(runtimes)} runtimes")
    measured = list(zip(precisions, [t * 1e6 for t in seconds], agreement, nbytes, strict=True))
    rows = _choose(measured, min_agreement, min_speedup)
    choice = next(r.precision for r in rows if r.chosen)
    metric = "same greedy action" if head.discrete else f"actions within {action_atol:g}"
    return PrecisionChoice(choice, rows, batch_size, min_agreement, metric)


def select_model_precision(
    snapshots: dict[str, bytes],
    observations: np.ndarray,
    batch_size: int,
    *,
    min_agreement: float = 0.99,
    min_speedup: float = 1.3,
    threads: int = 1,
    timer: Timer | None = None,
) -> PrecisionChoice:
    """:func:`select_precision` for policies exported whole (model snapshots, e.g. the
    convolutional actors of :mod:`actorq.agents.pixels`): the caller makes one snapshot per
    candidate precision (``snapshots``, fp32 among them; an int8 one already calibrated), and
    each is decoded and run in the actors' onnxruntime runtime, timed at ``batch_size`` (the
    choice) and at batch 1 (reported), its greedy actions compared with fp32's on all of
    ``observations`` (kept in their own dtype: uint8 frames stay bytes). Same rule:
    the fastest candidate agreeing ≥ ``min_agreement``, if ``min_speedup`` × faster than fp32."""
    from actorq.quant.runtimes import decode_snapshot, snapshot_head

    if "fp32" not in snapshots:
        raise ValueError("select_model_precision needs an fp32 snapshot (the reference)")
    if batch_size < 1 or not len(observations):
        raise ValueError(f"need batch_size >= 1 and states, got {batch_size}, {len(observations)}")
    precisions = ["fp32", *(p for p in snapshots if p != "fp32")]
    snaps = [decode_snapshot(snapshots[p]) for p in precisions]
    runtimes = [make_runtime(snap, "ort", threads) for snap in snaps]
    head = snapshot_head(snaps[0])
    ref = runtimes[0](observations)
    agreement = [head.compare(rt(observations), ref)[0] for rt in runtimes]
    timer = timer or actor_latency
    batch = np.ascontiguousarray(observations[np.arange(batch_size) % len(observations)])
    seconds = list(timer(runtimes, batch))
    ones = list(timer(runtimes, batch[:1]))
    nbytes = [len(snapshots[p]) for p in precisions]
    measured = list(zip(precisions, [t * 1e6 for t in seconds], agreement, nbytes, strict=True))
    rows = tuple(
        dataclasses.replace(r, latency_us_batch1=t * 1e6)
        for r, t in zip(_choose(measured, min_agreement, min_speedup), ones, strict=True)
    )
    choice = next(r.precision for r in rows if r.chosen)
    return PrecisionChoice(choice, rows, batch_size, min_agreement, "same greedy action")


def _fp32_source(
    source: PolicySnapshot | Sequence[tuple[np.ndarray, np.ndarray]],
    spec: PolicySpec | None,
    extras: dict[str, np.ndarray] | None,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], PolicySpec, dict[str, np.ndarray] | None]:
    """:func:`select_precision`'s ``source`` as fp32 layers, their spec and extra tensors."""
    if isinstance(source, PolicySnapshot):
        if source.precision != "fp32":
            raise ValueError(f"select_precision needs an fp32 source, got {source.precision}")
        return (
            source.dequantized(),
            source.spec,
            {k: source.tensors[k] for k in extra_shapes(source.spec)},
        )
    if spec is None:
        raise ValueError("pass spec= with exported layers")
    return list(source), spec, extras


def _checked_observations(
    observations: np.ndarray,
    spec: PolicySpec,
    candidates: Sequence[str],
    batch_size: int,
    min_agreement: float,
) -> np.ndarray:
    """The sample states as float32 ``(n, obs_dim)``, once :func:`select_precision`'s other
    arguments are checked too (``ValueError``, one line)."""
    unknown = [c for c in candidates if c not in PRECISIONS]
    if unknown:
        raise ValueError(f"unknown candidate precision(s) {unknown}; expected among {PRECISIONS}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not 0.0 <= min_agreement <= 1.0:
        raise ValueError(f"min_agreement must be in [0, 1], got {min_agreement}")
    obs = np.asarray(observations, dtype=np.float32)
    if obs.ndim != 2 or obs.shape[1] != spec.obs_dim or len(obs) == 0:
        raise ValueError(f"observations must be (n >= 1, {spec.obs_dim}), got {obs.shape}")
    return obs


def _choose(
    measured: list[tuple[str, float, float, int]], min_agreement: float, min_speedup: float
) -> tuple[Candidate, ...]:
    """Every measured ``(precision, µs, agreement, bytes)`` as a :class:`Candidate`, the
    chosen one marked: the fastest eligible one if it is ``min_speedup`` × faster than fp32
    (``measured[0]``), else fp32."""
    fp32_us = measured[0][1]
    eligible = [m for m in measured if m[2] >= min_agreement]
    best = min(eligible, key=lambda m: m[1])  # fp32 (agreement 1.0) is always eligible
    choice = best[0] if best[1] * min_speedup <= fp32_us else "fp32"
    return tuple(
        Candidate(p, us, agree, nbytes, agree >= min_agreement, p == choice)
        for p, us, agree, nbytes in measured
    )
