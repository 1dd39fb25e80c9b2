"""Gymnasium environments for placement, scheduling, fusion and the joint task.

``make_env("graphopt:<task>/<graph>", cluster="4xgpu-pcie", mode="oneshot")`` with ``task`` one
of ``placement``, ``scheduling``, ``fusion``, ``joint`` and ``graph`` a suite name,
``synthetic-<ops>-s<seed>`` or a graph file.

**Observation** — the graph itself, as a :class:`gymnasium.spaces.Graph` instance, which is what a
GNN consumes and what varies in size from graph to graph:

* ``nodes`` ``(num_ops, NODE_FEATURES + D)`` float32: log-scaled FLOPs, bytes read, bytes
  written, output bytes, parameter bytes, time on the fastest device; op category one-hot
  (:data:`CATEGORIES`) and a backward flag; normalized depth; log in/out degree; the current
  decision (device one-hot over the ``D`` devices, priority in [0, 1], fused-with-its-input flag);
  in sequential mode, flags for "decided" and "the op to decide now".
* ``edges`` ``(num_edges, EDGE_FEATURES)`` float32: log tensor bytes, fusable, fused now,
  crosses devices now.
* ``edge_links`` ``(num_edges, 2)`` int64: ``[src, dst]`` op indices.

**Actions.** ``mode="oneshot"`` (GO's way, Zhou et al., NeurIPS 2020: the policy emits every
decision at once; one step per episode): placement ``MultiDiscrete([D] * num_ops)``; scheduling
``Box(0, 1, (num_ops,))`` priorities (higher runs first); fusion ``MultiBinary(num_edges)``; joint
a ``Dict`` of the three. ``mode="sequential"`` (Placeto's way, Addanki et al., NeurIPS 2019: one
op per step, in topological order, seeing the decisions so far): placement ``Discrete(D)``;
scheduling ``Discrete(PRIORITY_LEVELS)``; fusion ``Discrete(2)`` per fusable edge (the fusion task
steps over fusable edges only); joint ``MultiDiscrete([D, PRIORITY_LEVELS, 2])`` (the bit fuses
the op with its single input's producer when it has one).

**Reward** — relative improvement over a reference decision (a baseline, ``expert`` by default,
the human-expert split GO compares with): ``(S_ref - S) / S_ref`` with ``S`` the simulated step
time, or for an infeasible decision the penalty of
:func:`actorq.graphopt.baselines.penalized`. Parts the task does not act on (e.g. the priorities
in the placement task) come from the reference. In sequential mode each step is rewarded with
the change of that quantity, so an episode's return equals the one-shot reward of its final
decision. ``info`` carries ``step_time``, ``feasible``, ``reason`` and ``reference_time``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from actorq.errors import GraphError
from actorq.graphopt.baselines import REFERENCES, penalized, run_baselines
from actorq.graphopt.cluster import Cluster, get_cluster
from actorq.graphopt.ir import Graph
from actorq.graphopt.simulator import SimResult, Simulator

TASKS = ("placement", "scheduling", "fusion", "joint")
MODES = ("oneshot", "sequential")
PRIORITY_LEVELS = 8
CATEGORIES = (
    "input",
    "matmul",
    "conv",
    "elementwise",
    "norm",
    "reduce",
    "data",
    "update",
    "other",
)
_CAT_WORDS = {
    "input": ("input",),
    "matmul": ("linear", "matmul", "bmm", "mm", "embedding"),
    "conv": ("conv",),
    "elementwise": ("add", "mul", "sub", "div", "relu", "gelu", "tanh", "sigmoid", "pad",
                    "elementwise"),
    "norm": ("norm",),
    "reduce": ("mean", "sum", "amax", "softmax", "pool", "reduce"),
    "data": ("cat", "stack", "chunk", "view", "reshape", "transpose", "getitem", "concat",
             "new_zeros", "detach"),
    "update": ("update",),
}  # fmt: skip
NODE_FEATURES = 6 + len(CATEGORIES) + 1 + 3 + 2 + 2  # + D device one-hot
EDGE_FEATURES = 4


def op_category(op_type: str) -> int:
    t = op_type.lower().removesuffix("_grad")
    for i, c in enumerate(CATEGORIES[:-1]):
        if any(w in t for w in _CAT_WORDS[c]):
            return i
    return len(CATEGORIES) - 1


def _log(x: np.ndarray) -> np.ndarray:
    # log10(1 + x) / 12 maps 0..1e12 (bytes, FLOPs) to about 0..1
    return (np.log10(1.0 + x) / 12.0).astype(np.float32)


class GraphOptEnv(gym.Env[Any, Any]):
    """One graph, one cluster, one task (module docstring)."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(
        self,
        graph: Graph | str,
        task: str = "placement",
        cluster: Cluster | str = "4xgpu-pcie",
        mode: str = "oneshot",
        reference: str = "expert",
    ) -> None:
        if task not in TASKS:
            raise GraphError(f"unknown graphopt task {task!r}; tasks: {', '.join(TASKS)}")
        if mode not in MODES:
            raise GraphError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
        if reference not in REFERENCES:
            raise GraphError(f"reference must be a deterministic baseline, not {reference!r}")
        if isinstance(graph, str):
            from actorq.graphopt.suite import get_graph

            graph = get_graph(graph)
        self.graph = graph
        self.cluster = get_cluster(cluster) if isinstance(cluster, str) else cluster
        self.task, self.mode = task, mode
        self.sim = Simulator(graph, self.cluster)
        ref = run_baselines(self.sim, (reference,))[0]
        self.reference = ref.decision
        self.reference_time = penalized(self.sim, ref.result)
        if not self.reference_time > 0:  # rewards are relative to it: they would divide by 0
            raise GraphError(
                f"graph {graph.name!r} takes no time on cluster {self.cluster.name!r} (free ops, "
                "no per-op overhead): there is nothing to optimize"
            )
        g, nd = graph, self.cluster.num_devices
        n, m = g.num_ops, g.num_edges
        ref_prio = self.reference.priority
        self._ref_prio = self.sim.default_priority if ref_prio is None else ref_prio
        self._ref_fuse = (
            np.zeros(m, dtype=bool) if self.reference.fusion is None else self.reference.fusion
        )
        # static node features, computed once
        cat = np.zeros((n, len(CATEGORIES)), dtype=np.float32)
        cat[np.arange(n), [op_category(t) for t in g.op_types]] = 1.0
        grad = np.array([t.endswith("_grad") for t in g.op_types], dtype=np.float32)
        fastest = self.sim.op_times(self.cluster.fastest_device())
        self._static = np.concatenate(
            [
                np.stack(
                    [_log(g.flops), _log(g.bytes_read), _log(g.bytes_written), _log(g.out_bytes),
                     _log(g.param_bytes), _log(fastest * 1e9)], 1),
                cat,
                grad[:, None],
                np.stack(
                    [g.depth / max(1, g.depth.max()), np.log1p(g.in_degree) / 5,
                     np.log1p(g.out_degree) / 5], 1).astype(np.float32),
            ],
            axis=1,
        )  # fmt: skip
        self._edge_static = np.stack(
            [_log(g.edge_bytes), self.sim.fusable_edges.astype(np.float32)], 1
        )
        self._links = np.stack([g.src, g.dst], 1).astype(np.int64)
        # the single in-edge of an op, which a per-op fuse bit controls
        self._in_edge = np.full(n, -1, dtype=np.int64)
        one = self.sim.fusable_edges
        self._in_edge[g.dst[one]] = np.flatnonzero(one)
        width = NODE_FEATURES + nd
        self.observation_space = spaces.Graph(
            node_space=spaces.Box(-np.inf, np.inf, (width,), np.float32),
            edge_space=spaces.Box(-np.inf, np.inf, (EDGE_FEATURES,), np.float32),
        )
        if mode == "sequential":
            self._items = g.topo_order
            if task == "fusion":  # fusable edges, in the topological order of their consumer
                fe = np.flatnonzero(self.sim.fusable_edges)
                self._items = fe[np.argsort(g.topo_rank[g.dst[fe]], kind="stable")]
            if self._items.size == 0:
                raise GraphError(f"graph {g.name!r} has no fusable edges for the fusion task")
            self.action_space = {
                "placement": spaces.Discrete(nd),
                "scheduling": spaces.Discrete(PRIORITY_LEVELS),
                "fusion": spaces.Discrete(2),
                "joint": spaces.MultiDiscrete([nd, PRIORITY_LEVELS, 2]),
            }[task]
        else:
            if task == "fusion" and m == 0:
                raise GraphError(f"graph {g.name!r} has no fusable edges for the fusion task")
            parts: dict[str, spaces.Space[Any]] = {
                "placement": spaces.MultiDiscrete(np.full(n, nd)),
                "priority": spaces.Box(0.0, 1.0, (n,), np.float32),
                # a graph without fusable edges (one op, or none connected) decides no fusion
                "fusion": spaces.MultiBinary(m) if m else spaces.Box(0, 1, (0,), np.int8),
            }
            key = {"placement": "placement", "scheduling": "priority", "fusion": "fusion"}
            self.action_space = spaces.Dict(parts) if task == "joint" else parts[key[task]]
        self._reset_state()

    # ---- state ---------------------------------------------------------------------------------
    def _reset_state(self) -> None:
        self.placement = self.reference.placement.copy()
        self.priority = self._ref_prio.copy()
        self.fusion = self._ref_fuse.copy()
        self._t = 0
        self._decided = np.zeros(self.graph.num_ops, dtype=np.float32)
        self._score = self.reference_time
        self._last: SimResult | None = None

    def _obs(self) -> spaces.GraphInstance:
        g, nd = self.graph, self.cluster.num_devices
        n = g.num_ops
        onehot = np.zeros((n, nd), dtype=np.float32)
        onehot[np.arange(n), self.placement] = 1.0
        pr = self.priority
        span = float(pr.max() - pr.min())
        prn = (pr - pr.min()) / span if span > 0 else np.zeros(n)
        fused_in = np.zeros(n, dtype=np.float32)
        fused_in[g.dst[self.fusion]] = 1.0
        current = np.zeros(n, dtype=np.float32)
        if self.mode == "sequential" and self._t < self._items.size:
            item = self._items[self._t]
            current[g.dst[item] if self.task == "fusion" else item] = 1.0
        nodes = np.concatenate(
            [self._static, np.stack([prn, fused_in, self._decided, current], 1), onehot],
            axis=1,
            dtype=np.float32,
        )
        cross = (self.placement[g.src] != self.placement[g.dst]).astype(np.float32)
        edges = np.concatenate(
            [self._edge_static, np.stack([self.fusion, cross], 1).astype(np.float32)], axis=1
        )
        return spaces.GraphInstance(nodes=nodes, edges=edges, edge_links=self._links.copy())

    def _evaluate(self) -> tuple[float, dict[str, Any]]:
        r = self.sim.run(self.placement, self.priority, self.fusion)
        self._last = r
        s = penalized(self.sim, r)
        info = {
            "step_time": r.step_time,
            "feasible": r.feasible,
            "reason": r.reason,
            "reference_time": self.reference_time,
            "score": s,
        }
        return s, info

    # ---- gymnasium API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[spaces.GraphInstance, dict[str, Any]]:
        super().reset(seed=seed)
        self._reset_state()
        info = {"reference_time": self.reference_time, "num_ops": self.graph.num_ops}
        return self._obs(), info

    def step(self, action: Any) -> tuple[spaces.GraphInstance, float, bool, bool, dict[str, Any]]:
        if self.mode == "oneshot":
            self._apply_oneshot(action)
            s, info = self._evaluate()
            return (
                self._obs(),
                float((self.reference_time - s) / self.reference_time),
                True,
                False,
                info,
            )
        if self._t >= self._items.size:
            raise GraphError("episode is over; call reset()")
        self._apply_sequential(action)
        self._t += 1
        s, info = self._evaluate()
        reward = float((self._score - s) / self.reference_time)
        self._score = s
        return self._obs(), reward, self._t >= self._items.size, False, info

    def judge(self, action: Any) -> tuple[float, dict[str, Any]]:
        """A whole one-shot decision judged without building observations (the graph actors'
        hot path: an observation costs ~10% of a simulation, and reset + step build two):
        ``(reward, info)`` exactly as ``reset()`` then ``step(action)`` would return them."""
        if self.mode != "oneshot":
            raise GraphError("judge() is for mode='oneshot'; use reset() and step()")
        self._reset_state()
        self._apply_oneshot(action)
        s, info = self._evaluate()
        return float((self.reference_time - s) / self.reference_time), info

    def _apply_oneshot(self, action: Any) -> None:
        parts = action if self.task == "joint" else {
            "placement": {"placement": action},
            "scheduling": {"priority": action},
            "fusion": {"fusion": action},
        }[self.task]  # fmt: skip
        if "placement" in parts:
            self.placement = self.sim.check_placement(parts["placement"])
        if "priority" in parts:
            pr = np.asarray(parts["priority"], dtype=np.float64)
            if pr.shape != (self.graph.num_ops,) or not np.all(np.isfinite(pr)):
                raise GraphError(f"priority action must be {self.graph.num_ops} finite numbers")
            self.priority = pr
        if "fusion" in parts:
            fz = np.asarray(parts["fusion"])
            if fz.shape != (self.graph.num_edges,):
                raise GraphError(f"fusion action must have {self.graph.num_edges} entries")
            self.fusion = fz.astype(bool)
        self._decided[:] = 1.0

    def _apply_sequential(self, action: Any) -> None:
        item = int(self._items[self._t])
        if not self.action_space.contains(np.asarray(action, dtype=np.int64)):
            raise GraphError(f"action {action!r} is not in {self.action_space}")
        a = np.asarray(action, dtype=np.int64).reshape(-1)
        if self.task == "fusion":
            self.fusion[item] = bool(a[0])
            self._decided[self.graph.dst[item]] = 1.0
            return
        if self.task == "placement":
            self.placement[item] = a[0]
        elif self.task == "scheduling":
            self.priority[item] = self._level_priority(item, int(a[0]))
        else:
            self.placement[item] = a[0]
            self.priority[item] = self._level_priority(item, int(a[1]))
            if self._in_edge[item] >= 0:
                self.fusion[self._in_edge[item]] = bool(a[2])
        self._decided[item] = 1.0

    def _level_priority(self, op: int, level: int) -> float:
        # level dominates; topological order breaks ties within a level (earlier first)
        return level * self.graph.num_ops - float(self.graph.topo_rank[op])

    @property
    def last_result(self) -> SimResult | None:
        """The simulator's full result for the last step (per-device memory, utilization...)."""
        return self._last


def validate_graphopt_id(name: str) -> tuple[str, str]:
    """Check ``<task>/<graph>`` (the part after ``graphopt:``) without building the graph."""
    from actorq.errors import EnvIdError
    from actorq.graphopt.suite import OTHER_NAMES, is_graph_name

    task, sep, graph = name.partition("/")
    if not sep or not graph:
        raise EnvIdError(
            f"graphopt id {name!r} must be <task>/<graph>, e.g. 'graphopt:placement/rnnlm-s' "
            f"(tasks: {', '.join(TASKS)})"
        )
    if task not in TASKS:
        raise EnvIdError(f"unknown graphopt task {task!r} in {name!r}; tasks: {', '.join(TASKS)}")
    if not is_graph_name(graph):
        raise EnvIdError(
            f"unknown graph {graph!r} in {name!r} (see `actorq graphopt list`; also {OTHER_NAMES})"
        )
    return task, graph


def make_graphopt_env(name: str, **kwargs: Any) -> GraphOptEnv:
    """``name`` is ``<task>/<graph>`` (the part after ``graphopt:``); ``kwargs``: ``cluster``,
    ``mode``, ``reference``."""
    task, graph = validate_graphopt_id(name)
    return GraphOptEnv(graph, task, **kwargs)


__all__ = ["TASKS", "GraphOptEnv", "make_graphopt_env", "validate_graphopt_id"]
