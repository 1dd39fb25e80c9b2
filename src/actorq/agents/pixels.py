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
(:class:`~actorq.core.loop.VectorActor`) run in onnxruntime (:class:`PixelPolicyIO`), at one of
:data:`PIXEL_PRECISIONS` (quantized actors: QuaRL, Lam et al., TMLR 2022):

- ``int8``: integer-arithmetic-only convolutions and fc layer (Jacob et al., CVPR 2018):
  ``QLinearConv`` / ``QGemm`` on uint8 activations with static scales calibrated on replay
  states at each publish (:func:`activation_max`), int8 weights per output channel, 7 bits
  (:data:`~actorq.quant.onnx.STATIC_WEIGHT_BITS`: no int16 saturation on AVX2). The uint8
  frame *is* the first layer's quantized input (scale 1/255, zero point 0), so the graph's
  ``/255`` is exact and free. The linear head stays fp32 (its rounding would land on the
  Q-values/logits directly; it is <0.1% of the compute).
- ``fp16``: weights stored in half precision (half the bytes), run by onnxruntime's fp32
  kernels (it has no fp16 convolution on x86 CPUs).
- ``int4`` is refused: onnxruntime has no 4-bit convolution (``MatMulNBits`` is a matmul).

Speeds on this CPU: ``benchmarks/atari_conv_speed.py`` and docs/atari.md.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from actorq.agents.policy_io import Comparison, compare_policies
from actorq.config import ExperimentConfig
from actorq.core.evaluation import evaluate
from actorq.errors import ConfigError, DivergedError
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.onnx import STATIC_WEIGHT_BITS, host
from actorq.quant.onnx_builder import OnnxBuilder, Rounded, static_scale
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
        if x.device.type == "cpu":
            # channels-last: oneDNN's convolutions (backward above all) ran 1.5x faster in
            # NHWC on the CPU (docs/atari.md, "The learner on this CPU"); the bytes are
            # reordered before they become floats (a 4x smaller copy). The values, and the
            # order ``flatten`` reads them in, are unchanged. Not measured on CUDA: left as is.
            x = x.contiguous(memory_format=torch.channels_last)
        x = x.to(torch.float32) / 255.0  # on the learner's device: bytes crossed, not floats
        for conv in self.convs:
            x = torch.relu(conv(x))
        return torch.relu(self.fc(x.flatten(1)))


#: precisions a convolutional policy is published at (int4: no 4-bit convolution kernel)
PIXEL_PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
#: replay states an int8 publish calibrates its activation scales on: a Nature-CNN forward pass
#: is ~20 MFLOP a state (an MLP's GPTQ takes ``--calibration-states``, 1,024 by default), and a
#: maximum over 256 states is within a few percent of one over thousands
PIXEL_CALIBRATION_STATES = 256


def activation_max(torso: NatureCNN, states: np.ndarray, chunk: int = 64) -> list[float]:
    """The largest value of each ReLU output (three convolutions, then the fc layer) of
    ``torso`` on ``states`` (uint8 stacks ``(n, C, H, W)``): the static activation ranges of an
    int8 model (min-max calibration; Jacob et al. 2018 collect the same ranges)."""
    return calibrate(torso, states, "nearest", chunk)[0]


#: im2col rows (patches) per layer GPTQ's Hessian is estimated from: a Nature-CNN's first conv
#: sees 400 patches a state, so 256 states give ~100k; 8,192 drawn from them estimate a 256×256
#: (conv) to 576×576 Hessian closely and keep a publish's calibration under ~0.1 s a layer
GPTQ_ROWS = 8192

#: how an int8 pixel snapshot's weights round, by ``--calibration`` (docs/atari.md measures
#: each on a trained Pong policy: agreement with fp32 and the cost of a publish)
PIXEL_ROUNDING = {"none": "nearest", "auto": "gptq-convs", "gptq": "gptq"}


def calibrate(
    torso: NatureCNN,
    states: np.ndarray,
    rounding: str = "gptq-convs",
    chunk: int = 64,
    rows: int = GPTQ_ROWS,
) -> tuple[list[float], list[Rounded | None]]:
    """One pass of ``torso`` over ``states`` (uint8 stacks): each ReLU output's largest value
    (:func:`activation_max`) and each layer's 7-bit weights: GPTQ's rounding on the layer's
    inputs there (:func:`~actorq.quant.calibration.gptq_uniform`; convolutions as matrix
    products over im2col patches, at most ``rows`` of them drawn per layer with a fixed seed,
    so a snapshot is a function of its weights and states) for the convolutions
    (``gptq-convs``), for the fc layer too (``gptq``: 3136 inputs, ~10× the convolutions' cost),
    or none (``nearest``). Returns ``(amax, rounded)``: ``rounded[i]`` = ``(q (in, out) int8,
    scale (out,))`` for :meth:`~actorq.quant.onnx_builder.OnnxBuilder.static_conv`, or None
    where the layer rounds to nearest."""
    from actorq.quant.calibration import gptq_uniform

    if rounding not in PIXEL_ROUNDING.values():
        raise ValueError(
            f"rounding must be one of {sorted(PIXEL_ROUNDING.values())}, not {rounding!r}"
        )
    layers: list[nn.Module] = [*torso.convs, torso.fc]
    gptq = [rounding == "gptq" or (rounding == "gptq-convs" and isinstance(m, nn.Conv2d))
            for m in layers]  # fmt: skip
    amax = [0.0] * len(layers)
    inputs: list[list[torch.Tensor]] = [[] for _ in layers]
    rng = torch.Generator().manual_seed(0)
    chunks = max(1, -(-len(states) // chunk))
    with torch.no_grad():
        for i in range(0, len(states), chunk):
            x = torch.from_numpy(np.ascontiguousarray(states[i : i + chunk])).float() / 255.0
            for j, layer in enumerate(layers):
                if not isinstance(layer, nn.Conv2d):
                    x = x.flatten(1)
                if gptq[j]:  # the layer's inputs as rows of a matrix product
                    conv = layer if isinstance(layer, nn.Conv2d) else None
                    n = len(x) * (1 if conv is None else positions(conv, x))
                    take = torch.randperm(n, generator=rng)[: -(-rows // chunks)]
                    inputs[j].append(x[take] if conv is None else patch_rows(x, conv, take))
                x = torch.relu(layer(x))
                amax[j] = max(amax[j], float(x.max()))
    rounded: list[Rounded | None] = []
    for layer, xs in zip(layers, inputs, strict=True):
        assert isinstance(layer, nn.Conv2d | nn.Linear)
        w = host(layer.weight).reshape(layer.weight.shape[0], -1).T  # (in, out)
        rounded.append(gptq_uniform(w, torch.cat(xs).numpy(), STATIC_WEIGHT_BITS) if xs else None)
    return amax, rounded


def positions(conv: nn.Conv2d, x: torch.Tensor) -> int:
    """Output positions of ``conv`` on ``x`` (B, C, H, W): im2col rows per state."""
    (kh, kw), (sh, sw) = conv.kernel_size, conv.stride
    return ((x.shape[2] - kh) // sh + 1) * ((x.shape[3] - kw) // sw + 1)


def patch_rows(x: torch.Tensor, conv: nn.Conv2d, take: torch.Tensor) -> torch.Tensor:
    """Rows ``take`` of ``x``'s im2col matrix under ``conv`` (``F.unfold`` transposed to one
    row per state and output position, state-major), gathered without building the matrix:
    at a publish's 256 states the whole matrix is ~100 MB for the first convolution, of which
    GPTQ keeps 8,192 rows."""
    if conv.padding != (0, 0) or conv.dilation != (1, 1) or conv.groups != 1:
        raise ValueError("patch_rows takes unpadded, undilated, ungrouped convolutions")
    (kh, kw), (sh, sw) = conv.kernel_size, conv.stride
    b, c, h, w = x.shape
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    x = x.contiguous()
    s = x.stride()
    # every patch as a view (state, row, column, channel, kh, kw): gathering whole patches by
    # three indices copies each as a block, ~2x faster than indexing every element
    view = x.as_strided((b, oh, ow, c, kh, kw), (s[0], s[2] * sh, s[3] * sw, s[1], s[2], s[3]))
    state, pos = take // (oh * ow), take % (oh * ow)
    return view[state, pos // ow, pos % ow].reshape(len(take), -1)


def activation_bound(torso: NatureCNN) -> list[float]:
    """Upper bounds of :func:`activation_max` over every possible frame (interval arithmetic,
    pixels in [0, 1]): the ranges of an int8 publish made before replay has states (the first
    snapshot). Never clipped, but coarse: the next publish calibrates on replay."""
    chan = np.ones(torso.obs_shape[0])  # each input channel's largest value
    bounds = []
    for conv in torso.convs:
        assert isinstance(conv, nn.Conv2d) and conv.bias is not None
        w = np.maximum(host(conv.weight), 0)  # (out, in, k, k): only positive weights add
        chan = np.maximum(np.einsum("oikl,i->o", w, chan) + host(conv.bias), 0)
        bounds.append(float(chan.max()))
    cells = torso.flat // len(chan)  # the flattened features: channel-major, cells within
    fc = np.maximum(host(torso.fc.weight), 0) @ np.repeat(chan, cells) + host(torso.fc.bias)
    bounds.append(float(np.maximum(fc, 0).max()))
    return bounds


def _int8_body(
    b: OnnxBuilder, torso: NatureCNN, amax: list[float], rounded: list[Rounded | None] | None
) -> str:
    """The torso on uint8 ``obs`` with static int8 layers; its 512 features in fp32.
    ``rounded``: each layer's integer weights and scales (:func:`calibrate`; None: nearest)."""
    r = list(rounded) if rounded is not None else [None] * (len(torso.convs) + 1)
    x, xs = "obs", 1.0 / 255.0  # the frame's bytes at scale 1/255: exactly the network's x / 255
    for conv, (_, _, stride), a, rw in zip(torso.convs, NATURE_CONVS, amax, r, strict=False):
        assert isinstance(conv, nn.Conv2d)
        ys = static_scale(a)
        x, xs = b.static_conv(x, xs, host(conv.weight), host(conv.bias), ys, stride, rw), ys
    x = b.op("Flatten", x, axis=1)
    ys = static_scale(amax[-1])
    x = b.static_dense(x, xs, host(torso.fc.weight).T, host(torso.fc.bias), ys, r[-1])
    return b.dequantize(x, ys)


def _float_body(b: OnnxBuilder, torso: NatureCNN, fp16: bool) -> str:
    """The torso on uint8 ``obs`` in fp32 (weights stored in fp16 if ``fp16``)."""
    from onnx import TensorProto

    x = b.op("Div", b.op("Cast", "obs", to=TensorProto.FLOAT), b.const(255.0))
    for conv, (_, _, stride) in zip(torso.convs, NATURE_CONVS, strict=True):
        assert isinstance(conv, nn.Conv2d)
        cw, cb = b.weight(host(conv.weight), fp16), b.weight(host(conv.bias), fp16)
        x = b.op("Relu", b.op("Conv", x, cw, cb, strides=[stride, stride]))
    x = b.op("Flatten", x, axis=1)
    fc_w, fc_b = b.weight(host(torso.fc.weight).T, fp16), b.weight(host(torso.fc.bias), fp16)
    return b.op("Relu", b.op("Add", b.op("MatMul", x, fc_w), fc_b))


def cnn_onnx(
    torso: NatureCNN,
    head: tuple[np.ndarray, np.ndarray],
    out: str,
    doc: str,
    precision: str = "fp32",
    amax: list[float] | None = None,
    rounded: list[Rounded | None] | None = None,
) -> bytes:
    """The torso and one linear ``head`` (``w`` (512, n), ``b`` (n,)) as an ONNX model at
    ``precision`` (:data:`PIXEL_PRECISIONS`): input ``obs`` ``(batch, C, H, W)`` uint8, output
    ``out`` ``(batch, n)`` float32. ``amax``: int8's activation ranges (:func:`activation_max`;
    default :func:`activation_bound`); ``rounded``: its integer weights (:func:`calibrate`;
    default round-to-nearest)."""
    from onnx import TensorProto, helper

    if precision not in PIXEL_PRECISIONS:
        raise ValueError(
            f"a convolutional policy is exported at {PIXEL_PRECISIONS}, not {precision}"
        )
    b = OnnxBuilder("fp32")
    if precision == "int8":
        x = _int8_body(b, torso, amax if amax is not None else activation_bound(torso), rounded)
    else:
        x = _float_body(b, torso, precision == "fp16")
    w, bias = head
    fp16 = precision == "fp16"  # int8's head is fp32 (see the module's docstring)
    b.op("Add", b.op("MatMul", x, b.weight(w, fp16)), b.weight(bias, fp16), out=out)
    c, h, wd = torso.obs_shape
    model = b.model(
        "actorq_nature_cnn",
        [helper.make_tensor_value_info("obs", TensorProto.UINT8, ["batch", c, h, wd])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", int(w.shape[1])])],
        doc,
    )
    return bytes(model.SerializeToString())


def check_pixel_config(cfg: ExperimentConfig, env_id: str) -> None:
    """One :class:`ConfigError` line for settings the pixel path does not run (called from
    a builder's ``env_spec``: before the run directory is written)."""
    if cfg.precision == "int4":
        raise ConfigError(
            f"{env_id}: --precision int4 has no convolution kernel in onnxruntime (its "
            "4-bit MatMulNBits is a matmul); pixel actors run fp32, fp16, int8 or auto"
        )
    if cfg.precision not in (*PIXEL_PRECISIONS, "auto"):
        raise ConfigError(f"{env_id}: unknown --precision {cfg.precision}")
    if cfg.runtime != "ort":
        raise ConfigError(
            f"{env_id}: actors run the exported ONNX network (--runtime ort), "
            f"not --runtime {cfg.runtime}"
        )
    if cfg.backend == "ray":
        raise ConfigError(f"{env_id}: pixels run on the sync and local backends for now")
    if getattr(cfg, "normalize_obs", None):
        raise ConfigError(f"{env_id}: pixels are scaled by 1/255, not --normalize-obs")


class PixelNetwork(Protocol):
    """An acting network over pixels: the Nature-CNN ``torso`` and one linear output layer."""

    torso: NatureCNN

    def export_head(self) -> tuple[np.ndarray, np.ndarray]: ...

    def parameters(self) -> Iterator[nn.Parameter]: ...


def pixel_snapshot(
    net: PixelNetwork,
    version: int,
    spec: EnvSpec,
    head: str,
    precision: str = "fp32",
    calibration: np.ndarray | None = None,
    rounding: str = "gptq-convs",
) -> ModelSnapshot:
    """``net`` exported at ``precision`` as an :data:`OBS_LOGITS` snapshot with ``head``; an int8
    one calibrated on ``calibration`` (replay states, uint8: activation ranges, and the weights'
    ``rounding``: ``nearest``, or GPTQ's for ``gptq-convs`` / ``gptq``, :func:`calibrate`), or
    bounded and rounded to nearest without them (``meta["calibration_states"]``: how many it was
    calibrated on, 0 for the bound; ``meta["rounding"]``: what its weights got)."""
    model = net
    if next(net.parameters()).device.type != "cpu":  # the exporter reads host arrays
        model = copy.deepcopy(net)
        assert isinstance(model, nn.Module)
        model.cpu()
    meta: dict[str, Any] = {"obs_dim": spec.obs_dim, "num_actions": spec.num_actions}
    meta.update(env=spec.env_id, head=head)
    amax, rounded = None, None
    with torch.no_grad():
        if precision == "int8":
            if calibration is not None and len(calibration):
                amax, rounded = calibrate(model.torso, calibration, rounding)
            meta["calibration_states"] = (
                0 if amax is None or calibration is None else len(calibration)
            )
            meta["rounding"] = "nearest" if amax is None else rounding
        doc = f"actorq v{version} {precision}"
        data = cnn_onnx(
            model.torso, model.export_head(), MODEL_HEADS[head], doc, precision, amax, rounded
        )
    return ModelSnapshot(version, precision, OBS_LOGITS, data, meta)


class PixelPolicyIO:
    """:class:`~actorq.agents.policy_io.PolicyIO` of a Nature-CNN policy (DQN's Q-network,
    PPO's policy): snapshots are :func:`pixel_snapshot` at any of :data:`PIXEL_PRECISIONS`
    (int8: calibrated on the replay states the publisher passes, ``calibration_states`` of
    them); they can be frozen and made on the publisher's thread (:meth:`freeze`); evaluations
    play episodes with the actors' runtime on the env family's evaluation settings (Atari: full
    games, raw score, sampled actions); quantized vs fp32 is compared on replay's states."""

    precisions = PIXEL_PRECISIONS

    def __init__(self, cfg: ExperimentConfig, spec: EnvSpec, net: PixelNetwork, head: str) -> None:
        self.cfg, self.spec, self.net, self.head = cfg, spec, net, head
        self.eval_label = "held-out, {episodes} ep"

    def is_finite(self) -> bool:
        return _finite(self.net)

    def calibration_states(self, precision: str) -> int:
        """Replay states a publish at ``precision`` calibrates on (0: none needed)."""
        return (
            min(self.cfg.calibration_states, PIXEL_CALIBRATION_STATES) if precision == "int8" else 0
        )

    def _check(self, precision: str) -> None:
        if precision not in PIXEL_PRECISIONS:
            raise ConfigError(
                f"a convolutional policy is published at {', '.join(PIXEL_PRECISIONS)}, "
                f"not {precision}"
            )

    def snapshot(
        self, version: int, precision: str, calibration: np.ndarray | None = None
    ) -> bytes:
        self._check(precision)
        rounding = PIXEL_ROUNDING[self.cfg.calibration]
        snap = pixel_snapshot(
            self.net, version, self.spec, self.head, precision, calibration, rounding
        )
        return snap.to_bytes()

    def freeze(
        self, version: int, precision: str, calibration: np.ndarray | None = None
    ) -> Callable[[], bytes]:
        """A copy of the network now (on the learner's thread: ~7 MB, milliseconds) and a
        function making its snapshot later on any thread (calibration and export included)."""
        self._check(precision)
        frozen = copy.deepcopy(self.net)
        assert isinstance(frozen, nn.Module)
        frozen.cpu()
        spec, head, rounding = self.spec, self.head, PIXEL_ROUNDING[self.cfg.calibration]

        def make() -> bytes:
            if not _finite(frozen):
                raise DivergedError("the learner's policy weights are NaN or infinite")
            snap = pixel_snapshot(frozen, version, spec, head, precision, calibration, rounding)
            return snap.to_bytes()

        return make

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


def _finite(net: Any) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in net.parameters())
