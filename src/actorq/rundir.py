"""The run directory as a format with a type: what ``actorq train`` writes, where, and the lock
that makes its writer the only one.

::

    RUN/config.json      the run's config (its agent's ExperimentConfig, as JSON)
    RUN/checkpoint/      the last checkpoint (actorq.checkpoint; checkpoint.old mid-swap):
                         learner.safetensors, state.json, replay.npz, snapshot.bin (the
                         actors' calibrated int8/int4 snapshot), manifest.json
    RUN/best/            the best evaluated policy, the same without the replay
    RUN/metrics.csv      every logged metric by env step; RUN/tb/ the same for TensorBoard
    RUN/summary.json     the final report (written when the run ends)
    RUN/actors/          each local actor process's config and log
    RUN/precision_auto.md  what ``--precision auto`` measured, and its choice
    RUN/.lock            held (flock) by the one process writing the run
    RUN/cell.json, RUN/log.txt  a bench cell's record and output (``actorq bench``), beside its run

A new run starts only in a directory that does not exist or holds nothing else
(:meth:`RunDir.foreign_entries`): it never mixes with, or overwrites, what a user keeps there.

Every reader and writer of a run goes through :class:`RunDir` rather than spelling paths:
the training loop, ``actorq eval``/``export``, ``actorq.load``, GO's ``--init-from``, bench and
its reports. Reading a run's *config as an agent's config* needs the agent registry, so it
lives a layer up (:func:`actorq.run.load_run_config`); this module knows files only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from actorq import checkpoint as ckpt
from actorq.errors import ActorQError, CheckpointError, ConfigError, shown
from actorq.inputs import load_json, read_input
from actorq.output import write_output

#: A run's config.json and summary.json are a few KB: a file past this is not one.
MAX_JSON_BYTES = 16 << 20
#: A bench cell's files in its run directory (``actorq bench``): what the matrix asked for,
#: written before the run starts; then the run's output, and why it failed if it did.
CELL_FILE = "cell.json"
BENCH_CELL_FILES = (CELL_FILE, "log.txt", "failed.json")
#: metrics.csv's first line (:class:`actorq.logging.MetricLogger`; the bench's SB3 cells too).
METRICS_HEADER = ("step", "wall_time", "metric", "value")
#: metrics.csv's header line, its line end aside
_METRICS_HEAD = ",".join(METRICS_HEADER).encode()
#: A config.json is a run's only with these (every agent's ExperimentConfig has them).
CONFIG_KEYS = frozenset({"env", "precision", "seed", "total_steps", "run_dir", "actors"})
#: The checkpoint directories' names: the save, its copy being written, the one it replaced.
SAVE_TAILS = ("", ".tmp", ".old")
#: A file written whole through a temporary copy: ``.NAME.<hex>.tmp``
#: (:func:`actorq.output.write_output`) or ``NAME.tmp`` (what older versions of the bench
#: left); group 1 or 2 is NAME.
_TEMP = re.compile(r"(?:\.(.+)\.[0-9a-f]{12}|(?!\.)(.+))\.tmp")
#: an actor's config and log, and write_output's copy of a config cut while written
_ACTOR_FILE = re.compile(r"actor[0-9]+\.(?:json|log)|\.actor[0-9]+\.json\.[0-9a-f]{12}\.tmp")
#: What a filesystem or a desktop puts in any directory: not a user's data a run could mix with.
SYSTEM_NAMES = frozenset({"lost+found", ".DS_Store"})
#: The name of the file :meth:`RunDir.prepare` writes (and removes) to probe the directory.
PROBE_PREFIX = ".write-probe-"
#: A run directory :meth:`RunDir.clear` is removing, renamed out of its name first:
#: ``.NAME.removing-<hex>`` beside it (:func:`remove_trash` finishes a removal cut short).
_TRASH = re.compile(r"\..+\.removing-[0-9a-f]{12}")


@dataclasses.dataclass(frozen=True)
class RunDir:
    """A run directory at ``path`` (it need not exist yet)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    # -- the layout ---------------------------------------------------------------------------
    @property
    def config_file(self) -> Path:
        return self.path / "config.json"

    @property
    def checkpoint(self) -> Path:
        return self.path / "checkpoint"

    @property
    def best(self) -> Path:
        """The best policy so far: a checkpoint (no replay) written at each periodic evaluation
        that beats every earlier one, so training on never loses it."""
        return self.path / "best"

    def policy_checkpoint(self, which: str) -> Path:
        """Where ``which`` ("latest" or "best") policy's checkpoint is; one
        :class:`CheckpointError` line if the run has none of that kind."""
        if which == "latest":
            return self.checkpoint
        if which != "best":
            raise CheckpointError(f"which policy: 'latest' or 'best', not {which!r}")
        # a save cut between its two renames leaves best.old, which loading falls back to
        if not (self.best.exists() or ckpt.previous(self.best).exists()):
            raise CheckpointError(
                f"{shown(self.path)} has no best policy yet (it is kept at each periodic "
                "evaluation that beats the earlier ones)"
            )
        return self.best

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.csv"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tb"

    @property
    def summary_file(self) -> Path:
        return self.path / "summary.json"

    @property
    def actors(self) -> Path:
        return self.path / "actors"

    @property
    def precision_auto(self) -> Path:
        return self.path / "precision_auto.md"

    def actor_config(self, i: int) -> Path:
        return self.actors / f"actor{i}.json"

    def actor_log(self, i: int) -> Path:
        return self.actors / f"actor{i}.log"

    def __str__(self) -> str:
        return str(self.path)

    # -- what it holds ------------------------------------------------------------------------
    def is_run(self) -> bool:
        """Whether a run was started here (its config is written first); False where the
        path cannot be looked at (too long a name, a directory without permission)."""
        try:
            return self.config_file.is_file()
        except OSError:
            return False

    def not_a_directory(self) -> str | None:
        """One line for a path that is there but is no directory (a file given where a run
        directory goes: ``actorq eval policy.onnx``), which "not found" or "no config.json"
        would misdescribe; None for a directory, a path that is not there or cannot be read
        (the caller's own line says which)."""
        try:
            st = os.stat(self.path)
        except (OSError, ValueError):  # absent, too long a name, a NUL byte
            return None
        if stat.S_ISDIR(st.st_mode):
            return None
        what = "a file" if stat.S_ISREG(st.st_mode) else "a special file"
        return f"{shown(self.path)} is {what}, not a run directory"

    def has_checkpoint(self) -> bool:
        """A checkpoint, or the previous one a save cut between its two renames left
        (``checkpoint.old``, which :meth:`load_checkpoint` falls back to)."""
        return self.checkpoint.exists() or ckpt.previous(self.checkpoint).exists()

    def owns(self, p: Path) -> bool:
        """Whether ``p`` is, or lies in, an entry this run (or its bench cell) writes: a path an
        output of the user's must never replace (``export --out RUN/config.json --force``)."""
        names = {self.config_file.name, self.metrics.name, ".lock", self.summary_file.name,
                 self.precision_auto.name, *BENCH_CELL_FILES, *self._saves(),
                 self.tensorboard.name, self.actors.name}  # fmt: skip
        try:
            rel = p.resolve().relative_to(self.path.resolve())
        except (ValueError, OSError):  # elsewhere, or not to be looked at
            return False
        return bool(rel.parts) and (rel.parts[0] in names or _temp_of(rel.parts[0]) in names)

    def _saves(self) -> tuple[str, ...]:
        """The checkpoint directories' names, the cut saves' among them."""
        return tuple(f"{n}{t}" for n in (self.checkpoint.name, self.best.name) for t in SAVE_TAILS)

    def foreign_entries(self) -> list[str]:
        """The entries of this directory a new run would mix with, overwrite or (a bench cell
        starting over) delete, sorted; filesystem litter and write probes aside. An entry at a
        run's name counts only holding what a run writes there: a ``config.json`` with a run
        config's keys (or any beside a bench cell's cell.json: a write cut short), a
        ``metrics.csv`` with its header, a ``.lock`` holding a pid, regular files (not links);
        checkpoint directories of checkpoint files, ``tb/`` of event files, ``actors/`` of
        actor configs and logs; a cut save, a half-written file's temporary copy or a bench's
        ``log.txt``/``failed.json`` only beside a run or a cell. Empty where the directory
        cannot be listed or does not exist (:meth:`prepare` says what is wrong)."""
        try:
            names = sorted(os.listdir(self.path))
        except OSError:
            return []
        run = self.config_file.name in names and self._config_is_a_run()
        # a run killed writing its first config.json (a cell, its cell.json) leaves only the
        # temporary copy of it: a regular file (a directory or link there is a user's)
        run = run or any(self._temp_copy(n, self.config_file.name) for n in names)
        cell = _is_cell_json(self.path / CELL_FILE) or any(
            self._temp_copy(n, CELL_FILE) for n in names
        )
        files = {self.summary_file.name, self.precision_auto.name, *BENCH_CELL_FILES}
        dirs = {**dict.fromkeys(self._saves(), ckpt.is_checkpoint_file)}
        dirs |= {self.tensorboard.name: _is_event_file, self.actors.name: _is_actor_file}
        out = []
        for n in names:
            p = self.path / n
            if n in SYSTEM_NAMES or n.startswith((PROBE_PREFIX, ".nfs")):
                continue
            if n == self.config_file.name:
                ok = run or (cell and _plain(p))
            elif n == self.metrics.name:
                ok = _plain(p) and _begins_as_metrics(p)
            elif n == ".lock":
                ok = _plain(p) and _is_pid_file(p)
            elif n in dirs:  # a cut save's copies are deleted by the next save: a run's only
                ok = _holds_only(p, dirs[n]) and (run or cell or not n.endswith(SAVE_TAILS[1:]))
            elif _temp_of(n) in files | {self.config_file.name, self.metrics.name}:
                ok = _plain(p) and (run or cell)
            elif n == CELL_FILE:
                ok = cell
            elif n in files:  # a summary, the auto table, a bench's log: a run's or a cell's
                ok = _plain(p) and (run or cell)
            else:
                ok = False
            if not ok:
                out.append(n)
        return out

    def _temp_copy(self, name: str, of: str) -> bool:
        """Whether entry ``name`` is a temporary copy of file ``of`` (:data:`_TEMP`)."""
        return _temp_of(name) == of and _plain(self.path / name)

    def clear(self) -> None:
        """Remove this run directory to start it over (a benchmark's cell killed midway);
        :class:`ConfigError` (nothing removed) if it is a link or not a directory, holds
        what is not a run's (:meth:`foreign_entries`; filesystem litter too, which a new run
        may live beside but a removal would take), or is still being written
        (:meth:`unwritten`)."""
        if not os.path.lexists(self.path):
            return
        if self.path.is_symlink() or not self.path.is_dir():
            raise ConfigError(f"{shown(self.path)} is not a run's directory: not removed")
        litter = [n for n in os.listdir(self.path) if n in SYSTEM_NAMES or n.startswith(".nfs")]
        foreign = litter + self.foreign_entries()
        if foreign:
            raise ConfigError(
                f"{shown(self.path)} holds what is not a run's ({some(foreign)}): not removed; "
                "move it away"
            )
        # renamed away first, at once: a removal cut short (Ctrl-C) leaves no part of a run at
        # its name, which would count as not a run's and refuse every later start there
        stem = os.fsdecode(os.fsencode(self.path.name)[:200])  # within a name's 255 bytes
        trash = self.path.with_name(f".{stem}.removing-{secrets.token_hex(6)}")
        with self.unwritten():  # held through the removal: no writer starts meanwhile
            try:
                os.rename(self.path, trash)
                shutil.rmtree(trash)
            except OSError as e:
                raise ConfigError(f"cannot remove {shown(self.path)}: {_why(e)}") from None

    def _config_is_a_run(self) -> bool:
        if not _plain(self.config_file):
            return False
        try:
            return set(self.read_config_json()) >= CONFIG_KEYS
        except CheckpointError:  # not a regular file, not JSON, not an object
            return False

    def held_output(self) -> str | None:
        """What a run left here that a new run would overwrite or mix with: its checkpoint,
        its best policy, its metrics (rows past the header) or its summary; None if nothing.
        A run killed before its first checkpoint leaves ``best/`` and metrics it cannot resume."""
        if self.has_checkpoint():
            return "a checkpoint"
        if self.best.exists():
            return f"a best policy ({self.best.name}/)"
        if self.summary_file.exists():
            return f"a finished run's {self.summary_file.name}"
        try:  # a FIFO there would block the open (prepare() refuses it: not a regular file)
            if self.metrics.is_file():
                with open(self.metrics, "rb") as f:
                    f.readline()  # the header
                    if f.readline():
                        return f"a run's {self.metrics.name}"
        except OSError:  # unreadable (prepare() says which)
            pass
        return None

    def read_config_json(self) -> dict[str, Any]:
        """``config.json`` as a JSON object; one :class:`CheckpointError` line otherwise."""
        if not self.is_run():
            raise CheckpointError(
                self.not_a_directory()
                or f"{shown(self.path)} is not an actorq run directory (no config.json)"
            )
        raw = read_input(self.config_file, shown(self.config_file), CheckpointError, MAX_JSON_BYTES)
        d = load_json(raw, f"corrupt config.json in {shown(self.path)}", CheckpointError)
        if not isinstance(d, dict):
            raise CheckpointError(f"corrupt config.json in {shown(self.path)}: not a JSON object")
        return d

    def write_config_json(self, d: dict[str, Any]) -> None:
        """Whole or not at all (a run killed while writing it leaves none, never half)."""
        write_output(self.config_file, json.dumps(d, indent=1), "config", error=ConfigError)

    def load_checkpoint(self) -> ckpt.Checkpoint:
        """The last checkpoint, verified, its files read from one directory
        (:func:`actorq.checkpoint.read`)."""
        return ckpt.read(self.checkpoint)

    def write_summary(self, d: dict[str, Any]) -> None:
        write_output(self.summary_file, json.dumps(d, indent=1), "summary")

    def read_summary(self) -> dict[str, Any] | None:
        """``summary.json`` (None while the run has not ended or if it is unreadable)."""
        try:
            d = load_json(read_input(self.summary_file, "summary.json", limit=MAX_JSON_BYTES), "")
        except ActorQError:  # a number past the digit limit too (a bare ValueError)
            return None
        return d if isinstance(d, dict) else None

    # -- before writing -----------------------------------------------------------------------
    def prepare(self) -> None:
        """Create the directory and check that a run can write everything it will: one
        :class:`ConfigError` line (naming the path and why) for a read-only filesystem, a
        ``--run-dir`` below a file, or an entry of the layout that is the wrong kind of thing
        (``metrics.csv`` a directory, ``tb`` a file), before any of the run is written."""
        where = shown(self.path)
        try:  # tensorboard and safetensors take paths as UTF-8 text only
            str(self.path.resolve()).encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"--run-dir {where} is not valid UTF-8; give another") from None
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"--run-dir {where} is a file, not a directory")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--run-dir {where}: cannot create it ({_why(e)})") from None
        lock = self.path / ".lock"
        files = (self.config_file, self.metrics, self.summary_file, self.precision_auto, lock)
        dirs = (self.checkpoint, self.best, self.tensorboard, self.actors)
        move = "move it away or pick another --run-dir"
        for p in files:  # never written through a symlink (it would write somewhere else)
            if p.is_symlink() or (p.exists() and not p.is_file()):
                raise ConfigError(f"{shown(p)} is not a regular file; {move}")
        for p in dirs:  # a symlink to a directory (on another disk, say) is fine
            if (p.exists() or p.is_symlink()) and not p.is_dir():
                raise ConfigError(f"{shown(p)} is not a directory; {move}")
        for p in (self.checkpoint, self.best):  # each save replaces the directory linked to:
            if p.is_symlink() and os.path.ismount(p):  # a mount point cannot be renamed
                raise ConfigError(
                    f"{shown(p)} links to a mount point, which a save cannot replace; link it "
                    "to a directory inside that disk"
                )
        try:  # a probe: permissions, a read-only mount, a full disk's inode table
            fd, probe = _probe(self.path)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise ConfigError(f"--run-dir {where}: cannot write in it ({_why(e)})") from None

    # -- one writer ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, what: str = "run") -> Iterator[None]:
        """Hold the run's lock while writing it: a second ``actorq train`` (a new run into the
        same directory, or a second ``--resume`` of it) is refused with one line instead of
        interleaving its checkpoints and metrics with this one's. The lock is an advisory
        ``flock`` on ``RUN/.lock``: the kernel drops it when the holder exits, however it
        exits, so a killed run never leaves a stale lock behind."""
        fd = lock_file(
            self.path / ".lock",
            f"{shown(self.path)}: another actorq process is writing this {what}",
        )
        try:
            yield
        finally:
            unlock_file(fd)

    @contextlib.contextmanager
    def unwritten(self) -> Iterator[None]:
        """Hold the run's lock while changing a run no process may be writing (a bench clearing
        a cell, or readying one to resume): one :class:`ConfigError` line, "RUN is still being
        written (pid N)", where one is. A bench's cell runs in its own session, so a killed
        ``actorq bench`` can leave it running there."""
        fd = lock_file(self.path / ".lock", f"{shown(self.path)} is still being written")
        if fd is None:  # this thread writes it: no less a writer than another process
            raise ConfigError(f"{shown(self.path)} is still being written (pid {os.getpid()})")
        try:
            yield
        finally:
            unlock_file(fd)


def is_trash(name: str) -> bool:
    """Whether ``name`` is a run directory's that :meth:`RunDir.clear` was removing."""
    return _TRASH.fullmatch(name) is not None


def remove_trash(directory: Path) -> None:
    """Finish the removals of run directories in ``directory`` that :meth:`RunDir.clear` left
    cut short (what remains of them is no run anyone reads: it goes)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for n in names:
        if is_trash(n):
            shutil.rmtree(directory / n, ignore_errors=True)


def some(names: list[str]) -> str:
    """The first three of ``names`` for a message, and how many more."""
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ", ".join(map(shown, names[:3])) + more


def _plain(p: Path) -> bool:
    """A regular file, not a link to one (False where it cannot be looked at)."""
    try:
        return not p.is_symlink() and p.is_file()
    except OSError:  # Python 3.11's is_symlink raises for EACCES
        return False


def within_metrics_header(data: bytes) -> bool:
    """Whether ``data`` is metrics.csv's header line or a beginning of it (empty too): the one
    rule by which a bench clears (:meth:`RunDir.foreign_entries`, on a file's first bytes) and
    a report skips (:func:`actorq.bench.results.read_metrics`, on the whole file) a metrics.csv
    a cell killed as it started left, cut anywhere in its header."""
    return _METRICS_HEAD.startswith(data)


def _begins_as_metrics(path: Path) -> bool:
    """A file whose first bytes are metrics.csv's header, whole or cut short."""
    try:
        with open(path, "rb") as f:
            return within_metrics_header(f.read(len(_METRICS_HEAD)))
    except OSError:
        return False


def _is_pid_file(path: Path) -> bool:
    """A lock file :func:`lock_file` wrote: a pid or nothing."""
    try:
        with open(path, "rb") as f:
            got = f.read(33)
    except OSError:
        return False
    return len(got) <= 32 and (not got.strip() or got.strip().isdigit())


def _holds_only(d: Path, own: Callable[[str], bool]) -> bool:
    """A directory (or a link to one: ``tb`` on another disk) whose entries are all regular
    files that ``own`` names; False where it cannot be listed."""
    try:
        return d.is_dir() and all(own(n) and _plain(d / n) for n in os.listdir(d))
    except OSError:
        return False


def _temp_of(name: str) -> str | None:
    """The file whose temporary copy ``name`` is (:data:`_TEMP`), or None."""
    m = _TEMP.fullmatch(name)
    return None if m is None else m[1] or m[2]


def _is_cell_json(p: Path) -> bool:
    """A bench cell's record (what ``actorq bench`` writes: its name, agent and env)."""
    if not _plain(p):
        return False
    try:
        d = load_json(read_input(p, "cell.json", limit=MAX_JSON_BYTES), "cell.json")
    except ActorQError:
        return False
    return isinstance(d, dict) and {"name", "agent", "env"} <= set(d)


def _is_event_file(name: str) -> bool:
    return name.startswith("events.out.tfevents.")


def _is_actor_file(name: str) -> bool:
    return _ACTOR_FILE.fullmatch(name) is not None


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__


def _probe(directory: Path) -> tuple[int, str]:
    import tempfile

    return tempfile.mkstemp(prefix=PROBE_PREFIX, dir=directory)


#: the locks this process holds, by their file's identity (device, inode): the descriptor that
#: holds each and the thread that took it. Not by path: a relative path resolves elsewhere once
#: the directory moves or the working directory changes, and the lock would leak.
_HELD: dict[tuple[int, int], tuple[int, int]] = {}


def lock_file(path: Path, message: str) -> int | None:
    """Take an exclusive ``flock`` on ``path``: the descriptor holding it, for
    :func:`unlock_file`; None if this thread already holds it (a nested writer); one
    :class:`ConfigError` line with ``message`` and the holder's pid if another process holds it,
    or another thread of this one (which writes there: a second ``train()`` in a thread). Dropped
    by the kernel when the process exits, too."""
    import fcntl
    import threading

    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # O_NOFOLLOW: a link left at the lock's name is not followed to write a pid there
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        raise ConfigError(
            f"{shown(path)} cannot be a lock file ({_why(e)}); move it away"
        ) from None
    st = os.fstat(fd)
    held = _HELD.get((st.st_dev, st.st_ino))
    if held is not None and held[1] == threading.get_ident():
        os.close(fd)  # another descriptor's close leaves the flock of the one holding it
        return None
    try:  # another thread's lock refuses this one too: a flock is per open file description
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        if holder == str(os.getpid()):  # a pid would name this very process: say which part
            holder = f"{holder}, another thread of this process"
        raise ConfigError(f"{message} (pid {holder}); wait for it to finish or stop it") from None
    with contextlib.suppress(OSError):  # a full disk: the lock holds without its pid
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[(st.st_dev, st.st_ino)] = (fd, threading.get_ident())
    return fd


def unlock_file(fd: int | None) -> None:
    """Release a lock :func:`lock_file` took (its descriptor; None, a nested take: no-op)."""
    if fd is None:
        return
    for key, (held, _) in list(_HELD.items()):
        if held == fd:
            del _HELD[key]
    os.close(fd)  # closing the descriptor drops the flock
