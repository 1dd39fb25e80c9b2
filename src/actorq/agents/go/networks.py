"""GO's graph policy network, standalone: features, the torch model, its ONNX form.

GO (Zhou et al., "Transferable Graph Optimizers for ML Compilers", NeurIPS 2020) decides device
placement, op scheduling and op fusion for every op of a computation graph at once with one
network: a GraphSAGE encoder (Hamilton et al., NeurIPS 2017) over the op graph, a segment-recurrent
attention layer over the ops in topological order (Transformer-XL, Dai et al., ACL 2019) so that
the cost stays linear in the size of graphs of 80k+ ops, and per-node heads conditioned on a
task/graph embedding ("parameter superposition", here as feature-wise modulation, FiLM: Perez et
al., AAAI 2018). This module builds that network from the graph IR (:mod:`actorq.graphopt.ir`):

* :func:`node_features`, :func:`edge_features`, :func:`encode_graph`: the numbers it reads
  (:data:`NODE_FEATURES` documents each column).
* :class:`GOPolicy`: the torch model (the learner's), returning per-node logits for the three
  decisions; :func:`sample`, :func:`log_prob`, :func:`entropy` for a one-shot joint decision.
* :func:`export_onnx` / :class:`OnnxGOPolicy`: the same network as a hand-written ONNX graph with
  dynamic op and edge counts, fp32 or int8 (actorq's int8 layers: int8 weights per column,
  uint8 activations per row, ``MatMulInteger``; :mod:`actorq.quant.runtimes`), which actors run
  in onnxruntime without torch's autograd.

Training through the actor-learner loop (PPO) is not here; see docs/graphopt.md.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from actorq.agents.go.inputs import (
    EDGE_FEATURES,
    LOG_SCALE,  # noqa: F401 - re-exported
    MEMORY_FEATURES,
    NODE_FEATURES,
    OP_VOCAB,
    GraphInputs,
    OnnxGOPolicy,
    edge_features,
    encode_graph,
    fusion_edges,
    fusion_node_mask,
    log_prob_np,
    node_features,
    op_type_index,  # noqa: F401 - re-exported
    priorities,
)
from actorq.graphopt.envs import PRIORITY_LEVELS
from actorq.quant.onnx import host
from actorq.quant.onnx_builder import OnnxBuilder

# ---- the torch model --------------------------------------------------------------------------

TASKS: tuple[str, ...] = ("placement", "priority", "fusion")
"""The per-node decisions, in the order of the task embedding's rows and of the outputs."""
_MASK = -1e9  # additive attention mask: exp underflows to exactly 0 in fp32
_LN_EPS = 1e-5


@dataclasses.dataclass(frozen=True)
class GOPolicyConfig:
    """Sizes of :class:`GOPolicy`. The defaults run an 80k-op graph in about a second on one
    core (benchmarks/graphopt_policy_speed.py)."""

    num_devices: int = 4
    """Placement logits per op."""
    hidden: int = 64
    """Width of every node embedding."""
    sage_layers: int = 3
    """GraphSAGE layers (each sees in-, out-neighbours and the anchor)."""
    attn_layers: int = 2
    """Segment attention layers; information travels back ``attn_layers`` segments."""
    heads: int = 4
    """Attention heads (``hidden`` must divide by it)."""
    segment: int = 64
    """Ops per segment: each attends to its segment and the previous one (2 x segment keys)."""
    ffn: int = 128
    """Width of the attention layers' feed-forward block."""
    type_dim: int = 16
    """Width of the op-type embedding."""
    task_dim: int = 16
    """Width of each task's embedding (the FiLM conditioning's task part)."""
    priority_levels: int = PRIORITY_LEVELS
    """Priority buckets (the sequential environment's levels)."""
    pos_freqs: int = 0
    """Fourier features of each op's topological position and depth (both 0 .. 1): sin and cos
    of ``2**k * pi * position`` for ``k < pos_freqs``, appended to the node features (0: none,
    the network of the first releases). A scalar position lets the network draw only a few
    smooth boundaries along the graph; with octaves it can give any run of ops its own device,
    so imitation and distillation fit a split exactly (Tancik et al., NeurIPS 2020, "Fourier
    features let networks learn high frequency functions"; Vaswani et al. 2017's sinusoids)."""
    memory_input: bool = False
    """Whether the policy reads how the graph's memory compares with a device's capacity: two
    more input columns after the node features (:func:`~actorq.agents.go.inputs.memory_columns`: the
    whole graph's need and the need accumulated along the forward order, in device
    capacities), so it can tell a graph that must be spread from one that fits on one device."""

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} must divide by heads={self.heads}")
        if min(self.num_devices, self.segment, self.priority_levels) < 1:
            raise ValueError("num_devices, segment and priority_levels must be >= 1")
        if self.pos_freqs < 0:
            raise ValueError(f"pos_freqs={self.pos_freqs} must be >= 0")


class SAGELayer(nn.Module):
    """One GraphSAGE layer (Hamilton et al., NeurIPS 2017) on a directed op graph.

    ``h' = LayerNorm(h + ReLU(W [h ; mean_in ; mean_out ; h[anchor]] + b))`` where ``mean_in``
    averages ``h[u] + e_uv * w_in`` over the op's producers ``u`` and ``mean_out`` averages
    ``h[v] + e_uv * w_out`` over its consumers: producers and consumers are aggregated apart
    because they mean different things to a schedule (what must finish first, what waits). The
    edge term lets a large tensor weigh on its neighbour's embedding (a cut there is costly).
    """

    def __init__(self, d: int) -> None:
        super().__init__()
        self.edge_in = nn.Parameter(torch.randn(1, d) * 0.1)
        self.edge_out = nn.Parameter(torch.randn(1, d) * 0.1)
        self.lin = nn.Linear(4 * d, d)
        self.norm = nn.LayerNorm(d, eps=_LN_EPS)

    def forward(
        self,
        h: torch.Tensor,
        e: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        anchor: torch.Tensor,
        inv_in: torch.Tensor,
        inv_out: torch.Tensor,
    ) -> torch.Tensor:
        agg_in = torch.zeros_like(h).index_add_(0, dst, h[src] + e * self.edge_in) * inv_in
        agg_out = torch.zeros_like(h).index_add_(0, src, h[dst] + e * self.edge_out) * inv_out
        z = self.lin(torch.cat([h, agg_in, agg_out, h[anchor]], dim=1))
        out: torch.Tensor = self.norm(h + torch.relu(z))
        return out


class SegmentAttention(nn.Module):
    """A Transformer-XL layer (Dai et al., ACL 2019) over ops in topological order.

    The padded sequence ``(P, d)`` is cut into ``P / S`` segments of ``S`` ops; each segment's
    queries attend to its own ``S`` ops and to a memory of the previous segment (the layer's input
    there, with no gradient, as Transformer-XL's cached memory), so the cost is ``O(P * 2S * d)``:
    linear in the graph's size. All segments run at once (the memory is the layer input shifted
    by one segment, not a recurrence), so the ONNX form is one reshape, not a Loop. Attention
    within a segment is bidirectional (the decision is one-shot, nothing is generated). No
    relative position encoding: the node features already carry depth and topological position.
    Post-norm residual blocks, as in the original Transformer.
    """

    def __init__(self, d: int, heads: int, ffn: int, segment: int) -> None:
        super().__init__()
        self.d, self.heads, self.segment = d, heads, segment
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.norm1 = nn.LayerNorm(d, eps=_LN_EPS)
        self.ff1, self.ff2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.norm2 = nn.LayerNorm(d, eps=_LN_EPS)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        d, h, s = self.d, self.heads, self.segment
        dh = d // h
        g = x.shape[0] // s
        mem = x.detach()  # Transformer-XL: no gradient flows into the previous segment

        def shifted(t: torch.Tensor) -> torch.Tensor:  # segment i sees segment i-1's rows
            t = t.view(g, s, d)
            return torch.cat([t.new_zeros(1, s, d), t[:-1]], dim=0)

        # scaled before the product: one (n, d) multiply instead of one over the (n, 2S) scores
        q = (self.q(x) * (1.0 / math.sqrt(dh))).view(g, s, h, dh).transpose(1, 2)
        k = torch.cat([shifted(self.k(mem)), self.k(x).view(g, s, d)], dim=1)
        v = torch.cat([shifted(self.v(mem)), self.v(x).view(g, s, d)], dim=1)
        k = k.view(g, 2 * s, h, dh).permute(0, 2, 3, 1)  # (g, h, dh, 2s)
        v = v.view(g, 2 * s, h, dh).transpose(1, 2)  # (g, h, 2s, dh)
        att = torch.softmax(q @ k + bias, dim=-1)
        a = (att @ v).transpose(1, 2).reshape(g * s, d)
        x = self.norm1(x + self.o(a))
        out: torch.Tensor = self.norm2(x + self.ff2(torch.relu(self.ff1(x))))
        return out


#: Node-feature columns that get Fourier features (``GOPolicyConfig.pos_freqs``).
_POS_COLS = [NODE_FEATURES.index("topo_position"), NODE_FEATURES.index("depth")]


def fourier_freqs(k: int) -> torch.Tensor:
    """``2**j * pi`` for ``j < k`` (fp32): the octaves of :attr:`GOPolicyConfig.pos_freqs`."""
    return (2.0 ** torch.arange(k, dtype=torch.float64) * math.pi).float()


def attention_bias(n: int, segment: int) -> torch.Tensor:
    """Additive mask ``(G, 1, 1, 2S)`` for ``n`` ops padded to ``G`` segments: the first
    segment has no memory, and the padding at the end of the last one is no key."""
    g = -(-n // segment)
    pos = torch.arange(g * segment).view(g, segment)
    valid = torch.cat([pos >= segment, pos < n], dim=1)
    zero, masked = torch.tensor(0.0), torch.tensor(_MASK)
    return torch.where(valid, zero, masked)[:, None, None, :]


class TaskHead(nn.Module):
    """Per-node MLP for one decision, modulated by its FiLM parameters (Perez et al., 2018)."""

    def __init__(self, d: int, out: int) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(d, d), nn.Linear(d, out)

    def forward(self, h: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.out(torch.relu(self.hidden(h * (1.0 + gamma) + beta)))
        return out


class GOPolicy(nn.Module):
    """GO's policy network (Zhou et al., NeurIPS 2020): GraphSAGE, segment attention, FiLM heads.

    ``forward(**encode_graph(g).tensors())`` returns a dict of per-op outputs:

    * ``placement`` ``(n, num_devices)``: device logits.
    * ``priority`` ``(n, priority_levels)``: logits over priority buckets (higher runs first).
    * ``fusion`` ``(n, 2)``: logits for "fuse this op into its single producer" (index 1); the
      environment's per-edge fusion mask follows with :func:`fusion_edges`.
    * ``priority_score`` ``(n,)``: the expected bucket scaled to 0 .. 1, a deterministic scalar
      priority per op.

    Conditioning (GO's "parameter superposition"): a graph embedding (mean of the final node
    embeddings) and a learned embedding per task go through one shared network to FiLM scales
    and shifts for that task's head, so one set of weights serves every task and every graph,
    specialised per graph without per-graph parameters.
    """

    levels: torch.Tensor
    freqs: torch.Tensor

    def __init__(self, config: GOPolicyConfig | None = None) -> None:
        super().__init__()
        c = self.config = config or GOPolicyConfig()
        d = c.hidden
        self.type_emb = nn.Embedding(len(OP_VOCAB), c.type_dim)
        # the type column becomes an embedding; octaves add sin and cos of two columns
        self.inp = nn.Linear(c.type_dim + input_width(c) - 1 + 4 * c.pos_freqs, d)
        self.inp_norm = nn.LayerNorm(d, eps=_LN_EPS)
        self.sage = nn.ModuleList(SAGELayer(d) for _ in range(c.sage_layers))
        self.attn = nn.ModuleList(
            SegmentAttention(d, c.heads, c.ffn, c.segment) for _ in range(c.attn_layers)
        )
        self.task_emb = nn.Parameter(torch.randn(len(TASKS), c.task_dim) * 0.1)
        self.cond = nn.Linear(d + c.task_dim, d)
        self.film = nn.Linear(d, 2 * d)
        # start as the identity modulation (gamma = beta = 0) so conditioning is learned in
        nn.init.zeros_(self.film.weight)
        nn.init.zeros_(self.film.bias)
        self.heads = nn.ModuleDict(
            {
                "placement": TaskHead(d, c.num_devices),
                "priority": TaskHead(d, c.priority_levels),
                "fusion": TaskHead(d, 2),
            }
        )
        self.register_buffer(
            "levels", torch.linspace(0.0, 1.0, c.priority_levels), persistent=False
        )
        self.register_buffer("freqs", fourier_freqs(c.pos_freqs), persistent=False)

    def encode(
        self,
        x: torch.Tensor,
        edge_attr: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        anchor: torch.Tensor,
        order: torch.Tensor,
        rank: torch.Tensor,
    ) -> torch.Tensor:
        """Final node embeddings ``(n, hidden)``, in the graph's op order."""
        n, s = x.shape[0], self.config.segment
        typ = x[:, 0].long()
        parts = [self.type_emb(typ), x[:, 1:]]
        if self.config.pos_freqs:
            pos = (x[:, _POS_COLS, None] * self.freqs).reshape(n, -1)  # (n, 2 * pos_freqs)
            parts += [torch.sin(pos), torch.cos(pos)]
        h = self.inp_norm(self.inp(torch.cat(parts, dim=1)))
        ones = h.new_ones(src.shape[0])
        inv_in = 1.0 / h.new_zeros(n).index_add_(0, dst, ones).clamp(min=1.0)[:, None]
        inv_out = 1.0 / h.new_zeros(n).index_add_(0, src, ones).clamp(min=1.0)[:, None]
        for layer in self.sage:
            h = layer(h, edge_attr, src, dst, anchor, inv_in, inv_out)
        if len(self.attn):
            p = -(-n // s) * s
            t = F.pad(h[order], (0, 0, 0, p - n))
            bias = attention_bias(n, s).to(device=h.device, dtype=h.dtype)
            for block in self.attn:
                t = block(t, bias)
            h = t[rank]  # back to op order; padding rows are never gathered
        return h

    def forward(
        self,
        x: torch.Tensor,
        edge_attr: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        anchor: torch.Tensor,
        order: torch.Tensor,
        rank: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        h = self.encode(x, edge_attr, src, dst, anchor, order, rank)
        g = h.mean(dim=0, keepdim=True)
        out: dict[str, torch.Tensor] = {}
        d = self.config.hidden
        for i, task in enumerate(TASKS):
            cond = torch.relu(self.cond(torch.cat([g, self.task_emb[i : i + 1]], dim=1)))
            film = self.film(cond)
            out[task] = self.heads[task](h, film[:, :d], film[:, d:])
        out["priority_score"] = torch.softmax(out["priority"], dim=-1) @ self.levels
        return out


# ---- one-shot joint decisions -------------------------------------------------------------------
#
# Priorities are a categorical over PRIORITY_LEVELS buckets, not a Gaussian: a schedule only
# depends on the order priorities induce, which a bounded bucket captures with ties broken by
# topological order; a categorical has an exact entropy, no variance to learn and no squashing to
# keep actions inside the environment's [0, 1] box; it is the same family as the other two heads,
# so one log-prob routine covers the joint action; and its argmax survives int8 rounding of the
# logits where a Gaussian's mean would shift every priority a little. The sequential environment
# uses the same levels.


def _masked_sum(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return (values if mask is None else values * mask.to(values.dtype)).sum()


def sample(
    out: dict[str, torch.Tensor], generator: torch.Generator | None = None
) -> dict[str, torch.Tensor]:
    """One joint action: an int64 ``(n,)`` choice per task, sampled from its logits."""
    acts = {}
    for task in TASKS:
        probs = torch.softmax(out[task].detach(), dim=-1)
        acts[task] = torch.multinomial(probs, 1, generator=generator)[:, 0]
    return acts


def log_prob(
    out: dict[str, torch.Tensor],
    actions: dict[str, torch.Tensor],
    masks: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Log-probability of a joint one-shot action: the sum over tasks in ``actions`` and over
    ops of each op's categorical log-prob (the decisions are independent given the graph).

    ``masks[task]`` ``(n,)`` keeps only the ops whose decision matters (e.g. fusion only for ops
    with a fusable input edge: :func:`fusion_node_mask`)."""
    masks = masks or {}
    total = out[TASKS[0]].new_zeros(())
    for task, a in actions.items():
        lp = torch.log_softmax(out[task], dim=-1).gather(1, a.long()[:, None])[:, 0]
        total = total + _masked_sum(lp, masks.get(task))
    return total


def entropy(
    out: dict[str, torch.Tensor],
    tasks: tuple[str, ...] = TASKS,
    masks: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Entropy of the joint one-shot decision (a sum: the per-op decisions are independent)."""
    masks = masks or {}
    total = out[TASKS[0]].new_zeros(())
    for task in tasks:
        lp = torch.log_softmax(out[task], dim=-1)
        total = total + _masked_sum(-(lp.exp() * lp).sum(-1), masks.get(task))
    return total


# ---- ONNX -----------------------------------------------------------------------------------


def input_width(config: GOPolicyConfig) -> int:
    """Columns of the node features ``x`` a policy of ``config`` reads: :data:`NODE_FEATURES`,
    then :data:`MEMORY_FEATURES` with ``memory_input``."""
    return len(NODE_FEATURES) + (len(MEMORY_FEATURES) if config.memory_input else 0)


@dataclasses.dataclass(frozen=True)
class _GraphSizes:
    """Per-graph tensors every part of the ONNX graph reuses: the op count ``n`` (as a 1-d
    shape and as a scalar), zero buffers to scatter messages into, the edge endpoints as
    ``ScatterND`` indices, and the inverse in- and out-degrees (at least 1) of GraphSAGE's mean."""

    n1: str
    n_scalar: str
    zeros_nd: str
    src_i: str
    dst_i: str
    one: str
    inv_in: str
    inv_out: str


def _graph_sizes(b: OnnxBuilder, d: int) -> _GraphSizes:
    from onnx import TensorProto, helper

    op, const = b.op, b.const
    n1 = op("Shape", "x", start=0, end=1)
    n_scalar = op("Squeeze", n1, const([0]))
    zeros_nd = op("ConstantOfShape", op("Concat", n1, const([d]), axis=0))
    zeros_n1 = op("ConstantOfShape", op("Concat", n1, const([1]), axis=0))
    ones_value = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    ones_m1 = op("ConstantOfShape", op("Shape", "edge_attr"), value=ones_value)
    src_i = op("Unsqueeze", "src", const([1]))  # ScatterND indices: (m, 1)
    dst_i = op("Unsqueeze", "dst", const([1]))
    one = const(np.array([1.0], np.float32))
    inv_in = op(
        "Reciprocal", op("Max", op("ScatterND", zeros_n1, dst_i, ones_m1, reduction="add"), one)
    )
    inv_out = op(
        "Reciprocal", op("Max", op("ScatterND", zeros_n1, src_i, ones_m1, reduction="add"), one)
    )
    return _GraphSizes(n1, n_scalar, zeros_nd, src_i, dst_i, one, inv_in, inv_out)


def _onnx_embed(b: OnnxBuilder, model: GOPolicy) -> str:
    """The input embedding (:meth:`GOPolicy.forward`'s first step): the op type's embedding ++
    the other features (++ sinusoidal position and depth features), a dense layer, LayerNorm."""
    from onnx import TensorProto

    op, const, c = b.op, b.const, model.config
    typ = op("Cast", op("Slice", "x", const([0]), const([1]), const([1])), to=TensorProto.INT64)
    typ = op("Squeeze", typ, const([1]))
    emb = op("Gather", const(host(model.type_emb.weight)), typ, axis=0)
    rest = op("Slice", "x", const([1]), const([input_width(c)]), const([1]))
    parts = [emb, rest]
    if c.pos_freqs:  # (n, 2, 1) * (k,) -> (n, 2k): position's octaves, then depth's
        cols = op("Unsqueeze", op("Gather", "x", const(_POS_COLS), axis=1), const([2]))
        pos = op("Mul", cols, const(host(model.freqs)))
        pos = op("Reshape", pos, const([0, 2 * c.pos_freqs]))
        parts += [op("Sin", pos), op("Cos", pos)]
    h = b.linear(op("Concat", *parts, axis=1), model.inp, quantize=False)
    return b.layer_norm(h, model.inp_norm)


def _onnx_sage(b: OnnxBuilder, g: _GraphSizes, h: str, layer: SAGELayer) -> str:
    """One :class:`SAGELayer`: mean messages from predecessors and from successors (as
    ``Gather`` + ``ScatterND(reduction="add")`` times the inverse degree), and the anchor's."""
    op, const = b.op, b.const
    e_in = op("Mul", "edge_attr", const(host(layer.edge_in)))
    e_out = op("Mul", "edge_attr", const(host(layer.edge_out)))
    msg_in = op("Add", op("Gather", h, "src", axis=0), e_in)
    msg_out = op("Add", op("Gather", h, "dst", axis=0), e_out)
    agg_in = op("Mul", op("ScatterND", g.zeros_nd, g.dst_i, msg_in, reduction="add"), g.inv_in)
    agg_out = op("Mul", op("ScatterND", g.zeros_nd, g.src_i, msg_out, reduction="add"), g.inv_out)
    h_anc = op("Gather", h, "anchor", axis=0)
    z = b.linear(op("Concat", h, agg_in, agg_out, h_anc, axis=1), layer.lin, quantize=True)
    return b.layer_norm(op("Add", h, op("Relu", z)), layer.norm)


def _onnx_attention(b: OnnxBuilder, g: _GraphSizes, h: str, model: GOPolicy) -> str:
    """The segment attention blocks: the topologically ordered rows padded to ``G`` whole
    segments of ``S`` (``G`` is the only dynamic dimension), each segment attending to itself
    and to the previous one; the rows back in op order at the end."""
    op, const = b.op, b.const
    s = model.config.segment
    pad = op("Mod", op("Sub", const([s]), op("Mod", g.n1, const([s]))), const([s]))
    pads = op("Concat", const([0, 0]), pad, const([0]), axis=0)
    t = op("Pad", op("Gather", h, "order", axis=0), pads)
    p_scalar = op("Squeeze", op("Add", g.n1, pad), const([0]))
    pos = op("Range", const(np.array(0, np.int64)), p_scalar, const(np.array(1, np.int64)))
    mem_ok = op("Reshape", op("GreaterOrEqual", pos, const(np.array(s, np.int64))), const([-1, s]))
    cur_ok = op("Reshape", op("Less", pos, g.n_scalar), const([-1, s]))
    valid = op("Concat", mem_ok, cur_ok, axis=1)
    bias = op("Where", valid, const(np.array(0.0, np.float32)), const(np.array(_MASK, np.float32)))
    bias = op("Unsqueeze", bias, const([1, 2]))  # (G, 1, 1, 2S)
    zero_seg = const(np.zeros((1, s, model.config.hidden), np.float32))
    for block in model.attn:
        assert isinstance(block, SegmentAttention)
        t = _onnx_attention_block(b, t, block, bias, zero_seg, model.config)
    return op("Gather", t, "rank", axis=0)


def _onnx_attention_block(
    b: OnnxBuilder,
    t: str,
    block: SegmentAttention,
    bias: str,
    zero_seg: str,
    c: GOPolicyConfig,
) -> str:
    """One :class:`SegmentAttention` block on the padded rows ``t`` ``(P, d)``: attention over
    the segment and its memory (the previous segment's keys and values; zeros for the first),
    then the feed-forward layer, each with a residual and LayerNorm."""
    from onnx import helper

    op, const = b.op, b.const
    d, s, nh = c.hidden, c.segment, c.heads
    dh = d // nh

    def with_memory(k2: str) -> str:  # (P, d) -> (G, 2S, heads, dh): memory first
        k3 = op("Reshape", k2, const([-1, s, d]))
        prev = op("Slice", k3, const([0]), const([-1]), const([0]))
        mem = op("Concat", zero_seg, prev, axis=0)
        return op("Reshape", op("Concat", mem, k3, axis=1), const([-1, 2 * s, nh, dh]))

    # one (d, 3d) product for q, k and v: int8 quantizes the shared input once (per-row
    # scales and per-column weight scales are the same as for three separate layers)
    qkv_w = [host(lin.weight).T for lin in (block.q, block.k, block.v)]
    qkv_b = [host(lin.bias) for lin in (block.q, block.k, block.v)]
    qkv = b.dense(t, np.concatenate(qkv_w, axis=1), np.concatenate(qkv_b), quantize=True)
    q2, k2, v2 = (b.name() for _ in range(3))
    b.nodes.append(helper.make_node("Split", [qkv, const([d, d, d])], [q2, k2, v2], axis=1))
    q2 = op("Mul", q2, const(np.array(1.0 / math.sqrt(dh), np.float32)))
    q = op("Transpose", op("Reshape", q2, const([-1, s, nh, dh])), perm=[0, 2, 1, 3])
    k = op("Transpose", with_memory(k2), perm=[0, 2, 3, 1])
    v = op("Transpose", with_memory(v2), perm=[0, 2, 1, 3])
    att = op("Softmax", op("Add", op("MatMul", q, k), bias), axis=-1)
    a = op("Reshape", op("Transpose", op("MatMul", att, v), perm=[0, 2, 1, 3]), const([-1, d]))
    t = b.layer_norm(op("Add", t, b.linear(a, block.o, quantize=True)), block.norm1)
    f = op("Relu", b.linear(t, block.ff1, quantize=True))
    f = b.linear(f, block.ff2, quantize=True, nonnegative=True)
    return b.layer_norm(op("Add", t, f), block.norm2)


def _onnx_heads(b: OnnxBuilder, g: _GraphSizes, h: str, model: GOPolicy) -> None:
    """The three task heads, each FiLM-conditioned on the graph's mean embedding and its task
    embedding, written as the graph's outputs (placement, priority, fusion), plus the priority
    score (the expected priority level)."""
    op, const, c, d = b.op, b.const, model.config, model.config.hidden
    mean = op("ReduceMean", h, axes=[0], keepdims=1)
    task_emb = host(model.task_emb)
    outputs = {}
    for i, task in enumerate(TASKS):
        cond = op("Concat", mean, const(task_emb[i : i + 1]), axis=1)
        cond = op("Relu", b.linear(cond, model.cond, quantize=False))
        film = b.linear(cond, model.film, quantize=False)
        gamma = op("Add", op("Slice", film, const([0]), const([d]), const([1])), g.one)
        beta = op("Slice", film, const([d]), const([2 * d]), const([1]))
        head = model.heads[task]
        assert isinstance(head, TaskHead)
        hk = op("Add", op("Mul", h, gamma), beta)
        z = op("Relu", b.linear(hk, head.hidden, quantize=True))
        outputs[task] = b.linear(z, head.out, quantize=False)  # output layers stay fp32
        b.op("Identity", outputs[task], out=task)
    levels = const(np.linspace(0.0, 1.0, c.priority_levels, dtype=np.float32))
    b.op("MatMul", op("Softmax", outputs["priority"], axis=-1), levels, out="priority_score")


def _onnx_model(model: GOPolicy, precision: str) -> Any:
    """:meth:`GOPolicy.forward` as an ONNX graph, op for op (see :func:`export_onnx`)."""
    from onnx import TensorProto, helper

    c = model.config
    b = OnnxBuilder(precision)
    g = _graph_sizes(b, c.hidden)
    h = _onnx_embed(b, model)
    for layer in model.sage:
        assert isinstance(layer, SAGELayer)
        h = _onnx_sage(b, g, h, layer)
    if len(model.attn):
        h = _onnx_attention(b, g, h, model)
    _onnx_heads(b, g, h, model)

    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = [
        helper.make_tensor_value_info("x", f32, ["nodes", input_width(c)]),
        helper.make_tensor_value_info("edge_attr", f32, ["edges", len(EDGE_FEATURES)]),
        *(helper.make_tensor_value_info(k, i64, ["edges"]) for k in ("src", "dst")),
        *(helper.make_tensor_value_info(k, i64, ["nodes"]) for k in ("anchor", "order", "rank")),
    ]
    widths = {"placement": c.num_devices, "priority": c.priority_levels, "fusion": 2}
    outs = [helper.make_tensor_value_info(k, f32, ["nodes", w]) for k, w in widths.items()]
    outs.append(helper.make_tensor_value_info("priority_score", f32, ["nodes"]))
    return b.model(
        "actorq_go_policy", inputs, outs, f"actorq GO policy {precision} {dataclasses.asdict(c)}"
    )


def onnx_bytes(model: GOPolicy, precision: str = "fp32") -> bytes:
    """The policy as a serialized ONNX model (see :func:`export_onnx`)."""
    return bytes(_onnx_model(model, precision).SerializeToString())


def export_onnx(model: GOPolicy, path: str | Path, precision: str = "fp32") -> Path:
    """Write the policy as ONNX: inputs are :meth:`GraphInputs.feeds` (any op and edge count),
    outputs those of :meth:`GOPolicy.forward`.

    The graph is written by hand, op for op the same computation as the torch model: GraphSAGE
    aggregation as ``Gather`` + ``ScatterND(reduction="add")`` times the inverse degree; the
    attention on ``(G, S, d)`` after padding the topologically ordered rows to whole segments
    (``G`` is the only dynamic dimension; the memory is the keys shifted by one segment).

    ``precision="int8"``: every hidden dense layer (GraphSAGE, attention projections and
    feed-forward, the heads' hidden layers) runs actorq's int8 layer: weights int8 per output
    column, activations uint8 with one scale per row (per op), exact int32 ``MatMulInteger``.
    Not onnxruntime's ``quantize_dynamic``: it quantizes activations with one scale per tensor,
    i.e. one scale for all 80k ops, so one op with large activations would coarsen every other
    op's decision; per row, an op's outputs do not depend on the rest of the graph's magnitudes.
    The input embedding, the FiLM network (one row) and the output layers stay fp32, as in
    actorq's int8 snapshots (their noise lands directly on the logits), and so do the attention
    score products (activations times activations).
    """
    p = Path(path)
    p.write_bytes(onnx_bytes(model, precision))
    return p


def torch_outputs(model: GOPolicy, inputs: GraphInputs) -> dict[str, np.ndarray]:
    """The torch model's outputs as numpy (eval mode, no gradient): the reference for tests."""
    was = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model(**inputs.tensors())
    finally:
        model.train(was)
    return {k: v.numpy() for k, v in out.items()}


__all__ = [
    "EDGE_FEATURES",
    "NODE_FEATURES",
    "OP_VOCAB",
    "TASKS",
    "GOPolicy",
    "GOPolicyConfig",
    "GraphInputs",
    "OnnxGOPolicy",
    "edge_features",
    "encode_graph",
    "entropy",
    "export_onnx",
    "fusion_edges",
    "fusion_node_mask",
    "log_prob",
    "log_prob_np",
    "node_features",
    "onnx_bytes",
    "priorities",
    "sample",
    "torch_outputs",
]
