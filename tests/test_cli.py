"""The ``actorq`` command: bad input is one line and a non-zero exit; eval and export work."""

import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest

from actorq import DQNConfig, train
from actorq.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actorq.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "dqn", "--env", "gym:NoSuchEnv-v0"], "unknown Gymnasium id"),
        (["train", "dqn", "--env", "pong"], "prefixes"),
        (["train", "dqn", "--precision", "int3"], "unknown precision"),
        (["train", "dqn", "--hidden", "64,-2"], "positive integers"),
        (["train", "a2c"], "unknown algorithm"),
        (["train", "d4pg", "--env", "dmc:walker-flip"], "its tasks: run, stand, walk"),
        (["train", "d4pg", "--env", "gym:CartPole-v1", "--actors", "0"], "use DQN"),
        (["train", "d4pg", "--policy-hidden-sizes", "12,x"], "positive integers"),
        (["eval", "/nonexistent/run"], "not found"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args: list[str], needle: str, tmp_path: Path) -> None:
    p = run_cli(*args, *(["--run-dir", str(tmp_path / "r")] if args[0] == "train" else []))
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr
    assert not (tmp_path / "r").exists()


def test_more_actors_than_cores_warns(tmp_path: Path) -> None:
    cfg = DQNConfig(actors=64)
    assert cfg.cores_warning() is not None and "cores" in (cfg.cores_warning() or "")


def test_eval_and_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    train(DQNConfig(actors=0, envs_per_actor=4, total_steps=1500, min_replay_size=500,
                    stop_at_target=False, progress=False, run_dir=str(run)))  # fmt: skip
    assert main(["eval", str(run), "--episodes", "3"]) == 0
    assert "mean return" in capsys.readouterr().out
    out = tmp_path / "policy.onnx"
    assert main(["export", str(run), "--out", str(out)]) == 0
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    import numpy as np

    q = sess.run(None, {"obs": np.zeros((2, 4), np.float32)})[0]
    assert q.shape == (2, 2)
    assert main(["export", str(run), "--out", str(out)]) == 2  # exists: not overwritten
    (run / "checkpoint" / "manifest.json").write_text("{not json")
    assert main(["eval", str(run)]) == 2
