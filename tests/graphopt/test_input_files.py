"""Hostile graph and cluster files, and the ``actorq graphopt`` flags that name files.

Every bad file is one :class:`GraphError` line that starts with the file's path and says what is
wrong; through the CLI it is one ``actorq: error:`` line, exit status 2, and nothing written.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actorq.cli import main
from actorq.errors import GraphError
from actorq.graphopt.baselines import NAMES
from actorq.graphopt.cluster import get_cluster, load_cluster
from actorq.graphopt.ir import load_graph, make_graph
from actorq.graphopt.suite import get_graph

LIMIT = 1e30  # actorq.graphopt.files.LIMIT: the largest size, cost or rate a file may hold
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
GRAPH = json.loads((EXAMPLES / "mlp_step.json").read_text())
CLUSTER = json.loads((EXAMPLES / "cluster_2gpu_mixed.json").read_text())


class Raw(str):
    """JSON text placed verbatim, for what json.dumps cannot write (``1e400``, 5,000 digits)."""


def mutate(base: dict[str, Any], path: tuple[str | int, ...], value: Any) -> str:
    """``base`` as JSON text with the value at ``path`` replaced (appended, for index -1 past the
    end of a list)."""
    d = copy.deepcopy(base)
    obj: Any = d
    for k in path[:-1]:
        obj = obj[k]
    raw = isinstance(value, Raw)
    obj[path[-1]] = "@RAW@" if raw else value
    text = json.dumps(d)  # allow_nan: NaN and Infinity are written as Python's json does
    return text.replace('"@RAW@"', value) if raw else text


def one_line(e: pytest.ExceptionInfo[GraphError], path: Path) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    return msg


GRAPH_CASES: list[tuple[str, str | bytes, str]] = [
    ("not-utf8", b'\xff\xfe{"ops": []}', "not UTF-8"),
    ("truncated", json.dumps(GRAPH)[:200], "not valid JSON"),
    ("huge-int", mutate(GRAPH, ("ops", 1, "flops"), 10**400), "out of range"),
    ("5000-digits", mutate(GRAPH, ("ops", 1, "flops"), Raw("9" * 5000)), "out of range"),
    ("1e400", mutate(GRAPH, ("ops", 1, "flops"), Raw("1e400")), "'1e400' is out of range"),
    ("nan", mutate(GRAPH, ("ops", 1, "flops"), float("nan")), "NaN is not allowed"),
    ("inf-edge", mutate(GRAPH, ("edges", 0, "bytes"), float("inf")), "Infinity is not allowed"),
    ("nan-meta", mutate(GRAPH, ("meta", "x"), float("nan")), "NaN is not allowed"),
    ("negative", mutate(GRAPH, ("ops", 1, "bytes_read"), -1), "'fc1': bytes_read=-1"),
    ("too-big", mutate(GRAPH, ("ops", 1, "out_bytes"), 1e31), "'fc1': out_bytes=1e+31"),
    ("string-number", mutate(GRAPH, ("ops", 1, "flops"), "5"), "non-numeric flops='5'"),
    ("bool-number", mutate(GRAPH, ("edges", 0, "bytes"), True), "bytes must be a number"),
    ("ops-object", mutate(GRAPH, ("ops",), {"a": 1}), "'ops' must be a list"),
    ("op-list", mutate(GRAPH, ("ops", 1), [1, 2]), "ops[1] must be an object"),
    ("name-list", mutate(GRAPH, ("ops", 1, "name"), ["fc1"]), "ops[1] has name=['fc1']"),
    ("edges-string", mutate(GRAPH, ("edges",), "x->fc1"), "'edges' must be a list"),
    ("edge-pair", mutate(GRAPH, ("edges", 0), ["x", "fc1"]), "or [src, dst, bytes]"),
    ("edge-number", mutate(GRAPH, ("edges", 0), 7), "or [src, dst, bytes]"),
    ("edge-no-bytes", mutate(GRAPH, ("edges", 0), {"src": "x", "dst": "fc1"}), "['bytes']"),
    ("unknown-op", mutate(GRAPH, ("edges", 0, "src"), "nope"), "'nope', which does not exist"),
    ("index-out", mutate(GRAPH, ("edges", 0, "dst"), 99), "names op 99, which does not exist"),
    ("index-float", mutate(GRAPH, ("edges", 0, "dst"), 1.0), "by name or index, got 1.0"),
    ("index-bool", mutate(GRAPH, ("edges", 0, "src"), False), "by name or index, got False"),
    ("self-loop", mutate(GRAPH, ("edges", 0, "dst"), "x"), "'x' feeds itself"),
    ("cycle", mutate(GRAPH, ("edges", 0, "src"), "fc1/update"), "has a cycle"),
    ("duplicate-op", mutate(GRAPH, ("ops", 2, "name"), "fc1"), "'fc1' is used twice"),
    ("anchor-float", mutate(GRAPH, ("ops", 4, "anchor"), 3.0), "anchor must name an op"),
    ("meta-list", mutate(GRAPH, ("meta",), [1]), "'meta' must be an object"),
    ("name-number", mutate(GRAPH, ("name",), 5), "name must be a string"),
    ("surrogate", mutate(GRAPH, ("name",), "\ud800"), "lone surrogate '\\ud800'"),
    ("top-list", "[1, 2]", "expected a JSON object"),
    ("duplicate-key", '{"ops": [], "edges": [], "ops": []}', "'ops' appears twice"),
    ("deep", "[" * 100_000, "nested too deeply"),
    ("empty", "", "not valid JSON"),
]


@pytest.mark.parametrize(
    "text, needle", [c[1:] for c in GRAPH_CASES], ids=[c[0] for c in GRAPH_CASES]
)
def test_bad_graph_json(tmp_path: Path, text: str | bytes, needle: str) -> None:
    p = tmp_path / "g.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(GraphError) as e:
        load_graph(p)
    assert needle in one_line(e, p)
    with pytest.raises(GraphError) as e:  # what the CLI and the environments call
        get_graph(str(p))
    assert needle in one_line(e, p)


CLUSTER_CASES: list[tuple[str, str | bytes, str]] = [
    ("not-utf8", b'{"devices": "\xe9"}', "not UTF-8"),
    ("truncated", json.dumps(CLUSTER)[:50], "not valid JSON"),
    ("huge-int", mutate(CLUSTER, ("devices", 0, "memory"), 10**400), "out of range"),
    ("1e400", mutate(CLUSTER, ("devices", 0, "flop_s"), Raw("1e400")), "out of range"),
    ("nan", mutate(CLUSTER, ("link", "bandwidth"), float("nan")), "NaN is not allowed"),
    ("-inf", mutate(CLUSTER, ("link", "latency"), -float("inf")), "-Infinity is not allowed"),
    ("negative", mutate(CLUSTER, ("devices", 1, "memory"), -1), "devices[1]: memory=-1"),
    ("zero-rate", mutate(CLUSTER, ("devices", 0, "mem_bw"), 0), "devices[0]: mem_bw=0"),
    ("denormal", mutate(CLUSTER, ("devices", 0, "flop_s"), 5e-324), "flop_s=5e-324"),
    ("too-big", mutate(CLUSTER, ("link", "bandwidth"), 1e31), "link: bandwidth=1e+31"),
    ("string", mutate(CLUSTER, ("devices", 0, "flop_s"), "fast"), "must be a number"),
    ("devices-object", mutate(CLUSTER, ("devices",), {"a": 1}), "'devices' must be a non-empty"),
    ("device-list", mutate(CLUSTER, ("devices", 0), [1]), "devices[0] must be an object"),
    ("name-object", mutate(CLUSTER, ("devices", 0, "name"), {}), "'name' must be a string"),
    ("link-list", mutate(CLUSTER, ("link",), [1, 2]), "'link' must be an object"),
    ("links-number", mutate(CLUSTER, ("links",), 5), "'links' must be a list"),
    (
        "link-index-float",
        mutate(CLUSTER, ("links",), [{"src": 0, "dst": 1.5, "bandwidth": 1, "latency": 0}]),
        "dst must be an index",
    ),
    (
        "link-index-out",
        mutate(CLUSTER, ("links",), [{"src": 0, "dst": 7, "bandwidth": 1, "latency": 0}]),
        "links[0]: dst=7 does not exist",
    ),
    (
        "link-self",
        mutate(CLUSTER, ("links",), [{"src": 1, "dst": 1, "bandwidth": 1, "latency": 0}]),
        "two different devices",
    ),
    ("many-devices", mutate(CLUSTER, ("devices",), CLUSTER["devices"] * 1000), "at most 1024"),
    ("surrogate", mutate(CLUSTER, ("devices", 0, "name"), "a\udfff"), "lone surrogate"),
    ("top-list", "[]", "expected a JSON object"),
    ("deep", "{" * 100_000, "not valid JSON"),
]


@pytest.mark.parametrize(
    "text, needle", [c[1:] for c in CLUSTER_CASES], ids=[c[0] for c in CLUSTER_CASES]
)
def test_bad_cluster_json(tmp_path: Path, text: str | bytes, needle: str) -> None:
    p = tmp_path / "c.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(GraphError) as e:
        load_cluster(p)
    assert needle in one_line(e, p)
    with pytest.raises(GraphError) as e:
        get_cluster(str(p))
    assert needle in one_line(e, p)


def _npz(tmp_path: Path, name: str = "bad", **override: Any) -> Path:
    """A valid graph saved as ``name.npz``, with some arrays replaced."""
    g = make_graph("g", [{"name": "a", "out_bytes": 4}, {"name": "b"}], [("a", "b", 4)])
    p = g.save(tmp_path / "base.npz")
    with np.load(p, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(override)
    q = tmp_path / f"{name}.npz"
    np.savez(q, **arrays)
    return q


def test_bad_graph_npz(tmp_path: Path) -> None:
    good = _npz(tmp_path, "good")
    assert load_graph(good).num_ops == 2
    cases: list[tuple[Path, str]] = [
        (_npz(tmp_path, "a", src=np.array([0.5])), "field 'src' is a 1-d float64"),
        (_npz(tmp_path, "b", flops=np.array(["1", "2"])), "field 'flops' is a 1-d <U1"),
        (_npz(tmp_path, "c", flops=np.array([np.nan, 0.0])), "flops=nan"),
        (_npz(tmp_path, "d", edge_bytes=np.array([1e300])), "bytes=1e+300"),
        (_npz(tmp_path, "e", header=np.array("{not json")), "header: not valid JSON"),
        (_npz(tmp_path, "f", header=np.array("[1]")), "unknown format"),
        (_npz(tmp_path, "g", op_type_codes=np.array([0, 9], dtype=np.int32)), "out of range"),
        (_npz(tmp_path, "h", dst=np.array([2**40])), "does not exist"),
        (_npz(tmp_path, "i", src=np.zeros((1, 1), dtype=np.int64)), "2-d int64"),
        (_npz(tmp_path, "j", op_names=np.array(["a", "b\ud800"])), "lone surrogate"),
        (_npz(tmp_path, "k", op_names=np.array(["a", "a"])), "'a' is used twice"),
    ]
    trunc = tmp_path / "trunc.npz"
    trunc.write_bytes(good.read_bytes()[:150])
    cases.append((trunc, "not a readable npz file"))
    noise = tmp_path / "noise.npz"
    noise.write_bytes(os.urandom(64))
    cases.append((noise, "not an npz archive"))
    npy = tmp_path / "one.npz"
    with npy.open("wb") as f:
        np.save(f, np.zeros(3))
    cases.append((npy, "not an npz archive"))
    for p, needle in cases:
        with pytest.raises(GraphError) as e:
            load_graph(p)
        assert needle in one_line(e, p), p


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    "which, text, needle",
    [("graph", *c[1:]) for c in GRAPH_CASES] + [("cluster", *c[1:]) for c in CLUSTER_CASES],
    ids=[f"graph-{c[0]}" for c in GRAPH_CASES] + [f"cluster-{c[0]}" for c in CLUSTER_CASES],
)
def test_cli_bad_file_is_one_line_and_writes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    which: str,
    text: str | bytes,
    needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("g.json").write_text(json.dumps(GRAPH))
    Path("c.json").write_text(json.dumps(CLUSTER))
    bad = Path(f"{which[0]}.json")
    bad.write_bytes(text if isinstance(text, bytes) else text.encode())
    before = sorted(os.listdir(tmp_path))
    argv = ["graphopt", "baselines", "--graph", "g.json", "--cluster", "c.json", "--json", "o.json"]
    rc, err = _cli([*argv, "--budget", "2"], capsys)
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith(f"actorq: error: {bad}: ")
    assert needle in err
    assert sorted(os.listdir(tmp_path)) == before


def test_cli_checks_the_output_path_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    base = ["graphopt", "baselines", "--graph", "synthetic-20-s0", "--budget", "2"]
    for out, needle in (("adir", "is a directory"), ("no/such/o.json", "does not exist")):
        rc, err = _cli([*base, "--json", out], capsys)
        assert rc == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert sorted(os.listdir(tmp_path)) == ["adir"] and not os.listdir(tmp_path / "adir")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--graph", "synthetic-20-s0", "--seed", "-1"], "--seed must be in"),
        (["--graph", "synthetic-20-s0", "--budget", "0"], "--budget must be in 1..1000000, got 0"),
        # it ran forever: --budget had no upper bound
        (
            ["--graph", "synthetic-20-s0", "--budget", "99999999999999999999"],
            "--budget must be in 1..1000000, got 99999999999999999999",
        ),
        (["--graph", "synthetic-99999999999-s0"], "at most 10,000,000 ops"),
        (["--graph", "synthetic-20-s" + "9" * 5000], "a seed has at most 19 digits"),
        (["--graph", "synthetic-20-s0", "--cluster", "9" * 5000 + "xgpu"], "1 to 64 GPUs"),
        (["--graph", "missing.json"], "graph file not found: missing.json"),
        (["--graph", "synthetic-20-s0", "--cluster", "missing.json"], "cluster file not found"),
    ],
)
def test_cli_bad_flags_are_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    rc, err = _cli(["graphopt", "baselines", "--budget", "2", *args], capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("actorq: error: ")
    assert needle in err
    assert os.listdir(tmp_path) == []


def _strict_json(text: str) -> Any:
    def bad(s: str) -> Any:
        raise AssertionError(f"non-finite {s} in the output")

    return json.loads(text, parse_constant=bad)


@pytest.mark.parametrize(
    "graph_value, cluster_value",
    [
        (LIMIT, 1 / LIMIT),  # every cost as large as allowed, every rate as small
        (0, LIMIT),  # nothing to do, infinitely fast machines
        (0, 1 / LIMIT),
    ],
)
def test_cli_extremes_in_range_give_finite_results(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    graph_value: float,
    cluster_value: float,
) -> None:
    monkeypatch.chdir(tmp_path)
    g, c = copy.deepcopy(GRAPH), copy.deepcopy(CLUSTER)
    for o in g["ops"]:
        o.update(dict.fromkeys(("flops", "bytes_read", "bytes_written", "out_bytes"), graph_value))
        o["param_bytes"] = graph_value
    for e in g["edges"]:
        e["bytes"] = graph_value
    for d in c["devices"]:
        d.update(dict.fromkeys(("flop_s", "mem_bw", "memory"), cluster_value), op_overhead=0)
    c["link"] = {"bandwidth": cluster_value, "latency": 0}
    Path("g.json").write_text(json.dumps(g))
    Path("c.json").write_text(json.dumps(c))
    argv = ["graphopt", "baselines", "--graph", "g.json", "--cluster", "c.json", "--json", "o.json"]
    rc, err = _cli([*argv, "--budget", "3"], capsys)
    assert rc == 0, err
    out = _strict_json(Path("o.json").read_text())
    assert len(out["rows"]) == len(NAMES)
    assert sorted(os.listdir(tmp_path)) == ["c.json", "g.json", "o.json"]


def test_cli_graph_without_edges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # found by test_fuzz: METIS scaled edge weights by the largest of none
    monkeypatch.chdir(tmp_path)
    Path("g.json").write_text(json.dumps({**GRAPH, "edges": []}))
    argv = ["graphopt", "baselines", "--graph", "g.json", "--cluster", "2xgpu-pcie"]
    rc, err = _cli([*argv, "--budget", "2", "--json", "o.json"], capsys)
    assert rc == 0, err
    assert len(_strict_json(Path("o.json").read_text())["rows"]) == len(NAMES)


def test_documented_examples_still_load() -> None:
    g = load_graph(EXAMPLES / "mlp_step.json")
    assert g.num_ops == 9 and g.name == "mlp-step" and g.anchor is not None
    c = load_cluster(EXAMPLES / "cluster_2gpu_mixed.json")
    assert c.num_devices == 2 and c.name == "2gpu-mixed"


def test_a_graph_file_that_is_not_a_regular_file_says_so(tmp_path: Path) -> None:
    """A FIFO or a directory named like a graph file was "not found"."""
    fifo, folder = tmp_path / "g.json", tmp_path / "h.npz"
    os.mkfifo(fifo)
    folder.mkdir()
    for p in (fifo, folder):
        with pytest.raises(GraphError, match="is not a regular file; give a graph file"):
            load_graph(p)
        with pytest.raises(GraphError, match="is not a regular file; give a cluster file"):
            load_cluster(p)
