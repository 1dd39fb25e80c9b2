"""actorq's ONNX builder: a network written op by op, its dense layers by their formats.

GO's graph network (:mod:`actorq.agents.go.networks`) and the chip placement network
(:mod:`actorq.agents.ppo.chip_networks`) are written on :class:`OnnxBuilder`: it accumulates
nodes and initializers and names every intermediate. Its :meth:`~OnnxBuilder.dense` writes a
dense layer through the layer's format (:meth:`actorq.quant.formats.WeightFormat.onnx`), as a
:class:`~actorq.quant.snapshot.PolicySnapshot`'s layers are written
(:func:`actorq.quant.runtimes.to_onnx`): one place writes a dense layer of a given format.
:meth:`~OnnxBuilder.conv` writes a convolution at fp32, or on the int8 layer's scheme
(:mod:`actorq.quant.onnx`). The builder needs no torch: a layer's weights are numpy arrays, or
anything with ``.weight``/``.bias`` tensors that ``.detach().cpu().numpy()`` reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actorq.quant.formats import OnnxLayer, weight_format
from actorq.quant.onnx import ACT_QMAX, ONNX_PRECISIONS, finish_model, host
from actorq.quant.quantizer import quantize_int8

if TYPE_CHECKING:
    from torch import nn


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
