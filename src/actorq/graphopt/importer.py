"""Import a PyTorch model into the graph IR, with per-op FLOPs and bytes.

:func:`from_torch` traces the module on *meta* tensors (shapes only: no memory, no arithmetic),
with one of two tracers; either way Python loops unroll, which is how recurrent models become the
large graphs GO works on:

* ``tracer="fx"`` (default): ``torch.fx.symbolic_trace``, module granularity (a ``Linear`` is one
  op); the traced graph runs once under a dispatch mode that sees the aten ops of each node.
  Symbolic tracing fails on most real-world model code (every Hugging Face model, for one); the
  error then says to use ``tracer="export"``.
* ``tracer="export"``: ``torch.export`` then core-ATen decompositions, aten granularity (a
  ``Linear`` is a weight transpose and an ``addmm``, as fine as a TensorFlow graph), costed from
  the fake tensors export records on every node. Slower (dynamo), but it follows code symbolic
  tracing cannot, such as Python branches on shapes.

Per op:

* **FLOPs**: aten ops with a formula in ``torch.utils.flop_counter`` (matmuls, convolutions,
  attention) use it; every other op that produces a new tensor counts one FLOP per element of its
  largest operand (elementwise ops, norms, reductions); views count zero. Attention
  (``F.scaled_dot_product_attention``) is one fused kernel, as FlashAttention runs it (Dao et al.,
  NeurIPS 2022), not the matmuls and softmax it decomposes to on meta tensors.
* **bytes read** = the tensors it takes (activations and parameters); **bytes written** and
  **output bytes** = the tensors it creates. A view (``view``, ``_unsafe_view``, ``permute``,
  ``transpose``, ``expand``, ``slice``, ``select``, ``detach``...: every aten op whose result
  aliases an input without writing it) reads, writes and allocates nothing; so does the ``clone``
  export writes for an op that returns its input (a p=0 dropout). An embedding lookup reads the
  rows it gathers (indices x dim), not the whole table.
* **parameter bytes** = the parameters and buffers it uses (they stay resident), counted once per
  tensor (on the first op that uses it — an LSTM cell reused at every step owns its weights once).
  Every later op using the same weights gets an edge from that first op carrying the weight bytes,
  as a TensorFlow variable read: free on the same device, a transfer on another.

``getitem`` on a tuple output is folded into the edge (the edge carries the selected tensor), and
``placeholder`` inputs become ``input`` ops; parameters are not ops.

Training steps (``training=True``) get the backward pass autograd would run, the way TensorFlow's
gradient graph looks to GO's placer. Each op is replayed once more on meta tensors under autograd
(its inputs fresh leaves that require grad where autograd would propagate it), which tells,
exactly as eager autograd would do it:

* which ops get a gradient op ``v/grad``: those whose output requires grad and reaches the
  model's output through differentiable ops (not buffers, not integer or boolean results);
* its FLOPs: the aten ops of ``torch.autograd.grad`` on the op, costed as above, i.e. the sum
  over the inputs that require grad of that input's gradient (a matmul of two activations or a
  hidden ``Linear`` costs ``2 x`` its forward, a first layer's ``Linear`` only its weight
  gradient);
* which tensors the backward saves (``torch.autograd.graph.saved_tensors_hooks``): the op's
  inputs, its output, or intermediates it creates. Only saved tensors get an edge to the gradient
  op, so in the simulator a forward output lives until the end of its last backward use if a
  backward needs it and is freed after its last forward use otherwise — autograd's liveness. A
  saved view keeps its base alive (the edge starts at the op that owns the storage). When the
  backward keeps only part of an op's outputs (a norm's statistics, a dropout mask) or
  intermediates it created (a module-granularity op's internals), those bytes become a separate
  ``<op>/saved`` buffer (a zero-cost op right after it), so the rest is freed as autograd frees
  it. An op autograd cannot replay on meta tensors falls back to a conservative mirror (every
  input and the output saved, ``1 x`` its forward FLOPs).

The gradient op reads the saved tensors and its output gradient and writes (allocates) one
gradient per differentiable input, plus the weight gradients (written into the update's gradient
buffer, not allocated); the gradient of a view is a view (nothing read, written or allocated).
An embedding's backward scatter-adds only the gathered rows.
Edges: ``grad(w) <- grad(v)`` for every forward edge ``w -> v`` along which a gradient flows,
``grad(v) <- owner(u)`` for every saved tensor and ``grad(v) <- v`` for a model output (which
seeds the backward).

For every parameter-owning module (or attribute), one ``<name>/update`` op: SGD with momentum,
~3 FLOPs per parameter, holding the gradient buffer and the momentum (2 x parameter bytes) on its
device. It is dense: every row of an embedding table is updated (momentum, and Adam's moments,
decay even where the step's gradient is zero). A module used many times (an RNN cell at every
step) accumulates its weight gradient along its uses' grad ops, last use first, and only the sum
reaches the update: edges ``grad(use_k) -> ... -> grad(use_1) -> update`` carrying the weight
bytes. Buffers (BatchNorm running statistics, ``position_ids``...) and frozen parameters
(``requires_grad=False``) get neither a gradient nor an update.

``micro_batches=M`` splits the batch GPipe-style (Huang et al., NeurIPS 2019): the step becomes
``M`` forward/backward copies on ``batch / M`` examples each (ops prefixed ``mb<k>/``), sharing the
weights (held by the first copy's ops), whose weight gradients accumulate into one update, so a
pipeline placement can overlap stages.

The IR then holds the whole memory of a training step: weights on the forward ops, gradient
buffers and optimizer state on the update ops, saved activations alive until their backward op.
``meta["saved_activation_bytes"]`` is the total autograd keeps for the backward (unique buffers).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import operator
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from actorq.errors import GraphError
from actorq.graphopt.ir import Graph

_aten = torch.ops.aten

#: Ops that return a view without declaring it in their schema (``_unsafe_view`` is "unsafe"
#: exactly because it aliases without saying so): free like every declared view.
_UNDECLARED_VIEWS = {_aten._unsafe_view, _aten._reshape_alias}


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _nbytes(x: Any) -> float:
    return float(sum(t.numel() * t.element_size() for t in _tensors(x)))


def _is_view(func: Any) -> bool:
    """An aten op whose outputs alias an input without writing it (``view``, ``transpose``,
    ``chunk``, ``detach``, ``_unsafe_view``...): no FLOPs, no memory traffic, no allocation. An
    in-place op (``relu_``) also returns an alias, but it writes it."""
    if getattr(func, "_overloadpacket", None) in _UNDECLARED_VIEWS:
        return True
    rets = func._schema.returns
    return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


def _flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor | None:
    """``scaled_dot_product_attention`` as the fused kernel a GPU (FlashAttention, Dao et al.,
    NeurIPS 2022) or torch's CPU backend runs: it saves q, k, v, the output and a logsumexp per
    row, where the math decomposition meta tensors fall back to would save the whole
    ``T x T`` attention matrix. None when the fused kernel does not apply (dropout, grouped
    heads, not 4-d): the caller then runs the math decomposition."""
    if dropout_p or enable_gqa or query.dim() != 4 or key.shape[1] != query.shape[1]:
        return None
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(
            attn_mask.logical_not(), float("-inf")
        )
    out = _aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, is_causal, attn_mask=attn_mask, scale=scale
    )
    return out[0]


@contextlib.contextmanager
def _fused_attention() -> Iterator[None]:
    """Runs ``F.scaled_dot_product_attention`` as :func:`_flash_attention` while tracing (on meta
    tensors it would otherwise decompose into matmuls and a softmax). A patch of the function,
    not a ``TorchFunctionMode``: a mode is switched off inside the functions it intercepts, and
    ``nn.MultiheadAttention`` reaches attention through one (``multi_head_attention_forward``).
    Every caller looks the function up at call time, so the patch reaches them all."""
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention

    def sdpa(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = _flash_attention(*args, **kwargs)
        return original(*args, **kwargs) if out is None else out

    functional.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = original


def _sdpa_flops(func: Any, args: Sequence[Any]) -> float | None:
    """Attention FLOPs (``torch.utils.flop_counter``'s formulas) for the ops its registry
    lacks: the composite op export keeps and the CPU flash kernel and its backward."""
    packet = func._overloadpacket
    shapes = [a.shape for a in args[:4] if isinstance(a, torch.Tensor)]
    four_d = all(len(x) == 4 for x in shapes)
    forward = (
        _aten.scaled_dot_product_attention,
        _aten._scaled_dot_product_flash_attention_for_cpu,
    )
    if packet in forward and len(shapes) >= 3 and four_d:
        return float(sdpa_flop_count(*shapes[:3]))
    backward = _aten._scaled_dot_product_flash_attention_for_cpu_backward
    if packet is backward and len(shapes) == 4 and four_d:
        return float(sdpa_backward_flop_count(*shapes))
    return None


def _aten_flops(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """FLOPs of one aten op from shapes: ``torch.utils.flop_counter``'s formula when it has one
    (matmuls, convolutions, attention), else one per element of the largest operand; 0 for a
    view. An embedding's backward is a scatter-add of the gathered rows (one FLOP per element of
    the output gradient), not a pass over the whole table it returns."""
    packet = func._overloadpacket
    if packet in flop_registry:
        return float(flop_registry[packet](*args, **kwargs, out_val=out))
    attention = _sdpa_flops(func, args)
    if attention is not None:
        return attention
    if _is_view(func):
        return 0.0
    if packet is _aten.embedding_dense_backward:
        return float(args[0].numel())
    return float(max((t.numel() for t in _tensors((args, kwargs, out))), default=0))


class _FlopCounter(TorchDispatchMode):
    """Counts the FLOPs of the aten ops run while active (:func:`_aten_flops`), whether they were
    all views, and the embedding tables looked up (bytes of the table, bytes of the rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0.0
        self.views_only = True
        self.table = 0.0
        self.rows = 0.0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.flops += _aten_flops(func, args, kwargs, out)
        self.views_only = self.views_only and _is_view(func)
        if func._overloadpacket is _aten.embedding:
            self.table += _nbytes(args[0])
            self.rows += _nbytes(out)
        return out


@dataclasses.dataclass
class _Grad:
    """What autograd does for one op's backward, measured by running it (:func:`_autograd`)."""

    flops: float
    free: bool
    """Only views ran (the gradient of a view is a view): nothing read, written, allocated."""
    saved_inputs: set[torch.fx.Node]
    """Input nodes whose tensors the backward keeps."""
    saved_output: float
    """Bytes of the op's own outputs the backward keeps (unique storages)."""
    saved_other: float
    """Bytes of intermediates the op creates and keeps for its backward."""
    saved_params: set[str]
    grad_inputs: set[torch.fx.Node]
    """Input nodes that receive a gradient."""
    grad_params: set[str]
    """Trainable parameters that receive a gradient."""


@dataclasses.dataclass
class _Traced:
    """What a tracer saw, per fx node: the common input of :func:`_assemble`."""

    graph: torch.fx.Graph
    values: dict[torch.fx.Node, Any]
    flops: dict[torch.fx.Node, float]
    views: dict[torch.fx.Node, bool]
    op_type: dict[torch.fx.Node, str]
    params: dict[torch.fx.Node, dict[str, float]]
    """Parameter and buffer tensors (by name, with bytes) each op node uses."""
    skip: set[torch.fx.Node]
    """Nodes that are not ops: parameters, constants, the output."""
    trainable: set[str] = dataclasses.field(default_factory=set)
    """The keys of :attr:`params` that are trainable parameters (not buffers, not frozen)."""
    gathered: dict[torch.fx.Node, tuple[float, float]] = dataclasses.field(default_factory=dict)
    """Embedding lookups: (table bytes, gathered row bytes) per op node."""
    grads: dict[torch.fx.Node, _Grad] = dataclasses.field(default_factory=dict)
    """Backward of every op whose output requires grad (training imports only)."""
    outputs: list[torch.fx.Node] = dataclasses.field(default_factory=list)
    """The nodes the model returns."""


def _tensor_bytes(t: torch.Tensor) -> float:
    return float(t.numel() * t.element_size())


def _storage(t: torch.Tensor) -> int:
    """Identity of a tensor's storage (meta tensors have no data pointer, but views share the
    StorageImpl)."""
    return int(t.untyped_storage()._cdata)


def _autograd(
    call: Callable[[Any, Any], Any],
    args: Any,
    kwargs: Any,
    source: dict[int, tuple[torch.fx.Node, bool]],
    params: dict[str, torch.Tensor],
    measure: bool,
) -> tuple[Any, _FlopCounter, _Grad | None]:
    """Run one op (``call(args, kwargs)``) the way eager autograd would inside a training step,
    and measure its forward and, when ``measure``, its backward.

    ``source`` maps ``id`` of each activation tensor in ``args``/``kwargs`` to (its input node,
    whether it requires grad); it is replaced by a fresh leaf (cloned, so in-place ops on it are
    legal), which isolates this op's backward from the rest of the graph. ``params`` are the
    parameters and buffers the op uses, by key. Returns the output (detached, ``requires_grad``
    kept), the forward counter and the measured backward (None when no output requires grad)."""
    leaves: list[tuple[torch.fx.Node, torch.Tensor]] = []
    by_storage: dict[int, torch.fx.Node] = {}
    done: dict[int, torch.Tensor] = {}

    def prep(a: Any) -> Any:
        if not isinstance(a, torch.Tensor) or id(a) not in source:
            return a
        if id(a) in done:
            return done[id(a)]
        node, rg = source[id(a)]
        t = a.detach()
        if rg and (t.is_floating_point() or t.is_complex()):
            leaf = t.requires_grad_(True)
            leaves.append((node, leaf))
            t = leaf.clone()
        by_storage[_storage(t)] = node
        done[id(a)] = t
        return t

    args2, kwargs2 = tree_map(prep, (args, kwargs))
    param_storage = {_storage(p): k for k, p in params.items()}
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    fwd = _FlopCounter()
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), fwd:
        out = call(args2, kwargs2)
    outs = [t for t in _tensors(out) if t.requires_grad]
    grad: _Grad | None = None
    if measure and outs:
        targets = [leaf for _, leaf in leaves]
        keys = [k for k, p in params.items() if p.requires_grad]
        targets += [params[k] for k in keys]
        bwd = _FlopCounter()
        seeds = [torch.empty_like(o) for o in outs]  # made outside the counter: not backward work
        if targets:
            with bwd:
                gs = torch.autograd.grad(outs, targets, seeds, allow_unused=True)
        else:  # pragma: no cover - an output requires grad only if some input does
            gs = ()
        out_storage = {_storage(t) for t in _tensors(out)}
        grad = _Grad(bwd.flops, bwd.views_only, set(), 0.0, 0.0, set(), set(), set())
        own: dict[int, float] = {}
        other: dict[int, float] = {}
        for s in saved:
            sid = _storage(s)
            if sid in by_storage:
                grad.saved_inputs.add(by_storage[sid])
            elif sid in param_storage:
                grad.saved_params.add(param_storage[sid])
            else:
                where = own if sid in out_storage else other
                where[sid] = float(s.untyped_storage().nbytes())
        grad.saved_output = sum(own.values())
        grad.saved_other = sum(other.values())
        nl = len(leaves)
        grad.grad_inputs = {leaves[i][0] for i in range(nl) if gs[i] is not None}
        grad.grad_params = {k for k, gk in zip(keys, gs[nl:], strict=True) if gk is not None}

    def keep(t: Any) -> Any:  # cut the autograd graph, keep the flag the next op reads
        if isinstance(t, torch.Tensor) and t.requires_grad:
            return t.detach().requires_grad_(True)
        return t

    return tree_map(keep, out), fwd, grad


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


def _fx_error(name: str, e: BaseException) -> GraphError:
    return GraphError(
        f"cannot trace {name!r} with torch.fx ({_first_line(e)}); "
        'use from_torch(..., tracer="export")'
    )


def _trace_fx(
    module: torch.nn.Module, inputs: Sequence[torch.Tensor], name: str, training: bool
) -> _Traced:
    """``torch.fx.symbolic_trace`` at module granularity (a ``Linear`` is one op), costed by
    running each node on meta tensors under :class:`_FlopCounter` (and autograd, for a training
    step: :func:`_autograd`)."""
    try:
        gm = torch.fx.symbolic_trace(_meta_copy(module, name))
    except GraphError:
        raise
    except Exception as e:  # fx raises many types (and odd messages) for untraceable code
        raise _fx_error(name, e) from None
    tr = _Traced(gm.graph, {}, {}, {}, {}, {}, set())
    tr.trainable = {k for k, p in gm.named_parameters() if p.requires_grad}
    params_of = _fx_params(gm)
    try:
        with _fused_attention():
            _FxCoster(gm, tr, params_of, training).run(*[x.to("meta") for x in inputs])
    except Exception as e:  # symbolic tracing succeeded but its graph does not run
        raise _fx_error(name, e) from None
    for node in gm.graph.nodes:
        if node.op in ("output", "get_attr"):
            tr.skip.add(node)
            if node.op == "output":
                tr.outputs = list(node.all_input_nodes)
            continue
        if node.op == "call_module":
            tr.op_type[node] = type(gm.get_submodule(str(node.target))).__name__.lower()
        elif node.op == "call_function":
            tr.op_type[node] = str(getattr(node.target, "__name__", node.target)).lstrip("_")
        else:
            tr.op_type[node] = str(node.target)
        tr.params[node] = {k: _tensor_bytes(t) for k, t in params_of(node).items()}
    return tr


def _fx_params(
    gm: torch.fx.GraphModule,
) -> Callable[[torch.fx.Node], dict[str, torch.Tensor]]:
    """``params_of(node)``: the parameters and buffers a node of ``gm`` uses, by (canonical)
    qualified name."""
    # one name per tensor (the first module that owns it): a tied weight is one parameter
    canonical = {id(t): k for k, t in itertools.chain(gm.named_parameters(), gm.named_buffers())}

    def params_of(n: torch.fx.Node) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        if n.op == "call_module":
            mod = gm.get_submodule(str(n.target))
            for pn, p in itertools.chain(mod.named_parameters(), mod.named_buffers()):
                out[canonical.get(id(p), f"{n.target}.{pn}")] = p
        for a in n.all_input_nodes:
            if a.op == "get_attr":
                t = operator.attrgetter(str(a.target))(gm)
                if isinstance(t, torch.Tensor):
                    out[canonical.get(id(t), str(a.target))] = t
        return out

    return params_of


class _FxCoster(torch.fx.Interpreter):
    """Runs a traced module node by node on meta tensors, recording into ``traced`` each node's
    value, FLOPs and whether it is a view, and for a training step its backward."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        traced: _Traced,
        params_of: Callable[[torch.fx.Node], dict[str, torch.Tensor]],
        training: bool,
    ) -> None:
        super().__init__(gm)
        self.traced, self.params_of, self.training = traced, params_of, training

    def run_node(self, n: torch.fx.Node) -> Any:
        tr = self.traced
        if n.op in ("placeholder", "get_attr", "output"):
            out = super().run_node(n)
            tr.values[n], tr.flops[n], tr.views[n] = out, 0.0, n.op != "placeholder"
            return out
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        source: dict[int, tuple[torch.fx.Node, bool]] = {}
        for a in n.all_input_nodes:
            if a.op != "get_attr":
                for t in _tensors(self.env[a]):
                    source[id(t)] = (a, t.requires_grad)
        run = getattr(self, str(n.op))
        # a getitem only selects from a tuple: nothing to replay
        plain = n.op == "call_function" and n.target is operator.getitem
        params = self.params_of(n)

        def call(a: Any, k: Any) -> Any:
            return run(n.target, a, k)

        try:
            out, fwd, grad = _autograd(
                call,
                args,
                kwargs,
                {} if plain or not self.training else source,
                params,
                self.training and not plain,
            )
        except Exception:
            if not self.training or plain:
                raise
            out, fwd, grad = self._mirror(n, call, args, kwargs, params)
        tr.values[n], tr.flops[n], tr.views[n] = out, fwd.flops, fwd.views_only
        if fwd.rows:
            tr.gathered[n] = (fwd.table, fwd.rows)
        if grad is not None:
            tr.grads[n] = grad
        return out

    def _mirror(
        self,
        n: torch.fx.Node,
        call: Callable[[Any, Any], Any],
        args: Any,
        kwargs: Any,
        params: dict[str, torch.Tensor],
    ) -> tuple[Any, _FlopCounter, _Grad | None]:
        """An op autograd cannot replay on meta tensors: run it plainly, and give it the
        conservative mirror (every input saved, a gradient for each that needs one)."""
        fwd = _FlopCounter()
        with torch.no_grad(), fwd:
            out = call(args, kwargs)
        inputs = {a for a in n.all_input_nodes if a.op != "get_attr"}
        rg = {a for a in inputs if any(t.requires_grad for t in _tensors(self.env[a]))}
        trainable = {k for k, p in params.items() if p.requires_grad}
        if not (rg or trainable):
            return out, fwd, None
        out = tree_map(
            lambda t: (
                t.detach().requires_grad_(True)
                if isinstance(t, torch.Tensor) and t.is_floating_point()
                else t
            ),
            out,
        )
        grad = _Grad(
            fwd.flops, fwd.views_only, inputs, _nbytes(out), 0.0, set(params), rg, trainable
        )
        return out, fwd, grad


def _trace_export(
    module: torch.nn.Module, inputs: Sequence[torch.Tensor], name: str, training: bool
) -> _Traced:
    """``torch.export`` at aten granularity (a ``Linear`` is a transpose and an ``addmm``, like a
    TensorFlow graph), costed from the fake tensors export records on every node (and, for a
    training step, each op replayed under autograd on meta tensors: :func:`_autograd`). Slower
    than fx (dynamo), but it handles code that symbolic tracing cannot."""
    try:
        with warnings.catch_warnings():  # torch's own pytree deprecation noise, not the user's
            warnings.simplefilter("ignore", FutureWarning)
            meta_module = _meta_copy(module, name)
            ep = torch.export.export(meta_module, tuple(x.to("meta") for x in inputs))
            # core ATen (linear -> addmm, so FLOP formulas apply), but attention stays one op:
            # it runs as a fused kernel (_flash_attention), not as the matmuls it decomposes to
            table = torch.export.default_decompositions()
            table.pop(_aten.scaled_dot_product_attention.default, None)
            ep = ep.run_decompositions(table)
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
            if spec.kind == InputKind.PARAMETER:
                # a tied weight may be named by its second owner: ask the tensor, not the name
                p = operator.attrgetter(spec.target)(meta_module)
                if isinstance(p, torch.nn.Parameter) and p.requires_grad:
                    tr.trainable.add(spec.target)

    def val(x: Any) -> Any:
        return x.meta.get("val") if isinstance(x, torch.fx.Node) else x

    def fresh(v: Any, rg: bool = False) -> Any:
        """A meta tensor shaped like a recorded (fake) value."""
        if not isinstance(v, torch.Tensor):
            return v
        t = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
        return t.requires_grad_(rg and (t.is_floating_point() or t.is_complex()))

    rg: dict[torch.fx.Node, list[bool]] = {}  # per node: requires_grad of each output tensor

    def node_rg(a: torch.fx.Node) -> bool:
        if a.op == "call_function" and a.target is operator.getitem:
            parent, idx = a.args[0], a.args[1]
            flags = rg.get(parent, []) if isinstance(parent, torch.fx.Node) else []
            return isinstance(idx, int) and idx < len(flags) and flags[idx]
        return any(rg.get(a, []))

    for node in g.nodes:
        v = node.meta.get("val")
        if node.op == "output" or (node.op == "placeholder" and node.name in weights):
            tr.skip.add(node)
            tr.values[node] = v
            if node.op == "output":
                tr.outputs = list(node.all_input_nodes)
            continue
        if node.op == "get_attr":
            tr.skip.add(node)
            continue
        tr.values[node] = v
        tr.params[node] = {
            weights[a.name]: _nbytes(a.meta.get("val"))
            for a in node.all_input_nodes
            if a.op == "placeholder" and a.name in weights
        }
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            args = torch.fx.node.map_aggregate(node.args, val)
            kwargs = torch.fx.node.map_aggregate(node.kwargs, val)
            tr.flops[node] = _aten_flops(node.target, args, kwargs, v)
            tr.views[node] = _is_view(node.target) or _identity_clone(node)
            if tr.views[node]:
                tr.flops[node] = 0.0
            tr.op_type[node] = node.target._overloadpacket.__name__.lstrip("_")
            if node.target._overloadpacket is _aten.embedding:
                tr.gathered[node] = (_nbytes(args[0]), _nbytes(v))
            if training:
                _replay_export_op(node, weights, tr, rg, node_rg, fresh)
        else:
            tr.flops[node], tr.views[node] = 0.0, node.op != "placeholder"
            tr.op_type[node] = str(getattr(node.target, "__name__", node.target))
            rg[node] = [False] * len(_tensors(v))
            if training and node.op == "call_function" and node.target is not operator.getitem:
                # not an aten op (a higher-order op): no replay, the conservative mirror
                _mirror_export_op(node, weights, tr, rg, node_rg)
    return tr


def _identity_clone(node: torch.fx.Node) -> bool:
    """A ``clone`` of a contiguous tensor into the same layout: functionalization's stand-in for an
    op that returns its input (a p=0 or eval-mode dropout, ``.contiguous()`` of a contiguous
    tensor), which eager runs as the identity: free, like a view."""
    if node.target is not _aten.clone.default or not node.args:
        return False
    src, out = node.args[0], node.meta.get("val")
    sv = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if not isinstance(sv, torch.Tensor) or not isinstance(out, torch.Tensor):
        return False
    return bool(sv.is_contiguous()) and tuple(sv.stride()) == tuple(out.stride())


def _replay_export_op(
    node: torch.fx.Node,
    weights: dict[str, str],
    tr: _Traced,
    rg: dict[torch.fx.Node, list[bool]],
    node_rg: Callable[[torch.fx.Node], bool],
    fresh: Callable[..., Any],
) -> None:
    """Replay one aten node of an exported graph under autograd (:func:`_autograd`) on fresh
    meta tensors shaped like its recorded inputs."""
    source: dict[int, tuple[torch.fx.Node, bool]] = {}
    params: dict[str, torch.Tensor] = {}
    made: dict[torch.fx.Node, Any] = {}

    def arg(a: Any) -> Any:
        if not isinstance(a, torch.fx.Node):
            return a
        if a not in made:
            if a.op == "placeholder" and a.name in weights:
                key = weights[a.name]
                made[a] = params[key] = fresh(a.meta.get("val"), key in tr.trainable)
            else:
                made[a] = fresh(a.meta.get("val"))
                for t in _tensors(made[a]):
                    source[id(t)] = (a, node_rg(a))
        return made[a]

    args = torch.fx.node.map_aggregate(node.args, arg)
    kwargs = torch.fx.node.map_aggregate(node.kwargs, arg)
    target = node.target
    assert callable(target)

    def call(a: Any, k: Any) -> Any:
        if target is _aten.scaled_dot_product_attention.default:
            out = _flash_attention(*a, **k)
            if out is not None:
                return out
        return target(*a, **k)

    try:
        out, _, grad = _autograd(call, args, kwargs, source, params, True)
    except Exception:  # an op autograd cannot replay on meta tensors
        _mirror_export_op(node, weights, tr, rg, node_rg)
        return
    rg[node] = [t.requires_grad for t in _tensors(out)]
    if grad is not None:
        tr.grads[node] = grad


def _mirror_export_op(
    node: torch.fx.Node,
    weights: dict[str, str],
    tr: _Traced,
    rg: dict[torch.fx.Node, list[bool]],
    node_rg: Callable[[torch.fx.Node], bool],
) -> None:
    """The conservative backward of a node that cannot be replayed: its float outputs require
    grad if any input does, and its gradient op costs ``1 x`` the forward, saves every input and
    the output, and sends a gradient to every input that needs one."""
    any_rg = any(node_rg(a) for a in node.all_input_nodes) or any(
        weights.get(a.name) in tr.trainable for a in node.all_input_nodes
    )
    rg[node] = [any_rg and t.is_floating_point() for t in _tensors(node.meta.get("val"))]
    if any(rg[node]):
        acts = {a for a in node.all_input_nodes if a.name not in weights}
        tr.grads[node] = _Grad(
            tr.flops[node],
            tr.views[node],
            acts,
            _nbytes(node.meta.get("val")),
            0.0,
            {weights[a.name] for a in node.all_input_nodes if a.name in weights},
            {a for a in acts if node_rg(a)},
            {k for k in tr.params.get(node, {}) if k in tr.trainable},
        )


def from_torch(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    name: str,
    *,
    training: bool = True,
    meta: dict[str, Any] | None = None,
    tracer: Literal["fx", "export"] = "fx",
    micro_batches: int = 1,
) -> Graph:
    """Trace ``module`` on ``example_inputs`` into a :class:`Graph` (see the module docstring).

    ``tracer="fx"`` (``torch.fx.symbolic_trace``, module granularity, fast) or ``"export"``
    (``torch.export``, aten granularity, handles more code). The shape pass runs on a ``meta``
    copy of the module and inputs, so a model far larger than this machine's memory imports fine
    and ``module`` itself (device, weights, buffers, train/eval mode) is left untouched.

    ``micro_batches=M`` (training only) traces the step on ``batch / M`` examples (every input is
    split along dimension 0, which must divide evenly) and repeats its forward and backward ``M``
    times with one gradient accumulation, as GPipe does (Huang et al., NeurIPS 2019).
    """
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise GraphError(f"micro_batches must be a positive integer, got {micro_batches!r}")
    inputs = list(example_inputs)
    if micro_batches > 1:
        if not training:
            raise GraphError("micro_batches applies to training steps (training=True)")
        for k, x in enumerate(inputs):
            if x.dim() == 0 or x.shape[0] % micro_batches:
                raise GraphError(
                    f"input {k} has shape {tuple(x.shape)}: its first dimension must split "
                    f"into {micro_batches} equal micro-batches"
                )
        inputs = [x[: x.shape[0] // micro_batches] for x in inputs]
    if tracer == "fx":
        tr = _trace_fx(module, inputs, name, training)
    elif tracer == "export":
        tr = _trace_export(module, inputs, name, training)
    else:
        raise GraphError(f"unknown tracer {tracer!r}; use 'fx' or 'export'")
    info = {"tracer": tracer, **({"micro_batches": micro_batches} if micro_batches > 1 else {})}
    return _assemble(tr, name, training, {**info, **(meta or {})}, micro_batches)


@dataclasses.dataclass
class _Op:
    """One forward op of the template (a single micro-batch), before it is copied."""

    name: str
    type: str
    flops: float
    read: float
    written: float
    out: float
    keys: dict[str, float]
    inputs: list[tuple[int, float, torch.fx.Node]]
    """Activation inputs: (producer op, tensor bytes, the input node as the op sees it)."""
    owner: int
    """The op that owns this op's output storage: itself, or for a view the owner of its base
    (-1 when it is a view of a weight)."""
    gathered: tuple[float, float] | None
    value: float
    """Bytes of the tensors it returns (a view's too): the size of its output gradient."""
    multi: bool
    """It returns several tensors (a norm's statistics, a dropout mask beside its output)."""


class _Builder:
    """Columns of a graph under construction."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.types: list[str] = []
        self.cols: dict[str, list[float]] = {
            k: [] for k in ("flops", "bytes_read", "bytes_written", "out_bytes", "param_bytes")
        }
        self.src: list[int] = []
        self.dst: list[int] = []
        self.eb: list[float] = []
        self.anchor: list[int] = []

    def op(self, name: str, typ: str, anchor: int | None = None, **costs: float) -> int:
        i = len(self.names)
        self.names.append(name)
        self.types.append(typ)
        for k, col in self.cols.items():
            col.append(costs.get(k, 0.0))
        self.anchor.append(i if anchor is None else anchor)
        return i

    def edge(self, s: int, d: int, b: float) -> None:
        self.src.append(s)
        self.dst.append(d)
        self.eb.append(b)


def _forward_template(tr: _Traced) -> tuple[list[_Op], dict[torch.fx.Node, int]]:
    """The forward ops of one micro-batch, in trace order, and each node's op index."""
    index: dict[torch.fx.Node, int] = {}
    ops: list[_Op] = []

    def producer(a: torch.fx.Node) -> tuple[int, float] | None:
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
        return index[a], nbytes

    for node in tr.graph.nodes:
        if node in tr.skip or (node.op == "call_function" and node.target is operator.getitem):
            continue
        i = len(ops)
        index[node] = i
        is_input = node.op == "placeholder"
        view = tr.views[node] and not is_input
        keys = tr.params[node]
        inputs = []
        for a in node.all_input_nodes:
            pr = producer(a)
            if pr is not None:
                inputs.append((pr[0], pr[1], a))
        out_b = _nbytes(tr.values[node])
        gathered = tr.gathered.get(node)
        # an embedding reads the rows it gathers, not its table
        read = sum(keys.values()) + sum(b for _, b, _ in inputs)
        if gathered is not None:
            read += gathered[1] - gathered[0]
        owner = i
        if view:
            owner = ops[inputs[0][0]].owner if inputs else -1
        ops.append(
            _Op(
                name=node.name,
                type="input" if is_input else tr.op_type[node],
                flops=0.0 if is_input else tr.flops[node],
                read=0.0 if view else read,
                written=0.0 if view or is_input else out_b,
                out=0.0 if view else out_b,
                keys=keys,
                inputs=inputs,
                owner=owner,
                gathered=gathered,
                value=out_b,
                multi=len(_tensors(tr.values[node])) > 1,
            )
        )
    return ops, index


@dataclasses.dataclass
class _Backward:
    """The template's backward structure, shared by every micro-batch copy."""

    grads: list[_Grad | None]
    needed: list[bool]
    """Op gets a gradient op: its output requires grad and a gradient reaches it."""
    outputs: set[int]
    consumers: list[list[tuple[int, float, torch.fx.Node]]]
    keep_self: list[bool]
    """The backward keeps the op's whole output: an edge from the op itself."""
    stash: list[float]
    """Bytes the backward keeps of part of the op's outputs or of its intermediates (a dropout
    mask, a norm's statistics, a module's internals): a ``<op>/saved`` buffer of that size,
    so that the rest of the output is freed after its last forward use, as autograd frees it."""
    op_of: Callable[[torch.fx.Node], int | None]


def _backward_plan(tr: _Traced, ops: list[_Op], index: dict[torch.fx.Node, int]) -> _Backward:
    nf = len(ops)
    node_of = {i: n for n, i in index.items()}
    grads = [tr.grads.get(node_of[j]) for j in range(nf)]

    def op_of(a: torch.fx.Node) -> int | None:
        while (
            a.op == "call_function"
            and a.target is operator.getitem
            and isinstance(a.args[0], torch.fx.Node)
        ):
            a = a.args[0]
        return index.get(a)

    outputs = {j for a in tr.outputs if (j := op_of(a)) is not None}
    consumers: list[list[tuple[int, float, torch.fx.Node]]] = [[] for _ in range(nf)]
    for j, op in enumerate(ops):
        for p, pb, a in op.inputs:
            consumers[p].append((j, pb, a))
    # reverse topological order (the template is in trace order): consumers are decided first
    needed = [False] * nf
    for j in reversed(range(nf)):
        if grads[j] is not None:
            needed[j] = j in outputs or any(
                needed[c] and a in grads[c].grad_inputs  # type: ignore[union-attr]
                for c, _, a in consumers[j]
            )
    keep_self = [False] * nf
    stash = [0.0] * nf
    for j, gr in enumerate(grads):
        if gr is None or not needed[j] or ops[j].owner != j:
            continue
        own = gr.saved_output + gr.saved_other
        if gr.saved_other == 0 and own >= ops[j].out > 0:
            keep_self[j] = True
        elif own > 0:
            stash[j] = own
    return _Backward(grads, needed, outputs, consumers, keep_self, stash, op_of)


def _assemble(
    tr: _Traced, name: str, training: bool, meta: dict[str, Any], micro_batches: int = 1
) -> Graph:
    """Ops, edges and costs from a trace; then the backward pass for a training step, once per
    micro-batch, and the optimizer updates."""
    ops, index = _forward_template(tr)
    nf = len(ops)
    if nf == 0:
        raise GraphError(f"model {name!r} traced to an empty graph")
    plan = _backward_plan(tr, ops, index) if training else None
    b = _Builder()
    holder: dict[str, int] = {}  # parameter -> the op that owns (keeps) it
    key_bytes: dict[str, float] = {}
    mb = micro_batches
    fi = [[-1] * nf for _ in range(mb)]  # forward op j of micro-batch k -> op index
    side = [[-1] * nf for _ in range(mb)]  # its "saved" buffer, if any
    for k in range(mb):
        pre = f"mb{k}/" if mb > 1 else ""
        for j, op in enumerate(ops):
            own = {key: v for key, v in op.keys.items() if key not in holder}
            key_bytes.update(own)
            i = fi[k][j] = b.op(
                pre + op.name,
                op.type,
                flops=op.flops,
                bytes_read=op.read,
                bytes_written=op.written,
                out_bytes=op.out,
                param_bytes=sum(own.values()),
            )
            holder.update(dict.fromkeys(own, i))
            # a reused weight is read from the op holding it: on another device it must be sent
            shared: dict[int, float] = {}
            for key in op.keys.keys() - own.keys():
                shared[holder[key]] = shared.get(holder[key], 0.0) + op.keys[key]
            for h, wb in shared.items():
                b.edge(h, i, wb)
            for p, pb, _ in op.inputs:
                b.edge(fi[k][p], i, pb)
            if plan is not None and plan.stash[j] > 0:
                s = side[k][j] = b.op(
                    f"{pre}{op.name}/saved", "saved", anchor=i, out_bytes=plan.stash[j]
                )
                b.edge(i, s, plan.stash[j])
    nfwd = len(b.names)
    meta = {"training": training, "forward_ops": nfwd, **meta}
    if plan is not None:
        meta["saved_activation_bytes"] = _add_backward(
            tr, ops, plan, b, holder, key_bytes, fi, side
        )
    arr = {k: np.array(v, dtype=np.float64) for k, v in b.cols.items()}
    return Graph(
        name=name,
        op_names=b.names,
        op_types=b.types,
        **arr,
        src=np.array(b.src, dtype=np.int64),
        dst=np.array(b.dst, dtype=np.int64),
        edge_bytes=np.array(b.eb, dtype=np.float64),
        meta=meta,
        anchor=np.array(b.anchor, dtype=np.int64),
    )


@dataclasses.dataclass
class _GradCost:
    """What one op's gradient op reads, writes and returns (:func:`_grad_cost`)."""

    saved: dict[int, float]
    """Owner op (template index) -> bytes of its output the gradient op reads."""
    read: float
    written: float
    out: float


def _grad_cost(
    ops: list[_Op], plan: _Backward, key_bytes: dict[str, float], j: int, gr: _Grad
) -> _GradCost:
    """The gradient op of forward op ``j``: it reads what its backward saved (activations by
    owner op, weights and views of weights, its stash), and its output gradient; it writes the
    gradients of its inputs and parameters, and returns the activation gradients."""
    op = ops[j]
    in_bytes = {a: pb for _, pb, a in op.inputs}
    flows = [(p, pb) for p, pb, a in op.inputs if a in gr.grad_inputs and plan.needed[p]]
    # a gradient flowing into a view of a weight (export's transposed Linear weight) is
    # the weight's gradient: written into the update's gradient buffer, not a new tensor
    act_grads = sum(pb for p, pb in flows if ops[p].owner >= 0)
    pgrad = sum(pb for p, pb in flows if ops[p].owner < 0)
    pgrad += sum(key_bytes[key] for key in gr.grad_params)
    if op.gathered is not None and gr.grad_params:  # scatter-add into gathered rows
        pgrad += op.gathered[1] - op.gathered[0]
    saved: dict[int, float] = {}  # owner op (template index) -> bytes read from it
    weight_views = 0.0  # saved views of weights (export's permuted Linear weight)
    for a in gr.saved_inputs:
        p = plan.op_of(a)
        if p is None:
            continue
        o = ops[p].owner
        if o >= 0:
            saved[o] = max(saved.get(o, 0.0), in_bytes.get(a, 0.0))
        else:
            weight_views += in_bytes.get(a, 0.0)
    if (plan.keep_self[j] or (op.owner != j and gr.saved_output)) and op.owner >= 0:
        saved[op.owner] = max(saved.get(op.owner, 0.0), ops[op.owner].out)
    read = sum(saved.values()) + weight_views + plan.stash[j] + op.value  # + output gradient
    read += sum(key_bytes[key] for key in gr.saved_params if key in key_bytes)
    free = gr.free or not (act_grads or pgrad)
    return _GradCost(
        saved,
        read=0.0 if gr.free else read,
        written=0.0 if gr.free else act_grads + pgrad,
        out=0.0 if free else act_grads,
    )


def _add_backward(
    tr: _Traced,
    ops: list[_Op],
    plan: _Backward,
    b: _Builder,
    holder: dict[str, int],
    key_bytes: dict[str, float],
    fi: list[list[int]],
    side: list[list[int]],
) -> float:
    """Append the backward pass of every micro-batch and the optimizer updates (module
    docstring); each new op is anchored to (colocated by default with) the forward op it belongs
    to. Returns the bytes of activations saved for the backward, over all micro-batches."""
    nf, mb = len(ops), len(fi)
    grads, needed = plan.grads, plan.needed
    saved_bytes = 0.0
    grad_of = [[-1] * nf for _ in range(mb)]
    for k in range(mb):
        # owners of saved buffers in this micro-batch (template index) -> bytes kept: the whole
        # storage, or the tensors referenced of a tuple of outputs
        kept: dict[int, float] = {}
        for j in range(nf):
            gr = grads[j]
            if not needed[j] or gr is None:
                continue
            op, v = ops[j], fi[k][j]
            cost = _grad_cost(ops, plan, key_bytes, j, gr)
            g = grad_of[k][j] = b.op(
                f"{b.names[v]}/grad",
                f"{op.type}_grad",
                anchor=v,
                flops=gr.flops,
                bytes_read=cost.read,
                bytes_written=cost.written,
                out_bytes=cost.out,
            )
            for o, sb in cost.saved.items():
                kept[o] = max(kept.get(o, 0.0), sb if ops[o].multi else ops[o].out)
            if j in plan.outputs and j not in cost.saved:  # the output's gradient seeds it
                b.edge(v, g, op.out or op.value)
            for o, sb in sorted(cost.saved.items()):
                b.edge(fi[k][o], g, sb)
            if side[k][j] >= 0:
                b.edge(side[k][j], g, plan.stash[j])
            # a shared weight the backward reads comes from its holder (first micro-batch only:
            # the holder's output would otherwise stay alive across micro-batches)
            if k == 0:
                for key in sorted(gr.saved_params):
                    h = holder.get(key, -1)
                    if h >= 0 and h != v:
                        b.edge(h, g, key_bytes[key])
        # gradient flow: grad(consumer) -> grad(input), for the inputs a gradient flows to
        for j in range(nf):
            gr = grads[j]
            if grad_of[k][j] < 0 or gr is None:
                continue
            for p, pb, a in ops[j].inputs:
                if a in gr.grad_inputs and grad_of[k][p] >= 0:
                    b.edge(grad_of[k][j], grad_of[k][p], pb)
        saved_bytes += sum(kept.values()) + sum(plan.stash)
    _add_updates(ops, plan, b, holder, key_bytes, grad_of)
    return saved_bytes


def _add_updates(
    ops: list[_Op],
    plan: _Backward,
    b: _Builder,
    holder: dict[str, int],
    key_bytes: dict[str, float],
    grad_of: list[list[int]],
) -> None:
    """One optimizer update per parameter owner (a module, or a bare parameter attribute), fed
    by its weight gradient accumulated along its uses."""
    mb = len(grad_of)
    owner_keys: dict[str, set[str]] = {}
    owner_uses: dict[str, set[int]] = {}
    for j in range(len(ops)):
        gr = plan.grads[j]
        if gr is None or not plan.needed[j]:
            continue
        for key in gr.grad_params:
            owner = key.rsplit(".", 1)[0]
            owner_keys.setdefault(owner, set()).add(key)
            owner_uses.setdefault(owner, set()).add(j)
    for owner, js in owner_uses.items():
        pb = sum(key_bytes[key] for key in owner_keys[owner])
        if pb <= 0:
            continue
        first = min(holder[key] for key in owner_keys[owner])
        u = b.op(
            f"{owner}/update",
            "update",
            anchor=b.anchor[first],
            # ~3 FLOPs per fp32 parameter, plus one add per extra micro-batch's gradient
            flops=(3.0 + (mb - 1)) * pb / 4.0,
            bytes_read=3.0 * pb,  # weight, gradient, momentum
            bytes_written=2.0 * pb,  # weight, momentum
            param_bytes=2.0 * pb,  # gradient buffer + momentum
        )
        # the weight gradient accumulates along the uses, last use first (the order the backward
        # reaches them), micro-batch after micro-batch, and the sum goes to the update: one
        # weight-sized tensor in flight, not one per use. Within a micro-batch the edges run from
        # later to earlier forward ops, like every backward edge, and between micro-batches only
        # from micro-batch k to k + 1, so no cycle can form.
        chain = [grad_of[k][j] for k in range(mb) for j in sorted(js, reverse=True)] + [u]
        for x, y in itertools.pairwise(chain):
            b.edge(x, y, pb)
