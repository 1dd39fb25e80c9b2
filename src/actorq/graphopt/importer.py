"""Import a PyTorch model into the graph IR, with per-op FLOPs and bytes.

:func:`from_torch` traces the module on *meta* tensors (shapes only: no memory, no arithmetic),
with one of two tracers; either way Python loops unroll, which is how recurrent models become the
large graphs GO works on:

* ``tracer="fx"`` (default): ``torch.fx.symbolic_trace``, module granularity (a ``Linear`` is one
  op); the traced graph runs once under a dispatch mode that sees the aten ops of each node. Fast:
  the suite's 107k-op graph imports in ~20 s.
* ``tracer="export"``: ``torch.export`` then core-ATen decompositions, aten granularity (a
  ``Linear`` is a weight transpose and an ``addmm``, as fine as a TensorFlow graph), costed from
  the fake tensors export records on every node. Slower (dynamo), but it follows code symbolic
  tracing cannot, such as Python branches on shapes.

Per op:

* **FLOPs**: aten ops with a formula in ``torch.utils.flop_counter`` (matmuls, convolutions,
  attention) use it; every other op that produces a new tensor counts one FLOP per element of its
  largest operand (elementwise ops, norms, reductions); views count zero.
* **bytes read** = the tensors it takes (activations and parameters); **bytes written** and
  **output bytes** = the tensors it creates (0 for a view, which aliases its input).
* **parameter bytes** = the parameters it uses, counted once per parameter tensor (on the first op
  that uses it — an LSTM cell reused at every step owns its weights once). Every later op using
  the same weights gets an edge from that first op carrying the weight bytes, as a TensorFlow
  variable read: free on the same device, a transfer on another.

``getitem`` on a tuple output is folded into the edge (the edge carries the selected tensor), and
``placeholder`` inputs become ``input`` ops; parameters are not ops.

Training steps (``training=True``) get a mirrored backward pass, the way TensorFlow's gradient
graph looks to GO's placer:

* for every forward op ``v`` that depends on a parameter, an op ``v/grad`` with
  ``2 x`` the forward FLOPs if ``v`` owns parameters (input and weight gradients), ``1 x``
  otherwise, reading ``v``'s inputs (saved activations), its own output and its output gradient;
* edges ``grad(w) <- grad(v)`` for every forward edge ``w -> v`` (the gradient flows back, same
  tensor size), ``grad(v) <- u`` for every forward input ``u`` of ``v`` (saved activations) and
  ``grad(v) <- v`` (the output, which e.g. ``tanh``'s backward needs, and which seeds the loss);
* for every parameter-owning module (or attribute), one ``<name>/update`` op: SGD with momentum,
  ~3 FLOPs per parameter, holding the gradient buffer and the momentum (2 x parameter bytes) on
  its device. A module used many times (an RNN cell at every step) accumulates its weight
  gradient along its uses' grad ops, last use first, and only the sum reaches the update: edges
  ``grad(use_k) -> grad(use_k-1) -> ... -> grad(use_1) -> update`` carrying the weight bytes.

The IR then holds the whole memory of a training step: weights on the forward ops, gradient
buffers and optimizer state on the update ops, activations kept alive until their backward op.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import operator
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from actorq.errors import GraphError
from actorq.graphopt.ir import Graph


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _nbytes(x: Any) -> float:
    return float(sum(t.numel() * t.element_size() for t in _tensors(x)))


def _is_view(func: Any) -> bool:
    """An aten op whose outputs alias an input (``view``, ``transpose``, ``chunk``...)."""
    return any(r.alias_info is not None for r in func._schema.returns)


def _aten_flops(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """FLOPs of one aten op from shapes: ``torch.utils.flop_counter``'s formula when it has one
    (matmuls, convolutions, attention), else one per element of the largest operand; 0 for a
    view."""
    packet = func._overloadpacket
    if packet in flop_registry:
        return float(flop_registry[packet](*args, **kwargs, out_val=out))
    if _is_view(func):
        return 0.0
    return float(max((t.numel() for t in _tensors((args, kwargs, out))), default=0))


class _FlopCounter(TorchDispatchMode):
    """Counts the FLOPs of the aten ops run while active (:func:`_aten_flops`)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0.0
        self.views_only = True

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.flops += _aten_flops(func, args, kwargs, out)
        self.views_only = self.views_only and _is_view(func)
        return out


@dataclasses.dataclass
class _Traced:
    """What a tracer saw, per fx node: the common input of :func:`_assemble`."""

    graph: torch.fx.Graph
    values: dict[torch.fx.Node, Any]
    flops: dict[torch.fx.Node, float]
    views: dict[torch.fx.Node, bool]
    op_type: dict[torch.fx.Node, str]
    params: dict[torch.fx.Node, dict[str, float]]
    """Parameter tensors (by name, with bytes) each op node uses."""
    skip: set[torch.fx.Node]
    """Nodes that are not ops: parameters, constants, the output."""


def _tensor_bytes(t: torch.Tensor) -> float:
    return float(t.numel() * t.element_size())


def _meta_copy(module: torch.nn.Module, name: str) -> torch.nn.Module:
    """A copy of ``module`` whose parameters and buffers are shape-only meta tensors.

    Tracing needs the module on ``meta``, but ``module.to("meta")`` (and a traced GraphModule,
    which shares the caller's submodules) would replace the caller's weights in place, and a
    training-mode forward would update its BatchNorm statistics. Seeding ``deepcopy``'s memo with
    the meta tensors copies the module's structure without ever copying (or allocating) a weight,
    so a model larger than this machine's memory still imports, and the caller's module is left
    exactly as it was."""
    memo: dict[int, Any] = {}
    try:
        for t in itertools.chain(module.parameters(), module.buffers()):
            if id(t) not in memo:  # a tied weight stays tied in the copy
                m = t.detach().to("meta")
                keep = isinstance(t, torch.nn.Parameter)
                memo[id(t)] = torch.nn.Parameter(m, t.requires_grad) if keep else m
        return copy.deepcopy(module, memo)
    except Exception as e:  # deepcopy fails in as many ways as a module's attributes can
        raise GraphError(f"cannot copy {name!r} to trace it: {_first_line(e)}") from None


def _first_line(e: BaseException) -> str:
    """``Type: first line of the message``: torch's errors often run to many lines of hints."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def _trace_fx(module: torch.nn.Module, inputs: Sequence[torch.Tensor], name: str) -> _Traced:
    """``torch.fx.symbolic_trace`` at module granularity (a ``Linear`` is one op), costed by
    running each node on meta tensors under :class:`_FlopCounter`."""
    try:
        gm = torch.fx.symbolic_trace(_meta_copy(module, name))
    except GraphError:
        raise
    except Exception as e:  # fx raises many types for untraceable code
        raise GraphError(f"cannot trace {name!r} with torch.fx: {_first_line(e)}") from None
    tr = _Traced(gm.graph, {}, {}, {}, {}, {}, set())
    counter = _FlopCounter()

    class _Run(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            counter.flops, counter.views_only = 0.0, True
            with counter:
                out = super().run_node(n)
            tr.values[n], tr.flops[n], tr.views[n] = out, counter.flops, counter.views_only
            return out

    with torch.no_grad():
        _Run(gm).run(*[x.to("meta") for x in inputs])
    for node in gm.graph.nodes:
        if node.op in ("output", "get_attr"):
            tr.skip.add(node)
            continue
        keys: dict[str, float] = {}
        if node.op == "call_module":
            mod = gm.get_submodule(str(node.target))
            tr.op_type[node] = type(mod).__name__.lower()
            for pn, p in mod.named_parameters(recurse=True):
                keys[f"{node.target}.{pn}"] = _tensor_bytes(p)
        elif node.op == "call_function":
            tr.op_type[node] = str(getattr(node.target, "__name__", node.target)).lstrip("_")
        else:
            tr.op_type[node] = str(node.target)
        for a in node.all_input_nodes:
            if a.op == "get_attr":
                t = operator.attrgetter(str(a.target))(gm)
                if isinstance(t, torch.Tensor):
                    keys[str(a.target)] = _tensor_bytes(t)
        tr.params[node] = keys
    return tr


def _trace_export(module: torch.nn.Module, inputs: Sequence[torch.Tensor], name: str) -> _Traced:
    """``torch.export`` at aten granularity (a ``Linear`` is a transpose and an ``addmm``, like a
    TensorFlow graph), costed from the fake tensors export records on every node. Slower than
    fx (dynamo), but it handles code that symbolic tracing cannot."""
    try:
        with warnings.catch_warnings():  # torch's own pytree deprecation noise, not the user's
            warnings.simplefilter("ignore", FutureWarning)
            meta_module = _meta_copy(module, name)
            ep = torch.export.export(meta_module, tuple(x.to("meta") for x in inputs))
            ep = ep.run_decompositions()  # core ATen: linear -> addmm, so FLOP formulas apply
    except GraphError:
        raise
    except Exception as e:  # export raises many types for unsupported code
        raise GraphError(f"cannot export {name!r}: {_first_line(e)}") from None
    g = ep.graph_module.graph
    tr = _Traced(g, {}, {}, {}, {}, {}, set())
    from torch.export.graph_signature import InputKind

    weights: dict[str, str] = {}  # placeholder name -> parameter (or buffer) name
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT and spec.target is not None:
            weights[spec.arg.name] = spec.target

    def val(x: Any) -> Any:
        return x.meta.get("val") if isinstance(x, torch.fx.Node) else x

    for node in g.nodes:
        v = node.meta.get("val")
        if node.op == "output" or (node.op == "placeholder" and node.name in weights):
            tr.skip.add(node)
            tr.values[node] = v
            continue
        if node.op == "get_attr":
            tr.skip.add(node)
            continue
        tr.values[node] = v
        keys = {
            weights[a.name]: _nbytes(a.meta.get("val"))
            for a in node.all_input_nodes
            if a.op == "placeholder" and a.name in weights
        }
        tr.params[node] = keys
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            args = torch.fx.node.map_aggregate(node.args, val)
            kwargs = torch.fx.node.map_aggregate(node.kwargs, val)
            tr.flops[node] = _aten_flops(node.target, args, kwargs, v)
            tr.views[node] = _is_view(node.target)
            tr.op_type[node] = node.target._overloadpacket.__name__.lstrip("_")
        else:
            tr.flops[node], tr.views[node] = 0.0, node.op != "placeholder"
            tr.op_type[node] = str(getattr(node.target, "__name__", node.target))
    return tr


def from_torch(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    name: str,
    *,
    training: bool = True,
    meta: dict[str, Any] | None = None,
    tracer: Literal["fx", "export"] = "fx",
) -> Graph:
    """Trace ``module`` on ``example_inputs`` into a :class:`Graph` (see the module docstring).

    ``tracer="fx"`` (``torch.fx.symbolic_trace``, module granularity, fast) or ``"export"``
    (``torch.export``, aten granularity, handles more code). The shape pass runs on a ``meta``
    copy of the module and inputs, so a model far larger than this machine's memory imports fine
    and ``module`` itself (device, weights, buffers, train/eval mode) is left untouched.
    """
    if tracer == "fx":
        tr = _trace_fx(module, example_inputs, name)
    elif tracer == "export":
        tr = _trace_export(module, example_inputs, name)
    else:
        raise GraphError(f"unknown tracer {tracer!r}; use 'fx' or 'export'")
    return _assemble(tr, name, training, {"tracer": tracer, **(meta or {})})


def _assemble(tr: _Traced, name: str, training: bool, meta: dict[str, Any]) -> Graph:
    """Ops, edges and costs from a trace; then the backward pass for a training step."""
    index: dict[torch.fx.Node, int] = {}
    names: list[str] = []
    types: list[str] = []
    cols: dict[str, list[float]] = {
        k: [] for k in ("flops", "bytes_read", "bytes_written", "out_bytes", "param_bytes")
    }
    keys_of: list[list[str]] = []
    src: list[int] = []
    dst: list[int] = []
    eb: list[float] = []
    key_bytes: dict[str, float] = {}
    holder: dict[str, int] = {}  # parameter -> the op that owns (keeps) it
    weight_reads: set[int] = set()  # edges that carry weights, not activations

    def producer(a: torch.fx.Node) -> tuple[torch.fx.Node, float] | None:
        """The op an argument comes from, folding ``getitem`` chains, and the tensor bytes."""
        nbytes = _nbytes(tr.values.get(a))
        while (
            a.op == "call_function"
            and a.target is operator.getitem
            and isinstance(a.args[0], torch.fx.Node)
        ):
            a = a.args[0]
        if a in tr.skip or a not in index:
            return None
        return a, nbytes

    for node in tr.graph.nodes:
        if node in tr.skip or (node.op == "call_function" and node.target is operator.getitem):
            continue
        i = len(names)
        index[node] = i
        names.append(node.name)
        types.append("input" if node.op == "placeholder" else tr.op_type[node])
        pkeys = tr.params[node]
        own = {k: b for k, b in pkeys.items() if k not in key_bytes}
        key_bytes.update(own)
        holder.update(dict.fromkeys(own, i))
        keys_of.append(list(pkeys))
        out_b = _nbytes(tr.values[node])
        read = sum(pkeys.values())
        # a reused weight is read from the op holding it: on another device it must be sent
        shared: dict[int, float] = {}
        for k in pkeys.keys() - own.keys():
            shared[holder[k]] = shared.get(holder[k], 0.0) + pkeys[k]
        for h, b in shared.items():
            src.append(h)
            dst.append(i)
            eb.append(b)
            weight_reads.add(len(src) - 1)
        for a in node.all_input_nodes:
            pr = producer(a)
            if pr is not None:
                src.append(index[pr[0]])
                dst.append(i)
                eb.append(pr[1])
                read += pr[1]
        is_input = node.op == "placeholder"
        created = 0.0 if tr.views[node] and not is_input else out_b
        cols["flops"].append(0.0 if is_input else tr.flops[node])
        cols["bytes_read"].append(read)
        cols["bytes_written"].append(0.0 if is_input else created)
        cols["out_bytes"].append(created)
        cols["param_bytes"].append(sum(own.values()))
    nf = len(names)
    if nf == 0:
        raise GraphError(f"model {name!r} traced to an empty graph")

    anchor = list(range(nf))
    if training:
        _add_backward(names, types, cols, keys_of, key_bytes, src, dst, eb, anchor, weight_reads)
    arr = {k: np.array(v, dtype=np.float64) for k, v in cols.items()}
    return Graph(
        name=name,
        op_names=names,
        op_types=types,
        **arr,
        src=np.array(src, dtype=np.int64),
        dst=np.array(dst, dtype=np.int64),
        edge_bytes=np.array(eb, dtype=np.float64),
        meta={"training": training, "forward_ops": nf, **meta},
        anchor=np.array(anchor, dtype=np.int64),
    )


def _add_backward(
    names: list[str],
    types: list[str],
    cols: dict[str, list[float]],
    keys_of: list[list[str]],
    key_bytes: dict[str, float],
    src: list[int],
    dst: list[int],
    eb: list[float],
    anchor: list[int],
    weight_reads: set[int],
) -> None:
    """Append the mirrored backward pass and optimizer updates (module docstring); each new op
    is anchored to (colocated by default with) the forward op it belongs to. Weight reads are
    saved inputs of the backward, but their gradient goes to the update op, not back along
    the read."""
    nf = len(anchor)
    fwd_edges = [e for k, e in enumerate(zip(src, dst, eb, strict=True)) if k not in weight_reads]
    preds: list[list[tuple[int, float]]] = [[] for _ in range(nf)]
    saved: list[list[tuple[int, float]]] = [[] for _ in range(nf)]
    for k, (s, d, b) in enumerate(zip(src, dst, eb, strict=True)):
        saved[d].append((s, b))
        if k not in weight_reads:
            preds[d].append((s, b))
    # an op needs a gradient if it uses parameters or any of its inputs does (forward is topo)
    needs = [False] * nf
    for v in range(nf):
        needs[v] = bool(keys_of[v]) or any(needs[s] for s, _ in preds[v])
    grad = [-1] * nf
    key_seen: set[str] = set()
    for v in range(nf):
        if not needs[v]:
            continue
        g = len(names)
        grad[v] = g
        anchor.append(v)
        names.append(f"{names[v]}/grad")
        types.append(f"{types[v]}_grad")
        out_grad = cols["out_bytes"][v] or cols["bytes_written"][v]
        in_grads = sum(b for s, b in preds[v] if needs[s])
        cols["flops"].append(cols["flops"][v] * (2.0 if keys_of[v] else 1.0))
        cols["bytes_read"].append(cols["bytes_read"][v] + 2 * out_grad)
        cols["bytes_written"].append(in_grads + (cols["bytes_read"][v] if keys_of[v] else 0.0))
        cols["out_bytes"].append(in_grads)
        cols["param_bytes"].append(0.0)
    # edges: output -> own grad; saved inputs -> grad; grad flows back along every edge
    for v in range(nf):
        if grad[v] < 0:
            continue
        src.append(v)
        dst.append(grad[v])
        eb.append(cols["out_bytes"][v])
        for s, b in saved[v]:
            src.append(s)
            dst.append(grad[v])
            eb.append(b)
    for s, d, b in fwd_edges:
        if grad[s] >= 0 and grad[d] >= 0:
            src.append(grad[d])
            dst.append(grad[s])
            eb.append(b)
    # an op's gradient also waits for every consumer's gradient: already implied by the edges
    # above, since each consumer d of s adds grad(d) -> grad(s).
    # one update per parameter owner (a module, or a bare parameter attribute)
    owner_bytes: dict[str, float] = {}
    owner_users: dict[str, set[int]] = {}
    for v in range(nf):
        for key in keys_of[v]:
            owner = key.rsplit(".", 1)[0]
            if owner not in owner_users:
                owner_users[owner] = set()
            if key not in key_seen:
                key_seen.add(key)
                owner_bytes[owner] = owner_bytes.get(owner, 0.0) + key_bytes[key]
            owner_users[owner].add(v)
    for owner, vs in owner_users.items():
        pb = owner_bytes.get(owner, 0.0)
        if pb <= 0:
            continue
        u = len(names)
        anchor.append(min(vs))
        names.append(f"{owner}/update")
        types.append("update")
        cols["flops"].append(3.0 * pb / 4.0)  # ~3 FLOPs per fp32 parameter
        cols["bytes_read"].append(3.0 * pb)  # weight, gradient, momentum
        cols["bytes_written"].append(2.0 * pb)  # weight, momentum
        cols["out_bytes"].append(0.0)  # in place
        cols["param_bytes"].append(2.0 * pb)  # gradient buffer + momentum
        # the weight gradient accumulates along the uses, last use first (the order the backward
        # reaches them), and the sum goes to the update: one weight-sized tensor in flight, not
        # one per use. Edges run from later to earlier forward ops, like every backward edge,
        # so no cycle can form.
        chain = [grad[v] for v in sorted(vs, reverse=True)] + [u]
        for a, b in itertools.pairwise(chain):
            src.append(a)
            dst.append(b)
            eb.append(pb)
