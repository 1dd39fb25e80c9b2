"""Precision formats: each one stores, checks, decodes and runs (ONNX) a layer consistently; a new
format is one class and one registry line; snapshots refuse layers, tensors and headers that no
format writes."""

from __future__ import annotations

import json
import typing
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import safetensors.numpy
from onnx import TensorProto, helper

from actorq.errors import SnapshotError
from actorq.quant import formats
from actorq.quant.formats import (
    FORMATS,
    INT8,
    OnnxLayer,
    Precision,
    layer_format,
    weight_format,
)
from actorq.quant.onnx import finish_model
from actorq.quant.quantizer import Granularity, quantize_uniform
from actorq.quant.runtimes import make_runtime
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, _checksum, make_snapshot

from .test_snapshot import layers

SPEC = PolicySpec(6, (64, 48), 3)


def test_the_cli_choices_are_the_registry() -> None:
    assert set(typing.get_args(Precision)) == set(FORMATS) == set(formats.PRECISIONS)


def test_an_unknown_precision_is_one_line() -> None:
    with pytest.raises(ValueError, match="unknown precision 'int3'; expected one of fp32"):
        weight_format("int3")


def test_io_layers_stay_fp32_for_integer_formats() -> None:
    assert [layer_format("int8", i, 4).name for i in range(4)] == ["fp32", "int8", "int8", "fp32"]
    assert [layer_format("fp16", i, 3).name for i in range(3)] == ["fp16"] * 3
    assert layer_format("int4", 0, 1).name == "fp32"  # one layer: both input and output


def _onnx_layer(fmt: Any, stored: dict[str, np.ndarray], b: np.ndarray, x: np.ndarray) -> Any:
    """Run one layer as its format writes it in ONNX."""
    nodes: list[Any] = []
    inits: list[Any] = []

    def init(name: str, arr: np.ndarray) -> str:
        arr = np.ascontiguousarray(arr)
        dt = helper.np_dtype_to_tensor_dtype(arr.dtype)
        inits.append(helper.make_tensor(name, dt, arr.shape, arr.tobytes(), raw=True))
        return name

    nodes += fmt.onnx(
        OnnxLayer("x", "y", 0, stored["w"], stored.get("s"), b, init, False, x.shape[1])
    )
    n_out = b.shape[0]
    model = finish_model(
        nodes,
        inits,
        "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", x.shape[1]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", n_out])],
        "test",
    )
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("name", list(FORMATS))
def test_each_format_stores_checks_decodes_and_runs_a_layer(name: str) -> None:
    fmt = FORMATS[name]
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((70, 40)) / np.sqrt(70)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    stored = fmt.encode(w, "per_channel", None)
    assert fmt.check(stored["w"], stored.get("s"), 70, 40)
    assert not fmt.check(stored["w"], stored.get("s"), 70, 41)  # another layer's shape
    decoded = fmt.decode(stored["w"], stored.get("s"), 70)
    assert decoded.dtype == np.float32 and decoded.shape == (70, 40)
    # rounding error within half a quantization step (a relative bound per format)
    tol = {32: 0.0, 16: 1e-3, 8: 1 / 127, 4: 1 / 7}[fmt.bits]
    assert np.abs(decoded - w).max() <= tol * np.abs(w).max() + 1e-7
    x = rng.standard_normal((5, 70)).astype(np.float32)
    ref = x @ decoded + b
    got = _onnx_layer(fmt, stored, b, x)
    # int8/int4 also round the activations per row: compare at their resolution
    atol = {32: 1e-4, 16: 1e-4, 8: 0.05, 4: 0.1}[fmt.bits] * np.abs(ref).max()
    np.testing.assert_allclose(got, ref, atol=atol)


class INT6(INT8):
    """A toy format: 6-bit weights stored in int8 (levels -31..31), run by the int8 kernel."""

    name, bits = "int6", 6

    def encode(
        self, w: np.ndarray, granularity: Granularity, calib_x: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        q, s = quantize_uniform(w, 6, granularity)
        return {"w": np.ascontiguousarray(q), "s": s}

    def check(self, w: np.ndarray, s: np.ndarray | None, in_dim: int, out_dim: int) -> bool:
        return super().check(w, s, in_dim, out_dim) and int(np.abs(w).max(initial=0)) <= 31


def test_a_new_format_is_one_class_and_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FORMATS, "int6", INT6())
    ls = layers(SPEC)
    snap = make_snapshot(ls, SPEC, "int6", 3)
    back = PolicySnapshot.from_bytes(snap.to_bytes())
    assert back.precision == "int6" and back.tensors["w1"].dtype == np.int8
    assert np.abs(back.tensors["w1"]).max() <= 31
    obs = np.random.default_rng(1).standard_normal((16, SPEC.obs_dim)).astype(np.float32)
    ref = make_runtime(make_snapshot(ls, SPEC, "fp32", 0), "numpy")(obs)
    for kind in ("ort", "numpy", "torch"):
        out = make_runtime(back, kind)(obs)
        assert np.abs(out - ref).max() <= 0.1 * np.abs(ref).max(), kind
    # its check is the format's own: int8 levels beyond 6 bits are refused
    t = dict(back.tensors)
    t["w1"] = np.full_like(t["w1"], 100)
    with pytest.raises(SnapshotError, match="not a well-formed int6"):
        PolicySnapshot.from_bytes(PolicySnapshot(3, "int6", SPEC, t).to_bytes())


def _resealed(header: dict[str, str] | None, **tensors: np.ndarray) -> bytes:
    """An int8 snapshot with ``header`` fields and ``tensors`` changed and a self-consistent
    checksum: what a buggy learner, not a torn copy, could write."""
    base = make_snapshot(layers(SPEC), SPEC, "int8", 2)
    snap = PolicySnapshot(base.version, base.precision, base.spec, {**base.tensors, **tensors})
    meta = {**snap.header(), **(header or {})}
    meta["checksum"] = _checksum(meta, snap.tensors)
    return bytes(safetensors.numpy.save(snap.tensors, metadata=meta))


@pytest.mark.parametrize(
    ("header", "tensors", "message"),
    [
        ({"version": "-3"}, {}, "version must be >= 0"),
        ({"granularity": "per_row"}, {}, "unknown granularity 'per_row'"),
        ({"spec": json.dumps({**SPEC.to_json(), "hidden": [64.5, 48]})}, {}, "integers"),
        ({"spec": json.dumps({**SPEC.to_json(), "hidden": "64"})}, {}, "list of sizes"),
        ({"spec": "[1, 2]"}, {}, "not a JSON object"),
        ({"spec": json.dumps({**SPEC.to_json(), "obs_dim": None})}, {}, "integers"),
        (None, {"extra": np.zeros(3, np.float32)}, "does not use: \\['extra'\\]"),
        (None, {"s0": np.ones(64, np.float32)}, "not a well-formed fp32"),  # fp32 layer w/ scales
        (None, {"w0": np.zeros((6, 64), np.int8)}, "not a well-formed fp32"),  # int8 input layer
        (None, {"b1": np.zeros(48, np.float16)}, "wrong shape"),
    ],
)
def test_resealed_defective_snapshots_are_refused_in_one_line(
    header: dict[str, str] | None, tensors: dict[str, np.ndarray], message: str
) -> None:
    data = _resealed(header, **tensors)
    with pytest.raises(SnapshotError, match=message) as e:
        PolicySnapshot.from_bytes(data)
    assert "\n" not in str(e.value)
