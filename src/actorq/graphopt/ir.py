"""Graph IR: the computation graph every graphopt tool reads.

A :class:`Graph` is a DAG of ops. Each op has a type, FLOPs, bytes read and written (its memory
traffic, which the simulator's roofline uses), output bytes (the memory it allocates; 0 for a view
that aliases its input) and parameter bytes (weights, gradient buffers or optimizer state that
stay resident on its device for the whole step). Each edge carries the size of the tensor it moves
(what a cross-device transfer costs). Costs are per step, the same quantities GO's simulator and
Placeto's use (Zhou et al., NeurIPS 2020; Addanki et al., NeurIPS 2019).

Arrays, not objects: an 80k-op graph is a handful of numpy arrays, so the simulator and the
environments never loop over Python objects.

On-disk formats (both safe: no pickle, no code):

* ``.json``: ``{"format": "actorq.graphopt/1", "name": ..., "meta": {...}, "ops": [{"name",
  "type", "flops", "bytes_read", "bytes_written", "out_bytes", "param_bytes"}, ...], "edges":
  [{"src", "dst", "bytes"}, ...]}``, where ``src``/``dst`` are op names or indices. Meant for
  small, hand-written graphs.
* ``.npz`` (``numpy.savez_compressed``, loaded with ``allow_pickle=False``): the arrays named as
  the :class:`Graph` fields, op types as int codes into ``type_vocab``, plus a JSON ``header``
  string (format, name, meta). Meant for the large generated graphs.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from actorq.errors import GraphError
from actorq.graphopt.files import (
    LIMIT,
    check_unicode,
    naming,
    number,
    parse_json,
    read_json,
    short,
    shown,
)
from actorq.inputs import stat_path

FORMAT = "actorq.graphopt/1"
COST_FIELDS = ("flops", "bytes_read", "bytes_written", "out_bytes", "param_bytes")


@dataclasses.dataclass(eq=False)
class Graph:
    """A computation graph (a DAG). Validated on construction: a bad graph never gets further.

    Raises :class:`GraphError` naming the op or edge for mismatched lengths, negative or
    non-finite costs, edges to ops that do not exist, self-loops and cycles.
    """

    name: str
    op_names: list[str]
    op_types: list[str]
    flops: np.ndarray
    bytes_read: np.ndarray
    bytes_written: np.ndarray
    out_bytes: np.ndarray
    param_bytes: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    edge_bytes: np.ndarray
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    anchor: np.ndarray | None = None
    """Colocation hint: ``anchor[i]`` is the op whose device op ``i`` shares by default (a
    gradient op its forward op, as TensorFlow's ``colocate_gradients_with_ops``); ``i`` itself
    when none. Baselines use it; the simulator does not enforce it."""

    def __post_init__(self) -> None:
        n = len(self.op_names)
        if n == 0:
            raise GraphError(f"graph {self.name!r} has no ops")
        if len(self.op_types) != n:
            raise GraphError(f"graph {self.name!r}: {len(self.op_types)} op types for {n} ops")
        dup = _first_duplicate(self.op_names)  # errors, results and files name ops by name
        if dup is not None:
            raise GraphError(f"graph {self.name!r}: op name {dup!r} is used twice")
        for f in COST_FIELDS:
            a = _array(getattr(self, f), np.float64, self.name, f)
            if a.shape != (n,):
                raise GraphError(
                    f"graph {self.name!r}: field {f!r} has shape {a.shape}, not ({n},)"
                )
            bad = np.flatnonzero(~_in_range(a))
            if bad.size:
                i = int(bad[0])
                raise GraphError(
                    f"graph {self.name!r}: op {self.op_names[i]!r} has {f}={float(a[i])!r} "
                    f"(costs must be finite, >= 0 and <= {LIMIT:g})"
                )
            setattr(self, f, a)
        self.src = _array(self.src, np.int64, self.name, "src").reshape(-1)
        self.dst = _array(self.dst, np.int64, self.name, "dst").reshape(-1)
        self.edge_bytes = _array(self.edge_bytes, np.float64, self.name, "edge_bytes").reshape(-1)
        m = self.src.size
        if self.dst.size != m or self.edge_bytes.size != m:
            raise GraphError(f"graph {self.name!r}: src, dst and edge_bytes differ in length")
        out = np.flatnonzero((self.src < 0) | (self.src >= n) | (self.dst < 0) | (self.dst >= n))
        if out.size:
            e = int(out[0])
            raise GraphError(
                f"graph {self.name!r}: edge {e} ({self.src[e]} -> {self.dst[e]}) names an op "
                f"that does not exist (ops are 0..{n - 1})"
            )
        bad = np.flatnonzero(~_in_range(self.edge_bytes))
        if bad.size:
            e = int(bad[0])
            raise GraphError(
                f"graph {self.name!r}: edge {self.op_names[self.src[e]]!r} -> "
                f"{self.op_names[self.dst[e]]!r} has bytes={float(self.edge_bytes[e])!r} "
                f"(must be finite, >= 0 and <= {LIMIT:g})"
            )
        loops = np.flatnonzero(self.src == self.dst)
        if loops.size:
            raise GraphError(
                f"graph {self.name!r}: op {self.op_names[self.src[loops[0]]]!r} feeds itself "
                "(a cycle)"
            )
        if self.anchor is None:
            self.anchor = np.arange(n, dtype=np.int64)
        self.anchor = _array(self.anchor, np.int64, self.name, "anchor").reshape(-1)
        if self.anchor.shape != (n,):
            raise GraphError(f"graph {self.name!r}: anchor has {self.anchor.size} entries, not {n}")
        bad = np.flatnonzero((self.anchor < 0) | (self.anchor >= n))
        if bad.size == 0:
            bad = np.flatnonzero(self.anchor[self.anchor] != self.anchor)
        if bad.size:
            i = int(bad[0])
            raise GraphError(
                f"graph {self.name!r}: op {self.op_names[i]!r} has anchor {self.anchor[i]}, "
                "which must be an op anchored to itself"
            )
        _ = self.topo_order  # raises on a cycle

    # ---- derived structure, computed once per graph -------------------------------------------
    @property
    def num_ops(self) -> int:
        return len(self.op_names)

    @property
    def num_edges(self) -> int:
        return int(self.src.size)

    @functools.cached_property
    def out_ptr(self) -> np.ndarray:
        """CSR pointer: op ``u``'s out-edges are ``out_edges[out_ptr[u]:out_ptr[u + 1]]``."""
        counts = np.bincount(self.src, minlength=self.num_ops)
        ptr = np.zeros(self.num_ops + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        return ptr

    @functools.cached_property
    def out_edges(self) -> np.ndarray:
        """Edge ids sorted by source op (stable, so edge order within an op is kept)."""
        return np.argsort(self.src, kind="stable").astype(np.int64)

    @functools.cached_property
    def in_degree(self) -> np.ndarray:
        return np.bincount(self.dst, minlength=self.num_ops).astype(np.int64)

    @functools.cached_property
    def out_degree(self) -> np.ndarray:
        return np.bincount(self.src, minlength=self.num_ops).astype(np.int64)

    @functools.cached_property
    def topo_order(self) -> np.ndarray:
        """A topological order (Kahn's, smallest index first among ready ops, so it is stable).

        Raises :class:`GraphError` naming an op on a cycle.
        """
        order = _kahn(self.num_ops, self.out_ptr, self.dst[self.out_edges], self.in_degree.copy())
        if order.size < self.num_ops:
            left = np.ones(self.num_ops, dtype=bool)
            left[order] = False
            cyc = _find_cycle(self, left)
            names = " -> ".join(repr(self.op_names[i]) for i in cyc)
            raise GraphError(f"graph {self.name!r} has a cycle: {names}")
        return order

    @functools.cached_property
    def topo_rank(self) -> np.ndarray:
        """Position of each op in :attr:`topo_order`."""
        rank = np.empty(self.num_ops, dtype=np.int64)
        rank[self.topo_order] = np.arange(self.num_ops)
        return rank

    @functools.cached_property
    def depth(self) -> np.ndarray:
        """Longest path (in edges) from any source to each op."""
        d = [0] * self.num_ops
        ptr, nbr = self.out_ptr.tolist(), self.dst[self.out_edges].tolist()
        for u in self.topo_order.tolist():
            du = d[u] + 1
            for v in nbr[ptr[u] : ptr[u + 1]]:
                if d[v] < du:
                    d[v] = du
        return np.array(d, dtype=np.int64)

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ops": self.num_ops,
            "edges": self.num_edges,
            "gflops": float(self.flops.sum() / 1e9),
            "param_mb": float(self.param_bytes.sum() / 2**20),
            "activation_mb": float(self.out_bytes.sum() / 2**20),
            **{k: v for k, v in self.meta.items() if isinstance(v, (int, float, str, bool))},
        }

    # ---- saving and loading ------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write ``.json`` or ``.npz`` (by suffix), whole or not at all
        (:func:`actorq.output.write_output`: a fresh exclusive temporary file, fsync'd and
        renamed, so processes building the same cached graph at once never write into each
        other's copy); a file that cannot be written is one :class:`GraphError` line."""
        from actorq.output import write_output

        p = Path(path)
        content: str | Callable[[BinaryIO], None]
        if p.suffix == ".json":
            content = json.dumps(self.to_json())
        elif p.suffix == ".npz":
            vocab = sorted(set(self.op_types))
            code = {t: i for i, t in enumerate(vocab)}
            header = {"format": FORMAT, "name": self.name, "meta": self.meta, "type_vocab": vocab}

            def content(f: BinaryIO) -> None:
                np.savez_compressed(
                    f,
                    header=np.array(json.dumps(header)),
                    op_names=np.array(self.op_names, dtype=str),
                    op_type_codes=np.array([code[t] for t in self.op_types], dtype=np.int32),
                    src=self.src,
                    dst=self.dst,
                    edge_bytes=self.edge_bytes,
                    anchor=np.asarray(self.anchor),
                    **{k: getattr(self, k) for k in COST_FIELDS},
                )
        else:
            raise GraphError(f"unknown graph file type {p.suffix!r} (use .json or .npz)")
        write_output(p, content, "graph", error=GraphError)
        return p

    def to_json(self) -> dict[str, Any]:
        assert self.anchor is not None
        ops = [
            {"name": self.op_names[i], "type": self.op_types[i]}
            | {f: float(getattr(self, f)[i]) for f in COST_FIELDS}
            | ({"anchor": int(self.anchor[i])} if self.anchor[i] != i else {})
            for i in range(self.num_ops)
        ]
        edges = [
            {"src": int(s), "dst": int(d), "bytes": float(b)}
            for s, d, b in zip(self.src, self.dst, self.edge_bytes, strict=True)
        ]
        return {"format": FORMAT, "name": self.name, "meta": self.meta, "ops": ops, "edges": edges}


def _kahn(n: int, ptr: np.ndarray, nbr: np.ndarray, indeg: np.ndarray) -> np.ndarray:
    import heapq

    ready = [int(i) for i in np.flatnonzero(indeg == 0)]
    heapq.heapify(ready)
    order: list[int] = []
    ptr_l, nbr_l, indeg_l = ptr.tolist(), nbr.tolist(), indeg.tolist()
    while ready:
        u = heapq.heappop(ready)
        order.append(u)
        for v in nbr_l[ptr_l[u] : ptr_l[u + 1]]:
            indeg_l[v] -= 1
            if indeg_l[v] == 0:
                heapq.heappush(ready, v)
    return np.array(order, dtype=np.int64)


def _find_cycle(g: Graph, left: np.ndarray) -> list[int]:
    """Ops left after Kahn's all have a predecessor that is also left: walk back to a repeat."""
    pred: dict[int, int] = {}
    for s, d in zip(g.src.tolist(), g.dst.tolist(), strict=True):
        if left[s] and left[d]:
            pred.setdefault(d, s)
    u = int(np.flatnonzero(left)[0])
    seen: dict[int, int] = {}
    path: list[int] = []
    while u not in seen:
        seen[u] = len(path)
        path.append(u)
        u = pred[u]
    cyc = path[seen[u] :][::-1]
    return [*cyc, cyc[0]]


def _array(x: Any, dtype: type[np.generic], graph: str, field: str) -> np.ndarray:
    """``x`` as a contiguous array of ``dtype``. Integers must come as integers: a float index
    would be truncated silently, a NaN one would become an arbitrary int64."""
    a = np.asarray(x)
    want_int = np.issubdtype(dtype, np.integer)
    kinds = "iu" if want_int else "iuf"
    if a.size and a.dtype.kind not in kinds:
        what = "integers" if want_int else "real numbers"
        raise GraphError(f"graph {graph!r}: field {field!r} must hold {what}, not {a.dtype}")
    return np.ascontiguousarray(a, dtype=dtype)


def _first_duplicate(names: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for nm in names:
        if nm in seen:
            return nm
        seen.add(nm)
    return None


def _in_range(a: np.ndarray) -> np.ndarray:
    """Which entries are valid costs: finite, >= 0 and <= LIMIT (NaN fails every comparison)."""
    return (a >= 0) & (a <= LIMIT)


def _op_ref(x: Any, index_of: dict[str, int], n: int, what: str) -> int:
    """An op named by name or index (not a bool or a float, which JSON would let through)."""
    if isinstance(x, str):
        if x not in index_of:
            raise GraphError(f"{what} names op {short(x)}, which does not exist")
        return index_of[x]
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        if not 0 <= x < n:
            raise GraphError(f"{what} names op {short(x, 30)}, which does not exist (0..{n - 1})")
        return int(x)
    raise GraphError(f"{what} must name an op by name or index, got {short(x)}")


def make_graph(
    name: str,
    ops: Sequence[dict[str, Any]],
    edges: Sequence[tuple[int | str, int | str, float] | dict[str, Any]],
    meta: dict[str, Any] | None = None,
) -> Graph:
    """Build a graph from op dicts (``name``, ``type`` and the cost fields; missing costs are 0)
    and edges ``(src, dst, bytes)`` or ``{"src", "dst", "bytes"}`` naming ops by name or index.

    Everything is type-checked (this is what a hand-written JSON file reaches): any mistake is a
    one-line :class:`GraphError` naming the op or edge."""
    if not isinstance(name, str):
        raise GraphError(f"a graph's name must be a string, got {short(name)}")
    g = f"graph {short(name)}"
    if not isinstance(ops, (list, tuple)):
        raise GraphError(f"{g}: 'ops' must be a list of objects, got {short(ops)}")
    if not isinstance(edges, (list, tuple)):
        raise GraphError(f"{g}: 'edges' must be a list, got {short(edges)}")
    if meta is not None and not isinstance(meta, dict):
        raise GraphError(f"{g}: 'meta' must be an object, got {short(meta)}")
    names: list[str] = []
    types: list[str] = []
    for i, o in enumerate(ops):
        if not isinstance(o, dict):
            raise GraphError(f"{g}: ops[{i}] must be an object, got {short(o)}")
        nm, tp = o.get("name", f"op{i}"), o.get("type", "op")
        if not isinstance(nm, str) or not isinstance(tp, str):
            bad, field = (nm, "name") if not isinstance(nm, str) else (tp, "type")
            raise GraphError(f"{g}: ops[{i}] has {field}={short(bad)} (must be a string)")
        names.append(nm)
        types.append(tp)
    dup = _first_duplicate(names)
    if dup is not None:
        raise GraphError(f"{g}: op name {dup!r} is used twice")
    index_of = {nm: i for i, nm in enumerate(names)}
    n = len(names)
    cols: dict[str, list[float]] = {f: [] for f in COST_FIELDS}
    for i, o in enumerate(ops):
        unknown = set(o) - {"name", "type", "anchor", *COST_FIELDS}
        if unknown:
            raise GraphError(f"{g}: op {names[i]!r} has unknown field(s) {sorted(unknown)}")
        for f in COST_FIELDS:
            v = o.get(f, 0.0)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise GraphError(f"{g}: op {names[i]!r} has non-numeric {f}={short(v)}")
            cols[f].append(number(v, f"{g}: op {names[i]!r}", f))

    src, dst, eb = [], [], []
    for k, e in enumerate(edges):
        if isinstance(e, dict):
            missing = {"src", "dst", "bytes"} - set(e)
            if missing:
                raise GraphError(f"{g}: edge {k} lacks field(s) {sorted(missing)}")
            s, d, b = e["src"], e["dst"], e["bytes"]
        elif isinstance(e, (list, tuple)) and len(e) == 3:
            s, d, b = e
        else:
            raise GraphError(
                f"{g}: edge {k} must be {{'src', 'dst', 'bytes'}} or [src, dst, bytes], "
                f"got {short(e)}"
            )
        src.append(_op_ref(s, index_of, n, f"{g}: edge {k}"))
        dst.append(_op_ref(d, index_of, n, f"{g}: edge {k}"))
        eb.append(number(b, f"{g}: edge {names[src[-1]]!r} -> {names[dst[-1]]!r}", "bytes"))
    anchor = [
        _op_ref(o["anchor"], index_of, n, f"{g}: op {names[i]!r}: anchor") if "anchor" in o else i
        for i, o in enumerate(ops)
    ]
    return Graph(
        name=name,
        anchor=np.array(anchor, dtype=np.int64),
        op_names=names,
        op_types=types,
        **{f: np.array(cols[f], dtype=np.float64) for f in COST_FIELDS},
        src=np.array(src, dtype=np.int64),
        dst=np.array(dst, dtype=np.int64),
        edge_bytes=np.array(eb, dtype=np.float64),
        meta=dict(meta or {}),
    )


def load_graph(path: str | Path) -> Graph:
    """Read a graph written by :meth:`Graph.save` (or hand-written JSON). Never unpickles.

    Anything wrong with the file is one :class:`GraphError` line that starts with the path."""
    p = Path(path)
    st = stat_path(p, shown(p), GraphError)
    if st is None:
        raise GraphError(f"graph file not found: {shown(p)}")
    if not stat.S_ISREG(st.st_mode):  # a directory, FIFO, device: never opened
        raise GraphError(f"{shown(p)} is not a regular file; give a graph file")
    with naming(p):
        if p.suffix == ".json":
            return _graph_from_json(read_json(p), p.stem)
        if p.suffix == ".npz":
            return _graph_from_npz(p)
    raise GraphError(f"unknown graph file type {p.suffix!r} (use .json or .npz)")


def _graph_from_json(d: Any, stem: str) -> Graph:
    if not isinstance(d, dict):
        raise GraphError("expected a JSON object with 'ops' and 'edges'")
    for k in ("ops", "edges"):
        if k not in d:
            raise GraphError(f"missing field {k!r}")
    if d.get("format", FORMAT) != FORMAT:
        raise GraphError(f"unknown format {short(d.get('format'))} (expected {FORMAT!r})")
    return make_graph(d.get("name", stem), d["ops"], d["edges"], d.get("meta"))


_NPZ_KINDS = {
    "header": "U",
    "op_names": "U",
    "op_type_codes": "iu",
    "src": "iu",
    "dst": "iu",
    "anchor": "iu",
    "edge_bytes": "iuf",
    **dict.fromkeys(COST_FIELDS, "iuf"),
}


def _graph_from_npz(p: Path) -> Graph:
    # Read every array inside one try: np.load reads members lazily, and a corrupt or hostile
    # archive fails in zipfile, zlib or numpy's header parser with a dozen exception types
    # (BadZipFile, zlib.error, EOFError, ValueError, RuntimeError for "encrypted",
    # NotImplementedError for an unknown compression method...). This block only decodes bytes,
    # so any exception here means the file is unreadable, whatever its type.
    try:
        with p.open("rb") as f:
            magic = f.read(4)
        # np.load takes anything that is not a zip or .npy header for a pickle, and says so: a
        # misleading message for a file that is simply not an npz archive
        if magic not in (b"PK\x03\x04", b"PK\x05\x06"):
            raise GraphError("not an npz archive (not a zip file)")
        with np.load(p, allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise GraphError("not an npz archive (a single .npy array?)")
            missing = sorted({*_NPZ_KINDS} - {"anchor"} - set(z.files))
            if missing:
                raise GraphError(f"missing field(s) {missing}")
            arrays = {k: z[k] for k in _NPZ_KINDS if k in z.files}
    except GraphError:
        raise
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        first = first if len(first) <= 100 else first[:97] + "..."
        raise GraphError(f"not a readable npz file ({first})") from None
    for k, a in arrays.items():
        if a.dtype.kind not in _NPZ_KINDS[k] or a.ndim != (0 if k == "header" else 1):
            raise GraphError(f"field {k!r} is a {a.ndim}-d {a.dtype} array, which it cannot be")
    # the reader of .json graphs: NaN, 1e999 or a duplicate key is refused here as there
    header = parse_json(str(arrays["header"]), "header")
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        fmt = header.get("format") if isinstance(header, dict) else None
        raise GraphError(f"unknown format {short(fmt)} (expected {FORMAT!r})")
    vocab, name, meta = header.get("type_vocab"), header.get("name"), header.get("meta", {})
    if not isinstance(vocab, list) or not all(isinstance(t, str) for t in vocab):
        raise GraphError("header: 'type_vocab' must be a list of strings")
    if not isinstance(name, str) or not isinstance(meta, dict):
        raise GraphError("header: 'name' must be a string and 'meta' an object")
    names = [str(s) for s in arrays["op_names"]]
    check_unicode(names, "op names")  # the header's text: checked by parse_json
    codes = arrays["op_type_codes"]
    if codes.size and (codes.min() < 0 or codes.max() >= len(vocab)):
        raise GraphError("op type code out of range")
    if codes.shape != arrays["op_names"].shape:
        raise GraphError("op_type_codes and op_names differ in length")
    return Graph(
        name=name,
        op_names=names,
        op_types=[vocab[c] for c in codes.tolist()],
        **{f: arrays[f] for f in COST_FIELDS},
        src=arrays["src"],
        dst=arrays["dst"],
        edge_bytes=arrays["edge_bytes"],
        meta=meta,
        anchor=arrays.get("anchor"),
    )
