"""Memory a piece of work would need, checked against what this machine can give before the
work allocates it: one :class:`ResourceError` line naming the estimate and the memory there is,
instead of minutes of swapping or a traceback from the allocator under a memory limit.

What is available is the least of: the kernel's ``MemAvailable`` (free memory plus what it can
reclaim), the room left under the process's cgroup limit (``memory.max``: containers, Slurm,
Kubernetes) and under ``ulimit -v`` (``RLIMIT_AS``, counted against the process's address space).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from actorq.errors import ActorQError


class ResourceError(ActorQError):
    """Work that would need more memory (or processes) than this machine gives it."""


GiB = 1 << 30


def gib(n: float) -> str:
    """A byte count for a message: ``14.9 GiB``, ``310 MiB``."""
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / (1 << 20):.0f} MiB"


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup v2 memory limit, or None without a limit."""
    try:
        rel = next(
            ln.partition("::")[2]
            for ln in Path("/proc/self/cgroup").read_text().splitlines()
            if ln.startswith("0::")
        )
        base = Path("/sys/fs/cgroup") / rel.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int((base / "memory.current").read_text()), 0)
    except (OSError, ValueError, StopIteration):
        return None


def _address_space_room() -> int | None:
    """Bytes of address space left under ``ulimit -v``, or None without a limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return soft
    return max(soft - pages * os.sysconf("SC_PAGE_SIZE"), 0)


def available_memory() -> tuple[int, str]:
    """``(bytes, what bounds them)``: the memory new work here can use (module docstring)."""
    candidates = [
        (_meminfo_available(), "available"),
        (_cgroup_room(), "left under the cgroup's memory limit"),
        (_address_space_room(), "left under ulimit -v"),
    ]
    known = [(n, why) for n, why in candidates if n is not None]
    if not known:  # not Linux: physical memory is the best figure there is
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "physical"
    return min(known)


def check_memory(
    parts: dict[str, int],
    what: str,
    room: tuple[int, str] | None = None,
    where: str = "this machine",
) -> None:
    """Raise :class:`ResourceError` (one line) if ``parts`` (label → bytes) add up to more
    than ``room`` (bytes, and what bounds them; default :func:`available_memory`) in
    ``where``; the line names the total and its largest part."""
    need = sum(parts.values())
    have, bound = available_memory() if room is None else room
    if need <= have:
        return
    label, biggest = max(parts.items(), key=lambda kv: kv[1])
    raise ResourceError(
        f"{what} needs about {gib(need)} of memory, {gib(biggest)} of it for {label}; "
        f"{where} has {gib(have)} {bound}"
    )
