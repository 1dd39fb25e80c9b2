import subprocess
import sys

import numpy as np
import pytest

from actorq.quant.runtimes import RUNTIMES, make_runtime
from actorq.quant.snapshot import PolicySpec, make_snapshot
from tests.quant.test_snapshot import layers


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8", "int4"])
def test_runtimes_agree_with_numpy_reference(precision: str) -> None:
    spec = PolicySpec(6, (64, 64), 3)
    snap = make_snapshot(layers(spec), spec, precision, 1)
    x = np.random.default_rng(1).standard_normal((32, 6)).astype(np.float32)
    ref = make_runtime(snap, "numpy")(x)
    tol = 0.05 if precision in ("int8", "int4") else 1e-4  # ORT also quantizes activations
    for kind in RUNTIMES:
        out = make_runtime(snap, kind)(x)
        assert out.shape == (32, 3)
        np.testing.assert_allclose(out, ref, atol=tol * np.abs(ref).max())


def test_int8_and_fp32_pick_the_same_actions_on_most_states() -> None:
    spec = PolicySpec(8, (256, 256), 4)
    ls = layers(spec, seed=3)
    x = np.random.default_rng(2).standard_normal((4000, 8)).astype(np.float32)
    a32 = make_runtime(make_snapshot(ls, spec, "fp32", 1))(x).argmax(1)
    a8 = make_runtime(make_snapshot(ls, spec, "int8", 1))(x).argmax(1)
    assert (a32 == a8).mean() >= 0.97  # random weights: many near-ties; trained nets do better


@pytest.mark.parametrize("granularity", ["per_channel", "per_tensor"])
def test_int8_action_of_a_state_does_not_depend_on_the_rest_of_the_batch(
    granularity: str,
) -> None:
    """Activations are quantized per row: a batch of K gives what K single calls give, even
    when one state's activations are 100× larger than the others'."""
    spec = PolicySpec(8, (128, 128, 128), 4)
    snap = make_snapshot(layers(spec, seed=5), spec, "int8", 1, granularity)  # type: ignore[arg-type]
    rt = make_runtime(snap)
    x = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
    x[0] *= 100.0
    batched = rt(x)
    single = np.concatenate([rt(x[i : i + 1]) for i in range(16)])
    np.testing.assert_allclose(batched, single, rtol=1e-5, atol=1e-5 * np.abs(single).max())


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_int8_graph_computes_exactly_the_documented_arithmetic(activation: str) -> None:
    """numpy emulation of the int8 layers (uint8 activations, one scale per row; int8 weights)
    matches onnxruntime to float rounding. Catches graph rewrites that change the math (an
    onnxruntime fusion once applied the row scales wrongly)."""
    spec = PolicySpec(8, (128, 128, 128), 4, activation=activation)
    rng = np.random.default_rng(4)
    ls = [(w, rng.standard_normal(b.shape).astype(np.float32)) for w, b in layers(spec, seed=7)]
    snap = make_snapshot(ls, spec, "int8", 1)
    x = rng.standard_normal((64, 8)).astype(np.float32) * 3
    h = x
    for i, (w, b) in enumerate(snap.dequantized()):
        if snap.tensors[f"w{i}"].dtype == np.int8:
            # 7-bit levels (ACT_QMAX): 0..127 after a ReLU, -63..63 around 64 otherwise
            qmax = 127.0 if activation == "relu" else 63.0
            xs = np.maximum(np.abs(h).max(1, keepdims=True), 1e-30) / qmax
            h = np.round(h / xs) * xs
        h = h @ w + b
        if i < spec.num_layers - 1:
            h = np.maximum(h, 0) if activation == "relu" else np.tanh(h)
    np.testing.assert_allclose(make_runtime(snap)(x), h, rtol=1e-4, atol=1e-4 * np.abs(h).max())


def test_onnx_runtime_path_does_not_import_torch() -> None:
    code = (
        "import sys, numpy as np\n"
        "from actorq.quant.snapshot import PolicySpec, make_snapshot\n"
        "from actorq.quant.runtimes import make_runtime\n"
        "from actorq.core.loop import VectorActor\n"
        "from actorq.distributed import actor_proc\n"
        "s = PolicySpec(4, (8,), 2)\n"
        "ls = [(np.ones((4, 8), np.float32), np.zeros(8, np.float32)),"
        " (np.ones((8, 2), np.float32), np.zeros(2, np.float32))]\n"
        "make_runtime(make_snapshot(ls, s, 'int8', 0))(np.ones((1, 4), np.float32))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_torch_runtime_built_in_the_learners_process_leaves_its_threads_and_randomness() -> None:
    """An evaluation with --runtime torch set the learner's torch threads to the actors' (1)
    and drew from its random stream (nn.Linear's initialisation)."""
    import torch

    spec = PolicySpec(4, (16, 16), 2)
    snap = make_snapshot(layers(spec), spec, "int8", 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(0)
        expected = torch.rand(3)
        torch.manual_seed(0)
        rt = make_runtime(snap, "torch", threads=1)
        assert torch.get_num_threads() == 2
        assert torch.equal(torch.rand(3), expected)
        obs = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
        np.testing.assert_allclose(rt(obs), make_runtime(snap, "numpy")(obs), rtol=1e-5, atol=1e-5)
    finally:
        torch.set_num_threads(threads)
