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

from actorq.errors import SnapshotError, first_line
from actorq.inputs import load_json
from actorq.quant.formats import FORMATS, layer_format, weight_format
from actorq.quant.heads import HEADS, Head, head
from actorq.quant.quantizer import Granularity

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
        if not isinstance(d, dict):
            raise SnapshotError("policy spec is not a JSON object")
        if d.get("kind", "mlp") != "mlp":
            raise SnapshotError(f"unsupported policy kind {d.get('kind')!r}")
        hidden = d["hidden"]
        if not isinstance(hidden, list):
            raise SnapshotError(f"policy spec: hidden must be a list of sizes, got {hidden!r}")
        return cls(
            obs_dim=_size(d["obs_dim"]),
            hidden=tuple(_size(h) for h in hidden),
            out_dim=_size(d["out_dim"]),
            activation=str(d.get("activation", "relu")),
            output_activation=str(d.get("output_activation", "none")),
            head=str(d.get("head", "q")),
            obs_norm=bool(d.get("obs_norm", False)),
            obs_clip=float(d.get("obs_clip", 0.0)),
        )


def _size(v: object) -> int:
    # a layer size is a JSON integer: 2.5 or "64" is a malformed spec, not a width to truncate
    if isinstance(v, bool) or not isinstance(v, int):
        raise SnapshotError(f"policy spec: layer sizes must be integers, got {v!r}")
    return v


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
            spec = PolicySpec.from_json(load_json(meta["spec"], "snapshot spec", SnapshotError))
            snap = cls(
                version=int(meta["version"]),
                precision=meta["precision"],
                spec=spec,
                tensors=tensors,
                granularity=meta.get("granularity", "per_channel"),
            )
        except SnapshotError:
            raise
        # OverflowError: a JSON integer past float's range (obs_clip: 10**400)
        except (KeyError, ValueError, TypeError, AttributeError, OverflowError) as e:
            raise SnapshotError(f"snapshot metadata invalid: {first_line(e)}") from None
        snap.validate()
        return snap

    def validate(self) -> None:
        """Raise :class:`SnapshotError` unless every tensor is what the spec and the precision
        say it is (each layer in its :func:`~actorq.quant.formats.layer_format`, the extras the
        head and normalisation need, nothing else), finite, with scales in range."""
        if self.precision not in FORMATS:
            raise SnapshotError(f"unknown precision {self.precision!r}")
        if self.version < 0:
            raise SnapshotError(f"snapshot version must be >= 0, got {self.version}")
        # a label (the scales' shapes are checked per layer), but one no format writes is a
        # malformed header
        known = {f.granularity(g) for f in FORMATS.values() for g in ("per_channel", "per_tensor")}
        if self.granularity not in known:
            raise SnapshotError(f"unknown granularity {self.granularity!r}")
        dims, n = self.spec.dims, self.spec.num_layers
        expected = set(self.spec_extras())
        for i, (a, b) in enumerate(itertools.pairwise(dims)):
            f = layer_format(self.precision, i, n)
            w, s, bias = (self.tensors.get(f"{k}{i}") for k in "wsb")
            if w is None or bias is None or bias.dtype != np.float32 or bias.shape != (b,):
                raise SnapshotError(f"layer {i}: tensors missing or of the wrong shape")
            if not f.check(w, s, a, b):
                scales = "none" if s is None else f"{s.dtype}{list(s.shape)}"
                raise SnapshotError(
                    f"layer {i}: not a well-formed {f.name} {a}x{b} layer (weight "
                    f"{w.dtype}{list(w.shape)}, scales {scales})"
                )
            expected |= {f"w{i}", f"b{i}"} | ({f"s{i}"} if s is not None else set())
        extra = sorted(set(self.tensors) - expected)
        if extra:
            raise SnapshotError(f"snapshot has tensors its spec does not use: {extra[:5]}")
        for name, shape in self.spec_extras().items():
            t = self.tensors.get(name)
            if t is None or t.dtype != np.float32 or t.shape != shape:
                raise SnapshotError(f"tensor {name!r} missing or malformed (want {shape} float32)")
        if self.spec.obs_norm and not (self.tensors["obs_std"] > 0).all():
            raise SnapshotError("obs_std must be positive")
        for name, t in self.tensors.items():
            if t.dtype.kind == "f" and not np.isfinite(t).all():
                raise SnapshotError(f"snapshot tensor {name!r} has NaN or Inf")
        for i in range(n):
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
        n = self.spec.num_layers
        for i in range(n):
            f = layer_format(self.precision, i, n)
            w = f.decode(self.tensors[f"w{i}"], self.tensors.get(f"s{i}"), self.spec.dims[i])
            out.append((w, self.tensors[f"b{i}"]))
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
    header = load_json(data[8 : 8 + n], "snapshot header", SnapshotError)
    if not isinstance(header, dict):
        raise SnapshotError("snapshot header is not a JSON object")
    meta = header.get("__metadata__", {})
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
    fmt = weight_format(precision)
    tensors: dict[str, np.ndarray] = {}
    extras = extras or {}
    for name in extra_shapes(spec):
        if name not in extras:
            raise ValueError(f"policy spec needs tensor {name!r}; pass it in extras")
        tensors[name] = np.array(extras[name], dtype=np.float32, copy=True)
    x = None
    if calibration is not None and fmt.calibrated and len(calibration):
        x = normalize_obs(spec, tensors, calibration)
    n = len(layers)
    for i, (w, b) in enumerate(layers):
        f = layer_format(precision, i, n)
        stored = f.encode(w, granularity, x if f.calibrated else None)
        tensors[f"w{i}"] = stored["w"]
        if "s" in stored:
            tensors[f"s{i}"] = stored["s"]
        tensors[f"b{i}"] = np.ascontiguousarray(b, dtype=np.float32)
        if x is not None and i < n - 2:  # the next layer is a quantized one
            x = _matmul(x, w) + b  # the next layer's fp32 inputs on the calibration states
            act = spec.activation
            x = np.maximum(x, 0) if act == "relu" else (np.tanh(x) if act == "tanh" else x)
    return PolicySnapshot(version, precision, spec, tensors, fmt.granularity(granularity))
