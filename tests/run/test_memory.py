"""A run that cannot fit in memory is refused before it allocates anything (issue: a 65536-wide
network, a 1e9-item replay and 10,000 actors each ended in a traceback or a hang)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import actorq
import actorq.resources
from actorq import train
from actorq.agents.dqn import DQNConfig
from actorq.resources import GiB, ResourceError, available_memory


@pytest.mark.parametrize(
    ("field", "value", "names"),
    [
        ("hidden", (65536, 65536), "(--hidden)"),
        ("replay_size", 10**9, "(--replay-size)"),
        ("actors", 10_000, "(--actors)"),
    ],
)
def test_a_run_that_cannot_fit_is_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: object, names: str
) -> None:
    monkeypatch.setattr(actorq.resources, "available_memory", lambda: (16 * GiB, "available"))
    run = tmp_path / "run"
    cfg = DQNConfig(run_dir=str(run), progress=False, energy=False, **{field: value})
    with pytest.raises(ResourceError) as e:
        train(cfg)
    msg = str(e.value)
    assert "\n" not in msg and names in msg and "16.0 GiB available" in msg, msg
    assert not run.exists()


def test_an_on_policy_rollout_that_cannot_fit_is_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PPO's rollout was not in the estimate: 1M steps of 4,096 envs died allocating 61 GiB."""
    from actorq.agents.ppo import PPOConfig

    # small enough that a regression allocates it here (~0.3 GiB), not the machine's memory
    monkeypatch.setattr(actorq.resources, "available_memory", lambda: (GiB // 4, "available"))
    run = tmp_path / "run"
    cfg = PPOConfig(run_dir=str(run), actors=0, envs_per_actor=512, num_steps=10**4,
                    total_steps=100, progress=False, energy=False)  # fmt: skip
    with pytest.raises(ResourceError, match=r"rollouts of 512 items \(--num-steps") as e:
        train(cfg)
    assert "\n" not in str(e.value) and not run.exists()


def test_a_go_rollout_names_the_flag_that_sizes_it() -> None:
    from actorq.agents import builder_for
    from actorq.agents.go import GOConfig
    from actorq.run.memory import run_memory

    cfg = GOConfig(env="graphopt:placement/synthetic-120-s0")
    builder = builder_for(cfg)
    parts = run_memory(cfg, builder, builder.env_spec(cfg))
    assert any(k.endswith("(--batch-graphs)") for k in parts), parts


def test_reading_a_policy_too_wide_to_build_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config.json edited to widths `train` refuses: eval, export and load built the learner
    anyway (a traceback in the allocator, or the machine's memory filled)."""
    import json

    from actorq.cli import main

    run = tmp_path / "run"
    train(DQNConfig(run_dir=str(run), actors=0, total_steps=300, min_replay_size=100,
                    progress=False, energy=False, log_every=1e9))  # fmt: skip
    cfg = json.loads((run / "config.json").read_text())
    # widths whose learner a regression builds here (~0.4 GiB), refused below 0.5 GiB
    (run / "config.json").write_text(json.dumps({**cfg, "hidden": [4096] * 4}))
    monkeypatch.setattr(actorq.resources, "available_memory", lambda: (GiB // 2, "available"))
    with pytest.raises(
        ResourceError, match=r"this run's policy needs about .*config.json's widths"
    ):
        actorq.load(run)
    assert main(["eval", str(run)]) == 2
    assert main(["export", str(run), "--out", str(tmp_path / "p.onnx")]) == 2
    assert not (tmp_path / "p.onnx").exists()


def test_the_default_run_fits_and_the_estimate_grows_with_the_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from actorq.agents import builder_for
    from actorq.run.memory import run_memory

    cfg = DQNConfig()
    builder = builder_for(cfg)
    spec = builder.env_spec(cfg)
    small = sum(run_memory(cfg, builder, spec).values())
    assert small < available_memory()[0]
    wide = DQNConfig(hidden=(2048, 2048, 2048))
    assert sum(run_memory(wide, builder, spec).values()) > small + 5 * 4 * 2 * 2048 * 2048


def test_ulimit_v_bounds_the_memory_available() -> None:
    code = (
        "import resource; from actorq.resources import available_memory, GiB;"
        "resource.setrlimit(resource.RLIMIT_AS, (8 * GiB, resource.RLIM_INFINITY));"
        "n, why = available_memory(); print(n < 8 * GiB, why)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True left under ulimit -v", out.stdout


def test_a_batch_too_big_for_memory_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An update's activations were not in the estimate: ``--hidden 65536 --batch-size
    1000000`` (a terabyte of activations) passed the check, wrote the run directory and the
    replay, then died in torch's allocator with a traceback."""
    from actorq.cli import main

    run = tmp_path / "run"
    argv = ["train", "dqn", "--hidden", "65536", "--batch-size", "1000000", "--precision", "fp32",
            "--actors", "0", "--total-steps", "2000", "--min-replay-size", "100",
            "--run-dir", str(run)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "batches of 1,000,000 (--batch-size, --hidden)" in err, err
    assert not run.exists()


@pytest.mark.parametrize(
    ("agent", "settings", "flag"),
    [
        ("dqn", {"hidden": (1024,), "batch_size": 20_000}, "--batch-size"),
        ("d4pg", {"policy_hidden_sizes": (64,), "critic_hidden_sizes": (64,),
                  "num_atoms": 2001, "batch_size": 4000}, "--batch-size"),
        ("ppo", {"policy_hidden_sizes": (2048,), "value_hidden_sizes": (2048,),
                 "envs_per_actor": 64, "num_steps": 256, "minibatch_size": 16384},
         "--minibatch-size"),
    ],
    ids=["dqn", "d4pg-atoms", "ppo-minibatch"],
)  # fmt: skip
def test_an_updates_activations_are_in_the_estimate(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
    settings: dict[str, object],
    flag: str,
) -> None:
    """Batches a few hundred MB of activations wide (what a regression allocates here), refused
    under 256 MiB: each agent's batch, widths and atoms are counted."""
    from actorq.agents import config_class

    monkeypatch.setattr(actorq.resources, "available_memory", lambda: (GiB // 4, "available"))
    run = tmp_path / "run"
    env = "dmc:cartpole-balance" if agent == "d4pg" else "gym:CartPole-v1"
    cfg = config_class(agent)(env=env, run_dir=str(run), actors=0, total_steps=2000,
                              progress=False, energy=False, log_every=1e9, precision="fp32",
                              **settings)  # fmt: skip
    with pytest.raises(ResourceError, match=rf"an update's activations on batches .*\({flag}"):
        train(cfg)
    assert not run.exists()


def test_a_cuda_learners_batch_and_replay_copy_are_checked_on_its_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a CUDA learner the activations and the replay's copy (``replay_on_device``) are the
    device's memory, not the host's: checked against its free memory."""
    import torch

    from actorq.agents import builder_for
    from actorq.run.memory import check_run_memory, device_memory, run_memory

    cfg = DQNConfig(hidden=(1024,), batch_size=20_000, replay_size=10**6, replay_on_device="yes")
    builder = builder_for(cfg)
    spec = builder.env_spec(cfg)
    cfg.device = "cuda"  # after validate(): no CUDA device is needed to estimate
    host = run_memory(cfg, builder, spec)
    parts = device_memory(cfg, builder, spec)
    assert not any("activations" in k for k in host)
    assert any("activations" in k for k in parts)
    assert any(k.startswith("the replay's copy of 1,000,000 items") for k in parts)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (GiB // 4, 80 * GiB))
    with pytest.raises(ResourceError, match=r"learner needs .*; cuda has 256 MiB free$"):
        check_run_memory(cfg, builder, spec)
    # a bench checking its spec asks no GPU (a CUDA context would outlive the check)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: pytest.fail("asked the GPU"))
    check_run_memory(cfg, builder, spec, device=False)

    def busy(d: Any) -> tuple[int, int]:
        raise RuntimeError("CUDA error: all CUDA-capable devices are busy or unavailable\nmore")

    monkeypatch.setattr(torch.cuda, "mem_get_info", busy)
    with pytest.raises(ResourceError, match=r"^--device cuda: cannot use it \(CUDA error: all"):
        check_run_memory(cfg, builder, spec)


def test_every_shipped_spec_and_default_fits_a_small_machine() -> None:
    """The estimate stays an estimate: every cell of benchmarks/specs/*.toml and every agent's
    defaults fit in 4 GiB (a CUDA cell's learner too, on the device)."""
    from actorq.agents import AGENTS, builder_for, config_class
    from actorq.bench.spec import NATIVE, load_spec, run_config
    from actorq.run.memory import device_memory, run_memory

    configs = [config_class(a)() for a in AGENTS]
    for path in sorted(Path(__file__).parents[2].glob("benchmarks/specs/*.toml")):
        if path.name == "atari.toml":
            pytest.importorskip("ale_py")
        spec = load_spec(path)
        configs += [run_config(c.agent, c.config, spec.country) for c in spec.cells
                    if c.framework == NATIVE and c.seed == spec.cells[0].seed]  # fmt: skip
    for cfg in configs:
        cfg.validate()
        builder = builder_for(cfg)
        spec_ = builder.env_spec(cfg)
        assert sum(run_memory(cfg, builder, spec_).values()) < 4 * GiB, cfg.env
        cfg.replay_on_device = "no"  # (auto asks the device for its size)
        assert sum(device_memory(cfg, builder, spec_).values()) < 4 * GiB, cfg.env
