"""GO's imitation warm start: fit the policy's heads to a classical baseline's decisions.

PPO from a random policy tends to settle in the one-device basin (docs/go-transfer.md).
A warm start moves the policy's starting distribution to a classical baseline's decision before
the actors see it: per training graph the baseline's device per op is the target, and
``imitate_steps`` full-batch Adam steps minimise the per-op cross-entropy of the placement head,
averaged over ops and then over graphs (each graph counts the same, whatever its size).

In the joint task the policy also decides each op's priority level and fusion bit, so the
target is the baseline's whole decision: its priorities as equal-count levels of their order
(:func:`priority_levels`; topological order where the baseline has none) and, as a second
candidate per baseline, greedy fusion on its placement (:func:`actorq.graphopt.baselines.
greedy_fusion`, XLA's habit); the loss sums the heads' cross-entropies, the fusion head's over
the ops with a fusable input only.

Targets: :mod:`actorq.agents.go.targets` (a baseline by name, or ``best``).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from actorq.agents.go.actor import HEADS, GraphTask
from actorq.agents.go.targets import Target, judge, targets

if TYPE_CHECKING:  # torch only where the learner fits
    import torch


def _heads_loss(
    out: dict[str, torch.Tensor], y: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, int, int]:
    """One graph's summed per-head mean cross-entropy over the ops each head decides (``mask``
    ``(n, len(HEADS))``), and the greedy matches and decisions counted."""
    import torch

    loss = torch.zeros((), device=y.device)
    right = total = 0
    for col, h in enumerate(HEADS):
        m = mask[:, col]
        k = int(m.sum())
        if k == 0:
            continue
        ce = torch.nn.functional.cross_entropy(out[h], y[:, col], reduction="none")
        loss = loss + (ce * m).sum() / k
        right += int(((out[h].argmax(1) == y[:, col]) & (m > 0)).sum())
        total += k
    return loss, right, total


def fit(
    model: torch.nn.Module,
    inputs: list[dict[str, torch.Tensor]],
    goals: list[Target],
    steps: int,
    lr: float,
    masks: list[np.ndarray],
) -> dict[str, float]:
    """``steps`` full-batch Adam steps (a fresh optimizer, ``lr`` decaying linearly to 0) on the
    mean over graphs of the per-op cross-entropy of the heads each graph's ``masks`` (the
    tasks' ``mask``, ``(n, len(HEADS))``) select, summed over heads; returns the last
    step's loss and the greedy accuracy (share of all selected decisions whose argmax is the
    target) after the last step."""
    import torch

    from actorq.agents.optim import adam

    dev = next(model.parameters()).device
    ys = [torch.from_numpy(g.actions).to(dev) for g in goals]
    ms = [torch.from_numpy(np.asarray(m, np.float32)).to(dev) for m in masks]
    opt = adam(model.parameters(), lr)
    loss_v = float("nan")
    for i in range(steps):
        for group in opt.param_groups:  # linear decay to 0: the last iterate is the one kept
            group["lr"] = lr * (1.0 - i / steps)
        loss = torch.zeros((), device=dev)
        for x, y, m in zip(inputs, ys, ms, strict=True):
            loss = loss + _heads_loss(model(**x), y, m)[0]
        loss = loss / len(ys)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_v = float(loss.detach())
    right = total = 0
    last = 0.0
    with torch.no_grad():
        for x, y, m in zip(inputs, ys, ms, strict=True):
            lo, r, k = _heads_loss(model(**x), y, m)
            right, total, last = right + r, total + k, last + float(lo)
    if steps == 0:
        loss_v = last / max(len(ys), 1)
    return {"loss": loss_v, "accuracy": right / max(total, 1)}


def outputs(
    model: torch.nn.Module, inputs: list[dict[str, torch.Tensor]]
) -> list[dict[str, np.ndarray]]:
    """The fp32 policy's outputs on each graph, as numpy."""
    import torch

    with torch.no_grad():
        return [{k: v.cpu().numpy() for k, v in model(**x).items()} for x in inputs]


def greedy_actions(
    model: torch.nn.Module, inputs: list[dict[str, torch.Tensor]], tasks: list[GraphTask]
) -> list[np.ndarray]:
    """The fp32 policy's greedy per-op actions ``(n, len(HEADS))`` on each task."""
    return [t.decide(o, None)[0] for t, o in zip(tasks, outputs(model, inputs), strict=True)]


def greedy_placements(
    model: torch.nn.Module, inputs: list[dict[str, torch.Tensor]]
) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        return [model(**x)["placement"].argmax(1).cpu().numpy() for x in inputs]


def warm_start(
    model: torch.nn.Module,
    tasks: list[GraphTask],
    inputs: list[dict[str, torch.Tensor]],
    name: str,
    steps: int,
    lr: float,
    seed: int = 0,
    relabel: bool = True,
    margin: float = 0.0,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Imitate baseline ``name`` for ``steps`` steps: ``(metrics, per-graph records)``.

    Metrics (``imitate/...``): ``loss`` and ``accuracy`` (fp32 greedy, share of the decisions
    the task makes: ops, times heads) after the last step, ``time_ratio`` (geomean over graphs
    of the greedy decision's step time over the target's), ``sim_calls`` (the baselines' and
    the final check's simulator calls), ``steps``, ``seconds``."""
    t0 = time.perf_counter()
    goals = targets(tasks, name, seed, relabel, margin)
    masks = [t.mask for t in tasks]
    out = fit(model, inputs, goals, steps, lr, masks)
    ratios, records = [], []
    greedy = greedy_actions(model, inputs, tasks)
    for task, goal, a, m in zip(tasks, goals, greedy, masks, strict=True):
        t, ok = judge(task, a)
        ratios.append(t / goal.time)
        agree = float(((a == goal.actions) * m).sum() / max(float(m.sum()), 1.0))
        records.append(
            {
                "graph": goal.graph,
                "baseline": goal.baseline,
                "relabelled": goal.relabelled,
                "target_time": goal.time,
                "target_feasible": goal.feasible,
                "greedy_time": t,
                "greedy_feasible": ok,
                "agreement": agree,
                **({"fused": goal.fused} if task.task == "joint" else {}),
            }
        )
    calls = sum(g.sim_calls for g in goals) + len(tasks)
    metrics = {
        "imitate/loss": out["loss"],
        "imitate/accuracy": out["accuracy"],
        "imitate/time_ratio": float(math.exp(np.mean(np.log(ratios)))),
        "imitate/sim_calls": float(calls),
        "imitate/steps": float(steps),
        "imitate/seconds": time.perf_counter() - t0,
    }
    return metrics, records


def distill(
    model: torch.nn.Module,
    tasks: list[GraphTask],
    inputs: list[dict[str, torch.Tensor]],
    decisions: list[np.ndarray | None],
    steps: int,
    lr: float,
) -> dict[str, float]:
    """Expert iteration's distillation (Anthony et al. 2017, "Thinking Fast and Slow"): fit
    every head the task decides to each graph's ``decisions`` (``(n, len(HEADS))``, e.g. the
    best found so far; graphs with None are left out) with :func:`fit`. No simulator calls:
    ``accuracy`` is the share of decided ops whose greedy choice is the decision's."""
    have = [i for i, d in enumerate(decisions) if d is not None]
    if not have or steps == 0:
        return {}
    t0 = time.perf_counter()
    goals = []
    for i in have:
        d = np.asarray(decisions[i], np.int64)
        goals.append(Target(tasks[i].name, "found", math.nan, True, False, 0, d))
    out = fit(model, [inputs[i] for i in have], goals, steps, lr, [tasks[i].mask for i in have])
    return {
        "losses/distill_loss": out["loss"],
        "distill/accuracy": out["accuracy"],
        "distill/seconds": time.perf_counter() - t0,
    }
