"""Cluster presets and files; the ``actorq graphopt`` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from actorq.cli import main
from actorq.errors import GraphError
from actorq.graphopt.baselines import NAMES
from actorq.graphopt.cluster import get_cluster, load_cluster, preset_names


def test_presets() -> None:
    assert {"2xgpu-pcie", "4xgpu-pcie", "8xgpu-nvlink"} <= set(preset_names())
    c = get_cluster("8xgpu-nvlink")
    assert c.num_devices == 8 and c.bandwidth[0, 1] == 45e9 and c.latency[2, 3] == 5e-6
    assert get_cluster("2xgpu-pcie").bandwidth[1, 0] == 12e9
    t = c.op_times(np.array([1e13, 0.0]), np.array([0.0, 7.5e11]))
    np.testing.assert_allclose(t[:, 0], [1.0 + 5e-6, 1.0 + 5e-6])


def _write(tmp_path: Path, d: object) -> Path:
    p = tmp_path / "c.json"
    p.write_text(json.dumps(d))
    return p


DEV = {"name": "a", "flop_s": 1e12, "mem_bw": 1e11, "memory": 1e9, "op_overhead": 0.0}


def test_cluster_file_with_a_link_override(tmp_path: Path) -> None:
    d = {
        "devices": [DEV, {**DEV, "name": "b", "flop_s": 2e12}, DEV],
        "link": {"bandwidth": 1e9, "latency": 1e-5},
        "links": [{"src": 0, "dst": 2, "bandwidth": 5e9, "latency": 0}],
    }
    c = get_cluster(str(_write(tmp_path, d)))
    assert c.num_devices == 3 and c.fastest_device() == 1
    assert c.bandwidth[2, 0] == 5e9 and c.bandwidth[0, 1] == 1e9 and c.latency[0, 2] == 0


@pytest.mark.parametrize(
    "d, needle",
    [
        (
            {"devices": [{k: v for k, v in DEV.items() if k != "mem_bw"}], "link": {}},
            "devices[0]: missing field 'mem_bw'",
        ),
        ({"devices": [DEV], "link": {"latency": 0}}, "link: missing field 'bandwidth'"),
        ({"devices": [DEV]}, "missing field 'link'"),
        ({"devices": [{**DEV, "memory": -1}], "link": {"bandwidth": 1, "latency": 0}}, "memory=-1"),
        (
            {"devices": [{**DEV, "flop_s": "fast"}], "link": {"bandwidth": 1, "latency": 0}},
            "must be a number",
        ),
        (
            {
                "devices": [DEV, DEV],
                "link": {"bandwidth": 1, "latency": 0},
                "links": [{"src": 0, "dst": 0, "bandwidth": 1, "latency": 0}],
            },
            "two different devices",
        ),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_bad_cluster_files(tmp_path: Path, d: object, needle: str) -> None:
    with pytest.raises(GraphError) as e:
        load_cluster(_write(tmp_path, d))
    assert needle in str(e.value) and "\n" not in str(e.value)


EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_documented_example_files(capsys: pytest.CaptureFixture[str]) -> None:
    c = get_cluster(str(EXAMPLES / "cluster_2gpu_mixed.json"))
    assert [d.name for d in c.devices] == ["v100", "t4"] and c.fastest_device() == 0
    assert "v100 (10 TFLOP/s" in c.describe() and "t4 (5 TFLOP/s" in c.describe()
    argv = ["graphopt", "baselines", "--graph", str(EXAMPLES / "mlp_step.json"), "--cluster",
            str(EXAMPLES / "cluster_2gpu_mixed.json"), "--budget", "5"]  # fmt: skip
    assert main(argv) == 0
    assert "mlp-step (9 ops)" in capsys.readouterr().out


def test_unknown_cluster_name() -> None:
    with pytest.raises(GraphError, match="presets: 1xgpu"):
        get_cluster("4xtpu")


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graphopt", "list", "--family", "wavenet"]) == 0
    out = capsys.readouterr().out
    assert "wavenet-s" in out and "wavenet-l" in out and "rnnlm-s" not in out


def test_cli_baselines_on_a_small_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "b.json"
    argv = [
        "graphopt",
        "baselines",
        "--graph",
        "synthetic-200-s0",
        "--cluster",
        "2xgpu-pcie",
        "--budget",
        "5",
        "--json",
        str(out_json),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for name in (
        "single",
        "expert",
        "metis+cp",
        "heft",
        "m-etf",
        "anneal",
        "climb",
        "best feasible",
    ):
        assert name in out
    data = json.loads(out_json.read_text())
    assert data["ops"] == 200 and len(data["rows"]) == len(NAMES)
    single = data["rows"][0]
    assert single["baseline"] == "single" and single["vs_single"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["graphopt", "baselines", "--graph", "no-such-graph"], "unknown graph 'no-such-graph'"),
        (["graphopt", "baselines", "--graph", "rnnlm-s", "--cluster", "9xfoo"], "unknown cluster"),
        (
            ["graphopt", "baselines", "--graph", "synthetic-20-s0", "--only", "single,psychic"],
            "unknown baseline",
        ),
        (["graphopt", "frobnicate"], "unknown graphopt command"),
        (
            ["graphopt", "baselines", "--graph", "synthetic-20-s0", "--only", ","],
            "names no baseline",
        ),
        (
            ["graphopt", "baselines", "--graph", "synthetic-20-s0", "--only", " "],
            "names no baseline",
        ),
    ],
)
def test_cli_bad_input_is_one_line(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and err.startswith("actorq: error:")


def test_cli_bad_graph_file_in_a_subprocess(tmp_path: Path) -> None:
    bad = tmp_path / "cyc.json"
    bad.write_text(
        json.dumps({"ops": [{"name": "a"}, {"name": "b"}], "edges": [["a", "b", 1], ["b", "a", 1]]})
    )
    r = subprocess.run(
        [sys.executable, "-m", "actorq.cli", "graphopt", "baselines", "--graph", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"actorq: error: {bad}: graph 'cyc' has a cycle: 'b' -> 'a' -> 'b'"
    ]


def test_metis_on_more_devices_than_the_graph_has_ops_prints_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """METIS printed a C-level complaint per bisection (324 lines for 1,024 devices): none
    reaches the console, and each op group gets a device of its own."""
    pytest.importorskip("pymetis")
    from actorq.graphopt.baselines import metis
    from actorq.graphopt.simulator import Simulator
    from actorq.graphopt.suite import get_graph

    f = tmp_path / "c.json"
    f.write_text(json.dumps({"devices": [DEV] * 64, "link": {"bandwidth": 1e10, "latency": 1e-5}}))
    for ops in (20, 200):  # fewer op groups than devices; more, so METIS partitions
        d = metis(Simulator(get_graph(f"synthetic-{ops}-s0"), load_cluster(f)))
        assert d.placement.max() < 64
    out = capfd.readouterr()
    assert "***" not in out.out + out.err


def test_place_refuses_a_graph_that_cannot_fit_and_places_a_one_op_graph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import actorq.resources

    monkeypatch.setattr(actorq.resources, "available_memory", lambda: (1 << 30, "available"))
    assert main(["graphopt", "place", "--graph", "synthetic-2000000-s0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "2,000,000 ops" in err and "1.0 GiB available" in err
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"ops": [{"name": "a", "flops": 1e6}], "edges": []}))
    out = tmp_path / "p.json"
    assert main(["graphopt", "place", "--graph", str(one), "--samples", "1", "--budget", "2",
                 "--out", str(out)]) == 0  # fmt: skip
    assert json.loads(out.read_text())["placement"] == {"a": 0}
