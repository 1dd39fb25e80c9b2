"""The convolutional actors actorq publishes for Atari, timed on this CPU: the Nature-CNN Q-network
(Mnih et al., Nature 2015) at fp32, fp16 and int8, as actors run it (onnxruntime, one intra-op
thread), at batch 1 and at the actors' env batches, plus what each publish costs the learner.

Rows (``actorq.agents.pixels.pixel_snapshot``, decoded and run by the actors' own
``ModelRuntime``):

- ``fp32``: the whole network in fp32 (uint8 frames in; cast and /255 in the graph);
- ``fp16``: weights stored in half precision, run on onnxruntime's fp32 kernels;
- ``int8``: static ``QLinearConv`` / ``QGemm`` (Jacob et al., CVPR 2018), weights int8 per output
  channel at 7 bits (no int16 saturation on AVX2), activations uint8 with scales calibrated
  on ``--calib`` frames (a publish calibrates on 256 replay states), fp32 head.

``--reference`` adds onnxruntime's own quantizer on the fp32 model, as measured before actorq
built its int8 model: ``quantize_static`` (QDQ, 8-bit and 7-bit weights) and
``quantize_dynamic`` (``ConvInteger``). ``publish ms`` is what one publish costs at that
precision: calibration (int8) + ONNX export + snapshot encoding, median of 5 (the
learner's background publisher pays it); ``agree`` is the share of equal greedy actions with
fp32 and ``rel err`` the largest |Δq| over the largest |q|, on held-out frames. Frames come
from random play of ``--env`` (an untrained network: agreement on real game states of a
trained one is the run's own ``action agreement``). Latencies are medians of single calls,
the candidates taking turns (``actorq.quant.autoselect.measure_latency``) of ``--burst`` calls
each: 10 (default) times each model called after itself, as an actor calls its one model; 1
times each call just after the other candidates ran (slower for every model, int8's ratio lower).

    .venv/bin/python benchmarks/atari_conv_speed.py --batches 1 8 16 --repeats 201 --reference
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _machine import command, machine_info, md_head, md_table, say, write_json_atomic
from actorq.agents.dqn.networks import NatureQNetwork
from actorq.agents.pixels import PIXEL_PRECISIONS, pixel_snapshot
from actorq.quant.autoselect import measure_latency
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.runtimes import decode_snapshot, make_runtime
from actorq.types import ArraySpec, EnvSpec

OUT = Path(__file__).parent / "results" / "atari_conv_speed"


def game_frames(env_id: str, n: int, seed: int) -> tuple[np.ndarray, str]:
    """``n`` stacked frames from random play of ``env_id`` (random bytes without ale-py)."""
    try:
        from actorq.envs import make_env

        env = make_env(env_id)
    except Exception as e:  # the [atari] extra missing: speed does not depend on the pixels
        say(f"no {env_id} ({e}); random frames")
        rng = np.random.default_rng(seed)
        return rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8), "random bytes"
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    out = []
    while len(out) < n:
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        out.append(np.asarray(obs, np.uint8))
        if term or trunc:
            obs, _ = env.reset()
    env.close()
    return np.stack(out), f"random play of {env_id}"


class OrtModel:
    """An onnxruntime session over model bytes, called as actors call theirs."""

    def __init__(self, data: bytes, threads: int) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.log_severity_level = 3
        self.sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.sess.run(["q"], {"obs": x})[0]
        return out


def reference_models(fp32: bytes, calib: np.ndarray) -> dict[str, bytes]:
    """onnxruntime's quantizer on the fp32 model (the measurement issue 50 started from)."""
    import tempfile

    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    class Frames(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{"obs": f[None]} for f in calib])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    out = {}
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "fp32.onnx"
        src.write_bytes(fp32)
        for name, reduce in (
            ("ort quantize_static 8-bit", False),
            ("ort quantize_static 7-bit", True),
        ):
            dst = Path(d) / f"s{int(reduce)}.onnx"
            quantize_static(
                src, dst, Frames(), quant_format=QuantFormat.QDQ, per_channel=True,
                reduce_range=reduce, activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            )  # fmt: skip
            out[name] = dst.read_bytes()
        dst = Path(d) / "dyn.onnx"
        quantize_dynamic(src, dst, per_channel=True, weight_type=QuantType.QInt8)
        out["ort quantize_dynamic (ConvInteger)"] = dst.read_bytes()
    return out


def median_s(fn: Callable[[], Any], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the learner's publisher thread, on a shared machine
    net = NatureQNetwork((4, 84, 84), 6, dueling=True).eval()
    spec = EnvSpec(args.env, ArraySpec((4, 84, 84), "uint8"), ArraySpec((), "int64"), 6)
    frames, source = game_frames(args.env, args.calib + args.test, 0)
    calib, test = frames[: args.calib], frames[args.calib :]
    rows: dict[str, dict[str, Any]] = {}
    models: dict[str, Callable[[np.ndarray], np.ndarray]] = {}
    fp32_model = b""
    for p in PIXEL_PRECISIONS:

        def publish(p: str = p) -> bytes:
            return pixel_snapshot(net, 1, spec, "q", p, calib if p == "int8" else None).to_bytes()

        snap = decode_snapshot(publish())  # the actors' decoder and validation
        assert isinstance(snap, ModelSnapshot)
        rows[p] = {"publish_ms": 1e3 * median_s(publish), "snapshot_bytes": len(publish())}
        models[p] = make_runtime(snap, "ort", args.threads)
        fp32_model = snap.model if p == "fp32" else fp32_model
    if args.reference:
        for name, data in reference_models(fp32_model, calib).items():
            rows[name] = {"publish_ms": None, "snapshot_bytes": len(data)}
            models[name] = OrtModel(data, args.threads)
    ref = models["fp32"](test)
    for name, model in models.items():
        q = model(test)
        rows[name]["agreement"] = float((q.argmax(1) == ref.argmax(1)).mean())
        rows[name]["rel_err"] = float(np.abs(q - ref).max() / np.abs(ref).max())
    names = list(models)
    for b in args.batches:
        batch = np.ascontiguousarray(test[np.arange(b) % len(test)])
        say(f"batch {b} ...")
        secs = measure_latency(
            [models[n] for n in names], batch, repeats=args.repeats, burst=args.burst
        )
        for n, s in zip(names, secs, strict=True):
            rows[n][f"ms_batch{b}"] = 1e3 * s
    return {"frames": source, "calib_states": args.calib, "test_states": len(test), "rows": rows}


def report(results: dict[str, Any], batches: list[int]) -> list[str]:
    rows = results["rows"]
    head = [
        "model", *(f"batch {b}: ms (× fp32)" for b in batches),
        "publish ms", "snapshot bytes", "agree", "rel err",
    ]  # fmt: skip
    table = []
    for name, r in rows.items():
        cells = [name]
        for b in batches:
            ms = r[f"ms_batch{b}"]
            cells.append(f"{ms:.3f} ({rows['fp32'][f'ms_batch{b}'] / ms:.2f}×)")
        pub = "—" if r["publish_ms"] is None else f"{r['publish_ms']:.0f}"
        cells += [pub, f"{r['snapshot_bytes']:,}", f"{r['agreement']:.3f}", f"{r['rel_err']:.4f}"]
        table.append(cells)
    lines = md_head("Nature-CNN actors on this CPU (benchmarks/atari_conv_speed.py)", results)
    flags = results["machine"].get("cpu_flags", [])
    vnni = any(f in flags for f in ("avx512_vnni", "avx_vnni"))
    lines += [
        f"- VNNI: {'yes' if vnni else 'no'}; onnxruntime {results['onnxruntime']}, "
        f"{results['threads']} intra-op thread, {results.get('burst', 1)} calls a model's "
        f"turn; frames: {results['frames']} "
        f"({results['calib_states']} calibrate int8, {results['test_states']} judge)",
        "",
        *md_table(head, table),
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16])
    ap.add_argument("--repeats", type=int, default=201)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--burst",
        type=int,
        default=10,
        help="calls timed in a row per model and turn (1: each call after the other models)",
    )
    ap.add_argument("--calib", type=int, default=256)
    ap.add_argument("--test", type=int, default=512)
    ap.add_argument("--env", default="atari:Pong")
    ap.add_argument("--reference", action="store_true", help="add onnxruntime's quantizer")
    ap.add_argument("--out", type=Path, default=OUT, help="writes OUT.json and OUT.md")
    args = ap.parse_args()
    if args.burst < 1 or args.repeats < 1:
        ap.error("--burst and --repeats must be >= 1")
    import onnxruntime as ort

    machine = machine_info()
    results = {
        "command": command("atari_conv_speed.py"),
        "machine": machine,
        "onnxruntime": ort.__version__,
        "threads": args.threads,
        "burst": args.burst,
        **measure(args),
    }
    write_json_atomic(args.out.with_suffix(".json"), results)
    lines = report(results, args.batches)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
