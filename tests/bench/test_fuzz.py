"""Property tests: random and damaged spec files, and damaged results directories, give either
success or one `ActorQError` line, never another exception, and a failure writes nothing."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import importlib.util
import io
import itertools
import json
import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from actorq.bench.report import load_runs
from actorq.bench.results import MAX_MAGNITUDE, read_sessions
from actorq.bench.runner import plan_matrix, run_matrix
from actorq.bench.spec import Cell, load_spec
from actorq.cli import main
from actorq.errors import ActorQError
from tests.bench.specs import SMALL

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SPEC: dict[str, Any] = {
    "name": "fuzz",
    "precisions": ["fp32", "int8"],
    "seeds": [0, 1],
    "timeout_s": 300,
    "country": "USA",
    "defaults": {"actors": 0, "log_every": 1.0},
    "tasks": [
        {
            "agent": "dqn",
            "env": "gym:CartPole-v1",
            "label": "cartpole",
            "widths": ["64,64", "128,128"],
            "config": {"total_steps": 2000, "target_return": 200, "batch_size": 32},
        },
        {
            "agent": "d4pg",
            "env": "dmc:cartpole-balance",
            "precisions": ["fp32"],
            "seeds": [3],
            "config": {"policy_hidden_sizes": [32, 32], "policy_learning_rate": 1e-3},
        },
    ],
}

# where a mutation lands: top-level keys, [defaults], each task's keys and config fields
PLACES: list[tuple[Any, ...]] = [
    *[(k,) for k in SPEC],
    ("seeds", 0),
    ("precisions", 1),
    ("defaults", "actors"),
    ("defaults", "device"),
    ("defaults", "seed"),
    *[
        ("tasks", 0, k)
        for k in ("agent", "env", "label", "widths", "precisions", "seeds", "config")
    ],
    ("tasks", 0, "widths", 0),
    *[
        ("tasks", 0, "config", k)
        for k in (
            "total_steps",
            "target_return",
            "batch_size",
            "hidden",
            "device",
            "gamma",
            "learning_rate",
            "log_every",
            "energy_country",
            "precision",
            "samples_per_insert",
        )
    ],
    *[("tasks", 1, k) for k in ("agent", "env", "seeds", "config")],
    ("tasks", 1, "config", "policy_hidden_sizes"),
    ("tasks", 1, "config", "v_max"),
]

NASTY_TEXT = ["", "64,64", "0", "-1", "nan", "inf", "cuda", "cuda:7", "foo", "fp32", "int3",
              "gym:CartPole-v1", "gym:NoSuchEnv-v0", "dmc:walker-stand", "a/b", "..", "x" * 300,
              "line\nbreak", "nul\x00", "\u2028", "é", "99999999999999999999"]  # fmt: skip
NASTY_NUMBERS = [0, -1, 1, 2**31, 2**32, 2**63 - 1, -(2**63), math.nan, math.inf, -math.inf,
                 1e308, -0.0, 5e-324, 0.5]  # fmt: skip


class Raw(str):
    """A TOML value written as it is: a literal that no Python value is written as."""


#: integers past the 4,300 digits Python writes as text: tomllib refuses the decimal ones
#: (a ValueError, not its TOMLDecodeError) and reads the others, which no message can quote
HUGE_INTS = ["9" * 4301, "-" + "9" * 5000, "0x" + "f" * 4000, "0o" + "7" * 6000, "0b" + "1" * 15000]

scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from(NASTY_NUMBERS),
    st.sampled_from(HUGE_INTS).map(Raw),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=12),
    st.sampled_from(NASTY_TEXT),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)


def _toml_str(s: str) -> str:
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or c == "\x7f":  # control characters must be escaped in TOML
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _toml_value(v: Any) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return (
            "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
        )
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_str(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


def to_toml(doc: dict[str, Any]) -> str:
    """A TOML document for ``doc``, tables inline (no TOML writer is a dependency)."""
    return "".join(f"{_toml_str(k)} = {_toml_value(v)}\n" for k, v in doc.items())


VALID = to_toml(SPEC).encode()
# the same spec as people write it: tables, comments, one key a line
TABLES = b"""name = "fuzz"        # the default results directory is runs/bench-fuzz
precisions = ["fp32", "int8"]
seeds = [0, 1]
timeout_s = 300
country = "USA"

[defaults]
actors = 0
log_every = 1.0

[[tasks]]
agent = "dqn"
env = "gym:CartPole-v1"
label = "cartpole"
widths = ["64,64", "128,128"]
[tasks.config]
total_steps = 2000
target_return = 200
batch_size = 32

[[tasks]]
agent = "d4pg"
env = "dmc:cartpole-balance"
precisions = ["fp32"]
seeds = [3]
[tasks.config]
policy_hidden_sizes = [32, 32]
policy_learning_rate = 1e-3
"""


def _one_line(msg: str) -> None:
    assert msg and len(msg.splitlines()) == 1, repr(msg)


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _listing(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def check_spec(data: bytes, overrides: tuple[str, ...] = (), cells: tuple[str, ...] = ()) -> None:
    """The loader, then `actorq bench --dry-run`: success or one ActorQError line, and nothing
    written beside the spec either way."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        path = d / "spec.toml"
        path.write_bytes(data)
        try:
            load_spec(path).validate()
            ok = True
        except ActorQError as e:
            _one_line(str(e))
            ok = False
        args = ["bench", str(path), "--results", str(d / "results"), "--dry-run"]
        # --override=ITEM: an item that starts with "-" would be read as a flag otherwise
        rc, out, err = _cli(
            [*args, *(f"--override={o}" for o in overrides), *(f"--cells={c}" for c in cells)]
        )
        if overrides or cells:
            assert rc in (0, 2)
        else:
            assert rc == (0 if ok else 2), (rc, err)
        event(f"exit status {rc}")
        if rc == 2:
            _one_line(err)
            assert err.startswith("actorq: error: ")
        else:
            assert err == "" and out.rstrip().endswith(f"-> {d / 'results'}")
        assert [p.name for p in d.iterdir()] == ["spec.toml"]


def test_the_base_specs_are_valid() -> None:
    spec = load_spec_bytes(VALID)
    assert len(spec.cells) == 2 * 2 * 2 + 1
    assert load_spec_bytes(TABLES).cells == spec.cells


def load_spec_bytes(data: bytes) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.toml"
        path.write_bytes(data)
        spec = load_spec(path)
        spec.validate()
        return spec


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes_as_a_spec(data: bytes) -> None:
    check_spec(data)


@FUZZ
@given(st.sampled_from([VALID, TABLES]), st.data(), st.binary(max_size=3))
def test_truncated_spec(spec: bytes, data: st.DataObject, tail: bytes) -> None:
    """Cut anywhere (a multi-byte character or a line in half), maybe with a few stray bytes."""
    check_spec(spec[: data.draw(st.integers(0, len(spec)))] + tail)


def _mutate(doc: Any, place: tuple[Any, ...], value: Any, delete: bool) -> Any:
    doc = json.loads(json.dumps(doc))  # a deep copy
    parent = doc
    for key in place[:-1]:
        parent = parent[key]
    if delete:
        if isinstance(parent, dict):
            parent.pop(place[-1], None)
        else:
            del parent[place[-1]]
    else:
        parent[place[-1]] = value
    return doc


@FUZZ
@given(
    st.sampled_from(PLACES) | st.text(max_size=8).map(lambda k: (k,)),
    values,
    st.booleans(),
)
@example(("seeds",), [Raw(HUGE_INTS[0])], False)  # decimal: tomllib's own ValueError
@example(("timeout_s",), Raw(HUGE_INTS[2]), False)  # hex: read, then quoted in a message
@example(("tasks", 0, "config", "hidden"), [64, Raw(HUGE_INTS[4])], False)
def test_spec_with_a_field_mutated(place: tuple[Any, ...], value: Any, delete: bool) -> None:
    check_spec(to_toml(_mutate(SPEC, place, value, delete and len(place) > 0)).encode())


#: a GO task: no width fields (its ``hidden`` is one int), a list of graph names
GO_SPEC: dict[str, Any] = {
    "precisions": ["fp32", "int8"],
    "defaults": {"actors": 0},
    "tasks": [
        {
            "agent": "go",
            "env": "graphopt:placement/synthetic-20-s0",
            "config": {"graphs": ["rnnlm-s"], "batch_graphs": 8, "envs_per_actor": 8},
        }
    ],
}
GO_PLACES: list[tuple[Any, ...]] = [
    *[("tasks", 0, k) for k in ("agent", "env", "label", "widths", "seeds", "config")],
    *[("tasks", 0, "config", k) for k in ("graphs", "hidden", "batch_graphs", "envs_per_actor",
                                          "cluster", "imitate", "segment", "total_steps")],
    ("tasks", 0, "config", "graphs", 0),
]  # fmt: skip


@FUZZ
@given(st.sampled_from(GO_PLACES), values, st.booleans())
@example(("tasks", 0, "widths"), ["64,64"], False)
@example(("tasks", 0, "config", "graphs"), ["rnnlm-s", "synthetic-30-s1"], False)
def test_go_spec_with_a_field_mutated(place: tuple[Any, ...], value: Any, delete: bool) -> None:
    check_spec(to_toml(_mutate(GO_SPEC, place, value, delete)).encode())


def test_the_go_spec_is_valid() -> None:
    assert len(load_spec_bytes(to_toml(GO_SPEC).encode()).cells) == 2


#: a matrix with SB3 beside actorq (its settings table, the framework axis, resume and order)
SB3_SPEC: dict[str, Any] = {
    "precisions": ["int8"],
    "frameworks": ["actorq", "sb3"],
    "resume": True,
    "order": "seeds",
    "defaults": {"actors": 0},
    "tasks": [
        {
            "agent": "ppo",
            "env": "gym:CartPole-v1",
            "config": {"total_steps": 2000},
            "sb3": {
                "n_envs": 8, "n_steps": 32, "learning_rate": "lin_0.001", "gamma": 0.98,
                "clip_range": "lin_0.2", "ent_coef": 0.0, "torch_threads": 1,
                "policy_kwargs": {"activation_fn": "tanh", "net_arch": {"pi": [64], "vf": [64]}},
            },
        },
        {
            "agent": "dqn",
            "env": "gym:CartPole-v1",
            "config": {"total_steps": 2000},
            "sb3": {
                "buffer_size": 1000, "learning_starts": 100, "batch_size": 32, "train_freq": 4,
                "gradient_steps": 1, "target_update_interval": 100, "exploration_fraction": 0.2,
                "exploration_final_eps": 0.05, "torch_threads": 1,
                "policy_kwargs": {"net_arch": [64, 64]},
            },
        },
    ],
}  # fmt: skip
SB3_PLACES: list[tuple[Any, ...]] = [
    ("frameworks",), ("frameworks", 1), ("resume",), ("order",), ("tasks", 0, "frameworks"),
    ("tasks", 0, "sb3"),
    *[("tasks", 0, "sb3", k) for k in (*SB3_SPEC["tasks"][0]["sb3"], "batch_size", "policy",
                                        "normalize", "vf_coef", "gae_lambda", "x")],
    *[("tasks", 0, "sb3", "policy_kwargs", k) for k in ("activation_fn", "net_arch",
                                                         "ortho_init", "log_std_init", "x")],
    ("tasks", 1, "sb3"),
    *[("tasks", 1, "sb3", k) for k in (*SB3_SPEC["tasks"][1]["sb3"], "tau", "gamma",
                                        "exploration_initial_eps", "optimize_memory_usage",
                                        "learning_rate", "max_grad_norm", "n_envs", "x")],
    ("tasks", 1, "sb3", "policy_kwargs", "net_arch"),
]  # fmt: skip


@FUZZ
@given(st.sampled_from(SB3_PLACES), values, st.booleans())
@example(("tasks", 0, "sb3", "policy_kwargs", "x"), 1, False)  # SB3's policy would refuse them
@example(("tasks", 0, "sb3", "policy_kwargs", "net_arch"), "x", False)
def test_sb3_spec_with_a_field_mutated(place: tuple[Any, ...], value: Any, delete: bool) -> None:
    """What ``--dry-run`` accepts of a framework's settings, its cells run with (SB3 itself
    need not be installed: the settings are checked without it)."""
    data = to_toml(_mutate(SB3_SPEC, place, value, delete)).encode()
    with _sb3_present():
        check_spec(data)
        try:
            spec = load_spec_bytes(data)
        except ActorQError:
            return
    if importlib.util.find_spec("stable_baselines3") is None:
        return
    from actorq.bench.sb3 import SB3
    from actorq.bench.spec import run_config

    for cell in spec.cells:  # accepted settings build SB3's model (no learning: no time)
        s = cell.settings  # (a rollout too big for memory, or a network too wide for a test's
        # time, e.g. 6213-wide layers: a minute of orthogonal init, is a resource bound)
        if (
            cell.framework == "sb3"
            and s.get("n_envs", 1) * s.get("n_steps", 2048) <= 10**5
            and s.get("buffer_size", 0) <= 10**6
            and _weights(s.get("policy_kwargs", {}).get("net_arch", [])) <= 1 << 22
        ):
            SB3().build(
                run_config(cell.agent, cell.config, spec.country), list(cell.width), s
            ).get_env().close()


def _weights(arch: Any) -> int:
    """Hidden-to-hidden weights of an SB3 ``net_arch`` (a list of widths or {pi, vf})."""
    lists = list(arch.values()) if isinstance(arch, dict) else [arch]
    return sum(a * b for w in lists for a, b in itertools.pairwise(w))


def test_the_sb3_spec_is_valid() -> None:
    with _sb3_present():
        assert len(load_spec_bytes(to_toml(SB3_SPEC).encode()).cells) == 4


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["actors", "device", "hidden", "log_every", "seed", "gamma", "x-y"])
            | st.text(max_size=8),
            st.sampled_from([str(x) for x in NASTY_NUMBERS + NASTY_TEXT + HUGE_INTS])
            | st.sampled_from(HUGE_INTS).map(lambda n: f"[1, {n}]")
            | st.text(max_size=12),
        ),
        max_size=3,
    )
)
@example([("actors", HUGE_INTS[1])])
@example([("hidden", f"[64, {HUGE_INTS[2]}]")])
def test_random_overrides(items: list[tuple[str, str]]) -> None:
    check_spec(VALID, tuple(f"{k}={v}" for k, v in items if "\x00" not in k + v))


@FUZZ
@given(
    st.lists(
        st.sampled_from(["*", "*-s1", "*int8*", "[", "[!a-z]*", "**", "?"]) | st.text(max_size=12),
        min_size=1,
        max_size=3,
    )
)
def test_random_cell_patterns(patterns: list[str]) -> None:
    """``--cells``: the matching cells listed, or one line (a pattern matching none)."""
    check_spec(VALID, cells=tuple(p for p in patterns if "\x00" not in p))


# ---------------------------------------------------------------- results directories


def _fake_run(cell: Cell, cell_dir: Path, timeout: float | None) -> int:
    if cell.env.startswith("atari:") and cell.seed == 1:  # how far it went (report: its frames)
        _fake_checkpoint(cell_dir, cell.framework)
    if cell.precision == "int8" and cell.seed == 1:
        return 1  # a crashed cell: cell.json and failed.json only (an Atari one: a checkpoint)
    (cell_dir / "log.txt").write_text("fake\n")
    if cell.env.startswith("atari:") and cell.seed == 1:  # a running cell: no summary yet
        (cell_dir / "config.json").write_text(json.dumps({**cell.config, "agent": cell.agent}))
        _fake_metrics(cell_dir)
        return 0
    summary = {
        "env": cell.env, "precision": cell.precision, "env_steps": 3000, "eval_return": 100.0,
        "wall_time_s": 20.0, "eval_time_s": 2.0, "interrupted": False, "target_return": 475.0,
        "reached_target": True, "steps_to_target": 2000, "time_to_target_s": 10.0,
        "snapshot_bytes": 300, "fp32_snapshot_bytes": 1000, "action_agreement": math.nan,
        "energy_kwh": 0.001, "energy_kg_co2": 0.0004, "energy_estimated": True,
    }  # fmt: skip
    (cell_dir / "summary.json").write_text(json.dumps(summary))
    (cell_dir / "config.json").write_text(json.dumps({**cell.config, "agent": cell.agent}))
    _fake_metrics(cell_dir)
    return 0


def _fake_checkpoint(cell_dir: Path, framework: str) -> None:
    """A checkpoint at 2500 env steps: actorq's counter, or SB3's model's own."""
    import torch

    from actorq import checkpoint as ckpt

    state: dict[str, Any] = {"learner": {}, "counters": {"env_steps": 2500}, "rng": {}}
    if framework != "actorq":
        state = {"learner": {"counters": {"num_timesteps": 2500}}, "counters": {}, "rng": {}}
    ckpt.save(cell_dir / "checkpoint", {"w": torch.zeros(1)}, state)


def _reseal(d: Path) -> None:
    """A checkpoint's manifest rewritten for its files as they are (damage no checksum sees)."""
    files = sorted(p.name for p in d.iterdir() if p.name != "manifest.json" and p.is_file())
    manifest = {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in files}
    (d / "manifest.json").write_text(json.dumps(manifest))


def _fake_metrics(cell_dir: Path) -> None:
    with open(cell_dir / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "wall_time", "metric", "value"])
        for i in range(1, 4):
            w.writerow([1000 * i, f"{1e9 + 2 * i:.3f}", "perf/actor_sps", 900.0])
            w.writerow([1000 * i, f"{1e9 + 2 * i + 0.5:.3f}", "charts/eval_return", 50.0 * i])


#: issue 50's layout: Atari cells beside SB3's, one of them still running (no summary), so the
#: report's Atari table and framework comparison read every field they use under damage
ATARI = """
precisions = ["int8"]
seeds = [0, 1]
frameworks = ["actorq", "sb3"]
[defaults]
actors = 0
[[tasks]]
agent = "ppo"
env = "atari:Pong"
label = "ppo-pong"
config = { target_return = 18.0 }
sb3 = { policy = "CnnPolicy", n_envs = 8, clip_range = "lin_0.1" }
"""


@pytest.fixture(scope="module", params=["cartpole", "atari"])
def template(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A results directory as `actorq bench` leaves it, cells faked (nothing is trained)."""
    if request.param == "atari":
        pytest.importorskip("ale_py")  # the spec's ids are checked when it is read
    with tempfile.TemporaryDirectory() as tmp, _sb3_present():
        d = Path(tmp)
        (d / "small.toml").write_text(SMALL if request.param == "cartpole" else ATARI)
        run_matrix(load_spec(d / "small.toml"), d / "results", _fake_run, progress=False)
        yield d


def _sb3_present() -> contextlib.AbstractContextManager[Any]:
    """SB3's cells are faked: the spec loads where the ``[peers]`` extra is not installed."""
    from actorq.bench.sb3 import SB3

    return mock.patch.object(SB3, "missing", return_value=None)


def _files(template: Path) -> list[str]:
    r = template / "results"
    return [str(p.relative_to(r)) for p in sorted(r.rglob("*")) if p.is_file()]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**30, -(10**30), 2**63, -1, 0, 1e308, -1.7e308, 5e-324])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
FIELDS = ["env", "precision", "env_steps", "eval_return", "wall_time_s", "interrupted",
                "target_return", "reached_target", "time_to_target_s", "snapshot_bytes",
                "energy_kwh", "energy_estimated", "sessions", "name", "task", "agent", "seed",
                "width", "config", "country", "why", "status", "log_every", "hidden",
                "steps_to_target", "eval_time_s", "framework", "frameworks", "settings",
                "segment", "session", "counters", "learner", "env_steps",
                "num_timesteps"]  # fmt: skip


def _apply(path: Path, kind: str, draw: Any) -> None:
    """Damage one file: random bytes, a truncation, deletion, one JSON field set to a random
    value or removed, the whole JSON document replaced, or one metrics.csv field changed."""
    data = path.read_bytes()
    doc: Any = None
    with contextlib.suppress(ValueError):
        doc = json.loads(data)
    rows: list[list[str]] = []
    with contextlib.suppress(ValueError, csv.Error):
        rows = list(csv.reader(io.StringIO(data.decode())))
    if kind == "delete":
        path.unlink()
    elif kind == "truncate":
        path.write_bytes(data[: draw(st.integers(0, max(len(data) - 1, 0)))])
    elif kind == "document" and path.suffix == ".json":
        path.write_text(json.dumps(draw(json_values)))
    elif kind == "field" and isinstance(doc, dict):
        inner = doc  # a top-level field, or one in an object inside (a checkpoint's counters)
        while (tables := [k for k, v in inner.items() if isinstance(v, dict)]) and draw(
            st.booleans()
        ):
            inner = inner[draw(st.sampled_from(tables))]
        key = draw(st.sampled_from([*inner, *FIELDS]) | st.text(max_size=5))
        if draw(st.booleans()):
            inner.pop(key, None)
        else:
            inner[key] = draw(json_values)
        path.write_text(json.dumps(doc))
    elif kind == "csv" and path.suffix == ".csv" and rows:
        i = draw(st.integers(0, len(rows) - 1))
        j = draw(st.integers(0, 3))
        new = draw(
            st.sampled_from(
                ["", "nan", "inf", "-inf", "1e999", "1e308", "-1", "0", "1.5", "x", "9" * 30]
            )
            | st.text(max_size=8)
        )
        if j < len(rows[i]):
            rows[i][j] = new
        if draw(st.booleans()):
            rows[i] = rows[i][:j]  # a short row
        buf = io.StringIO()
        csv.writer(buf).writerows(rows)
        path.write_text(buf.getvalue())
    else:
        path.write_bytes(draw(st.binary(max_size=200)))


@contextlib.contextmanager
def damaged(template: Path, data: st.DataObject) -> Iterator[Path]:
    """A copy of the template results directory with one to three files damaged; a damaged
    checkpoint's manifest maybe made to agree (damage its checksums cannot see), and maybe
    only ``checkpoint.old`` left (a save cut between its renames)."""
    with tempfile.TemporaryDirectory() as tmp:
        r = Path(tmp) / "results"
        shutil.copytree(template / "results", r)
        files = _files(template)
        for _ in range(data.draw(st.integers(1, 3))):
            name = data.draw(st.sampled_from(files))
            if (r / name).exists():
                kind = data.draw(
                    st.sampled_from(["bytes", "truncate", "field", "document", "csv", "delete"])
                )
                _apply(r / name, kind, data.draw)
                if (r / name).parent.name == "checkpoint" and data.draw(st.booleans()):
                    _reseal((r / name).parent)
        for d in r.glob("*/checkpoint"):
            if data.draw(st.booleans()):
                d.rename(d.with_name("checkpoint.old"))
        yield r


@FUZZ
@given(st.data())
def test_damaged_results_through_the_report_reader(template: Path, data: st.DataObject) -> None:
    with damaged(template, data) as r:
        before = _listing(r)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                runs = load_runs(r)
                read_sessions(r)
        except ActorQError as e:
            event("error")
            _one_line(str(e))
            assert "/checkpoint" not in str(e)  # a checkpoint not read is a warning, its row kept
        else:  # what the report then computes with is well typed and finite
            event(f"read, {len(err.getvalue().splitlines())} warning(s)")
            for run in runs:
                steps = run.checkpoint_steps
                assert steps is None or (type(steps) is int and 0 <= steps <= MAX_MAGNITUDE)
                assert isinstance(run.seed, int) and all(isinstance(w, int) for w in run.width)
                assert math.isfinite(run.log_every) and run.log_every > 0
                assert all(math.isfinite(w) and math.isfinite(v) for _, w, _, v in run.rows)
                for key in ("eval_return", "wall_time_s", "time_to_target_s", "energy_kwh",
                            "eval_time_s", "steps_to_target", "target_return"):  # fmt: skip
                    v = run.summary_value(key)
                    assert v is None or math.isfinite(float(v))
                assert run.target is None or math.isfinite(run.target)
        for line in err.getvalue().splitlines():
            assert line.startswith("actorq: warning: ")
        assert _listing(r) == before


@FUZZ
@given(st.data())
def test_damaged_results_in_a_resumed_bench(template: Path, data: st.DataObject) -> None:
    with _sb3_present():
        spec = load_spec(template / "small.toml")
    with damaged(template, data) as r:
        before = _listing(r)
        try:
            plan = plan_matrix(spec, r)
        except ActorQError as e:
            event("error")
            _one_line(str(e))
        else:
            event(f"{len(plan.todo)} cell(s) to run")
            assert len(plan.finished) + len(plan.todo) == len(spec.cells)
        assert _listing(r) == before


def _not_json(name: str) -> None:
    raise AssertionError(f"{name} is not standard JSON")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_results_through_actorq_report(template: Path, data: st.DataObject) -> None:
    """End to end, fewer examples (each draws plots): the outputs are all there, or none is."""
    pytest.importorskip("rliable")
    pytest.importorskip("matplotlib")
    with damaged(template, data) as r:
        before = _listing(r)
        rc, _, err = _cli(["report", str(r), "--reps", "100"])
        event(f"exit status {rc}")
        assert rc in (0, 2)
        after = _listing(r)
        if rc == 2:
            _one_line(err)
            assert err.startswith("actorq: error: ") and after == before
        else:
            assert all(ln.startswith("actorq: warning: ") for ln in err.splitlines())
            new = set(after) - set(before)
            assert all(after[k] == before[k] for k in before)
            assert {"report.md", "report.json"} <= new
            for name in ("report.json", "summary.json"):  # standard JSON: no NaN, no Infinity
                if (r / name).exists():
                    json.loads((r / name).read_text(), parse_constant=_not_json)
            # summary.json: issue 50's Atari rows, beside the report where Atari cells are
            assert all(
                n.startswith("report.") or n.endswith(".png") or n == "summary.json" for n in new
            )
