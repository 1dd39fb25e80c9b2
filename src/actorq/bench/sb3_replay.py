"""An SB3 DQN cell's replay buffer in its checkpoint, as npz, so a resumed cell learns on from the
transitions it had, as actorq's DQN does (SB3 would otherwise refill it off the budget with its
restored policy: :func:`actorq.bench.sb3_checkpoint.refill_replay`).

Stacked frames are stored once: SB3's buffer keeps every observation whole (Atari: 4 frames of
84×84 per row, and as many again for the next observations, 5.6 GB at rl-zoo's 100k rows), but
a row's first frames are the previous row's last ones and a next observation is the next row's
observation, except where an episode starts or ends. Saved: each row's newest frame, the whole
stack only where the previous row does not continue into it, and the next observations only
where they are not the next row's. The encoding is checked on the data itself, so decoding is
exact whatever the episodes did (a ring's wrap-around, a reset, a cut); 0.7 GB for 100k Atari
rows. Observations of another shape (an MLP's vectors) are saved as they are.

Read back through :func:`load_replay`: every array's header is checked against the model's own
buffer before any array is read, then indices, values and positions (one ValueError naming the
field); nothing is unpickled.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from actorq.errors import first_line
from actorq.replay.npz import check_header, npz_headers

#: rows compared at a time while encoding (bounds the temporary arrays to ~100 MB for Atari)
_CHUNK = 4096


def _stacked(x: np.ndarray) -> bool:
    """Whether ``x`` (rows, envs, *obs) holds stacks of frames along its first obs axis."""
    return x.ndim == 5 and x.dtype == np.uint8 and x.shape[2] > 1


def _continues(x: np.ndarray) -> np.ndarray:
    """``(rows, envs)``: whether each row's older frames are the previous row's newer ones."""
    out = np.zeros(x.shape[:2], dtype=bool)
    for a in range(1, len(x), _CHUNK):
        b = min(a + _CHUNK, len(x))
        out[a:b] = (x[a:b, :, :-1] == x[a - 1 : b - 1, :, 1:]).all(axis=(2, 3, 4))
    return out


def _follows(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``(rows, envs)``: whether each next observation is the next row's observation."""
    out = np.zeros(y.shape[:2], dtype=bool)
    for a in range(0, len(y) - 1, _CHUNK):
        b = min(a + _CHUNK, len(y) - 1)
        out[a:b] = (y[a:b] == x[a + 1 : b + 1]).all(axis=tuple(range(2, y.ndim)))
    return out


def encode(buffer: Any, pos: int, full: bool) -> dict[str, np.ndarray]:
    """The arrays saved for SB3's ``buffer`` with its position ``pos``/``full`` (those of the
    collection's start: the checkpoint's counters are that moment's)."""
    x = buffer.observations
    out: dict[str, np.ndarray] = {
        "actions": buffer.actions, "rewards": buffer.rewards, "dones": buffer.dones,
        "timeouts": buffer.timeouts, "pos": np.asarray(pos, np.int64),
        "full": np.asarray(full, np.bool_),
    }  # fmt: skip
    y = getattr(buffer, "next_observations", None)
    if not _stacked(x):
        out["observations"] = x
        if y is not None:
            out["next_observations"] = y
        return out
    whole = np.argwhere(~_continues(x))
    out |= {"newest": x[:, :, -1], "stack_rows": whole, "stacks": x[whole[:, 0], whole[:, 1], :-1]}
    if y is not None:
        apart = np.argwhere(~_follows(y, x))
        out |= {"next_rows": apart, "nexts": y[apart[:, 0], apart[:, 1]]}
    return out


def writer(buffer: Any, pos: int, full: bool) -> Callable[[Path], None]:
    """``writer(path)`` writes :func:`encode`'s arrays there (not compressed: a stop must not
    cost minutes of CPU); for :func:`actorq.checkpoint.save`'s ``replay_writer``."""

    def write(path: Path) -> None:
        arrays: dict[str, Any] = encode(buffer, pos, full)
        np.savez(path, **arrays)

    return write


Expected = dict[str, tuple[tuple[int, ...], np.dtype, int | None]]


def _expected(buffer: Any) -> Expected:
    """The arrays a replay file for SB3's ``buffer`` holds: ``{name: (shape, dtype, most)}``,
    ``most`` bounding the rows of a variable-length array of rows of ``shape``."""
    x, y = buffer.observations, getattr(buffer, "next_observations", None)
    n = x.shape[0] * x.shape[1]
    out: Expected = {name: (getattr(buffer, name).shape, getattr(buffer, name).dtype, None)
           for name in ("actions", "rewards", "dones", "timeouts")}  # fmt: skip
    out |= {"pos": ((), np.dtype(np.int64), None), "full": ((), np.dtype(np.bool_), None)}
    if not _stacked(x):
        out["observations"] = (x.shape, x.dtype, None)
        if y is not None:
            out["next_observations"] = (y.shape, y.dtype, None)
        return out
    out["newest"] = (x.shape[:2] + x.shape[3:], x.dtype, None)
    out["stack_rows"] = ((2,), np.dtype(np.int64), n)
    out["stacks"] = ((x.shape[2] - 1, *x.shape[3:]), x.dtype, n)
    if y is not None:
        out["next_rows"] = ((2,), np.dtype(np.int64), n)
        out["nexts"] = (y.shape[2:], y.dtype, n)
    return out


def load_replay(path: Path, buffer: Any, num_actions: int | None) -> None:
    """Restore ``path`` into SB3's ``buffer`` (built from the cell's settings); ValueError naming
    the first field that does not fit it (``num_actions``: a discrete action space's size)."""
    x, y = buffer.observations, getattr(buffer, "next_observations", None)
    expected = _expected(buffer)
    headers = npz_headers(path)
    for name, (shape, dtype, most) in expected.items():
        check_header(headers, name, shape, dtype, most)
    try:  # only the arrays checked above: another member may claim any size
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in expected}
    except Exception as e:  # a damaged zip: zipfile's errors are many (NotImplementedError too)
        raise ValueError(f"replay file unreadable ({type(e).__name__}: {first_line(e)})") from None
    _check_values(arrays, x.shape[0], x.shape[1], num_actions)
    if "newest" in arrays:
        _decode(arrays, x, y)
    else:
        x[...] = arrays["observations"]
        if y is not None:
            y[...] = arrays["next_observations"]
    for name in ("actions", "rewards", "dones", "timeouts"):
        getattr(buffer, name)[...] = arrays[name]
    buffer.pos, buffer.full = int(arrays["pos"]), bool(arrays["full"])


def cut_episodes(buffer: Any) -> None:
    """A resumed segment's environments start new episodes. In a memory-optimised buffer (no
    ``next_observations``) the next observation of the last transition is row ``pos`` of
    ``observations``, which the first new step overwrites: that transition ends its episode
    there (done), as these settings end an episode cut by a time limit (SB3 refuses them with
    ``handle_timeout_termination``). A buffer that keeps next observations keeps the true one."""
    if hasattr(buffer, "next_observations") or (buffer.pos == 0 and not buffer.full):
        return
    buffer.dones[buffer.pos - 1] = 1.0  # pos 0 of a full ring: its last row


def _check_values(a: dict[str, np.ndarray], rows: int, envs: int, num_actions: int | None) -> None:
    if not 0 <= int(a["pos"]) < rows:
        raise ValueError(f"replay pos {int(a['pos'])} is not a row of {rows}")
    if not np.isfinite(a["rewards"]).all():
        raise ValueError("replay rewards have NaN or Inf")
    for name in ("dones", "timeouts"):
        if not np.isin(a[name], (0.0, 1.0)).all():
            raise ValueError(f"replay {name} are not 0 or 1")
    acts = a["actions"]
    if num_actions is not None and not ((acts >= 0) & (acts < num_actions)).all():
        raise ValueError(f"replay actions are not in [0, {num_actions})")
    if np.issubdtype(acts.dtype, np.floating) and not np.isfinite(acts).all():
        raise ValueError("replay actions have NaN or Inf")
    for name, first, data in (("stack_rows", True, "stacks"), ("next_rows", False, "nexts")):
        if name not in a:
            continue
        if len(a[name]) != len(a[data]):
            raise ValueError(f"replay {name} and {data} differ in length")
        idx = a[name]
        ok = idx.size == 0 or ((idx[:, 0] >= 0).all() and (idx[:, 0] < rows).all()
                               and (idx[:, 1] >= 0).all() and (idx[:, 1] < envs).all())  # fmt: skip
        flat = idx[:, 0] * envs + idx[:, 1] if ok else idx[:, 0]
        if not ok or (np.diff(flat) <= 0).any():
            raise ValueError(f"replay {name} are not rows of the buffer, in order")
        if first and not np.isin(np.arange(envs), flat).all():  # row 0 has no row before it
            raise ValueError(f"replay {name} lack the first row's stacks")


def _decode(a: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray | None) -> None:
    """:func:`encode`'s arrays back into ``x`` (observations) and ``y`` (next ones) in place."""
    x[:, :, -1] = a["newest"]
    whole, stacks = a["stack_rows"], a["stacks"]
    starts = np.searchsorted(whole[:, 0], np.arange(len(x) + 1))  # each row's stored stacks
    for i in range(len(x)):
        if i:
            x[i, :, :-1] = x[i - 1, :, 1:]
        for k in range(starts[i], starts[i + 1]):
            x[i, whole[k, 1], :-1] = stacks[k]
    if y is None:
        return
    y[:-1] = x[1:]
    apart = a["next_rows"]
    y[apart[:, 0], apart[:, 1]] = a["nexts"]
