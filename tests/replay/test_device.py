"""The replay mirrored on the learner's device (replay/device.py), here with the CPU as the
device (tests/test_cuda.py repeats the batch check on a GPU)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actorq import train
from actorq.replay.device import DeviceReplayBuffer, replay_device
from actorq.replay.ring import ReplayBuffer
from actorq.types import ArraySpec

SPECS = {
    "obs": ArraySpec((3,), np.dtype(np.float32)),
    "action": ArraySpec((), np.dtype(np.int64)),
    "reward": ArraySpec((), np.dtype(np.float32)),
}


def items(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((n, 3)).astype(np.float32),
        "action": rng.integers(0, 5, n),
        "reward": rng.random(n).astype(np.float32),
    }


def test_device_batches_are_the_host_rings_batches_through_wraparound() -> None:
    host, dev = ReplayBuffer(100, SPECS), DeviceReplayBuffer(100, SPECS, "cpu")
    r1, r2 = np.random.default_rng(7), np.random.default_rng(7)
    for i in range(7):  # 7 inserts of 37: wraps twice, one insert larger than what is left
        b = items(37, i)
        host.add(b)
        dev.add(b)
        a, d = host.sample(64, r1), dev.sample(64, r2)
        for k in SPECS:
            assert isinstance(d[k], torch.Tensor)
            np.testing.assert_array_equal(a[k], d[k].numpy(), err_msg=k)


def test_a_loaded_replay_is_mirrored(tmp_path: Any) -> None:
    src = ReplayBuffer(50, SPECS)
    src.add(items(80, 0))
    src.save(tmp_path / "r.npz")
    dev = DeviceReplayBuffer(50, SPECS, "cpu")
    dev.load(tmp_path / "r.npz")
    a = src.sample(20, np.random.default_rng(1))
    d = dev.sample(20, np.random.default_rng(1))
    for k in SPECS:
        np.testing.assert_array_equal(a[k], d[k].numpy())


def test_auto_keeps_a_cpu_learners_replay_on_the_host() -> None:
    class Cfg:
        replay_on_device, device = "auto", "cpu"

    assert replay_device(Cfg(), 100, SPECS) is None
    Cfg.replay_on_device = "yes"
    assert replay_device(Cfg(), 100, SPECS) == "cpu"


@pytest.mark.parametrize("agent", ["dqn"])
def test_a_run_with_its_replay_on_the_device_is_the_host_runs_run(
    agent: str, tiny: Callable[..., Any]
) -> None:
    """--actors 0: same batches, so the same learner, step for step."""
    kw: dict[str, Any] = dict(total_steps=1_200, min_replay_size=100, eval_every=10**9,
                              stop_at_target=False)  # fmt: skip
    a = train(tiny(agent, sub="host", replay_on_device="no", **kw))
    b = train(tiny(agent, sub="device", replay_on_device="yes", **kw))
    assert a.updates == b.updates > 0
    assert a.eval_return == b.eval_return
    from safetensors.numpy import load_file

    ta = load_file(str(Path(a.run_dir) / "checkpoint" / "learner.safetensors"))
    tb = load_file(str(Path(b.run_dir) / "checkpoint" / "learner.safetensors"))
    assert ta.keys() == tb.keys()
    for k in ta:
        np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)
