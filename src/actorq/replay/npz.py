"""What a saved replay's ``.npz`` holds, read from each array's header before any array is:
a small compressed file may claim gigabytes (a zip bomb), and ``np.load`` allocates whatever
a member's header says before the caller can compare it with what it expects."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np


def npz_headers(path: str | Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """``{name: (shape, dtype)}`` of every array in the ``.npz`` at ``path`` (``ValueError``
    for a file that is not one, or a member that is not an array: ``np.load`` would read a
    member named without ``.npy`` as it is, unchecked, before the array of that name)."""
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                if not member.endswith(".npy"):
                    raise ValueError(f"replay file member {member[:40]!r} is not an array")
                with zf.open(member) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                out[member.removesuffix(".npy")] = (tuple(shape), dtype)
    except ValueError:
        raise
    except zipfile.BadZipFile as e:
        raise ValueError(f"not an npz file ({e})") from None
    except Exception as e:  # a damaged zip: zipfile's errors are many (NotImplementedError too)
        raise ValueError(f"not a readable npz file ({type(e).__name__}: {e})") from None
    return out


def check_header(
    headers: dict[str, tuple[tuple[int, ...], np.dtype]],
    name: str,
    shape: tuple[int, ...],
    dtype: np.dtype | None = None,
    most: int | None = None,
) -> None:
    """``ValueError`` unless array ``name`` has ``shape`` (with ``most``: at most ``most`` rows
    of ``shape`` each) and, if given, ``dtype``."""
    if name not in headers:
        raise ValueError(f"replay file lacks {name!r}")
    got_shape, got_dtype = headers[name]
    if most is None:
        fits = got_shape == shape
    else:
        fits = len(got_shape) >= 1 and got_shape[0] <= most and got_shape[1:] == shape
    if not fits or (dtype is not None and got_dtype != dtype):
        raise ValueError(f"replay field {name!r} is {got_dtype}{list(got_shape)}")


#: a saved replay's record of the Ray replay shards it lacks: rows of (shard, items), one per
#: shard that died while the replay was saved (``ShardedReplay.save``)
MISSING = "_missing_shards"


def missing_shards(path: str | Path) -> list[tuple[int, int]]:
    """The shards a saved replay lacks, as (shard, items): none for a whole one. ``ValueError``
    for a record that is not rows of two integers."""
    headers = npz_headers(path)
    if MISSING not in headers:
        return []
    shape, dtype = headers[MISSING]
    if len(shape) != 2 or shape[1] != 2 or shape[0] > 1 << 20 or dtype.kind not in "iu":
        raise ValueError(f"replay {MISSING} is {dtype}{list(shape)}, not rows of (shard, items)")
    with np.load(path, allow_pickle=False) as z:
        return [(int(j), int(n)) for j, n in z[MISSING]]
