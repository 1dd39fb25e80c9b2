"""Checkpoints in safe formats: safetensors (tensors), JSON (counters, RNG, optimizer
hyper-parameters), npz (replay). A manifest holds each file's sha256, so a truncated or
altered checkpoint is refused with one clear line instead of loading garbage.

Written to a temporary directory and renamed into place: a crash mid-write leaves the previous
checkpoint intact. A checkpoint directory may be a symlink (to another disk): the save replaces
the directory it points to, its copies beside that one, and the link stays.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np

from actorq.errors import CheckpointError, first_line
from actorq.inputs import load_json
from actorq.output import fsync

MANIFEST = "manifest.json"
#: the policy snapshot the actors ran with the checkpoint's weights, where it cannot be made
#: again from them alone (int8/int4 rounding calibrated on replay states: GPTQ, pixel models)
SNAPSHOT = "snapshot.bin"
REQUIRED = ("learner.safetensors", "state.json")  # every checkpoint has these, in its manifest
#: Every file a checkpoint directory may hold (the replay where the run saves it).
FILES = frozenset({*REQUIRED, MANIFEST, SNAPSHOT, "replay.npz"})
#: The temporary name safetensors writes a file under before renaming it (``.tmp`` and six or
#: more letters, digits or underscores), left in a save cut short.
_SAFETENSORS_TEMP = re.compile(r"\.tmp[A-Za-z0-9_]{6,}")


def is_checkpoint_file(name: str) -> bool:
    """Whether a file named ``name`` in a checkpoint directory is one a save writes."""
    return name in FILES or _SAFETENSORS_TEMP.fullmatch(name) is not None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save(
    ckpt_dir: Path,
    tensors: dict[str, Any],
    state: dict[str, Any],
    replay_writer: Any | None = None,
    files: dict[str, bytes] | None = None,
) -> None:
    """``tensors``: torch tensors; ``state``: JSON-able; ``replay_writer(path)`` writes npz;
    ``files``: more files by name (e.g. :data:`SNAPSHOT`), in the manifest like the rest."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    real = _real(ckpt_dir)
    tmp = real.with_name(real.name + ".tmp")
    _remove_copy(tmp)
    try:
        tmp.mkdir(parents=True)
        save_file(tensors, str(tmp / "learner.safetensors"))
        (tmp / "state.json").write_text(json.dumps(state, indent=1))
        if replay_writer is not None:
            replay_writer(tmp / "replay.npz")
        for name, data in (files or {}).items():
            (tmp / name).write_bytes(data)
        names = sorted(p.name for p in tmp.iterdir())
        (tmp / MANIFEST).write_text(json.dumps({f: _sha256(tmp / f) for f in names}, indent=1))
        for name in (*names, MANIFEST):  # on disk before the renames make them the checkpoint
            fsync(tmp / name)
        fsync(tmp)
    # a full disk, a read-only filesystem (safetensors reports them as its own error): the old
    # checkpoint stays whole
    except (OSError, SafetensorError) as e:
        shutil.rmtree(tmp, ignore_errors=True)  # and no half-written copy fills the disk
        why = getattr(e, "strerror", None) or first_line(e)
        raise CheckpointError(
            f"cannot write the checkpoint in {ckpt_dir.parent}: {why}; the previous one is kept"
        ) from None
    except BaseException:  # a bug, or Ctrl-C mid-save: no half-written copy left behind either
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        _swap(real, tmp)
    except CheckpointError:  # the previous checkpoint stays; the copy would only fill the disk
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap(real: Path, tmp: Path) -> None:
    """Make the complete copy ``tmp`` the checkpoint ``real``, the one it replaces kept as
    ``real.old`` until then (a kill between the two renames leaves it for :func:`read`)."""
    old = previous(real)
    try:
        if real.exists():  # else ``old`` may be the only complete checkpoint (a cut save's)
            _remove_copy(old)
            real.rename(old)
        tmp.rename(real)
    except OSError as e:
        raise CheckpointError(
            f"cannot put the checkpoint in place in {real.parent}: {e.strerror or e}"
        ) from None
    fsync(real.parent)  # the renames themselves survive a power loss
    shutil.rmtree(old, ignore_errors=True)


def _remove_copy(p: Path) -> None:
    """Remove a save's copy at ``p`` (``.tmp`` or ``.old``) left by an earlier save: only what
    a checkpoint holds. Beside a linked checkpoint's directory (on another disk) that name
    may be a user's own (``/data/ckpts.old``): refused in one line, never removed."""
    if not os.path.lexists(p):
        return
    if p.is_symlink():  # rmtree refuses a link; removing it removes no data
        p.unlink()
        return
    try:
        ours = p.is_dir() and all(
            is_checkpoint_file(n) and stat.S_ISREG(os.lstat(p / n).st_mode) for n in os.listdir(p)
        )
    except OSError:
        ours = False
    if not ours:
        raise CheckpointError(
            f"{p} holds what is not a checkpoint's, where a save puts its copy; move it away"
        )
    shutil.rmtree(p, ignore_errors=True)
    if os.path.lexists(p):  # left (a file we may not remove): the rename would fail on it
        raise CheckpointError(f"cannot remove {p} to save the checkpoint; move it away")


def _real(ckpt_dir: Path) -> Path:
    """The directory a checkpoint at ``ckpt_dir`` is: ``ckpt_dir``, or where it links to (on
    another disk, say), so that a save's copies sit beside it, on its disk, and the renames
    replace it rather than the link (which a second save could then not move aside)."""
    try:
        return ckpt_dir.resolve() if ckpt_dir.is_symlink() else ckpt_dir
    except (OSError, RuntimeError):  # not to be looked at, a link loop: the uses below say so
        return ckpt_dir


def previous(ckpt_dir: Path) -> Path:
    """Where a save cut between its two renames leaves the checkpoint it was replacing
    (``<dir>.old``, beside the directory a link at ``ckpt_dir`` points to)."""
    real = _real(ckpt_dir)
    return real.with_name(real.name + ".old")


class Checkpoint(NamedTuple):
    """One checkpoint, read whole from one directory (:func:`read`)."""

    tensors: dict[str, Any]
    state: dict[str, Any]
    #: the replay file, where the run saved its replay (read later, by a resume only)
    replay: Path | None
    #: :data:`SNAPSHOT`'s bytes, where the manifest lists it
    snapshot: bytes | None


#: reads of a checkpoint a concurrent save replaced midway before one is called damaged
_READS = 5


def load(ckpt_dir: Path) -> tuple[dict[str, Any], dict[str, Any], Path | None]:
    """Verify and load; returns ``(tensors, state, replay_path or None)`` (:func:`read`)."""
    tensors, state, replay, _ = read(ckpt_dir)
    return tensors, state, replay


def read(ckpt_dir: Path) -> Checkpoint:
    """Verify and load the checkpoint in ``ckpt_dir``, its files read from one directory.

    A run saves while others read it (``actorq eval`` of a training run): a save renames the
    directory away and deletes it, so a read it overtook (a file gone, or the next
    checkpoint's file beside this one's manifest) is read again from the new one; a read that
    fails in a directory no save replaced is a damaged checkpoint. If a save was cut between
    its two renames, only ``<dir>.old`` holds a complete checkpoint: it is used (and said so on
    stderr)."""
    where, found = _from_one_directory(ckpt_dir, _read)
    if where != ckpt_dir:
        print(f"actorq: note: using {where} (a save was interrupted)", file=sys.stderr)
    return found


def read_state(ckpt_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The checkpoint's ``state.json`` (counters, RNG), verified against its manifest as
    :func:`read` verifies it, without reading its tensors or hashing its replay (gigabytes):
    a running cell's progress for a report. With the directory it was read from: ``ckpt_dir``,
    or its cut save's ``.old`` copy (said by no note: the caller names what it read)."""
    return _from_one_directory(ckpt_dir, _read_state)


_T = TypeVar("_T")


def _from_one_directory(ckpt_dir: Path, reader: Callable[[Path, int], _T]) -> tuple[Path, _T]:
    """``(where, reader(where, fd))`` of the checkpoint directory: ``where`` is ``ckpt_dir`` or
    its ``.old`` copy (:func:`read`'s retries and fallback)."""
    for attempt in range(_READS):
        where = _complete(ckpt_dir)
        try:
            fd = os.open(where, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as e:
            if attempt + 1 < _READS:
                continue  # renamed away between the look and the open
            raise CheckpointError(f"cannot read checkpoint in {where}: {e.strerror}") from None
        try:
            found = reader(where, fd)
        except CheckpointError:
            if attempt + 1 < _READS and _replaced(where, fd):
                continue
            raise
        finally:
            os.close(fd)
        return where, found
    raise AssertionError("unreachable")  # pragma: no cover


def _complete(ckpt_dir: Path) -> Path:
    """``ckpt_dir`` where it holds a manifest, else its cut save's ``.old`` copy; one line if
    neither does. A save in progress is between its renames for microseconds: it is waited
    for, so a live run's checkpoint is not taken for a cut save."""
    old = previous(ckpt_dir)
    for _ in range(10):
        try:
            if (ckpt_dir / MANIFEST).is_file():
                return ckpt_dir
            if not (old / MANIFEST).is_file():  # a save may have finished since the look above
                if (ckpt_dir / MANIFEST).is_file():
                    return ckpt_dir
                break
        except OSError as e:  # a name too long, a directory we may not read
            raise CheckpointError(f"cannot read checkpoint in {ckpt_dir}: {e.strerror}") from None
        time.sleep(0.02)
    else:
        return old
    raise CheckpointError(f"no checkpoint in {ckpt_dir.parent} (missing {ckpt_dir}/{MANIFEST})")


def _replaced(where: Path, fd: int) -> bool:
    """Whether ``where`` no longer names the directory open as ``fd`` (a save replaced it)."""
    try:
        return os.stat(where).st_ino != os.fstat(fd).st_ino
    except OSError:
        return True


def _take(fd: int, where: Path, name: str, keep: bool = True) -> tuple[str, bytes]:
    """The sha256 of file ``name`` of the directory open as ``fd`` (``where`` in messages) and,
    if ``keep``, its bytes (a replay, gigabytes, is only hashed, in chunks), if it is a regular
    file (a FIFO in its place is not read: it would block)."""
    try:
        f = os.open(name, os.O_RDONLY | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        raise CheckpointError(f"checkpoint file missing: {where / name}") from None
    try:
        with os.fdopen(f, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise CheckpointError(f"checkpoint file missing: {where / name}")
            if keep:
                data = fh.read()
                return hashlib.sha256(data).hexdigest(), data
            h = hashlib.sha256()
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
            return h.hexdigest(), b""
    except OSError as e:
        raise CheckpointError(f"cannot read {where / name}: {e.strerror}") from None


def _read(where: Path, fd: int) -> Checkpoint:
    """:func:`read` of the directory open as ``fd`` (named ``where`` in messages)."""
    from safetensors.torch import load as load_tensors

    manifest = _manifest(where, fd)
    data = {name: _verified(where, fd, manifest, name) for name in manifest}
    try:
        # from bytes: safetensors takes a path only as UTF-8 (a run dir may be named otherwise)
        tensors = load_tensors(data["learner.safetensors"])
    except Exception as e:
        raise CheckpointError(f"cannot read checkpoint in {where}: {first_line(e)}") from None
    state = _state(where, data["state.json"])
    replay = where / "replay.npz" if "replay.npz" in manifest else None
    return Checkpoint(tensors, state, replay, data.get(SNAPSHOT))


def _read_state(where: Path, fd: int) -> dict[str, Any]:
    """:func:`read_state` of the directory open as ``fd`` (named ``where`` in messages)."""
    return _state(where, _verified(where, fd, _manifest(where, fd), "state.json"))


def _manifest(where: Path, fd: int) -> dict[str, str]:
    """The manifest of the directory open as ``fd``: file name -> sha256, checked."""
    try:
        raw = _take(fd, where, MANIFEST)[1]
    except CheckpointError:
        raise CheckpointError(f"corrupt checkpoint manifest in {where}") from None
    manifest = load_json(raw, f"corrupt checkpoint manifest in {where}", CheckpointError)
    if not isinstance(manifest, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in manifest.items()
    ):
        raise CheckpointError(f"corrupt checkpoint manifest in {where}")
    missing = [f for f in REQUIRED if f not in manifest]
    if missing:
        raise CheckpointError(f"checkpoint manifest in {where} does not list {missing[0]}")
    for name in manifest:
        if "/" in name or name.startswith(".") or name == MANIFEST:
            raise CheckpointError(f"corrupt checkpoint manifest in {where}: it lists {name!r}")
    return manifest


def _verified(where: Path, fd: int, manifest: dict[str, str], name: str) -> bytes:
    """File ``name``'s bytes (a replay's: none, it is only hashed), its sha256 the manifest's."""
    found, data = _take(fd, where, name, keep=name != "replay.npz")
    if found != manifest[name]:
        raise CheckpointError(f"checkpoint file corrupt (checksum mismatch): {where / name}")
    return data


def _state(where: Path, raw: bytes) -> dict[str, Any]:
    state = load_json(raw, f"cannot read checkpoint in {where}", CheckpointError)
    if not isinstance(state, dict) or not {"learner", "counters", "rng"} <= set(state):
        raise CheckpointError(f"checkpoint state.json in {where} lacks learner/counters/rng")
    return state


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    st = rng.bit_generator.state
    return {
        "bit_generator": st["bit_generator"],
        "state": {k: str(v) for k, v in st["state"].items()},
        "has_uint32": st["has_uint32"],
        "uinteger": st["uinteger"],
    }


_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


def restore_rng(d: dict[str, Any]) -> np.random.Generator:
    if d.get("bit_generator") not in _BIT_GENERATORS:
        raise ValueError(f"unknown bit generator {d.get('bit_generator')!r}")
    bg = getattr(np.random, d["bit_generator"])()
    bg.state = {
        "bit_generator": d["bit_generator"],
        "state": {k: int(v) for k, v in d["state"].items()},
        "has_uint32": d["has_uint32"],
        "uinteger": d["uinteger"],
    }
    return np.random.Generator(bg)


#: checkpoint tensors holding a CUDA device's random stream: ``rng.cuda.<device index>``
CUDA_RNG = "rng.cuda."


def cuda_rng_states() -> dict[str, Any]:
    """Each CUDA device's random stream, where this process has used CUDA (a learner on the
    GPU draws PPO's minibatch shuffles there: restored from the seed instead, every resumed
    segment repeated the first one's)."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {f"{CUDA_RNG}{i}": t for i, t in enumerate(torch.cuda.get_rng_state_all())}


def restore_cuda_rng(tensors: dict[str, Any]) -> None:
    """Set the CUDA random streams a checkpoint keeps, on the devices this machine has (a GPU
    run resumed on a CPU, or on fewer GPUs, leaves the rest: nothing draws from them)."""
    import torch

    saved = {k: t for k, t in tensors.items() if k.startswith(CUDA_RNG)}
    if not saved or not torch.cuda.is_available():
        return
    for name, t in saved.items():
        index = name.removeprefix(CUDA_RNG)
        if index.isdigit() and int(index) < torch.cuda.device_count():
            torch.cuda.set_rng_state(t, int(index))
