"""D4PG end to end: learns a small task, quantized actions track fp32, bad input is refused."""

import json
from pathlib import Path

import numpy as np
import pytest

from actorq import DQNConfig, train
from actorq.agents.d4pg.builder import D4PGBuilder
from actorq.agents.d4pg.config import D4PGConfig
from actorq.agents.d4pg.networks import Policy
from actorq.errors import ConfigError
from actorq.quant.runtimes import make_runtime
from actorq.quant.snapshot import PolicySpec, make_snapshot
from actorq.run.directory import load_run_config
from actorq.types import ArraySpec, EnvSpec


def test_int8_and_fp16_actions_track_fp32() -> None:
    import torch

    torch.manual_seed(0)
    hidden = (256, 256, 256)
    layers = Policy(17, hidden, 6).export_layers()
    spec = PolicySpec(17, hidden, 6, output_activation="tanh", head="deterministic")
    obs = np.random.default_rng(0).standard_normal((2000, 17)).astype(np.float32)
    ref = make_runtime(make_snapshot(layers, spec, "fp32", 1))(obs)
    for precision, tol in (("fp16", 1e-3), ("int8", 0.02)):
        calib = obs[:512] if precision == "int8" else None
        snap = make_snapshot(layers, spec, precision, 1, calibration=calib)
        act = make_runtime(snap)(obs)
        assert np.abs(act).max() <= 1.0  # tanh stays in the graph, in fp32
        diff = np.abs(act - ref)
        assert diff.mean() < tol, (precision, diff.mean())
        assert (diff.max(axis=1) <= 0.05).mean() >= 0.95


def test_action_space_mismatch_names_the_agent_that_fits(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="use DQN"):
        train(D4PGConfig(env="gym:CartPole-v1", actors=0, run_dir=str(tmp_path / "a")))
    with pytest.raises(ConfigError, match="D4PG"):
        train(DQNConfig(env="gym:Pendulum-v1", actors=0, run_dir=str(tmp_path / "b")))


def test_learns_pendulum(tmp_path: Path) -> None:
    """Seeded, synchronous: a small D4PG swings Pendulum-v1 up (random policy: about -1200).
    Seed 1: on an AVX2-only CPU seed 0 never swung up in 32,000 steps (fp32 actors too: -1293;
    it did on AVX-512 CPUs), while seeds 1 and 2 reached -134 and -135 with int8 actors."""
    cfg = D4PGConfig(
        env="gym:Pendulum-v1", actors=0, envs_per_actor=8, seed=1, total_steps=32_000,
        policy_hidden_sizes=(64, 64), critic_hidden_sizes=(256, 256), batch_size=128,
        samples_per_insert=64, v_min=-1000, v_max=0, n_step=3, min_replay_size=1000,
        eval_every=8_000, policy_learning_rate=3e-4, critic_learning_rate=1e-3,
        target_return=-250,
        progress=False, log_every=1e9, run_dir=str(tmp_path),
    )  # fmt: skip
    r = train(cfg)
    assert r.eval_return > -400, r
    assert r.action_mean_abs_diff is not None and r.action_mean_abs_diff < 0.02


def test_runs_with_actor_processes_on_a_control_suite_task(tmp_path: Path) -> None:
    """The local backend with continuous actions: actor processes rescale actions to the
    task's bounds and pass its action repeat; the learner gets their transitions."""
    pytest.importorskip("dm_control")
    cfg = D4PGConfig(
        env="dmc:cartpole-balance", action_repeat=2, actors=1, envs_per_actor=4,
        total_steps=3_000, min_replay_size=500, eval_every=3_000, eval_episodes=2,
        policy_hidden_sizes=(32, 32), critic_hidden_sizes=(64, 64), batch_size=64,
        stop_at_target=False, progress=False, log_every=1e9, run_dir=str(tmp_path),
    )  # fmt: skip
    r = train(cfg)
    assert r.env_steps >= 3_000 and r.updates > 0 and r.actor_restarts == 0
    # 1000 control steps of reward <= 1 each: 500 agent steps, each the sum of its 2 rewards
    assert 0 < r.eval_return <= 1000
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["agent"] == "d4pg" and saved["action_repeat"] == 2


def test_default_support_scales_with_the_action_repeat(tmp_path: Path) -> None:
    """Rewards summed over a repeat of k make returns up to k times larger: so does the default
    support. A support the user gives is kept, and so is an older run's (config.json held ±150
    whatever the repeat): it resumes with the atoms it trained on."""
    spec = EnvSpec("dmc:cartpole-balance", ArraySpec((5,), "float32"), ArraySpec((1,), "float32"))
    small = {"policy_hidden_sizes": (8,), "critic_hidden_sizes": (8,)}

    def edges(cfg: D4PGConfig) -> tuple[float, float]:
        cfg.validate()
        atoms = D4PGBuilder().make_learner(cfg, spec).atoms
        return float(atoms[0]), float(atoms[-1])

    dmc = {"env": "dmc:cartpole-balance", **small}
    assert edges(D4PGConfig(**dmc)) == (-150.0, 150.0)  # Acme's, with no repeat
    assert edges(D4PGConfig(action_repeat=2, **dmc)) == (-300.0, 300.0)
    assert edges(D4PGConfig(action_repeat=4, v_max=50.0, **dmc)) == (-600.0, 50.0)
    assert edges(D4PGConfig(action_repeat=2, v_min=-10.0, v_max=10.0, **dmc)) == (-10.0, 10.0)
    # Gymnasium ids: Acme's ±1000 (rewards not normalised: HalfCheetah's discount to ~1000),
    # and no action repeat (refused: it would be recorded, never applied)
    assert edges(D4PGConfig(env="gym:Pendulum-v1", **small)) == (-1000.0, 1000.0)
    with pytest.raises(ConfigError, match=r"--action-repeat 2 applies to dmc: ids only"):
        D4PGConfig(env="gym:Pendulum-v1", action_repeat=2, **small).validate()
    # a new run's config.json keeps "default", resolved again on resume from the same repeat
    new = D4PGConfig.from_json(json.loads(json.dumps(D4PGConfig(action_repeat=2, **dmc).to_json())))
    assert edges(new) == (-300.0, 300.0)
    # an older run's config.json, written when ±150 was the default whatever the repeat
    old = {**D4PGConfig(action_repeat=2, **dmc).to_json(), "v_min": -150.0, "v_max": 150.0}
    (tmp_path / "config.json").write_text(json.dumps(old))
    loaded = load_run_config(tmp_path)
    assert isinstance(loaded, D4PGConfig) and edges(loaded) == (-150.0, 150.0)


def test_cuda_request_without_a_gpu_is_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="no CUDA device"):
        D4PGConfig(device="cuda").validate()
