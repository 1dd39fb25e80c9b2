"""obs-logits ModelSnapshots in the actors' runtime path: decode either snapshot format, run an
ONNX obs -> logits model, refuse kinds, sizes and models an actor cannot run."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from actorq.core.exploration import PolicySampler
from actorq.errors import SnapshotError
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.runtimes import (
    OBS_LOGITS,
    ModelRuntime,
    decode_snapshot,
    make_runtime,
    snapshot_head,
)
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot


def _linear(w: np.ndarray, out: str = "logits") -> bytes:
    """``out = obs @ w``: the smallest obs -> logits policy."""
    x = helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", w.shape[0]])
    y = helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", w.shape[1]])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "w"], [out])],
        "g",
        [x],
        [y],
        [numpy_helper.from_array(w.astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return bytes(model.SerializeToString())


W = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
META = {"obs_dim": 3, "num_actions": 5}


def test_decode_runs_an_obs_logits_model_and_still_reads_mlp_snapshots() -> None:
    data = ModelSnapshot(4, "fp32", OBS_LOGITS, _linear(W), META).to_bytes()
    snap = decode_snapshot(data)
    assert isinstance(snap, ModelSnapshot) and snap.version == 4
    rt = make_runtime(snap)
    assert isinstance(rt, ModelRuntime) and rt.head.name == "categorical"
    obs = np.random.default_rng(1).standard_normal((7, 3)).astype(np.float32)
    np.testing.assert_allclose(rt(obs), obs @ W, rtol=1e-5, atol=1e-5)
    assert snapshot_head(snap).name == "categorical"
    sampler = PolicySampler(0)
    sampler.set_snapshot(snap)
    action, extras = sampler.act(rt(obs))
    assert action.shape == (7,) and extras["log_prob"].shape == (7,)

    spec = PolicySpec(3, (8,), 5, head="categorical")
    layers = [(np.ones((3, 8), np.float32), np.zeros(8, np.float32))]
    layers.append((np.ones((8, 5), np.float32), np.zeros(5, np.float32)))
    mlp = decode_snapshot(make_snapshot(layers, spec, "int8", 2).to_bytes())
    assert isinstance(mlp, PolicySnapshot) and snapshot_head(mlp).name == "categorical"


def test_sampler_never_draws_a_masked_action() -> None:
    # logits of -1e9 (the chip policy's illegal cells) have probability exactly 0
    logits = np.full((4096, 6), -1e9, np.float32)
    logits[:, [1, 4]] = [0.3, -0.2]
    sampler = PolicySampler(0)
    sampler.set_snapshot(ModelSnapshot(0, "fp32", OBS_LOGITS, _linear(W), META))
    action, extras = sampler.act(logits)
    assert set(np.unique(action)) == {1, 4}
    assert np.isfinite(extras["log_prob"]).all() and (extras["log_prob"] < 0).all()


@pytest.mark.parametrize(
    ("snap", "match"),
    [
        (ModelSnapshot(1, "fp32", "go", _linear(W), META), "kind"),
        (ModelSnapshot(1, "fp32", OBS_LOGITS, _linear(W), {"obs_dim": 3}), "num_actions"),
        (ModelSnapshot(1, "fp32", OBS_LOGITS, _linear(W), {**META, "obs_dim": True}), "obs_dim"),
        (ModelSnapshot(1, "fp32", OBS_LOGITS, _linear(W * np.nan), META), "NaN"),
    ],
)
def test_snapshots_an_actor_cannot_run_are_refused(snap: ModelSnapshot, match: str) -> None:
    with pytest.raises(SnapshotError, match=match):
        decode_snapshot(snap.to_bytes())


def _plus_c(
    c_nodes: list[Any], extra: list[Any] | None = None, functions: list[Any] | None = None
) -> bytes:
    """``logits = obs @ W + C``, ``C`` (5 floats) made by ``c_nodes`` (and model-local
    ``functions``, domain "local")."""
    x = helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 5])
    nodes = [*c_nodes, helper.make_node("MatMul", ["obs", "w"], ["m"])]
    nodes.append(helper.make_node("Add", ["m", "C"], ["logits"]))
    inits = [numpy_helper.from_array(W, "w"), *(extra or [])]
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits),
        opset_imports=opsets,
        functions=functions or [],
    )
    model.ir_version = 9
    return bytes(model.SerializeToString())


def _branch(name: str, value: np.ndarray) -> Any:
    out = helper.make_tensor_value_info(f"{name}_o", TensorProto.FLOAT, [5])
    node = helper.make_node("Identity", [f"{name}_k"], [f"{name}_o"])
    return helper.make_graph([node], name, [], [out], [numpy_helper.from_array(value, f"{name}_k")])


def _external() -> Any:
    t = numpy_helper.from_array(np.zeros(5, np.float32), "C")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="/etc/hostname")
    return t


_BAD = np.array([np.nan, 0, 0, 0, np.inf], np.float32)
_GOOD = np.zeros(5, np.float32)


def _make_c() -> Any:
    """A model-local function whose body's Constant holds NaN and Inf."""
    body = [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(_BAD)),
            helper.make_node("Identity", ["k"], ["out"])]  # fmt: skip
    return helper.make_function("local", "MakeC", [], ["out"], body, [helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (_plus_c([helper.make_node("Constant", [], ["C"], value=numpy_helper.from_array(_BAD))]),
         r"Constant node 'C' \(value\) has NaN"),
        (_plus_c([helper.make_node("Constant", [], ["C"], value_floats=[*_BAD.tolist()])]),
         r"\(value_floats\) has NaN"),
        (_plus_c([helper.make_node("If", ["cond"], ["C"], then_branch=_branch("then", _BAD),
                                   else_branch=_branch("else", _GOOD))],
                 [numpy_helper.from_array(np.array(True), "cond")]), "weight 'then_k' has NaN"),
        (_plus_c([], [_external()]), "weight 'C' is outside the model"),
        (_plus_c([helper.make_node("MakeC", [], ["C"], domain="local")], functions=[_make_c()]),
         r"'k' \(value\) has NaN"),
        (_plus_c([helper.make_node("Cast", ["B"], ["C"], to=TensorProto.FLOAT)],
                 [helper.make_tensor("B", TensorProto.BFLOAT16, [5], _BAD.tolist())]),
         "weight 'B' is BFLOAT16"),
        (_plus_c([helper.make_node("Constant", [], ["K"], value=numpy_helper.from_array(_GOOD)),
                  helper.make_node("HardSigmoid", ["K"], ["C"], alpha=float("nan"))]),
         r"HardSigmoid node 'C' \(alpha\) has NaN"),
    ],
    ids=["constant-tensor", "constant-floats", "if-branch", "external-data", "local-function",
         "bfloat16", "float-attribute"],
)  # fmt: skip
def test_non_finite_weights_anywhere_in_the_model_are_refused(model: bytes, match: str) -> None:
    """A forged model hides a NaN outside the initializers actorq's exporters write (a
    Constant node, a branch of an If) or points a weight at a file on the actor's host."""
    with pytest.raises(SnapshotError, match=match):
        decode_snapshot(ModelSnapshot(1, "fp32", OBS_LOGITS, model, META).to_bytes())
    fine = _plus_c([helper.make_node("Constant", [], ["C"], value=numpy_helper.from_array(_GOOD))])
    rt = make_runtime(decode_snapshot(ModelSnapshot(1, "fp32", OBS_LOGITS, fine, META).to_bytes()))
    obs = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(rt(obs), obs @ W, rtol=1e-5, atol=1e-5)


def test_a_model_without_logits_or_outside_onnxruntime_is_refused() -> None:
    snap = ModelSnapshot(1, "fp32", OBS_LOGITS, _linear(W, out="out"), META)
    with pytest.raises(SnapshotError, match="logits"):
        make_runtime(decode_snapshot(snap.to_bytes()))
    with pytest.raises(ValueError, match="onnxruntime"):
        make_runtime(ModelSnapshot(1, "fp32", OBS_LOGITS, _linear(W), META), "numpy")
    data = bytearray(ModelSnapshot(1, "fp32", OBS_LOGITS, _linear(W), META).to_bytes())
    data[-3] ^= 0xFF  # a torn copy
    with pytest.raises(SnapshotError):
        decode_snapshot(bytes(data))


def test_model_snapshot_actor_path_does_not_import_torch() -> None:
    # what an actor of a --network chip run does: decode, run, sample, step a chip env
    data = ModelSnapshot(1, "int8", OBS_LOGITS, _linear(W), META).to_bytes()
    code = (
        "import sys, numpy as np\n"
        "from actorq.quant.runtimes import decode_snapshot, make_runtime\n"
        "from actorq.core.exploration import PolicySampler\n"
        "from actorq.envs import make_vector_env\n"
        "snap = decode_snapshot(sys.stdin.buffer.read())\n"
        "s = PolicySampler(0)\n"
        "s.set_snapshot(snap)\n"
        "s.act(make_runtime(snap)(np.ones((2, 3), np.float32)))\n"
        "make_vector_env('chip:sample_clustered', 2).reset(seed=0)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], input=data, check=True)
