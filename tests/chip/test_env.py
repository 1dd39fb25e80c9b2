"""ChipPlacementEnv: Gymnasium's checker, masks, the final reward, infeasible episodes, and
``make_env("chip:...")``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from actorq.chip.cost import PlacementCost
from actorq.chip.env import ChipPlacementEnv
from actorq.chip.force import FDConfig
from actorq.chip.netlist import get_netlist, netlist_dir, parse_netlist
from actorq.chip.plc import load_plc
from actorq.envs import make_env, validate_env_id
from actorq.errors import EnvIdError

from .synth import node_text

FAST_FD = FDConfig(num_steps=(10, 10, 10))


@pytest.mark.parametrize("name", ["toy_macro_stdcell", "sample_clustered"])
def test_check_env(name: str) -> None:
    env = make_env(f"chip:{name}", fd=FAST_FD)
    assert isinstance(env, ChipPlacementEnv)
    check_env(env, skip_render_check=True)


def _play(env: ChipPlacementEnv, seed: int = 0) -> tuple[float, dict, int]:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    steps = 0
    while True:
        mask = info["action_mask"]
        assert np.array_equal(env.split(obs)["mask"].ravel(), mask.astype(np.float32))
        a = int(rng.choice(np.flatnonzero(mask)))
        obs, r, term, trunc, info = env.step(a)
        steps += 1
        assert env.observation_space.contains(obs)
        if term or trunc:
            return float(r), info, steps
        assert r == 0.0


def test_masked_episode_places_every_macro_and_pays_the_proxy() -> None:
    env = make_env("chip:macro_tiles_10x10", fd=FAST_FD)
    assert isinstance(env, ChipPlacementEnv)
    r, info, steps = _play(env)
    assert info["reason"] == "placed" and steps == env.n == 100
    assert r == pytest.approx(-info["proxy"])
    # the env's placement is legal and its costs are the evaluator's from scratch
    pc = env.pc
    h = pc.netlist.hard_macros
    x, y, hw, hh = pc.x[h], pc.y[h], pc.netlist.width[h] / 2, pc.netlist.height[h] / 2
    ox = np.abs(x[:, None] - x[None, :]) < hw[:, None] + hw[None, :] - 1e-6
    oy = np.abs(y[:, None] - y[None, :]) < hh[:, None] + hh[None, :] - 1e-6
    np.fill_diagonal(ox, False)
    assert not (ox & oy).any()
    assert info["proxy"] == pytest.approx(pc.full_costs().proxy)


def test_order_is_largest_first_and_split_reads_the_observation() -> None:
    env = ChipPlacementEnv("sample_clustered", fd=FAST_FD)
    nl = env.netlist
    areas = nl.width[env.order] * nl.height[env.order]
    assert np.all(np.diff(areas) <= 0)
    obs, _ = env.reset(seed=0)
    parts = env.split(obs)
    assert parts["current"][0] == 1.0 and parts["placed"][:, 2].sum() == 0
    assert parts["density"].shape == (env.rows, env.cols)


def test_illegal_action_ends_with_the_penalty() -> None:
    env = ChipPlacementEnv("sample_clustered", fd=FAST_FD, infeasible_penalty=3.0)
    _, info = env.reset(seed=0)
    a = int(np.flatnonzero(info["action_mask"])[0])
    _, _, term, _, info = env.step(a)
    assert not term and info["action_mask"][a] == 0  # the cell the first macro took
    _, r, term, _, info = env.step(a)
    assert term and r == -3.0 and "not a legal cell" in info["reason"]
    with pytest.raises(RuntimeError):
        env.step(0)


def test_no_legal_cell_left_ends_the_episode() -> None:
    # two 60×60 macros on a 100×100 canvas with a 1×1... 2×2 grid: the second never fits
    text = "\n".join(
        [
            node_text("A", type="MACRO", width=60.0, height=60.0, x=50.0, y=50.0),
            node_text("B", type="MACRO", width=50.0, height=50.0, x=50.0, y=50.0),
            node_text("A/p", ["B/p"], type="MACRO_PIN", macro_name="A"),
            node_text("B/p", type="MACRO_PIN", macro_name="B"),
        ]
    )
    nl = parse_netlist(text)
    env = ChipPlacementEnv(nl, fd=FAST_FD)
    _, info = env.reset(seed=0)
    a = int(np.flatnonzero(info["action_mask"])[0])
    _, r, term, _, info = env.step(a)
    assert term and r == -2.0 and info["reason"].startswith("no legal cell for macro B")
    # the random legal baseline counts such an episode as the policy is scored: the penalty
    from actorq.chip.env import random_legal_proxies

    assert random_legal_proxies(env, 3, seed=0).tolist() == [2.0, 2.0, 2.0]


def test_episode_time_is_dominated_by_fd_on_a_small_netlist() -> None:
    env = ChipPlacementEnv("sample_clustered", fd=FAST_FD)
    r, info, _ = _play(env, seed=1)
    pc = PlacementCost.from_placement(
        get_netlist("sample_clustered"), load_plc(netlist_dir("sample_clustered") / "initial.plc")
    )
    assert np.isfinite(r) and r < 0 and info["costs"]["proxy"] > 0 and pc.costs().proxy > 0


def test_chip_ids(tmp_path: Path) -> None:
    validate_env_id("chip:ariane133")
    with pytest.raises(EnvIdError, match="unknown chip netlist"):
        validate_env_id("chip:nope")
    # a netlist file (initial.plc beside it is optional)
    src = netlist_dir("sample_clustered")
    f = tmp_path / "netlist.pb.txt"
    f.write_text((src / "netlist.pb.txt").read_text())
    env = make_env(f"chip:{f}", fd=FAST_FD)
    assert isinstance(env, ChipPlacementEnv) and env.pc.canvas.columns == 10  # default canvas
    bad = tmp_path / "bad.pb.txt"
    bad.write_text("node {\n")
    with pytest.raises(EnvIdError, match="chip:"):
        make_env(f"chip:{bad}")


def test_env_spec_is_a_flat_box_and_discrete_actions() -> None:
    from actorq.envs import env_spec

    spec = env_spec("chip:toy_macro_stdcell")
    env = ChipPlacementEnv("toy_macro_stdcell", fd=FAST_FD)
    assert spec.num_actions == env.rows * env.cols == 200
    assert spec.observation.shape == env.observation_space.shape
    assert list(env.layout) == ["static", "placed", "current", "density", "mask"]
