"""PolicySnapshot: what the learner broadcasts and actors run. Data, never code.

A snapshot is a safetensors blob (a JSON header followed by raw little-endian tensors): the policy
architecture as JSON (:class:`PolicySpec`), the version, the precision and a checksum of the
tensor bytes ride in the header's ``__metadata__``; the weights are the tensors. Decoding parses
JSON and copies arrays — nothing is unpickled or executed. An actor refuses a snapshot whose
checksum does not match (corruption or a torn read of shared memory) or whose floats are not all
finite, and keeps running its last good one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import struct
from typing import Any

import numpy as np
import safetensors.numpy

from actorq.errors import SnapshotError
from actorq.quant.heads import HEADS, Head, head
from actorq.quant.quantizer import (
    INT4_BLOCK,
    PRECISIONS,
    Granularity,
    dequantize_int4,
    int4_blocks,
    quantize_int4,
    quantize_int8,
    to_fp16,
)

FORMAT = "actorq.snapshot/2"  # /2: the checksum covers the header too
#: Largest quantization scale accepted: |w| up to ~1e8 (a policy's weights are O(1); a larger
#: scale is a corrupt or diverged snapshot, not a policy).
MAX_SCALE = 1e6
ACTIVATIONS = ("relu", "tanh", "none")


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    """An MLP policy: ``obs_dim → hidden... → out_dim``, ``activation`` between layers.

    ``head`` says how actors read the output (:mod:`actorq.quant.heads`): ``"q"`` (argmax over
    action values, DQN), ``"deterministic"`` (the action itself, D4PG), ``"categorical"``
    (logits, PPO) or ``"gaussian"`` (the mean; the snapshot carries ``log_std``, PPO).
    ``obs_norm``: observations are normalised by the snapshot's ``obs_mean``/``obs_std``
    tensors and clipped to ±``obs_clip`` (if > 0) before the first layer, in every runtime, so
    actors normalise exactly as the learner did when it published.
    """

    obs_dim: int
    hidden: tuple[int, ...]
    out_dim: int
    activation: str = "relu"
    output_activation: str = "none"
    head: str = "q"
    obs_norm: bool = False
    obs_clip: float = 0.0

    def __post_init__(self) -> None:
        dims = (self.obs_dim, *self.hidden, self.out_dim)
        if any((not isinstance(d, int)) or d <= 0 for d in dims):
            raise ValueError(f"layer sizes must be positive integers, got {dims}")
        if self.activation not in ACTIVATIONS or self.output_activation not in ACTIVATIONS:
            raise ValueError(f"activations must be among {ACTIVATIONS}")
        if self.head not in HEADS:
            raise ValueError(f"unknown policy head {self.head!r}; expected one of {sorted(HEADS)}")
        if not (math.isfinite(self.obs_clip) and self.obs_clip >= 0):
            raise ValueError(f"obs_clip must be finite and >= 0, got {self.obs_clip}")

    @property
    def policy_head(self) -> Head:
        return head(self.head)

    @property
    def dims(self) -> tuple[int, ...]:
        return (self.obs_dim, *self.hidden, self.out_dim)

    @property
    def num_layers(self) -> int:
        return len(self.hidden) + 1

    @property
    def num_params(self) -> int:
        d = self.dims
        return sum(a * b + b for a, b in itertools.pairwise(d))

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "hidden": list(self.hidden), "kind": "mlp"}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PolicySpec:
        if d.get("kind", "mlp") != "mlp":
            raise SnapshotError(f"unsupported policy kind {d.get('kind')!r}")
        return cls(
            obs_dim=int(d["obs_dim"]),
            hidden=tuple(int(h) for h in d["hidden"]),
            out_dim=int(d["out_dim"]),
            activation=str(d.get("activation", "relu")),
            output_activation=str(d.get("output_activation", "none")),
            head=str(d.get("head", "q")),
            obs_norm=bool(d.get("obs_norm", False)),
            obs_clip=float(d.get("obs_clip", 0.0)),
        )


@dataclasses.dataclass(frozen=True)
class PolicySnapshot:
    """A versioned, checksummed policy at one precision.

    Tensors, per layer ``i``: ``w{i}`` of shape (in, out) — float32, float16 or int8 — plus
    ``s{i}`` (float32 scales, int8 weights only) and ``b{i}`` (float32 bias; biases are a
    rounding error of the size and stay fp32, as in QuaRL and onnxruntime's dynamic
    quantization). An int4 layer's ``w{i}`` is uint8 ``(out, ceil(in / 32), 16)``, two 4-bit
    weights per byte, and ``s{i}`` float32 ``(out, ceil(in / 32))``, one scale per block of 32
    inputs (:func:`~actorq.quant.quantizer.quantize_int4`, the ``MatMulNBits`` layout). int8 and
    int4 snapshots keep their input and output layers in fp32 (see :func:`make_snapshot`).
    """

    version: int
    precision: str
    spec: PolicySpec
    tensors: dict[str, np.ndarray]
    granularity: str = "per_channel"

    def header(self) -> dict[str, str]:
        """The metadata a snapshot's bytes carry (without the checksum)."""
        return {
            "format": FORMAT,
            "version": str(self.version),
            "precision": self.precision,
            "granularity": self.granularity,
            "spec": json.dumps(self.spec.to_json(), sort_keys=True),
        }

    def checksum(self) -> str:
        return _checksum(self.header(), self.tensors)

    def to_bytes(self) -> bytes:
        meta = {**self.header(), "checksum": self.checksum()}
        return bytes(safetensors.numpy.save(self.tensors, metadata=meta))

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> PolicySnapshot:
        """Decode and validate; raises :class:`SnapshotError` on any defect."""
        data = bytes(data)
        meta = read_metadata(data)
        try:
            tensors = safetensors.numpy.load(data)
        except Exception as e:  # safetensors raises its own error types
            raise SnapshotError(f"corrupt snapshot: {e}") from None
        header = {k: v for k, v in meta.items() if k != "checksum"}
        if _checksum(header, tensors) != meta.get("checksum"):
            raise SnapshotError("snapshot checksum mismatch (corrupt or torn copy)")
        try:
            spec = PolicySpec.from_json(json.loads(meta["spec"]))
            snap = cls(
                version=int(meta["version"]),
                precision=meta["precision"],
                spec=spec,
                tensors=tensors,
                granularity=meta.get("granularity", "per_channel"),
            )
        except (KeyError, ValueError, json.JSONDecodeError) as e:
            raise SnapshotError(f"snapshot metadata invalid: {e}") from None
        snap.validate()
        return snap

    def validate(self) -> None:
        if self.precision not in PRECISIONS:
            raise SnapshotError(f"unknown precision {self.precision!r}")
        dims = self.spec.dims
        for i, (a, b) in enumerate(itertools.pairwise(dims)):
            w, bias = self.tensors.get(f"w{i}"), self.tensors.get(f"b{i}")
            if w is not None and w.dtype == np.uint8:  # packed 4-bit: its own shape
                s, blocks = self.tensors.get(f"s{i}"), (b, int4_blocks(a))
                if (
                    self.precision != "int4"
                    or w.shape != (*blocks, INT4_BLOCK // 2)
                    or s is None
                    or s.dtype != np.float32
                    or s.shape != blocks
                    or bias is None
                    or bias.shape != (b,)
                ):
                    raise SnapshotError(f"layer {i}: int4 weight or scale malformed")
                continue
            if w is None or bias is None or w.shape != (a, b) or bias.shape != (b,):
                raise SnapshotError(f"layer {i}: tensors missing or of the wrong shape")
            if w.dtype == np.int8:
                s = self.tensors.get(f"s{i}")
                if self.precision != "int8" or s is None or s.shape not in ((b,), (1,)):
                    raise SnapshotError(f"layer {i}: int8 weight or scale malformed")
            elif w.dtype not in (np.float32, np.float16):
                raise SnapshotError(f"layer {i}: unsupported weight dtype {w.dtype}")
        for name, shape in self.spec_extras().items():
            t = self.tensors.get(name)
            if t is None or t.dtype != np.float32 or t.shape != shape:
                raise SnapshotError(f"tensor {name!r} missing or malformed (want {shape} float32)")
        if self.spec.obs_norm and not (self.tensors["obs_std"] > 0).all():
            raise SnapshotError("obs_std must be positive")
        for name, t in self.tensors.items():
            if t.dtype.kind == "f" and not np.isfinite(t).all():
                raise SnapshotError(f"snapshot tensor {name!r} has NaN or Inf")
        for i in range(self.spec.num_layers):
            s = self.tensors.get(f"s{i}")
            if s is not None and not ((s > 0) & (s <= MAX_SCALE)).all():
                raise SnapshotError(f"layer {i}: quantization scales must be in (0, {MAX_SCALE:g}]")

    def spec_extras(self) -> dict[str, tuple[int, ...]]:
        return extra_shapes(self.spec)

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """Observations as the first layer sees them (identity without ``obs_norm``)."""
        return normalize_obs(self.spec, self.tensors, obs)

    def dequantized(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(weight (in, out) float32, bias float32) per layer: what the weights represent."""
        out = []
        for i in range(self.spec.num_layers):
            w = self.tensors[f"w{i}"]
            if w.dtype == np.int8:
                w = w.astype(np.float32) * self.tensors[f"s{i}"]
            elif w.dtype == np.uint8:
                w = dequantize_int4(w, self.tensors[f"s{i}"], self.spec.dims[i])
            out.append((np.asarray(w, dtype=np.float32), self.tensors[f"b{i}"]))
        return out


def extra_shapes(spec: PolicySpec) -> dict[str, tuple[int, ...]]:
    """fp32 tensors a snapshot carries besides its layers, by name and shape."""
    out: dict[str, tuple[int, ...]] = {}
    if spec.obs_norm:
        out["obs_mean"] = out["obs_std"] = (spec.obs_dim,)
    if spec.policy_head.needs_log_std:
        out["log_std"] = (spec.out_dim,)
    return out


def normalize_obs(spec: PolicySpec, tensors: dict[str, np.ndarray], obs: np.ndarray) -> np.ndarray:
    x = np.asarray(obs, np.float32)
    if not spec.obs_norm:
        return x
    x = (x - tensors["obs_mean"]) / tensors["obs_std"]
    return np.clip(x, -spec.obs_clip, spec.obs_clip) if spec.obs_clip > 0 else x


def _checksum(header: dict[str, str], tensors: dict[str, np.ndarray]) -> str:
    # blake2b over the header (architecture, head, version, precision: a flipped bit there
    # changes what the weights mean) and the tensors' names, dtypes, shapes and bytes, in name
    # order. Guards against corruption and torn reads, not against an attacker (nothing in a
    # snapshot can execute anyway).
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(header, sort_keys=True).encode())
    for name in sorted(tensors):
        t = np.ascontiguousarray(tensors[name])
        h.update(f"{name}|{t.dtype.str}|{t.shape}".encode())
        h.update(t.tobytes() if t.nbytes < 4096 else memoryview(t.reshape(-1).view(np.uint8)))  # type: ignore[arg-type]
    return h.hexdigest()


def read_metadata(data: bytes, fmt: str = FORMAT) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors blob of format ``fmt``, without loading the
    tensors."""
    if len(data) < 8:
        raise SnapshotError("snapshot truncated")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8 or n > 100_000_000:
        raise SnapshotError("snapshot header length out of range")
    try:
        header = json.loads(data[8 : 8 + n])
        meta = header.get("__metadata__", {})
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        raise SnapshotError("snapshot header is not valid JSON") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise SnapshotError(f"not an actorq snapshot ({fmt})")
    return meta


def _matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    # torch, pinned to the learner's threads (numpy's BLAS would use every core; see
    # actorq.quant.calibration). Only the learner calibrates, and it has torch.
    import torch

    xt = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    return (xt @ torch.from_numpy(np.ascontiguousarray(w, np.float32))).numpy()


def make_snapshot(
    layers: list[tuple[np.ndarray, np.ndarray]],
    spec: PolicySpec,
    precision: str,
    version: int,
    granularity: Granularity = "per_channel",
    calibration: np.ndarray | None = None,
    extras: dict[str, np.ndarray] | None = None,
) -> PolicySnapshot:
    """Quantize fp32 layers ``[(W (in, out), b), ...]`` into a snapshot at ``precision``.

    ``extras``: the fp32 tensors the spec asks for besides the layers (``obs_mean``/``obs_std``
    with ``obs_norm``, ``log_std`` for a ``gaussian`` head); copied as they are, whatever the
    precision.

    ``calibration``: observations (n, obs_dim), e.g. from replay. When given, int8 and int4
    weights are rounded with GPTQ on each layer's fp32 inputs (:mod:`actorq.quant.calibration`)
    instead of to nearest; the format and the scales are the same either way. int4 weights are
    block-wise (``granularity`` does not apply: the snapshot records ``block32``).
    """
    from actorq.quant.calibration import gptq_int4, gptq_int8

    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    tensors: dict[str, np.ndarray] = {}
    extras = extras or {}
    for name in extra_shapes(spec):
        if name not in extras:
            raise ValueError(f"policy spec needs tensor {name!r}; pass it in extras")
        tensors[name] = np.array(extras[name], dtype=np.float32, copy=True)
    x = None
    if calibration is not None and precision in ("int8", "int4") and len(calibration):
        x = normalize_obs(spec, tensors, calibration)
    for i, (w, b) in enumerate(layers):
        if precision == "fp32":
            tensors[f"w{i}"] = np.ascontiguousarray(w, dtype=np.float32)
        elif precision == "fp16":
            tensors[f"w{i}"] = np.ascontiguousarray(to_fp16(w))
        elif i in (0, len(layers) - 1):
            # The input and output layers stay fp32 (as in most int8 and int4 deployments): together
            # they are <1% of a 3×2048 policy's bytes and compute, and their quantization noise
            # is the most harmful. Input: raw observations mix scales (CartPole: angle ±0.2 rad,
            # velocities ±3), and with only obs_dim weights per channel one large weight sets
            # the scale of the small ones. Output: its noise lands directly on the action
            # values and flips near-tied greedy actions.
            tensors[f"w{i}"] = np.ascontiguousarray(w, dtype=np.float32)
        elif precision == "int4":
            tensors[f"w{i}"], tensors[f"s{i}"] = (
                gptq_int4(w, x) if x is not None else quantize_int4(w)
            )
        else:
            # ``w`` may be a transposed view of the learner's weights: quantize in place, then
            # lay out only the int8 result (4× fewer bytes to move than the fp32 input).
            q, tensors[f"s{i}"] = (
                gptq_int8(w, x, granularity) if x is not None else quantize_int8(w, granularity)
            )
            tensors[f"w{i}"] = np.ascontiguousarray(q)
        tensors[f"b{i}"] = np.ascontiguousarray(b, dtype=np.float32)
        if x is not None and i < len(layers) - 2:  # the next layer is a quantized one
            x = _matmul(x, w) + b  # the next layer's fp32 inputs on the calibration states
            act = spec.activation
            x = np.maximum(x, 0) if act == "relu" else (np.tanh(x) if act == "tanh" else x)
    if precision == "int4":
        return PolicySnapshot(version, precision, spec, tensors, f"block{INT4_BLOCK}")
    return PolicySnapshot(version, precision, spec, tensors, granularity)
