"""GO's policy inputs and its actor-side runtime, without torch.

What an actor needs to run :class:`actorq.agents.go.networks.GOPolicy` exported to ONNX: the
per-op and per-edge features (:func:`node_features`, :func:`edge_features`,
:func:`encode_graph`), the ONNX session (:class:`OnnxGOPolicy`), and numpy versions of the
one-shot decision's log-probability and its mapping onto the environment's actions. Actors
import this module, never :mod:`actorq.agents.go.networks` (which imports torch).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import numpy as np

from actorq.graphopt.baselines import log_softmax
from actorq.graphopt.envs import PRIORITY_LEVELS
from actorq.graphopt.ir import Graph

if TYPE_CHECKING:
    import torch

# ---- features -------------------------------------------------------------------------------

#: Op types with their own embedding; anything else shares row 0 (``<unk>``). Backward ops
#: (``<type>_grad``) share their forward type's row and set the ``backward`` feature instead, so
#: a forward type seen in training also covers its gradient. Fixed: the embedding table's rows
#: are indices into this tuple, so appending is safe and reordering breaks trained policies.
OP_VOCAB: tuple[str, ...] = (
    "<unk>", "input", "saved", "update",
    # matmul-like
    "linear", "matmul", "bmm", "mm", "addmm", "baddbmm", "einsum", "embedding",
    "scaled_dot_product_attention",
    # convolutions
    "conv", "conv1d", "conv2d", "conv3d", "convolution", "conv_transpose2d",
    # elementwise
    "elementwise", "add", "sub", "mul", "div", "floordiv", "pow", "neg", "exp", "log", "sqrt",
    "rsqrt", "relu", "gelu", "silu", "tanh", "sigmoid", "dropout", "where", "clamp", "pad",
    # normalisation
    "norm", "layernorm", "batchnorm2d", "batchnorm1d", "groupnorm", "native_layer_norm",
    "native_batch_norm", "rmsnorm",
    # reductions
    "reduce", "sum", "mean", "amax", "max", "softmax", "log_softmax", "avg_pool2d",
    "max_pool2d", "adaptive_avg_pool2d",
    # data movement and views
    "concat", "cat", "stack", "chunk", "split", "view", "reshape", "transpose", "permute",
    "getitem", "getattr", "unsqueeze", "squeeze", "expand", "contiguous", "clone", "detach",
    "new_zeros", "slice", "select", "index", "gather", "copy",
)  # fmt: skip
#: ``tracer="export"``'s ATen names -> the row of the same op as ``tracer="fx"`` names it. The
#: suite (what the shipped policies learned from) is traced with fx, an imported Hugging Face model
#: with export, and without these the two share almost no row for their main ops (45% of 24
#: exported models' ops had a type the suite never has: `addmm`, `convolution`,
#: `native_batch_norm...` against `linear`, `conv2d`, `batchnorm2d`), so a policy trained on one
#: met the other's ops as untrained embeddings. An alias overrides a vocabulary entry of its name
#: (those rows stay, unused, so saved policies keep their embedding's shape).
OP_ALIASES: dict[str, str] = {
    "addmm": "linear",
    "mm": "linear",  # export's bias-free Linear is permute + mm; activation products are bmm
    "grouped_mm_fallback": "linear",
    "convolution": "conv2d",
    "native_batch_norm": "batchnorm2d",
    "native_batch_norm_legit_functional": "batchnorm2d",
    "_native_batch_norm_legit_functional": "batchnorm2d",
    "native_batch_norm_legit": "batchnorm2d",
    "_native_batch_norm_legit": "batchnorm2d",
    "native_layer_norm": "layernorm",
    "native_group_norm": "groupnorm",
    "permute": "transpose",
    "constant_pad_nd": "pad",
    "split_with_sizes": "chunk",
    "hardtanh": "relu",  # ReLU6
    "index_select": "index",
    "_to_copy": "copy",
    "to_copy": "copy",
    "alias": "view",
    "_unsafe_view": "view",
    "maximum": "elementwise",
    "minimum": "elementwise",
}
_VOCAB_INDEX = {t: i for i, t in enumerate(OP_VOCAB)}
_VOCAB_INDEX.update({alias: _VOCAB_INDEX[t] for alias, t in OP_ALIASES.items()})
#: log1p(x) / LOG_SCALE maps costs of 0 .. 1e12 (FLOPs, bytes) to about 0 .. 1.
LOG_SCALE = math.log1p(1e12)
#: Column names of :func:`node_features`, in order (see its docstring).
NODE_FEATURES: tuple[str, ...] = (
    "type_index",
    "backward",
    "log_flops",
    "log_bytes_read",
    "log_bytes_written",
    "log_out_bytes",
    "log_param_bytes",
    "depth",
    "topo_position",
    "log_fan_in",
    "log_fan_out",
    "anchored",
    "log_anchor_followers",
    "anchor_gap",
)
EDGE_FEATURES: tuple[str, ...] = ("log_bytes",)

#: The per-op decisions, in the column order of an item's ``actions`` and ``log_prob``.
HEADS: tuple[str, ...] = ("placement", "priority", "fusion")
#: Which heads each task acts with (the others come from the environment's reference decision).
TASK_HEADS: dict[str, tuple[str, ...]] = {
    "placement": ("placement",),
    "scheduling": ("priority",),
    "fusion": ("fusion",),
    "joint": HEADS,
}


def op_type_index(op_type: str) -> int:
    """Row of ``op_type`` in :data:`OP_VOCAB` (``_grad`` stripped, lower case, export's aten
    names through :data:`OP_ALIASES`; 0 if unknown)."""
    return _VOCAB_INDEX.get(op_type.lower().removesuffix("_grad"), 0)


def _log(x: np.ndarray) -> np.ndarray:
    return (np.log1p(np.asarray(x, np.float64)) / LOG_SCALE).astype(np.float32)


def backward_ops(graph: Graph) -> np.ndarray:
    """Per op, whether it is a gradient op (type ``*_grad``), bool."""
    return np.array([t.endswith("_grad") for t in graph.op_types], dtype=bool)


def node_features(graph: Graph) -> np.ndarray:
    """Per-op features ``(num_ops, len(NODE_FEATURES))`` float32, static for a graph.

    Columns (:data:`NODE_FEATURES`):

    * ``type_index``: the op type's row in :data:`OP_VOCAB` (an integer stored as a float; the
      model embeds it), 0 for types outside the vocabulary.
    * ``backward``: 1 for a gradient op (type ``*_grad``).
    * ``log_flops``, ``log_bytes_read``, ``log_bytes_written``, ``log_out_bytes``,
      ``log_param_bytes``: ``log1p(x) / LOG_SCALE`` of the IR's costs — compute, memory traffic,
      allocated output and resident weights/optimizer state, the quantities the simulator's
      roofline and memory check use. Logs because they span ten orders of magnitude.
    * ``depth``: longest path from a source, divided by the graph's largest (0 .. 1).
    * ``topo_position``: position in the topological order, divided by ``num_ops - 1``.
    * ``log_fan_in``, ``log_fan_out``: ``log1p(degree) / 5``.
    * ``anchored``: 1 if the op has a colocation anchor other than itself (a gradient op and its
      forward op: :attr:`Graph.anchor`).
    * ``log_anchor_followers``: ``log1p(ops anchored to this op) / 5``.
    * ``anchor_gap``: ``(topo_rank[op] - topo_rank[anchor[op]]) / num_ops``: how far back in the
      order the op's colocation partner is (0 for a self-anchored op).

    The anchor itself is also an input of the model (:class:`GraphInputs`): each GraphSAGE layer
    reads the anchor's embedding, so a gradient op sees the forward op it should be placed with.
    """
    g = graph
    n = g.num_ops
    anchor = np.asarray(g.anchor, dtype=np.int64)
    rank = g.topo_rank
    # ops anchored to each op, not counting itself
    followers = np.bincount(anchor, minlength=n) - (anchor == np.arange(n))
    cols = [
        np.array([op_type_index(t) for t in g.op_types], dtype=np.float32),
        backward_ops(g).astype(np.float32),
        _log(g.flops),
        _log(g.bytes_read),
        _log(g.bytes_written),
        _log(g.out_bytes),
        _log(g.param_bytes),
        (g.depth / max(1, int(g.depth.max()))).astype(np.float32),
        (rank / max(1, n - 1)).astype(np.float32),
        (np.log1p(g.in_degree) / 5).astype(np.float32),
        (np.log1p(g.out_degree) / 5).astype(np.float32),
        (anchor != np.arange(n)).astype(np.float32),
        (np.log1p(followers) / 5).astype(np.float32),
        ((rank - rank[anchor]) / n).astype(np.float32),
    ]
    return np.stack(cols, axis=1)


def edge_features(graph: Graph) -> np.ndarray:
    """Per-edge features ``(num_edges, 1)`` float32: ``log1p(tensor bytes) / LOG_SCALE``, the
    size of what the edge would move between devices."""
    return _log(graph.edge_bytes)[:, None]


@dataclasses.dataclass(frozen=True)
class GraphInputs:
    """What :class:`GOPolicy` and its ONNX form read: features plus the graph's index arrays."""

    x: np.ndarray
    """(n, F) float32 node features (:func:`node_features`)."""
    edge_attr: np.ndarray
    """(m, 1) float32 edge features (:func:`edge_features`)."""
    src: np.ndarray
    """(m,) int64 producer of each edge."""
    dst: np.ndarray
    """(m,) int64 consumer of each edge."""
    anchor: np.ndarray
    """(n,) int64 colocation anchor of each op (itself when none)."""
    order: np.ndarray
    """(n,) int64 ops in topological order (the attention's sequence)."""
    rank: np.ndarray
    """(n,) int64 position of each op in ``order`` (its inverse)."""

    @property
    def num_ops(self) -> int:
        return int(self.x.shape[0])

    def feeds(self) -> dict[str, np.ndarray]:
        """The ONNX model's inputs, by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def tensors(self) -> dict[str, torch.Tensor]:
        """The torch model's keyword arguments (the learner's side: imports torch)."""
        import torch

        return {k: torch.from_numpy(v) for k, v in self.feeds().items()}


#: Memory columns are clipped here (in device capacities): a graph that needs more than 64
#: devices' worth is past every preset cluster, and the input layer sees bounded numbers.
MEMORY_CLIP = 64.0
MEMORY_FEATURES: tuple[str, ...] = ("memory_need", "memory_prefix")


def memory_columns(graph: Graph, need: float, capacity: float) -> np.ndarray:
    """How a graph's memory compares with one device's: ``(n, 2)`` float32 columns (the inputs
    of a policy with ``GOPolicyConfig.memory_input``, after the node features).

    * ``memory_need``: ``need / capacity``, the same on every op: how many devices' worth of
      memory the whole graph takes (``need``: parameter bytes plus peak live activations with
      every op on one device, one simulator call: :attr:`GraphTask.memory_need`).
    * ``memory_prefix``: that need accumulated along the forward order up to the op, in device
      capacities: each op weighs its parameter bytes plus, for a forward op, its output (what
      autograd keeps for the backward pass), a gradient op sits at its forward anchor's
      position, and the weights are scaled to sum to ``need``. A split of the order at the
      points where it crosses 1, 2, ... is a placement whose devices each hold about one
      capacity, which is what a graph that does not fit on one device needs.

    Per-op features are sizes of single ops and the graph embedding is a mean, so without these
    columns the policy cannot tell a graph that fits on one device from one that does not
    (`git show 67fd709:docs/graphopt-transfer.md`, "The held-out families' larger graphs")."""
    if not (math.isfinite(need) and math.isfinite(capacity) and need >= 0 and capacity > 0):
        raise ValueError(
            f"memory need {need!r} and capacity {capacity!r} must be finite, need >= 0, "
            "capacity > 0"
        )
    g = graph
    n = g.num_ops
    w = np.asarray(g.param_bytes, np.float64) + np.where(backward_ops(g), 0.0, g.out_bytes)
    cum = _forward_prefix(g, w)
    total = float(cum.max()) if n else 0.0
    ratio = need / capacity
    prefix = cum / total * ratio if total > 0 else np.zeros(n)
    cols = np.stack([np.full(n, ratio), prefix], axis=1)
    return np.minimum(cols, MEMORY_CLIP).astype(np.float32)


def _forward_prefix(g: Graph, w: np.ndarray) -> np.ndarray:
    """Running totals ``(n,)`` float64 of the per-op weights ``w`` along the forward order, a
    gradient op at its forward anchor's position (so a cut of the order at a running total
    splits forward and backward work together, as a pipeline split does)."""
    key = g.topo_rank[np.asarray(g.anchor, np.int64)]
    order = np.lexsort((g.topo_rank, key))
    cum = np.empty(g.num_ops, np.float64)
    cum[order] = np.cumsum(w[order])
    return cum


class PolicySwitches(TypedDict):
    """:class:`~actorq.agents.go.networks.GOPolicyConfig`'s fields an :class:`InputSpec` sets."""

    memory_input: bool
    priority_levels: int


class PolicySwitchesLike(Protocol):
    """The switches of a :class:`~actorq.agents.go.networks.GOPolicyConfig` that
    :meth:`InputSpec.of_policy` reads (the network module imports this one, not back)."""

    @property
    def memory_input(self) -> bool: ...
    @property
    def priority_levels(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """What a GO policy reads from a graph beyond :data:`NODE_FEATURES`, and how its priority
    head decodes: the switches a policy (:class:`~actorq.agents.go.networks.GOPolicyConfig`) and
    every task it decides (:class:`~actorq.agents.go.actor.GraphTask`) must agree on. One
    object carries them from the run's config through the actors' workload, policy files and
    ``place``, so a new input is added here and where its columns are computed.

    * ``memory``: the graph's memory against a device's capacity (:func:`memory_columns`).
    * ``priority_levels``: choices of the priority head (scheduling and the joint task).

    (A start placement and the costs as shares were inputs too, retired after their
    experiments: docs/go-transfer.md, "What was tried".)
    """

    memory: bool = False
    priority_levels: int = PRIORITY_LEVELS

    def to_json(self) -> dict[str, str | bool | int]:
        """The actors' workload keys."""
        return {"memory_input": self.memory, "priority_levels": self.priority_levels}

    @classmethod
    def from_json(cls, w: Mapping[str, Any]) -> InputSpec:
        """From :meth:`to_json`'s keys; run configs written before a key existed lack it, and
        absent means off."""
        d = cls()
        return cls(
            memory=bool(w.get("memory_input", d.memory)),
            priority_levels=int(w.get("priority_levels", d.priority_levels)),
        )

    def policy_switches(self) -> PolicySwitches:
        """The matching :class:`~actorq.agents.go.networks.GOPolicyConfig` fields."""
        return {
            "memory_input": self.memory,
            "priority_levels": self.priority_levels,
        }

    @classmethod
    def of_policy(cls, config: PolicySwitchesLike) -> InputSpec:
        """What a trained policy reads: its config's switches (a policy file with a retired
        input is refused when it is read: :func:`actorq.agents.go.pretrained.load_policy`)."""
        return cls(config.memory_input, config.priority_levels)


def encode_graph(graph: Graph, memory: tuple[float, float] | None = None) -> GraphInputs:
    """A graph as the policy's inputs (computed once per graph; the policy's inputs are static).
    ``memory``: the graph's one-device memory need and a device's capacity, bytes: two more
    columns after the node features (:func:`memory_columns`)."""
    x = node_features(graph)
    if memory is not None:
        x = np.concatenate([x, memory_columns(graph, *memory)], axis=1)
    return GraphInputs(
        x=x,
        edge_attr=edge_features(graph),
        src=np.ascontiguousarray(graph.src, np.int64),
        dst=np.ascontiguousarray(graph.dst, np.int64),
        anchor=np.ascontiguousarray(graph.anchor, np.int64),
        order=np.ascontiguousarray(graph.topo_order, np.int64),
        rank=np.ascontiguousarray(graph.topo_rank, np.int64),
    )


# ---- one-shot decisions, numpy -------------------------------------------------------------


def log_prob_np(
    out: dict[str, np.ndarray],
    actions: dict[str, np.ndarray],
    masks: dict[str, np.ndarray] | None = None,
) -> float:
    """:func:`log_prob` on an actor's numpy outputs (what the ONNX runtime returns)."""
    masks = masks or {}
    total = 0.0
    for task, a in actions.items():
        lp = log_softmax(out[task])
        chosen = np.take_along_axis(lp, np.asarray(a, np.int64)[:, None], axis=1)[:, 0]
        m = masks.get(task)
        total += float((chosen if m is None else chosen * m).sum())
    return total


def fusion_node_mask(graph: Graph, fusable: np.ndarray) -> np.ndarray:
    """Ops whose fusion decision means something: those with a fusable input edge
    (``Simulator.fusable_edges``: a consumer with a single input, so at most one per op)."""
    m = np.zeros(graph.num_ops, dtype=bool)
    m[graph.dst[np.asarray(fusable, bool)]] = True
    return m


def fusion_edges(fuse: np.ndarray, graph: Graph, fusable: np.ndarray) -> np.ndarray:
    """Per-op fusion bits as the environment's per-edge mask: an edge is fused when it is
    fusable and its consumer chose to fuse (the sequential joint task's rule)."""
    return np.asarray(fusable, bool) & (np.asarray(fuse)[graph.dst] > 0)


def priorities(levels: np.ndarray, graph: Graph, num_levels: int = PRIORITY_LEVELS) -> np.ndarray:
    """Bucket choices as the environment's ``Box(0, 1)`` priorities: the level dominates and
    topological order breaks ties (earlier first), as the sequential environment does."""
    n = graph.num_ops
    raw = np.asarray(levels, np.float64) * n + (n - 1 - graph.topo_rank)
    return raw / max(1, num_levels * n - 1)


# ---- the actor's runtime ---------------------------------------------------------------------


class OnnxGOPolicy:
    """An exported policy in onnxruntime on ``threads`` intra-op threads (an actor's runtime)."""

    def __init__(self, model: bytes | str | Path, threads: int = 1) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Memory patterns pre-plan one arena block per input shape; every graph has its own
        # shape, and at 80k ops the plan doubled peak memory (1.3 GiB vs 0.7) and was slower
        # (benchmarks/graphopt_policy_speed.py).
        so.enable_mem_pattern = False
        so.log_severity_level = 3
        data = model if isinstance(model, bytes) else Path(model).read_bytes()
        self._sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self._sess.get_outputs()]

    def __call__(self, inputs: GraphInputs) -> dict[str, np.ndarray]:
        outs = self._sess.run(None, inputs.feeds())
        return dict(zip(self.output_names, outs, strict=True))
