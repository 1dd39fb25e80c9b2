"""How updates run (agents/step.py): compiled updates compute what eager ones do, metrics stay
on the device until read, and the training loop reads them once per log interval."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from actorq.agents.d4pg.learning import D4PGLearner
from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.learning import DQNLearner
from actorq.agents.ppo.config import PPOConfig
from actorq.agents.ppo.learning import PPOLearner
from actorq.agents.step import HOST_READS, TorchLearner, resolve_mode, set_lr
from actorq.types import ArraySpec, EnvSpec

CARTPOLE = EnvSpec(
    "gym:CartPole-v1", ArraySpec((4,), np.dtype(np.float32)), ArraySpec((), np.dtype(np.int64)), 2
)


def transitions(n: int, seed: int, obs: int, act: int | None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    b = {
        "obs": rng.standard_normal((n, obs)).astype(np.float32),
        "next_obs": rng.standard_normal((n, obs)).astype(np.float32),
        "reward": rng.uniform(-1, 1, n).astype(np.float32),
        "discount": np.where(rng.random(n) < 0.2, 0.0, 0.97).astype(np.float32),
    }
    if act is None:
        b["action"] = rng.integers(0, 2, n)
    else:
        b["action"] = rng.uniform(-1, 1, (n, act)).astype(np.float32)
    return b


def rollout(n: int, t: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    done = rng.random((n, t)) < 0.05
    return {
        "obs": rng.standard_normal((n, t, 4)).astype(np.float32),
        "next_obs": rng.standard_normal((n, t, 4)).astype(np.float32),
        "action": rng.integers(0, 2, (n, t)),
        "reward": np.ones((n, t), np.float32),
        "terminated": done,
        "truncated": np.zeros((n, t), bool),
        "log_prob": np.full((n, t), -math.log(2.0), np.float32),
        "version": np.zeros((n, t), np.int64),
    }


def dqn(mode: str) -> TorchLearner:
    cfg = DQNConfig(hidden=(32, 32), target_update_period=3, learner_mode=mode)
    return DQNLearner(cfg, CARTPOLE)


def d4pg(mode: str) -> TorchLearner:
    return D4PGLearner(3, 1, (32, 32), (32, 32), 21, -10, 10, target_update_period=3,
                       learner_mode=mode)  # fmt: skip


def ppo(mode: str) -> TorchLearner:
    cfg = PPOConfig(
        policy_hidden_sizes=(32, 32), value_hidden_sizes=(32, 32), minibatch_size=64,
        update_epochs=2, learner_mode=mode, total_steps=10_000,
    )  # fmt: skip
    return PPOLearner(cfg, CARTPOLE)


AGENTS: dict[str, tuple[Callable[[str], TorchLearner], Callable[[int], dict[str, np.ndarray]]]] = {
    "dqn": (dqn, lambda s: transitions(64, s, 4, None)),
    "d4pg": (d4pg, lambda s: transitions(64, s, 3, 1)),
    "ppo": (ppo, lambda s: rollout(4, 32, s)),
}


def params(learner: TorchLearner) -> list[torch.Tensor]:
    return [t.detach().clone() for t in learner.runner._module_state()]


def run(name: str, mode: str, k: int) -> tuple[list[torch.Tensor], dict[str, float]]:
    make, data = AGENTS[name]
    learner = make(mode)
    for i in range(k):
        learner.learn(data(i))
    return params(learner), learner.read_metrics()


@pytest.mark.parametrize("name", list(AGENTS))
def test_compiled_updates_equal_eager_updates(name: str) -> None:
    """K=6 updates through torch.compile land where 6 eager ones do (float32 tolerance: the
    compiler reorders sums), with the same metrics."""
    torch.manual_seed(0)
    eager, m_eager = run(name, "eager", 6)
    compiled, m_comp = run(name, "compile", 6)
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert m_eager.keys() == m_comp.keys()
    for key in m_eager:
        assert m_comp[key] == pytest.approx(m_eager[key], rel=1e-3, abs=1e-5), key


@contextmanager
def counting_host_reads() -> Iterator[list[int]]:
    """Counts every way a tensor's value reaches Python (each a device sync on a GPU)."""
    count = [0]
    names = ("item", "__float__", "__int__", "__bool__", "tolist")
    saved = {n: getattr(torch.Tensor, n) for n in names}

    def wrap(fn: Callable[..., object]) -> Callable[..., object]:
        def counted(self: torch.Tensor, *a: object, **kw: object) -> object:
            count[0] += 1
            return fn(self, *a, **kw)

        return counted

    try:
        for n, fn in saved.items():
            setattr(torch.Tensor, n, wrap(fn))
        yield count
    finally:
        for n, fn in saved.items():
            setattr(torch.Tensor, n, fn)


@pytest.mark.parametrize("name", list(AGENTS))
def test_learn_reads_nothing_from_the_device_until_metrics_are_read(name: str) -> None:
    make, data = AGENTS[name]
    learner = make("eager")
    batches = [data(i) for i in range(8)]
    reads = HOST_READS[0]
    with counting_host_reads() as count:
        for b in batches:
            learner.learn(b)
    assert count[0] == 0 and HOST_READS[0] == reads
    with counting_host_reads() as count:
        metrics = learner.read_metrics()
    assert count[0] == 1 + (name == "ppo")  # one read; PPO's first-minibatch ratio is a second
    assert metrics and all(math.isfinite(v) for v in metrics.values())
    assert learner.read_metrics() == {}  # read once, then reset


def test_metrics_are_means_over_the_updates_since_the_last_read() -> None:
    make, data = AGENTS["dqn"]
    a, b = make("eager"), make("eager")
    per_update = [a.update(data(i))["losses/td_loss"] for i in range(5)]
    for i in range(5):
        b.learn(data(i))
    assert b.read_metrics()["losses/td_loss"] == pytest.approx(np.mean(per_update), rel=1e-6)


def test_target_network_is_copied_in_place_every_period() -> None:
    learner = dqn("eager")
    assert isinstance(learner, DQNLearner)
    storage = [p.data_ptr() for p in learner.target.parameters()]
    _, data = AGENTS["dqn"]
    for i in range(2):
        learner.learn(data(i))
    pairs = list(zip(learner.q.parameters(), learner.target.parameters(), strict=True))
    assert not all(torch.equal(p, q) for p, q in pairs)
    learner.learn(data(2))  # the third update: the period
    for p, q in zip(learner.q.parameters(), learner.target.parameters(), strict=True):
        assert torch.equal(p, q)
    assert [p.data_ptr() for p in learner.target.parameters()] == storage


def test_modes_resolve_by_device() -> None:
    assert resolve_mode("auto", torch.device("cpu")) == "eager"
    assert resolve_mode("auto", torch.device("cuda")) == "graph"
    with pytest.raises(ValueError, match="needs a CUDA learner"):
        resolve_mode("graph", torch.device("cpu"))


def test_a_checkpoint_of_a_compiled_learner_loads_into_an_eager_one() -> None:
    """compile/graph keep learning rates as tensors (and graph marks Adam capturable, CUDA
    only): the checkpoint holds them as an eager CPU optimizer does, so it loads anywhere."""
    import json

    make, data = AGENTS["ppo"]
    a = make("compile")
    a.learn(data(0))
    lr = a.opt.param_groups[0]["lr"]  # type: ignore[attr-defined]
    assert isinstance(lr, torch.Tensor)
    a.opt.param_groups[0]["capturable"] = True  # type: ignore[attr-defined]
    tensors, meta = a.state()  # type: ignore[attr-defined]
    group = meta["optimizers"]["opt"]["groups"][0]
    assert isinstance(group["lr"], float) and group["capturable"] is False
    json.dumps(meta)
    b = make("eager")
    b.load_state(tensors, meta)  # type: ignore[attr-defined]
    b.learn(data(1))
    assert math.isfinite(b.read_metrics()["losses/policy_loss"])


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_a_learning_rate_set_between_updates_reaches_the_update(mode: str) -> None:
    """PPO anneals its learning rate every update: a compiled (or captured) step must read
    each new value, not the one it was built with. Set to 0, the next update moves nothing."""
    make, data = AGENTS["ppo"]
    learner = make(mode)
    learner.cfg.anneal_lr = False  # type: ignore[attr-defined]
    learner.learn(data(0))
    before = params(learner)
    set_lr(learner.opt, 0.0)  # type: ignore[attr-defined]
    learner.learn(data(1))
    for x, y in zip(before, params(learner), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    set_lr(learner.opt, 1e-3)  # type: ignore[attr-defined]
    learner.learn(data(2))
    assert any(not torch.equal(x, y) for x, y in zip(before, params(learner), strict=True))
