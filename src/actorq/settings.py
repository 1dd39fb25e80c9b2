"""Typed settings: the one validation layer every config goes through, and config groups.

A config is a dataclass whose fields are settings or *groups*: nested dataclasses of settings
that belong together (GO's policy, PPO, imitation, exploration, distillation; a backend's own
settings). A group is a section of ``--help``, but its flags keep their plain names
(``--sil-coef``, not ``--exploration.sil-coef``): every leaf name is unique across a config, so
the flat spelling of a setting is unambiguous, and :class:`Grouped` accepts it wherever it takes a
setting by name — constructor keywords, ``config.json``, bench specs — as well as the nested one.

This module depends on nothing but :mod:`actorq.errors`, so a backend's package can declare its
settings group (``actorq.distributed.settings``) without importing the config that holds it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

import tyro

from actorq.errors import ConfigError, short

#: A group field's annotation marker: its settings keep their plain flag names in ``--help``.
Group = tyro.conf.OmitArgPrefixes


@dataclasses.dataclass(frozen=True)
class Bound:
    """The range a numeric config field must lie in: ``lo``/``hi`` inclusive unless ``*_open``.
    Every float must also be finite (NaN and ±inf are bad input, whatever the range)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def check(self, name: str, v: float) -> None:
        bad = (self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo))) or (
            self.hi is not None and (v > self.hi or (self.hi_open and v == self.hi))
        )
        if bad:
            raise ConfigError(f"{flag(name)} must be {self.describe()}, got {short(v)}")

    def describe(self) -> str:
        if self.lo is not None and self.hi is not None:
            left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
            return f"in {left}{_num(self.lo)}, {_num(self.hi)}{right}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {_num(self.hi)}"
        return "finite"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


POSITIVE = Bound(0, None, lo_open=True)
NON_NEGATIVE = Bound(0)
AT_LEAST_1 = Bound(1)
FINITE = Bound()


def whole_number(v: float) -> int | None:
    """``v`` as an int when it is a finite whole number (``1e5``, ``2.5e5``, ``1000.0``), else
    None: SB3 and CleanRL users write step counts as ``1e5``, which Python and TOML read as a
    float, and an integer setting takes it as the number it names."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    if isinstance(v, int):
        return v
    return int(v) if math.isfinite(v) and v.is_integer() else None


def flag(name: str) -> str:
    """A setting's command-line flag (groups add no prefix)."""
    return "--" + name.replace("_", "-")


def _strip(hint: Any) -> Any:
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


@functools.cache
def group_types(cls: type) -> dict[str, type]:
    """``cls``'s group fields: name -> the group's dataclass."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: _strip(hints[f.name])
        for f in dataclasses.fields(cls)
        if isinstance(_strip(hints[f.name]), type)
        and dataclasses.is_dataclass(_strip(hints[f.name]))
    }


@functools.cache
def leaf_paths(cls: type) -> dict[str, str | None]:
    """Every setting of ``cls`` by its flat name -> the group holding it (None: top level)."""
    groups = group_types(cls)
    out: dict[str, str | None] = {}
    for f in dataclasses.fields(cls):
        if f.name in groups:
            for name in leaf_paths(groups[f.name]):
                out[name] = f.name
        else:
            out[f.name] = None
    return out


@functools.cache
def flat_hints(cls: type) -> dict[str, Any]:
    """Every setting of ``cls`` by its flat name -> its type (groups flattened)."""
    out: dict[str, Any] = {}
    groups = group_types(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        out.update(flat_hints(groups[f.name]) if f.name in groups else {f.name: hints[f.name]})
    return out


def nest(cls: type, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor keywords of ``cls`` from settings given flat (``sil_coef=1``), nested
    (``exploration={"sil_coef": 1}`` or a group instance) or both (a flat key wins over its
    group's value). Unknown keys are kept, for the constructor to refuse."""
    paths, groups = leaf_paths(cls), group_types(cls)
    out: dict[str, Any] = {}
    pending: dict[str, dict[str, Any]] = {}
    for key, value in kwargs.items():
        if key in groups:
            if isinstance(value, Mapping):
                pending.setdefault(key, {}).update(
                    {k: v for k, v in value.items() if k not in pending.get(key, {})}
                )
            else:
                out[key] = value
        elif paths.get(key) is not None:
            pending.setdefault(str(paths[key]), {})[key] = value
        else:
            out[key] = value
    for name, settings in pending.items():
        base = out.pop(name, None)
        gcls = groups[name]
        if base is not None and not isinstance(base, gcls):
            raise ConfigError(f"{name} settings must be {gcls.__name__}, got {base!r}")
        if base is not None:
            settings = {f.name: getattr(base, f.name) for f in dataclasses.fields(gcls)} | settings
        out[name] = gcls(**nest(gcls, settings))
    return out


def flat_items(cfg: Any) -> Iterator[tuple[str, Any]]:
    """``cfg``'s settings by flat name, groups flattened, in declaration order."""
    klass: type = type(cfg)
    groups = group_types(klass)
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name in groups:
            yield from flat_items(v)
        else:
            yield f.name, v


def check_fields(cfg: Any) -> None:
    """The one validation layer for configs: every field has its declared type (ints are not
    bools, floats are finite numbers, a Literal is one of its values) and lies in the range
    the class declares in ``bounds`` (merged over the class hierarchy), in groups too (each
    group's class declares its own ``bounds``). Raises ConfigError naming the setting's flag."""
    klass: type = type(cfg)
    hints = typing.get_type_hints(klass)
    groups = group_types(klass)
    bounds: dict[str, Bound] = {}
    for klass in reversed(type(cfg).__mro__):
        bounds.update(getattr(klass, "bounds", {}) if "bounds" in vars(klass) else {})
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name in groups:
            if not isinstance(v, groups[f.name]):
                raise ConfigError(f"{f.name} settings must be {groups[f.name].__name__}, got {v!r}")
            check_fields(v)
            continue
        if isinstance(v, float) and int_typed(hints[f.name]):
            # 1e5 from TOML, JSON or Python: the int it names, or one line if it names none
            n = whole_number(v)
            if n is None:
                bad = f"{short(v)}, not a whole number"
                raise ConfigError(f"{flag(f.name)} has the wrong type: {bad}")
            setattr(cfg, f.name, n)
            v = n
        _check_type(f.name, v, hints[f.name])
        if f.name in bounds and isinstance(v, int | float) and not isinstance(v, bool):
            bounds[f.name].check(f.name, v)
        if isinstance(v, int) and not isinstance(v, bool) and _is_float(hints[f.name]):
            # a whole number where a float goes (TOML's `log_std_init = 2`, Python's
            # PPOConfig(ent_coef=0)) becomes one: torch would make an integer tensor of it
            setattr(cfg, f.name, float(v))  # in range: _check_type checked it


_FLOAT_MAX = sys.float_info.max


def _is_float(hint: Any) -> bool:
    """Whether a field's type is ``float`` (``Annotated`` or optional included)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return _is_float(args[0])
    if origin in (typing.Union, types.UnionType):
        return any(_is_float(a) for a in args if a is not type(None)) and int not in args
    return hint is float


def int_typed(hint: Any) -> bool:
    """Whether a field's type is ``int`` (``Annotated`` or optional included), not a float."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return int_typed(args[0])
    if origin in (typing.Union, types.UnionType):
        return int in args and float not in args
    return hint is int


def _check_type(name: str, v: Any, hint: Any) -> None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return _check_type(name, v, args[0])
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
        return _check_type(name, v, hint)
    if origin is Literal:
        if v not in args:
            raise ConfigError(f"{flag(name)} must be one of {', '.join(map(str, args))}, got {v!r}")
        return None
    if hint is bool:
        ok = isinstance(v, bool)
    elif hint is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif hint is float:
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        if ok and not (abs(v) <= _FLOAT_MAX):  # NaN, ±inf, or a whole number past float's range
            raise ConfigError(f"{flag(name)} must be a finite number, got {short(v)}")
    elif hint is str:
        ok = isinstance(v, str)
    elif origin is tuple and args[:1] == (str,):
        ok = isinstance(v, tuple) and all(isinstance(x, str) for x in v)
    elif origin is tuple:
        ok = isinstance(v, tuple) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    else:
        ok = True
    if not ok:
        raise ConfigError(f"{flag(name)} has the wrong type: {v!r}")
    return None


class GroupedMeta(type):
    """Lets a grouped config's constructor take settings flat as well as nested
    (:func:`nest`): ``GOConfig(sil_coef=1.0)`` is ``GOConfig(exploration=...(sil_coef=1.0))``.
    ``dataclasses.replace`` goes through here too."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return super().__call__(*args, **nest(cls, kwargs))


class Grouped(metaclass=GroupedMeta):
    """Base of configs with groups. Besides the nested spelling (``cfg.exploration.sil_coef``,
    what actorq's own code uses), a setting reads and writes by its flat name
    (``cfg.sil_coef``), as it did before it had a group."""

    if not typing.TYPE_CHECKING:  # the type checker sees (and checks) the nested spelling only

        def __getattr__(self, name: str) -> Any:  # called only when normal lookup fails
            group = leaf_paths(type(self)).get(name) if not name.startswith("__") else None
            if group is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            return getattr(object.__getattribute__(self, group), name)

        def __setattr__(self, name: str, value: Any) -> None:
            group = leaf_paths(type(self)).get(name)
            if group is None:
                object.__setattr__(self, name, value)
            else:
                setattr(getattr(self, group), name, value)
