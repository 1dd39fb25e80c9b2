"""``actorq.distributed.cores``: the cores a process may use, containers included."""

from __future__ import annotations

from pathlib import Path

from actorq.distributed.cores import usable_cores


def _cores(root: Path, proc: str | None = None) -> int:
    p = root / "proc-cgroup"
    if proc is not None:
        p.write_text(proc)
    return usable_cores(str(root / "cg"), str(p))


def test_usable_cores_is_capped_by_a_containers_cpu_quota_at_the_root(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    cg.mkdir()
    here = _cores(tmp_path)  # no cgroup files: the CPU affinity
    assert here >= 1
    (cg / "cpu.max").write_text("150000 100000\n")  # v2: 1.5 CPUs
    assert _cores(tmp_path) == min(here, 2)
    (cg / "cpu.max").write_text("max 100000\n")  # v2: no quota
    assert _cores(tmp_path) == here
    (cg / "cpu.max").unlink()
    (cg / "cpu").mkdir()
    (cg / "cpu/cpu.cfs_quota_us").write_text("100000\n")  # v1: 1 CPU
    (cg / "cpu/cpu.cfs_period_us").write_text("100000\n")
    assert _cores(tmp_path) == 1
    for bad in ("-1\n", "garbage\n", "", "0\n"):  # no quota, or unreadable: ignored
        (cg / "cpu/cpu.cfs_quota_us").write_text(bad)
        assert _cores(tmp_path) == here
    (cg / "cpu/cpu.cfs_quota_us").write_text("100000\n")
    (cg / "cpu/cpu.cfs_period_us").write_text("0\n")
    assert _cores(tmp_path) == here


def test_the_process_cgroup_and_its_ancestors_are_read(tmp_path: Path) -> None:
    here = _cores(tmp_path / "none")
    # v2 without a cgroup namespace: the process sits in a slice whose parent holds the quota
    slice_ = tmp_path / "cg/system.slice/job.scope"
    slice_.mkdir(parents=True)
    (slice_ / "cpu.max").write_text("max 100000\n")
    (slice_.parent / "cpu.max").write_text("100000 100000\n")
    assert _cores(tmp_path, "0::/system.slice/job.scope\n") == 1
    assert _cores(tmp_path, "0::/elsewhere\n") == here  # another cgroup: not this process's
    # v1, the cpu controller mounted beside cpuacct, the quota on the container's own directory
    v1 = tmp_path / "cg/cpu,cpuacct/docker/abc"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("300000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    proc = "9:name=systemd:/docker/abc\n4:cpu,cpuacct:/docker/abc\n"
    assert _cores(tmp_path, proc) == min(here, 3)
    assert _cores(tmp_path, "garbage\n4:cpu,cpuacct\n") == here  # unreadable lines: ignored
