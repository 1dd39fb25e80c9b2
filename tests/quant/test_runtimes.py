import subprocess
import sys

import numpy as np
import pytest

from actorq.quant.runtimes import RUNTIMES, make_runtime
from actorq.quant.snapshot import PolicySpec, make_snapshot
from tests.quant.test_snapshot import layers


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_runtimes_agree_with_numpy_reference(precision: str) -> None:
    spec = PolicySpec(6, (64, 64), 3)
    snap = make_snapshot(layers(spec), spec, precision, 1)
    x = np.random.default_rng(1).standard_normal((32, 6)).astype(np.float32)
    ref = make_runtime(snap, "numpy")(x)
    tol = 0.05 if precision == "int8" else 1e-4  # ORT int8 also quantizes activations
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
