"""actorq's ONNX builder: a network written op by op, its dense layers by their formats.

GO's graph network (:mod:`actorq.agents.go.networks`) and the chip placement network
(:mod:`actorq.agents.ppo.chip_networks`) are written on :class:`OnnxBuilder`: it accumulates
nodes and initializers and names every intermediate. Its :meth:`~OnnxBuilder.dense` writes a
dense layer through the layer's format (:meth:`actorq.quant.formats.WeightFormat.onnx`), as a
:class:`~actorq.quant.snapshot.PolicySnapshot`'s layers are written
(:func:`actorq.quant.runtimes.to_onnx`): one place writes a dense layer of a given format.
:meth:`~OnnxBuilder.conv` writes a convolution at fp32, or on the int8 layer's scheme
(:mod:`actorq.quant.onnx`). :meth:`~OnnxBuilder.static_conv` and
:meth:`~OnnxBuilder.static_dense` are integer-arithmetic-only layers with calibrated (static)
activation scales (Jacob et al., "Quantization and Training of Neural Networks for Efficient
Integer-Arithmetic-Only Inference", CVPR 2018): uint8 in, uint8 out, onnxruntime's
``QLinearConv`` / ``QGemm``; the convolutional actors (:mod:`actorq.agents.pixels`) chain them.
The builder needs no torch: a layer's weights are numpy arrays, or
anything with ``.weight``/``.bias`` tensors that ``.detach().cpu().numpy()`` reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actorq.quant.formats import OnnxLayer, weight_format
from actorq.quant.onnx import (
    ACT_QMAX,
    MS_DOMAIN,
    ONNX_PRECISIONS,
    STATIC_ACT_QMAX,
    STATIC_WEIGHT_BITS,
    finish_model,
    host,
)
from actorq.quant.quantizer import quantize_int8, quantize_uniform

if TYPE_CHECKING:
    from torch import nn


#: a layer's integer weights ``(in, out)`` and per-output-channel scales, rounded ahead (GPTQ)
Rounded = tuple[np.ndarray, np.ndarray]

#: a bias's bound in int32 at the sums' scale, with headroom for the products it is added to
INT32_FIT = float(2**30)


def static_scale(amax: float) -> float:
    """The static scale of a nonnegative activation whose calibrated maximum is ``amax``: uint8
    levels 0..:data:`STATIC_ACT_QMAX` cover [0, amax] (a dead layer, amax 0, gets a tiny scale:
    every level then stands for about 0)."""
    return max(float(amax), 1e-8) / STATIC_ACT_QMAX


class OnnxBuilder:
    """Accumulates an ONNX graph's nodes and initializers; names every intermediate ``t<k>``.

    ``precision`` ("fp32" or "int8") decides how :meth:`dense` and :meth:`conv` write a layer
    asked to ``quantize``; layers not asked stay fp32 (e.g. output layers, whose rounding lands
    directly on the logits).
    """

    def __init__(self, precision: str) -> None:
        if precision not in ONNX_PRECISIONS:
            raise ValueError(f"precision must be 'fp32' or 'int8', got {precision!r}")
        self.precision = precision
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._k = 0
        self._layers = 0
        self._convs = 0

    def name(self) -> str:
        self._k += 1
        return f"t{self._k}"

    def init(self, name: str, arr: np.ndarray) -> str:
        """Add ``arr`` as the initializer ``name`` (its dtype kept); returns ``name``."""
        from onnx import helper

        arr = np.ascontiguousarray(arr)
        dt = helper.np_dtype_to_tensor_dtype(arr.dtype)
        self.inits.append(helper.make_tensor(name, dt, arr.shape, arr.tobytes(), raw=True))
        return name

    def const(self, arr: np.ndarray | float | list[int]) -> str:
        """A constant: float32 for floats, int64 otherwise (ONNX's shapes and axes)."""
        a = np.asarray(arr)
        a = a.astype(np.float32) if a.dtype.kind == "f" else a.astype(np.int64)
        return self.init("c" + self.name(), a)

    def op(self, kind: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        y = out or self.name()
        self.nodes.append(helper.make_node(kind, list(inputs), [y], **attrs))
        return y

    def linear(self, x: str, lin: nn.Linear, *, quantize: bool, nonnegative: bool = False) -> str:
        """``x @ W^T + b`` of a torch linear layer: see :meth:`dense`."""
        w = host(lin.weight).T.astype(np.float32)
        b = host(lin.bias).astype(np.float32)
        return self.dense(x, w, b, quantize=quantize, nonnegative=nonnegative)

    def dense(
        self,
        x: str,
        w: np.ndarray,
        b: np.ndarray,
        *,
        quantize: bool,
        nonnegative: bool = False,
        out: str | None = None,
    ) -> str:
        """``x @ w + b`` for ``w`` (in, out), written by its format (:mod:`actorq.quant.formats`,
        as a snapshot's layers are): the builder's precision when ``quantize``, else fp32
        (``nonnegative``: ``x`` is post-ReLU, so an int8 layer's 7 bits all hold magnitude)."""
        fmt = weight_format(self.precision if quantize else "fp32")
        stored = fmt.encode(w, "per_channel", None)
        i = self._layers  # names the layer's initializers (w{i}, b{i}, ...)
        self._layers += 1
        y = out or self.name()
        b = np.asarray(b, np.float32)
        layer = OnnxLayer(x, y, i, stored["w"], stored.get("s"), b, self.init, nonnegative, len(w))
        self.nodes += fmt.onnx(layer)
        return y

    def conv(
        self, x: str, w: np.ndarray, bias: np.ndarray, pads: list[int], *, quantize: bool
    ) -> str:
        """``conv(x)`` (NCHW, stride 1) for a nonnegative ``x`` (input planes, or after a ReLU).

        int8 (when the builder writes int8 and ``quantize``): weights int8 per output channel,
        activations uint8 with zero point 0 and one scale per observation (``max /``
        :data:`ACT_QMAX`, over its channels and cells), exact int32 sums in ``ConvInteger``,
        then the two scales and the bias in fp32; the scheme of :func:`int8_linear` with a whole
        observation as the row, so an observation's output never depends on the batch."""
        from onnx import TensorProto

        w = np.asarray(w, np.float32)
        bias = np.asarray(bias, np.float32)
        if not (quantize and self.precision == "int8"):
            return self.op("Conv", x, self.const(w), self.const(bias), pads=pads)
        out_ch = w.shape[0]
        q, s = quantize_int8(w.reshape(out_ch, -1).T, "per_channel")  # columns = out channels
        i = self._convs
        self._convs += 1
        wq = self.init(f"cw{i}", np.ascontiguousarray(q.T.reshape(w.shape)))
        amax = self.op("ReduceMax", x, axes=[1, 2, 3], keepdims=1)  # (B, 1, 1, 1)
        xs = self.op(
            "Div",
            self.op("Max", amax, self.const(np.array([1e-30], np.float32))),
            self.const(np.array([float(ACT_QMAX)], np.float32)),
        )
        xq = self.op("Cast", self.op("Round", self.op("Div", x, xs)), to=TensorProto.UINT8)
        zp = self.init(f"cz{i}", np.array(0, np.uint8))
        acc = self.op("Cast", self.op("ConvInteger", xq, wq, zp, pads=pads), to=TensorProto.FLOAT)
        y = self.op("Mul", self.op("Mul", acc, self.const(s.reshape(1, out_ch, 1, 1))), xs)
        return self.op("Add", y, self.const(bias.reshape(1, out_ch, 1, 1)))

    def typed(self, arr: np.ndarray) -> str:
        """A constant of ``arr``'s own dtype and shape (uint8 zero points, int32 biases, float32
        scales; a 0-d array stays a scalar, as ``QLinearConv``'s scales and zero points are)."""
        from onnx import numpy_helper

        name = "c" + self.name()
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(self, arr: np.ndarray, fp16: bool = False) -> str:
        """An fp32 weight for an fp32 op: stored as is, or (``fp16``) stored in half precision
        and cast back in the graph. onnxruntime folds the cast into the initializer when the
        session is made, so an fp16 model is half the bytes on the wire and runs the fp32
        kernels (its CPU provider has no fp16 convolution on x86)."""
        a = np.asarray(arr, np.float32)
        if not fp16:
            return self.const(a)
        from onnx import TensorProto

        with np.errstate(over="ignore"):  # an overflow becomes inf, which validation refuses
            half = self.init("h" + self.name(), a.astype(np.float16))
        return self.op("Cast", half, to=TensorProto.FLOAT)

    def _static_weights(
        self,
        w: np.ndarray,
        bias: np.ndarray,
        x_scale: float,
        rounded: Rounded | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``w`` (out, ...) as int8 per output channel at :data:`STATIC_WEIGHT_BITS` (symmetric),
        their scales, and the bias in int32 at scale ``x_scale × weight scale`` (the scale of
        the integer sums it is added to, Jacob et al. 2018, eq. 9). ``rounded``: the integers
        ``(in, out)`` and scales to use instead of round-to-nearest (GPTQ's, on the same scales).

        Where a bias would not fit int32 at that scale (a tiny ``x_scale``: an input layer that
        calibrated to ~0, i.e. dead ReLUs), the channel's weight scale is widened until it fits,
        as onnxruntime's static quantizer does: clipping the bias instead made such a layer
        output ~0 where fp32 outputs ReLU(bias), and int8 actors act unlike fp32 ones."""
        out_ch = w.shape[0]
        flat = np.asarray(w, np.float32).reshape(out_ch, -1).T  # (in, out): columns = channels
        q, s = rounded if rounded is not None else quantize_uniform(flat, STATIC_WEIGHT_BITS)
        if q.shape != flat.shape or s.shape != (out_ch,):
            raise ValueError(f"rounded weights {q.shape}/{s.shape} for a layer of {flat.shape}")
        b64 = np.asarray(bias, np.float64)
        need = np.abs(b64) / (np.float64(x_scale) * INT32_FIT)  # the least scale that fits
        wide = need > s
        if wide.any():  # only those channels: the others keep their (GPTQ) rounding
            qmax = 2 ** (STATIC_WEIGHT_BITS - 1) - 1
            s = np.where(wide, need, s).astype(np.float32)
            q = np.array(q, np.int8, copy=True)
            q[:, wide] = np.clip(np.rint(flat[:, wide] / s[wide]), -qmax, qmax)
        acc_scale = np.float64(x_scale) * s.astype(np.float64)
        bq = np.clip(np.rint(b64 / acc_scale), -(2**31), 2**31 - 1)
        return np.ascontiguousarray(q.T.reshape(w.shape)), s, bq.astype(np.int32)

    def _scale_zero(self, scale: float) -> tuple[str, str]:
        """A static activation scale and its uint8 zero point 0 (post-ReLU: nothing below 0)."""
        return self.typed(np.array(scale, np.float32)), self.typed(np.array(0, np.uint8))

    def static_conv(
        self,
        xq: str,
        x_scale: float,
        w: np.ndarray,
        bias: np.ndarray,
        y_scale: float,
        stride: int,
        rounded: Rounded | None = None,
    ) -> str:
        """``ReLU(conv(x))`` (NCHW, no padding) from uint8 ``xq`` (``x ≈ x_scale × xq``) to
        uint8 at ``y_scale``: one ``QLinearConv``, int32 sums, requantized once. The output's
        zero point is 0, so the uint8 clamp at 0 is the ReLU. Weights: :meth:`_static_weights`;
        scales are calibrated ahead (``y_scale``: the largest activation on calibration states
        / :data:`STATIC_ACT_QMAX`), so a state's output never depends on the batch."""
        wq, s, bq = self._static_weights(w, bias, x_scale, rounded)
        zero_w = self.typed(np.zeros(len(s), np.int8))
        return self.op(
            "QLinearConv",
            xq,
            *self._scale_zero(x_scale),
            self.typed(wq),
            self.typed(s),
            zero_w,
            *self._scale_zero(y_scale),
            self.typed(bq),
            strides=[stride, stride],
        )

    def static_dense(
        self,
        xq: str,
        x_scale: float,
        w: np.ndarray,
        bias: np.ndarray,
        y_scale: float,
        rounded: Rounded | None = None,
    ) -> str:
        """``ReLU(x @ w + b)`` for ``w`` (in, out), uint8 in and out as :meth:`static_conv`:
        onnxruntime's ``com.microsoft::QGemm`` (per-column weight scales)."""
        wq, s, bq = self._static_weights(np.asarray(w, np.float32).T, bias, x_scale, rounded)
        from onnx import helper

        y = self.name()
        ins = [xq, *self._scale_zero(x_scale), self.typed(wq), self.typed(s)]
        ins += [self.typed(np.zeros(len(s), np.int8)), self.typed(bq), *self._scale_zero(y_scale)]
        self.nodes.append(helper.make_node("QGemm", ins, [y], domain=MS_DOMAIN, transB=1))
        return y

    def dequantize(self, xq: str, scale: float) -> str:
        """uint8 ``xq`` at ``scale`` (zero point 0) back to float32."""
        return self.op("DequantizeLinear", xq, *self._scale_zero(scale))

    def layer_norm(self, x: str, ln: nn.LayerNorm) -> str:
        return self.op(
            "LayerNormalization",
            x,
            self.const(host(ln.weight)),
            self.const(host(ln.bias)),
            axis=-1,
            epsilon=float(ln.eps),
        )

    def model(self, name: str, inputs: list[Any], outputs: list[Any], doc: str) -> Any:
        """The finished ``onnx.ModelProto`` (actorq's opset and IR version; onnxruntime's
        contrib domain when a node uses it)."""
        return finish_model(self.nodes, self.inits, name, inputs, outputs, doc)
