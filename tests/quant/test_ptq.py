import numpy as np
import pytest

from actorq.quant.ptq import fake_quantize, fake_quantize_module
from actorq.quant.quantizer import quantize_int8
from actorq.quant.snapshot import PolicySpec
from tests.quant.test_snapshot import layers

SPEC = PolicySpec(6, (128, 128, 128), 4)


def forward(lay: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    for i, (w, b) in enumerate(lay):
        x = x @ w + b
        x = np.maximum(x, 0) if i < len(lay) - 1 else x
    return x


def test_error_grows_as_bits_fall_and_8_bits_is_close_to_fp32() -> None:
    ls = layers(SPEC, seed=0)
    x = np.random.default_rng(1).standard_normal((2000, 6)).astype(np.float32)
    ref = forward(ls, x)
    scale = np.abs(ref).mean()
    err = {
        bits: np.abs(forward(fake_quantize(ls, bits), x) - ref).mean() / scale
        for bits in range(2, 9)
    }
    assert err[8] < 0.03  # 8 bits: ~2% of the outputs' size (measured 0.017)
    # each bit removed halves the resolution: the error rises at every step (by 1.5-3.2×
    # measured), 2 bits ≥ 50× the 8-bit error (measured 107×)...
    assert all(err[b] > 1.2 * err[b + 1] for b in range(2, 8))
    assert err[2] > 50 * err[8]
    assert err[2] > 0.5  # ...and ternary weights are coarse: errors beyond the outputs' size
    same8 = (forward(fake_quantize(ls, 8), x).argmax(1) == ref.argmax(1)).mean()
    same2 = (forward(fake_quantize(ls, 2), x).argmax(1) == ref.argmax(1)).mean()
    assert same8 >= 0.98 and same2 < 0.9


def test_levels_scales_and_fp32_io_layers() -> None:
    ls = layers(SPEC, seed=2)
    for bits in (2, 3, 8):
        fq = fake_quantize(ls, bits)
        for (w, b), (w0, b0) in zip(fq, ls, strict=True):
            # at most 2^bits - 1 distinct values per output channel, biases untouched
            assert max(len(np.unique(w[:, j])) for j in range(w.shape[1])) <= 2**bits - 1
            np.testing.assert_array_equal(b, b0)
            assert w.dtype == np.float32 and w.shape == w0.shape
    # 8 bits is exactly the int8 snapshots' per-channel rounding
    q, s = quantize_int8(ls[1][0])
    np.testing.assert_array_equal(fake_quantize(ls, 8)[1][0], q.astype(np.float32) * s)
    kept = fake_quantize(ls, 2, keep_io_fp32=True)
    np.testing.assert_array_equal(kept[0][0], ls[0][0].astype(np.float32))
    np.testing.assert_array_equal(kept[-1][0], ls[-1][0].astype(np.float32))
    assert not np.array_equal(kept[1][0], ls[1][0])
    assert ls[1][0] is not kept[1][0] and ls[0][0] is not kept[0][0]  # copies, never aliases


@pytest.mark.parametrize("bits", [1, 9, 0, 16, 4.0, True, "4"])
def test_bits_outside_2_to_8_are_refused(bits: object) -> None:
    with pytest.raises(ValueError, match="bits must be"):
        fake_quantize(layers(SPEC), bits)  # type: ignore[arg-type]


def test_a_convolutional_network_is_rounded_per_output_channel() -> None:
    import torch

    from actorq.agents.ppo.networks import NatureCNNPolicy

    torch.manual_seed(0)
    net = NatureCNNPolicy((4, 84, 84), 6)
    mods = [net.torso.convs[0], net.torso.convs[1], net.torso.convs[2], net.torso.fc, net.head]
    for bits in (8, 4):
        fq = fake_quantize_module(net, bits)
        fq_mods = [fq.torso.convs[0], fq.torso.convs[1], fq.torso.convs[2], fq.torso.fc, fq.head]
        for m, q in zip(mods, fq_mods, strict=True):
            w = q.weight.detach().reshape(len(q.weight), -1).numpy()
            assert max(len(np.unique(row)) for row in w) <= 2**bits - 1  # per output channel
            torch.testing.assert_close(q.bias, m.bias)  # biases untouched
            assert not torch.equal(q.weight, m.weight)
    # 8 bits: a conv's weights are the int8 snapshots' per-channel rounding
    w0 = net.torso.convs[1].weight.detach().reshape(64, -1).numpy().T
    q, s = quantize_int8(w0)
    got = fake_quantize_module(net, 8).torso.convs[1].weight.detach().reshape(64, -1).numpy().T
    np.testing.assert_array_equal(got, q.astype(np.float32) * s)
    kept = fake_quantize_module(net, 4, keep_io_fp32=True)
    assert torch.equal(kept.torso.convs[0].weight, net.torso.convs[0].weight)
    assert torch.equal(kept.head.weight, net.head.weight)
    assert not torch.equal(kept.torso.fc.weight, net.torso.fc.weight)


def test_keep_io_fp32_keeps_both_heads_of_a_dueling_q_network() -> None:
    """A dueling Q-network's output is its value and advantage heads together: rounding the
    value head (the last module but one) while the advantage stays fp32 is neither "every
    layer" nor "first and last fp32"."""
    import torch

    from actorq.agents.dqn.networks import NatureQNetwork

    torch.manual_seed(0)
    net = NatureQNetwork((4, 84, 84), 6, dueling=True)
    kept = dict(fake_quantize_module(net, 4, keep_io_fp32=True).named_modules())
    same = {n: torch.equal(m.weight, kept[n].weight) for n, m in net.named_modules()
            if hasattr(m, "weight")}  # fmt: skip
    assert same == {"torso.convs.0": True, "torso.convs.1": False, "torso.convs.2": False,
                    "torso.fc": False, "value": True, "advantage": True}  # fmt: skip
