"""Inference runtimes for a :class:`PolicySnapshot`: onnxruntime (default), numpy, torch.

Actors run onnxruntime: no torch import, fast at batch 1, and a real int8 path. A snapshot is
written as an ONNX graph by :func:`to_onnx` with actorq's layers (:mod:`actorq.quant.onnx`):
int8 layers with uint8 activations per row and exact int32 sums, int4 layers as
``MatMulNBits``; fp16 snapshots are a broadcast format, their weights rounded to half precision
and computed in fp32 (onnxruntime's CPU provider has no fast fp16 GEMM on x86). On AVX512-VNNI
a 3×2048 MLP runs several times faster in int8 than in fp32 at batch 1
(benchmarks/actor_throughput.py).

A policy that is not a plain MLP (the chip placement network,
:mod:`actorq.agents.ppo.chip_networks`) comes as a
:class:`~actorq.quant.model_snapshot.ModelSnapshot` of kind :data:`OBS_LOGITS`: an ONNX model
the learner exported (already int8 where it is int8), input ``obs``, output ``logits`` of a
categorical policy. :func:`decode_snapshot` reads either format, :func:`make_runtime` runs either
(:class:`ModelRuntime` for the ONNX one), :func:`snapshot_head` says how to read either's output.
"""

from __future__ import annotations

from typing import Protocol, overload

import numpy as np

from actorq.errors import SnapshotError
from actorq.quant.formats import OnnxLayer, layer_format
from actorq.quant.heads import Head, head
from actorq.quant.model_snapshot import FORMAT as MODEL_FORMAT
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.onnx import finish_model
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, read_metadata

RUNTIMES: tuple[str, ...] = ("ort", "numpy", "torch")


class PolicyRuntime(Protocol):
    """Maps a batch of observations (B, obs_dim) float32 to outputs (B, out_dim) float32."""

    version: int
    precision: str
    spec: PolicySpec

    def __call__(self, obs: np.ndarray) -> np.ndarray: ...


def to_onnx(snap: PolicySnapshot) -> bytes:
    """Serialize the snapshot as a standalone ONNX model (input ``obs``, output ``out``).

    int8 layers quantize their input activations per row and run an integer matmul (see
    :func:`~actorq.quant.onnx.int8_linear`); int4 layers run ``MatMulNBits`` (see
    :func:`~actorq.quant.onnx.int4_linear`); fp32 and fp16 layers run an fp32 MatMul.
    """
    from onnx import TensorProto, helper

    spec = snap.spec
    nodes, inits = [], []

    def init(name: str, arr: np.ndarray) -> str:
        arr = np.ascontiguousarray(arr)
        dt = helper.np_dtype_to_tensor_dtype(arr.dtype)
        inits.append(helper.make_tensor(name, dt, arr.shape, arr.tobytes(), raw=True))
        return name

    x = "obs"
    if spec.obs_norm:  # (obs - mean) / std, clipped: the learner's normalisation, in the graph
        mean, std = (
            init("obs_mean", snap.tensors["obs_mean"]),
            init("obs_std", snap.tensors["obs_std"]),
        )
        nodes.append(helper.make_node("Sub", [x, mean], ["obs_c"]))
        nodes.append(helper.make_node("Div", ["obs_c", std], ["obs_n"]))
        x = "obs_n"
        if spec.obs_clip > 0:
            lo = init("obs_lo", np.array(-spec.obs_clip, np.float32))
            hi = init("obs_hi", np.array(spec.obs_clip, np.float32))
            nodes.append(helper.make_node("Clip", [x, lo, hi], ["obs_nc"]))
            x = "obs_nc"
    last = spec.num_layers - 1
    for i in range(spec.num_layers):
        w, s, b = (snap.tensors.get(f"{k}{i}") for k in "wsb")
        assert w is not None and b is not None  # a validated snapshot has both
        y = "out" if (i == last and spec.output_activation == "none") else f"z{i}"
        fmt = layer_format(snap.precision, i, spec.num_layers)
        relu_input = i > 0 and spec.activation == "relu"
        nodes += fmt.onnx(OnnxLayer(x, y, i, w, s, b, init, relu_input, spec.dims[i]))
        act = spec.activation if i < last else spec.output_activation
        if act != "none":
            out = "out" if i == last else f"h{i}"
            nodes.append(helper.make_node({"relu": "Relu", "tanh": "Tanh"}[act], [y], [out]))
            y = out
        x = y
    model = finish_model(
        nodes,
        inits,
        "actorq_policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", spec.obs_dim])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", spec.out_dim])],
        f"actorq policy v{snap.version} {snap.precision}",
    )
    return bytes(model.SerializeToString())


class OrtRuntime:
    """onnxruntime CPU session; one intra-op thread by default (one actor per core)."""

    def __init__(self, snap: PolicySnapshot, threads: int = 1) -> None:
        import onnxruntime as ort

        self.version, self.precision, self.spec = snap.version, snap.precision, snap.spec
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        self._sess = ort.InferenceSession(to_onnx(snap), so, providers=["CPUExecutionProvider"])

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(obs, dtype=np.float32)
        out: np.ndarray = self._sess.run(None, {"obs": x})[0]
        return out


def _act(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "relu":
        return np.maximum(x, 0, out=x)
    if kind == "tanh":
        return np.tanh(x, out=x)
    return x


class NumpyRuntime:
    """Reference runtime: the snapshot's (dequantized) weights in fp32 numpy.

    For int8 and int4 this is weight-only quantization (activations stay fp32), so it differs
    from the onnxruntime paths by their activation rounding; useful as a dependency-free
    reference.
    """

    def __init__(self, snap: PolicySnapshot, threads: int = 1) -> None:
        self.version, self.precision, self.spec = snap.version, snap.precision, snap.spec
        self._layers = snap.dequantized()
        self._snap = snap

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.array(self._snap.normalize(obs), dtype=np.float32)
        last = len(self._layers) - 1
        for i, (w, b) in enumerate(self._layers):
            x = x @ w + b
            x = _act(x, self.spec.activation if i < last else self.spec.output_activation)
        return x


class TorchRuntime:
    """Fallback for models onnxruntime cannot run: eager torch, fp32 compute. ``threads``: the
    process's torch threads, set only in an actor's own process (``in_actor``): the learner's
    process builds one to evaluate, and must keep its own thread count."""

    def __init__(self, snap: PolicySnapshot, threads: int = 1, in_actor: bool = False) -> None:
        import torch

        self._torch = torch
        if in_actor:
            torch.set_num_threads(threads)
        self.version, self.precision, self.spec = snap.version, snap.precision, snap.spec
        # the layers as tensors, not nn.Linear: no initialisation draws from the process's
        # torch random stream (the learner's, when it evaluates)
        self._layers = [
            (torch.from_numpy(np.ascontiguousarray(w)), torch.from_numpy(np.asarray(b)))
            for w, b in snap.dequantized()
        ]
        self._snap = snap

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        torch = self._torch
        x = torch.from_numpy(np.ascontiguousarray(self._snap.normalize(obs), dtype=np.float32))
        last = len(self._layers) - 1
        with torch.inference_mode():
            for i, (w, b) in enumerate(self._layers):
                x = torch.addmm(b, x, w)
                act = self.spec.activation if i < last else self.spec.output_activation
                if act == "relu":
                    x = torch.relu(x)
                elif act == "tanh":
                    x = torch.tanh(x)
        result: np.ndarray = x.numpy()
        return result


#: :class:`ModelSnapshot` kind of a whole-model policy: input ``obs`` (``(batch, obs_dim)``
#: float32, or pixels ``(batch, C, H, W)`` uint8), output ``logits`` ``(batch, num_actions)``
#: float32 of a categorical policy (illegal actions may carry a very negative finite logit), or
#: with ``meta["head"] == "q"`` output ``q``, action values; ``meta`` holds ``obs_dim`` (the
#: observation's size) and ``num_actions``. What PPO's ``--network chip``
#: (:mod:`actorq.agents.ppo.chip`) and DQN and PPO on pixels (:mod:`actorq.agents.pixels`) publish.
OBS_LOGITS = "obs-logits"
OBS_LOGITS_INPUTS: tuple[str, ...] = ("obs",)
#: The heads an :data:`OBS_LOGITS` model may have (``meta["head"]``, default categorical), and
#: the name of the output each one reads.
MODEL_HEADS: dict[str, str] = {"categorical": "logits", "q": "q"}

#: Either snapshot format an actor of kind "vector" can run.
AnySnapshot = PolicySnapshot | ModelSnapshot


def decode_snapshot(data: bytes | bytearray | memoryview) -> AnySnapshot:
    """A snapshot of either format, validated (checksum, finite weights, and for a
    :class:`ModelSnapshot` its kind, :data:`OBS_LOGITS`, its input and its sizes); raises
    :class:`SnapshotError` (or ``ValueError`` for an impossible MLP spec) on any defect."""
    data = bytes(data)
    try:
        read_metadata(data, MODEL_FORMAT)  # the header only: which format this is
    except SnapshotError:  # not a model snapshot: the MLP format (which reports its own errors)
        return PolicySnapshot.from_bytes(data)
    snap = ModelSnapshot.from_bytes(data, OBS_LOGITS_INPUTS)
    if snap.kind != OBS_LOGITS:
        raise SnapshotError(f"model snapshot of kind {snap.kind!r}; actors run {OBS_LOGITS!r}")
    for key in ("obs_dim", "num_actions"):
        v = snap.meta.get(key)
        if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
            raise SnapshotError(f"{OBS_LOGITS} snapshot: meta[{key!r}] = {v!r}, not a size")
    if snap.meta.get("head", "categorical") not in MODEL_HEADS:
        raise SnapshotError(f"{OBS_LOGITS} snapshot: unknown head {snap.meta.get('head')!r}")
    return snap


def decode_any(data: bytes | bytearray | memoryview) -> AnySnapshot:
    """A snapshot of either format and any model kind (GO's too), validated as its format's
    reader does; :class:`SnapshotError` on any defect. For what a run wrote, not for actors."""
    data = bytes(data)
    try:
        read_metadata(data, MODEL_FORMAT)
    except SnapshotError:
        return PolicySnapshot.from_bytes(data)
    return ModelSnapshot.from_bytes(data)


#: a model snapshot's meta that records how it was calibrated, not what it computes with
CALIBRATION_META = frozenset({"calibration_states", "rounding"})


def same_layout(a: AnySnapshot, b: AnySnapshot) -> bool:
    """Whether two snapshots are one policy's at one precision (its layers, their shapes and
    dtypes), whatever their weights, scales or calibration."""
    if type(a) is not type(b) or a.precision != b.precision:
        return False
    if isinstance(a, PolicySnapshot) and isinstance(b, PolicySnapshot):
        shapes = {k: (v.shape, v.dtype) for k, v in a.tensors.items()}
        return (a.spec, a.granularity, shapes) == (
            b.spec,
            b.granularity,
            {k: (v.shape, v.dtype) for k, v in b.tensors.items()},
        )
    assert isinstance(a, ModelSnapshot) and isinstance(b, ModelSnapshot)
    meta_a = {k: v for k, v in a.meta.items() if k not in CALIBRATION_META}
    meta_b = {k: v for k, v in b.meta.items() if k not in CALIBRATION_META}
    return (a.kind, len(a.model), meta_a) == (b.kind, len(b.model), meta_b)


def snapshot_head(snap: AnySnapshot) -> Head:
    """How the policy's output is read: the MLP spec's head, or categorical for an
    :data:`OBS_LOGITS` model (its output is logits by definition)."""
    if isinstance(snap, PolicySnapshot):
        return snap.spec.policy_head
    if snap.kind != OBS_LOGITS:
        raise ValueError(f"a {snap.kind!r} model snapshot has no head an actor can sample")
    return head(str(snap.meta.get("head", "categorical")))


class ModelRuntime:
    """onnxruntime CPU session over an :data:`OBS_LOGITS` :class:`ModelSnapshot`: ``obs (B,
    ...) -> logits (B, num_actions)`` (or ``q``, by the head). Observations are cast to the
    model's input type (float32, or uint8 pixels as they are). One intra-op thread by default
    (one actor per core), as :class:`OrtRuntime`. A model onnxruntime cannot load, or without
    its head's output, is a :class:`SnapshotError` (an actor refuses it and keeps its last good
    one)."""

    def __init__(self, snap: ModelSnapshot, threads: int = 1) -> None:
        import onnxruntime as ort

        if snap.kind != OBS_LOGITS:
            raise SnapshotError(f"model snapshot of kind {snap.kind!r}; expected {OBS_LOGITS!r}")
        self.version, self.precision, self.kind = snap.version, snap.precision, snap.kind
        self.head = snapshot_head(snap)
        self._out = MODEL_HEADS[self.head.name]
        self.obs_dim = int(snap.meta["obs_dim"])
        self.num_actions = int(snap.meta["num_actions"])
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        try:
            self._sess = ort.InferenceSession(snap.model, so, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime's own error types (InvalidGraph, Fail, ...)
            raise SnapshotError(f"{OBS_LOGITS} snapshot: onnxruntime cannot load it: {e}") from None
        if self._out not in {o.name for o in self._sess.get_outputs()}:
            raise SnapshotError(f"{OBS_LOGITS} snapshot: the model has no output {self._out!r}")
        obs = next((i for i in self._sess.get_inputs() if i.name == "obs"), None)
        if obs is None:
            raise SnapshotError(f"{OBS_LOGITS} snapshot: the model has no input 'obs'")
        self._dtype = np.uint8 if obs.type == "tensor(uint8)" else np.float32
        dims = list(obs.shape)[1:]  # after the batch
        #: one observation's shape, as the model's input declares it (``(obs_dim,)`` where a
        #: dimension is symbolic)
        self.obs_shape: tuple[int, ...] = (
            tuple(dims) if all(isinstance(d, int) and d > 0 for d in dims) else (self.obs_dim,)
        )
        self.obs_dtype = np.dtype(self._dtype)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(obs, dtype=self._dtype)
        out: np.ndarray = self._sess.run([self._out], {"obs": x})[0]
        return out


@overload
def make_runtime(
    snap: PolicySnapshot, kind: str = "ort", threads: int = 1, in_actor: bool = False
) -> PolicyRuntime: ...


@overload
def make_runtime(
    snap: ModelSnapshot, kind: str = "ort", threads: int = 1, in_actor: bool = False
) -> ModelRuntime: ...


def make_runtime(
    snap: PolicySnapshot | ModelSnapshot,
    kind: str = "ort",
    threads: int = 1,
    in_actor: bool = False,
) -> PolicyRuntime | ModelRuntime:
    """The runtime for a snapshot: ``kind`` picks it for an MLP :class:`PolicySnapshot`; a
    :class:`ModelSnapshot` is an ONNX model and runs in onnxruntime only. ``in_actor``: built in
    an actor's own process, whose torch threads it may set (:class:`TorchRuntime`)."""
    if isinstance(snap, ModelSnapshot):
        if kind != "ort":
            raise ValueError(f"a model snapshot runs in onnxruntime (runtime 'ort'), not {kind!r}")
        return ModelRuntime(snap, threads)
    if kind == "ort":
        return OrtRuntime(snap, threads)
    if kind == "numpy":
        return NumpyRuntime(snap, threads)
    if kind == "torch":
        return TorchRuntime(snap, threads, in_actor)
    raise ValueError(f"unknown runtime {kind!r}; expected one of {RUNTIMES}")
