"""The learner on a CUDA device (``--device cuda``): each agent learns with its learner there,
snapshots published from a CUDA learner are byte-identical to a CPU learner's with the same
weights, a CUDA update computes what a CPU update computes, and a run trained on a GPU is read
back (evaluated, exported) on a machine without one.

Skipped where torch sees no CUDA device (CI has none); ``benchmarks/gpu_checks.sh`` runs them on
a GPU machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actorq import train
from actorq.agents import builder_for
from actorq.experiment import learner_snapshot
from actorq.quant.snapshot import PolicySnapshot

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

#: One Gymnasium env per agent that needs no optional package (the GPU image has no MuJoCo).
ENVS = {"dqn": "gym:CartPole-v1", "d4pg": "gym:Pendulum-v1", "ppo": "gym:Pendulum-v1"}


def _pair(tiny: Callable[..., Any], agent: str) -> tuple[Any, Any, Any, Any]:
    """A CPU learner, a CUDA learner holding the same weights and optimizer state, the
    policy spec and the config."""
    cfg = tiny(agent, env=ENVS[agent], seed=5)
    builder = builder_for(cfg)
    spec = builder.env_spec(cfg)
    cpu = builder.make_learner(cfg, spec)
    gpu = builder.make_learner(dataclasses.replace(cfg, device="cuda"), spec)
    gpu.load_state(*cpu.state())
    return cpu, gpu, builder.policy_spec(cfg, spec), cfg


def assert_same_snapshot(a: bytes, b: bytes) -> None:
    """Same header (checksum included) and same tensors. Not the bytes: safetensors writes
    its metadata map in a hash order that differs from one call to the next."""
    sa, sb = PolicySnapshot.from_bytes(a), PolicySnapshot.from_bytes(b)
    assert sa.header() == sb.header() and sa.checksum() == sb.checksum()
    assert sa.tensors.keys() == sb.tensors.keys()
    for k, v in sa.tensors.items():
        assert v.dtype == sb.tensors[k].dtype
        np.testing.assert_array_equal(v, sb.tensors[k], err_msg=k)


@pytest.mark.parametrize("agent", sorted(ENVS))
def test_snapshots_from_a_cuda_learner_equal_cpu_ones(agent: str, tiny: Callable[..., Any]) -> None:
    cpu, gpu, pspec, _ = _pair(tiny, agent)
    assert gpu.device.type == "cuda"
    calib = np.random.default_rng(0).standard_normal((256, pspec.obs_dim)).astype(np.float32)
    for precision in ("fp32", "fp16", "int8", "int4"):
        for c in (None, calib) if precision in ("int8", "int4") else (None,):
            a = learner_snapshot(cpu, pspec, precision, 3, calibration=c).to_bytes()
            b = learner_snapshot(gpu, pspec, precision, 3, calibration=c).to_bytes()
            assert_same_snapshot(a, b)


@pytest.mark.parametrize("agent", sorted(ENVS))
def test_a_frozen_publish_of_a_cuda_learner_keeps_the_weights_of_its_call(
    agent: str, tiny: Callable[..., Any]
) -> None:
    """``freeze`` does not copy a CUDA learner's weights again (they came to the host in
    ``policy_layers``): what it sends is still the weights of the call, whatever the learner
    does after."""
    cpu, gpu, pspec, cfg = _pair(tiny, agent)
    gcfg = dataclasses.replace(cfg, device="cuda")
    builder = builder_for(gcfg)
    io = builder.policy_io(gcfg, builder.env_spec(gcfg), gpu)
    make = io.freeze(7, "int8")
    with torch.no_grad():  # the learner moves on before the background thread encodes
        for module in (m for m in vars(gpu).values() if isinstance(m, torch.nn.Module)):
            for param in module.parameters():
                param.add_(1.0)
    want = learner_snapshot(cpu, pspec, "int8", 7, gcfg.granularity).to_bytes()
    assert_same_snapshot(make(), want)


def _batch(n: int, obs_dim: int, act_dim: int, discrete: bool, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    action = (
        rng.integers(0, act_dim, n).astype(np.int64)
        if discrete
        else rng.uniform(-1, 1, (n, act_dim)).astype(np.float32)
    )
    return {
        "obs": rng.standard_normal((n, obs_dim)).astype(np.float32),
        "action": action,
        "reward": rng.uniform(-1, 1, n).astype(np.float32),
        "discount": np.where(rng.random(n) < 0.2, 0.0, 0.99).astype(np.float32),
        "next_obs": rng.standard_normal((n, obs_dim)).astype(np.float32),
    }


@pytest.mark.parametrize("agent", ["dqn", "d4pg"])
def test_cuda_updates_compute_what_cpu_updates_compute(
    agent: str, tiny: Callable[..., Any]
) -> None:
    cpu, gpu, pspec, _ = _pair(tiny, agent)
    discrete = agent == "dqn"
    act_dim = pspec.out_dim  # CartPole: 2 Q-values; Pendulum: 1 action
    for i in range(20):
        b = _batch(64, pspec.obs_dim, act_dim, discrete, i)
        la, lb = cpu.update(b), gpu.update(b)
        for k in la:  # losses agree to float tolerance (TF32 is off by default for matmuls)
            assert la[k] == pytest.approx(lb[k], rel=1e-3, abs=1e-4), (i, k)
    for (wa, ba), (wb, bb) in zip(cpu.policy_layers(), gpu.policy_layers(), strict=True):
        np.testing.assert_allclose(wa, wb, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(ba, bb, rtol=1e-4, atol=1e-5)


def test_dqn_learns_cartpole_with_its_learner_on_cuda(tiny: Callable[..., Any]) -> None:
    cfg = tiny("dqn", device="cuda", envs_per_actor=16, total_steps=120_000, eval_every=5_000)
    r = train(cfg)
    assert r.target_return == 475 and r.reached_target, r
    assert r.action_agreement >= 0.98


def test_ppo_learns_cartpole_with_its_learner_on_cuda(tiny: Callable[..., Any]) -> None:
    r = train(tiny("ppo", device="cuda", total_steps=150_000, seed=0))
    assert r.target_return == 475 and r.reached_target, r
    assert r.logprob_gap is not None and r.logprob_gap < 0.05


def test_a_gpu_trained_run_is_read_back_on_a_machine_without_one(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from actorq.cli import load_run_policy, main

    r = train(
        tiny("d4pg", env="gym:Pendulum-v1", device="cuda", total_steps=3_000, eval_every=1_500,
             min_replay_size=500, stop_at_target=False)
    )  # fmt: skip
    on_gpu = load_run_policy(r.run_dir, "int8")[2]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg, _, on_cpu = load_run_policy(r.run_dir, "int8")
    assert cfg.device == "cpu"
    assert_same_snapshot(on_cpu, on_gpu)
    assert main(["eval", r.run_dir, "--episodes", "2"]) == 0
    assert main(["export", r.run_dir, "--out", str(tmp_path / "p.onnx")]) == 0
    assert (tmp_path / "p.onnx").stat().st_size > 0
