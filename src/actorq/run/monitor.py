"""Watching a run: periodic evaluation (:class:`Evaluator`), per-interval logging
(:class:`IntervalLogger`, :func:`log_interval`), the progress bar, and Ctrl-C / SIGTERM as one
stop request.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from actorq.agents.policy_io import PolicyIO
from actorq.config import ExperimentConfig
from actorq.core.seeds import EVAL_SEED, confirm_seed
from actorq.distributed.backend import CUMULATIVE, Backend, BackendStats
from actorq.energy import RunEnergy
from actorq.logging import (
    CONFIRM_METRIC,
    EVAL_METRIC,
    EVAL_S_METRIC,
    RUN_CLOCK_METRIC,
    MetricLogger,
)
from actorq.run.publisher import Publisher, check_losses
from actorq.run.resume import Counters


class Evaluator:
    """Greedy evaluation of the actors' snapshot every ``eval_every`` environment steps; a
    target counts as reached only if a confirmation on fresh seeds agrees."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        io: PolicyIO,
        target: float | None,
        logger: MetricLogger,
        say: Callable[[str], None],
        env_steps: int,
        eval_s: float = 0.0,
        next_eval: int | None = None,
    ) -> None:
        self.cfg, self.io, self.target, self.logger, self.say = cfg, io, target, logger, say
        # a resumed run's checkpoint says which evaluation is next (one due when it was saved,
        # not yet run, is run); older checkpoints, the next multiple of eval_every
        if next_eval is None:
            next_eval = (env_steps // cfg.eval_every + 1) * cfg.eval_every
        self.next = next_eval
        self.seconds = eval_s  # time spent evaluating (periodic and confirmation), all segments

    def due(self, env_steps: int) -> bool:
        return env_steps >= self.next

    def run(self, data: bytes, c: Counters, elapsed: float) -> bool:
        """Evaluate the snapshot ``data``; record it; returns True when the target is newly
        reached and confirmed."""
        cfg = self.cfg
        t = time.perf_counter()
        self.next = (c.env_steps // cfg.eval_every + 1) * cfg.eval_every
        c.next_eval = self.next
        rets = self.io.evaluate(data, cfg.eval_episodes, EVAL_SEED)
        c.last_eval = float(rets.mean())
        self.logger.log(c.env_steps, {EVAL_METRIC: c.last_eval, RUN_CLOCK_METRIC: elapsed})
        self.say(
            f"eval @ {c.env_steps:>8} steps, {elapsed:6.1f}s: "
            f"{_num(rets.mean())} ± {_num(rets.std())} ({cfg.precision})"
        )
        reached = False
        if self.target is not None and rets.mean() >= self.target and c.steps_to_target is None:
            seed = confirm_seed(c.publishes, cfg.eval_episodes)  # fresh seeds per publish
            conf = self.io.evaluate(data, cfg.eval_episodes, seed)
            self.say(f"  confirmation on fresh seeds: {conf.mean():.1f} ± {conf.std():.1f}")
            self.logger.log(c.env_steps, {CONFIRM_METRIC: float(conf.mean())})
            if conf.mean() >= self.target:
                c.steps_to_target = c.env_steps
                c.time_to_target_s = elapsed
                reached = True
        self.seconds += time.perf_counter() - t
        c.eval_time_s = self.seconds  # checkpointed with the counters
        self.logger.log(c.env_steps, {EVAL_S_METRIC: self.seconds})
        return reached


def _num(x: float) -> str:
    """A return for a log line: one decimal for episode returns (CartPole's 500.0), four
    significant digits for small ones (a proxy cost of 0.5417, a 4% gain over a baseline)."""
    return f"{x:7.1f}" if abs(x) >= 100 else f"{x:7.4g}"


class IntervalLogger:
    """Every ``log_every`` seconds: learner metrics (means over the interval's updates),
    throughput, waits, communication, faults, energy and episode returns, to CSV/TensorBoard and
    the progress bar."""

    def __init__(self, logger: MetricLogger, progress: Progress, c: Counters) -> None:
        self.logger, self.progress = logger, progress
        # per metric: the sum of the learner's means, each times the updates it is a mean over,
        # and those updates (reads of unequal length: a checkpoint's inside an interval)
        self.window: dict[str, tuple[float, float]] = {}
        self.read_at = c.updates  # the learner's updates at its last read
        self.ep_returns: list[float] = []
        self.ep_lengths: list[int] = []
        self.last = {"steps": c.env_steps, "updates": c.updates, "t": time.perf_counter(),
                     "busy": 0.0, "wait": 0.0, "infer": 0.0, "env": 0.0}  # fmt: skip
        # the faults and skips of the run's earlier segments: its totals are theirs + this one's
        self.before = (c.actor_restarts, c.rejected_snapshots, c.publishes_skipped)
        self.totals_before = dict(c.totals)
        # this segment's last reading of each: a metric missing from one (a cache that died)
        # keeps what it had counted
        self.segment: dict[str, float] = {}
        self.update_s = 0.0  # the learner's time inside update() this interval
        # the learner's time in loop turns that found no batch this interval: polling is
        # waiting, the backend's sleep and the look at every actor's channel alike (counting
        # only the sleep, an idle learner beside 15 actors read as 30% busy)
        self.wait_s = 0.0

    def keep_totals(self, c: Counters, st: BackendStats, publisher: Publisher) -> None:
        """The run's totals so far into ``c``: the earlier segments' and this one's."""
        restarts, rejected, skips = self.before
        c.actor_restarts = restarts + st.actor_restarts
        c.rejected_snapshots = rejected + st.rejected_snapshots
        c.publishes_skipped = skips + publisher.skipped
        times, blocked = list(publisher.times), list(publisher.blocked)  # a thread appends
        seg = self.segment
        seg.update((k, v) for k, v in st.extra.items() if k in CUMULATIVE)
        seg.update(publish_s=sum(times), publish_n=len(times))
        seg.update(blocked_s=sum(blocked), blocked_n=len(blocked))
        before = self.totals_before
        c.totals = {k: before.get(k, 0.0) + seg.get(k, 0.0) for k in before.keys() | seg.keys()}

    def add_update(self, metrics: dict[str, float], seconds: float = 0.0, n: float = 1.0) -> None:
        """``metrics``: means over ``n`` updates."""
        for k, v in metrics.items():
            total, count = self.window.get(k, (0.0, 0.0))
            self.window[k] = (total + n * v, count + n)
        self.update_s += seconds

    def add_metrics(self, metrics: dict[str, float], updates: int) -> None:
        """The learner's means since its last read, at ``updates`` (stops a diverged run: a
        non-finite loss)."""
        check_losses(metrics, updates)
        self.add_update(metrics, n=max(updates - self.read_at, 1))
        self.read_at = updates

    def means(self) -> dict[str, float]:
        """The learner's metrics over the updates read since the last log."""
        return {k: total / count for k, (total, count) in self.window.items()}

    def add_episodes(self, episodes: list[tuple[float, int]]) -> None:
        for ret, length in episodes:
            self.ep_returns.append(ret)
            self.ep_lengths.append(length)

    def due(self, now: float, every: float) -> bool:
        return now - self.last["t"] >= every

    def log(
        self,
        now: float,
        c: Counters,
        st: BackendStats,
        publisher: Publisher,
        replay_size: int,
        energy: dict[str, float],
    ) -> dict[str, float]:
        last = self.last
        dt = now - last["t"]
        busy = st.actor_busy_s - last["busy"]
        wait = st.actor_wait_s - last["wait"]
        m = self.means()
        self.keep_totals(c, st, publisher)
        m.update(
            {
                "perf/actor_sps": (c.env_steps - last["steps"]) / dt,
                "perf/learner_ups": (c.updates - last["updates"]) / dt,
                "perf/learner_wait_frac": self.wait_s / dt,
                "perf/learner_update_frac": self.update_s / dt,
                "perf/actor_wait_frac": wait / (busy + wait) if busy + wait > 0 else 0.0,
                "comm/snapshot_bytes": float(len(publisher.latest)),
                "comm/publishes": float(c.publishes),
                "comm/publish_ms": 1e3 * float(np.mean(publisher.times[-50:]))
                if publisher.times
                else 0.0,
                "comm/publish_blocked_ms": 1e3 * float(np.mean(publisher.blocked[-50:]))
                if publisher.blocked
                else 0.0,
                "comm/publishes_skipped": float(c.publishes_skipped),
                "faults/actor_restarts": float(c.actor_restarts),
                "faults/rejected_snapshots": float(c.rejected_snapshots),
                "replay/size": float(replay_size),
                **energy,
                **st.extra,
                **{k: c.totals[k] for k in st.extra if k in CUMULATIVE},  # the whole run's
            }
        )
        if busy > 0:  # where the actors' busy time went (the rest: sampling, adder, writes)
            m["perf/actor_infer_frac"] = (st.actor_infer_s - last["infer"]) / busy
            m["perf/actor_env_frac"] = (st.actor_env_s - last["env"]) / busy
        if self.ep_returns:
            m["charts/episodic_return"] = float(np.mean(self.ep_returns[-1000:]))
            m["charts/episodic_length"] = float(np.mean(self.ep_lengths[-1000:]))
        c.episodes += len(self.ep_returns)
        self.ep_returns.clear()
        self.ep_lengths.clear()
        self.logger.log(c.env_steps, m)
        self.window.clear()
        last.update(steps=c.env_steps, updates=c.updates, t=now, busy=st.actor_busy_s,
                    wait=st.actor_wait_s, infer=st.actor_infer_s, env=st.actor_env_s)  # fmt: skip
        self.update_s = self.wait_s = 0.0
        ev = "-" if c.last_eval is None else f"{c.last_eval:.1f}"
        ep_ret = m.get("charts/episodic_return")
        self.progress.update(
            c.env_steps,
            f"ups {m['perf/learner_ups']:6.0f} | sps {m['perf/actor_sps']:7.0f} | "
            f"return {'-' if ep_ret is None else f'{ep_ret:.1f}'} | eval {ev}",
        )
        return m


def log_interval(
    now: float,
    c: Counters,
    backend: Backend,
    interval: IntervalLogger,
    publisher: Publisher,
    energy: RunEnergy | None,
    progress: Progress,
) -> dict[str, Any]:
    """One log interval: supervise the actors, log the metrics; returns what a callback gets."""
    st = backend.stats()
    restarted = backend.supervise()
    if restarted:
        progress.print(f"[yellow]restarted {restarted} actor(s)[/]")
    m = interval.log(
        now,
        c,
        st,
        publisher,
        backend.replay.size,
        energy.snapshot().as_metrics() if energy is not None else {},
    )
    return {**m, **c.to_json(), "backend": backend, "actor_pids": backend.pids()}


class StopOnSignal:
    """Ctrl-C (SIGINT), SIGTERM (what ``kill``, ``docker stop``, Slurm and Kubernetes send
    before they kill) and SIGHUP (the terminal closed, an ssh session dropped: by default it
    killed the run without its checkpoint; not under ``nohup``, which ignores it) ask the
    learner loop to stop at its next iteration, through the clean path: final checkpoint,
    summary, actors stopped, shared memory removed.
    A second one interrupts at once, unless it comes within ``SAME_STOP_S`` of the first: one
    stop reaches a process twice when a whole process group or every process is signalled
    (``pkill -f actorq``, a machine shutting down) and a parent forwards its own (``actorq
    bench`` stops its cell with SIGINT), and escalating then cut the stop's checkpoint short.

    A flag rather than Python's default KeyboardInterrupt: that exception is raised wherever
    the main thread happens to be, and when that is a finalizer (``__del__`` of an env or a
    session, run by the garbage collector) Python prints "Exception ignored" and drops it, so
    an unlucky Ctrl-C would be lost and the run would go on. Only installed in the main thread.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    #: signals this close after the first are the same stop (a person's second Ctrl-C to cut a
    #: checkpoint short comes later than this)
    SAME_STOP_S = 1.0

    def __init__(self) -> None:
        self.requested = False
        self._first_at: float | None = None
        self._at_once = False
        self._prev: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            # a hangup ignored on purpose (`nohup`, the docs' long runs) stays ignored: the run
            # outlives the session it was started from, as its user asked
            self._prev = {
                s: signal.signal(s, self._handle)
                for s in self.SIGNALS
                if s != signal.SIGHUP or signal.getsignal(s) is not signal.SIG_IGN
            }

    def _handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if self._at_once:
            self.requested = True
            raise KeyboardInterrupt
        if self._first_at is None:
            self._first_at = now
        elif now - self._first_at >= self.SAME_STOP_S:
            raise KeyboardInterrupt
        self.requested = True

    @contextlib.contextmanager
    def at_once(self) -> Iterator[None]:
        """Within: the first signal interrupts at once (raises KeyboardInterrupt), for work
        with nothing to save that no loop polls the flag in (the run's final evaluation)."""
        self._at_once = True
        try:
            yield
        finally:
            self._at_once = False

    def restore(self) -> None:
        for s, prev in self._prev.items():
            signal.signal(s, prev)
        self._prev = {}


class Progress:
    def __init__(self, enabled: bool, total: int, start: int) -> None:
        self.enabled = enabled
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.p = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            transient=False,
        )
        self.task = self.p.add_task("train", total=total, completed=start, info="")
        self.p.start()

    def update(self, steps: int, info: str) -> None:
        if self.enabled:
            self.p.update(self.task, completed=steps, info=info)

    def print(self, msg: str) -> None:
        if self.enabled:
            self.p.console.print(msg)
        else:
            print(msg, flush=True)

    def stop(self, steps: int | None = None) -> None:
        """Close the bar at ``steps`` (the run's last count: the bar last moved at the last log
        interval, short of where the run ended)."""
        if self.enabled:
            if steps is not None:
                self.p.update(self.task, completed=steps)
            self.p.stop()
