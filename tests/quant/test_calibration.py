import numpy as np
import pytest

from actorq.quant.calibration import gptq_int4, gptq_int8, gptq_uniform
from actorq.quant.quantizer import (
    INT4_QMAX,
    INT8_QMAX,
    dequantize,
    dequantize_int4,
    quantize_int4,
    quantize_int8,
    unpack_int4,
)
from actorq.quant.snapshot import PolicySpec, make_snapshot
from tests.quant.test_snapshot import layers


def forward(lay: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    for i, (w, b) in enumerate(lay):
        x = x @ w + b
        x = np.maximum(x, 0) if i < len(lay) - 1 else x
    return x


def correlated_relu_inputs(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((d, d)) / np.sqrt(d)
    return np.maximum(rng.standard_normal((n, d)) @ mix + 0.3, 0).astype(np.float32)


@pytest.mark.parametrize("granularity", ["per_channel", "per_tensor"])
def test_gptq_lowers_output_error_with_the_same_scales(granularity: str) -> None:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((128, 64)) / np.sqrt(128)).astype(np.float32)
    x = correlated_relu_inputs(2048, 128, seed=1)
    q, s = gptq_int8(w, x, granularity)  # type: ignore[arg-type]
    q0, s0 = quantize_int8(w, granularity)  # type: ignore[arg-type]
    np.testing.assert_array_equal(s, s0)  # same format and scales: actors need no change
    assert q.dtype == np.int8 and np.abs(q.astype(np.int16)).max() <= INT8_QMAX
    held_out = correlated_relu_inputs(2048, 128, seed=2)  # not the calibration states
    err = np.linalg.norm(held_out @ dequantize(q, s) - held_out @ w)
    err0 = np.linalg.norm(held_out @ dequantize(q0, s0) - held_out @ w)
    assert err < 0.95 * err0


def test_gptq_at_7_bits_lowers_output_error_within_its_levels() -> None:
    # the static int8 convolutions' weights (7 bits: int16-safe pairs on AVX2)
    from actorq.quant.quantizer import quantize_uniform

    rng = np.random.default_rng(3)
    w = (rng.standard_normal((96, 32)) / np.sqrt(96)).astype(np.float32)
    x = correlated_relu_inputs(2048, 96, seed=4)
    q, s = gptq_uniform(w, x, 7)
    q0, s0 = quantize_uniform(w, 7)
    np.testing.assert_array_equal(s, s0)
    assert q.dtype == np.int8 and np.abs(q.astype(np.int16)).max() <= 63
    held_out = correlated_relu_inputs(2048, 96, seed=5)
    err = np.linalg.norm(held_out @ (q * s) - held_out @ w)
    assert err < 0.95 * np.linalg.norm(held_out @ (q0 * s0) - held_out @ w)


def test_uncorrelated_inputs_need_no_compensation() -> None:
    """With H diagonal no error moves to other rows: GPTQ is round-to-nearest."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    x = np.diag(rng.uniform(0.5, 2.0, 16)).astype(np.float32)
    q, _ = gptq_int8(w, x, damp=0.0)
    np.testing.assert_array_equal(q, quantize_int8(w)[0])


def test_dead_inputs_and_bad_shapes() -> None:
    w = np.random.default_rng(4).standard_normal((8, 4)).astype(np.float32)
    x = correlated_relu_inputs(64, 8, seed=5)
    x[:, 3] = 0.0  # a dead ReLU
    q, s = gptq_int8(w, x)
    assert np.isfinite(dequantize(q, s)).all()
    with pytest.raises(ValueError, match="expected w"):
        gptq_int8(w, x[:, :5])


@pytest.mark.parametrize(("precision", "dtype"), [("int8", np.int8), ("int4", np.uint8)])
def test_calibrated_snapshot_matches_fp32_better_on_its_states(precision: str, dtype: type) -> None:
    spec = PolicySpec(6, (128, 128, 128), 3)
    ls = layers(spec, seed=6)
    obs = np.random.default_rng(7).standard_normal((4096, 6)).astype(np.float32)
    fp32 = make_snapshot(ls, spec, "fp32", 1).dequantized()
    plain = make_snapshot(ls, spec, precision, 1)
    calib = make_snapshot(ls, spec, precision, 1, calibration=obs[:1024])
    assert calib.tensors["w1"].dtype == dtype and calib.nbytes == plain.nbytes
    assert not np.array_equal(calib.tensors["w1"], plain.tensors["w1"])

    ref = forward(fp32, obs[1024:])
    out_plain = forward(plain.dequantized(), obs[1024:])
    out_calib = forward(calib.dequantized(), obs[1024:])
    assert np.abs(out_calib - ref).mean() < np.abs(out_plain - ref).mean()
    same_plain = (out_plain.argmax(1) == ref.argmax(1)).mean()
    same_calib = (out_calib.argmax(1) == ref.argmax(1)).mean()
    assert same_calib >= same_plain


def test_gptq_int4_lowers_output_error_with_the_same_block_scales() -> None:
    rng = np.random.default_rng(8)
    w = (rng.standard_normal((128, 64)) / np.sqrt(128)).astype(np.float32)
    states = correlated_relu_inputs(4096, 128, seed=9)
    x, held_out = states[:2048], states[2048:]  # same distribution, other states
    packed, s = gptq_int4(w, x)
    packed0, s0 = quantize_int4(w)
    np.testing.assert_array_equal(s, s0)  # same format and scales: actors need no change
    assert packed.shape == packed0.shape and packed.dtype == np.uint8
    assert np.abs(unpack_int4(packed, 128)).max() <= INT4_QMAX
    err = np.linalg.norm(held_out @ dequantize_int4(packed, s, 128) - held_out @ w)
    err0 = np.linalg.norm(held_out @ dequantize_int4(packed0, s0, 128) - held_out @ w)
    assert err < 0.8 * err0  # measured 0.66 (0.66-0.71 over three seeds)
