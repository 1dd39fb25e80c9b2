"""benchmarks/dead_units.py tells a Q-network whose ReLUs are all off (its output the same for
every frame, no gradient to revive it) from one that still reads its input: docs/atari.md's
reading of SB3's DQN Pong seed 0 rests on it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actorq.agents.dqn.networks import NatureQNetwork

BENCH = Path(__file__).parents[2] / "benchmarks"


@pytest.fixture
def dead_units(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCH))  # its ``_machine`` import
    spec = importlib.util.spec_from_file_location("dead_units", BENCH / "dead_units.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _net_and_states() -> tuple[NatureQNetwork, list[torch.nn.Module], np.ndarray]:
    torch.manual_seed(0)
    net = NatureQNetwork((4, 84, 84), 6, dueling=False)
    states = np.random.default_rng(0).integers(0, 256, (64, 4, 84, 84), dtype=np.uint8)
    return net, [*net.torso.convs, net.torso.fc, net.head], states


def _adam_step(net: NatureQNetwork, states: np.ndarray) -> dict[Any, Any]:
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    net(torch.from_numpy(states)).pow(2).mean().backward()
    opt.step()
    state: dict[Any, Any] = opt.state_dict()["state"]
    return state


def test_a_network_that_reads_its_input_has_live_units_and_spread(dead_units: Any) -> None:
    net, layers, states = _net_and_states()
    out = dead_units._units(layers, states)
    assert all(x["alive"] > 0 and x["varying"] > 0 for x in out["layers"])
    assert out["max_q_std"] > 0
    moments = dead_units._moments(_adam_step(net, states), len(layers))
    assert all((m > 0).all() for m in moments.values())


def test_a_first_layer_off_everywhere_is_seen_as_dead_with_no_gradient(dead_units: Any) -> None:
    net, layers, states = _net_and_states()
    with torch.no_grad():
        net.torso.convs[0].bias.fill_(-100.0)  # every pre-activation < 0 on pixels in [0, 1]
    out = dead_units._units(layers, states)
    assert out["layers"][0]["alive"] == 0
    # after it units may be on through their biases, all alike on every state
    assert [x["varying"] for x in out["layers"]] == [0.0] * 4
    # alike up to float32 rounding: one batched matmul may round its rows differently (a CPU's
    # kernel blocks them; 4e-9 on a fresh EPYC's oneDNN)
    assert out["max_q_std"] < 1e-6 and len(out["greedy_actions"]) == 1
    moments = dead_units._moments(_adam_step(net, states), len(layers))
    # no gradient to the first layer, nor to the second's weights (their input is all zeros)
    assert (moments["layer0"] == 0).all() and moments["layer1"][0] == 0
    assert (moments["layer4"] > 0).all()  # the head still learns a constant


def test_a_cell_that_is_not_dqn_is_one_line(dead_units: Any, tmp_path: Path) -> None:
    from actorq.errors import ActorQError

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "cell.json").write_text('{"agent": "ppo"}')
    with pytest.raises(ActorQError, match="a ppo cell; this reads DQN cells"):
        dead_units._cell(tmp_path, "c")
    with pytest.raises(ActorQError, match="not a cell's record"):
        dead_units._cell(tmp_path, "missing")


def test_sb3s_adam_moments_are_read_layer_by_layer(dead_units: Any) -> None:
    """The mapping the docs' 5.6e-45 rests on: SB3's optimizer state, in q_net's parameter
    order, onto conv1..conv3, fc and the head (one layer's moments zeroed, only it reads 0)."""
    sb3 = pytest.importorskip("stable_baselines3")
    from tests.agents.pixel_task import Pixels

    model = sb3.DQN("CnnPolicy", Pixels(), buffer_size=100, learning_starts=0, seed=0, device="cpu")
    opt = model.policy.optimizer
    x = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (8, 4, 36, 36))).float()
    model.policy.q_net(x).pow(2).mean().backward()
    opt.step()
    layers, _ = dead_units._sb3_layers(model)
    for p in (layers[1].weight, layers[1].bias):  # conv2's
        opt.state[p]["exp_avg"].zero_()
    _, moments = dead_units._sb3_layers(model)
    assert [type(m).__name__ for m in layers] == ["Conv2d"] * 3 + ["Linear"] * 2
    assert (moments["layer1"] == 0).all()
    assert all((moments[f"layer{i}"] > 0).all() for i in (0, 2, 3, 4))
