"""Which ReLU units of a DQN cell's Nature-CNN still fire: an SB3 cell's Q-network and an actorq
cell's side by side, from their checkpoints, on the same states (the SB3 cell's own replay).

A ReLU unit that is off on every state passes no gradient back; a layer whose units are all off
makes the Q-values independent of the frame (one greedy action everywhere: Pong lost 21-0), and
no update revives it, since the weights before it get zero gradients. The checkpoint's Adam first
moments show that directly: ``|m|`` of a layer that gets no gradient decays to float32's
smallest numbers. docs/atari.md cites this for SB3's DQN Pong seed 0 (DLR-RM/stable-baselines3
issue 1446 reports the symptom, one action everywhere, without a diagnosis).

    python benchmarks/dead_units.py RESULTS SB3_CELL [ACTORQ_CELL ...] [--states N] [--out DIR]

Needs the cells' environment (EnvPool for Atari cells: the SB3 model is rebuilt as its cell ran)
and ``[peers]``. Writes ``dead_units.json`` and ``dead_units.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from _machine import command, machine_info, md_head, md_table, write_json_atomic
from actorq import checkpoint
from actorq.bench.sb3 import SB3
from actorq.bench.spec import run_config
from actorq.envs import env_spec
from actorq.errors import ActorQError
from actorq.output import write_output


def _cell(results: Path, name: str) -> dict[str, Any]:
    path = results / name / "cell.json"
    try:
        cell: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ActorQError(f"{path}: not a cell's record ({type(e).__name__})") from None
    if cell.get("agent") != "dqn":
        raise ActorQError(f"{name}: a {cell.get('agent')} cell; this reads DQN cells")
    return cell


def _sb3_model(results: Path, cell: dict[str, Any]) -> Any:
    """The SB3 cell's model as the adapter builds it, with its checkpoint (weights and replay)
    loaded through the adapter's own checked path."""
    from actorq.bench import sb3_checkpoint

    cfg = run_config("dqn", cell["config"], cell.get("country", "USA"))
    cfg.validate()
    model = SB3().build(cfg, list(cell["width"]), cell["settings"])
    _, _, replayed = sb3_checkpoint.load(results / cell["name"], model)
    model.get_env().close()
    if not replayed:
        raise ActorQError(f"{cell['name']}: its checkpoint has no replay to take states from")
    return model


def _sb3_layers(model: Any) -> tuple[list[nn.Module], dict[str, np.ndarray]]:
    """SB3's QNetwork as (conv, conv, conv, linear, head) and its Adam first moments by layer
    (SB3's optimizer holds ``q_net``'s parameters in module order: weight, bias per layer)."""
    q = model.policy.q_net
    cnn = [m for m in q.features_extractor.cnn if isinstance(m, nn.Conv2d)]
    layers = [*cnn, q.features_extractor.linear[0], q.q_net[0]]
    return layers, _moments(model.policy.optimizer.state_dict()["state"], len(layers))


def _actorq_layers(results: Path, cell: dict[str, Any], spec: Any) -> Any:
    from actorq.agents.dqn.networks import NatureQNetwork, make_q_network

    tensors, _, _ = checkpoint.load(results / cell["name"] / "checkpoint")
    net = make_q_network(spec, tuple(cell["config"]["hidden"]), bool(cell["config"]["dueling"]))
    if not isinstance(net, NatureQNetwork) or net.dueling:
        raise ActorQError(f"{cell['name']}: not a plain-head Nature-CNN Q-network")
    net.load_state_dict({k[2:]: v for k, v in tensors.items() if k[:2] == "q."})
    layers = [*net.torso.convs, net.torso.fc, net.head]
    state = {
        int(k.split(".")[1]): {"exp_avg": v}
        for k, v in tensors.items()
        if k.startswith("opt.") and k.endswith(".exp_avg")
    }
    return layers, _moments(state, len(layers))


def _moments(state: dict[Any, Any], n_layers: int) -> dict[str, np.ndarray]:
    """Per layer: the largest ``|m|`` of its weight's and of its bias's Adam first moment."""
    out = {}
    for i in range(n_layers):
        w, b = state.get(2 * i, {}), state.get(2 * i + 1, {})
        out[f"layer{i}"] = np.array(
            [float(s["exp_avg"].abs().max()) if "exp_avg" in s else np.nan for s in (w, b)]
        )
    return out


@torch.no_grad()
def _units(layers: list[nn.Module], states: np.ndarray) -> dict[str, Any]:
    """Per hidden layer: the share of units on for at least one state, of units whose output
    differs between states, and the mean share on per state; the greedy actions and the spread
    of max Q over the states."""
    x = torch.from_numpy(states).float() / 255.0
    rows = []
    for layer in layers[:-1]:
        if isinstance(layer, nn.Linear):
            x = x.flatten(1)
        x = torch.relu(layer(x))
        on = (x > 0).flatten(2) if x.dim() == 4 else (x > 0).unsqueeze(-1)
        unit_on = on.any(dim=2)  # (states, units): a channel is on where any position is
        flat = x.flatten(2) if x.dim() == 4 else x.unsqueeze(-1)
        # a unit on but the same for every state (its bias through dead inputs) reads nothing
        varies = (flat.amax(0) > flat.amin(0)).any(dim=1)
        rows.append(
            {
                "units": int(unit_on.shape[1]),
                "alive": float(unit_on.any(0).float().mean()),
                "varying": float(varies.float().mean()),
                "on_per_state": float(on.float().mean()),
            }
        )
    q = layers[-1](x.flatten(1))
    greedy = q.argmax(1).numpy()
    return {
        "layers": rows,
        "greedy_actions": sorted(set(int(a) for a in greedy)),
        "max_q_std": float(q.max(1).values.std()),
        "q_first_state": [round(float(v), 4) for v in q[0]],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("sb3_cell")
    p.add_argument("actorq_cells", nargs="*")
    p.add_argument("--states", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    if not 1 <= a.states <= 100_000:
        raise ActorQError(f"--states {a.states}: a whole number in [1, 100,000]")
    out = a.out or a.results
    sb3 = _cell(a.results, a.sb3_cell)
    if sb3.get("framework") != "sb3":
        raise ActorQError(f"{a.sb3_cell}: not an SB3 cell")
    model = _sb3_model(a.results, sb3)
    rb = model.replay_buffer
    rows = rb.buffer_size if rb.full else rb.pos
    pick = np.random.default_rng(a.seed).choice(rows, size=min(a.states, rows), replace=False)
    states = np.ascontiguousarray(rb.observations[np.sort(pick), 0])
    spec = env_spec(sb3["env"])
    nets = {a.sb3_cell: _sb3_layers(model)}
    for name in a.actorq_cells:
        nets[name] = _actorq_layers(a.results, _cell(a.results, name), spec)
    report: dict[str, Any] = {
        "command": command("dead_units.py"), "machine": machine_info(),
        "states": len(states), "states_from": f"{a.sb3_cell}'s replay", "cells": {},
    }  # fmt: skip
    for name, (layers, moments) in nets.items():
        _, counters = checkpoint.read_state(a.results / name / "checkpoint")
        report["cells"][name] = {
            **_units(layers, states),
            "adam_first_moment_max": {k: v.tolist() for k, v in moments.items()},
            "checkpoint_counters": counters.get("learner", {}).get("counters", {}),
        }
    write_json_atomic(out / "dead_units.json", report)
    write_output(out / "dead_units.md", "\n".join(_markdown(report)) + "\n", "--out")
    print("\n".join(_markdown(report)))
    return 0


def _markdown(r: dict[str, Any]) -> list[str]:
    names = ["conv1", "conv2", "conv3", "fc"]
    lines = md_head("Live ReLU units of DQN Q-networks", r)
    lines += [
        "", f"{r['states']} states from {r['states_from']}, sampled without repeats. A unit is "
        "alive if on for some state, varying if its output differs between states (a channel: "
        "at any position).",
    ]  # fmt: skip
    head = ["cell"] + [f"{n}: alive / varying / on per state" for n in names]
    head += ["greedy actions", "std of max Q", "conv1 weight max abs Adam m"]
    rows = []
    for name, c in r["cells"].items():
        rows.append(
            [name]
            + [
                " / ".join(f"{x[k]:.0%}" for k in ("alive", "varying", "on_per_state"))
                for x in c["layers"]
            ]
            + [
                str(c["greedy_actions"]),
                f"{c['max_q_std']:.4f}",
                f"{c['adam_first_moment_max']['layer0'][0]:.3g}",
            ]
        )
    return [*lines, "", *md_table(head, rows)]


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ActorQError as e:
        sys.exit(f"dead_units: {e}")
