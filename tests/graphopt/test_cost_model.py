"""The importer's cost model checked against torch itself: backward FLOPs (FlopCounterMode),
views, buffers, embedding lookups, the activations autograd saves (saved-tensor hooks),
GPipe micro-batching, the fx tracing error and the A100/H100 cluster presets.

Every model here is plain torch; the one Hugging Face check is skipped without transformers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from actorq.errors import GraphError
from actorq.graphopt import importer
from actorq.graphopt.cluster import get_cluster, preset_names
from actorq.graphopt.importer import _is_view, from_torch
from actorq.graphopt.ir import Graph
from actorq.graphopt.simulator import simulate

Tracer = Literal["fx", "export"]
TRACERS: list[Tracer] = ["fx", "export"]
MATMULS = {"linear", "matmul", "mm", "bmm", "addmm"}


def torch_saved_bytes(model: nn.Module, inputs: list[torch.Tensor]) -> float:
    """Bytes eager autograd keeps for the backward of one training-mode forward: the unique
    storages packed by ``saved_tensors_hooks``, parameters and buffers left out (they are
    resident anyway)."""
    model.train()
    resident = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in resident:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*inputs)
    return float(sum(seen.values()))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).square().mean()


class CNN(nn.Module):
    """Convolutions with BatchNorm: its output is not saved (the ReLU after it saves its own)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.c2, self.b2 = nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.b1(self.c1(x)))
        x = torch.relu(self.b2(self.c2(x)))
        return self.fc(x.mean(dim=(2, 3))).logsumexp(-1).mean()


class Encoder(nn.Module):
    """``nn.TransformerEncoderLayer`` with dropout 0: a dropout mask is a 4-byte tensor in eager
    CPU autograd and a 1-byte one in the fused kernel GPUs (and the IR) use. A p=0 dropout is the
    identity in eager; export turns it into a copy, which the importer sees through."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x).pow(2).mean()


class EmbeddingAttention(nn.Module):
    """Token embedding, one attention block written out (q @ k^T: a matmul of two activations)
    and a language-model head."""

    def __init__(self, vocab: int = 1000, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab)
        self.d, self.heads = d, heads

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        d, h = self.d, self.heads  # no shape unpacking: fx's proxies cannot be iterated
        qkv = self.qkv(self.ln(x))

        def heads(z: torch.Tensor) -> torch.Tensor:
            return z.reshape(z.size(0), z.size(1), h, d // h).transpose(1, 2)

        q, k, v = heads(qkv[..., :d]), heads(qkv[..., d : 2 * d]), heads(qkv[..., 2 * d :])
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // h) ** 0.5, dim=-1)
        x = x + self.out((a @ v).transpose(1, 2).reshape(x.size(0), x.size(1), d))
        return nn.functional.cross_entropy(self.head(x).flatten(0, 1), ids.flatten())


MODELS: dict[str, Callable[[], tuple[nn.Module, list[torch.Tensor]]]] = {
    "mlp": lambda: (MLP(), [torch.randn(32, 64)]),
    "cnn": lambda: (CNN(), [torch.randn(8, 3, 32, 32)]),
    "encoder": lambda: (Encoder(), [torch.randn(4, 16, 64)]),
    "embedding-attention": lambda: (EmbeddingAttention(), [torch.randint(0, 1000, (4, 16))]),
}

# The tolerance on saved-activation bytes. fx (module granularity, replayed under autograd) keeps
# exactly the storages eager autograd keeps on all four models; export is exact on three and
# 9% over on the encoder layer, where its decomposition copies attention's output into a
# contiguous buffer that the fused kernel writes in that layout to begin with. 15% covers such
# layout copies, and is far below the errors it guards against (every forward output kept alive,
# 1.7-2.75x, or a missed T x T attention matrix).
SAVED_TOLERANCE = 0.15


@pytest.mark.parametrize("tracer", TRACERS)
@pytest.mark.parametrize("name", list(MODELS))
def test_saved_activations_match_torch(name: str, tracer: Tracer) -> None:
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    want = torch_saved_bytes(model, inputs)
    g = from_torch(model, inputs, name, tracer=tracer)
    assert g.meta["saved_activation_bytes"] == pytest.approx(want, rel=SAVED_TOLERANCE)


def _backward_edges(g: Graph) -> set[tuple[str, str]]:
    return {
        (g.op_names[s], g.op_names[d])
        for s, d in zip(g.src.tolist(), g.dst.tolist(), strict=True)
        if g.op_names[d].endswith("/grad") and not g.op_names[s].endswith("/grad")
    }


def test_only_saved_outputs_live_until_the_backward() -> None:
    """fc1's output feeds only the ReLU, which saves its own output: autograd frees it after the
    forward, so no backward op reads it and the simulator frees it before the backward."""
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
    g = from_torch(model, [torch.randn(512, 64)], "mlp", tracer="fx")
    saved = _backward_edges(g)
    assert not any(s == "_0" for s, _ in saved), saved
    assert ("_1", "_1/grad") in saved and ("_1", "_2/grad") in saved  # the ReLU output, twice
    assert ("input_1", "_0/grad") in saved  # the weight gradient of the first layer
    r = simulate(g, get_cluster("1xh100"), np.zeros(g.num_ops, dtype=np.int64))
    peak = r.peak_memory[0] - g.param_bytes.sum()
    saved_bytes = g.meta["saved_activation_bytes"]
    assert saved_bytes == torch_saved_bytes(model, [torch.randn(512, 64)])
    # the saved activations plus the two gradients the ReLU's backward reads and writes, but not
    # fc1's output (another 512 x 256 x 4 bytes, which keeping every forward output would add)
    assert peak == saved_bytes + 2 * 512 * 256 * 4


class TwoTowers(nn.Module):
    """Bias-free Linears (export: permute + mm) and q @ k^T, a matmul of two activations."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 64, bias=False)
        self.q = nn.Linear(64, 16, bias=False)
        self.k = nn.Linear(64, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        return torch.matmul(self.q(h), self.k(h).transpose(0, 1)).sum()


@pytest.mark.parametrize("tracer", TRACERS)
def test_backward_flops_sum_over_the_inputs_that_need_a_gradient(tracer: Tracer) -> None:
    x = torch.randn(8, 32)
    g = from_torch(TwoTowers(), [x], "towers", tracer=tracer)
    flops = dict(zip(g.op_names, g.flops.tolist(), strict=True))
    mats = [n for n, t in zip(g.op_names, g.op_types, strict=True) if t in MATMULS]
    assert len(mats) == 4
    first, *hidden, qk = mats  # in trace order
    # the first layer's input is data: only the weight gradient (one matmul)
    assert flops[f"{first}/grad"] == flops[first]
    # hidden bias-free Linears and q @ k^T: both inputs need a gradient, one matmul each
    for n in [*hidden, qk]:
        assert flops[f"{n}/grad"] == 2 * flops[n], n
    # and the matmul FLOPs of the whole step are what torch counts on a real forward + backward
    with FlopCounterMode(display=False) as counter:
        TwoTowers()(x).backward()
    ir = sum(flops[n] + flops[f"{n}/grad"] for n in mats)
    assert ir == counter.get_total_flops()


VIEWS = [
    torch.ops.aten.view.default,
    torch.ops.aten._unsafe_view.default,
    torch.ops.aten.reshape.default,  # composite: aliases when it can (its decomposition decides)
    torch.ops.aten.permute.default,
    torch.ops.aten.transpose.int,
    torch.ops.aten.t.default,
    torch.ops.aten.expand.default,
    torch.ops.aten.squeeze.dim,
    torch.ops.aten.unsqueeze.default,
    torch.ops.aten.slice.Tensor,
    torch.ops.aten.select.int,
    torch.ops.aten.as_strided.default,
    torch.ops.aten.alias.default,
    torch.ops.aten.detach.default,
    torch.ops.aten.split.Tensor,
]


def test_views_are_free_and_their_gradients_allocate_nothing() -> None:
    for op in VIEWS:
        if op is torch.ops.aten.reshape.default:
            continue
        assert _is_view(op), op
    # an in-place op returns an alias too, but it writes it; a copy is not a view
    for op in (torch.ops.aten.relu_.default, torch.ops.aten.clone.default):
        assert not _is_view(op), op

    class Views(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.fc(x).view(4, 2, 16).transpose(0, 1).reshape(8, 16).unsqueeze(0)
            return y.squeeze(0)[:, 1:].sum()

    g = from_torch(Views(), [torch.randn(8, 16)], "views", tracer="export")
    view_types = {"view", "unsafe_view", "permute", "transpose", "unsqueeze", "squeeze", "slice"}
    views = [i for i, t in enumerate(g.op_types) if t in view_types]
    assert {"view", "permute", "slice"} <= {g.op_types[i] for i in views}
    for i in views:
        assert g.flops[i] == g.bytes_read[i] == g.bytes_written[i] == g.out_bytes[i] == 0
        grad = g.op_names.index(f"{g.op_names[i]}/grad")
        if g.op_types[i] != "slice":  # a slice's gradient pads with zeros: a real allocation
            assert g.out_bytes[grad] == g.bytes_written[grad] == g.flops[grad] == 0


class WithBuffers(nn.Module):
    """BatchNorm running statistics, a registered buffer (like ``position_ids``) and a frozen
    layer: none of them gets a gradient or an optimizer update."""

    offset: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("offset", torch.arange(16, dtype=torch.float32))
        self.frozen = nn.Linear(16, 16)
        self.frozen.requires_grad_(False)
        self.fc = nn.Linear(16, 16)
        self.bn = nn.BatchNorm1d(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(self.frozen(x + self.offset))).relu().sum()


@pytest.mark.parametrize("tracer", TRACERS)
def test_buffers_and_frozen_weights_get_no_gradient_and_no_update(tracer: Tracer) -> None:
    m = WithBuffers()
    g = from_torch(m, [torch.randn(8, 16)], "buffers", tracer=tracer)
    updates = sorted(n for n in g.op_names if n.endswith("/update"))
    assert updates == ["bn/update", "fc/update"]
    i = g.op_names.index
    affine = 4 * 2 * 16  # BatchNorm weight + bias
    assert g.param_bytes[i("bn/update")] == 2 * affine  # gradient buffer + momentum
    # buffers and frozen weights are still resident memory, once
    resident = sum(t.numel() * t.element_size() for t in [*m.parameters(), *m.buffers()])
    fwd = [n for n in g.op_names if not n.endswith(("/grad", "/update"))]
    assert sum(g.param_bytes[i(n)] for n in fwd) == resident
    # the frozen layer's input is data, so it needs no backward at all; its output does
    # (fc's input gradient flows through nothing trainable): no grad op for the frozen layer
    assert not any(n.startswith(("frozen", "offset")) and n.endswith("/grad") for n in g.op_names)


@pytest.mark.parametrize("tracer", TRACERS)
def test_embedding_reads_and_writes_only_the_gathered_rows(tracer: Tracer) -> None:
    vocab, dim, b, t = 5000, 32, 4, 8

    class Emb(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.emb(ids).square().sum()

    g = from_torch(Emb(), [torch.randint(0, vocab, (b, t))], "emb", tracer=tracer)
    (e,) = [i for i, ty in enumerate(g.op_types) if ty == "embedding"]
    rows, ids, table = 4.0 * b * t * dim, 8.0 * b * t, 4.0 * vocab * dim
    assert g.bytes_read[e] == ids + rows  # not the table
    assert g.param_bytes[e] == table  # which is resident all the same
    grad = g.op_names.index(f"{g.op_names[e]}/grad")
    assert g.bytes_written[grad] == rows and g.flops[grad] == b * t * dim  # a scatter-add
    # the optimizer update (SGD with momentum) is dense: the whole table
    upd = g.op_names.index("emb/update")
    assert g.param_bytes[upd] == 2 * table and g.bytes_read[upd] == 3 * table


def _pipeline(g: Graph, stage_of: dict[str, int]) -> np.ndarray:
    """Each op on the device of the forward op it is anchored to (grads with their forward)."""
    assert g.anchor is not None

    def forward_name(i: int) -> str:  # "mb2/_1" -> "_1"
        name = g.op_names[i]
        return name.split("/", 1)[1] if name.startswith("mb") else name

    return np.array([stage_of[forward_name(a)] for a in g.anchor], dtype=np.int64)


@pytest.mark.parametrize("tracer", TRACERS)
def test_micro_batches_split_the_step_and_accumulate_gradients(tracer: Tracer) -> None:
    torch.manual_seed(0)
    # big enough that matmuls, not per-op overheads, set the step time
    model = nn.Sequential(*[nn.Linear(2048, 2048, bias=False) for _ in range(4)])
    x = torch.randn(2048, 2048)
    one = from_torch(model, [x], "mlp", tracer=tracer)
    four = from_torch(model, [x], "mlp", tracer=tracer, micro_batches=4)
    assert four.meta["micro_batches"] == 4
    assert {n.split("/")[0] for n in four.op_names if n.startswith("mb")} == {
        "mb0",
        "mb1",
        "mb2",
        "mb3",
    }
    upd1 = np.array([t == "update" for t in one.op_types])
    upd4 = np.array([t == "update" for t in four.op_types])
    assert upd1.sum() == upd4.sum() == 4  # one update per layer, fed by all micro-batches
    # the same work, split four ways; each micro-batch keeps a quarter of the activations
    assert four.flops[~upd4].sum() == pytest.approx(one.flops[~upd1].sum())
    assert four.meta["saved_activation_bytes"] == pytest.approx(one.meta["saved_activation_bytes"])
    # weights are held once, by the first micro-batch
    assert four.param_bytes[~upd4].sum() == one.param_bytes[~upd1].sum()
    # gradient accumulation: micro-batch k's last weight gradient feeds micro-batch k+1's first
    names = four.op_names
    for u in np.flatnonzero(upd4):
        feeders = [names[s] for s in four.src[four.dst == u]]
        assert len(feeders) == 1 and feeders[0].startswith("mb3/")
    # a two-stage pipeline overlaps micro-batches: a shorter step than the unsplit batch's
    fwd = [n for n, t in zip(one.op_names, one.op_types, strict=True) if t != "update"]
    fwd = [n for n in fwd if not n.endswith(("/grad", "/saved"))]
    stage = {n: int(k > len(fwd) // 2) for k, n in enumerate(fwd)}  # the input, then 2 + 2 layers
    cluster = get_cluster("2xgpu-nvlink")
    t1 = simulate(one, cluster, _pipeline(one, stage)).step_time
    t4 = simulate(four, cluster, _pipeline(four, stage)).step_time
    assert t4 < 0.8 * t1


def test_micro_batches_must_split_the_batch_evenly() -> None:
    model = nn.Linear(4, 4)
    with pytest.raises(GraphError, match="3 equal micro-batches"):
        from_torch(model, [torch.randn(8, 4)], "lin", micro_batches=3)
    with pytest.raises(GraphError, match="training"):
        from_torch(model, [torch.randn(8, 4)], "lin", micro_batches=2, training=False)
    with pytest.raises(GraphError, match="positive integer"):
        from_torch(model, [torch.randn(8, 4)], "lin", micro_batches=0)


def test_fx_failure_says_to_use_export() -> None:
    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(GraphError) as e:
        from_torch(Branchy(), [torch.zeros(2)], "branchy")
    msg = str(e.value)
    assert "cannot trace" in msg and 'tracer="export"' in msg and "\n" not in msg


def test_hugging_face_model_imports_with_export_only() -> None:
    tf = pytest.importorskip("transformers")

    class Loss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            cfg = tf.GPT2Config(
                n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16, use_cache=False
            )
            cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.0
            self.gpt = tf.GPT2LMHeadModel(cfg)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.gpt(input_ids=ids, labels=ids, use_cache=False).loss

    ids = torch.randint(0, 100, (2, 16))
    with pytest.raises(GraphError, match='tracer="export"'):
        from_torch(Loss(), [ids], "gpt2")
    g = from_torch(Loss(), [ids], "gpt2", tracer="export")
    assert g.meta["training"] and any(n.endswith("/update") for n in g.op_names)
    assert not any("position_ids" in n or n == "bias/update" for n in g.op_names)


def test_a100_and_h100_presets() -> None:
    names = set(preset_names())
    assert {"1xgpu", "1xa100", "8xa100-nvlink", "1xh100", "8xh100-nvlink", "4xh100-pcie"} <= names
    h = get_cluster("8xh100-nvlink")
    d = h.devices[0]
    assert (d.flop_s, d.mem_bw, d.memory) == (350e12, 2.7e12, 80 * 2**30)
    assert h.num_devices == 8 and h.bandwidth[0, 1] == 360e9
    a = get_cluster("4xa100-pcie")
    assert a.devices[0].flop_s == 110e12 and a.bandwidth[2, 3] == 25e9
    assert get_cluster("2xgpu-pcie").devices[0].flop_s == 10e12  # V100 presets unchanged


@pytest.mark.parametrize("tracer", TRACERS)
def test_an_op_autograd_cannot_replay_gets_the_conservative_mirror(
    tracer: Tracer, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importer._autograd

    def no_meta_backward(*args: Any) -> Any:
        source, params, measure = args[3:]
        # ops on hidden activations without weights (the ReLU, the sum) fail to replay
        if measure and source and not params and any(rg for _, rg in source.values()):
            raise RuntimeError("no meta kernel")
        return real(*args)

    monkeypatch.setattr(importer, "_autograd", no_meta_backward)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    g = from_torch(model, [torch.randn(4, 8)], "mlp", tracer=tracer)
    relu = g.op_types.index("relu")
    name = g.op_names[relu]
    grad = g.op_names.index(f"{name}/grad")
    assert g.flops[grad] == g.flops[relu]  # 1x its forward, its input and output saved
    saved = {s for s, d in zip(g.src.tolist(), g.dst.tolist(), strict=True) if d == grad}
    assert relu in saved
    # and the gradient still reaches the first layer
    assert sum(n.endswith("/update") for n in g.op_names) == 2
