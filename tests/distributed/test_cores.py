"""``actorq.distributed.cores``: the cores a process may use, containers included."""

from __future__ import annotations

from pathlib import Path

from actorq.distributed.cores import usable_cores


def test_usable_cores_is_capped_by_a_containers_cpu_quota(tmp_path: Path) -> None:
    here = usable_cores(str(tmp_path))  # no cgroup files: the CPU affinity
    assert here >= 1
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # v2: 1.5 CPUs
    assert usable_cores(str(tmp_path)) == min(here, 2)
    (tmp_path / "cpu.max").write_text("max 100000\n")  # v2: no quota
    assert usable_cores(str(tmp_path)) == here
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu/cpu.cfs_quota_us").write_text("100000\n")  # v1: 1 CPU
    (tmp_path / "cpu/cpu.cfs_period_us").write_text("100000\n")
    assert usable_cores(str(tmp_path)) == 1
    (tmp_path / "cpu/cpu.cfs_quota_us").write_text("-1\n")  # v1: no quota
    assert usable_cores(str(tmp_path)) == here
    (tmp_path / "cpu/cpu.cfs_quota_us").write_text("garbage\n")  # unreadable: ignored
    assert usable_cores(str(tmp_path)) == here
