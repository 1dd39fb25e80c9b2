"""ModelSnapshot: a versioned, checksummed ONNX model, for policies that are not plain MLPs.

:class:`~actorq.quant.snapshot.PolicySnapshot` carries an MLP's layers and lets each runtime build
its own graph. A graph policy (GO's, :mod:`actorq.agents.go.networks`) or a convolutional one has an
architecture of its own, so the learner exports the whole network — already quantized where it
is int8 — as an ONNX model, and the snapshot carries that model. Same container and guarantees
as a PolicySnapshot: a safetensors blob whose one tensor is the model's bytes (uint8), with the
version, precision, kind and a JSON ``meta`` (what the actor needs besides the model, e.g. the
policy's sizes) plus a checksum of all of it in the header. Decoding parses JSON and protobuf;
nothing is unpickled or executed (an ONNX model is a dataflow graph of standard operators). An
actor refuses a snapshot whose checksum fails, whose model does not parse, whose inputs are not
the ones its kind expects, or any of whose floating-point weights is NaN or infinite, and keeps
its last good one.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import safetensors.numpy

from actorq.errors import SnapshotError, first_line
from actorq.inputs import load_json
from actorq.quant.formats import FORMATS
from actorq.quant.snapshot import _checksum, read_metadata

FORMAT = "actorq.model-snapshot/1"
#: Largest model accepted (a corrupt length must not make an actor allocate without bound).
MAX_MODEL_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class ModelSnapshot:
    """An ONNX policy at one precision. ``kind`` names the family of models (e.g. ``"go"``),
    which fixes the model's input names; ``meta`` is JSON-able plain data."""

    version: int
    precision: str
    kind: str
    model: bytes
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def header(self) -> dict[str, str]:
        return {
            "format": FORMAT,
            "version": str(self.version),
            "precision": self.precision,
            "kind": self.kind,
            "meta": json.dumps(self.meta, sort_keys=True),
        }

    def _tensors(self) -> dict[str, np.ndarray]:
        return {"model": np.frombuffer(self.model, dtype=np.uint8)}

    def to_bytes(self) -> bytes:
        tensors = self._tensors()
        meta = {**self.header(), "checksum": _checksum(self.header(), tensors)}
        return bytes(safetensors.numpy.save(tensors, metadata=meta))

    @classmethod
    def from_bytes(
        cls, data: bytes | bytearray | memoryview, inputs: tuple[str, ...] | None = None
    ) -> ModelSnapshot:
        """Decode and validate (``inputs``: the input names the model must have, in any
        order); raises :class:`SnapshotError` on any defect."""
        data = bytes(data)
        meta = read_metadata(data, FORMAT)
        try:
            tensors = safetensors.numpy.load(data)
        except Exception as e:  # safetensors raises its own error types
            raise SnapshotError(f"corrupt model snapshot: {e}") from None
        header = {k: v for k, v in meta.items() if k != "checksum"}
        if set(tensors) != {"model"} or _checksum(header, tensors) != meta.get("checksum"):
            raise SnapshotError("model snapshot checksum mismatch (corrupt or torn copy)")
        model = tensors["model"]
        if model.dtype != np.uint8 or model.ndim != 1 or model.size > MAX_MODEL_BYTES:
            raise SnapshotError("model snapshot: the model must be a uint8 byte vector")
        try:
            extra = load_json(meta["meta"], "model snapshot metadata", SnapshotError)
            snap = cls(
                version=int(meta["version"]),
                precision=str(meta["precision"]),
                kind=str(meta["kind"]),
                model=model.tobytes(),
                meta=extra if isinstance(extra, dict) else {},
            )
        # TypeError: meta not a JSON string; OverflowError: an integer past float's range
        except (KeyError, ValueError, TypeError, OverflowError) as e:
            raise SnapshotError(f"model snapshot metadata invalid: {first_line(e)}") from None
        snap.validate(inputs)
        return snap

    def validate(self, inputs: tuple[str, ...] | None = None) -> None:
        """The model parses, has ``inputs`` (if given), and every float weight is finite."""
        import onnx
        from onnx import numpy_helper

        if self.precision not in FORMATS:
            raise SnapshotError(f"unknown precision {self.precision!r}")
        try:
            proto = onnx.load_model_from_string(self.model)
        except Exception as e:  # protobuf's DecodeError and friends
            raise SnapshotError(f"model snapshot: not an ONNX model ({type(e).__name__})") from None
        if inputs is not None:
            have = {i.name for i in proto.graph.input}
            if not set(inputs) <= have:
                raise SnapshotError(
                    f"model snapshot ({self.kind}): inputs {sorted(have)} lack "
                    f"{sorted(set(inputs) - have)}"
                )
        nodes = [n for f in proto.functions for n in f.node]  # model-local functions' bodies
        for where, init in [*_carried_tensors(proto.graph), *_node_tensors(nodes)]:
            if init.data_location == onnx.TensorProto.EXTERNAL:  # a file read on the actor's host
                raise SnapshotError(f"model snapshot: {where} is outside the model")
            if init.data_type not in _read_types():  # bfloat16, float8: not a numpy float
                kind = onnx.TensorProto.DataType.Name(init.data_type)
                raise SnapshotError(f"model snapshot: {where} is {kind}, which actorq never writes")
            try:
                arr = numpy_helper.to_array(init)
            except Exception:
                raise SnapshotError(f"model snapshot: {where} unreadable") from None
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise SnapshotError(f"model snapshot: {where} has NaN or Inf")


@functools.cache
def _read_types() -> frozenset[int]:
    """The tensor types a snapshot may carry: numpy's (the exporters' float32, float16,
    integers). Asked at the first check, as onnx itself is imported."""
    from onnx import TensorProto as T

    return frozenset(
        {T.FLOAT, T.FLOAT16, T.DOUBLE, T.INT8, T.UINT8, T.INT16, T.UINT16, T.INT32, T.UINT32,
         T.INT64, T.UINT64, T.BOOL, T.STRING, T.UNDEFINED}
    )  # fmt: skip


def _carried_tensors(graph: Any) -> Iterator[tuple[str, Any]]:
    """Every tensor an ONNX graph carries, with where it is: its initializers and its nodes'
    (:func:`_node_tensors`). actorq's exporters write initializers only; a forged model may
    hide a NaN anywhere (protobuf caps the nesting at 100 levels)."""
    for t in graph.initializer:
        yield f"weight {t.name!r}", t
    for s in graph.sparse_initializer:
        yield f"weight {s.values.name!r}", s.values
    yield from _node_tensors(graph.node)


def _node_tensors(nodes: Any) -> Iterator[tuple[str, Any]]:
    """The tensors ``nodes`` carry: tensor attributes (a ``Constant``'s value), float ones (an
    op's ``alpha``, a ``Constant``'s ``value_floats``) as tensors, and their subgraphs' (an
    ``If``'s or a ``Loop``'s bodies), recursively."""
    from onnx import AttributeProto, numpy_helper

    for node in nodes:
        where = f"{node.op_type} node {node.name or next(iter(node.output), '')!r}"
        for a in node.attribute:
            inner = [a.t] if a.HasField("t") else []
            inner += [*a.tensors, *(s.values for s in a.sparse_tensors)]
            inner += [a.sparse_tensor.values] if a.HasField("sparse_tensor") else []
            if a.type in (AttributeProto.FLOAT, AttributeProto.FLOATS):
                values = [a.f] if a.type == AttributeProto.FLOAT else list(a.floats)
                inner.append(numpy_helper.from_array(np.asarray(values, np.float32)))
            yield from ((f"{where} ({a.name})", t) for t in inner)
            for g in [a.g] if a.HasField("g") else list(a.graphs):
                yield from _carried_tensors(g)
