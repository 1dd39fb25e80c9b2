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

The network is not an MLP, so it is not quantized layer by layer: each publish exports the whole
acting network (:func:`cnn_onnx`) as an :data:`~actorq.quant.runtimes.OBS_LOGITS` model snapshot
with the agent's head (``q``: DQN, actions ε-greedy; ``categorical``: PPO, sampled), which actors
(:class:`~actorq.core.loop.VectorActor`) run in onnxruntime (:class:`PixelPolicyIO`). fp32 only
for now: int8 convolutions are the next step of issue 50 (``benchmarks/atari_conv_speed.py``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Protocol

import numpy as np
import torch
from torch import nn

from actorq.agents.policy_io import Comparison, compare_policies
from actorq.config import ExperimentConfig
from actorq.core.evaluation import evaluate
from actorq.errors import ConfigError
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.onnx import host
from actorq.quant.onnx_builder import OnnxBuilder
from actorq.quant.runtimes import MODEL_HEADS, OBS_LOGITS, decode_snapshot, make_runtime
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


#: precisions a convolutional policy is published at today
PIXEL_PRECISIONS: tuple[str, ...] = ("fp32",)


def check_pixel_config(cfg: ExperimentConfig, spec: EnvSpec) -> None:
    """One :class:`ConfigError` line for settings the pixel path does not run yet (called from
    a builder's ``env_spec``: before the run directory is written)."""
    if cfg.precision not in PIXEL_PRECISIONS:
        raise ConfigError(
            f"{spec.env_id}: actors run the convolutional network in fp32 for now, not "
            f"--precision {cfg.precision} (int8 convolutions: issue 50)"
        )
    if cfg.runtime != "ort":
        raise ConfigError(
            f"{spec.env_id}: actors run the exported ONNX network (--runtime ort), "
            f"not --runtime {cfg.runtime}"
        )
    if cfg.backend == "ray":
        raise ConfigError(f"{spec.env_id}: pixels run on the sync and local backends for now")
    if getattr(cfg, "normalize_obs", None):
        raise ConfigError(f"{spec.env_id}: pixels are scaled by 1/255, not --normalize-obs")


class PixelNetwork(Protocol):
    """An acting network over pixels: the Nature-CNN ``torso`` and one linear output layer."""

    torso: NatureCNN

    def export_head(self) -> tuple[np.ndarray, np.ndarray]: ...

    def parameters(self) -> Iterator[nn.Parameter]: ...


def pixel_snapshot(net: PixelNetwork, version: int, spec: EnvSpec, head: str) -> ModelSnapshot:
    """``net`` exported in fp32 as an :data:`OBS_LOGITS` snapshot with ``head``."""
    model = net
    if next(net.parameters()).device.type != "cpu":  # the exporter reads host arrays
        model = copy.deepcopy(net)
        assert isinstance(model, nn.Module)
        model.cpu()
    with torch.no_grad():
        data = cnn_onnx(model.torso, model.export_head(), MODEL_HEADS[head], f"actorq v{version}")
    meta = {"obs_dim": spec.obs_dim, "num_actions": spec.num_actions, "env": spec.env_id}
    return ModelSnapshot(version, "fp32", OBS_LOGITS, data, {**meta, "head": head})


class PixelPolicyIO:
    """:class:`~actorq.agents.policy_io.PolicyIO` of a Nature-CNN policy (DQN's Q-network,
    PPO's policy): snapshots are :func:`pixel_snapshot`; evaluations are greedy episodes with
    the actors' runtime on the env family's evaluation settings (Atari: full games, raw
    score); quantized vs fp32 is compared on replay's states (identical while both are fp32)."""

    def __init__(self, cfg: ExperimentConfig, spec: EnvSpec, net: PixelNetwork, head: str) -> None:
        self.cfg, self.spec, self.net, self.head = cfg, spec, net, head
        self.eval_label = "held-out, {episodes} ep"

    def is_finite(self) -> bool:
        return all(bool(torch.isfinite(p).all()) for p in self.net.parameters())

    def snapshot(
        self, version: int, precision: str, calibration: np.ndarray | None = None
    ) -> bytes:
        if precision not in PIXEL_PRECISIONS:
            raise ConfigError(f"a convolutional policy is published in fp32, not {precision}")
        return pixel_snapshot(self.net, version, self.spec, self.head).to_bytes()

    def evaluate(self, data: bytes, episodes: int, seed: int) -> np.ndarray:
        snap = decode_snapshot(data)
        assert isinstance(snap, ModelSnapshot)
        rt = make_runtime(snap, "ort", self.cfg.actor_threads)
        return evaluate(rt, self.cfg.env, episodes, seed, self.cfg.env_kwargs())

    def compare(
        self, quant: bytes, fp32: bytes, states: np.ndarray | None, seed: int
    ) -> Comparison:
        if states is None:
            states = np.zeros((0, *self.spec.observation.shape), np.uint8)
        a, b = decode_snapshot(quant), decode_snapshot(fp32)
        agree, _, gap = compare_policies(a, b, states, self.cfg.envs_per_actor, seed)
        return Comparison(agree, len(states), "replay states", None, gap)

    def summary_rows(self, data: bytes) -> list[tuple[str, str]]:
        return []  # the evaluation's return is the game's raw score
