"""Errors a user can cause. The CLI prints them as one line and exits non-zero."""


def first_line(e: BaseException, limit: int = 300) -> str:
    """An exception's message as one line (its first), for errors that wrap another."""
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:limit]


class ActorQError(Exception):
    """Base class for errors caused by input (config, files, ids), not by bugs."""


class ConfigError(ActorQError, ValueError):
    """An invalid configuration value."""


class EnvIdError(ActorQError, ValueError):
    """An environment id that no factory accepts."""


class SnapshotError(ActorQError):
    """A policy snapshot that is corrupt, truncated, or carries NaN/Inf."""


class CheckpointError(ActorQError):
    """A checkpoint that is missing, incomplete or corrupt."""


class OutputError(ActorQError):
    """A file actorq writes could not be written: a full disk, a read-only filesystem, a
    permission (the run stops as Ctrl-C would, keeping its last checkpoint)."""


class DivergedError(ActorQError):
    """The learner produced non-finite losses or weights; the run stops, keeping its last
    finite checkpoint."""


class ActorFailedError(ActorQError):
    """An actor raised (its environment or policy failed, e.g. a broken env install): the run
    stops, keeping its last checkpoint, with the actor's error line; restarting it would only
    fail again. A killed actor (a signal) is restarted instead, unless every incarnation is
    killed (5 times within a minute: a SIGBUS, a native crash, the OOM killer)."""


class GraphError(ActorQError, ValueError):
    """A computation graph, cluster, placement or graph name that the graphopt tools reject."""


class NetlistError(ActorQError, ValueError):
    """A chip netlist (circuit-training protobuf text), placement (.plc) file, or netlist name
    that the chip tools reject."""


def shown(path: object) -> str:
    """A path as it appears in an error: as typed, or quoted when it holds a newline or other
    unprintable character that would break the one-line rule."""
    s = str(path)
    return s if s.isprintable() else repr(s)


def short(v: object, width: int = 60) -> str:
    """``repr(v)`` cut to ``width`` characters: a hostile value must not make a huge message."""
    try:
        r = repr(v)
    except ValueError:  # an int past Python's 4,300-digit limit on converting it to text
        r = f"<an integer of {v.bit_length() if isinstance(v, int) else '?'} bits>"
    return r if len(r) <= width else r[: width - 3] + "..."
