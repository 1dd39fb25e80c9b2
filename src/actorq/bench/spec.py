"""A benchmark matrix from a small TOML file: agent × env × precision × seed × policy width.

QuaRL (Lam et al., TMLR 2022) compares, per task, fp32 actors with quantized ones over several
seeds; a spec names those tasks and axes once, and every cell is one ``actorq.train`` run::

    name = "smoke"
    precisions = ["fp32", "int8"]      # axes for every task (a task may override them)
    seeds = [0, 1]
    timeout_s = 900                    # optional: a cell running longer is killed, marked failed
    resume = true                      # optional: a partial cell continues from its checkpoint
    order = "seeds"                    # optional: every task's first seed before any second
    country = "USA"                    # optional: grid for the CO2 of each run (actorq.energy)

    [defaults]                         # config fields for every cell
    actors = 1

    [[tasks]]
    agent = "dqn"                      # dqn | d4pg | ppo | go
    env = "gym:CartPole-v1"
    widths = ["64,64", "256,256"]      # optional axis: the policy's hidden widths
    label = "cartpole"                 # optional: the task's name in cell names and the report
    [tasks.config]                     # config fields for this task's cells
    total_steps = 20000
    target_return = 475

Keys under ``[defaults]`` and ``[tasks.config]`` are exactly the fields of the agent's config
dataclass (``actorq.agents.config_class``); ``env``, ``precision``, ``seed``, ``run_dir``,
``resume`` and ``progress`` belong to the matrix and cannot be set there. :func:`load_spec`
checks names and value types, then :meth:`Spec.validate` builds and validates every cell's config,
so a bad spec fails in one line before anything runs.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import re
import sys
import tomllib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actorq.agents import AGENTS, config_class
from actorq.bench.frameworks import FRAMEWORKS, NATIVE, get_adapter
from actorq.config import ExperimentConfig, parse_hidden
from actorq.energy import DEFAULT_COUNTRY
from actorq.errors import ActorQError, ConfigError, short, shown
from actorq.inputs import read_input
from actorq.settings import flat_hints, int_typed, whole_number


class SpecError(ActorQError):
    """A benchmark spec that names an unknown agent, field, precision or env, or a bad value."""

    def __init__(self, msg: str) -> None:
        super().__init__(one_line(msg))


# what str.splitlines() breaks at
_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def one_line(msg: str) -> str:
    """``msg`` with its line breaks escaped. Values from a file are quoted with repr() where
    they are known, but a path, a key or a library's message can carry a line break too, and
    the CLI promises one line."""
    return _LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], msg)


def _names(keys: set[str]) -> str:
    return ", ".join(k if k.isprintable() else repr(k) for k in sorted(keys))


#: config fields the matrix sets itself
RESERVED = frozenset({"env", "precision", "seed", "run_dir", "resume", "progress"})
_TOP_KEYS = frozenset(
    {"name", "precisions", "seeds", "frameworks", "timeout_s", "country", "resume", "order",
     "defaults", "tasks"}
)  # fmt: skip
#: the order cells run in: each task's cells in turn, or every task's first seed before any
#: task's second (``order = "seeds"``)
ORDERS = ("tasks", "seeds")
_TASK_KEYS = frozenset(
    {"agent", "env", "label", "widths", "precisions", "seeds", "frameworks", "config"}
)
#: the longest timeout_s: a cell allowed more than 30 days is a unit slip (minutes or
#: milliseconds written as seconds), not a limit anyone means to wait for
MAX_TIMEOUT_S = 30 * 24 * 3600.0
#: bytes in one file name on Linux and macOS: cell names and bench-<name> are directory names
_MAX_NAME_BYTES = 255
#: A spec is a page of TOML: a file past this is not one.
MAX_SPEC_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class Cell:
    """One run of the matrix; ``name`` is its results subdirectory (deterministic)."""

    name: str
    task: str  # the task's label: the report's row
    agent: str
    env: str
    precision: str
    seed: int
    width: tuple[int, ...]  # the policy's hidden widths
    config: dict[str, Any]  # every config field the spec sets (matrix axes included)
    framework: str = NATIVE  # who trains it: actorq, or another framework through its adapter
    frameworks: tuple[str, ...] = (NATIVE,)  # the task's framework axis (checked on resume)
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)  # the adapter's own

    def make_config(self) -> ExperimentConfig:
        return config_class(self.agent).from_json(self.config)


def run_config(agent: str, config: dict[str, Any], country: str) -> ExperimentConfig:
    """A cell's config as its process (:mod:`actorq.bench.cell`) runs it: the spec's fields,
    plus what the matrix sets for every cell (energy tracked on the spec's grid unless the
    spec says ``energy = false``, no progress bar). One function for both, so that the spec is
    validated as the cells will run."""
    cfg = config_class(agent).from_json(config)
    cfg.progress = False
    cfg.energy, cfg.energy_country = bool(config.get("energy", True)), country
    return cfg


@dataclasses.dataclass
class Spec:
    name: str
    path: Path
    text: str  # the TOML as written (copied next to the results)
    cells: list[Cell]
    timeout_s: float | None
    country: str
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)  # --override K=V
    #: a partial cell with a checkpoint continues from it (its times span sessions) instead of
    #: starting over: for cells that run for hours (``resume = true``; docs/bench.md)
    resume: bool = False
    #: cells a fresh start would refuse (``train()``'s new-run check: an int8 MLP with one
    #: hidden layer), by name: one line when the plan would start one, not for a cell it
    #: resumes or that finished (made before the check)
    refused_if_new: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def sha256(self) -> str:
        extra = json.dumps(self.overrides, sort_keys=True) if self.overrides else ""
        return hashlib.sha256((self.text + extra).encode()).hexdigest()

    def validate(self) -> None:
        """Build each cell's config as its process will and run the config's own checks
        (``validate()``: types, ranges, finite numbers, precision, device, grid) and the env id's;
        then, for actorq's cells, what ``train()`` checks before it writes a file: the agent's
        builder reads the env (``env_spec``: an env the agent cannot act in, a pixel setting it
        does not run) and the run must fit in memory (``check_run_memory``). Those checks run
        once per distinct config: the seed changes none of them.
        """
        from actorq.agents import builder_for
        from actorq.envs import validate_env_id
        from actorq.run.memory import check_run_memory

        for fw in sorted({c.framework for c in self.cells} - {NATIVE}):
            missing = get_adapter(fw).missing()
            if missing:
                raise SpecError(f"{self.path}: framework {fw!r} needs {missing}")
        checked: dict[str, str | None] = {}  # a config's new-run refusal, None if none
        for cell in self.cells:
            try:
                cfg = run_config(cell.agent, cell.config, self.country)
                cfg.validate()
                validate_env_id(cfg.env)
                key = json.dumps([cell.agent, {**cell.config, "seed": 0}], sort_keys=True)
                if cell.framework == NATIVE and key not in checked:
                    builder = builder_for(cfg)
                    env = builder.env_spec(cfg)
                    builder.check_spec(env)
                    check_run_memory(cfg, builder, env, device=False)  # cells ask the GPU
                    try:
                        builder.check_new_run(cfg, env)
                        checked[key] = None
                    except ConfigError as e:
                        checked[key] = str(e)
            except ActorQError as e:
                raise SpecError(f"{self.path}: cell {cell.name}: {e}") from None
            if cell.framework == NATIVE and checked[key] is not None:
                self.refused_if_new[cell.name] = f"{self.path}: cell {cell.name}: {checked[key]}"


def only_tasks(spec: Spec, labels: Sequence[str]) -> Spec:
    """``spec`` with only the cells of the tasks labelled ``labels`` (all when empty)."""
    known = list(dict.fromkeys(c.task for c in spec.cells))
    for label in labels:
        if label not in known:
            raise SpecError(
                f"--tasks: no task labelled {label!r} in {spec.path}; it has {', '.join(known)}"
            )
    if labels:
        spec.cells = [c for c in spec.cells if c.task in labels]
    return spec


def only_cells(spec: Spec, patterns: Sequence[str]) -> Spec:
    """``spec`` with only the cells whose names match one of ``patterns`` (shell-style:
    ``*-s1``, ``ppo-pong-*-int8-s2``; all when empty), in the spec's order: one cell of a long
    matrix on this machine, the rest elsewhere or later. A pattern that matches no cell is one
    line listing the cells."""
    names = [c.name for c in spec.cells]
    for pattern in patterns:
        if not pattern or not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            some = ", ".join(names[:6]) + (f", ... ({len(names)} cells)" if len(names) > 6 else "")
            raise SpecError(f"--cells: {pattern!r} matches no cell of {spec.path}; it has {some}")
    if patterns:
        spec.cells = [
            c for c in spec.cells if any(fnmatch.fnmatchcase(c.name, p) for p in patterns)
        ]
    return spec


def width_slug(width: tuple[int, ...]) -> str:
    return "w" + "x".join(str(w) for w in width)


def _env_slug(env: str) -> str:
    return env.replace(":", "-").replace("/", "-")


def _type_ok(value: Any, hint: Any) -> bool:
    """Whether a TOML value fits a config field's annotation (int, float, bool, str, Literal,
    optional, widths)."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(hint) if a is not type(None))
    if origin is tuple:
        if typing.get_args(hint)[:1] == (str,):  # names (GO's graphs): ["a", "b"]
            return isinstance(value, list) and all(isinstance(v, str) for v in value)
        # widths: "W,W,..." or [W, W, ...]
        return isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, int) for v in value)
        )
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:  # 1e5 too (TOML's float): the config's check_fields takes it as 100000
        return whole_number(value) is not None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    return True  # a type this checker does not know: the config's validate() decides


def _check_fields(where: str, agent: str, fields: dict[str, Any]) -> None:
    cls = config_class(agent)
    hints = flat_hints(cls)  # settings by flat name, groups too
    known = set(hints)
    for key, value in fields.items():
        if key in RESERVED:
            raise SpecError(f"{where}: {key!r} is set by the matrix (tasks, precisions, seeds)")
        if key not in known:
            raise SpecError(f"{where}: {key!r} is not a {cls.__name__} field")
        if not _type_ok(value, hints[key]):
            raise SpecError(f"{where}: {key} = {value!r} does not fit its type {hints[key]}")
        if isinstance(value, float) and int_typed(hints[key]):
            # 1e5 where only an int goes: the int, so cells, their configs and the spec's
            # hash read `actors=2e0` as `actors=2`
            fields[key] = whole_number(value)


def _unique_list(where: str, v: Any, kind: type) -> list[Any]:
    # bool is a subclass of int: `seeds = [true]` is not a seed
    if (
        not isinstance(v, list)
        or not v
        or not all(isinstance(x, kind) and not isinstance(x, bool) for x in v)
    ):
        raise SpecError(f"{where} must be a non-empty list of {kind.__name__}")
    if len(set(v)) != len(v):
        raise SpecError(f"{where} has repeated values: {v}")
    return list(v)


def check_frameworks(where: str, value: Any) -> list[str]:
    """A framework axis: ``actorq`` and the names of :data:`~actorq.bench.frameworks.FRAMEWORKS`."""
    names = _unique_list(where, value, str)
    for name in names:
        if name != NATIVE and name not in FRAMEWORKS:
            known = ", ".join([NATIVE, *FRAMEWORKS])
            raise SpecError(f"{where}: unknown framework {name!r}; expected one of {known}")
    return names


def framework_settings(where: str, framework: str, agent: str, settings: Any) -> dict[str, Any]:
    """A task's ``[tasks.<framework>]`` table, checked by the framework's adapter (names and
    types; the framework itself is not imported here)."""
    if not isinstance(settings, dict):
        raise SpecError(f"{where} must be a table of {framework}'s settings")
    try:
        get_adapter(framework).check(agent, settings)
    except ActorQError as e:
        raise SpecError(f"{where}: {e}") from None
    return settings


def _has_huge_int(doc: Any) -> bool:
    """Whether ``doc`` holds an integer past Python's limit on writing one as text (4,300
    digits by default): tomllib refuses such a decimal literal, but reads one written in hex,
    octal or binary, and every message that quotes the value would then raise."""
    limit = sys.get_int_max_str_digits()
    bound = 10**limit if limit else None
    todo = [doc]
    while todo:  # a loop, not recursion: tomllib reads lists nested deeper than a stack holds
        v = todo.pop()
        if isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
        elif isinstance(v, int) and bound is not None and abs(v) >= bound:
            return True
    return False


def _toml_loads(text: str) -> dict[str, Any]:
    """``tomllib.loads``, with every integer too long to write as text refused as tomllib
    refuses a decimal one: a ValueError that is not a TOMLDecodeError."""
    doc = tomllib.loads(text)
    if _has_huge_int(doc):
        raise ValueError("an integer too long")
    return doc


def _huge_int_msg() -> str:
    return f"an integer of more than {sys.get_int_max_str_digits():,} digits"


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["device=cuda", "actors=15"]`` → ``{"device": "cuda", "actors": 15}``: each value is
    read as a TOML value (numbers, booleans, quoted strings), else taken as a plain string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise SpecError(f"--override {item!r}: expected KEY=VALUE, e.g. device=cuda")
        try:
            parsed = _toml_loads(f"v = {value}")
        except (tomllib.TOMLDecodeError, RecursionError):
            out[key] = value
            continue
        except ValueError:  # not TOML's syntax: a number no message can quote
            raise SpecError(f"--override {short(item)}: {_huge_int_msg()}") from None
        # "1\nseed = 3" parses as two keys: never take the first and drop the rest silently
        if list(parsed) != ["v"]:
            raise SpecError(f"--override {item!r}: expected one TOML value after '='")
        out[key] = parsed["v"]
    return out


def _dir_name(where: str, what: str, name: str, max_bytes: int, too_long: str = "") -> None:
    """Raise unless ``name`` can be (part of) one directory name: cells are directories, and
    so is the default results directory, bench-<name>."""
    if not name.isprintable() or "/" in name or name in (".", ".."):
        raise SpecError(f"{where}: {what} {name!r} must be printable, without '/'")
    if len(name.encode()) > max_bytes:
        raise SpecError(
            f"{where}: {what} {name[:40]!r}... is longer than {max_bytes} bytes, too long for "
            f"a directory name{too_long}"
        )


def _read_toml(path: Path) -> tuple[str, dict[str, Any]]:
    """The spec's text and its parsed TOML; one SpecError line for a file that is not."""
    data = read_input(path, f"spec {shown(path)}", SpecError, limit=MAX_SPEC_BYTES)
    try:
        text = data.decode("utf-8")  # TOML is UTF-8 (tomllib reads str; the locale is not it)
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start}); TOML files are UTF-8") from None
    try:
        return text, _toml_loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: invalid TOML: {e}") from None
    except ValueError:  # not a TOMLDecodeError: an integer too long (_toml_loads)
        raise SpecError(f"{path}: invalid TOML: {_huge_int_msg()}") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise SpecError(f"{path}: invalid TOML: nested too deep") from None


@dataclasses.dataclass
class _Axes:
    """The spec's top level: what every task inherits unless it sets its own."""

    precisions: list[str]
    seeds: list[int]
    frameworks: list[str]
    path: Path
    defaults: dict[str, Any]
    overrides: dict[str, Any]
    used: set[str]  # overrides that some task's agent has


def _timeout(path: Path, raw: dict[str, Any]) -> float | None:
    timeout = raw.get("timeout_s")
    if timeout is not None and (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or not 0 < timeout <= MAX_TIMEOUT_S  # False for NaN too
    ):
        raise SpecError(
            f"{path}: timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:.0f}], "
            f"got {timeout!r}"
        )
    return None if timeout is None else float(timeout)


def _top_level(path: Path, raw: dict[str, Any], overrides: dict[str, Any]) -> _Axes:
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise SpecError(f"{path}: unknown key(s) {_names(unknown)}")
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SpecError(f"{path}: [defaults] must be a table of config fields")
    tasks = raw.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise SpecError(f"{path}: no [[tasks]]")
    return _Axes(
        precisions=_unique_list(
            f"{path}: precisions", raw.get("precisions", ["fp32", "int8"]), str
        ),
        seeds=_unique_list(f"{path}: seeds", raw.get("seeds", [0]), int),
        frameworks=check_frameworks(f"{path}: frameworks", raw.get("frameworks", [NATIVE])),
        path=path,
        defaults=defaults,
        overrides=overrides,
        used=set(),
    )


def _widths(where: str, task: dict[str, Any], cls: Any, fields: dict[str, Any],
            explicit: dict[str, Any]) -> list[tuple[int, ...]]:  # fmt: skip
    """The task's widths axis: ``widths``, else the config's width field (an override of that
    field replaces the axis). An agent without width fields (GO: its width is one int,
    ``hidden``) has one cell per seed and column, of no width."""
    if not cls.width_fields:
        if "widths" in task:
            raise SpecError(
                f"{where}: agent {cls.agent!r} has no widths axis; set its config fields instead"
            )
        return [()]
    wfield = cls.width_fields[0]
    try:
        if "widths" in task and wfield not in explicit["overrides"]:
            if wfield in explicit["config"]:
                raise SpecError(f"{where}: set either widths or config.{wfield}, not both")
            return [
                parse_hidden(w, f"{where}.widths")
                for w in _unique_list(f"{where}.widths", task["widths"], str)
            ]
        return [parse_hidden(fields.get(wfield, getattr(cls(), wfield)), wfield)]
    except ActorQError as e:
        raise SpecError(str(e)) from None


def _task_cells(where: str, task: Any, axes: _Axes) -> list[Cell]:
    """One task's cells: widths × seeds × (frameworks, actorq's crossed with precisions), in
    that order."""
    if not isinstance(task, dict):
        raise SpecError(f"{where} must be a table")
    frameworks = check_frameworks(f"{where}.frameworks", task.get("frameworks", axes.frameworks))
    unknown = set(task) - _TASK_KEYS - set(frameworks)
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {_names(unknown)}")
    agent = task.get("agent")
    if not isinstance(agent, str) or agent not in AGENTS:  # a list is not hashable
        raise SpecError(f"{where}: unknown agent {agent!r}; expected one of {', '.join(AGENTS)}")
    env = task.get("env")
    if not isinstance(env, str) or not env:
        raise SpecError(f'{where}: missing env (e.g. env = "gym:CartPole-v1")')
    task_config = task.get("config", {})
    if not isinstance(task_config, dict):
        raise SpecError(f"{where}: config must be a table of config fields")
    _check_fields(f"{axes.path}: [defaults] (for {agent})", agent, axes.defaults)
    _check_fields(f"{where}.config", agent, task_config)
    cls = config_class(agent)
    # an override applies to the tasks whose agent has the field (DQN's hidden is not D4PG's)
    known = set(flat_hints(cls))
    mine = {k: v for k, v in axes.overrides.items() if k in known or k in RESERVED}
    _check_fields("--override", agent, mine)
    axes.overrides.update(mine)  # as _check_fields read them (1e5 for an int: 100000)
    axes.used.update(mine)
    fields = {**axes.defaults, **task_config, **mine}
    explicit = {"overrides": mine, "config": {**axes.defaults, **task_config}}
    widths = _widths(where, task, cls, fields, explicit)
    label = task.get("label", f"{agent}-{_env_slug(env)}")
    if not isinstance(label, str) or not label:
        raise SpecError(f"{where}: label must be a non-empty string")
    _dir_name(where, "label", label, _MAX_NAME_BYTES)
    precisions = _unique_list(f"{where}.precisions", task.get("precisions", axes.precisions), str)
    seeds = _unique_list(f"{where}.seeds", task.get("seeds", axes.seeds), int)
    # (framework, column, settings): actorq's cells per precision, another's one column
    columns: list[tuple[str, str, dict[str, Any]]] = [(NATIVE, p, {}) for p in precisions]
    if frameworks != [NATIVE]:
        columns = [
            c
            for fw in frameworks
            for c in (
                columns
                if fw == NATIVE
                else [(fw, fw, framework_settings(f"{where}.{fw}", fw, agent, task.get(fw, {})))]
            )
        ]
    wfield = cls.width_fields[0] if cls.width_fields else None
    # seed-major: the precisions and frameworks alternate cell by cell, so that a slow patch of
    # a shared machine (or the end of a short lease) hits each of them alike
    order = [(w, s, c) for w in widths for s in seeds for c in columns]
    cells = []
    for width, seed, (fw, column, settings) in order:
        prec = column if fw == NATIVE else "fp32"  # another framework's cells: fp32 only
        wcol = {} if wfield is None else {wfield: list(width)}
        config = {**fields, **wcol, "env": env, "precision": prec, "seed": seed}
        config["progress"] = False
        slug = "" if wfield is None else f"-{width_slug(width)}"  # no width axis: none in names
        cell_name = f"{label}{slug}-{column}-s{seed}"
        _dir_name(where, "cell name", cell_name, _MAX_NAME_BYTES, "; shorten its label")
        cell = Cell(cell_name, label, agent, env, column, seed, width, config)
        cells.append(dataclasses.replace(cell, framework=fw, frameworks=tuple(frameworks),
                                         settings=settings))  # fmt: skip
    return cells


def _seeds_first(cells: list[Cell]) -> list[Cell]:
    """``cells`` with every task's first seed before any task's second, and so on (stable
    otherwise): a first look at the whole matrix before more seeds of any of it, for specs whose
    cells take hours."""
    rank: dict[str, dict[int, int]] = {}
    for c in cells:
        seeds = rank.setdefault(c.task, {})
        seeds.setdefault(c.seed, len(seeds))
    return sorted(cells, key=lambda c: rank[c.task][c.seed])


def load_spec(path: str | Path, overrides: dict[str, Any] | None = None) -> Spec:
    """Read and check a spec: keys, agents, frameworks, field names and types; cells named
    uniquely.

    ``overrides`` (config field → value, e.g. from ``actorq bench --override device=cuda``)
    apply to every cell, over ``[defaults]`` and each task's ``config``: the same matrix on
    other hardware without editing the spec. They are recorded in each cell's ``cell.json`` and
    in the spec's hash. Values that need a config to judge (precision, widths, env ids) are
    checked by :meth:`Spec.validate`.
    """
    path = Path(path)
    text, raw = _read_toml(path)
    axes = _top_level(path, raw, dict(overrides or {}))
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise SpecError(f"{path}: name must be a non-empty string")
    _dir_name(str(path), "name", name, _MAX_NAME_BYTES - len("bench-"))
    timeout_s = _timeout(path, raw)
    country = raw.get("country", DEFAULT_COUNTRY)
    if not isinstance(country, str):
        raise SpecError(f"{path}: country must be an ISO 3166 alpha-3 code such as 'USA'")
    resume = raw.get("resume", False)
    if not isinstance(resume, bool):
        raise SpecError(f"{path}: resume must be true or false, got {resume!r}")
    cells = [
        c for i, t in enumerate(raw["tasks"]) for c in _task_cells(f"{path}: tasks[{i}]", t, axes)
    ]
    order = raw.get("order", "tasks")
    if order not in ORDERS:
        raise SpecError(
            f"{path}: order must be one of {', '.join(map(repr, ORDERS))}, got {order!r}"
        )
    if order == "seeds":
        cells = _seeds_first(cells)
    unused = sorted(set(axes.overrides) - axes.used)
    if unused:
        raise SpecError(f"--override: {unused[0]!r} is not a config field of any task's agent")
    names = [c.name for c in cells]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecError(f"{path}: two cells named {dup[0]}; give the tasks distinct labels")
    return Spec(name, path, text, cells, timeout_s, country, axes.overrides, resume)
