"""int4 snapshots: block-wise 4-bit weights (32 per scale) run by onnxruntime's MatMulNBits."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from actorq.errors import SnapshotError
from actorq.quant.quantizer import (
    INT4_BLOCK,
    INT4_QMAX,
    dequantize_int4,
    int4_blocks,
    quantize_int4,
    unpack_int4,
)
from actorq.quant.runtimes import make_runtime
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot
from tests.quant.test_snapshot import layers

finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.tuples(st.integers(1, 80), st.integers(1, 9)), elements=finite))
def test_int4_error_is_at_most_half_a_step_of_its_block(w: np.ndarray) -> None:
    packed, scale = quantize_int4(w)
    n_in, n_out = w.shape
    nb = int4_blocks(n_in)
    assert packed.dtype == np.uint8 and packed.shape == (n_out, nb, INT4_BLOCK // 2)
    assert scale.dtype == np.float32 and scale.shape == (n_out, nb)
    q = unpack_int4(packed, n_in)
    assert q.shape == w.shape and np.abs(q).max() <= INT4_QMAX
    # the scale of each weight: its column's scale for the block of 32 rows it falls in
    s = scale.T[np.arange(n_in) // INT4_BLOCK]
    err = np.abs(w - dequantize_int4(packed, scale, n_in))
    assert (err <= s / 2 * (1 + 1e-5) + 1e-12).all()
    # rows past n_in (padding of the last block) hold the code of 0
    np.testing.assert_array_equal(unpack_int4(packed, nb * INT4_BLOCK)[n_in:], 0)


def test_int4_scales_are_local_to_their_block() -> None:
    """A large weight coarsens only the 32 weights of its block, not its whole column."""
    w = np.random.default_rng(0).standard_normal((128, 4)).astype(np.float32) * 0.01
    w[5, 1] = 10.0
    packed, scale = quantize_int4(w)
    err = np.abs(w - dequantize_int4(packed, scale, 128))
    assert scale[1, 0] == pytest.approx(10.0 / INT4_QMAX)
    # its block-mates round to 0; blocks 1..3 of the column keep steps ~300× finer
    assert (np.delete(unpack_int4(packed, 128)[:32, 1], 5) == 0).all()
    assert scale[1, 1:].max() < scale[1, 0] / 300 and err[32:, 1].max() < 0.003
    np.testing.assert_array_equal(quantize_int4(np.zeros((3, 2), np.float32))[1], 1.0)
    with pytest.raises(ValueError):
        quantize_int4(np.zeros(3, np.float32))


def test_int4_snapshot_keeps_io_layers_fp32_and_is_small() -> None:
    spec = PolicySpec(24, (2048, 2048, 2048), 6)
    ls = layers(spec)
    fp32 = make_snapshot(ls, spec, "fp32", 0)
    int4 = make_snapshot(ls, spec, "int4", 0)
    assert int4.tensors["w0"].dtype == np.float32 and int4.tensors["w3"].dtype == np.float32
    assert int4.tensors["w1"].dtype == np.uint8 and int4.granularity == "block32"
    # a hidden layer: half a byte per weight plus one fp32 scale per 32 weights
    assert int4.tensors["w1"].nbytes + int4.tensors["s1"].nbytes == 2048 * 2048 * (1 / 2 + 4 / 32)
    ratio = len(int4.to_bytes()) / len(fp32.to_bytes())
    assert 0.15 <= ratio <= 0.17  # 1/8 weights + 1/32 scales; the fp32 in/out layers: 0.7%


def emulate_ort_int4(snap: PolicySnapshot, x: np.ndarray) -> np.ndarray:
    """numpy emulation of the int4 graph: each int4 layer (MatMulNBits, accuracy_level 4)
    quantizes its input per row and per block of 32 to int8 (scale = block absmax / 127) and
    multiplies with the dequantized 4-bit weights; the fp32 layers are plain matmuls."""
    spec = snap.spec
    h = x.astype(np.float64)
    for i, (w, b) in enumerate(snap.dequantized()):
        if snap.tensors[f"w{i}"].dtype == np.uint8:
            n, k = h.shape
            nb = int4_blocks(k)
            padded = np.zeros((n, nb * INT4_BLOCK))
            padded[:, :k] = h
            hb = padded.reshape(n, nb, INT4_BLOCK)
            xs = np.abs(hb).max(axis=2, keepdims=True) / 127
            hb = np.rint(hb / np.where(xs > 0, xs, 1.0)) * xs
            h = hb.reshape(n, -1)[:, :k]
        h = h @ w + b
        act = spec.activation if i < spec.num_layers - 1 else spec.output_activation
        h = np.maximum(h, 0) if act == "relu" else (np.tanh(h) if act == "tanh" else h)
    return h


@pytest.mark.parametrize(
    ("activation", "output_activation"), [("relu", "none"), ("tanh", "none"), ("relu", "tanh")]
)
def test_int4_graph_computes_exactly_the_documented_arithmetic(
    activation: str, output_activation: str
) -> None:
    """onnxruntime's MatMulNBits on our packed weights = the numpy emulation, to float rounding.
    A width of 100 (not a multiple of 32) checks the padded last block; a wrong nibble order,
    scale layout or zero point would be off by whole quantization steps."""
    spec = PolicySpec(8, (128, 100, 96), 4, activation, output_activation)
    rng = np.random.default_rng(4)
    ls = [(w, rng.standard_normal(b.shape).astype(np.float32)) for w, b in layers(spec, seed=7)]
    snap = PolicySnapshot.from_bytes(make_snapshot(ls, spec, "int4", 1).to_bytes())
    x = rng.standard_normal((64, 8)).astype(np.float32) * 3
    ref = emulate_ort_int4(snap, x)
    out = make_runtime(snap)(x)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    # ...and it differs from the weight-only numpy reference by the activation rounding only
    weight_only = make_runtime(snap, "numpy")(x)
    assert 0 < np.abs(out - weight_only).max() < 0.05 * np.abs(weight_only).max()


def test_int4_action_of_a_state_does_not_depend_on_the_rest_of_the_batch() -> None:
    spec = PolicySpec(8, (128, 128, 128), 4)
    rt = make_runtime(make_snapshot(layers(spec, seed=5), spec, "int4", 1))
    x = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
    x[0] *= 100.0
    batched = rt(x)
    single = np.concatenate([rt(x[i : i + 1]) for i in range(16)])
    np.testing.assert_allclose(batched, single, rtol=1e-5, atol=1e-5 * np.abs(single).max())


def test_int4_greedy_actions_agree_with_fp32_except_near_ties() -> None:
    """Random Q-networks have many near-tied states, where 4-bit noise may flip the argmax;
    where fp32's action gap is clear (> half the spread of Q), int4 must pick the same."""
    spec = PolicySpec(8, (256, 256, 256), 4)
    ls = layers(spec, seed=3)
    x = np.random.default_rng(2).standard_normal((4000, 8)).astype(np.float32)
    q32 = make_runtime(make_snapshot(ls, spec, "fp32", 1))(x)
    q4 = make_runtime(make_snapshot(ls, spec, "int4", 1))(x)
    same = q32.argmax(1) == q4.argmax(1)
    top2 = np.sort(q32, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 0.5 * q32.std()
    assert clear.mean() > 0.3  # the condition below is about many states
    assert same.mean() >= 0.85  # measured 0.94 (seeds 0-5: 0.91-0.94)
    assert same[clear].mean() >= 0.99  # measured 0.999


def test_int4_continuous_actions_stay_close() -> None:
    spec = PolicySpec(8, (256, 256, 256), 2, output_activation="tanh", head="deterministic")
    ls = layers(spec, seed=1)
    x = np.random.default_rng(2).standard_normal((2000, 8)).astype(np.float32)
    a32 = make_runtime(make_snapshot(ls, spec, "fp32", 1))(x)
    a4 = make_runtime(make_snapshot(ls, spec, "int4", 1))(x)
    assert np.abs(a4).max() <= 1.0  # the tanh head is applied
    d = np.abs(a32 - a4).max(axis=1)
    assert d.mean() < 0.06 and (d <= 0.1).mean() >= 0.95  # measured 0.038 and 0.98


def test_corrupt_int4_snapshots_are_refused() -> None:
    spec = PolicySpec(4, (64, 64), 2)
    snap = make_snapshot(layers(spec), spec, "int4", 1)
    data = bytearray(snap.to_bytes())
    data[-300] ^= 0x10  # one nibble inside the tensor data
    with pytest.raises(SnapshotError, match="checksum"):
        PolicySnapshot.from_bytes(bytes(data))

    def rebuilt(precision: str = "int4", **changes: np.ndarray) -> bytes:
        # a self-consistent checksum: what a buggy learner, not a torn copy, would produce
        return PolicySnapshot(1, precision, spec, {**snap.tensors, **changes}).to_bytes()

    bad_scale = snap.tensors["s1"].copy()
    bad_scale[3, 1] = np.nan
    with pytest.raises(SnapshotError, match="NaN or Inf"):
        PolicySnapshot.from_bytes(rebuilt(s1=bad_scale))
    for changes in (
        {"w1": snap.tensors["w1"][:, :1].copy()},  # fewer blocks than 64 inputs need
        {"s1": snap.tensors["s1"].T.copy()},  # scales transposed
        {"s1": snap.tensors["s1"].astype(np.float16)},  # scales not fp32
    ):
        with pytest.raises(SnapshotError, match="not a well-formed int4"):
            PolicySnapshot.from_bytes(rebuilt(**changes))
    with pytest.raises(SnapshotError, match="not a well-formed int8"):
        PolicySnapshot.from_bytes(rebuilt("int8"))  # packed nibbles in an int8 snapshot
