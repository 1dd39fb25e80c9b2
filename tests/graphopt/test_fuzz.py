"""Fuzzing every graphopt file reader and ``actorq graphopt baselines`` with hypothesis.

Random bytes, truncated valid files, random JSON values and valid files with fields mutated to
huge, negative, non-finite or wrong-typed values: each call either succeeds or raises an
:class:`ActorQError` whose message is one line (the CLI: exit 2 and one ``actorq: error:`` line),
never another exception, and nothing is written to the working directory but the ``--json``
output of a run that succeeded. RuntimeWarnings are errors here: an overflow or a 0/0 inside the
simulator or a baseline means a value got past the readers that should not have.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from actorq.cli import main
from actorq.errors import ActorQError
from actorq.graphopt.baselines import NAMES
from actorq.graphopt.cluster import get_cluster, load_cluster
from actorq.graphopt.ir import load_graph, make_graph
from actorq.graphopt.suite import PREFIX, get_graph, is_graph_name, variant

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
GRAPH_TEXT = (EXAMPLES / "mlp_step.json").read_text()
CLUSTER_TEXT = (EXAMPLES / "cluster_2gpu_mixed.json").read_text()
GRAPH = json.loads(GRAPH_TEXT)
CLUSTER = json.loads(CLUSTER_TEXT)

# ~150 examples keep the file under 30 s; ACTORQ_FUZZ_EXAMPLES=5000 for a deeper search
EXAMPLES_PER_TEST = int(os.environ.get("ACTORQ_FUZZ_EXAMPLES", "150"))
FAST = settings(
    max_examples=EXAMPLES_PER_TEST,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---- strategies ------------------------------------------------------------------------------

# numbers a hostile file might hold: huge and tiny, negative, non-finite, past float range
NASTY_NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=10**20, max_value=10**450),
    st.integers(max_value=-1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -0.0, 1e30, 1e31, 1e-30, 1e-31, 5e-324, 1.7e308, 2**63, 2**64]),
)
# text, sometimes with lone surrogates: JSON can spell them ("\\ud800") but no UTF-8 output can
TEXT = st.one_of(
    st.text(max_size=8), st.text(st.characters(categories=["Cs"]), min_size=1, max_size=2)
)
SCALARS = st.one_of(st.none(), st.booleans(), NASTY_NUMBERS, TEXT)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)


def _paths(v: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document a value can be replaced or removed."""
    if prefix:
        yield prefix
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, (*prefix, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, (*prefix, i))


GRAPH_PATHS = list(_paths(GRAPH))
CLUSTER_PATHS = list(_paths(CLUSTER))
# fields a valid file does not have, but which a reader must look at if present
EXTRA_CLUSTER_PATHS = [("links",), ("name",)]
EXTRA_GRAPH_PATHS = [("format",), ("ops", 0, "anchor"), ("edges", 0, "src")]


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any], paths: list[tuple[Any, ...]]) -> str:
    """``base`` with 1 to 3 mutations: a value replaced (by a nasty number or any JSON value),
    a key or list item removed, or a list item duplicated; as JSON text (NaN and Infinity
    written the way Python's json writes them, since that is what its reader accepts)."""
    d = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent: Any = d
        try:
            for k in path[:-1]:
                parent = parent[k]
            kind = draw(st.sampled_from(["number", "value", "remove", "duplicate"]))
            key = path[-1]
            if kind == "remove":
                del parent[key]
            elif kind == "duplicate" and isinstance(parent, list):
                parent.insert(key, copy.deepcopy(parent[key]))
            else:
                parent[key] = draw(NASTY_NUMBERS if kind == "number" else JSON_VALUES)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed or replaced what this path runs through
    return json.dumps(d)


def _leaf_paths(d: Any, kind: type) -> list[tuple[Any, ...]]:
    """Paths of the leaves of type ``kind`` (``float``: every number, ``str``: every string)."""

    def at(path: tuple[Any, ...]) -> Any:
        v = d
        for k in path:
            v = v[k]
        return v

    def wanted(v: Any) -> bool:
        if kind is str:
            return isinstance(v, str)
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    return [p for p in _paths(d) if wanted(at(p))]


# edge values of the documented range (0 or 1e-30 up to 1e30) and anything between
IN_RANGE = st.one_of(
    st.sampled_from([0, 0.0, 1e-30, 1e30, 1, 2**53]), st.floats(min_value=1e-30, max_value=1e30)
)
# strings nothing else refers to (op names are, by edges and anchors; "format" must be exact)
FREE_TEXT = {"type", "note"}


@st.composite
def extreme_but_valid(draw: st.DrawFn, base: dict[str, Any]) -> str:
    """``base`` with 1 to 6 of its numbers replaced by values at or inside the allowed range, or
    its strings by any text (names, types, notes): mostly accepted by the readers, so the
    simulator, every baseline and the printing of results run on them."""
    d = copy.deepcopy(base)
    numbers = _leaf_paths(base, float)
    strings = [
        p
        for p in _leaf_paths(base, str)
        if p[-1] in FREE_TEXT or p == ("name",) or (p[0] == "devices" and p[-1] == "name")
    ]
    for _ in range(draw(st.integers(1, 6))):
        number = draw(st.booleans())
        path = draw(st.sampled_from(numbers if number else strings))
        parent: Any = d
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = draw(IN_RANGE if number else TEXT)
    return json.dumps(d)


def _write_text_or_bytes(p: Path, data: str | bytes) -> None:
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))


def file_contents(valid: str, base: dict[str, Any], paths: list[tuple[Any, ...]]) -> Any:
    """Random bytes, a truncated valid file, any JSON value, or a mutated valid file (broken, or
    with numbers at the edges of the allowed range)."""
    return st.one_of(
        st.binary(max_size=200),
        st.integers(0, len(valid)).map(lambda k: valid[:k]),
        JSON_VALUES.map(json.dumps),
        mutated(base, paths),
        extreme_but_valid(base),
    )


# ---- the checks ------------------------------------------------------------------------------


@contextlib.contextmanager
def in_empty_dir() -> Iterator[Path]:
    """A fresh working directory per example (hypothesis runs many in one test function, so
    pytest's function-scoped tmp_path would be shared between them)."""
    with tempfile.TemporaryDirectory() as d, contextlib.chdir(d):
        yield Path(d)


def accepts_or_one_line(call: Callable[[], Any]) -> bool:
    """Run ``call``: True if it succeeded, False if it raised a one-line ActorQError; any other
    exception (or a RuntimeWarning) propagates and fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        try:
            call()
        except ActorQError as e:
            msg = str(e)
            assert msg and "\n" not in msg, repr(msg)
            event("rejected")  # --hypothesis-show-statistics: how much got past the readers
            return False
    event("accepted")
    return True


def check_reader(read: Callable[[Path], Any], name: str, data: str | bytes) -> None:
    with in_empty_dir() as d:
        p = d / name
        _write_text_or_bytes(p, data)
        before = sorted(os.listdir(d))
        accepts_or_one_line(lambda: read(p))
        assert sorted(os.listdir(d)) == before


GRAPH_FILES = file_contents(GRAPH_TEXT, GRAPH, GRAPH_PATHS + EXTRA_GRAPH_PATHS)
CLUSTER_FILES = file_contents(CLUSTER_TEXT, CLUSTER, CLUSTER_PATHS + EXTRA_CLUSTER_PATHS)
GRAPH_OK = st.one_of(st.just(GRAPH_TEXT), extreme_but_valid(GRAPH))
CLUSTER_OK = st.one_of(st.just(CLUSTER_TEXT), extreme_but_valid(CLUSTER))


@FAST
@given(GRAPH_FILES)
def test_graph_json_readers(data: str | bytes) -> None:
    check_reader(load_graph, "g.json", data)
    check_reader(lambda p: get_graph(str(p)), "g.json", data)


@FAST
@given(CLUSTER_FILES)
def test_cluster_json_readers(data: str | bytes) -> None:
    check_reader(load_cluster, "c.json", data)
    check_reader(lambda p: get_cluster(str(p)), "c.json", data)


def _npz_bytes() -> bytes:
    g = make_graph("g", [{"name": "a", "out_bytes": 4}, {"name": "b"}], [("a", "b", 4)])
    with tempfile.TemporaryDirectory() as d:
        return g.save(Path(d) / "g.npz").read_bytes()


NPZ = _npz_bytes()
NPZ_ARRAYS = st.one_of(
    st.lists(
        NASTY_NUMBERS.filter(lambda v: not isinstance(v, int) or abs(v) < 2**63), max_size=3
    ).map(np.array),
    st.lists(st.text(max_size=4), max_size=3).map(np.array),
    JSON_VALUES.map(lambda v: np.array(json.dumps(v))),
)
NPZ_FIELDS = ["header", "op_names", "op_type_codes", "src", "dst", "edge_bytes", "flops", "anchor"]


@st.composite
def npz_contents(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["bytes", "truncated", "flipped", "arrays"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "truncated":
        return NPZ[: draw(st.integers(0, len(NPZ)))]
    if kind == "flipped":  # a corrupted byte inside a valid archive
        i = draw(st.integers(0, len(NPZ) - 1))
        return NPZ[:i] + bytes([NPZ[i] ^ draw(st.integers(1, 255))]) + NPZ[i + 1 :]
    with np.load(io.BytesIO(NPZ), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    for field in draw(st.lists(st.sampled_from(NPZ_FIELDS), min_size=1, max_size=3)):
        if draw(st.booleans()):
            arrays[field] = draw(NPZ_ARRAYS)
        else:
            arrays.pop(field, None)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@FAST
@given(npz_contents())
def test_graph_npz_reader(data: bytes) -> None:
    check_reader(load_graph, "g.npz", data)


@FAST
@given(
    st.one_of(
        st.tuples(GRAPH_FILES, CLUSTER_OK),  # one file hostile, the other fine
        st.tuples(GRAPH_OK, CLUSTER_FILES),
        st.tuples(GRAPH_OK, CLUSTER_OK),  # both fine but extreme: the whole run happens
    )
)
def test_cli_baselines(files: tuple[str | bytes, str | bytes]) -> None:
    graph, cluster = files
    with in_empty_dir() as d:
        _write_text_or_bytes(d / "g.json", graph)
        _write_text_or_bytes(d / "c.json", cluster)
        argv = ["graphopt", "baselines", "--graph", "g.json", "--cluster", "c.json"]
        # strict UTF-8 streams, like a terminal's: StringIO would take text no terminal can show
        out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
        quiet = contextlib.redirect_stdout(out)
        with quiet, contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            rc = main([*argv, "--budget", "2", "--json", "out.json"])
        err.seek(0)
        event(f"exit status {rc}")
        if rc == 0:
            assert sorted(os.listdir(d)) == ["c.json", "g.json", "out.json"]

            def finite_only(s: str) -> Any:
                raise AssertionError(f"{s} in the --json output")

            out = json.loads((d / "out.json").read_text(), parse_constant=finite_only)
            assert len(out["rows"]) == len(NAMES)
        else:
            assert rc == 2
            lines = err.read().strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("actorq: error: "), lines
            assert sorted(os.listdir(d)) == ["c.json", "g.json"]


@FAST
@given(
    st.lists(st.sampled_from([*NAMES, "", " ", "psychic"]), max_size=4).map(",".join)
    | st.text(max_size=8)
)
@example(",")  # names no baseline: ran none and succeeded
@example("")
def test_cli_baselines_only(only: str) -> None:
    """``--only``: the named baselines' rows, at least one, or one line and no --json."""
    with in_empty_dir() as d:
        argv = ["graphopt", "baselines", "--graph", "synthetic-20-s0", "--budget", "2"]
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main([*argv, f"--only={only}", "--json", "out.json"])
        event(f"exit status {rc}")
        if rc == 0:
            rows = json.loads((d / "out.json").read_text())["rows"]
            named = {s.strip() for s in only.split(",")} - {""}
            assert rows and {r["baseline"] for r in rows} <= named
        else:
            lines = err.getvalue().strip().splitlines()
            assert rc == 2 and len(lines) == 1 and lines[0].startswith("actorq: error: "), lines
            assert not (d / "out.json").exists()


VARIANT_NAMES = st.one_of(
    st.builds(
        "{}-v{}".format,
        st.sampled_from(sorted(PREFIX.values())),
        st.integers(min_value=10**6 + 1, max_value=10**30),
    ),
    st.from_regex(
        r"(inception|txl|rnnlm)-v(-[0-9]{1,3}|[0-9]{0,3}[ .e+x][0-9]{0,2}|)", fullmatch=True
    ),
    st.from_regex(r"(gpt|transformer-xl|)-v[0-9]{1,3}", fullmatch=True),
)


@FAST
@given(VARIANT_NAMES)
def test_variant_names_past_the_seed_range_or_malformed(name: str) -> None:
    """Names shaped like ``<family>-v<seed>`` that no variant has (seeds past the range, other
    prefixes, malformed seeds): one line, nothing built or written. Names in range build a
    model, too slow to fuzz here; :func:`variant`'s draws are fuzzed below instead."""
    with in_empty_dir() as d:
        assert not accepts_or_one_line(lambda: get_graph(name))
        assert os.listdir(d) == []
    assert not is_graph_name(name)


@FAST
@given(st.sampled_from(sorted(PREFIX)), st.integers(min_value=0, max_value=10**6))
def test_variant_draws_are_valid_model_configs(family: str, seed: int) -> None:
    e = variant(family, seed)
    ints = [v for v in e.config.values() if isinstance(v, int)]
    ints += [v for v in e.config.get("stages", ())]
    assert ints and all(v >= 1 for v in ints) and e.family == family
    assert all(all(n >= 1 for n in shape) for shape, _ in e.inputs)
    assert e == variant(family, seed)
