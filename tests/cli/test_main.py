"""The ``actorq`` command: bad input is one line and a non-zero exit; eval and export work."""

import contextlib
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

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
        (["train", "dqn", "--samples-per-insert", "nan"], "finite number"),
        (["train", "dqn", "--learning-rate", "nan"], "finite number"),
        (["train", "dqn", "--n-step", "100000"], "--n-step must be in [1, 1000]"),
        (["train", "dqn", "--adam-eps", "-1"], "--adam-eps must be > 0"),
        (["train", "dqn", "--seed", "-1"], "--seed must be in"),
        (["train", "dqn", "--device", "foo"], "--device must be cpu, cuda or cuda:N"),
        (["train", "dqn", "--huber-delta", "-1"], "--huber-delta must be > 0"),
        (["train", "ppo", "--gae-lambda", "2"], "--gae-lambda must be in [0, 1]"),
        (["train", "dqn", "--env", "gym:LunarLander-v3"], "Box2D is not installed"),
        (["train", "d4pg", "--env", "gym:HalfCheetah-v2"], "cannot make 'gym:HalfCheetah-v2'"),
        (["train", "dqn", "--env", "gym:FrozenLake-v1"], "only Box observation spaces"),
        (["train", "ppo", "--env", "gym:phys2d/CartPole-v1"], "No module named 'jax'"),
        (["train", "dqn", "--actors", "abc"], "Error parsing --actors"),
        (["train", "ppo", "--no-such-flag"], "Unrecognized options: --no-such-flag"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args: list[str], needle: str, tmp_path: Path) -> None:
    argv = [*args, *(["--run-dir", str(tmp_path / "r")] if args[0] == "train" else [])]
    if any(a in ("--env", "--no-such-flag") for a in args):
        # envs and unknown flags in a fresh interpreter: an import's warning or a parser's
        # message printed at exit would show there and not in this process
        p = run_cli(*argv)
        code, stderr = p.returncode, p.stderr
    else:  # validation of values: the same main(), without an interpreter's start per case
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        stderr = err.getvalue()
    assert code == 2
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], stderr
    assert not (tmp_path / "r").exists()


def test_a_failed_resume_prints_no_cores_warning(tmp_path: Path) -> None:
    p = run_cli("train", "dqn", "--actors", "8", "--resume", str(tmp_path / "nothing"))
    assert p.returncode == 2 and "warning" not in p.stderr and p.stderr.count("\n") == 1


def test_eval_and_export_refuse_bad_input_without_writing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(DQNConfig(actors=0, envs_per_actor=4, total_steps=800, min_replay_size=300,
                    stop_at_target=False, progress=False, energy=False,
                    run_dir=str(run)))  # fmt: skip
    before = sorted(p.name for p in tmp_path.rglob("*"))
    (tmp_path / "adir").mkdir()
    for args in (
        ["eval", str(run), "--episodes", "0"],
        ["export", str(run), "--out", str(tmp_path / "missing" / "x.onnx")],
        ["export", str(run), "--out", str(tmp_path / "adir"), "--force"],
    ):
        assert main(args) == 2, args
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted([*before, "adir"])
    # a run whose weights are NaN (a diverged run saved by an older actorq) is refused
    from safetensors.torch import load_file, save_file

    from tests.test_checkpoint import _reseal

    w = load_file(str(run / "checkpoint/learner.safetensors"))
    w["q.layers.0.weight"][0, 0] = float("nan")
    save_file(w, str(run / "checkpoint/learner.safetensors"))
    _reseal(run / "checkpoint")
    assert main(["eval", str(run), "--episodes", "1"]) == 2
    assert main(["export", str(run), "--out", str(tmp_path / "p.onnx")]) == 2
    assert not (tmp_path / "p.onnx").exists()


def test_train_into_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("keep")
    p = run_cli("train", "dqn", "--actors", "0", "--run-dir", str(f))
    assert p.returncode == 2 and "is a file" in p.stderr and f.read_text() == "keep"


def test_more_actors_than_cores_warns_and_make_runs_default_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("actorq.config.usable_cores", lambda: 2)
    assert "3 actor processes on 2 cores" in (DQNConfig(actors=3).cores_warning() or "")
    assert DQNConfig(actors=2).cores_warning() is None  # `make run` on a 2-core machine


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


def test_eval_and_export_read_a_gpu_trained_run_without_a_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import torch

    run = tmp_path / "run"
    train(DQNConfig(actors=0, envs_per_actor=4, total_steps=800, min_replay_size=400,
                    stop_at_target=False, progress=False, run_dir=str(run)))  # fmt: skip
    # what a run trained with --device cuda writes (its checkpoint tensors are CPU tensors)
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "device": "cuda"}))
    if torch.cuda.is_available():
        pytest.skip("the machine has a GPU: tests/test_cuda.py covers this case there")
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert main(["export", str(run), "--out", str(tmp_path / "p.onnx")]) == 0
    capsys.readouterr()
    # asking for the GPU here is one line; resuming without --device goes on on the CPU, saying so
    resume = ["train", "dqn", "--resume", str(run), "--total-steps", "1600", "--no-progress"]
    assert main([*resume, "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert main(resume) == 0
    assert "trained its learner on cuda" in capsys.readouterr().err
    assert json.loads((run / "summary.json").read_text())["env_steps"] >= 1600
    assert json.loads((run / "config.json").read_text())["device"] == "cuda"  # the run's record


@settings(max_examples=200, deadline=None)
@given(
    agent=st.sampled_from(["dqn", "d4pg", "ppo", "go"]),
    flags=st.lists(
        st.tuples(
            st.sampled_from(["--actors", "--seed", "--learning-rate", "--gamma", "--hidden",
                             "--policy-hidden-sizes", "--n-step", "--num-steps", "--device",
                             "--precision", "--total-steps", "--env", "--backend", "--bogus",
                             "--graphs", "--cluster", "--batch-graphs", "--imitate",
                             "--imitate-steps", "--imitate-lr", "--start", "--sil-coef",
                             "--replay-shards", "--cost-input", "--ray-address",
                             "--atari-sticky", "--atari-engine", "--learner-threads",
                             "--runtime", "--learner-mode"]),
            st.one_of(st.sampled_from(["nan", "inf", "-1", "0", "1e400", "abc", "", "2,x",
                                       "cuda:9", "gym:CartPole-v1", "99999999999999999999",
                                       "graphopt:joint/gnmt-s", "synthetic-50-s0",
                                       "8xgpu-nvlink", "best", "heft", "atari:Pong",
                                       "atari:Pongg", "0.25", "ale", "envpool", "numpy",
                                       "compile", "int4", "1e5", "2.5e3", "1.5e0", "1e-3",
                                       "64.0", "a" * 300 + ".json",
                                       "graphopt:placement/" + "a" * 300 + ".json",
                                       "chip:" + "a" * 300]),
                      st.text(max_size=6)),
        ),
        max_size=3,
    ),
)  # fmt: skip
@example(agent="dqn", flags=[("--policy-hidden-sizes", "-h")])  # a help flag where a value goes
@example(agent="ppo", flags=[("--env", "atari:Pong"), ("--runtime", "numpy")])  # not the note
@example(agent="dqn", flags=[("--env", "atari:Pong"), ("--precision", "int4")])
@example(agent="go", flags=[("--graphs", "a" * 300 + ".json")])  # too long a file name
def test_random_flags_are_one_line_or_a_validated_config(
    agent: str, flags: list[tuple[str, str]]
) -> None:
    import actorq.experiment

    seen: list[Any] = []

    def fake_train(cfg: Any, **_: Any) -> Any:  # parsing and validation only: no run
        seen.append(cfg)
        return type("R", (), {"interrupted": False})()

    argv = ["train", agent, *[x for pair in flags for x in pair]]
    err = io.StringIO()
    orig = actorq.experiment.train
    actorq.experiment.train = fake_train  # type: ignore[assignment]
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = main(argv)
    except SystemExit as e:  # -h or --help anywhere asks for help, as argparse's flags do
        assert e.code in (0, None) and {"-h", "--help"} & set(argv[2:]), e.code
        assert "usage:" in out.getvalue() and not seen
        return
    finally:
        actorq.experiment.train = orig  # type: ignore[assignment]
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    if code == 0:
        assert len(seen) == 1
        seen[0].validate()
    else:
        assert code == 2 and len(lines) == 1 and lines[0].startswith("actorq: error:"), lines


@pytest.mark.parametrize(
    "command",
    [["eval"], ["export", "--out", "policy.onnx"], ["train", "dqn", "--resume"]],
    ids=["eval", "export", "resume"],
)
def test_a_file_given_as_a_run_directory_is_called_a_file(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file where a run directory goes (``actorq eval policy.onnx``) is said to be a file,
    not a run directory that is not there or lacks config.json: every reader of a run says
    so."""
    path = tmp_path / "policy.onnx"
    path.write_bytes(b"not a run")
    argv = [*command[:1], str(path), *command[1:]]
    if command[0] == "train":
        argv = [*command, str(path)]
    assert main(argv) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert lines == [f"actorq: error: {path} is a file, not a run directory"], lines
    assert path.read_bytes() == b"not a run" and sorted(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize(
    ("label", "n", "said"),
    [
        ("held-out, {episodes} ep", 20, (" over 20 episodes", "held-out")),
        ("held-out, {episodes} ep", 1, (" over 1 episode", "held-out")),
        ("{episodes} ep", 3, (" over 3 episodes", "")),
        ("greedy, mean of 3 graph(s)", 3, ("", "greedy, mean of 3 graph(s)")),
        ("greedy placement (1 episode)", 1, ("", "greedy placement (1 episode)")),
    ],
)  # fmt: skip
def test_eval_says_the_episode_count_once(label: str, n: int, said: tuple[str, str]) -> None:
    """``actorq eval --episodes 20`` said "over 20 episodes (held-out, 20 ep; ...)"."""
    from actorq.cli.main import _evaluated_over

    assert _evaluated_over(label, n) == said


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["eval"], "missing RUN_DIR"),
        (["chip", "show"], "missing PLC, --netlist, --out"),
        (["chip", "cost"], "missing NETLIST, PLC"),
        (["chip", "cost", "sample_clustered"], "missing PLC"),  # the given one is NETLIST
        (["graphopt", "place"], "missing --graph"),
        (["train", "dqn", "--steps", "5"], "did you mean --total-steps"),
        (["train", "dqn", "--lerning-rate", "3"], "did you mean --learning-rate?"),
    ],
)
def test_missing_and_mistyped_arguments_are_named(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert line in err and "\n" not in err and err.startswith("actorq: error: ")


@pytest.mark.parametrize(
    ("argv", "name"),
    [(["eval"], "RUN_DIR"), (["export"], "RUN_DIR"), (["chip", "cost"], "NETLIST"),
     (["bench"], "SPEC.toml"), (["report"], "RESULTS_DIR")],
)  # fmt: skip
def test_help_names_positional_arguments_not_their_type(
    argv: list[str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    usage = capsys.readouterr().out.splitlines()[0]
    assert name in usage.split() and "STR" not in usage.split(), usage


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("evalfuzz") / "run"
    train(DQNConfig(actors=0, envs_per_actor=4, total_steps=1200, min_replay_size=400,
                    eval_every=600, eval_episodes=1, stop_at_target=False, progress=False,
                    energy=False, run_dir=str(run)))  # fmt: skip
    return run


def _listing(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


_EVAL_FLAGS = {
    "--episodes": ["1", "2", "0", "-1", "100001", "nan", "1e400", "abc", ""],
    "--precision": ["fp32", "fp16", "int8", "int4", "auto", "int3", "", "nan"],
    "--runtime": ["ort", "numpy", "torch", "cuda", ""],
    "--which": ["latest", "best", "worst", ""],
    "--seed": ["0", "-1", "4294967295", "nan", "99999999999999999999"],
}


@settings(max_examples=60, deadline=None)
@given(
    cmd=st.sampled_from(["eval", "export"]),
    flags=st.lists(
        st.sampled_from(sorted(_EVAL_FLAGS)).flatmap(
            lambda f: st.tuples(st.just(f), st.sampled_from(_EVAL_FLAGS[f]) | st.text(max_size=4))
        ),
        max_size=3,
    ),
    out=st.sampled_from(["new.onnx", "exists.onnx", "a/b.onnx", "dir", ""]),
    force=st.booleans(),
)
def test_eval_and_export_flags_are_one_line_or_work(
    small_run: Path, tmp_path_factory: pytest.TempPathFactory, cmd: str,
    flags: list[tuple[str, str]], out: str, force: bool,
) -> None:  # fmt: skip
    """`actorq eval` / `export` read a run directory and flags: success, or one error line and
    exit status 2; the run directory is never written, nor a partial --out."""
    if cmd == "export":  # (--which best reads RUN/best: the run's evaluations kept one)
        flags = [(f, v) for f, v in flags if f in ("--precision", "--which")]
    d = tmp_path_factory.mktemp("out")
    (d / "exists.onnx").write_bytes(b"keep")
    (d / "dir").mkdir()
    argv = [cmd, str(small_run), *[x for pair in flags for x in pair]]
    if cmd == "export":
        argv += ["--out", str(d / out), *(["--force"] if force else [])]
    before, outs = _listing(small_run), _listing(d)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    assert _listing(small_run) == before
    if code == 0:
        return
    assert code == 2 and len(lines) == 1 and lines[0].startswith("actorq: error:"), lines
    assert _listing(d) == outs  # a refused export writes nothing
