"""``actorq chip place | show | cost``: success paths on small netlists, placement by a trained
PPO policy (``--method policy``), one-line errors for bad input with nothing written, and a
hypothesis fuzz of the flag values."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import actorq
from actorq import PPOConfig, train
from actorq.agents import config_class
from actorq.agents.ppo.chip import ChipPolicyIO
from actorq.chip.anneal import AnnealResult
from actorq.chip.cost import PlacementCost
from actorq.chip.netlist import get_netlist, netlist_dir
from actorq.chip.plc import load_plc
from actorq.cli import main
from actorq.errors import ActorQError
from actorq.run import load_run_policy

TOY = "toy_macro_stdcell"
SAMPLE_PLC = str(netlist_dir("sample_clustered") / "initial.plc")


QUIET: dict[str, Any] = {"progress": False, "log_every": 1e9, "energy": False, "actors": 0}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Tiny runs: ``chip``, PPO --network chip on TOY (one int8 update, its final evaluation's
    greedy proxy in ``chip_proxy``); ``dqn`` (CartPole) and ``mlp`` (PPO's MLP on TOY), which
    --method policy refuses."""
    d = tmp_path_factory.mktemp("runs")
    ppo: dict[str, Any] = {
        "envs_per_actor": 2,
        "num_steps": 64,
        "minibatch_size": 64,
        "total_steps": 256,
    }
    ppo |= {"eval_every": 10**9, "env": f"chip:{TOY}", **QUIET}
    r = train(
        PPOConfig(network="chip", gamma=1.0, precision="int8", run_dir=str(d / "chip"), **ppo)
    )
    train(PPOConfig(run_dir=str(d / "mlp"), **ppo))
    dqn: Any = config_class("dqn")
    train(dqn(env="gym:CartPole-v1", total_steps=300, min_replay_size=100, stop_at_target=False,
              run_dir=str(d / "dqn"), **QUIET))  # fmt: skip
    return {"chip": str(d / "chip"), "mlp": str(d / "mlp"), "dqn": str(d / "dqn"),
            "chip_proxy": -r.eval_return}  # fmt: skip


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_place_shows_annealing_progress_and_refuses_steps_that_cannot_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actorq.cli.chip
    import actorq.resources

    monkeypatch.setattr(actorq.cli.chip._AnnealProgress.__init__, "__defaults__", (0.0,))
    code, text, err = run("chip", "place", TOY, "--out", str(tmp_path / "a.plc"), "--steps", "200")
    assert code == 0, err
    assert "annealing: step 2 of 200, best proxy" in text
    monkeypatch.setattr(actorq.resources, "available_memory", lambda: (1 << 30, "available"))
    code, _, err = run("chip", "place", TOY, "--out", str(tmp_path / "b.plc"),
                       "--steps", "1000000000")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "annealing steps (--steps)" in err
    assert not (tmp_path / "b.plc").exists()


def test_cost_prints_the_costs() -> None:
    code, out, _ = run("chip", "cost", "sample_clustered", SAMPLE_PLC)
    assert code == 0
    assert "proxy            0.505111" in out and "density cost     0.115228" in out
    code, out, _ = run("chip", "cost", "sample_clustered", SAMPLE_PLC, "--density-weight", "1")
    assert code == 0 and "1·density" in out


@pytest.mark.parametrize("method", ["sa", "random"])
def test_place_writes_a_plc_with_its_costs(method: str, tmp_path: Path) -> None:
    out = tmp_path / "out.plc"
    code, text, err = run(
        "chip", "place", TOY, "--out", str(out), "--method", method, "--steps", "200", "--seed", "1"
    )
    assert code == 0, err
    assert f"wrote {out}" in text
    p = load_plc(out)
    nl = get_netlist(TOY)
    pc = PlacementCost.from_placement(nl, p)
    c = pc.costs()
    assert p.costs["Wirelength cost"] == pytest.approx(c.wirelength_cost)
    assert p.costs["Density cost"] == pytest.approx(c.density_cost)
    assert "actorq chip place" in out.read_text().splitlines()[1]
    # the CLI reads back its own file
    code, text, _ = run("chip", "cost", TOY, str(out))
    assert code == 0 and f"{c.proxy:.6f}" in text
    assert [f.name for f in tmp_path.iterdir()] == ["out.plc"]  # no temporary left behind


def test_place_from_a_netlist_file_with_its_plc_beside(tmp_path: Path) -> None:
    d = tmp_path / "design"
    d.mkdir()
    (d / "netlist.pb.txt").write_text((netlist_dir(TOY) / "netlist.pb.txt").read_text())
    (d / "initial.plc").write_text((netlist_dir(TOY) / "initial.plc").read_text())
    out = tmp_path / "o.plc"
    code, _, err = run("chip", "place", str(d / "netlist.pb.txt"), "--out", str(out),
                       "--steps", "50", "--no-fd")  # fmt: skip
    assert code == 0, err and out.exists()
    assert load_plc(out).width == load_plc(d / "initial.plc").width


@pytest.mark.parametrize("heat", ["density", "congestion", "none"])
def test_show_draws_a_png(heat: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "fig.png"
    code, _, err = run("chip", "show", SAMPLE_PLC, "--netlist", "sample_clustered", "--out",
                       str(out), "--map", heat)  # fmt: skip
    assert code == 0, err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [f.name for f in tmp_path.iterdir()] == ["fig.png"]


@pytest.mark.parametrize("canvas", ["Width : 1  Height : 100000", "Width : 0.001  Height : 1e12",
                                    "Width : 1e12  Height : 0.001"])  # fmt: skip
def test_show_draws_a_canvas_of_any_shape_in_a_figure_of_sane_size(
    canvas: str, tmp_path: Path
) -> None:
    """A canvas 1e15 times taller than wide made a figure of 1050 x 1e18 pixels: a 44-line
    traceback from matplotlib. The figure's shape is bounded; the canvas is drawn to scale."""
    pytest.importorskip("matplotlib")
    plc = tmp_path / "odd.plc"
    header = "Width : 500.000  Height : 500.000"
    plc.write_text(Path(SAMPLE_PLC).read_text().replace(header, canvas))
    out = tmp_path / "fig.png"
    code, _, err = run("chip", "show", str(plc), "--netlist", "sample_clustered", "--out", str(out))
    assert code == 0, err
    png = out.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width * height <= 1050 * 4290  # 7 inches wide, at most 4 times as high, at 150 dpi


def _greedy_proxy(run_dir: str, precision: str) -> float:
    """The greedy proxy ``actorq eval RUN_DIR`` reports (ChipPolicyIO.evaluate, -return)."""
    _, pio, data = load_run_policy(run_dir, precision)
    assert isinstance(pio, ChipPolicyIO)
    return -float(pio.evaluate(data, 1, 0)[0])


@pytest.mark.parametrize("precision", [None, "fp32"])
def test_place_by_policy_is_the_runs_greedy_placement(
    precision: str | None, tmp_path: Path, runs: dict[str, Any]
) -> None:
    out = tmp_path / "out.plc"
    more = [] if precision is None else ["--precision", precision]
    code, text, err = run("chip", "place", TOY, "--method", "policy", "--policy", runs["chip"],
                          "--out", str(out), *more)  # fmt: skip
    assert code == 0, err
    prec = precision or "int8"  # the default: as actorq's actors
    want = _greedy_proxy(runs["chip"], prec)
    if prec == "int8":  # the run's own final evaluation, at its precision
        assert abs(want - runs["chip_proxy"]) < 1e-9
    lines = text.splitlines()
    assert lines[0].startswith(f"greedy placement by the {prec} policy of ")
    assert f"PPO on chip:{TOY}" in lines[0] and lines[-1] == f"wrote {out}"
    assert f"proxy            {want:.6f}" in text  # printed like the other methods
    header = out.read_text().splitlines()
    assert "greedy placement by the" in header[1]
    (proxy_line,) = [ln for ln in header if ln.startswith("# Proxy cost : ")]
    assert abs(float(proxy_line.split(":")[1]) - want) < 1e-6  # the costs in the header
    p = load_plc(out)
    c = PlacementCost.from_placement(get_netlist(TOY), p).costs()
    assert abs(c.proxy - want) < 1e-6 and c.density_cost == pytest.approx(p.costs["Density cost"])
    assert p.costs["Proxy cost"] == pytest.approx(want, abs=1e-6)  # read back from the header
    code, cost_text, _ = run("chip", "cost", TOY, str(out))  # the CLI reads back its own file
    assert code == 0 and f"proxy            {want:.6f}" in cost_text
    assert [f.name for f in tmp_path.iterdir()] == ["out.plc"]  # no temporary left behind


def test_place_by_policy_on_a_netlist_file_that_fits(tmp_path: Path, runs: dict[str, Any]) -> None:
    """A policy places any netlist with its macro count and grid: here TOY as a file."""
    d = tmp_path / "design"
    d.mkdir()
    for f in ("netlist.pb.txt", "initial.plc"):
        (d / f).write_text((netlist_dir(TOY) / f).read_text())
    out = tmp_path / "o.plc"
    code, text, err = run("chip", "place", str(d / "netlist.pb.txt"), "--method", "policy",
                          "--policy", runs["chip"], "--out", str(out), "--no-fd")  # fmt: skip
    assert code == 0, err
    assert "then FD" not in text and out.exists()


def _bad_files(tmp: Path) -> dict[str, str]:
    (tmp / "bad.pb.txt").write_text('node {\n  name: "A"\n')
    (tmp / "bad.plc").write_text("# Columns : 2  Rows : 2\n0 1.0 nan N 0\n")
    (tmp / "other.plc").write_text(
        "# Columns : 2  Rows : 2\n# Width : 10  Height : 10\n99 1 1 N 0\n"
    )
    (tmp / "adir.plc").mkdir()
    return {"BAD_NET": str(tmp / "bad.pb.txt"), "BAD_PLC": str(tmp / "bad.plc"),
            "OTHER_PLC": str(tmp / "other.plc"), "DIR": str(tmp / "adir.plc"),
            "OUT": str(tmp / "o.plc"), "PNG": str(tmp / "o.png")}  # fmt: skip


@pytest.mark.parametrize(
    "args, needle",
    [
        (["chip", "cost", "nope.pb.txt", SAMPLE_PLC], "no such netlist file"),
        (["chip", "cost", "BAD_NET", SAMPLE_PLC], "file ends inside a block"),
        (["chip", "cost", "sample_clustered", "BAD_PLC"], "out of range"),
        (["chip", "cost", "sample_clustered", "missing.plc"], "cannot read"),
        (["chip", "cost", "sample_clustered", "OTHER_PLC"], "but the netlist has"),
        (["chip", "cost", "sample_clustered", SAMPLE_PLC, "--density-weight", "nan"], "finite"),
        (["chip", "cost", "sample_clustered", SAMPLE_PLC, "--congestion-weight", "inf"], "finite"),
        (["chip", "cost", "sample_clustered"], "missing PLC"),
        (["chip", "place", TOY], "missing --out"),
        (["chip", "place", TOY, "--out", "OUT", "--steps", "-1"], "--steps must be"),
        (["chip", "place", TOY, "--out", "OUT", "--steps", "1e-3"], "'1e-3' is not a whole"),
        (["chip", "place", TOY, "--out", "OUT", "--seed", "-5"], "--seed must be"),
        (["chip", "place", TOY, "--out", "OUT", "--method", "rl"], "--method"),
        (["chip", "place", TOY, "--out", "OUT", "--density-weight", "-1"], "--density-weight"),
        (["chip", "place", TOY, "--out", "DIR"], "is a directory"),
        (["chip", "place", TOY, "--out", "/no/such/dir/o.plc"], "does not exist"),
        (["chip", "place", TOY, "--out", "PNG"], "must end in .plc"),
        (["chip", "place", TOY, "--out", "OUT", "--plc", "BAD_PLC"], "out of range"),
        (["chip", "show", SAMPLE_PLC, "--netlist", "sample_clustered", "--out", "OUT"], ".png"),
        (["chip", "show", SAMPLE_PLC, "--netlist", "sample_clustered", "--map", "x"], "--map"),
        (["chip", "show", "BAD_PLC", "--netlist", "sample_clustered", "--out", "PNG"], "range"),
        (["chip", "frobnicate"], "unknown chip command"),
        (["chip", "place", TOY, "--out", "OUT", "--method", "policy"], "needs --policy RUN_DIR"),
        (["chip", "place", TOY, "--out", "OUT", "--policy", "CHIP_RUN"], "--method policy only"),
        (["chip", "place", TOY, "--out", "OUT", "--method", "random", "--policy", "CHIP_RUN"],
         "--policy goes with --method policy only"),
        (["chip", "place", TOY, "--out", "OUT", "--precision", "fp32"], "--method policy only"),
        (["chip", "place", TOY, "--out", "OUT", "--method", "policy", "--policy", "CHIP_RUN",
          "--precision", "int4"], "--precision"),
        (["chip", "place", "macro_tiles_10x10", "--out", "OUT", "--method", "policy", "--policy",
          "CHIP_RUN"], "(2 hard macros, a 10×20 grid) and does not fit macro_tiles_10x10 (100"),
        (["chip", "place", TOY, "--out", "OUT", "--method", "policy", "--policy", "DQN_RUN"],
         "is a DQN run on gym:CartPole-v1; --method policy needs a PPO run"),
        (["chip", "place", TOY, "--out", "OUT", "--method", "policy", "--policy", "MLP_RUN"],
         "is a PPO --network mlp run"),
        (["chip", "place", TOY, "--out", "OUT", "--method", "policy", "--policy", "nope"],
         "run directory not found"),
        # found by the fuzz test below: a carriage return in a path split the message in two
        (["chip", "place", TOY, "--out", "OUT", "--method", "policy", "--policy", "\r0"],
         "run directory not found: '\\r0'"),
        (["chip", "place", TOY, "--out", "OUT", "--method", "policy", "--policy", "DIR"],
         "not an actorq run directory"),
        (["chip", "place", TOY, "--out", "PNG", "--method", "policy", "--policy", "CHIP_RUN"],
         "must end in .plc"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_writes_nothing(
    args: list[str], needle: str, tmp_path: Path, runs: dict[str, Any]
) -> None:
    files = _bad_files(tmp_path)
    files |= {"CHIP_RUN": runs["chip"], "DQN_RUN": runs["dqn"], "MLP_RUN": runs["mlp"]}
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = run(*[files.get(a, a) for a in args])
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("actorq: error:"), err
    assert needle in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_chip_usage() -> None:
    code, out, _ = run("chip")
    assert code == 2 and "actorq chip place" in out
    code, out, _ = run("chip", "--help")
    assert code == 0


VALUES = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1", "1e400", "abc", "", "0.5",
                     "99999999999999999999", "sa", "random", "density", "4294967296",
                     "policy", "int8", "fp32", "RUN"]),
    st.text(max_size=6),
)  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sub=st.sampled_from(["place", "policy", "cost", "show"]),
    flags=st.lists(
        st.tuples(
            st.sampled_from(["--steps", "--seed", "--method", "--density-weight",
                             "--congestion-weight", "--map", "--plc", "--out", "--bogus",
                             "--policy", "--precision"]),
            VALUES,
        ),
        max_size=3,
    ),
)  # fmt: skip
def test_random_flag_values_are_one_line_or_success(
    sub: str,
    flags: list[tuple[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    runs: dict[str, Any],
) -> None:
    import actorq.chip.anneal as anneal_mod
    import actorq.chip.force as force_mod

    def fake_anneal(pc: PlacementCost, cfg: Any, progress: Any = None) -> AnnealResult:
        # parsing only: no search
        p = pc.proxy()
        return AnnealResult(p, p, 0, 0, [p], p)

    monkeypatch.chdir(tmp_path)  # a fuzzed relative --out or --plc lands here, not in the repo
    monkeypatch.setattr(anneal_mod, "anneal", fake_anneal)
    monkeypatch.setattr(force_mod.ForcePlacer, "place", lambda self, cfg=None: None)
    out = tmp_path / ("f.png" if sub == "show" else "f.plc")
    place = ["chip", "place", TOY, "--out", str(out)]
    base = {
        "place": place,
        "policy": [*place, "--method", "policy", "--policy", runs["chip"]],
        "cost": ["chip", "cost", "sample_clustered", SAMPLE_PLC],
        "show": ["chip", "show", SAMPLE_PLC, "--netlist", "sample_clustered", "--out", str(out)],
    }[sub]
    argv = [*base, *[runs["chip"] if x == "RUN" else x for pair in flags for x in pair]]
    try:
        code, _, err = run(*argv)
    except SystemExit as e:  # -h or --help as a value asks for help, as argparse's flags do
        assert e.code in (0, None) and {"-h", "--help"} & set(argv), e.code
        return
    event(f"{sub}: exit {code}")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if code != 0:
        assert code == 2 and len(lines) == 1 and lines[0].startswith("actorq: error:"), err
    for f in tmp_path.iterdir():  # never a temporary file left behind
        assert ".tmp" not in f.name


def test_cost_says_when_macros_lie_outside_the_canvas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Off-canvas macros lower density and congestion (as circuit-training's evaluator counts
    them): `chip cost` says so instead of reporting a silently better placement (issue 49
    item 9)."""
    out = tmp_path / "p.plc"
    assert main(["chip", "place", TOY, "--steps", "200", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["chip", "cost", TOY, str(out)]) == 0
    assert "outside" not in capsys.readouterr().err  # a legal placement: nothing to say
    lines = out.read_text().splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.strip() and not ln.startswith("#"))
    f = lines[i].split()
    lines[i] = " ".join([f[0], "-5000", "-5000", *f[3:]])  # the first placed node, far off
    out.write_text("\n".join(lines) + "\n")
    assert main(["chip", "cost", TOY, str(out)]) == 0
    err = capsys.readouterr().err
    assert "lie outside the" in err and "\n" not in err.strip()


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_a_chip_policy_at_a_precision_it_has_none_of_is_one_line(
    runs: dict[str, Any], precision: str
) -> None:
    """eval/export/actorq.load of a chip (or GO) run at fp16 or int4 was a ValueError traceback
    from the ONNX builder: the precision is checked as the run's config checks it."""
    code, _, err = run("eval", runs["chip"], "--precision", precision, "--episodes", "1")
    assert code == 2 and err.count("\n") == 1, err
    assert f"chip policy, not --precision {precision}" in err
    with pytest.raises(ActorQError, match=f"not --precision {precision}"):
        actorq.load(runs["chip"], precision=precision)
