"""The ONNX builder (actorq.quant.onnx_builder): its dense layers are the formats' layers."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from actorq.quant.onnx_builder import OnnxBuilder
from actorq.quant.runtimes import to_onnx
from actorq.quant.snapshot import PolicySpec, make_snapshot
from tests.quant.test_snapshot import layers


def _run(model: bytes, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {sess.get_inputs()[0].name: x})[0])


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_dense_layers_compute_what_a_snapshot_at_that_precision_computes(precision: str) -> None:
    """An MLP written on the builder (hidden layers quantized, the first and last fp32, as a
    snapshot keeps them) gives a snapshot's outputs bit for bit: one writer per format."""
    spec = PolicySpec(6, (32, 48), 3)
    ls = layers(spec, seed=4)
    x = np.random.default_rng(0).standard_normal((16, 6)).astype(np.float32)
    b = OnnxBuilder(precision)
    h = b.op("Relu", b.dense("obs", *ls[0], quantize=False))
    h = b.op("Relu", b.dense(h, *ls[1], quantize=True, nonnegative=True))
    b.dense(h, *ls[2], quantize=False, out="out")
    f32 = TensorProto.FLOAT
    model = b.model(
        "mlp",
        [helper.make_tensor_value_info("obs", f32, ["batch", 6])],
        [helper.make_tensor_value_info("out", f32, ["batch", 3])],
        "",
    )
    built = _run(model.SerializeToString(), x)
    snapshot = _run(to_onnx(make_snapshot(ls, spec, precision, 0)), x)
    np.testing.assert_array_equal(built, snapshot)


def test_widening_one_channel_for_its_bias_keeps_the_others_rounding() -> None:
    """A bias too large for int32 at its channel's scale widens that channel's scale; the whole
    layer used to be rounded again to nearest, silently dropping GPTQ's rounding."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 8)).astype(np.float32)  # (out, in)
    flat = w.T
    s = (np.abs(flat).max(axis=0) / 63).astype(np.float32)
    q = np.clip(np.rint(flat / s), -63, 63).astype(np.int8)
    q[0, :3] += np.where(q[0, :3] < 63, 1, -1).astype(np.int8)  # "GPTQ": not nearest
    bias = np.zeros(4, np.float32)
    bias[3] = 1e6  # at x_scale 1e-6 it does not fit int32 at channel 3's scale
    q2, s2, _ = OnnxBuilder("fp32")._static_weights(w, bias, 1e-6, (q, s))
    assert s2[3] > s[3] and np.array_equal(s2[:3], s[:3])
    assert np.array_equal(q2.T[:, :3], q[:, :3])  # channels 0-2 as given
