"""Machine facts recorded next to every benchmark result (``actorq bench`` and benchmarks/)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import onnxruntime
import torch


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    """The SIMD flags that decide int8 GEMM speed (VNNI) and fp32 GEMM speed (AVX-512/AVX2)."""
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in wanted if f in have]
    except OSError:
        pass
    return []


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def gpus() -> list[str]:
    """The CUDA devices torch sees, by name (a learner on ``--device cuda`` runs on one)."""
    try:
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except (RuntimeError, AssertionError):  # a CPU build, or a driver that fails to answer
        return []


def machine_info() -> dict[str, Any]:
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        affinity = None
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cores": os.cpu_count(),
        "cores_usable": affinity,
        "gpus": gpus(),
        "load_avg_at_start": load,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
        "gymnasium": gymnasium.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "git_commit": git_commit(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
