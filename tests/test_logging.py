"""The metrics logger (actorq.logging): what it leaves on disk at each point of a run."""

from __future__ import annotations

from pathlib import Path

from actorq.bench.results import read_metrics
from actorq.logging import MetricLogger


def test_the_header_is_on_disk_before_the_first_log(tmp_path: Path) -> None:
    """A run killed between its logger's creation and its first log() left an empty
    metrics.csv (the header was still in the file's buffer)."""
    logger = MetricLogger(tmp_path, tensorboard=False)
    try:
        assert read_metrics(tmp_path / "metrics.csv", lambda metric: True) == []
        assert (tmp_path / "metrics.csv").read_bytes() == b"step,wall_time,metric,value\r\n"
    finally:
        logger.close()
