"""DQN on pixels: uint8 frames from the env through replay and checkpoints, the Nature-CNN
published as a Q-head ONNX snapshot that actors and evaluations run (fp32, or int8 calibrated on
replay states at each publish, or auto), settings the pixel path does not run refused in one
line before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actorq import DQNConfig, train
from actorq.agents.dqn.networks import NatureQNetwork
from actorq.agents.pixels import pixel_snapshot
from actorq.errors import ConfigError
from actorq.quant.runtimes import ModelRuntime, decode_snapshot, make_runtime, snapshot_head
from actorq.types import ArraySpec, EnvSpec
from tests.agents.pixel_task import ENV, ENV_STACKED, PIXEL_RUN, pixel_env  # noqa: F401

pytestmark = pytest.mark.usefixtures("pixel_env")

#: DQN settings that learn the pixel task in about a thousand steps
DQN_LEARNS: dict[str, Any] = {
    "replay_size": 2000,
    "min_replay_size": 200,
    "batch_size": 32,
    "samples_per_insert": 8.0,
    "publish_every": 20,
    "epsilon": 0.3,
    "target_update_period": 50,
}


def test_q_snapshot_runs_uint8_frames_with_a_q_head() -> None:
    spec = EnvSpec(PIXEL_RUN["env"], ArraySpec((4, 36, 36), "uint8"), ArraySpec((), "int64"), 2)
    net = NatureQNetwork((4, 36, 36), 2)
    snap = decode_snapshot(pixel_snapshot(net, 3, spec, "q").to_bytes())
    assert snapshot_head(snap).name == "q" and snap.version == 3
    rt = make_runtime(snap)
    assert isinstance(rt, ModelRuntime)
    frames = np.random.default_rng(0).integers(0, 256, (5, 4, 36, 36), dtype=np.uint8)
    import torch

    with torch.no_grad():
        want = net(torch.from_numpy(frames)).numpy()
    np.testing.assert_allclose(rt(frames), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("env", "stored"), [(ENV, "obs"), (ENV_STACKED, "frames")], ids=["stacks", "frames"]
)
def test_learns_a_pixel_task_end_to_end(tiny: Any, tmp_path: Path, env: str, stored: str) -> None:
    # a frame-stacked env goes through the frame replay (each frame stored once), another
    # image env through the ring of uint8 stacks
    cfg = tiny("dqn", **{**PIXEL_RUN, **DQN_LEARNS, "env": f"gym:{env}"})
    r = train(cfg)
    assert r.publishes > 5 and r.action_agreement == 1.0  # fp32 actors: the learner's policy
    assert r.eval_return >= 7.5, r  # greedy on held-out seeds: (nearly) every step right
    with np.load(tmp_path / "run/checkpoint/replay.npz") as z:
        assert z[stored].dtype == np.uint8 and z[stored].shape[-2:] == (36, 36)


def test_int8_actors_learn_it_and_the_summary_reports_their_agreement(tiny: Any) -> None:
    # int8 actors (static QLinearConv, calibrated on replay at each publish) act as the fp32
    # network does on ≥ 99% of replay states, and the greedy int8 policy solves the task
    cfg = tiny("dqn", **{**PIXEL_RUN, **DQN_LEARNS, "precision": "int8"})
    r = train(cfg)
    assert r.precision == "int8" and r.agreement_states > 0
    assert r.action_agreement >= 0.99, r
    assert r.eval_return >= 7.5, r
    # actorq eval/export: the snapshot the run ended with, calibrated on its replay (kept in
    # the checkpoint: eval has no replay), evaluating to the summary's return
    from actorq.core.seeds import FINAL_EVAL_SEED
    from actorq.run.directory import load_run_policy

    _, io, data = load_run_policy(cfg.run_dir, None)
    snap = decode_snapshot(data)
    assert snap.precision == "int8" and snap.meta["calibration_states"] == 256
    assert float(io.evaluate(data, cfg.eval_episodes, FINAL_EVAL_SEED).mean()) == r.eval_return


def test_publishes_calibrate_int8_on_replay_states() -> None:
    from actorq.agents.pixels import PIXEL_CALIBRATION_STATES, PixelPolicyIO, activation_max
    from actorq.quant.model_snapshot import ModelSnapshot
    from actorq.run.publisher import Publisher

    spec = EnvSpec(PIXEL_RUN["env"], ArraySpec((4, 36, 36), "uint8"), ArraySpec((), "int64"), 2)
    states = np.random.default_rng(0).integers(0, 256, (4096, 4, 36, 36), dtype=np.uint8)

    class Replay:  # the backend's replay view: what the publisher samples from
        size = len(states)

        def __init__(self) -> None:
            self.asked: list[int] = []

        def sample_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
            self.asked.append(n)
            return states[rng.choice(len(states), n, replace=False)]

    cfg = DQNConfig(env=PIXEL_RUN["env"], precision="int8", actors=0)
    net = NatureQNetwork((4, 36, 36), 2)
    pub = Publisher(cfg, PixelPolicyIO(cfg, spec, net, "q"))
    pub.replay = replay = Replay()
    snap = decode_snapshot(pub.snapshot(5))
    assert isinstance(snap, ModelSnapshot) and snap.precision == "int8"
    assert replay.asked == [PIXEL_CALIBRATION_STATES]
    assert snap.meta["calibration_states"] == PIXEL_CALIBRATION_STATES
    # the model's static output scales are the replay states' activation maxima / 255
    used = states[np.random.default_rng((cfg.seed, 5)).choice(len(states), 256, replace=False)]
    import onnx
    from onnx import numpy_helper

    proto = onnx.load_model_from_string(snap.model)
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    convs = [n for n in proto.graph.node if n.op_type == "QLinearConv"]
    got = [float(inits[n.input[6]]) * 255 for n in convs]  # y_scale: a scalar
    np.testing.assert_allclose(got, activation_max(net.torso, used)[:3], rtol=1e-6)
    assert decode_snapshot(pub.snapshot(5, "fp32")).precision == "fp32"
    assert replay.asked == [PIXEL_CALIBRATION_STATES]  # fp32 needs no states


def _firsts(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The snapshots a run publishes first (to its actors, and its evaluations' ``latest``)."""
    from actorq.run.publisher import Publisher

    got: list[bytes] = []
    publish = Publisher.publish

    def spy(self: Publisher, c: Any, first: bytes | None = None, in_line: bool = False) -> None:
        if first is not None:
            got.append(first)
        publish(self, c, first, in_line)

    monkeypatch.setattr(Publisher, "publish", spy)
    return got


def test_a_resumed_int8_run_starts_its_actors_on_a_snapshot_calibrated_on_its_replay(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the resumed run's first snapshot was made before its replay was restored: calibrated on
    # nothing (activation ranges over every possible frame), acted with until the learner's
    # first publish (on a Pong checkpoint: fp32's greedy action on 7% of replay states)
    from actorq.agents.pixels import PIXEL_CALIBRATION_STATES

    cfg = tiny("dqn", **{**PIXEL_RUN, **DQN_LEARNS, "precision": "int8", "total_steps": 400})
    train(cfg)  # it ends with its final snapshot (version + 1), not one the actors ran
    firsts = _firsts(monkeypatch)
    train(DQNConfig(resume=cfg.run_dir, total_steps=480, progress=False))
    snap = decode_snapshot(firsts[0])
    assert snap.precision == "int8" and snap.meta["calibration_states"] == PIXEL_CALIBRATION_STATES


def test_an_interrupted_int8_run_resumes_with_the_snapshot_its_actors_ran(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # stopped (SIGTERM, Ctrl-C) right after a publish, the checkpoint keeps the snapshot the
    # actors ran and an evaluation would score; a resume starts from exactly those bytes
    cfg = tiny("dqn", **{**PIXEL_RUN, **DQN_LEARNS, "precision": "int8", "publish_every": 1},
               log_every=1e-6)  # fmt: skip
    calls = []

    def stop(info: dict[str, Any]) -> None:
        calls.append(info)
        if len(calls) == 120:  # 480 env steps: 70 updates past the replay's 200
            raise KeyboardInterrupt  # what a stop signal raises in the loop

    assert train(cfg, callback=stop).interrupted
    kept = (Path(cfg.run_dir) / "checkpoint" / "snapshot.bin").read_bytes()
    snap = decode_snapshot(kept)
    assert snap.version > 1 and snap.meta["calibration_states"] > 0
    firsts = _firsts(monkeypatch)

    def halt(info: dict[str, Any]) -> None:
        raise KeyboardInterrupt

    train(DQNConfig(resume=cfg.run_dir, progress=False, log_every=1e-6), callback=halt)
    assert firsts[0] == kept


def test_auto_picks_one_of_the_measured_pixel_precisions(tiny: Any, tmp_path: Path) -> None:
    cfg = tiny("dqn", **{**PIXEL_RUN, "precision": "auto", "total_steps": 64}, min_replay_size=32)
    r = train(cfg)
    assert r.precision in ("fp32", "fp16", "int8")
    table = (tmp_path / "run/precision_auto.md").read_text()
    assert all(f"| {p} |" in table for p in ("fp32", "fp16", "int8"))
    assert "at batch 1" in table


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"precision": "int4"}, "no convolution kernel in onnxruntime"),
        ({"runtime": "numpy"}, "--runtime ort"),
    ],
)
def test_settings_the_pixel_path_lacks_are_one_line(
    tmp_path: Path, kw: dict[str, Any], needle: str
) -> None:
    cfg = DQNConfig(env=PIXEL_RUN["env"], actors=0, run_dir=str(tmp_path / "run"), **kw)
    with pytest.raises(ConfigError, match=needle):
        train(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        # 8 environments x (1 first frame + 3 steps): no stream holds a 3-step transition before
        ({"min_replay_size": 24, "n_step": 3}, "--min-replay-size >= 32"),
        ({"replay_size": 40, "min_replay_size": 40}, "leaves 5 frames each"),
    ],
)
def test_a_frame_replay_that_cannot_give_a_batch_is_one_line(
    tmp_path: Path, kw: dict[str, Any], needle: str
) -> None:
    cfg = DQNConfig(env=f"gym:{ENV_STACKED}", actors=0, envs_per_actor=8,
                    run_dir=str(tmp_path / "run"), **kw)  # fmt: skip
    with pytest.raises(ConfigError, match=needle):
        train(cfg)
    assert not (tmp_path / "run").exists()
