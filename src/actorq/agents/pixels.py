"""Pixel observations: the Nature-CNN torso DQN's and PPO's convolutional networks share, and its
ONNX export for actors.

Mnih et al., "Human-level control through deep reinforcement learning" (Nature 2015): three
convolutions (32 8×8 stride 4, 64 4×4 stride 2, 64 3×3 stride 1, ReLU) and a 512-unit
fully-connected layer over a stack of 4 84×84 grayscale frames. An agent picks it when its
observations are images, ``(channels, height, width)`` (:func:`is_pixels`); the heads are the
agent's own (``agents/dqn/networks.py``: dueling Q, ``agents/ppo/networks.py``: policy and
value over one trunk).

Pixels arrive as uint8 (actors, channels and replay move bytes) and become floats in [0, 1]
inside the network, on the learner's device: ``x / 255``. The exported ONNX model does the
same in its graph (input ``obs`` uint8), so actors feed it the env's frames as they are.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from actorq.quant.onnx import OnnxBuilder, host
from actorq.types import EnvSpec

#: (out channels, kernel, stride) of the three convolutions (Mnih et al. 2015)
NATURE_CONVS: tuple[tuple[int, int, int], ...] = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
NATURE_FEATURES = 512


def is_pixels(spec: EnvSpec) -> bool:
    """Whether the observations are images ``(channels, height, width)`` (the CNN's input)."""
    return len(spec.observation.shape) == 3


class NatureCNN(nn.Module):
    """The Nature-CNN torso: uint8 (or float) pixels in 0..255 ``(B, C, H, W)`` → ``(B, 512)``
    ReLU features. ``ortho_init``: orthogonal weights with gain √2, zero biases (CleanRL's
    ``ppo_atari.py``); otherwise torch's defaults (CleanRL's ``dqn_atari.py``)."""

    def __init__(self, obs_shape: tuple[int, ...], ortho_init: bool = False) -> None:
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"the Nature-CNN reads (channels, height, width), got {obs_shape}")
        c, h, w = obs_shape
        self.obs_shape = (int(c), int(h), int(w))
        chans = (c, *(o for o, _, _ in NATURE_CONVS))
        self.convs = nn.ModuleList(
            nn.Conv2d(i, o, k, s) for i, (o, k, s) in zip(chans, NATURE_CONVS, strict=False)
        )
        for _, k, s in NATURE_CONVS:
            h, w = (h - k) // s + 1, (w - k) // s + 1
        if h < 1 or w < 1:
            raise ValueError(f"observations of {obs_shape} are too small for the Nature-CNN")
        self.flat = chans[-1] * h * w  # 3,136 at 84×84
        self.fc = nn.Linear(self.flat, NATURE_FEATURES)
        if ortho_init:
            for layer in (*self.convs, self.fc):
                assert isinstance(layer, nn.Conv2d | nn.Linear) and layer.bias is not None
                nn.init.orthogonal_(layer.weight, math.sqrt(2))
                nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float32) / 255.0  # on the learner's device: bytes crossed, not floats
        for conv in self.convs:
            x = torch.relu(conv(x))
        return torch.relu(self.fc(x.flatten(1)))


def cnn_onnx(torso: NatureCNN, head: tuple[np.ndarray, np.ndarray], out: str, doc: str) -> bytes:
    """The torso and one linear ``head`` (``w`` (512, n), ``b`` (n,)) as an fp32 ONNX model:
    input ``obs`` ``(batch, C, H, W)`` uint8, output ``out`` ``(batch, n)`` float32.

    An int8 convolution path comes later (issue 50): onnxruntime's integer convolutions are
    often slower than fp32 on CPUs without VNNI, so it waits for a measurement per CPU."""
    from onnx import TensorProto, helper

    b = OnnxBuilder("fp32")
    x = b.op("Div", b.op("Cast", "obs", to=TensorProto.FLOAT), b.const(255.0))
    for conv, (_, _, stride) in zip(torso.convs, NATURE_CONVS, strict=True):
        assert isinstance(conv, nn.Conv2d)
        cw, cb = b.const(host(conv.weight)), b.const(host(conv.bias))
        x = b.op("Relu", b.op("Conv", x, cw, cb, strides=[stride, stride]))
    x = b.op("Flatten", x, axis=1)
    x = b.op("Relu", b.linear(x, torso.fc, quantize=False))
    w, bias = head
    b.dense(x, np.asarray(w, np.float32), np.asarray(bias, np.float32), quantize=False, out=out)
    c, h, wd = torso.obs_shape
    model = b.model(
        "actorq_nature_cnn",
        [helper.make_tensor_value_info("obs", TensorProto.UINT8, ["batch", c, h, wd])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", int(w.shape[1])])],
        doc,
    )
    return bytes(model.SerializeToString())
