"""The interval log's whole-run totals (:mod:`actorq.run.monitor`): what counts from a
segment's start (faults, stale drops, publish times) reads as the run's after a resume."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from actorq.distributed.backend import BackendStats
from actorq.run.monitor import IntervalLogger
from actorq.run.resume import Counters


class _Logger:
    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.rows.append(metrics)


def _stats(**extra: float) -> BackendStats:
    return BackendStats(env_steps=100, actor_busy_s=1.0, actor_wait_s=1.0, actor_restarts=1,
                        rejected_snapshots=2, versions=[3], extra=extra)  # fmt: skip


def test_a_resumed_segment_adds_its_counts_to_the_earlier_segments() -> None:
    # the checkpoint of a run that had published 4 times in 2.0 s, dropped 3 stale chunks
    before = Counters(actor_restarts=1, rejected_snapshots=5, publishes_skipped=2,
                      totals={"publish_s": 2.0, "publish_n": 4.0, "blocked_s": 0.4,
                              "blocked_n": 4.0, "replay/dropped_stale": 3.0})  # fmt: skip
    logger = _Logger()
    progress: Any = SimpleNamespace(update=lambda *a: None)
    interval = IntervalLogger(logger, progress, before)  # type: ignore[arg-type]
    # this segment: 2 publishes of 1.0 s each, 2 stale chunks dropped since its start
    publisher: Any = SimpleNamespace(times=[1.0, 1.0], blocked=[0.1, 0.1], skipped=1,
                                     latest=b"x" * 10, publishes=2)  # fmt: skip
    c = before
    m = interval.log(1e9, c, _stats(**{"replay/dropped_stale": 2.0, "replay/x": 7.0}),
                     publisher, 10, {})  # fmt: skip
    assert (c.actor_restarts, c.rejected_snapshots, c.publishes_skipped) == (2, 7, 3)
    assert c.totals["publish_n"] == 6 and c.mean_ms("publish") == pytest.approx(4000 / 6)
    assert c.mean_ms("blocked") == pytest.approx(600 / 6)
    # a cumulative metric reads the whole run's; a gauge is this segment's as it is
    assert m["replay/dropped_stale"] == 5.0 and m["replay/x"] == 7.0
    assert logger.rows[-1]["replay/dropped_stale"] == 5.0
    # the next interval adds to the same earlier totals, not to its own last reading
    publisher.times.append(1.0)
    interval.log(2e9, c, _stats(**{"replay/dropped_stale": 4.0}), publisher, 10, {})
    assert c.totals["replay/dropped_stale"] == 7.0 and c.totals["publish_n"] == 7
    # a reading without it (Ray's egress when a cache died) keeps the segment's last count
    interval.log(3e9, c, _stats(), publisher, 10, {})
    assert c.totals["replay/dropped_stale"] == 7.0


def test_a_run_with_no_publish_timed_has_a_mean_of_zero() -> None:
    assert Counters().mean_ms("publish") == 0.0
    assert Counters(totals={"publish_n": 0.0, "publish_s": 0.0}).mean_ms("publish") == 0.0


def test_learner_metrics_are_means_over_the_intervals_updates() -> None:
    logger = _Logger()
    progress: Any = SimpleNamespace(update=lambda *a: None)
    publisher: Any = SimpleNamespace(times=[], blocked=[], skipped=0, latest=b"", publishes=0)
    c = Counters(updates=100)
    interval = IntervalLogger(logger, progress, c)  # type: ignore[arg-type]
    # a checkpoint's read after 10 updates, the log's after 30 more: 10 x 1.0 and 30 x 5.0
    interval.add_metrics({"losses/td_loss": 1.0}, 110)
    interval.add_metrics({"losses/td_loss": 5.0}, 140)
    c.updates = 140
    m = interval.log(1e9, c, _stats(), publisher, 10, {})
    assert m["losses/td_loss"] == pytest.approx(4.0)  # not (1.0 + 5.0) / 2
    interval.add_metrics({"losses/td_loss": 2.0}, 150)  # the next interval starts afresh
    assert interval.means() == {"losses/td_loss": 2.0}


def test_a_hangup_nohup_ignores_stays_ignored() -> None:
    """``nohup`` (the docs' long runs) ignores SIGHUP so a run outlives its ssh session: the
    run's stop handler takes SIGINT and SIGTERM and leaves that hangup ignored; without
    ``nohup`` a hangup stops the run as SIGTERM does."""
    import signal

    from actorq.run.monitor import StopOnSignal

    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        stop = StopOnSignal()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == stop._handle
        stop.restore()
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        stop = StopOnSignal()
        assert signal.getsignal(signal.SIGHUP) == stop._handle
        stop.restore()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, old)


def test_one_stop_delivered_twice_is_one_request_a_later_one_interrupts(monkeypatch) -> None:
    """``pkill -f actorq`` or a shutdown signals the bench cell and its runner, which forwards a
    SIGINT: the cell gets SIGTERM and SIGINT back to back. That is one stop (its checkpoint is
    still written); a signal a second or more later is a person insisting, and interrupts."""
    import os
    import signal

    from actorq.run import monitor
    from actorq.run.monitor import StopOnSignal

    stop = StopOnSignal()
    try:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)  # the forwarded copy
            for _ in range(100):  # handlers run between bytecodes of the main thread
                pass
        except KeyboardInterrupt:
            pytest.fail("a stop delivered twice at once cut the run's stop short")
        assert stop.requested
        later = monitor.time.monotonic() + StopOnSignal.SAME_STOP_S
        monkeypatch.setattr(monitor.time, "monotonic", lambda: later)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100):
                pass
    finally:
        stop.restore()


def test_the_progress_bar_closes_at_the_runs_last_count() -> None:
    """The bar moves at each log interval; closed at the run's end it shows where the run
    ended (it stopped at the last interval's count: 2,336 of a run's 3,008 steps)."""
    from actorq.run.monitor import Progress

    bar = Progress(True, total=3_000, start=0)
    bar.update(2_336, "")
    bar.stop(3_008)
    assert bar.p.tasks[0].completed == 3_008
