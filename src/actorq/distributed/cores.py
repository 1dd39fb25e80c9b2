"""The cores this process may compute on (the learner's threads, the actors a machine holds)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


def usable_cores(cgroup: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> int:
    """The cores this process may compute on: its CPU affinity, capped by the tightest CPU
    quota of its cgroup and the cgroup's ancestors (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``;
    a quota of 1.5 CPUs is 2). A container limited to 2 CPUs on a 64-core host shows 64 in
    the affinity; the cgroup is found from ``/proc/self/cgroup`` (a container without its own
    cgroup namespace, a systemd slice), else the hierarchy's root."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    quotas = [q for d in _cgroup_dirs(cgroup, proc_cgroup) if (q := _quota(d)) is not None]
    return max(1, min([cores, *quotas]))


def _cgroup_dirs(cgroup: str, proc_cgroup: str) -> Iterator[str]:
    """This process's cgroup directories that may hold a CPU quota, each with its ancestors."""
    paths: list[tuple[str, str]] = []  # (hierarchy root, the process's path in it)
    with contextlib.suppress(OSError, UnicodeDecodeError), open(proc_cgroup) as f:
        for line in f:
            fields = line.rstrip("\n").split(":", 2)
            if len(fields) != 3:
                continue
            _, controllers, path = fields
            if controllers == "":  # v2, the unified hierarchy: "0::/path"
                paths.append((cgroup, path))
            elif "cpu" in controllers.split(","):  # v1: "4:cpu,cpuacct:/path"
                paths += [(os.path.join(cgroup, d), path) for d in ("cpu", controllers)]
    paths += [(cgroup, "/"), (os.path.join(cgroup, "cpu"), "/")]  # the roots, always
    seen = set()
    for root, path in paths:
        parts = [p for p in path.split("/") if p and p not in (".", "..")]
        for n in range(len(parts), -1, -1):
            d = os.path.join(root, *parts[:n])
            if d not in seen:
                seen.add(d)
                yield d


def _quota(d: str) -> int | None:
    """The CPUs a cgroup directory's quota allows (rounded up), or None: no quota there."""
    with contextlib.suppress(OSError, ValueError, ZeroDivisionError, IndexError):
        with open(os.path.join(d, "cpu.max")) as f:  # v2: "<quota> <period>" or "max <period>"
            quota, period = f.read().split()[:2]
        return _cpus(quota, period)
    with contextlib.suppress(OSError, ValueError, ZeroDivisionError, IndexError):
        with open(os.path.join(d, "cpu.cfs_quota_us")) as f:  # v1: -1 without a quota
            quota = f.read().split()[0]
        with open(os.path.join(d, "cpu.cfs_period_us")) as f:
            period = f.read().split()[0]
        return _cpus(quota, period)
    return None


def _cpus(quota: str, period: str) -> int | None:
    if quota in ("max", "-1") or int(quota) <= 0 or int(period) <= 0:
        return None
    return max(1, -(-int(quota) // int(period)))
