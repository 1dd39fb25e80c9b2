"""The macro-placement policy and value networks, circuit-training style, and their ONNX form.

Mirhoseini et al. (Nature 594, 2021, "A graph placement methodology for fast chip design") and
google-research/circuit_training (``model/model_lib.py``) place one hard macro per step with a
network that reads the netlist as a graph and the canvas as images: a graph encoder over the
netlist gives an embedding of the macro to place now and of the whole netlist; a convolutional
encoder reads the canvas maps; a deconvolutional head turns the embeddings into one logit per
grid cell; cells where the macro does not fit are masked out. This module builds that network
for one netlist (one :class:`~actorq.chip.env.ChipPlacementEnv`), reading exactly the env's flat
observation (:attr:`ChipPlacementEnv.layout`), so the actors of actorq's normal path can run it:

* :func:`macro_graph`: the netlist's static macro graph (clique-expanded nets among the hard
  macros, two-hop links through soft macros and standard cells, and pulls towards the fixed
  ports), computed once per netlist and kept in the model as buffers.
* :class:`ChipEncoder`: GraphSAGE over the macros (Hamilton et al., NeurIPS 2017; mean
  aggregation, residual, LayerNorm, as :class:`actorq.agents.go.networks.SAGELayer` but undirected,
  weighted and batched) and a conv encoder over the canvas maps.
* :class:`ChipPolicy`: ``obs (B, obs_dim) -> logits (B, rows·cols)``, illegal cells at
  :data:`MASKED_LOGIT`. :class:`ChipValue`: ``obs -> (B,)``, separate weights (it stays on the
  learner).
* :func:`chip_policy_onnx`: the policy as a hand-built ONNX graph, input ``obs`` (dynamic batch),
  output ``logits``, at fp32 or int8 (actorq's int8 layers, :mod:`actorq.quant.runtimes`).

Training (PPO through the actor-learner loop) is not here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from actorq.chip.env import PLACED_FEATURES, STATIC_FEATURES, ChipPlacementEnv
from actorq.chip.netlist import PORT, SOFT_MACRO, STDCELL
from actorq.quant.onnx import host
from actorq.quant.onnx_builder import OnnxBuilder

MASKED_LOGIT = -1e9
"""Logit of an illegal cell. Finite so that no inf or NaN can appear (``0 · -inf`` in an
entropy, a max over an all-masked row), and so negative that ``exp(MASKED_LOGIT - max)`` is
exactly 0 in fp32 and fp64 next to any legal logit: softmax gives masked cells probability 0,
so they are never sampled and their log-probability terms vanish from the entropy."""

_LN_EPS = 1e-5
_TINY = 1e-6  # denominators of weighted means: below it there is nothing to average
_NODE_FEATURES = STATIC_FEATURES + PLACED_FEATURES + 1  # + "is the macro to place now"
_PLANES = 5  # density, mask, wire map, current macro's width and height


@dataclasses.dataclass(frozen=True)
class ChipPolicyConfig:
    """Sizes of :class:`ChipPolicy` / :class:`ChipValue`. The defaults are small enough for
    CPU training: 102k policy parameters on Ariane133 (133 macros, a 21 × 24 grid), about
    0.5 ms per batch-1 decision in onnxruntime on one thread, 1.3 ms in torch
    (``git show 85997d5:benchmarks/chip_policy_speed.py``)."""

    hidden: int = 64
    """Width of the macro embeddings and of the conditioning vector."""
    sage_layers: int = 3
    """GraphSAGE layers over the macro graph (information travels this many hops)."""
    conv_channels: int = 32
    """Channels of every canvas convolution."""
    conv_layers: int = 3
    """3 × 3 convolutions of the canvas encoder (receptive field ``2 · conv_layers + 1`` cells;
    the pooled features and the graph embedding carry what lies further)."""
    soft_hop: float = 0.5
    """Weight of two-hop links hard → soft macro (or standard cell) → hard/port relative to a
    direct net (:func:`macro_graph`); 0 keeps direct nets only."""
    value_hidden: int = 64
    """Hidden width of :class:`ChipValue`'s MLP."""
    out_gain: float = 0.01
    """Orthogonal-init gain of the policy's output layers: small, so an untrained policy is
    close to uniform over the legal cells (CleanRL's PPO initialisation)."""

    def __post_init__(self) -> None:
        if min(self.hidden, self.sage_layers, self.conv_channels, self.conv_layers) < 1:
            raise ValueError("hidden, sage_layers, conv_channels and conv_layers must be >= 1")
        if self.value_hidden < 1:
            raise ValueError("value_hidden must be >= 1")
        if not (math.isfinite(self.soft_hop) and self.soft_hop >= 0):
            raise ValueError(f"soft_hop={self.soft_hop!r} must be finite and >= 0")


# ---- the static macro graph -----------------------------------------------------------------


@dataclasses.dataclass
class MacroGraph:
    """A netlist's hard macros as a weighted graph, in the env's placement order.

    ``adj`` feeds GraphSAGE's mean aggregation; ``wire``/``port_*`` feed the wire map, the
    weighted mean Manhattan distance from each cell to the current macro's placed neighbours
    and ports (what its two-pin connections would cost if it went there).
    """

    adj: np.ndarray
    """``(n, n)`` float32: macro-macro weights, rows normalised to sum 1 (0 for a macro with no
    neighbour), zero diagonal."""
    wire: np.ndarray
    """``(n, n)`` float32: the same weights over the macro's macro *and* port connections."""
    port_x: np.ndarray
    """``(n, cols)`` float32: ``Σ_p wire_port[i, p] · |cell_x - port_x[p]|`` (canvas units 0..1),
    the ports' part of the wire map, which is fixed: ports do not move."""
    port_y: np.ndarray
    """``(n, rows)`` float32: the same along y."""
    port_w: np.ndarray
    """``(n,)`` float32: ``Σ_p wire_port[i, p]``, the ports' part of the wire map's weight."""


def macro_graph(env: ChipPlacementEnv, soft_hop: float = 0.5) -> MacroGraph:
    """The static graph of ``env``'s hard macros (``env.order``) for :class:`ChipEncoder`.

    Nets are clique-expanded over the distinct nodes they touch (a pin counts as its macro): a
    net of weight ``w`` over ``m`` nodes links every pair with ``w / (m - 1)``, so each node's
    total link weight is the weight of its nets (the standard clique net model). Hard macros
    rarely share nets directly in a clustered netlist; what ties them is logic, which
    circuit-training's grouping puts in soft macros, so a two-hop path ``i → s → j`` through a
    soft macro or standard cell ``s`` adds ``soft_hop · A[i, s] · A[s, j] / deg(s)`` (a
    random-walk step from ``s``). Ports are fixed: they get no embedding, only a pull in the
    wire map (direct and two-hop likewise).

    Everything is built from per-net rows of ``n`` columns (``O(pins · n)``), never a dense
    node × node matrix, so it stays cheap on large netlists.
    """
    nl = env.netlist
    n, rows, cols = env.n, env.rows, env.cols
    nodes = nl.num_nodes
    # distinct (net, node) memberships, pins replaced by their macro
    net_of = np.repeat(np.arange(nl.num_nets), np.diff(nl.net_ptr))
    key = np.unique(net_of * nodes + nl.parent[nl.net_nodes])
    k, p = key // nodes, key % nodes
    m = np.bincount(k, minlength=nl.num_nets)
    w = nl.net_weight.astype(np.float64)
    wn = np.where(m >= 2, w / np.maximum(m - 1, 1), 0.0)  # a one-node net links nothing

    soft = np.flatnonzero(np.isin(nl.kind, (SOFT_MACRO, STDCELL)))
    ports = np.flatnonzero(nl.kind == PORT)
    hard_i, soft_i, port_i = (_index_of(ids, nodes) for ids in (env.order, soft, ports))
    hard, in_s, is_port = hard_i[p] >= 0, soft_i[p] >= 0, port_i[p] >= 0
    # per net, its hard macros' columns weighted by the net's pair weight: (nets, n)
    net_h = np.zeros((nl.num_nets, n))
    np.add.at(net_h, (k[hard], hard_i[p[hard]]), wn[k[hard]])
    # A[x, j] for hard macro j and x a hard macro, soft node or port: Σ of x's nets' rows
    a_hh = _segment_sum(net_h[k[hard]], hard_i[p[hard]], n)
    a_sh = _segment_sum(net_h[k[in_s]], soft_i[p[in_s]], len(soft))  # (S, n)
    a_ph = _segment_sum(net_h[k[is_port]], port_i[p[is_port]], len(ports))  # (P, n)
    deg = np.bincount(p, weights=np.where(m >= 2, w, 0.0)[k], minlength=nodes)  # Σ of its nets
    walk = a_sh / np.maximum(deg[soft], _TINY)[:, None]  # (S, n): s → hard j, normalised
    adj = a_hh + soft_hop * (a_sh.T @ walk)
    np.fill_diagonal(adj, 0.0)  # a macro is not its own neighbour (nor is i → s → i a link)
    # ports: direct, and two-hop through soft nodes: per net, Σ_s A[net's s] · walk[s]
    # (memberships are sorted by net, so a net's are one contiguous segment)
    net_s = np.zeros((nl.num_nets, n))
    ks = k[in_s]
    if len(ks):
        starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        vals = wn[ks, None] * walk[soft_i[p[in_s]]]
        net_s[ks[starts]] = np.add.reduceat(vals, starts, axis=0)
    a_ph += soft_hop * _segment_sum(net_s[k[is_port]], port_i[p[is_port]], len(ports))

    deg_h = adj.sum(axis=1)
    norm = np.where(deg_h > 0, 1.0 / np.maximum(deg_h, _TINY), 0.0)
    tot = deg_h + a_ph.sum(axis=0)
    inv_tot = np.where(tot > 0, 1.0 / np.maximum(tot, _TINY), 0.0)
    wire_port = a_ph.T * inv_tot[:, None]  # (n, P)
    c = env.pc.canvas
    px = np.clip(nl.x[ports] / c.width, 0.0, 1.0)
    py = np.clip(nl.y[ports] / c.height, 0.0, 1.0)
    cell_x, cell_y = _cell_centres(rows, cols)
    return MacroGraph(
        adj=(adj * norm[:, None]).astype(np.float32),
        wire=(adj * inv_tot[:, None]).astype(np.float32),
        port_x=(wire_port @ np.abs(cell_x[None, :] - px[:, None])).astype(np.float32),
        port_y=(wire_port @ np.abs(cell_y[None, :] - py[:, None])).astype(np.float32),
        port_w=wire_port.sum(axis=1).astype(np.float32),
    )


def _index_of(ids: np.ndarray, size: int) -> np.ndarray:
    """``(size,)``: the position of each node in ``ids``, -1 for nodes not in it."""
    out = np.full(size, -1)
    out[ids] = np.arange(len(ids))
    return out


def _segment_sum(values: np.ndarray, seg: np.ndarray, count: int) -> np.ndarray:
    """``out[s] = Σ values[i] over seg[i] == s``, rows of ``values`` (``(count, ...)``)."""
    out = np.zeros((count, *values.shape[1:]))
    if len(seg):
        order = np.argsort(seg, kind="stable")
        sg = seg[order]
        starts = np.flatnonzero(np.r_[True, sg[1:] != sg[:-1]])
        out[sg[starts]] = np.add.reduceat(values[order], starts, axis=0)
    return out


def _cell_centres(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Cell centres in canvas units (0..1): ``(cols,)`` along x, ``(rows,)`` along y, as the
    env's ``cx / width`` and ``cy / height``."""
    return (np.arange(cols) + 0.5) / cols, (np.arange(rows) + 0.5) / rows


# ---- the torch model ------------------------------------------------------------------------


class MacroSAGE(nn.Module):
    """One GraphSAGE layer (Hamilton et al., NeurIPS 2017) on the undirected, weighted macro
    graph, batched over observations: ``h' = LayerNorm(h + ReLU(W [h ; Â h] + b))`` with ``Â``
    the row-normalised adjacency (a weighted mean over neighbours). Residual and post-norm as in
    :class:`actorq.agents.go.networks.SAGELayer`, whose directed, edge-list form does not fit a
    batch of dense ``(B, n, d)`` states."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin = nn.Linear(2 * d, d)
        self.norm = nn.LayerNorm(d, eps=_LN_EPS)

    def forward(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        z = self.lin(torch.cat([h, adj @ h], dim=-1))
        out: torch.Tensor = self.norm(h + torch.relu(z))
        return out


@dataclasses.dataclass
class Encoded:
    """What :class:`ChipEncoder` gives the heads."""

    current: torch.Tensor  # (B, d): the embedding of the macro to place now
    mean: torch.Tensor  # (B, d): the mean macro embedding (the netlist's state)
    canvas: torch.Tensor  # (B, C, rows, cols): canvas features
    mask: torch.Tensor  # (B, rows·cols): the observation's action mask


class ChipEncoder(nn.Module):
    """Reads a batch of flat observations of one :class:`ChipPlacementEnv`.

    * Macros: per-macro features (static size and pins, placement, "is current") → linear →
      LayerNorm → :class:`MacroSAGE` × ``sage_layers`` over :func:`macro_graph`'s ``adj``; the
      current macro's embedding (the one-hot picks it) and the mean over macros, as in
      circuit-training's policy (its "current node" and "graph" embeddings).
    * Canvas: planes ``(density, mask, wire map, current width, current height)`` through
      ``conv_layers`` 3 × 3 convolutions with ReLU. The wire map (the weighted mean Manhattan
      distance from each cell to the current macro's placed neighbours and its ports, 0..1)
      computes from the observation what a cell costs in wirelength, the proxy cost's main
      term, which the convolutions would otherwise have to learn to draw from coordinates.
      Manhattan distance is separable, so the map costs ``O(n · (rows + cols))``, not
      ``O(n · rows · cols)``.
    """

    adj: torch.Tensor
    wire: torch.Tensor
    port_x: torch.Tensor
    port_y: torch.Tensor
    port_w: torch.Tensor
    cell_x: torch.Tensor
    cell_y: torch.Tensor

    def __init__(self, env: ChipPlacementEnv, config: ChipPolicyConfig) -> None:
        super().__init__()
        if env.n == 0:
            raise ValueError("the netlist has no hard macros: there is nothing to place")
        c = self.config = config
        self.n, self.rows, self.cols = env.n, env.rows, env.cols
        self.obs_dim = int(np.prod(env.observation_space.shape or (0,)))
        self.slices = {k: (s.start, s.stop) for k, s in env.layout.items()}
        g = macro_graph(env, c.soft_hop)
        # persistent: a checkpoint carries its netlist's structure, and loading it into a model
        # built for another netlist fails on shapes instead of silently mixing the two
        for name in ("adj", "wire", "port_x", "port_y", "port_w"):
            self.register_buffer(name, torch.from_numpy(getattr(g, name)))
        cx, cy = _cell_centres(self.rows, self.cols)
        self.register_buffer("cell_x", torch.from_numpy(cx.astype(np.float32)))
        self.register_buffer("cell_y", torch.from_numpy(cy.astype(np.float32)))
        d, ch = c.hidden, c.conv_channels
        self.inp = nn.Linear(_NODE_FEATURES, d)
        self.inp_norm = nn.LayerNorm(d, eps=_LN_EPS)
        self.sage = nn.ModuleList(MacroSAGE(d) for _ in range(c.sage_layers))
        self.convs = nn.ModuleList(
            nn.Conv2d(_PLANES if i == 0 else ch, ch, 3, padding=1) for i in range(c.conv_layers)
        )

    def part(self, obs: torch.Tensor, name: str) -> torch.Tensor:
        a, b = self.slices[name]
        return obs[:, a:b]

    def wire_map(self, cur: torch.Tensor, placed: torch.Tensor) -> torch.Tensor:
        """``(B, rows, cols)``: half the weighted mean Manhattan distance (canvas units) from
        each cell to the current macro's placed neighbours and ports; 0 with none."""
        wh = (cur @ self.wire) * placed[..., 2]  # (B, n): placed neighbours only
        dx = (self.cell_x - placed[..., 0:1]).abs()  # (B, n, cols)
        dy = (self.cell_y - placed[..., 1:2]).abs()  # (B, n, rows)
        num_x = (wh[:, None, :] @ dx)[:, 0] + cur @ self.port_x  # (B, cols)
        num_y = (wh[:, None, :] @ dy)[:, 0] + cur @ self.port_y  # (B, rows)
        den = wh.sum(dim=1, keepdim=True) + cur @ self.port_w[:, None]  # (B, 1)
        num = num_y[:, :, None] + num_x[:, None, :]
        return num / (2.0 * den.clamp(min=_TINY))[:, :, None]

    def forward(self, obs: torch.Tensor) -> Encoded:
        if obs.ndim != 2 or obs.shape[1] != self.obs_dim:
            raise ValueError(f"expected obs of shape (B, {self.obs_dim}), got {tuple(obs.shape)}")
        n, r, k = self.n, self.rows, self.cols
        static = self.part(obs, "static").reshape(-1, n, STATIC_FEATURES)
        placed = self.part(obs, "placed").reshape(-1, n, PLACED_FEATURES)
        cur = self.part(obs, "current")
        mask = self.part(obs, "mask")
        h = self.inp_norm(self.inp(torch.cat([static, placed, cur[:, :, None]], dim=2)))
        for layer in self.sage:
            h = layer(h, self.adj)
        h_cur = (cur[:, None, :] @ h)[:, 0]
        h_mean = h.mean(dim=1)
        size = cur[:, None, :] @ static[:, :, 0:2]  # (B, 1, 2): its width and height
        planes = torch.cat(
            [
                self.part(obs, "density").reshape(-1, 1, r, k),
                mask.reshape(-1, 1, r, k),
                self.wire_map(cur, placed)[:, None],
                size.reshape(-1, 2, 1, 1) * obs.new_ones(1, 1, r, k),
            ],
            dim=1,
        )
        f = planes
        for conv in self.convs:
            f = torch.relu(conv(f))
        return Encoded(h_cur, h_mean, f, mask)


class ChipPolicy(nn.Module):
    """``obs (B, obs_dim) -> logits (B, rows·cols)`` for one netlist (module docstring).

    After :class:`ChipEncoder`, a conditioning vector ``c = ReLU(W [h_cur ; h_mean ; pool(f)])``
    (the macro to place, the netlist so far, the canvas globally) modulates the canvas features
    by FiLM (Perez et al., AAAI 2018; initialised to the identity), a 3 × 3 and a 1 × 1
    convolution give a logit per cell, and a dense layer from ``c`` to the grid adds a
    macro-dependent logit map. circuit-training's head lifts the embedding to the canvas with a
    dense layer to an 8 × 8 map and transposed convolutions up to its fixed 128 × 128 grid; the
    grids here are small and arbitrary (2 × 2 to 21 × 24, not powers of two), so the dense
    layer maps straight to the grid (a transposed convolution from a 1 × 1 seed is such a dense
    layer) and the spatial detail comes from the convolutions over the canvas features. Illegal
    cells (mask 0) get :data:`MASKED_LOGIT`; an all-masked row (a terminal observation) is
    uniform.
    """

    def __init__(self, env: ChipPlacementEnv, config: ChipPolicyConfig | None = None) -> None:
        super().__init__()
        c = self.config = config or ChipPolicyConfig()
        d, ch = c.hidden, c.conv_channels
        self.encoder = ChipEncoder(env, c)
        self.rows, self.cols, self.n = env.rows, env.cols, env.n
        self.obs_dim = self.encoder.obs_dim
        self.cond = nn.Linear(2 * d + ch, d)
        self.film = nn.Linear(d, 2 * ch)
        nn.init.zeros_(self.film.weight)
        nn.init.zeros_(self.film.bias)
        self.head = nn.Conv2d(ch, ch, 3, padding=1)
        self.out = nn.Conv2d(ch, 1, 1)
        self.decoder = nn.Linear(d, self.rows * self.cols)
        for layer in (self.out, self.decoder):
            nn.init.orthogonal_(layer.weight, c.out_gain)  # a conv's weight is flattened
            assert layer.bias is not None
            nn.init.zeros_(layer.bias)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        e = self.encoder(obs)
        ch = self.config.conv_channels
        cond = torch.relu(self.cond(torch.cat([e.current, e.mean, e.canvas.mean(dim=(2, 3))], 1)))
        film = self.film(cond)
        gamma, beta = film[:, :ch, None, None], film[:, ch:, None, None]
        f = torch.relu(e.canvas * (1.0 + gamma) + beta)
        f = torch.relu(self.head(f))
        z = self.out(f).flatten(1) + self.decoder(cond)
        return torch.where(e.mask > 0.5, z, MASKED_LOGIT)


class ChipValue(nn.Module):
    """``obs (B, obs_dim) -> value (B,)``: its own :class:`ChipEncoder` (no weights shared with
    the policy, as actorq's PPO keeps the two apart) and an MLP on the current macro's and the
    mean embedding and the mean- and max-pooled canvas features. It stays on the learner."""

    def __init__(self, env: ChipPlacementEnv, config: ChipPolicyConfig | None = None) -> None:
        super().__init__()
        c = self.config = config or ChipPolicyConfig()
        self.encoder = ChipEncoder(env, c)
        self.obs_dim = self.encoder.obs_dim
        self.hidden = nn.Linear(2 * c.hidden + 2 * c.conv_channels, c.value_hidden)
        self.out = nn.Linear(c.value_hidden, 1)
        nn.init.orthogonal_(self.out.weight, 1.0)
        nn.init.zeros_(self.out.bias)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        e = self.encoder(obs)
        pooled = [e.canvas.mean(dim=(2, 3)), e.canvas.amax(dim=(2, 3))]
        z = torch.relu(self.hidden(torch.cat([e.current, e.mean, *pooled], dim=1)))
        v: torch.Tensor = self.out(z)[:, 0]
        return v


# ---- ONNX -----------------------------------------------------------------------------------


class _ChipOnnx:
    """Writes :class:`ChipPolicy`'s forward op for op on actorq's ONNX builder
    (:class:`actorq.quant.onnx_builder.OnnxBuilder`: dense layers at fp32, or int8 with
    ``MatMulInteger``), plus, if asked, int8 convolutions with ``ConvInteger``."""

    def __init__(self, precision: str, int8_convs: bool) -> None:
        self.b = OnnxBuilder(precision)
        self.int8 = precision == "int8"
        self.int8_convs = self.int8 and int8_convs

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        c = self.b.const
        return self.b.op("Slice", x, c([start]), c([end]), c([axis]))

    def dense3(self, x: str, lin: nn.Linear, rows: int, *, quantize: bool) -> str:
        """A dense layer on ``(B, rows, in)``: int8 quantizes per row, i.e. per macro of each
        observation, so a state's output never depends on the rest of the batch."""
        if not (quantize and self.int8):
            return self.b.linear(x, lin, quantize=False)
        x2 = self.b.op("Reshape", x, self.b.const([-1, lin.in_features]))
        y2 = self.b.linear(x2, lin, quantize=True)
        return self.b.op("Reshape", y2, self.b.const([-1, rows, lin.out_features]))

    def conv(self, x: str, conv: nn.Conv2d, *, quantize: bool) -> str:
        """``conv(x)`` for a nonnegative ``x`` (the input planes, or after a ReLU); int8 (with
        ``int8_convs``) as :meth:`actorq.quant.onnx_builder.OnnxBuilder.conv` writes it."""
        assert isinstance(conv.padding, tuple) and conv.bias is not None
        ph, pw = (int(v) for v in conv.padding)
        return self.b.conv(
            x,
            host(conv.weight),
            host(conv.bias),
            [ph, pw, ph, pw],  # ONNX: begins, then ends
            quantize=quantize and self.int8_convs,
        )

    def encoder(self, enc: ChipEncoder) -> tuple[str, str, str, str]:
        """Names of ``(h_cur, h_mean, canvas features, mask)``: :meth:`ChipEncoder.forward`."""
        b = self.b
        op, const = b.op, b.const
        n, r, k = enc.n, enc.rows, enc.cols

        def part(name: str, shape: list[int] | None = None) -> str:
            a, e = enc.slices[name]
            x = self.slice("obs", a, e, 1)
            return x if shape is None else op("Reshape", x, const(shape))

        static = part("static", [-1, n, STATIC_FEATURES])
        placed = part("placed", [-1, n, PLACED_FEATURES])
        cur = part("current")
        mask = part("mask")
        cur3 = op("Unsqueeze", cur, const([2]))
        x = op("Concat", static, placed, cur3, axis=2)
        h = b.layer_norm(b.linear(x, enc.inp, quantize=False), enc.inp_norm)  # input: fp32
        adj = const(enc.adj.numpy())
        for layer in enc.sage:
            assert isinstance(layer, MacroSAGE)
            z = self.dense3(
                op("Concat", h, op("MatMul", adj, h), axis=2), layer.lin, n, quantize=True
            )
            h = b.layer_norm(op("Add", h, op("Relu", z)), layer.norm)
        cur_row = op("Unsqueeze", cur, const([1]))  # (B, 1, n)
        h_cur = op("Squeeze", op("MatMul", cur_row, h), const([1]))
        h_mean = op("ReduceMean", h, axes=[1], keepdims=0)

        # wire map (ChipEncoder.wire_map)
        flag = op("Squeeze", self.slice(placed, 2, 3, 2), const([2]))
        wh = op("Mul", op("MatMul", cur, const(enc.wire.numpy())), flag)
        wh_row = op("Unsqueeze", wh, const([1]))
        dx = op("Abs", op("Sub", const(enc.cell_x.numpy()), self.slice(placed, 0, 1, 2)))
        dy = op("Abs", op("Sub", const(enc.cell_y.numpy()), self.slice(placed, 1, 2, 2)))
        num_x = op(
            "Add",
            op("Squeeze", op("MatMul", wh_row, dx), const([1])),
            op("MatMul", cur, const(enc.port_x.numpy())),
        )
        num_y = op(
            "Add",
            op("Squeeze", op("MatMul", wh_row, dy), const([1])),
            op("MatMul", cur, const(enc.port_y.numpy())),
        )
        den = op(
            "Add",
            op("ReduceSum", wh, const([1]), keepdims=1),
            op("MatMul", cur, const(enc.port_w.numpy()[:, None])),
        )
        num = op("Add", op("Unsqueeze", num_y, const([2])), op("Unsqueeze", num_x, const([1])))
        den = op("Mul", const(np.array(2.0, np.float32)), op("Max", den, const(_TINY)))
        wire = op("Div", num, op("Unsqueeze", den, const([2])))

        size = op("MatMul", cur_row, self.slice(static, 0, 2, 2))  # (B, 1, 2)
        planes = op(
            "Concat",
            part("density", [-1, 1, r, k]),
            op("Reshape", mask, const([-1, 1, r, k])),
            op("Unsqueeze", wire, const([1])),
            op("Mul", op("Reshape", size, const([-1, 2, 1, 1])), const(np.ones((1, 1, r, k)))),
            axis=1,
        )
        f = planes
        for i, conv in enumerate(enc.convs):
            assert isinstance(conv, nn.Conv2d)
            # the first layer reads the raw planes, whose channels differ in scale (a macro's
            # size is a few hundredths, the mask 0 or 1): it stays fp32, as input layers do
            f = op("Relu", self.conv(f, conv, quantize=i > 0))
        return h_cur, h_mean, f, mask


def _onnx_model(model: ChipPolicy, precision: str, int8_convs: bool) -> Any:
    from onnx import TensorProto, helper

    w = _ChipOnnx(precision, int8_convs)
    b = w.b
    op, const = b.op, b.const
    c = model.config
    ch = c.conv_channels
    h_cur, h_mean, f, mask = w.encoder(model.encoder)
    pooled = op("ReduceMean", f, axes=[2, 3], keepdims=0)
    # the conditioning and FiLM work on one row per state and their noise would move every
    # logit: fp32, as GO's FiLM network
    cond = op(
        "Relu",
        b.linear(op("Concat", h_cur, h_mean, pooled, axis=1), model.cond, quantize=False),
    )
    film = b.linear(cond, model.film, quantize=False)
    gamma = op("Unsqueeze", w.slice(film, 0, ch, 1), const([2, 3]))
    beta = op("Unsqueeze", w.slice(film, ch, 2 * ch, 1), const([2, 3]))
    one = const(np.array(1.0, np.float32))
    f = op("Relu", op("Add", op("Mul", f, op("Add", one, gamma)), beta))
    f = op("Relu", w.conv(f, model.head, quantize=True))
    # output layers stay fp32: their rounding lands directly on the logits
    z = op("Reshape", w.conv(f, model.out, quantize=False), const([-1, model.rows * model.cols]))
    z = op("Add", z, b.linear(cond, model.decoder, quantize=False))
    legal = op("Greater", mask, const(np.array(0.5, np.float32)))
    op("Where", legal, z, const(np.array(MASKED_LOGIT, np.float32)), out="logits")

    f32 = TensorProto.FLOAT
    return b.model(
        "actorq_chip_policy",
        [helper.make_tensor_value_info("obs", f32, ["batch", model.obs_dim])],
        [helper.make_tensor_value_info("logits", f32, ["batch", model.rows * model.cols])],
        f"actorq chip policy {precision}{' int8 convs' if w.int8_convs else ''} n={model.n} "
        f"grid={model.rows}x{model.cols} {dataclasses.asdict(c)}",
    )


def chip_policy_onnx(
    model: ChipPolicy, precision: str = "fp32", *, int8_convs: bool = False
) -> bytes:
    """The policy as a serialized ONNX model: input ``obs`` ``(batch, obs_dim)`` float32, the
    env's flat observation with any batch size; output ``logits`` ``(batch, rows·cols)``
    float32, illegal cells at :data:`MASKED_LOGIT`: what actorq's actors run in onnxruntime and
    sample a categorical action from.

    The graph is written by hand, op for op the same computation as :meth:`ChipPolicy.forward`
    (the static macro graph and the port terms are constants of the model).

    ``precision="int8"``: the GraphSAGE layers run actorq's int8 dense layer (int8 weights per
    output column, uint8 activations with one scale per row, i.e. per macro of each state,
    exact int32 sums in ``MatMulInteger``), so one state's quantization never depends on the
    others in the batch. The convolutions stay fp32 unless ``int8_convs``: onnxruntime's CPU
    ``ConvInteger`` is about 11× slower than its fp32 ``Conv`` for the 32 → 32 3 × 3 layers on
    Ariane's 21 × 24 grid (0.74 vs 0.067 ms; an im2col + ``MatMulInteger`` form is still 2.2×
    slower, 0.15 ms; onnxruntime 1.32, one thread), so int8 convolutions would make the int8
    actor slower than the fp32 one, the opposite of ActorQ's point. With ``int8_convs`` the
    canvas convolutions after the first and the head's 3 × 3 convolution run ``ConvInteger``
    (int8 weights per output channel, uint8 activations with zero point 0 and one scale per
    state: every convolution input is nonnegative, the planes or a ReLU's output): a smaller
    model, slower on CPU (``git show 85997d5:benchmarks/chip_policy_speed.py``). Either way the
    input layers (the
    macro-feature embedding, the first convolution), the conditioning and FiLM layers and the
    output layers (the 1 × 1 convolution and the dense logit map) stay fp32, as in actorq's
    int8 snapshots; so do the macro-graph products ``Â h`` and the wire map (fixed matrices
    times activations).
    """
    return bytes(_onnx_model(model, precision, int8_convs).SerializeToString())


__all__ = [
    "MASKED_LOGIT",
    "ChipEncoder",
    "ChipPolicy",
    "ChipPolicyConfig",
    "ChipValue",
    "Encoded",
    "MacroGraph",
    "MacroSAGE",
    "chip_policy_onnx",
    "macro_graph",
]
