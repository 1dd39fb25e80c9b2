"""The cores this process may compute on (the learner's threads, the actors a machine holds)."""

from __future__ import annotations

import contextlib
import os


def usable_cores(cgroup: str = "/sys/fs/cgroup") -> int:
    """The cores this process may compute on: its CPU affinity, capped by a container's CPU
    quota (cgroup v2 ``cpu.max``, v1 ``cpu/cpu.cfs_quota_us``; a quota of 1.5 CPUs is 2):
    a container limited to 2 CPUs on a 64-core host shows 64 in the affinity."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    for quota_file, period_file in (
        ("cpu.max", None),
        ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"),
    ):
        with contextlib.suppress(OSError, ValueError, ZeroDivisionError, IndexError):
            with open(os.path.join(cgroup, quota_file)) as f:
                fields = f.read().split()
            if period_file is None:  # v2: "<quota> <period>" or "max <period>"
                quota, period = fields[0], fields[1]
            else:
                with open(os.path.join(cgroup, period_file)) as f:
                    quota, period = fields[0], f.read().split()[0]
            if quota not in ("max", "-1") and int(quota) > 0:
                return max(1, min(cores, -(-int(quota) // int(period))))
    return max(1, cores)
