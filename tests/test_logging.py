"""The metrics logger (actorq.logging): what it leaves on disk at each point of a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorq.bench.results import read_metrics
from actorq.logging import EVAL_METRIC, MetricLogger
from actorq.run.resume import trim_metrics
from actorq.rundir import RunDir


def test_the_header_is_on_disk_before_the_first_log(tmp_path: Path) -> None:
    """A run killed between its logger's creation and its first log() left an empty
    metrics.csv (the header was still in the file's buffer)."""
    logger = MetricLogger(tmp_path, tensorboard=False)
    try:
        assert read_metrics(tmp_path / "metrics.csv", lambda metric: True) == []
        assert (tmp_path / "metrics.csv").read_bytes() == b"step,wall_time,metric,value\r\n"
    finally:
        logger.close()


HEADER = b"step,wall_time,metric,value\r\n"
ROW = b"1000,1700000000.000,charts/eval_return,5\r\n"
#: a run killed while logging ``17.3`` at step 2000: what is left of the line parses
CUT = HEADER + ROW + b"2000,1700000001.000,charts/eval_return,1"


def _go_on(run_dir: Path, how: str) -> list[tuple[int, str, float]]:
    """Go on logging after the run ``run_dir`` as a new run (``logger``) or a resume from a
    checkpoint at step 2000 (``resume``: its trim, then its logger) does; what is read then."""
    if how == "resume":
        trim_metrics(RunDir(run_dir), 2000, None)
    logger = MetricLogger(run_dir, tensorboard=False)
    logger.log(3000, {EVAL_METRIC: 7.0})
    logger.close()
    return [(s, m, v) for s, _, m, v in read_metrics(run_dir / "metrics.csv", lambda m: True)]


@pytest.mark.parametrize("how", ["logger", "resume"])
@pytest.mark.parametrize(
    "cut", [b"13", CUT[len(HEADER + ROW) :], b"9" * 70_000], ids=["unparsed", "parses", "long"]
)
def test_a_row_after_a_cut_line_starts_a_line_of_its_own(
    tmp_path: Path, how: str, cut: bytes
) -> None:
    """The resume kept a cut last line (whether or not it parsed) and the logger appended to
    it: the next row was glued to it, and the report failed ("expected 4 fields, got 6")."""
    (tmp_path / "metrics.csv").write_bytes(HEADER + ROW + cut)
    assert _go_on(tmp_path, how) == [(1000, EVAL_METRIC, 5.0), (3000, EVAL_METRIC, 7.0)]
    assert (tmp_path / "metrics.csv").read_bytes().startswith(HEADER + ROW + b"3000,")


@pytest.mark.parametrize("how", ["logger", "resume"])
@pytest.mark.parametrize("cut", [0, 10, len(HEADER) - 2])
def test_a_header_cut_short_is_written_whole_before_the_first_row(
    tmp_path: Path, how: str, cut: int
) -> None:
    """A run killed as its logger started (or stopped by a full disk) left its header cut or
    none; the next one took the file as begun and wrote no header: the report refused it."""
    (tmp_path / "metrics.csv").write_bytes(HEADER[:cut])
    assert _go_on(tmp_path, how) == [(3000, EVAL_METRIC, 7.0)]


def test_sb3s_resumed_record_drops_a_cut_last_line(tmp_path: Path) -> None:
    """SB3's resumed record kept a cut four-field row (17.3 cut to 1) and wrote it anew as a
    whole one: a value never logged."""
    from actorq.bench.frameworks import _metric_rows

    (tmp_path / "metrics.csv").write_bytes(CUT)
    assert _metric_rows(tmp_path / "metrics.csv", 2000) == [
        ["1000", "1700000000.000", EVAL_METRIC, "5"]
    ]


def test_whole_lines_keeps_each_line_end() -> None:
    from actorq.logging import whole_lines

    assert whole_lines(CUT) == HEADER + ROW
    assert whole_lines(HEADER + ROW[:-1]) == HEADER + ROW[:-1]  # "\r": its row is whole
    assert whole_lines(b"step,wall") == b""
