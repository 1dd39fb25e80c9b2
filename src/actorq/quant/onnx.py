"""actorq's ONNX layers: how a dense layer is computed at each precision, and the model header.

Every policy an actor runs is an ONNX graph: the MLP of a
:class:`~actorq.quant.snapshot.PolicySnapshot` (:func:`actorq.quant.runtimes.to_onnx`), GO's
graph network (:mod:`actorq.agents.go.networks`) and the chip placement network
(:mod:`actorq.agents.ppo.chip_networks`), the last two on
:class:`~actorq.quant.onnx_builder.OnnxBuilder`. Their dense layers are written by their
formats (:meth:`actorq.quant.formats.WeightFormat.onnx`) with the nodes here: an fp32 MatMul,
actorq's int8 layer (int8 weights per output column, uint8 activations with one scale per row,
exact int32 sums: :func:`int8_linear`), or onnxruntime's ``MatMulNBits`` (:func:`int4_linear`).
:func:`finish_model` gives every graph actorq's opset and IR version.

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

from typing import Any

import numpy as np

ONNX_OPSET = 17
MS_DOMAIN = "com.microsoft"  # onnxruntime's contrib operators (MatMulNBits)
# MatMulNBits' accuracy_level 4 = int8 compute: ~3x faster than level 0 (fp32 compute on
# dequantized weights) at 3×2048, at the cost of int8 activations.
INT4_ACCURACY_LEVEL = 4
ONNX_IR_VERSION = 9  # onnx 1.23 writes IR 14 by default; onnxruntime 1.31 reads at most 13
#: onnxruntime's AVX2 integer kernels (x86 without VNNI) multiply uint8 activations by int8
#: weights and add each pair of products in int16 (``vpmaddubsw``), which saturates. Every int8
#: graph actorq writes keeps its levels inside this bound (:func:`int16_pairs_fit`) on every CPU,
#: not only on those without VNNI: a snapshot is made once by the learner and run by actors on
#: whatever machines they are, which must all compute the same actions.
INT16_MAX = 32767


def int16_pairs_fit(act_qmax: int, weight_qmax: int) -> bool:
    """Whether two uint8 × int8 products with activations up to ``act_qmax`` and weights up to
    ``weight_qmax`` in magnitude sum inside int16 (no saturation on AVX2)."""
    return 2 * act_qmax * weight_qmax <= INT16_MAX


#: Largest uint8 level of a dynamically quantized activation (the MLP's int8 layers, whose
#: weights use all 8 bits, ±127): 127, not 255, so that 2 × 127 × 127 = 32,258 fits the int16
#: pair sum; at 255 that sum saturated (found on an AMD EPYC with AVX2 only: outputs off by up
#: to 80% of the emulated ones). Signed activations get levels -63..63 around a zero point of
#: 64, for the same bound.
ACT_QMAX = 127
#: Statically calibrated activations (the convolutional actors, :meth:`~actorq.quant.onnx_builder.
#: OnnxBuilder.static_conv`) keep all 8 bits (uint8 0..255: a static scale already spends range
#: on the largest calibration state), so the same bound is met on the weights' side instead:
#: 7-bit weights, ±63 (2 × 255 × 63 = 32,130), as onnxruntime's own ``reduce_range`` does.
STATIC_ACT_QMAX = 255
STATIC_WEIGHT_BITS = max(
    b for b in range(2, 9) if int16_pairs_fit(STATIC_ACT_QMAX, 2 ** (b - 1) - 1)
)
assert int16_pairs_fit(ACT_QMAX, 127) and STATIC_WEIGHT_BITS == 7


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
    computes exactly what K calls of batch 1 would, at the same speed at 3×2048 (measured:
    ``git show 85997d5:docs/results.md``).
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


#: Precisions :class:`~actorq.quant.onnx_builder.OnnxBuilder` writes a whole network at (GO's
#: and the chip policy's).
ONNX_PRECISIONS: tuple[str, ...] = ("fp32", "int8")


def host(t: Any) -> np.ndarray:
    """A torch tensor's values as numpy, wherever it lives (a learner on ``--device cuda``
    exports its snapshots from the GPU)."""
    return np.asarray(t.detach().cpu().numpy())


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
