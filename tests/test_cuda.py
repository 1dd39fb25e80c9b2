"""The learner on a CUDA device (``--device cuda``): each agent learns with its learner there,
snapshots published from a CUDA learner are byte-identical to a CPU learner's with the same
weights, a CUDA update computes what a CPU update computes, and a run trained on a GPU is read
back (evaluated, exported) on a machine without one. GO's graph policy the same way: its ONNX
snapshots, its PPO update, learning a placement, and a GPU-trained run placing a graph on a
machine without a GPU.

Skipped where torch sees no CUDA device (CI has none); ``benchmarks/gpu_checks.sh`` runs them on
a GPU machine.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actorq import train
from actorq.agents import builder_for
from actorq.agents.go.actor import HEADS
from actorq.experiment import learner_snapshot
from actorq.quant.model_snapshot import ModelSnapshot
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


def test_a_checkpoint_keeps_the_cuda_random_stream_and_a_resume_restores_it(
    tiny: Callable[..., Any],
) -> None:
    # PPO's minibatch shuffles draw from the learner's device: restored from the seed, every
    # resumed segment of a GPU run repeated the first one's shuffles
    from actorq import checkpoint as ckpt

    cfg = tiny("ppo", device="cuda", total_steps=2_048, stop_at_target=False)
    train(cfg)
    tensors, _, _ = ckpt.load(Path(cfg.run_dir) / "checkpoint")
    saved = tensors[f"{ckpt.CUDA_RNG}{torch.cuda.current_device()}"]
    torch.cuda.manual_seed_all(123)
    ckpt.restore_cuda_rng(tensors)
    assert torch.equal(torch.cuda.get_rng_state(), saved)


def test_a_gpu_trained_run_is_read_back_on_a_machine_without_one(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from actorq.cli import main
    from actorq.run import load_run_policy

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


# -- GO (actorq.graphopt): a graph network whose snapshots are exported ONNX models ---------

GO_GRAPH = "synthetic-120-s0"


def _go_pair(tiny: Callable[..., Any], **kw: Any) -> tuple[Any, Any, Any, Any]:
    """A CPU GO learner and a CUDA one holding the same weights and optimizer state, with
    their policy IOs (which make the snapshots)."""
    cfg = tiny("go", env=f"graphopt:placement/{GO_GRAPH}", seed=5, **kw)
    gcfg = dataclasses.replace(cfg, device="cuda")
    builder = builder_for(cfg)
    spec = builder.env_spec(cfg)
    cpu, gpu = builder.make_learner(cfg, spec), builder.make_learner(gcfg, spec)
    gpu.load_state(*cpu.state())
    return cpu, gpu, builder.policy_io(cfg, spec, cpu), builder.policy_io(gcfg, spec, gpu)


def _go_outputs(learner: Any) -> dict[str, np.ndarray]:
    with torch.no_grad():
        return {k: v.cpu().numpy() for k, v in learner.model(**learner._inputs[0]).items()}


def _go_batch(learner: Any, k: int, seed: int) -> dict[str, Any]:
    """``k`` decisions sampled from ``learner``'s policy on its graph, with random rewards."""
    rng = np.random.default_rng(seed)
    task, out = learner.tasks[0], _go_outputs(learner)
    actions = np.zeros((k, task.num_ops, len(HEADS)), np.int8)
    logp = np.zeros((k, task.num_ops, len(HEADS)), np.float32)
    for j in range(k):
        actions[j], logp[j] = task.decide(out, rng)
    reward = -np.sqrt(rng.uniform(0.5, 1.5, k)).astype(np.float32)  # GO's -sqrt(S / S_ref)
    return {"graph": np.zeros(k, np.int32), "actions": actions, "log_prob": logp,
            "reward": reward}  # fmt: skip


def test_go_snapshots_from_a_cuda_learner_equal_cpu_ones(tiny: Callable[..., Any]) -> None:
    """The ONNX model a CUDA learner publishes is the CPU learner's, byte for byte, at both of
    GO's precisions (the weights are read back to the host before export)."""
    _, gpu, io_cpu, io_gpu = _go_pair(tiny)
    assert next(gpu.model.parameters()).is_cuda
    for precision in ("fp32", "int8"):
        a = ModelSnapshot.from_bytes(io_cpu.snapshot(3, precision))
        b = ModelSnapshot.from_bytes(io_gpu.snapshot(3, precision))
        assert a.model == b.model and a.meta == b.meta and a.precision == precision


def test_go_cuda_updates_compute_what_cpu_updates_compute(tiny: Callable[..., Any]) -> None:
    """PPO with self-imitation on the same batches: the same losses, and after five updates
    the same policy (logits to float tolerance, the same greedy device for every op)."""
    cpu, gpu, _, _ = _go_pair(tiny, sil_coef=1.0)
    for i in range(5):
        batch = _go_batch(cpu, 16, i)
        la, lb = cpu.update(batch), gpu.update(batch)
        for key in ("losses/policy_loss", "losses/entropy", "losses/sil_loss"):
            assert la[key] == pytest.approx(lb[key], rel=1e-3, abs=1e-4), (i, key)
    oa, ob = _go_outputs(cpu), _go_outputs(gpu)
    for head in oa:
        diff = float(np.abs(oa[head] - ob[head]).max())
        assert np.allclose(oa[head], ob[head], rtol=1e-3, atol=1e-3), (head, diff)
    assert (oa["placement"].argmax(1) == ob["placement"].argmax(1)).all()


def test_go_learns_a_placement_with_its_learner_on_cuda(tiny: Callable[..., Any]) -> None:
    """tests/agents/go's learning test with the learner on the GPU (actors on the CPU): faster
    than the human-expert split on a 300-op graph in 3,000 decisions, int8 acting like fp32."""
    cfg = tiny("go", env="graphopt:placement/synthetic-300-s0", device="cuda",
               total_steps=3_000, eval_every=3_000, sil_coef=1.0)  # fmt: skip
    r = train(cfg)
    assert r.eval_return > 0.15, r
    assert r.action_agreement > 0.95 and r.logprob_gap is not None and r.logprob_gap < 0.05


def test_a_gpu_trained_go_run_places_and_fine_tunes_without_a_gpu(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from actorq.cli import main

    kw = {"env": f"graphopt:placement/{GO_GRAPH}", "total_steps": 64, "eval_every": 10_000}
    run = train(tiny("go", device="cuda", sil_coef=1.0, explore=0.5, **kw)).run_dir
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "placement.json"
    argv = ["graphopt", "place", "--graph", GO_GRAPH, "--policy", run, "--samples", "2",
            "--no-baselines", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert len(json.loads(out.read_text())["placement"]) == 120
    assert main(["eval", run]) == 0
    assert main(["export", run, "--out", str(tmp_path / "go.onnx")]) == 0
    r = train(tiny("go", sub="ft", init_from=run, **kw))  # fine-tuned on the CPU
    assert r.env_steps >= 64


# -- the fast learner: whole updates as CUDA graphs, batches gathered on the device ----------
@pytest.mark.parametrize("agent", ["dqn", "d4pg", "ppo", "ppo-pendulum"])
def test_graph_updates_equal_eager_updates_on_cuda(agent: str, tiny: Callable[..., Any]) -> None:
    """Updates replayed from one captured CUDA graph land where eager CUDA updates do (12 for
    DQN and D4PG; 3 of PPO's, each many minibatch steps: Adam on random data amplifies a
    rounding difference to the size of its step within a few updates, eager against eager
    too); the warm-up steps of the capture leave no trace (the first update starts from the
    learner's own state)."""
    env = {"dqn": "gym:CartPole-v1", "d4pg": "gym:Pendulum-v1", "ppo": "gym:CartPole-v1",
           "ppo-pendulum": "gym:Pendulum-v1"}[agent]  # fmt: skip
    agent = agent.split("-")[0]  # the Pendulum case: a Gaussian policy and its log-std
    learners = {}
    for mode in ("eager", "graph"):
        cfg = tiny(agent, env=env, device="cuda", learner_mode=mode, seed=3, sub=mode)
        builder = builder_for(cfg)
        learners[mode] = builder.make_learner(cfg, builder.env_spec(cfg))
    spec = builder.env_spec(cfg)
    for i in range(3 if agent == "ppo" else 12):
        if agent == "ppo":
            from tests.agents.test_step import rollout

            b = rollout(8, 64, i)
            if not spec.discrete:
                r = np.random.default_rng(i)
                b["obs"], b["next_obs"] = b["obs"][..., :3].copy(), b["next_obs"][..., :3].copy()
                b["action"] = r.uniform(-1, 1, (8, 64, 1)).astype(np.float32)
                b["log_prob"] = np.full((8, 64), -1.0, np.float32)
        else:
            act = spec.num_actions if spec.discrete else spec.action.shape[0]
            b = _batch(64, spec.obs_dim, act, spec.discrete, i)
        for learner in learners.values():
            learner.learn(b)
    me, mg = learners["eager"].read_metrics(), learners["graph"].read_metrics()
    # |ratio - 1| and PPO's policy loss (a mean of ratio × normalized advantage, ~0) sit near
    # 0, where float noise of the ratio (~1e-4: CUDA's atomics, Adam) is all their difference;
    # an H200 measured 1.5e-4 and 2.4e-4 there on two leases: a bound on the ratio's scale
    tol = {"quant/first_ratio_abs_dev": 1e-3, "losses/policy_loss": 1e-3}
    for k in me:
        tol_k = tol.get(k, 1e-4)
        assert mg[k] == pytest.approx(me[k], rel=1e-3, abs=tol_k), k
    ea, ga = learners["eager"].runner._module_state(), learners["graph"].runner._module_state()
    for pa, pb in zip(ea, ga, strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-3, atol=1e-5)


def test_a_cuda_learner_never_syncs_between_metric_reads(tiny: Callable[..., Any]) -> None:
    """Batches sampled from the device replay, 50 graph updates: CUDA's sync debug mode
    raises on any synchronizing call (a pageable copy, an .item(), a bool of a tensor)."""
    from actorq.replay.device import DeviceReplayBuffer
    from actorq.types import transition_specs

    cfg = tiny("dqn", device="cuda", learner_mode="graph", target_update_period=7)
    builder = builder_for(cfg)
    spec = builder.env_spec(cfg)
    learner = builder.make_learner(cfg, spec)
    ring = DeviceReplayBuffer(1000, transition_specs(spec), "cuda")
    ring.add(_batch(1000, spec.obs_dim, 2, True, 0))
    rng = np.random.default_rng(0)
    learner.learn(ring.sample(128, rng))  # the capture (allowed to sync)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(50):
            learner.learn(ring.sample(128, rng))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    m = learner.read_metrics()
    assert np.isfinite(m["losses/td_loss"])


def test_the_device_replay_returns_the_host_rings_batches(tiny: Callable[..., Any]) -> None:
    from actorq.replay.device import DeviceReplayBuffer
    from actorq.replay.ring import ReplayBuffer
    from actorq.types import transition_specs

    spec = builder_for(tiny("dqn")).env_spec(tiny("dqn"))
    specs = transition_specs(spec)
    host, dev = ReplayBuffer(300, specs), DeviceReplayBuffer(300, specs, "cuda")
    for i in range(5):  # wraps around
        b = _batch(97, spec.obs_dim, 2, True, i)
        host.add(b)
        dev.add(b)
    r1, r2 = np.random.default_rng(1), np.random.default_rng(1)
    for _ in range(3):
        a, b = host.sample(64, r1), dev.sample(64, r2)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k].cpu().numpy(), err_msg=k)


def test_a_captured_update_reads_its_learning_rate_at_each_replay(
    tiny: Callable[..., Any],
) -> None:
    """PPO anneals its learning rate: set to 0 between replays, the next update moves
    nothing (a learning rate frozen into the graph would)."""
    from actorq.agents.step import set_lr
    from tests.agents.test_step import rollout

    cfg = tiny("ppo", env="gym:CartPole-v1", device="cuda", learner_mode="graph",
               anneal_lr=False)  # fmt: skip
    builder = builder_for(cfg)
    learner = builder.make_learner(cfg, builder.env_spec(cfg))
    learner.learn(rollout(8, 64, 0))
    before = [t.clone() for t in learner.runner._module_state()]
    set_lr(learner.opt, 0.0)
    learner.learn(rollout(8, 64, 1))
    for x, y in zip(before, learner.runner._module_state(), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
