import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from actorq.quant.quantizer import dequantize, quantize_int8, to_fp16

finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.tuples(st.integers(1, 20), st.integers(1, 20)), elements=finite))
def test_int8_error_is_at_most_half_a_step(w: np.ndarray) -> None:
    for gran in ("per_channel", "per_tensor"):
        q, s = quantize_int8(w, gran)  # type: ignore[arg-type]
        assert q.dtype == np.int8 and q.shape == w.shape
        assert np.abs(q).max(initial=0) <= 127
        err = np.abs(w - dequantize(q, s))
        assert (err <= s / 2 * (1 + 1e-5) + 1e-12).all()


def test_per_channel_keeps_small_channels_that_per_tensor_loses() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 8)).astype(np.float32)
    w[:, 0] *= 1e-3  # one channel of tiny weights next to ordinary ones
    qc, sc = quantize_int8(w, "per_channel")
    qt, st_ = quantize_int8(w, "per_tensor")
    assert sc.shape == (8,) and st_.shape == (1,)
    err_c = np.abs(w - dequantize(qc, sc))[:, 0].max()
    err_t = np.abs(w - dequantize(qt, st_))[:, 0].max()
    assert err_c < err_t / 100
    # per tensor, the tiny channel collapses to (almost) all zeros
    assert (qt[:, 0] == 0).mean() > 0.9


def test_zero_channel_and_shape_errors() -> None:
    w = np.zeros((3, 2), np.float32)
    q, s = quantize_int8(w)
    assert (q == 0).all() and np.isfinite(s).all()
    with pytest.raises(ValueError):
        quantize_int8(np.zeros(3, np.float32))


def test_fp16_overflow_becomes_inf() -> None:
    assert np.isinf(to_fp16(np.array([1e6], np.float32))).all()
    x = np.array([0.1, -3.5], np.float32)
    assert np.abs(to_fp16(x).astype(np.float32) - x).max() < 1e-3
