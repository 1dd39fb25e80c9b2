"""Imitation targets: a graph's decision by a classical baseline, or the fastest of several.

GO's warm start (:mod:`actorq.agents.go.imitation`) fits a policy to these decisions, picked here
beside the baselines they come from.

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
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from actorq.agents.go.inputs import HEADS, PRIORITY_LEVELS
from actorq.graphopt.baselines import CUT_WEIGHTS, greedy_fusion, run_baselines
from actorq.graphopt.cluster import Cluster
from actorq.graphopt.envs import GraphOptEnv


class JudgedTask(Protocol):
    """What a target reads of the task it is judged on: :class:`actorq.agents.go.actor.GraphTask`
    (typed structurally: the actor's module is the one that imports this)."""

    env: GraphOptEnv
    name: str
    task: str
    priority_levels: int

    @property
    def num_ops(self) -> int: ...

    def judge(self, actions: np.ndarray) -> tuple[float, float, dict[str, Any]]: ...


#: Baselines whose placement can be imitated (deterministic: no search budget).
IMITABLE: tuple[str, ...] = (
    "single", "expert", "expert+cp", "metis+cp", "heft", "heft-cut", "m-etf"
)  # fmt: skip
#: The candidates of ``--imitate best``. The single device is one: on slow links it is often
#: the fastest placement (inception-s on 4 PCIe GPUs: 49.2 ms against METIS's 62.9), and a
#: policy imitating a worse split stays near it. It comes last, so it wins only outright.
#: HEFT with a cut cost joined later (the fastest of the five others on 4 PCIe GPUs' rnnlm-s by
#: 17%, `git show 85997d5:docs/graphopt.md` "HEFT with a cut cost"): folders of runs before it
#: say ``best5``.
BEST_OF: tuple[str, ...] = ("heft", "heft-cut", "m-etf", "metis+cp", "expert", "single")
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
    """Simulator calls it took: each baseline scored once by the baseline runner (and
    heft-cut's sweep, once per cut weight), and each candidate (joint: with and without
    fusion) once as the task judges it."""
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
    (:func:`actorq.agents.go.inputs.priorities`)."""
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


def judge(task: JudgedTask, actions: np.ndarray) -> tuple[float, bool]:
    """Penalised step time of per-op ``actions`` ``(n, len(HEADS))`` in ``task`` (the parts
    the task does not decide come from its reference)."""
    _, _, info = task.judge(actions)
    return float(info["score"]), bool(info["feasible"])


def _candidates(
    task: JudgedTask, names: tuple[str, ...], seed: int
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
        a[:, 1] = priority_levels(prio, task.priority_levels)
        out.append((b.name, False, a))
        f = a.copy()
        f[g.dst[greedy_fusion(sim, a[:, 0])], 2] = 1  # the fuse bit of each fused edge's consumer
        out.append((b.name, True, f))
    return out


def choose(candidates: list[tuple[bool, float, int]], margin: float = 0.0) -> int:
    """Which of ``candidates`` (``(feasible, step time, devices used)``, in :data:`BEST_OF`'s
    order) a target imitates: feasible first, then fastest, ties keeping the order (unfused
    before fused); with ``margin`` > 0 and a feasible fastest, the one on the fewest devices
    (then the fastest) among the feasible within ``1 + margin`` of its step time."""
    best = min(range(len(candidates)), key=lambda i: (not candidates[i][0], candidates[i][1]))
    ok, fastest, _ = candidates[best]
    if margin <= 0 or not ok:
        return best
    near = [i for i, (f, t, _) in enumerate(candidates) if f and t <= fastest * (1 + margin)]
    return min(near, key=lambda i: (candidates[i][2], candidates[i][1]))


def target(
    task: JudgedTask, name: str, seed: int = 0, relabel: bool = True, margin: float = 0.0
) -> Target:
    """``task``'s imitation target from baseline ``name`` (or ``best``: module docstring).

    ``margin`` (``best`` only): among the feasible candidates within ``1 + margin`` times the
    fastest's step time, the one on the fewest devices (then the fastest): a split that gains
    a few percent is a poor target when imitation reproduces it only roughly
    (docs/go-transfer.md, "Simpler targets"). 0: the fastest."""
    if task.task not in TASKS:
        raise ValueError(f"imitation targets decide placements; task is {task.task!r}")
    cands = BEST_OF if name == "best" else (name,)
    found = []
    for baseline, fused, a in _candidates(task, cands, seed):
        t, ok = judge(task, a)
        found.append((ok, t, baseline, fused, a))
    i = choose([(f[0], f[1], len(np.unique(f[4][:, 0]))) for f in found], margin)
    ok, t, chosen, fused, a = found[i]
    relabelled = False
    if relabel:
        g, c = task.env.graph, task.env.cluster
        new = first_use_labels(a[:, 0], g.topo_order, c.num_devices)
        if not np.array_equal(new, np.arange(c.num_devices)) and symmetric_under(c, new):
            a = a.copy()
            a[:, 0], relabelled = new[a[:, 0]], True
    # heft-cut's sweep judges each of its cut weights once before the runner scores its pick
    calls = len(cands) + len(found) + (len(CUT_WEIGHTS) if "heft-cut" in cands else 0)
    return Target(task.name, chosen, t, ok, relabelled, calls, a, fused)


def targets(
    tasks: Sequence[JudgedTask], name: str, seed: int = 0, relabel: bool = True, margin: float = 0.0
) -> list[Target]:
    return [target(t, name, seed, relabel, margin) for t in tasks]
