"""DQN on pixels: uint8 frames from the env through replay and checkpoints, the Nature-CNN
published as a Q-head ONNX snapshot that actors and evaluations run, settings the pixel path does
not run yet refused in one line before anything is written."""

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
    cfg = tiny(
        "dqn",
        **{**PIXEL_RUN, "env": f"gym:{env}"},
        replay_size=2000,
        min_replay_size=200,
        batch_size=32,
        samples_per_insert=8.0,
        publish_every=20,
        epsilon=0.3,
        target_update_period=50,
    )
    r = train(cfg)
    assert r.publishes > 5 and r.action_agreement == 1.0  # fp32 actors: the learner's policy
    assert r.eval_return >= 7.5, r  # greedy on held-out seeds: (nearly) every step right
    with np.load(tmp_path / "run/checkpoint/replay.npz") as z:
        assert z[stored].dtype == np.uint8 and z[stored].shape[-2:] == (36, 36)


@pytest.mark.parametrize(("kw", "needle"), [({"precision": "int8"}, "fp32 for now")])
def test_settings_the_pixel_path_lacks_are_one_line(
    tmp_path: Path, kw: dict[str, Any], needle: str
) -> None:
    cfg = DQNConfig(env=PIXEL_RUN["env"], actors=0, run_dir=str(tmp_path / "run"), **kw)
    with pytest.raises(ConfigError, match=needle):
        train(cfg)
    assert not (tmp_path / "run").exists()
