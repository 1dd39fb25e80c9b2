"""ModelSnapshot: an ONNX policy, versioned and checksummed; corrupt or non-finite ones refused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from actorq.errors import SnapshotError
from actorq.quant.model_snapshot import ModelSnapshot


def _model(w: np.ndarray) -> bytes:
    x = helper.make_tensor_value_info("obs", TensorProto.FLOAT, [None, w.shape[0]])
    y = helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, w.shape[1]])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "w"], ["out"])],
        "g",
        [x],
        [y],
        [numpy_helper.from_array(w.astype(np.float32), "w")],
    )
    return bytes(helper.make_model(graph).SerializeToString())


GOOD = ModelSnapshot(3, "int8", "test", _model(np.ones((4, 2))), {"a": 1})


def test_roundtrip() -> None:
    back = ModelSnapshot.from_bytes(GOOD.to_bytes(), inputs=("obs",))
    assert back == GOOD
    onnx.checker.check_model(onnx.load_model_from_string(back.model))


def test_missing_input_nonfinite_weight_and_bad_precision_are_refused() -> None:
    with pytest.raises(SnapshotError, match="lack"):
        ModelSnapshot.from_bytes(GOOD.to_bytes(), inputs=("obs", "edges"))
    w = np.ones((4, 2))
    w[1, 1] = np.nan
    with pytest.raises(SnapshotError, match="NaN"):
        ModelSnapshot.from_bytes(ModelSnapshot(1, "fp32", "t", _model(w)).to_bytes())
    with pytest.raises(SnapshotError, match="precision"):
        ModelSnapshot.from_bytes(ModelSnapshot(1, "int3", "t", GOOD.model).to_bytes())
    with pytest.raises(SnapshotError, match="not an ONNX model"):
        ModelSnapshot.from_bytes(ModelSnapshot(1, "fp32", "t", b"\xff" * 64).to_bytes())


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_corruption_is_refused_or_harmless(data: st.DataObject) -> None:
    """A flipped byte anywhere, or a truncation: a SnapshotError or (never) a different model."""
    blob = bytearray(GOOD.to_bytes())
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] ^= data.draw(st.integers(1, 255))
    else:
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    try:
        back = ModelSnapshot.from_bytes(bytes(blob))
    except SnapshotError:
        return
    assert back == GOOD  # e.g. a flip in JSON whitespace of the safetensors header
