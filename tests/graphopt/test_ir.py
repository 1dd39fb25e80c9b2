"""Graph IR: construction, derived structure, safe round trips, and one-line errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from actorq.errors import GraphError
from actorq.graphopt.ir import Graph, load_graph, make_graph
from actorq.graphopt.synthetic import layered_dag


def diamond() -> Graph:
    ops = [
        {"name": "a", "type": "input", "out_bytes": 4},
        {"name": "b", "type": "matmul", "flops": 10, "bytes_read": 4, "param_bytes": 8},
        {"name": "c", "type": "relu", "flops": 2, "bytes_read": 4},
        {"name": "d", "type": "add", "flops": 1, "bytes_read": 8, "bytes_written": 4},
    ]
    edges = [("a", "b", 4), ("a", "c", 4), ("b", "d", 4), ("c", "d", 4)]
    return make_graph("diamond", ops, edges, meta={"family": "test"})


def test_structure() -> None:
    g = diamond()
    assert g.num_ops == 4 and g.num_edges == 4
    assert g.topo_order.tolist() == [0, 1, 2, 3]
    assert g.depth.tolist() == [0, 1, 1, 2]
    assert g.in_degree.tolist() == [0, 1, 1, 2] and g.out_degree.tolist() == [2, 1, 1, 0]
    ptr, oe = g.out_ptr, g.out_edges
    assert sorted(g.dst[oe[ptr[0] : ptr[1]]].tolist()) == [1, 2]
    assert g.anchor is not None and g.anchor.tolist() == [0, 1, 2, 3]


def test_topological_order_respects_every_edge() -> None:
    g = layered_dag(500, 3)
    assert np.all(g.topo_rank[g.src] < g.topo_rank[g.dst])
    assert np.all(g.depth[g.dst] >= g.depth[g.src] + 1)


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    g = layered_dag(120, 1)
    g.anchor = np.where(np.arange(g.num_ops) % 2 == 1, np.arange(g.num_ops) - 1, np.arange(120))
    g2 = load_graph(g.save(tmp_path / f"g{suffix}"))
    assert g2.name == g.name and g2.op_names == g.op_names and g2.op_types == g.op_types
    for f in ("flops", "bytes_read", "bytes_written", "out_bytes", "param_bytes", "src", "dst"):
        np.testing.assert_array_equal(getattr(g2, f), getattr(g, f))
    np.testing.assert_array_equal(g2.edge_bytes, g.edge_bytes)
    np.testing.assert_array_equal(g2.anchor, g.anchor)  # type: ignore[arg-type]
    assert g2.meta == g.meta


def test_npz_has_no_pickled_objects(tmp_path: Path) -> None:
    p = diamond().save(tmp_path / "d.npz")
    with np.load(p, allow_pickle=False) as z:  # would raise on object arrays
        assert {"header", "op_names", "src", "flops"} <= set(z.files)


def test_hand_written_json(tmp_path: Path) -> None:
    p = tmp_path / "g.json"
    p.write_text(
        json.dumps(
            {
                "ops": [{"name": "x", "flops": 5}, {"name": "y", "type": "relu", "anchor": "x"}],
                "edges": [{"src": "x", "dst": "y", "bytes": 16}],
            }
        )
    )
    g = load_graph(p)
    assert g.name == "g" and g.flops.tolist() == [5.0, 0.0] and g.op_types == ["op", "relu"]
    assert g.anchor is not None and g.anchor.tolist() == [0, 0]


def _one_line(e: pytest.ExceptionInfo[GraphError]) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_cycle_names_its_ops() -> None:
    ops = [{"name": n} for n in ("a", "b", "c", "d")]
    with pytest.raises(GraphError) as e:
        make_graph("cyc", ops, [("a", "b", 1), ("b", "c", 1), ("c", "d", 1), ("d", "b", 1)])
    msg = _one_line(e)
    assert "cycle" in msg and "'b'" in msg and "'c'" in msg and "'d'" in msg and "'a'" not in msg
    with pytest.raises(GraphError, match="feeds itself"):
        make_graph("loop", ops, [("a", "a", 1)])


def test_negative_cost_names_op_and_field() -> None:
    with pytest.raises(GraphError) as e:
        make_graph("neg", [{"name": "ok"}, {"name": "bad", "flops": -3}], [])
    msg = _one_line(e)
    assert "'bad'" in msg and "flops" in msg
    with pytest.raises(GraphError, match="bytes_read"):
        make_graph("nan", [{"name": "x", "bytes_read": float("nan")}], [])
    with pytest.raises(GraphError, match="'x' -> 'y'"):
        make_graph("negedge", [{"name": "x"}, {"name": "y"}], [("x", "y", -1)])


@pytest.mark.parametrize(
    "ops, edges, needle",
    [
        ([{"name": "a"}], [("a", "zz", 1)], "'zz', which does not exist"),
        ([{"name": "a"}], [(0, 5, 1)], "does not exist"),
        ([{"name": "a"}, {"name": "a"}], [], "used twice"),
        ([{"name": "a", "flops": "many"}], [], "non-numeric"),
        ([{"name": "a", "colour": 1}], [], "unknown field"),
        ([{"name": "a"}, {"name": "b", "anchor": "q"}], [], "does not exist"),
        ([], [], "no ops"),
    ],
)
def test_bad_graphs(ops: list, edges: list, needle: str) -> None:
    with pytest.raises(GraphError) as e:
        make_graph("bad", ops, edges)
    assert needle in _one_line(e)


def test_anchor_must_point_at_a_root() -> None:
    g = diamond()
    with pytest.raises(GraphError, match="anchor"):
        dataclasses.replace(g, anchor=np.array([0, 0, 1, 3]))  # 1 -> 0 is fine, 2 -> 1 is not


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match="not found"):
        load_graph(tmp_path / "missing.json")
    p = tmp_path / "e.json"
    p.write_text(json.dumps({"ops": [{"name": "a"}]}))
    with pytest.raises(GraphError, match="missing field 'edges'"):
        load_graph(p)
    p.write_text("{not json")
    with pytest.raises(GraphError, match="not valid JSON"):
        load_graph(p)
    q = tmp_path / "x.npz"
    np.savez(q, src=np.zeros(1))
    with pytest.raises(GraphError, match="missing field"):
        load_graph(q)
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(GraphError, match=r"use \.json or \.npz"):
        load_graph(tmp_path / "x.txt")


@pytest.mark.parametrize(
    "raw, needle",
    [
        ("1e999", "number '1e999' is out of range"),
        ("-1e999", "number '-1e999' is out of range"),
        ("NaN", "NaN is not allowed"),
        ("Infinity", "Infinity is not allowed"),
        ('1, "x": 2', "key 'x' appears twice"),
    ],
)
def test_json_and_npz_refuse_the_same_values(tmp_path: Path, raw: str, needle: str) -> None:
    """An .npz graph's header JSON was parsed without the .json reader's number check:
    ``"meta": {"x": 1e999}`` loaded as inf. Both now go through one parser."""
    g = dataclasses.replace(diamond(), meta={"x": "@X@"})
    for suffix in (".json", ".npz"):
        p = g.save(tmp_path / f"g{suffix}")
        if suffix == ".json":
            p.write_text(p.read_text().replace('"@X@"', raw))
        else:
            with np.load(p, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            arrays["header"] = np.array(str(arrays["header"]).replace('"@X@"', raw))
            np.savez(p, **arrays)
        with pytest.raises(GraphError) as e:
            load_graph(p)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"{p}: ") and needle in msg, msg


def test_synthetic_is_seeded_and_connected() -> None:
    a, b, c = layered_dag(300, 7), layered_dag(300, 7), layered_dag(300, 8)
    assert a.num_ops == 300
    np.testing.assert_array_equal(a.src, b.src)
    np.testing.assert_array_equal(a.flops, b.flops)
    assert a.src.size != c.src.size or not np.array_equal(a.src, c.src)
    # every op outside the last layer feeds something: only last-layer ops are sinks
    assert np.count_nonzero(a.out_degree == 0) <= a.meta["last_layer"]
    assert np.all(a.out_degree[: 300 - a.meta["last_layer"]] > 0)
    with pytest.raises(GraphError):
        layered_dag(1)


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_a_graph_file_is_written_whole_or_is_one_line(tmp_path: Path, suffix: str) -> None:
    """Through actorq's output writer: a link left at the old predictable ``NAME.tmp`` is not
    written through, and a directory that cannot take the file is one GraphError line."""
    g = diamond()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (tmp_path / f"g{suffix}.tmp").symlink_to(victim)
    assert load_graph(g.save(tmp_path / f"g{suffix}")).num_ops == g.num_ops
    assert victim.read_text() == "keep"
    with pytest.raises(GraphError, match="cannot write graph"):
        g.save(tmp_path / "missing" / f"g{suffix}")
