"""Metrics to TensorBoard and CSV under fixed names (the same in every run and backend)."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from actorq.errors import ActorQError, OutputError, shown
from actorq.rundir import METRICS_HEADER, RunDir

HEADER = list(METRICS_HEADER)
#: a periodic evaluation's mean return (full episodes, the env family's evaluation settings)
EVAL_METRIC = "charts/eval_return"
#: the run's own clock at a periodic evaluation: seconds since the start of its training, over
#: every segment of a resumed run and none of the stops between them (the clock its time to
#: target is read on); ``wall_time`` is the machine's, which runs on while a run is stopped
RUN_CLOCK_METRIC = "perf/run_s"
#: seconds spent in periodic evaluations so far (cumulative, logged after each one)
EVAL_S_METRIC = "perf/eval_s"
#: the mean return of a periodic evaluation's confirmation on fresh seeds (one at or above the
#: target is the run's time to target: a report reads a running run's from it)
CONFIRM_METRIC = "charts/confirm_return"


def whole_lines(data: bytes) -> bytes:
    """``data`` up to its last line end: metrics.csv less the line a run killed while logging
    cut short (what is left of it may parse: ``17.3`` cut to ``1``; of a header: nothing), so
    that a row appended after it, or a rewrite's, starts a line of its own. A line end is
    ``\n`` or ``\r`` (csv's ``\r\n`` cut in half leaves its row whole), as the report's
    reader (:func:`actorq.bench.results.read_metrics`) takes them. Used by every writer that
    goes on from a metrics.csv: the logger, a resume's trim, SB3's resumed record."""
    return data[: max(data.rfind(b"\n"), data.rfind(b"\r")) + 1]


def _cut_to_whole_lines(path: Path) -> int | None:
    """Cut the file ``path`` back to :func:`whole_lines` of it, reading its tail only (a
    long run's metrics.csv is megabytes); the bytes kept, None where there is no file."""
    try:
        f = open(path, "rb+")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return None
    with f:
        end = pos = f.seek(0, os.SEEK_END)
        keep = 0
        while pos > 0:
            start = max(pos - (1 << 16), 0)
            f.seek(start)
            kept = len(whole_lines(f.read(pos - start)))
            if kept:
                keep = start + kept
                break
            pos = start
        if keep < end:
            f.truncate(keep)
        return keep


def rewrite_metrics(path: Path, rows: list[list[str]], error: type[ActorQError]) -> None:
    """Rewrite ``metrics.csv`` as its header and ``rows``, whole or not at all (a resume drops
    the rows its checkpoint had not seen; a kill meanwhile must not lose the earlier ones)."""
    from actorq.output import write_output

    buf = io.StringIO()
    csv.writer(buf).writerows([HEADER, *rows])
    write_output(path, buf.getvalue(), "metrics", error=error)


class MetricLogger:
    """Writes ``name, value`` at a step to ``metrics.csv`` (long format, appendable across
    resumes) and to TensorBoard event files in the run directory."""

    def __init__(
        self, run_dir: Path, tensorboard: bool = True, purge_step: int | None = None
    ) -> None:
        """``purge_step``: a resumed run's first step past its checkpoint: TensorBoard hides
        the events a killed segment logged from it on (``metrics.csv`` drops its rows:
        :func:`trim_metrics`), so no curve holds two points at one step."""
        self.run_dir = run_dir
        self.path = RunDir(run_dir).metrics
        with self._writing():
            # a run killed mid-line left its last line cut: the next row would be glued to it
            new = not _cut_to_whole_lines(self.path)  # no file, or nothing whole in it
            self._f = open(self.path, "a", newline="")  # noqa: SIM115
            self._csv = csv.writer(self._f)
            if new:  # on disk now: a run killed before its first log() leaves a readable file
                self._csv.writerow(HEADER)
                self._f.flush()
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(RunDir(run_dir).tensorboard), purge_step=purge_step)
            except ImportError:  # tensorboard missing: CSV still works
                self._tb = None

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A full disk or a read-only filesystem while logging is one :class:`OutputError`
        line naming the file, not a traceback."""
        try:
            yield
        except OSError as e:
            raise OutputError(
                f"cannot write {shown(self.path)}: {e.strerror or type(e).__name__}"
            ) from None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        now = time.time()
        with self._writing():
            for name, value in metrics.items():
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    continue
                self._csv.writerow([step, f"{now:.3f}", name, f"{float(value):.6g}"])
                if self._tb is not None:
                    self._tb.add_scalar(name, float(value), step)
            self._f.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # what could not be flushed was reported by log()
            self._f.close()
        if self._tb is not None:
            with contextlib.suppress(OSError):
                self._tb.close()


def read_metrics(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """metrics.csv as ``{name: [(step, value), ...]}``."""
    out: dict[str, list[tuple[int, float]]] = {}
    with open(RunDir(run_dir).metrics, newline="") as f:
        for row in csv.DictReader(f):
            out.setdefault(row["metric"], []).append((int(row["step"]), float(row["value"])))
    return out
