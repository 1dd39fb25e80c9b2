"""onnxruntime int8 vs fp32 for the Nature-CNN Q-network (Mnih et al., Nature 2015) on this CPU,
at the actors' settings (one intra-op thread), batch 1 and batch K.

Issue 50 part 4, measured before int8 convolutional actors are built: onnxruntime's integer
convolutions are often slower than fp32 on CPUs (the dynamic-quantization ``ConvInteger`` path
is unoptimized; without VNNI there may be no gain). Variants:

- ``fp32``: the model actors run today (``actorq.agents.pixels.cnn_onnx``: uint8 frames in);
- ``int8 static QDQ``: ``quantize_static`` (QDQ format, weights int8 per output channel,
  activations uint8 calibrated on ``--calib`` frames), which onnxruntime fuses into QLinearConv
  / QGemm; ``reduce_range`` (7-bit weights, for AVX2 without VNNI) as a second row;
- ``int8 dynamic``: ``quantize_dynamic`` (int8 weights, activations quantized at run time:
  ``ConvInteger`` + ``MatMulInteger``).

    .venv/bin/python benchmarks/atari_conv_speed.py --batches 1 16 --repeats 200

Frames are random uint8 (speed does not depend on the pixels); ``agree`` is the share of equal
greedy actions with fp32 on them and ``rel err`` the largest |Δq| over the largest |q| (sanity
checks of an untrained network, not the agreement on real game states).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

from actorq.agents.dqn.networks import NatureQNetwork
from actorq.agents.pixels import cnn_onnx


class Frames(CalibrationDataReader):
    def __init__(self, frames: np.ndarray) -> None:
        self.items = iter([{"obs": f[None]} for f in frames])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.items, None)


def session(path: Path, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def median_ms(sess: ort.InferenceSession, x: np.ndarray, repeats: int) -> float:
    for _ in range(10):
        sess.run(["q"], {"obs": x})
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        sess.run(["q"], {"obs": x})
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calib", type=int, default=64)
    args = ap.parse_args()
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    lines = cpu.splitlines()
    model = next((ln.split(":", 1)[1].strip() for ln in lines if "Model name" in ln), "?")
    flags = next((ln for ln in lines if ln.startswith("Flags")), "")
    vnni = "avx512_vnni" in flags or "avx_vnni" in flags
    avx512 = "avx512f" in flags
    print(
        f"CPU: {model} (AVX-512: {'yes' if avx512 else 'no'}, VNNI: {'yes' if vnni else 'no'}); "
        f"onnxruntime {ort.__version__}"
    )

    torch.manual_seed(0)
    net = NatureQNetwork((4, 84, 84), 6, dueling=True).eval()
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (max(args.batches) + args.calib, 4, 84, 84), dtype=np.uint8)
    with tempfile.TemporaryDirectory() as d:
        fp32 = Path(d) / "fp32.onnx"
        with torch.no_grad():
            fp32.write_bytes(cnn_onnx(net.torso, net.export_head(), "q", "benchmark"))
        paths = {"fp32": fp32}
        for name, reduce in (("int8 static QDQ", False), ("int8 static QDQ 7-bit", True)):
            paths[name] = Path(d) / f"static{int(reduce)}.onnx"
            quantize_static(
                fp32,
                paths[name],
                Frames(frames[: args.calib]),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                reduce_range=reduce,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            )
        paths["int8 dynamic"] = Path(d) / "dynamic.onnx"
        quantize_dynamic(fp32, paths["int8 dynamic"], per_channel=True, weight_type=QuantType.QInt8)
        sessions = {k: session(p, args.threads) for k, p in paths.items()}
        test = frames[args.calib :]
        q32 = sessions["fp32"].run(["q"], {"obs": test})[0]
        print(
            f"{'variant':24s}"
            + "".join(f"{f'batch {b} ms':>14s}{'vs fp32':>9s}" for b in args.batches)
            + f"{'agree':>8s}"
        )
        base = {b: median_ms(sessions["fp32"], test[:b], args.repeats) for b in args.batches}
        for name, sess in sessions.items():
            row = f"{name:24s}"
            for b in args.batches:
                ms = base[b] if name == "fp32" else median_ms(sess, test[:b], args.repeats)
                row += f"{ms:14.3f}{base[b] / ms:8.2f}x"
            q = sess.run(["q"], {"obs": test})[0]
            agree = float((q.argmax(1) == q32.argmax(1)).mean())
            err = float(np.abs(q - q32).max() / np.abs(q32).max())  # int16 saturation shows here
            print(row + f"{agree:8.2f}{err:9.4f}")


if __name__ == "__main__":
    main()
