"""The Nature-CNN: picked by observation shape, uint8 in and /255 inside, DQN's dueling head
folded for export, PPO's one trunk under two heads, and the ONNX export equal to torch."""

from __future__ import annotations

import numpy as np
import torch

from actorq.agents.dqn.networks import MLP, NatureQNetwork, make_q_network
from actorq.agents.pixels import NatureCNN, cnn_onnx
from actorq.agents.ppo.config import PPOConfig
from actorq.agents.ppo.networks import NatureCNNPolicy, NatureCNNValue, make_networks
from actorq.types import ArraySpec, EnvSpec

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
