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
