"""Machine facts recorded next to every benchmark result (shared by the scripts here)."""

from actorq.bench.machine import cpu_flags, cpu_model, git_commit, machine_info

__all__ = ["cpu_flags", "cpu_model", "git_commit", "machine_info"]
