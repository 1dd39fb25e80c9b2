"""PPO on pixels: the Nature-CNN policy (one trunk under policy and value heads) published as a
categorical ONNX snapshot (fp32 or int8) that actors sample from, learning a small pixel task end
to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actorq import PPOConfig, train
from actorq.errors import ConfigError
from tests.agents.pixel_task import PIXEL_RUN, pixel_env  # noqa: F401 (the fixture)

pytestmark = pytest.mark.usefixtures("pixel_env")


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_learns_a_pixel_task_end_to_end(tiny: Any, precision: str) -> None:
    # int8: each in-line publish calibrates on the queue's latest states
    run = {**PIXEL_RUN, "precision": precision}
    cfg = tiny("ppo", **run, num_steps=32, minibatch_size=32, learning_rate=1e-3)
    r = train(cfg)
    assert r.publishes > 5 and r.precision == precision
    # fp32 actors run the learner's policy; int8 ones act as it does on ≥ 99% of states
    assert r.action_agreement == 1.0 if precision == "fp32" else r.action_agreement >= 0.99, r
    assert r.eval_return >= 7.5, r  # greedy on held-out seeds: (nearly) every step right


def test_observation_normalisation_is_refused_for_pixels(tmp_path: Path) -> None:
    cfg = PPOConfig(
        env=PIXEL_RUN["env"],
        actors=0,
        precision="fp32",
        normalize_obs=True,
        run_dir=str(tmp_path / "r"),
    )
    with pytest.raises(ConfigError, match="1/255"):
        train(cfg)
    assert not (tmp_path / "r").exists()
