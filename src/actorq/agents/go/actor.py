"""GO's actors: one-shot decisions for whole graphs with the exported (quantized) policy.

GO (Zhou et al., NeurIPS 2020) poses placement, scheduling and fusion as a one-shot decision:
the policy reads a graph and emits every op's choice at once; the simulator's step time is the
only feedback. An actor here is the analogue of :class:`actorq.core.loop.VectorActor` for that
bandit: each step it picks ``k`` training graphs, runs the snapshot's ONNX policy on each (the
outputs depend only on the graph and the weights, so they are computed once per graph and
snapshot version), samples every op's decision from them, simulates, and emits one item per
decision: the graph's index, the per-op actions, their per-op log-probabilities under the
snapshot it ran (the behaviour policy: the learner's importance ratio is taken against these,
so int8 rounding is corrected rather than ignored) and the reward.

Exploration with run moves (``explore`` > 0): per-op samples change ops independently, so a
policy that has settled on one device (or on a baseline's split) almost never samples the
coherent move of a whole run of ops to another device that simulated annealing makes, and
which is where its wins come from (docs/go-transfer.md). With probability ``explore`` an
actor's decision is instead its incumbent for the graph (the best decision it has simulated,
sampled or moved; the snapshot's greedy decision before it has one) with one of annealing's run
moves (:func:`actorq.graphopt.baselines.run_move`) applied to the placement: a hill climb per actor,
fed by the policy's samples. Such items are flagged (``explore`` = 1): they are not samples of
the policy, so the learner keeps them out of PPO's ratios and baselines and uses them only for
the best decision so far, which self-imitation pulls the policy toward (policy improvement by
search, counted in the same simulator budget as the samples). (Moves guided by the policy, and
HEFT's per-edge cut search as moves, were tried and retired: docs/go-transfer.md, "What was
tried".)

Reward: ``-sqrt(S / S_ref)``, ``S`` the simulated (penalized, :func:`~actorq.graphopt.baselines.
penalized`) step time and ``S_ref`` the reference decision's (the human-expert split by default),
GO's normalisation: comparable across graphs of very different step times, and compressed for
the large penalties of infeasible placements. Episodes are reported as the relative improvement
over the reference, ``(S_ref - S) / S_ref`` (the environment's reward), which is what
``charts/episodic_return`` and the evaluations show.

numpy, onnxruntime and the simulator only: never torch.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from actorq.agents.go.inputs import (
    HEADS,
    TASK_HEADS,
    GraphInputs,
    InputSpec,
    OnnxGOPolicy,
    encode_graph,
    fusion_edges,
    fusion_node_mask,
    log_softmax,
    priorities,
)
from actorq.core.interfaces import ParameterSource
from actorq.core.loop import fetch_newer
from actorq.errors import SnapshotError
from actorq.graphopt.baselines import (
    anchor_groups,
    greedy_fusion,
    heft,
    m_etf,
    run_move,
)
from actorq.graphopt.envs import GraphOptEnv
from actorq.graphopt.ir import Graph
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.types import Batch

_TASK_PART = {"placement": "placement", "scheduling": "priority", "fusion": "fusion"}
SNAPSHOT_KIND = "go"
#: :meth:`GraphTask.guided`'s default ``beta``: an op gives up one mean op time of finish time
#: for an ``e``-fold preference of the policy (measured over 0.25..16 in docs/go-transfer.md).
GUIDE_BETA = 1.0
#: The list schedulers :meth:`GraphTask.guided` decodes with (``m-etf`` keeps its memory bound).
GUIDE_SCHEDULERS = ("heft", "m-etf")
#: The ONNX inputs a GO snapshot's model must have (:meth:`GraphInputs.feeds`).
INPUT_NAMES = tuple(f.name for f in dataclasses.fields(GraphInputs))


class GraphTask:
    """One training (or evaluation) graph for one task: the environment (simulator, reference
    decision), the policy's inputs, and which ops each head decides."""

    def __init__(
        self,
        graph: Graph | str,
        task: str,
        cluster: str,
        reference: str = "expert",
        inputs: InputSpec | None = None,
    ) -> None:
        self.env = GraphOptEnv(graph, task, cluster, mode="oneshot", reference=reference)
        self.spec = InputSpec() if inputs is None else inputs
        """What the policy reads from this graph (it must match the policy's config)."""
        self.priority_levels = self.spec.priority_levels
        """Levels of the priority head (``GOConfig.priority_levels``): how its choices decode."""
        g = self.env.graph
        self.name, self.task = g.name, task
        self.fusable = self.env.sim.fusable_edges
        n = g.num_ops
        self.mask = np.zeros((n, len(HEADS)), np.float32)
        for h in TASK_HEADS[task]:
            col = HEADS.index(h)
            self.mask[:, col] = fusion_node_mask(g, self.fusable) if h == "fusion" else 1.0
        self._groups: np.ndarray | None = None  # anchor group per op (run moves), built lazily
        self.memory_need: float | None = None
        """With ``inputs.memory`` (``GOConfig.memory_input``): parameter bytes plus peak activations
        with every op on device 0 (one simulator call), the policy's memory columns' scale."""
        mem = None
        if self.spec.memory:
            one = self.env.sim.run(np.zeros(g.num_ops, np.int64))
            self.memory_need = float(one.peak_memory[0])
            mem = (self.memory_need, float(one.capacity[0]))
        self.inputs = encode_graph(g, memory=mem)

    @property
    def num_ops(self) -> int:
        return self.env.graph.num_ops

    def decide(
        self, out: dict[str, np.ndarray], rng: np.random.Generator | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-op choices ``(n, 3)`` int64 (sampled with ``rng``, greedy without) and their
        log-probabilities ``(n, 3)`` float32 (0 where the task does not act)."""
        n = self.num_ops
        actions = np.zeros((n, len(HEADS)), np.int64)
        logp = np.zeros((n, len(HEADS)), np.float32)
        for h in TASK_HEADS[self.task]:
            col = HEADS.index(h)
            lp = log_softmax(out[h])
            if rng is None:
                a = lp.argmax(axis=1)
            else:  # Gumbel-max: one exact categorical sample per op, vectorised
                a = (lp - np.log(-np.log(rng.random(lp.shape)))).argmax(axis=1)
            actions[:, col] = a
            logp[:, col] = np.take_along_axis(lp, a[:, None], axis=1)[:, 0] * self.mask[:, col]
        return actions, logp

    def guided(
        self,
        out: dict[str, np.ndarray],
        beta: float = GUIDE_BETA,
        scheduler: str = "heft",
        cut: float = 0.0,
    ) -> np.ndarray:
        """The greedy decision with its placement decoded by a list scheduler (``heft`` or the
        memory-bounded ``m-etf``) guided by the policy's device log-probabilities
        (:func:`~actorq.graphopt.baselines.heft`, :func:`~actorq.graphopt.baselines.m_etf`
        with ``logp``): coherent with where each op's inputs are, which per-op argmax is not on
        a graph unlike the training graphs (docs/go-transfer.md, "Zero-shot through a list
        scheduler"). ``cut``: HEFT's cut cost (:func:`~actorq.graphopt.baselines.heft`). Other
        heads stay greedy, but for the fusion bits of ops whose fusable input edge touches an
        op the scheduler moved (:meth:`with_placement`)."""
        if "placement" not in TASK_HEADS[self.task]:
            raise ValueError(f"guided decoding places ops: the {self.task} task has none")
        if scheduler not in GUIDE_SCHEDULERS:
            raise ValueError(f"scheduler must be one of {GUIDE_SCHEDULERS}, got {scheduler!r}")
        if cut and scheduler != "heft":
            raise ValueError("a cut cost is HEFT's: scheduler must be 'heft'")
        actions, _ = self.decide(out, None)
        lp = log_softmax(out["placement"])
        sim = self.env.sim
        d = heft(sim, lp, beta, cut) if scheduler == "heft" else m_etf(sim, logp=lp, beta=beta)
        return self.with_placement(actions, d.placement)

    def with_placement(self, actions: np.ndarray, placed: np.ndarray) -> np.ndarray:
        """``actions`` (modified in place and returned) with placement ``placed``; in the joint
        task the fusion bit of every op with a fusable input edge touching a moved op is decided
        again by greedy fusion on the new placement (the fusing search baselines do it for the
        whole graph after each move): the decision would otherwise keep fusions that now cross
        devices (not honoured) and never take the ones the new placement made legal."""
        if "fusion" in TASK_HEADS[self.task]:
            g = self.env.graph
            moved = placed != actions[:, 0]
            touched = self.fusable & (moved[g.src] | moved[g.dst])
            # an op has at most one fusable input edge, so its bit is that edge's
            actions[g.dst[touched], 2] = greedy_fusion(self.env.sim, placed)[touched]
        actions[:, 0] = placed
        return actions

    def run_move(self, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A copy of the decision ``actions`` ``(n, 3)`` with one run move on its placement
        (module docstring): the ops of consecutive anchor groups in topological order on one
        device, drawn uniformly. In the joint task the fusion bits around the moved ops are
        decided again (:meth:`with_placement`)."""
        if "placement" not in TASK_HEADS[self.task]:
            raise ValueError(f"run moves change placements: the {self.task} task has none")
        actions = actions.copy()
        if self._groups is None:
            self._groups = anchor_groups(self.env.sim)[1]
        gi = self._groups
        nd = self.env.cluster.num_devices
        placed = run_move(actions[:, 0], gi, int(gi.max()) + 1, nd, rng)  # a copy
        return self.with_placement(actions, placed)

    def env_action(self, actions: np.ndarray) -> Any:
        """Per-op choices as the environment's one-shot action."""
        g = self.env.graph
        parts = {
            "placement": actions[:, 0],
            "priority": priorities(actions[:, 1], g, self.priority_levels),
            "fusion": fusion_edges(actions[:, 2], g, self.fusable),
        }
        if self.task == "joint":
            return parts
        return parts[_TASK_PART[self.task]]

    def judge(self, actions: np.ndarray) -> tuple[float, float, dict[str, Any]]:
        """Simulate: ``(reward -sqrt(S / S_ref), improvement (S_ref - S) / S_ref, info)``."""
        improvement, info = self.env.judge(self.env_action(actions))
        ratio = float(info["score"]) / self.env.reference_time
        return -float(np.sqrt(ratio)), float(improvement), info


def decode_snapshot(data: bytes | bytearray | memoryview) -> ModelSnapshot:
    """A GO policy snapshot, validated (:class:`SnapshotError` otherwise)."""
    snap = ModelSnapshot.from_bytes(data, INPUT_NAMES)
    if snap.kind != SNAPSHOT_KIND:
        raise SnapshotError(f"expected a {SNAPSHOT_KIND!r} model snapshot, got {snap.kind!r}")
    return snap


class GraphActor:
    """Samples one-shot decisions for ``k`` training graphs per step with the latest snapshot
    (module docstring). Same interface as :class:`~actorq.core.loop.VectorActor`, so every
    backend runs it (:func:`actorq.core.loop.make_actor`)."""

    at_boundary = True  # every item is one whole decision: a snapshot may change between any two

    def __init__(
        self,
        tasks: list[GraphTask],
        num_envs: int,
        seed: int,
        source: ParameterSource,
        threads: int = 1,
        index: int = 0,
        max_ops: int | None = None,
        explore: float = 0.0,
    ) -> None:
        if not 0.0 <= explore < 1.0:
            raise ValueError(f"explore must be in [0, 1), got {explore}")
        self.tasks, self.k, self.index = tasks, num_envs, index
        self.explore = explore
        self.max_ops = max_ops or max(t.num_ops for t in tasks)
        self.source, self.threads = source, threads
        self.rng = np.random.default_rng(seed)
        self.runtime: OnnxGOPolicy | None = None
        self.version, self.rejected, self.swaps = -1, 0, 0
        self.env_steps = 0
        self.inference_s = 0.0
        self.env_s = 0.0
        self._outs: dict[int, dict[str, np.ndarray]] = {}
        # per training graph: the best decision this actor has simulated and its reward (the
        # incumbent that run moves start from)
        self.incumbent: dict[int, tuple[float, np.ndarray]] = {}

    @classmethod
    def from_config(cls, cfg: dict[str, Any], source: ParameterSource) -> GraphActor:
        w = cfg["workload"]
        spec = InputSpec.from_json(w)
        tasks = [GraphTask(g, w["task"], w["cluster"], w["reference"], spec) for g in w["graphs"]]
        return cls(
            tasks,
            int(cfg["envs_per_actor"]),
            int(cfg["seed"]),
            source,
            threads=int(cfg.get("threads", 1)),
            index=int(cfg["actor"]),
            max_ops=int(w["max_ops"]),
            explore=float(w.get("explore", 0.0)),
        )

    def update(self) -> bool:
        got = fetch_newer(self.source, self.version)
        if got is None:
            return False
        try:
            snap = decode_snapshot(got[1])
            runtime = OnnxGOPolicy(snap.model, self.threads)
        except (SnapshotError, ValueError, RuntimeError):  # ort: a model that does not load
            self.rejected += 1
            # Not retried every step, and the items go on under this version although the
            # last good policy acts: a synchronous on-policy learner takes only data of its
            # latest version (its queue drops older items, the gate holds older actors), so
            # honest tags would starve it; the recorded log-probs are the acting policy's,
            # so its importance ratio stays exact. Off-policy items carry no version.
            self.version = got[0]
            return False
        self.runtime, self.version = runtime, snap.version
        self._outs.clear()
        self.swaps += 1
        return True

    def outputs(self, i: int) -> dict[str, np.ndarray]:
        """The policy's outputs for training graph ``i`` under the current snapshot."""
        if self.runtime is None:
            raise RuntimeError("actor has no policy snapshot yet")
        if i not in self._outs:
            t = time.perf_counter()
            self._outs[i] = self.runtime(self.tasks[i].inputs)
            self.inference_s += time.perf_counter() - t
        return self._outs[i]

    def step(self) -> tuple[Batch, list[tuple[float, int]]]:
        k, m = self.k, self.max_ops
        items: Batch = {
            "graph": np.zeros(k, np.int32),
            "actions": np.zeros((k, m, len(HEADS)), np.int16),
            "log_prob": np.zeros((k, m, len(HEADS)), np.float32),
            "reward": np.zeros(k, np.float32),
            "explore": np.zeros(k, np.int8),
            "feasible": np.zeros(k, np.int8),
            "version": np.full(k, self.version, np.int64),
            "actor": np.full(k, self.index, np.int32),
        }
        episodes: list[tuple[float, int]] = []
        for j in range(k):
            i = int(self.rng.integers(len(self.tasks)))
            task = self.tasks[i]
            # draw only when exploring, so runs without it sample exactly as before
            explore = self.explore > 0.0 and self.rng.random() < self.explore
            if explore:
                base = self.incumbent[i][1] if i in self.incumbent else None
                if base is None:
                    base, _ = task.decide(self.outputs(i), None)
                actions = task.run_move(base, self.rng)
                logp = np.zeros_like(actions, dtype=np.float32)  # not a policy sample
            else:
                actions, logp = task.decide(self.outputs(i), self.rng)
            t = time.perf_counter()
            reward, improvement, info = task.judge(actions)
            self.env_s += time.perf_counter() - t
            if self.explore > 0.0 and (i not in self.incumbent or reward > self.incumbent[i][0]):
                self.incumbent[i] = (reward, actions)
            n = task.num_ops
            items["graph"][j] = i
            items["actions"][j, :n] = actions
            items["log_prob"][j, :n] = logp
            items["reward"][j] = reward
            items["explore"][j] = explore
            items["feasible"][j] = bool(info["feasible"])
            episodes.append((improvement, 1))
        self.env_steps += k
        return items, episodes

    def close(self) -> None:
        self._outs.clear()
