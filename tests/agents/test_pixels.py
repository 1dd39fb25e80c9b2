"""The Nature-CNN: picked by observation shape, uint8 in and /255 inside, DQN's dueling head
folded for export, PPO's one trunk under two heads, and the ONNX export equal to torch; its fp16
and int8 snapshots decode, run, and (int8) act as fp32 does on ≥ 99% of states."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from actorq.agents.dqn.networks import MLP, NatureQNetwork, make_q_network
from actorq.agents.pixels import (
    PIXEL_PRECISIONS,
    NatureCNN,
    activation_bound,
    activation_max,
    cnn_onnx,
    patch_rows,
    pixel_snapshot,
)
from actorq.agents.policy_io import compare_policies
from actorq.agents.ppo.config import PPOConfig
from actorq.agents.ppo.networks import NatureCNNPolicy, NatureCNNValue, make_networks
from actorq.errors import SnapshotError
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.runtimes import decode_snapshot, make_runtime
from actorq.types import ArraySpec, EnvSpec
from tests.agents.pixel_task import pixel_env  # noqa: F401

PIXELS = EnvSpec("atari:Pong", ArraySpec((4, 84, 84), "uint8"), ArraySpec((), "int64"), 6)
FLAT = EnvSpec("gym:CartPole-v1", ArraySpec((4,), "float32"), ArraySpec((), "int64"), 2)


def frames(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 4, 84, 84), dtype=np.uint8)


def test_torso_reads_bytes_as_pixel_values() -> None:
    torch.manual_seed(0)
    cnn = NatureCNN((4, 84, 84))
    assert cnn.flat == 64 * 7 * 7
    x = torch.from_numpy(frames(3))
    out = cnn(x)
    assert out.shape == (3, 512) and out.dtype == torch.float32
    torch.testing.assert_close(out, cnn(x.float()))  # the same values as float: the same output
    assert not torch.equal(cnn(x), cnn(x.float() / 255))  # input scale is 0..255


def test_dqn_picks_the_cnn_for_pixels_and_folds_its_dueling_head() -> None:
    assert isinstance(make_q_network(FLAT, (64, 64), True), MLP)
    torch.manual_seed(0)
    q = make_q_network(PIXELS, (64, 64), True)
    assert isinstance(q, NatureQNetwork)
    x = torch.from_numpy(frames(5))
    with torch.no_grad():
        w, b = q.export_head()
        folded = q.torso(x).numpy() @ w + b
        np.testing.assert_allclose(folded, q(x).numpy(), rtol=1e-5, atol=1e-5)


def test_ppo_heads_share_one_trunk_whose_parameters_are_the_policys() -> None:
    torch.manual_seed(0)
    policy, value = make_networks(PPOConfig(env="atari:Pong"), PIXELS)
    assert isinstance(policy, NatureCNNPolicy) and isinstance(value, NatureCNNValue)
    pol, val = {id(p) for p in policy.parameters()}, {id(p) for p in value.parameters()}
    assert not pol & val and len(val) == 2  # the value module owns its head only
    x = torch.from_numpy(frames(2))
    assert policy(x).shape == (2, 6) and value(x).shape == (2, 1)
    value(x).sum().backward()
    assert policy.torso.fc.weight.grad is not None  # the value loss trains the shared trunk


def test_onnx_export_runs_uint8_frames_as_torch_does() -> None:
    import onnxruntime as ort

    torch.manual_seed(0)
    q = NatureQNetwork((4, 84, 84), 6, dueling=True)
    data = cnn_onnx(q.torso, q.export_head(), "q", "test")
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = frames(4, seed=1)
    got = sess.run(["q"], {"obs": x})[0]
    with torch.no_grad():
        want = q(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# -- quantized convolutional actors (QuaRL's int8 actors; Jacob et al. 2018's integer layers) --

PONG = EnvSpec("atari:Pong", ArraySpec((4, 84, 84), "uint8"), ArraySpec((), "int64"), 6)


def _q_net() -> NatureQNetwork:
    torch.manual_seed(0)
    return NatureQNetwork((4, 84, 84), 6, dueling=True).eval()


def _q(net: NatureQNetwork, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return np.asarray(net(torch.from_numpy(x)).numpy())


@pytest.mark.parametrize(("precision", "tol"), [("fp16", 2e-3), ("int8", 3e-2)])
def test_quantized_snapshots_round_trip_and_run_uint8_frames(precision: str, tol: float) -> None:
    net = _q_net()
    snap = pixel_snapshot(net, 7, PONG, "q", precision, frames(64, seed=3))
    back = decode_snapshot(snap.to_bytes())  # the actors' decoder: checksum, parse, finite
    assert isinstance(back, ModelSnapshot) and back == snap and back.precision == precision
    ops = {n.op_type for n in onnx.load_model_from_string(back.model).graph.node}
    if precision == "int8":  # integer convolutions and fc, static scales (no ConvInteger)
        assert {"QLinearConv", "QGemm"} <= ops and "ConvInteger" not in ops
        assert back.meta["calibration_states"] == 64
    x = frames(16, seed=4)
    got, want = make_runtime(back)(x), _q(net, x)
    assert got.shape == (16, 6) and got.dtype == np.float32
    assert np.abs(got - want).max() <= tol * np.abs(want).max()
    fp32_bytes = len(pixel_snapshot(net, 7, PONG, "q").model)
    assert len(back.model) < fp32_bytes / {"fp16": 1.9, "int8": 3.5}[precision]


def test_int8_greedy_actions_agree_with_fp32_on_states() -> None:
    # a fixed random network on 84×84 frames, calibrated on other states than it is judged on
    net = _q_net()
    snap = pixel_snapshot(net, 1, PONG, "q", "int8", frames(128, seed=5))
    states = frames(512, seed=6)
    q32 = _q(net, states)
    top2 = np.sort(q32, axis=1)[:, -2:]
    assert np.median(top2[:, 1] - top2[:, 0]) > 1e-3  # margins the int8 error could flip
    agree = float((make_runtime(snap)(states).argmax(1) == q32.argmax(1)).mean())
    assert agree >= 0.99, agree
    fp32 = pixel_snapshot(net, 1, PONG, "q")
    assert compare_policies(snap, fp32, states)[0] == agree  # what a run's summary reports


def test_int8_output_of_a_state_does_not_depend_on_its_batch() -> None:
    rt = make_runtime(pixel_snapshot(_q_net(), 1, PONG, "q", "int8", frames(32, seed=7)))
    x = frames(8, seed=8)
    whole = rt(x)
    np.testing.assert_array_equal(whole, np.concatenate([rt(x[i : i + 1]) for i in range(8)]))


def test_gptq_rounding_brings_int8_closer_to_fp32_and_is_deterministic() -> None:
    net = _q_net()
    calib, states = frames(64, seed=12), frames(64, seed=13)
    want = _q(net, states)

    def error(rounding: str) -> float:
        snap = pixel_snapshot(net, 1, PONG, "q", "int8", calib, rounding)
        assert snap.meta["rounding"] == rounding
        return float(np.abs(make_runtime(snap)(states) - want).mean())

    nearest, convs, every = error("nearest"), error("gptq-convs"), error("gptq")
    assert convs < nearest and every < nearest, (nearest, convs, every)
    a = pixel_snapshot(net, 1, PONG, "q", "int8", calib).model  # the ONNX graph, weights in it
    assert a == pixel_snapshot(net, 1, PONG, "q", "int8", calib).model
    # without states: bounded ranges and nearest rounding
    assert pixel_snapshot(net, 1, PONG, "q", "int8", None).meta["rounding"] == "nearest"


@pytest.mark.parametrize(
    ("c", "k", "stride", "hw"),
    [(4, 8, 4, (84, 84)), (32, 4, 2, (20, 20)), (3, 3, 1, (7, 7)), (2, (3, 5), (2, 1), (9, 13))],
)
def test_patch_rows_are_the_im2col_rows_they_index(
    c: int, k: Any, stride: Any, hw: tuple[int, int]
) -> None:
    """GPTQ's conv inputs are gathered row by row, not by building im2col whole: the same rows
    (so the same snapshots) as ``F.unfold`` transposed, state-major, for any drawn indices."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(c, 5, k, stride)
    x = torch.rand(3, c, *hw)
    patches = torch.nn.functional.unfold(x, conv.kernel_size, stride=conv.stride)
    whole = patches.transpose(1, 2).reshape(-1, patches.shape[1])
    take = torch.randperm(len(whole), generator=torch.Generator().manual_seed(1))[:50]
    assert torch.equal(patch_rows(x, conv, take), whole[take])
    assert torch.equal(patch_rows(x, conv, torch.arange(len(whole))), whole)
    with pytest.raises(ValueError, match="unpadded"):
        patch_rows(x, torch.nn.Conv2d(c, 5, k, stride, padding=1), take)


def test_the_int8_builder_takes_given_integer_weights_as_they_are() -> None:
    from actorq.quant.onnx_builder import OnnxBuilder

    rng = np.random.default_rng(0)
    w, bias = rng.normal(size=(8, 4, 3, 3)).astype(np.float32), np.zeros(8, np.float32)
    q = rng.integers(-63, 64, size=(36, 8)).astype(np.int8)
    s = np.full(8, 0.01, np.float32)
    wq, scale, _ = OnnxBuilder("fp32")._static_weights(w, bias, 1 / 255, (q, s))
    np.testing.assert_array_equal(wq, q.T.reshape(w.shape))
    np.testing.assert_array_equal(scale, s)
    with pytest.raises(ValueError, match="rounded weights"):
        OnnxBuilder("fp32")._static_weights(w, bias, 1 / 255, (q[:35], s))


def test_int8_of_a_network_with_a_dead_layer_acts_as_fp32() -> None:
    # A layer whose ReLUs all died (a too-high learning rate does it) calibrates to ~0, so the
    # next layer's bias sits on a tiny integer scale: it must not be clipped to ~0 there, or
    # int8 actors take other actions than fp32 ones (0% agreement in a run that hit this).
    net = _q_net()
    with torch.no_grad():
        net.torso.convs[2].bias.fill_(-100.0)  # the third convolution's outputs are all 0
    calib, states = frames(32, seed=10), frames(64, seed=11)
    assert activation_max(net.torso, calib)[2] == 0.0
    snap = pixel_snapshot(net, 1, PONG, "q", "int8", calib)
    got, want = make_runtime(snap)(states), _q(net, states)
    np.testing.assert_allclose(got, want, atol=1e-2 * np.abs(want).max())
    assert (got.argmax(1) == want.argmax(1)).all()


def test_int8_before_replay_has_states_is_bounded_not_clipped() -> None:
    torso = _q_net().torso
    bound, seen = activation_bound(torso), activation_max(torso, frames(64, seed=9))
    assert all(b >= s > 0 for b, s in zip(bound, seen, strict=True))
    white = np.full((1, 4, 84, 84), 255, np.uint8)  # the brightest frame stays inside too
    assert all(b >= s for b, s in zip(bound, activation_max(torso, white), strict=True))
    snap = pixel_snapshot(_q_net(), 0, PONG, "q", "int8", None)
    assert snap.meta["calibration_states"] == 0
    assert make_runtime(snap)(frames(2)).shape == (2, 6)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_corruption_of_an_int8_pixel_snapshot_is_refused_or_harmless(
    data: st.DataObject,
) -> None:
    blob = bytearray(_SMALL_INT8)
    if data.draw(st.booleans()):
        blob[data.draw(st.integers(0, len(blob) - 1))] ^= data.draw(st.integers(1, 255))
    else:
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    try:
        back = decode_snapshot(bytes(blob))
    except SnapshotError:
        return
    assert back.to_bytes() == _SMALL_INT8


def _small_int8() -> bytes:
    torch.manual_seed(1)
    spec = EnvSpec("gym:t", ArraySpec((4, 36, 36), "uint8"), ArraySpec((), "int64"), 2)
    calib = np.random.default_rng(0).integers(0, 256, (8, 4, 36, 36), dtype=np.uint8)
    return pixel_snapshot(NatureQNetwork((4, 36, 36), 2), 1, spec, "q", "int8", calib).to_bytes()


_SMALL_INT8 = _small_int8()


def test_auto_picks_the_fastest_measured_pixel_precision_that_agrees() -> None:
    from actorq.quant.autoselect import select_model_precision

    net, calib = _q_net(), frames(32, seed=10)
    snaps = {p: pixel_snapshot(net, 0, PONG, "q", p, calib).to_bytes() for p in PIXEL_PRECISIONS}
    states = frames(64, seed=11)

    def timer(us: dict[str, float]) -> Any:
        return lambda rts, batch: [us[rt.precision] * 1e-6 for rt in rts]

    fast = select_model_precision(snaps, states, 8, timer=timer({"fp32": 9, "fp16": 9, "int8": 4}))
    assert fast.precision == "int8" and {c.precision for c in fast.candidates} == set(snaps)
    assert all(c.latency_us_batch1 is not None and c.agreement >= 0.99 for c in fast.candidates)
    slow = select_model_precision(snaps, states, 8, timer=timer({"fp32": 9, "fp16": 8, "int8": 8}))
    assert slow.precision == "fp32"  # nothing 1.3× faster: fp32


@pytest.mark.usefixtures("pixel_env")
def test_an_interrupted_int8_ppo_run_resumes_with_the_snapshot_its_actors_ran(
    tmp_path: Any,
) -> None:
    """PPO's queue is not checkpointed, so a resume has no states to calibrate on: it starts
    from the checkpoint's snapshot. At version 106 that snapshot's header is 8 bytes longer than
    one made without calibration (its meta: 256 states, GPTQ rounding), and a resume compared
    their lengths and refused a good checkpoint; now their layers are compared."""
    from actorq import train
    from tests.agents.pixel_task import PIXEL_RUN

    cfg = PPOConfig(**{**PIXEL_RUN, "precision": "int8", "actors": 0, "total_steps": 100_000},
                    run_dir=str(tmp_path / "run"), progress=False, log_every=1e-6, num_steps=2,
                    minibatch_size=8, update_epochs=1)  # fmt: skip
    calls: list[int] = []

    def stop(info: dict[str, Any]) -> None:
        calls.append(1)
        if len(calls) == 320:  # version 106
            raise KeyboardInterrupt

    assert train(cfg, callback=stop).interrupted
    kept = (tmp_path / "run" / "checkpoint" / "snapshot.bin").read_bytes()
    assert decode_snapshot(kept).version >= 100
    got: list[bytes] = []

    def first(info: dict[str, Any]) -> None:
        raise KeyboardInterrupt

    from actorq.run.publisher import Publisher

    publish = Publisher.publish

    def spy(self: Publisher, c: Any, given: bytes | None = None, in_line: bool = False) -> None:
        if given is not None:
            got.append(given)
        publish(self, c, given, in_line)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(Publisher, "publish", spy)
        train(PPOConfig(resume=cfg.run_dir, progress=False, log_every=1e-6), callback=first)
    assert got[0] == kept
