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


def _learner(n_actions: int = 4) -> Any:

    from actorq.agents.ppo.learning import PPOLearner
    from actorq.types import ArraySpec, EnvSpec

    spec = EnvSpec(
        "atari:Pong",
        observation=ArraySpec((4, 84, 84), "uint8"),
        action=ArraySpec((), "int64"),
        num_actions=n_actions,
        frame_stack=4,
    )
    return PPOLearner(PPOConfig(env="atari:Pong", actors=0, precision="fp32"), spec)


def test_policy_and_value_run_the_shared_trunk_once_with_the_same_outputs() -> None:
    import torch

    from actorq.agents.ppo.networks import policy_and_value

    learner = _learner()
    calls: list[int] = []
    learner.policy.torso.register_forward_hook(lambda *_: calls.append(1))
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    out, v = policy_and_value(learner.policy, learner.value, x)
    assert len(calls) == 1  # one trunk pass for both heads
    with torch.no_grad():
        torch.testing.assert_close(out, learner.policy(x))
        torch.testing.assert_close(v, learner.value(x))


def test_the_trunk_reads_channels_last_and_channels_first_alike() -> None:
    import torch

    learner = _learner()
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        torso = learner.policy.torso
        ref = x.to(torch.float32) / 255.0  # channels-first, as before the NHWC reorder
        for conv in torso.convs:
            ref = torch.relu(conv(ref))
        ref = torch.relu(torso.fc(ref.flatten(1)))
        torch.testing.assert_close(torso(x), ref, rtol=1e-5, atol=1e-5)


def test_pixel_next_values_equal_a_full_pass_across_ends_and_truncations() -> None:
    import numpy as np

    learner = _learner()
    rng = np.random.default_rng(0)
    n, t = 3, 6
    frames = rng.integers(0, 256, (n, t + 1, 4, 84, 84), dtype=np.uint8)
    obs, next_obs = frames[:, :-1].copy(), frames[:, 1:].copy()
    terminated = np.zeros((n, t), np.float32)
    truncated = np.zeros((n, t), np.float32)
    # env 0 terminates at step 2 (the next chunk step is a reset: it differs from next_obs),
    # env 1 is truncated at step 3 (its final observation bootstraps), env 2 runs through
    terminated[0, 2], truncated[1, 3] = 1.0, 1.0
    obs[0, 3] = rng.integers(0, 256, (4, 84, 84), dtype=np.uint8)
    obs[1, 4] = rng.integers(0, 256, (4, 84, 84), dtype=np.uint8)
    value = learner._values(obs)
    full = learner._values(next_obs)
    seen: list[int] = []
    values = learner._values
    learner._values = lambda o: (seen.append(o.shape[0] * o.shape[1]), values(o))[1]
    got = learner._next_values(obs, next_obs, value, terminated)
    assert seen == [4]  # each chunk's last step and the truncation: not all 18 states again
    live = terminated == 0
    np.testing.assert_allclose(got[live], full[live], rtol=1e-5, atol=1e-6)
    assert np.all(got[~live] == 0.0)  # never read: a terminated step does not bootstrap
