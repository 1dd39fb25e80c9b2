"""torch.fx importer (FLOPs and bytes from shapes, backward mirror) and the model suite."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest
import torch
from torch import nn

from actorq.errors import GraphError
from actorq.graphopt import models
from actorq.graphopt.importer import from_torch
from actorq.graphopt.suite import PREFIX, SUITE, family_of, get_graph, is_graph_name, variant

B, IN, H, OUT = 8, 16, 32, 4


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(IN, H), nn.Linear(H, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))).sum()


def test_forward_costs_from_shapes() -> None:
    g = from_torch(MLP(), [torch.zeros(B, IN)], "mlp", training=False)
    assert g.op_names == ["x", "fc1", "relu", "fc2", "sum_1"]
    assert g.op_types == ["input", "linear", "relu", "linear", "sum"]
    f = dict(zip(g.op_names, g.flops.tolist(), strict=True))
    assert f["fc1"] == 2 * B * IN * H and f["fc2"] == 2 * B * H * OUT  # matmul formula
    assert f["relu"] == B * H and f["x"] == 0  # elementwise: one per element
    fc1 = g.op_names.index("fc1")
    w1 = 4 * (IN * H + H)
    assert g.param_bytes[fc1] == w1
    assert g.bytes_read[fc1] == 4 * B * IN + w1 and g.out_bytes[fc1] == 4 * B * H
    pairs = {
        (g.op_names[s], g.op_names[d]): b
        for s, d, b in zip(g.src, g.dst, g.edge_bytes, strict=True)
    }
    assert pairs[("fc1", "relu")] == 4 * B * H and pairs[("fc2", "sum_1")] == 4 * B * OUT
    assert not g.meta["training"]


def test_training_step_mirrors_the_backward_pass() -> None:
    fwd = from_torch(MLP(), [torch.zeros(B, IN)], "mlp", training=False)
    g = from_torch(MLP(), [torch.zeros(B, IN)], "mlp", training=True)
    names = g.op_names
    # every op that depends on a parameter gets a grad op; the input does not
    assert {"fc1/grad", "relu/grad", "fc2/grad", "sum_1/grad"} <= set(names)
    assert "x/grad" not in names
    assert {"fc1/update", "fc2/update"} <= set(names)
    i = names.index
    # backward FLOPs are the sum over the inputs that need a gradient: fc1's input is data, so
    # only its weight gradient (one matmul) and bias gradient (a sum); fc2 needs both matmuls
    f = dict(zip(fwd.op_names, fwd.flops.tolist(), strict=True))
    assert g.flops[i("fc1/grad")] == f["fc1"] + B * H
    assert g.flops[i("fc2/grad")] == 2 * f["fc2"] + B * OUT
    assert g.flops[i("relu/grad")] == fwd.flops[fwd.op_names.index("relu")]
    edges = {(names[s], names[d]) for s, d in zip(g.src, g.dst, strict=True)}
    assert ("relu/grad", "fc1/grad") in edges  # gradient flows back
    assert ("x", "fc1/grad") in edges  # saved activation
    assert ("sum_1", "sum_1/grad") in edges  # the loss seeds the backward
    assert ("fc1/grad", "fc1/update") in edges
    # gradient buffer + momentum live on the update op, weights on the forward op
    w1 = 4 * (IN * H + H)
    assert g.param_bytes[i("fc1/update")] == 2 * w1 and g.param_bytes[i("fc1")] == w1
    assert g.anchor is not None
    assert g.anchor[i("fc1/grad")] == i("fc1") and g.anchor[i("fc1/update")] == i("fc1")
    # the backward pass comes after the forward in every topological order
    assert g.topo_rank[i("sum_1")] < g.topo_rank[i("fc1/grad")]


def test_shared_weights_are_counted_once() -> None:
    m = models.RNNLM(layers=1, hidden=8, vocab=50, steps=5)
    g = from_torch(m, [torch.zeros(2, 5, dtype=torch.long)], "rnn", training=True)
    params = sum(p.numel() * 4 for p in m.parameters())
    fwd = np.array([not (n.endswith("/grad") or n.endswith("/update")) for n in g.op_names])
    assert g.param_bytes[fwd].sum() == params
    updates = [n for n in g.op_names if n.endswith("/update")]
    assert sorted(updates) == ["cells.0.wh/update", "cells.0.wx/update", "emb/update", "out/update"]
    # the cell's linear runs once per step: its weight gradient accumulates from the last
    # step's grad op back to the first one's, which alone feeds the update
    wx = g.op_names.index("cells.0.wx/update")
    firsts = [n for n in g.op_names if n.startswith("cells_0_wx") and n.endswith("/grad")]
    assert len(firsts) == 5
    assert [g.op_names[s] for s in g.src[g.dst == wx]] == ["cells_0_wx/grad"]
    chain = {(g.op_names[s], g.op_names[d]) for s, d in zip(g.src, g.dst, strict=True)}
    assert ("cells_0_wx_4/grad", "cells_0_wx_3/grad") in chain
    assert ("cells_0_wx_1/grad", "cells_0_wx/grad") in chain
    first = g.op_names.index("cells_0_wx")
    reads = g.edge_bytes[(g.src == first) & (g.dst < int(fwd.sum()))]
    wbytes = 4 * (8 * 32 + 32)
    assert sorted(reads.tolist())[-4:] == [wbytes] * 4


def test_untraceable_model_is_a_one_line_error() -> None:
    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(GraphError) as e:
        from_torch(Branchy(), [torch.zeros(2)], "branchy")
    assert "cannot trace" in str(e.value) and "\n" not in str(e.value)


class ShapeBranch(nn.Module):
    """Python control flow on a shape: fx's symbolic tracing cannot follow it, export can."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(IN, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return (y * 2 if x.shape[0] > 1 else y).sum()


def test_export_tracer_matches_fx_at_aten_granularity() -> None:
    fx = from_torch(MLP(), [torch.zeros(B, IN)], "mlp", training=False)
    ex = from_torch(MLP(), [torch.zeros(B, IN)], "mlp", training=False, tracer="export")
    assert ex.meta["tracer"] == "export" and "addmm" in ex.op_types and "linear" not in ex.op_types
    assert ex.flops.sum() == fx.flops.sum()  # the same matmuls, counted from aten ops
    assert ex.param_bytes.sum() == fx.param_bytes.sum() == 4 * (IN * H + H + H * OUT + OUT)
    assert ex.num_ops > fx.num_ops  # weight transposes are their own (view) ops
    with pytest.raises(GraphError, match="cannot trace"):
        from_torch(ShapeBranch(), [torch.zeros(B, IN)], "branch")
    g = from_torch(ShapeBranch(), [torch.zeros(B, IN)], "branch", tracer="export")
    assert "mul" in g.op_types and g.meta["training"]
    with pytest.raises(GraphError, match="unknown tracer"):
        from_torch(MLP(), [torch.zeros(B, IN)], "mlp", tracer="jit")  # type: ignore[arg-type]


def test_suite_spec() -> None:
    fams = {e.family for e in SUITE.values()}
    assert fams == {"inception", "resnet", "gnmt", "transformer-xl", "wavenet", "rnnlm"}
    assert len(SUITE) >= 20
    assert is_graph_name("rnnlm-s") and is_graph_name("synthetic-10-s3")
    assert not is_graph_name("rnnlm-q") and not is_graph_name("/nope.json")
    with pytest.raises(GraphError, match="did you mean rnnlm-s"):
        get_graph("rnnlm-q")


def test_family_variants_are_seeded_draws_around_the_smallest_graph() -> None:
    for fam, prefix in PREFIX.items():
        notes = {variant(fam, s).note for s in range(8)}
        assert len(notes) >= 4, f"{fam}: 8 seeds drew only {notes}"  # depth/width/batch vary
        assert variant(fam, 5) == variant(fam, 5) and variant(fam, 5).family == fam
        assert family_of(f"{prefix}-v5") == fam and is_graph_name(f"{prefix}-v5")
    # a variant is the family's model: built, it has the family's tag and about its size
    for name, smallest in (("wavenet-v3", "wavenet-s"), ("txl-v4", "txl-s")):
        g, s = get_graph(name), get_graph(smallest)
        assert g.meta["family"] == family_of(smallest) and g.meta["training"]
        assert 0.2 * s.num_ops <= g.num_ops <= 3 * s.num_ops
        assert get_graph(name).op_names == g.op_names  # the same draw again (from the cache)
    assert family_of("rnnlm-s") == "rnnlm" and family_of("synthetic-9-s1") is None
    assert not is_graph_name("txl-v99999999") and not is_graph_name("gpt-v1")
    with pytest.raises(GraphError, match="variant seed 1000001"):
        get_graph("txl-v1000001")
    with pytest.raises(GraphError, match="unknown family"):
        variant("gpt", 1)


def test_small_suite_graph_builds_and_caches(tmp_path_factory: pytest.TempPathFactory) -> None:
    g = get_graph("gnmt-s")
    assert 1000 <= g.num_ops <= 2000 and g.meta["family"] == "gnmt" and g.meta["training"]
    again = get_graph("gnmt-s")  # from the cache this time
    np.testing.assert_array_equal(g.flops, again.flops)
    assert g.op_names == again.op_names


@pytest.mark.slow
def test_whole_suite_sizes() -> None:
    sizes = {name: get_graph(name).num_ops for name in SUITE}
    assert min(sizes.values()) >= 900 and max(sizes.values()) >= 80_000
    assert sum(v >= 80_000 for v in sizes.values()) >= 2


class Tied(nn.Module):
    """Weights, a BatchNorm (buffers a training-mode forward updates) and a tied weight."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.bn = nn.Linear(IN, H), nn.BatchNorm1d(H)
        self.fc2 = nn.Linear(H, H)
        self.fc3 = nn.Linear(H, H)
        self.fc3.weight = self.fc2.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(self.bn(self.fc1(x))))).sum()


@pytest.mark.parametrize("tracer", ["fx", "export"])
@pytest.mark.parametrize("train", [True, False])
def test_from_torch_leaves_the_module_untouched(
    tracer: Literal["fx", "export"], train: bool
) -> None:
    torch.manual_seed(0)
    m = Tied().train(train)
    x = torch.randn(B, IN)
    params = dict(m.named_parameters())
    before = {k: v.clone() for k, v in m.state_dict().items()}
    grads = {k: p.requires_grad for k, p in params.items()}
    g = from_torch(m, [x], "tied", tracer=tracer)
    assert g.num_ops > 0
    after = m.state_dict()
    assert after.keys() == before.keys()
    for k, v in after.items():
        assert v.device.type == "cpu" and torch.equal(v, before[k]), k
    # the same Parameter objects, not replacements, and the tie kept
    assert all(p is params[k] for k, p in m.named_parameters())
    assert m.fc3.weight is m.fc2.weight
    assert {k: p.requires_grad for k, p in m.named_parameters()} == grads
    assert all(mod.training == train for mod in m.modules())
    assert x.device.type == "cpu"
    # and the module still works: a real forward and backward with finite results
    m.train()
    loss = m(x)
    loss.backward()
    assert torch.isfinite(loss) and all(
        p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters()
    )


def test_from_torch_on_a_meta_module_stays_on_meta() -> None:
    with torch.device("meta"):
        m = MLP()
    g = from_torch(m, [torch.zeros(B, IN, device="meta")], "mlp", training=False)
    cpu = from_torch(MLP(), [torch.zeros(B, IN)], "mlp", training=False)
    np.testing.assert_array_equal(g.flops, cpu.flops)
    np.testing.assert_array_equal(g.param_bytes, cpu.param_bytes)
    assert all(p.device.type == "meta" for p in m.parameters())
