"""GO's imitation warm start: fit the placement head to a classical baseline's placements.

PPO from a random policy tends to settle in the one-device basin (docs/graphopt.md, "Transfer").
A warm start moves the policy's starting distribution to a classical baseline's decision before
the actors see it: per training graph the baseline's device per op is the target, and
``imitate_steps`` full-batch Adam steps minimise the per-op cross-entropy of the placement head,
averaged over ops and then over graphs (each graph counts the same, whatever its size).

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
from actorq.graphopt.baselines import run_baselines
from actorq.graphopt.cluster import Cluster

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


@dataclasses.dataclass
class Target:
    """One training graph's imitation target."""

    graph: str
    baseline: str
    """The baseline it came from (for ``best``: the fastest candidate)."""
    placement: np.ndarray
    """Device per op, int64 ``(n,)`` (relabelled if ``relabelled``)."""
    time: float
    """Penalised simulated step time of ``placement`` in the task (seconds)."""
    feasible: bool
    relabelled: bool
    """Whether the device labels were renamed by first use (module docstring)."""
    sim_calls: int
    """Simulator calls it took: each candidate scored once by the baseline runner and once as
    the task judges it."""


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


def _judge(task: GraphTask, placement: np.ndarray) -> tuple[float, bool]:
    """Penalised step time of ``placement`` in ``task`` (the reference's other parts)."""
    actions = np.zeros((task.num_ops, len(HEADS)), np.int64)
    actions[:, 0] = placement
    _, _, info = task.judge(actions)
    return float(info["score"]), bool(info["feasible"])


def target(task: GraphTask, name: str, seed: int = 0, relabel: bool = True) -> Target:
    """``task``'s imitation target from baseline ``name`` (or ``best``: module docstring)."""
    if task.task != "placement":
        raise ValueError(f"imitation targets are placements; task is {task.task!r}")
    sim = task.env.sim
    cands = BEST_OF if name == "best" else (name,)
    found: list[tuple[bool, float, str, np.ndarray]] = []
    for b in run_baselines(sim, cands, seed=seed):
        p = np.asarray(b.decision.placement, np.int64)
        t, ok = _judge(task, p)
        found.append((ok, t, b.name, p))
    # feasible first, then fastest; ties keep BEST_OF's order
    ok, t, chosen, p = min(found, key=lambda x: (not x[0], x[1]))
    relabelled = False
    if relabel:
        g, c = task.env.graph, task.env.cluster
        new = first_use_labels(p, g.topo_order, c.num_devices)
        if not np.array_equal(new, np.arange(c.num_devices)) and symmetric_under(c, new):
            p, relabelled = new[p], True
    return Target(task.name, chosen, p, t, ok, relabelled, 2 * len(cands))


def targets(tasks: list[GraphTask], name: str, seed: int = 0, relabel: bool = True) -> list[Target]:
    return [target(t, name, seed, relabel) for t in tasks]


def fit(
    model: torch.nn.Module,
    inputs: list[dict[str, torch.Tensor]],
    goals: list[Target],
    steps: int,
    lr: float,
) -> dict[str, float]:
    """``steps`` full-batch Adam steps (a fresh optimizer, ``lr`` decaying linearly to 0) on the
    mean over graphs of the per-op placement cross-entropy; returns the last step's loss and
    the greedy accuracy (share of all ops whose argmax is the target) after the last step."""
    import torch

    from actorq.agents.optim import adam

    dev = next(model.parameters()).device
    ys = [torch.from_numpy(g.placement).to(dev) for g in goals]
    opt = adam(model.parameters(), lr)
    loss_v = float("nan")
    for i in range(steps):
        for group in opt.param_groups:  # linear decay to 0: the last iterate is the one kept
            group["lr"] = lr * (1.0 - i / steps)
        loss = torch.zeros((), device=dev)
        for x, y in zip(inputs, ys, strict=True):
            loss = loss + torch.nn.functional.cross_entropy(model(**x)["placement"], y)
        loss = loss / len(ys)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_v = float(loss.detach())
    right = total = 0
    with torch.no_grad():
        for x, y in zip(inputs, ys, strict=True):
            logits = model(**x)["placement"]
            right += int((logits.argmax(1) == y).sum())
            total += int(y.numel())
            if steps == 0:
                loss_v = float(torch.nn.functional.cross_entropy(logits, y))
    return {"loss": loss_v, "accuracy": right / max(total, 1)}


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

    Metrics (``imitate/...``): ``loss`` and ``accuracy`` (fp32 greedy, share of ops) after the
    last step, ``time_ratio`` (geomean over graphs of the greedy placement's step time over the
    target's), ``sim_calls`` (the baselines' and the final check's simulator calls), ``steps``,
    ``seconds``."""
    t0 = time.perf_counter()
    goals = targets(tasks, name, seed, relabel)
    out = fit(model, inputs, goals, steps, lr)
    ratios, records = [], []
    for task, goal, p in zip(tasks, goals, greedy_placements(model, inputs), strict=True):
        t, ok = _judge(task, p)
        ratios.append(t / goal.time)
        records.append(
            {
                "graph": goal.graph,
                "baseline": goal.baseline,
                "relabelled": goal.relabelled,
                "target_time": goal.time,
                "target_feasible": goal.feasible,
                "greedy_time": t,
                "greedy_feasible": ok,
                "agreement": float((p == goal.placement).mean()),
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
