"""Precision formats of a snapshot's weights: one class each, one registry line each.

A format says how an fp32 weight matrix ``(in, out)`` is stored in a snapshot (:meth:`encode`),
what a stored layer must look like (:meth:`check`), what it represents (:meth:`decode`, for the
numpy and torch runtimes and for calibration) and how onnxruntime computes with it
(:meth:`onnx`). Everything else (the snapshot, the runtimes, the CLI's choices, auto-select)
asks :data:`FORMATS`, so a new format (fp8, nf4) is a class here and a line in the table.

Which format stores layer ``i`` follows from the snapshot's precision alone
(:func:`layer_format`): a format with ``io_fp32`` keeps the first and last layers in fp32 (as
most int8 and int4 deployments do: together <1% of a 3×2048 policy's bytes and compute, and
their quantization noise is the most harmful), so no reader tells formats apart by dtype.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np

from actorq.quant.quantizer import (
    INT4_BLOCK,
    Granularity,
    dequantize_int4,
    int4_blocks,
    quantize_int4,
    quantize_int8,
    to_fp16,
)

#: The precisions a run, a snapshot or an export can name (the CLI's choices). Kept equal to
#: :data:`FORMATS`' keys (tests/quant/test_formats.py).
Precision = Literal["fp32", "fp16", "int8", "int4"]

#: ``init(name, array) -> name``: adds an initializer to the ONNX graph being written.
Init = Callable[[str, np.ndarray], str]


@dataclasses.dataclass(frozen=True)
class OnnxLayer:
    """One stored layer to write into an ONNX graph: ``y = x @ W + b`` (names ``x``, ``y``)."""

    x: str
    y: str
    i: int  # the layer's index: names its initializers
    w: np.ndarray
    s: np.ndarray | None
    b: np.ndarray
    init: Init
    nonnegative: bool  # ``x`` is post-ReLU: an int8 layer spends all 7 bits on magnitude
    in_dim: int


class WeightFormat(abc.ABC):
    """How one layer's weights are stored at one precision."""

    name: ClassVar[str]
    bits: ClassVar[int]
    """Bits per stored weight (scales not counted)."""
    io_fp32: ClassVar[bool] = False
    """The first and last layers of a snapshot at this precision stay fp32."""
    calibrated: ClassVar[bool] = False
    """Rounding can use calibration states (GPTQ, :mod:`actorq.quant.calibration`)."""

    @abc.abstractmethod
    def encode(
        self, w: np.ndarray, granularity: Granularity, calib_x: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        """A layer's stored tensors: ``{"w": ...}`` plus ``{"s": scales}`` if it has them.
        ``calib_x``: the layer's fp32 inputs on calibration states (or None: round to
        nearest)."""

    @abc.abstractmethod
    def check(self, w: np.ndarray, s: np.ndarray | None, in_dim: int, out_dim: int) -> bool:
        """Whether stored tensors ``w`` (and ``s``) are a well-formed ``(in_dim, out_dim)``
        layer of this format (shapes and dtypes; finiteness is checked for every tensor)."""

    @abc.abstractmethod
    def decode(self, w: np.ndarray, s: np.ndarray | None, in_dim: int) -> np.ndarray:
        """The float32 ``(in, out)`` matrix the stored layer represents."""

    @abc.abstractmethod
    def onnx(self, layer: OnnxLayer) -> list[Any]:
        """ONNX nodes computing ``layer.y = layer.x @ W + layer.b``."""

    def granularity(self, requested: Granularity) -> str:
        """What the snapshot records as its scales' granularity."""
        return requested


class _Float(WeightFormat):
    dtype: ClassVar[type[np.floating[Any]]]

    def check(self, w: np.ndarray, s: np.ndarray | None, in_dim: int, out_dim: int) -> bool:
        return w.dtype == self.dtype and w.shape == (in_dim, out_dim) and s is None

    def decode(self, w: np.ndarray, s: np.ndarray | None, in_dim: int) -> np.ndarray:
        return np.asarray(w, dtype=np.float32)

    def onnx(self, layer: OnnxLayer) -> list[Any]:
        from onnx import helper

        # fp16 is a broadcast format: onnxruntime's CPU provider has no fast fp16 GEMM on x86
        n, i = layer, layer.i
        wf = n.init(f"w{i}", n.w.astype(np.float32))
        return [
            helper.make_node("MatMul", [n.x, wf], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", n.init(f"b{i}", n.b)], [n.y]),
        ]


class FP32(_Float):
    name, bits, dtype = "fp32", 32, np.float32

    def encode(
        self, w: np.ndarray, granularity: Granularity, calib_x: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        return {"w": np.ascontiguousarray(w, dtype=np.float32)}


class FP16(_Float):
    """Weights rounded to IEEE half precision (every layer), computed in fp32."""

    name, bits, dtype = "fp16", 16, np.float16

    def encode(
        self, w: np.ndarray, granularity: Granularity, calib_x: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        return {"w": np.ascontiguousarray(to_fp16(w))}


class INT8(WeightFormat):
    """Symmetric int8 weights, a float32 scale per output column (or one per tensor); run as
    :func:`actorq.quant.onnx.int8_linear` (uint8 activations per row, exact int32 sums)."""

    name, bits, io_fp32, calibrated = "int8", 8, True, True

    def encode(
        self, w: np.ndarray, granularity: Granularity, calib_x: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        from actorq.quant.calibration import gptq_int8

        # ``w`` may be a transposed view of the learner's weights: quantize, then lay out only
        # the int8 result (4× fewer bytes to move than the fp32 input)
        q, s = (
            gptq_int8(w, calib_x, granularity)
            if calib_x is not None
            else quantize_int8(w, granularity)
        )
        return {"w": np.ascontiguousarray(q), "s": s}

    def check(self, w: np.ndarray, s: np.ndarray | None, in_dim: int, out_dim: int) -> bool:
        return (
            w.dtype == np.int8
            and w.shape == (in_dim, out_dim)
            and s is not None
            and s.dtype == np.float32
            and s.shape in ((out_dim,), (1,))
        )

    def decode(self, w: np.ndarray, s: np.ndarray | None, in_dim: int) -> np.ndarray:
        assert s is not None
        return np.asarray(w.astype(np.float32) * s, dtype=np.float32)

    def onnx(self, layer: OnnxLayer) -> list[Any]:
        from actorq.quant.onnx import int8_linear

        n = layer
        assert n.s is not None
        return int8_linear(n.x, n.y, n.i, n.w, n.s, n.b, n.init, n.nonnegative)


class INT4(WeightFormat):
    """Symmetric 4-bit weights in blocks of 32 inputs, packed in onnxruntime's ``MatMulNBits``
    layout (:func:`~actorq.quant.quantizer.quantize_int4`)."""

    name, bits, io_fp32, calibrated = "int4", 4, True, True

    def encode(
        self, w: np.ndarray, granularity: Granularity, calib_x: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        from actorq.quant.calibration import gptq_int4

        packed, s = gptq_int4(w, calib_x) if calib_x is not None else quantize_int4(w)
        return {"w": packed, "s": s}

    def check(self, w: np.ndarray, s: np.ndarray | None, in_dim: int, out_dim: int) -> bool:
        blocks = (out_dim, int4_blocks(in_dim))
        return (
            w.dtype == np.uint8
            and w.shape == (*blocks, INT4_BLOCK // 2)
            and s is not None
            and s.dtype == np.float32
            and s.shape == blocks
        )

    def decode(self, w: np.ndarray, s: np.ndarray | None, in_dim: int) -> np.ndarray:
        assert s is not None
        return dequantize_int4(w, s, in_dim)

    def onnx(self, layer: OnnxLayer) -> list[Any]:
        from actorq.quant.onnx import int4_linear

        n = layer
        assert n.s is not None
        return int4_linear(n.x, n.y, n.i, n.w, n.s, n.b, n.init, n.in_dim)

    def granularity(self, requested: Granularity) -> str:
        return f"block{INT4_BLOCK}"  # the blocks are the format's: ``granularity`` does not apply


#: Precision name -> its format: the one table every reader of a precision asks.
FORMATS: dict[str, WeightFormat] = {f.name: f for f in (FP32(), FP16(), INT8(), INT4())}
PRECISIONS: tuple[str, ...] = tuple(FORMATS)


def weight_format(precision: str) -> WeightFormat:
    """The format named ``precision``; ``ValueError`` (one line) for an unknown name."""
    try:
        return FORMATS[precision]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown precision {precision!r}; expected one of {', '.join(FORMATS)}"
        ) from None


def layer_format(precision: str, i: int, num_layers: int) -> WeightFormat:
    """The format layer ``i`` of a ``num_layers``-layer snapshot at ``precision`` is stored in."""
    f = weight_format(precision)
    return FORMATS["fp32"] if f.io_fp32 and i in (0, num_layers - 1) else f


def quantizes_a_layer(precision: str, num_layers: int) -> bool:
    """Whether a ``num_layers``-layer snapshot at ``precision`` stores any layer other than in
    fp32: a format that keeps the first and last layers fp32 rounds none of two (one hidden
    layer), its snapshot fp32 under another name."""
    return any(layer_format(precision, i, num_layers).name != "fp32" for i in range(num_layers))
