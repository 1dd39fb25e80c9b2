"""``actorq train ALGO``, and the one-line error every ``actorq`` command prints.

Shared by the top-level command (:mod:`actorq.cli.main`) and the world commands that train an
agent (``actorq graphopt train``): the CLIs dispatch downward, never back up.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Any, TypeVar

import tyro

from actorq.cli.args import parse
from actorq.config import ARCHIVE_COMMIT, ExperimentConfig, not_this_backend
from actorq.errors import ActorQError, ConfigError, EnvIdError
from actorq.settings import flag, flat_items, group_types, leaf_paths

C = TypeVar("C", bound=ExperimentConfig)


def fail(msg: str, code: int = 2) -> int:
    """Print ``actorq: error: MSG`` on one line and return ``code`` (the exit status)."""
    # one line whatever the input held: a control character typed into a flag (a carriage
    # return in a path, found by the fuzz tests) is shown escaped, not printed
    msg = "".join(c if c.isprintable() else repr(c)[1:-1] for c in msg)
    print(f"actorq: error: {msg}", file=sys.stderr)
    return code


def cmd_train(algo: str, argv: list[str]) -> int:
    from actorq.agents import AGENTS, config_class

    if algo not in AGENTS:
        return fail(f"unknown algorithm {algo!r}; available: {', '.join(AGENTS)}")

    cfg = parse_config(config_class(algo), argv, f"actorq train {algo}")
    cfg.validate()
    from actorq.envs import observes_pixels, preset, validate_env_id

    validate_env_id(cfg.env)
    if observes_pixels(cfg.env):  # before the preset's note: bad input is the one line printed
        from actorq.agents.pixels import check_pixel_config

        check_pixel_config(cfg, cfg.env)
    if preset(cfg.env, algo) and not cfg.resume:
        family = cfg.env.partition(":")[0]
        print(
            f"actorq: {algo} on {cfg.env} starts from the {family} preset (actorq.envs.{family}."
            f"PRESETS: --help lists its values); flags override it",
            file=sys.stderr,
        )
    from actorq.experiment import train

    result = train(cfg, given=given_settings(cfg, argv) if cfg.resume else None)
    if result.interrupted:
        print(
            f"actorq: interrupted; checkpoint saved. Resume with: actorq train {algo} "
            f"--resume {result.run_dir}  (evaluate it: actorq eval {result.run_dir})",
            file=sys.stderr,
        )
        return 130
    return 0


def parse_config(cls: type[C], argv: list[str], prog: str) -> C:
    """An agent's config from the command line. A backend's settings group is on the command
    line (and in ``--help``) only with that backend (``--backend ray``); one of its flags
    without it, or a retired setting's flag, is one line naming the flag."""
    retired = {flag(name): why for name, (_, why) in cls.retired.items()}
    for token in argv:
        name = _flag_of(token)
        if name in retired or (name.startswith("--no-") and "--" + name[5:] in retired):
            name = name if name in retired else "--" + name[5:]
            raise ConfigError(
                f"{name} was retired ({retired[name]}); run it from commit {ARCHIVE_COMMIT}"
            )
    backend = _last_value(argv, "--backend", _resumed_backend(argv, cls))
    hidden = [g for g, owner in cls.backend_groups.items() if owner != backend]
    for g in hidden:
        group = group_types(cls)[g]
        flags = {flag(n) for n in leaf_paths(group)}
        flags |= {"--no-" + f[2:] for f in flags}
        for token in argv:
            if _flag_of(token) in flags:
                raise ConfigError(not_this_backend(_flag_of(token), cls.backend_groups[g], backend))
    start = _start(cls, argv)
    if not hidden:
        cfg = parse(cls, argv, prog, start)
    else:
        narrow = _without_groups(cls, tuple(hidden))
        fields = [f.name for f in dataclasses.fields(cls)]
        parsed = parse(narrow, argv, prog, narrow(**{n: getattr(start, n) for n in fields}))
        cfg = cls(**{n: getattr(parsed, n) for n in fields})
    if cfg.resume:
        _resume_from_command_line(cfg, argv)
    return cfg


def _resumed_backend(argv: list[str], cls: type[ExperimentConfig]) -> str:
    """The backend of the run ``--resume`` names, which its resume keeps unless ``--backend``
    is given (so ``--resume RAY_RUN --replay-shards 4`` needs no ``--backend ray``); the
    class's default for a new run, or a run directory the resume itself refuses in one line."""
    resume = _last_value(argv, "--resume", "")
    if resume in ("", "None"):
        return cls.backend
    from actorq.rundir import RunDir

    try:
        backend = RunDir(Path(resume)).read_config_json().get("backend")
    except (ActorQError, OSError):
        return cls.backend
    return str(backend) if backend in cls.backend_groups.values() else cls.backend


def given_settings(cfg: ExperimentConfig, argv: list[str]) -> list[str]:
    """The settings of ``cfg`` the command line ``argv`` gives a value, by flat name (a flag or
    its ``--no-`` form), whatever the value: a resume takes or refuses each of them."""
    given = {_flag_of(token) for token in argv}
    return [n for n, _ in flat_items(cfg) if {flag(n), "--no-" + flag(n)[2:]} & given]


def _start(cls: type[C], argv: list[str]) -> C:
    """The flags' defaults. A new run's are its env's family preset (Atari: rl-zoo's settings),
    so ``--help`` shows them and each flag given overrides them; a resume's are the class's
    own (the saved run's settings stand, and a flag given is checked against them)."""
    if _last_value(argv, "--resume", "") not in ("", "None"):  # tyro reads "None" as None
        return cls()
    try:
        return cls.for_env(_last_value(argv, "--env", cls.env))
    except EnvIdError:  # tyro's parse first (--help, a flag without its value), then the id's line
        return cls()


def _resume_from_command_line(cfg: ExperimentConfig, argv: list[str]) -> None:
    """``actorq train ALGO --resume RUN``: every option given that differs from RUN's saved
    settings is refused in one line, even at its default value (the library can only tell
    options from defaults by value), and RUN's own ``--total-steps`` and stop rule stand
    unless the command line gives them (the library resumes with the config's values, and the
    default budget would cut a longer run short, e.g. an Atari preset's 2.5M steps at 500k)."""
    from actorq.run.directory import load_run_config
    from actorq.run.resume import RESUME_BUDGET, given_conflicts, refuse_conflicts

    try:
        saved = load_run_config(Path(str(cfg.resume)), device="cpu")
    except ActorQError:
        return  # the resume itself says what is wrong with the run, in one line
    if saved.agent != cfg.agent:
        return  # likewise ("a dqn run; resume it with dqn")
    given = given_settings(cfg, argv)
    refuse_conflicts(str(cfg.resume), given_conflicts(cfg, saved, given))
    for name in RESUME_BUDGET.difference(given):  # the run's own budget stands
        setattr(cfg, name, getattr(saved, name))


def _flag_of(token: str) -> str:
    """The flag a command-line token names, spelled with hyphens (tyro also takes
    underscores), or the token itself."""
    if not token.startswith("--"):
        return token
    return token.partition("=")[0].replace("_", "-")


def _last_value(argv: list[str], name: str, default: str) -> str:
    """The value the command line gives flag ``name``: its last ``NAME X`` or ``NAME=X``
    (argparse's rule), or ``default``."""
    value = default
    for i, token in enumerate(argv):
        if _flag_of(token) == name:
            if "=" in token:
                value = token.partition("=")[2]
            elif i + 1 < len(argv):
                value = argv[i + 1]
    return value


def _without_groups(cls: type[C], groups: tuple[str, ...]) -> type[C]:
    """``cls`` with ``groups`` left off the command line (kept at their defaults)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    ns: dict[str, Any] = {
        "__annotations__": {g: Annotated[group_types(cls)[g], tyro.conf.Suppress] for g in groups},
        "__doc__": cls.__doc__,
        "__module__": cls.__module__,
        **{g: dataclasses.field(default_factory=fields[g].default_factory) for g in groups},
    }
    out: type[C] = dataclasses.dataclass(type(cls.__name__, (cls,), ns))
    return out
