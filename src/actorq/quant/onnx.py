"""actorq's ONNX writer: the one place that knows how a layer is written at each precision.

Every policy an actor runs is an ONNX graph written here: the MLP of a
:class:`~actorq.quant.snapshot.PolicySnapshot` (:func:`actorq.quant.runtimes.to_onnx`), GO's
graph network (:mod:`actorq.agents.go.networks`) and the chip placement network
(:mod:`actorq.agents.ppo.chip_networks`). :class:`OnnxBuilder` accumulates nodes and
initializers; its :meth:`~OnnxBuilder.dense` and :meth:`~OnnxBuilder.conv` write an fp32 layer
or actorq's int8 one (int8 weights per output column/channel, uint8 activations with one scale
per row, exact int32 sums: :func:`int8_linear`); :func:`int4_linear` writes onnxruntime's
``MatMulNBits``. The builder needs no torch: a layer's weights are numpy arrays, or anything
with ``.weight``/``.bias`` tensors that ``.detach().cpu().numpy()`` reads.

An int8 layer quantizes its input activations to uint8 with one scale per row, multiplies them
with int8 weights in exact int32 (``MatMulInteger``), and rescales by row scale × per-column
weight scale in fp32. Activations use 7 of the 8 bits (:data:`ACT_QMAX`): onnxruntime's AVX2
kernels (x86 without VNNI) add pairs of uint8 × int8 products in int16 (``vpmaddubsw``), which
saturates for uint8 values above 128, so with all 8 bits an int8 policy computed different
(wrong) outputs on such CPUs than on VNNI ones; with 7 it is exact int32 on every x86 CPU. An
int4 layer is one ``com.microsoft::MatMulNBits`` node (4-bit weights, a scale per block of 32
inputs) at ``accuracy_level=4``: onnxruntime quantizes the activations to int8 per row and per
block of 32 and sums in int32 with VNNI, instead of dequantizing the weights to fp32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from torch import nn

ONNX_OPSET = 17
MS_DOMAIN = "com.microsoft"  # onnxruntime's contrib operators (MatMulNBits)
# MatMulNBits' accuracy_level 4 = int8 compute: ~3x faster than level 0 (fp32 compute on
# dequantized weights) at 3×2048, at the cost of int8 activations.
INT4_ACCURACY_LEVEL = 4
ONNX_IR_VERSION = 9  # onnx 1.23 writes IR 14 by default; onnxruntime 1.31 reads at most 13
#: Largest uint8 level of a quantized activation: 127, not 255, so that two uint8 × int8 products
#: (|w| <= 127) sum to at most 2 × 127 × 127 = 32,258 and fit the int16 that onnxruntime's AVX2
#: kernel (``vpmaddubsw``, no VNNI) adds them in; at 255 that sum saturated (found on an AMD EPYC
#: with AVX2 only: outputs off by up to 80% of the emulated ones). Signed activations get
#: levels -63..63 around a zero point of 64, for the same bound.
ACT_QMAX = 127


def int8_linear(
    x: str,
    y: str,
    i: int,
    w: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    init: Any,
    nonnegative: bool,
) -> list[Any]:
    """``y = x @ (w * scale) + bias`` with int8 weights and uint8 activations, exact int32 sums.

    Activations are quantized with one scale per row (per state), not per call: with
    onnxruntime's fused DynamicQuantizeMatMul the scale is shared by the whole batch, so one
    state with large activations coarsens the others and an actor's action for a state would
    depend on which states its other environments happen to be in. Per row, the batch of K
    computes exactly what K calls of batch 1 would, at the same speed at 3×2048 (measured in
    docs/results.md).
    """
    from onnx import TensorProto, helper

    p = f"q{i}_"
    if scale.shape[0] == 1:  # per-tensor weights: the same scale for every column
        scale = np.full(w.shape[1], scale[0], dtype=np.float32)
    half = (ACT_QMAX + 1) // 2
    if nonnegative:  # post-ReLU: uint8 levels 0..ACT_QMAX with zero point 0
        absmax, qmax, zero_point = [x], float(ACT_QMAX), []
        to_uint8 = [helper.make_node("Cast", [p + "xr"], [p + "xq"], to=TensorProto.UINT8)]
        prologue = []
    else:  # signed inputs: symmetric levels -63..63, stored with zero point 64
        zp = init(p + "zp", np.array([half], np.uint8))
        absmax, qmax, zero_point = [p + "abs"], float(half - 1), [zp]
        prologue = [helper.make_node("Abs", [x], [p + "abs"])]
        to_uint8 = [
            helper.make_node(
                "Add", [p + "xr", init(p + "zpf", np.array([float(half)], np.float32))], [p + "xu"]
            ),
            helper.make_node("Cast", [p + "xu"], [p + "xq"], to=TensorProto.UINT8),
        ]
    return [
        *prologue,
        helper.make_node("ReduceMax", absmax, [p + "amax"], keepdims=1, axes=[1]),
        helper.make_node(
            "Max", [p + "amax", init(p + "tiny", np.array([1e-30], np.float32))], [p + "m"]
        ),
        helper.make_node(
            "Div", [p + "m", init(p + "qmax", np.array([qmax], np.float32))], [p + "xs"]
        ),
        helper.make_node("Div", [x, p + "xs"], [p + "xd"]),
        helper.make_node("Round", [p + "xd"], [p + "xr"]),
        *to_uint8,
        helper.make_node("MatMulInteger", [p + "xq", init(f"w{i}", w), *zero_point], [p + "acc"]),
        helper.make_node("Cast", [p + "acc"], [p + "accf"], to=TensorProto.FLOAT),
        # Column scales, then row scales, then bias. In the other order (row × column scales
        # first) onnxruntime 1.31's MatMulIntegerToFloat fusion folds the bias in wrongly
        # (tests/quant/test_runtimes.py checks this graph against a numpy emulation).
        helper.make_node("Mul", [p + "accf", init(f"s{i}", scale[None, :])], [p + "mc"]),
        helper.make_node("Mul", [p + "mc", p + "xs"], [p + "mm"]),
        helper.make_node("Add", [p + "mm", init(f"b{i}", bias)], [y]),
    ]


def int4_linear(
    x: str,
    y: str,
    i: int,
    packed: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    init: Any,
    in_dim: int,
) -> list[Any]:
    """``y = x @ dequant(packed, scale) + bias`` with onnxruntime's ``MatMulNBits``.

    The snapshot already holds B in the operator's layout (``(N, blocks, 16)`` uint8, low nibble
    first, values offset by the default zero point 8) and the scales as ``(N, blocks)``, so no
    zero-point input is needed. At ``accuracy_level=4`` onnxruntime quantizes each row of ``x``
    per block of 32 to int8 (scale = block absmax / 127): per row, so as with the int8 layers a
    state's output does not depend on the rest of the batch (tests/quant/test_int4.py).
    The bias is a separate Add, as for the fp32 layers.
    """
    from onnx import helper

    n_out = packed.shape[0]
    matmul = helper.make_node(
        "MatMulNBits",
        [x, init(f"w{i}", packed), init(f"s{i}", scale.astype(np.float32, copy=False))],
        [f"m{i}"],
        domain=MS_DOMAIN,
        K=in_dim,
        N=n_out,
        bits=4,
        block_size=2 * packed.shape[2],
        accuracy_level=INT4_ACCURACY_LEVEL,
    )
    return [matmul, helper.make_node("Add", [f"m{i}", init(f"b{i}", bias)], [y])]


#: Precisions :class:`OnnxBuilder` writes a whole network at (GO's and the chip policy's).
ONNX_PRECISIONS: tuple[str, ...] = ("fp32", "int8")


def host(t: Any) -> np.ndarray:
    """A torch tensor's values as numpy, wherever it lives (a learner on ``--device cuda``
    exports its snapshots from the GPU)."""
    return np.asarray(t.detach().cpu().numpy())


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
        """``x @ w + b`` for ``w`` (in, out); :func:`int8_linear` when the builder writes int8
        and ``quantize`` (``nonnegative``: ``x`` is post-ReLU, so all 7 bits hold magnitude)."""
        from actorq.quant.quantizer import quantize_int8

        y = out or self.name()
        if quantize and self.precision == "int8":
            q, s = quantize_int8(w, "per_channel")
            i = self._layers
            self._layers += 1
            self.nodes += int8_linear(x, y, i, q, s, b, self.init, nonnegative)
            return y
        m = self.op("MatMul", x, self.const(w))
        return self.op("Add", m, self.const(b), out=y)

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

        from actorq.quant.quantizer import quantize_int8

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


def finish_model(
    nodes: list[Any], inits: list[Any], name: str, inputs: list[Any], outputs: list[Any], doc: str
) -> Any:
    """An ``onnx.ModelProto`` of ``nodes`` at :data:`ONNX_OPSET` and :data:`ONNX_IR_VERSION`."""
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    opsets = [helper.make_opsetid("", ONNX_OPSET)]
    if any(n.domain == MS_DOMAIN for n in nodes):
        opsets.append(helper.make_opsetid(MS_DOMAIN, 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="actorq")
    model.ir_version = ONNX_IR_VERSION
    model.doc_string = doc
    return model
