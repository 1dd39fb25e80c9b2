"""GO's imitation warm start: fit the policy's heads to a classical baseline's decisions.

PPO from a random policy tends to settle in the one-device basin (docs/graphopt.md, "Transfer").
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

Targets (:func:`targets`): a baseline of :mod:`actorq.graphopt.baselines` by name, or ``best``,
the fastest feasible of the deterministic ones in :data:`BEST_OF` for each graph. A placement is
judged the way the task judges the policy's (the reference decision's priorities and fusion), so
"fastest" means fastest for what the policy can change.

Device labels: a baseline's device ids are arbitrary names on a cluster whose devices and links
are all alike (HEFT and m-ETF start on device 0, METIS numbers its parts as it likes). With
``relabel``, devices are renamed by their first use in topological order (the first op's device
becomes 0, the next new one 1, ...) whenever the cluster is unchanged by that renaming (same
devices, same links), so the simulated step time is exactly the same, and the targets of
different graphs agree on what "device 0" means: the first device an op of the graph runs on.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from actorq.graphopt.actor import HEADS, GraphTask
from actorq.graphopt.baselines import greedy_fusion, run_baselines
from actorq.graphopt.cluster import Cluster
from actorq.graphopt.inputs import PRIORITY_LEVELS

if TYPE_CHECKING:  # torch only where the learner fits: the config's validation imports CHOICES
    import torch

#: Baselines whose placement can be imitated (deterministic: no search budget).
IMITABLE: tuple[str, ...] = ("single", "expert", "expert+cp", "metis+cp", "heft", "m-etf")
#: The candidates of ``--imitate best``. The single device is one: on slow links it is often
#: the fastest placement (inception-s on 4 PCIe GPUs: 49.2 ms against METIS's 62.9), and a
#: policy imitating a worse split stays near it. It comes last, so it wins only outright.
BEST_OF: tuple[str, ...] = ("heft", "m-etf", "metis+cp", "expert", "single")
#: The values ``GOConfig.imitate`` accepts.
CHOICES: tuple[str, ...] = ("none", "best", *IMITABLE)
#: The tasks a warm start can imitate: those that decide placements (scheduling or fusion
#: alone would judge a baseline's priorities on the reference's placement, not its own).
TASKS: tuple[str, ...] = ("placement", "joint")


@dataclasses.dataclass
class Target:
    """One training graph's imitation target."""

    graph: str
    baseline: str
    """The baseline it came from (for ``best``: the fastest candidate)."""
    time: float
    """Penalised simulated step time of ``placement`` in the task (seconds)."""
    feasible: bool
    relabelled: bool
    """Whether the device labels were renamed by first use (module docstring)."""
    sim_calls: int
    """Simulator calls it took: each baseline scored once by the baseline runner, and each
    candidate (joint: with and without fusion) once as the task judges it."""
    actions: np.ndarray
    """Per-op targets ``(n, len(HEADS))`` int64 in the policy's action columns (device,
    priority level, fuse bit); columns the task does not decide are 0."""
    fused: bool = False
    """Joint task: the target adds greedy fusion to the baseline's decision."""

    @property
    def placement(self) -> np.ndarray:
        """Device per op, int64 ``(n,)`` (relabelled if ``relabelled``)."""
        return self.actions[:, 0]


def priority_levels(priority: np.ndarray, num_levels: int = PRIORITY_LEVELS) -> np.ndarray:
    """A baseline's priorities (higher runs first) as the policy's levels: ``num_levels``
    equal-count buckets of their order, so the highest priorities get the highest level (ties
    in order of index). Within a level the environment runs earlier ops first
    (:func:`actorq.graphopt.inputs.priorities`)."""
    n = len(priority)
    rank = np.empty(n, np.int64)
    rank[np.argsort(np.asarray(priority, np.float64), kind="stable")] = np.arange(n)
    return (rank * num_levels) // max(n, 1)


def first_use_labels(placement: np.ndarray, topo_order: np.ndarray, num_devices: int) -> np.ndarray:
    """``new[old]``: devices renamed in the order of their first use in ``topo_order``; unused
    devices keep their relative order after the used ones."""
    seen = list(dict.fromkeys(placement[topo_order].tolist()))
    order = seen + [d for d in range(num_devices) if d not in set(seen)]
    new = np.empty(num_devices, np.int64)
    new[np.asarray(order, np.int64)] = np.arange(num_devices)
    return new


def symmetric_under(cluster: Cluster, new: np.ndarray) -> bool:
    """Whether renaming device ``d`` to ``new[d]`` leaves the cluster the same (devices' rates
    and capacities, links' bandwidths and latencies): then every placement takes the same time
    under either name."""
    old = np.argsort(new)  # old[new_label] = old label
    f = ("flop_s", "mem_bw", "memory", "op_overhead")
    devs = cluster.devices
    same_devs = all(
        getattr(devs[old[i]], k) == getattr(devs[i], k) for i in range(len(devs)) for k in f
    )
    ix = np.ix_(old, old)
    return (
        same_devs
        and bool(np.array_equal(cluster.bandwidth[ix], cluster.bandwidth))
        and bool(np.array_equal(cluster.latency[ix], cluster.latency))
    )


def _judge(task: GraphTask, actions: np.ndarray) -> tuple[float, bool]:
    """Penalised step time of per-op ``actions`` ``(n, len(HEADS))`` in ``task`` (the parts
    the task does not decide come from its reference)."""
    _, _, info = task.judge(actions)
    return float(info["score"]), bool(info["feasible"])


def _candidates(
    task: GraphTask, names: tuple[str, ...], seed: int
) -> list[tuple[str, bool, np.ndarray]]:
    """``(baseline, fused, actions)`` per candidate decision of ``task``."""
    sim, g = task.env.sim, task.env.graph
    out = []
    for b in run_baselines(sim, names, seed=seed):
        a = np.zeros((task.num_ops, len(HEADS)), np.int64)
        a[:, 0] = b.decision.placement
        if task.task != "joint":
            out.append((b.name, False, a))
            continue
        prio = sim.default_priority if b.decision.priority is None else b.decision.priority
        a[:, 1] = priority_levels(prio)
        out.append((b.name, False, a))
        f = a.copy()
        f[g.dst[greedy_fusion(sim, a[:, 0])], 2] = 1  # the fuse bit of each fused edge's consumer
        out.append((b.name, True, f))
    return out


def target(task: GraphTask, name: str, seed: int = 0, relabel: bool = True) -> Target:
    """``task``'s imitation target from baseline ``name`` (or ``best``: module docstring)."""
    if task.task not in TASKS:
        raise ValueError(f"imitation targets decide placements; task is {task.task!r}")
    cands = BEST_OF if name == "best" else (name,)
    found = []
    for baseline, fused, a in _candidates(task, cands, seed):
        t, ok = _judge(task, a)
        found.append((ok, t, baseline, fused, a))
    # feasible first, then fastest; ties keep BEST_OF's order (unfused before fused)
    ok, t, chosen, fused, a = min(found, key=lambda x: (not x[0], x[1]))
    relabelled = False
    if relabel:
        g, c = task.env.graph, task.env.cluster
        new = first_use_labels(a[:, 0], g.topo_order, c.num_devices)
        if not np.array_equal(new, np.arange(c.num_devices)) and symmetric_under(c, new):
            a = a.copy()
            a[:, 0], relabelled = new[a[:, 0]], True
    calls = len(cands) + len(found)
    return Target(task.name, chosen, t, ok, relabelled, calls, a, fused)


def targets(tasks: list[GraphTask], name: str, seed: int = 0, relabel: bool = True) -> list[Target]:
    return [target(t, name, seed, relabel) for t in tasks]


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


def greedy_actions(
    model: torch.nn.Module, inputs: list[dict[str, torch.Tensor]], tasks: list[GraphTask]
) -> list[np.ndarray]:
    """The fp32 policy's greedy per-op actions ``(n, len(HEADS))`` on each task."""
    import torch

    with torch.no_grad():
        outs = [{k: v.cpu().numpy() for k, v in model(**x).items()} for x in inputs]
    return [t.decide(o, None)[0] for t, o in zip(tasks, outs, strict=True)]


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
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Imitate baseline ``name`` for ``steps`` steps: ``(metrics, per-graph records)``.

    Metrics (``imitate/...``): ``loss`` and ``accuracy`` (fp32 greedy, share of the decisions
    the task makes: ops, times heads) after the last step, ``time_ratio`` (geomean over graphs
    of the greedy decision's step time over the target's), ``sim_calls`` (the baselines' and
    the final check's simulator calls), ``steps``, ``seconds``."""
    t0 = time.perf_counter()
    goals = targets(tasks, name, seed, relabel)
    masks = [t.mask for t in tasks]
    out = fit(model, inputs, goals, steps, lr, masks)
    ratios, records = [], []
    greedy = greedy_actions(model, inputs, tasks)
    for task, goal, a, m in zip(tasks, goals, greedy, masks, strict=True):
        t, ok = _judge(task, a)
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
