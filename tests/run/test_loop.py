"""The learner's loop (:mod:`actorq.run.loop`): a stop signal as the run finishes (a
scheduler's SIGTERM at the end of its time) still leaves the checkpoint and the summary; a
resume with nothing left to train steps nothing; what the run's end counts, logs and keeps."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import actorq
from actorq import DQNConfig
from actorq import checkpoint as ckpt
from actorq.agents import builder_for
from actorq.core.loop import VectorActor
from actorq.distributed.local import LocalBackend, SyncBackend, _LocalCache
from actorq.envs import env_spec
from actorq.run import loop
from actorq.run.publisher import Checkpointer, Publisher
from actorq.run.resume import Counters

RUN = {"env": "gym:CartPole-v1", "total_steps": 400, "min_replay_size": 100, "batch_size": 32}


@pytest.mark.parametrize("when", ["final save", "final evaluation"])
def test_a_signal_as_the_run_ends_keeps_its_checkpoint_and_summary(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    cfg = tiny("dqn", **RUN, eval_episodes=2)
    if when == "final save":
        save = Checkpointer.save

        def signalled_save(self: Checkpointer, snapshot: bytes | None = None) -> None:
            if snapshot is not None:  # the run's final checkpoint (the periodic ones: None)
                os.kill(os.getpid(), signal.SIGTERM)
            save(self, snapshot)

        monkeypatch.setattr(Checkpointer, "save", signalled_save)
    else:
        report = loop.final_report

        def signalled_report(*args: Any) -> Any:
            os.kill(os.getpid(), signal.SIGTERM)  # interrupts the evaluation at once
            return report(*args)

        monkeypatch.setattr(loop, "final_report", signalled_report)
    before = signal.getsignal(signal.SIGTERM)
    result = actorq.train(cfg)
    assert signal.getsignal(signal.SIGTERM) is before  # the run's handler is gone again
    run = Path(cfg.run_dir)
    summary = json.loads((run / "summary.json").read_text())
    assert result.interrupted and summary["interrupted"] and summary["eval_return"] is None
    assert result.env_steps >= 400
    monkeypatch.undo()
    # the resume has nothing left to train: its end runs the evaluation the signal skipped
    again = actorq.train(tiny("dqn", **RUN, eval_episodes=2, resume=str(run)))
    assert not again.interrupted and again.eval_return is not None
    assert again.updates == result.updates


def test_a_hangup_stops_a_run_as_sigterm_does(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGHUP (the terminal closed, an ssh session dropped) killed a run without its final
    checkpoint or summary; it stops the run through the clean path, as SIGTERM does."""
    cfg = tiny("dqn", **{**RUN, "total_steps": 5_000}, eval_episodes=2, checkpoint_every=10)
    save = Checkpointer.save
    saves: list[bytes | None] = []

    def hung_up_save(self: Checkpointer, snapshot: bytes | None = None) -> None:
        if not saves:  # the first periodic checkpoint: the run goes on past it unless stopped
            os.kill(os.getpid(), signal.SIGHUP)
        saves.append(snapshot)
        save(self, snapshot)

    monkeypatch.setattr(Checkpointer, "save", hung_up_save)

    def mine(signum: int, frame: Any) -> None:  # this process's own (never dies here)
        pass

    old = signal.signal(signal.SIGHUP, mine)
    try:
        result = actorq.train(cfg)
        assert signal.getsignal(signal.SIGHUP) is mine  # the run's handler is gone again
    finally:
        signal.signal(signal.SIGHUP, old)
    summary = json.loads((Path(cfg.run_dir) / "summary.json").read_text())
    assert result.interrupted and summary["interrupted"]
    assert result.env_steps < 5_000 and len(saves) == 2  # stopped, its final checkpoint saved


def test_a_resume_of_a_run_that_stopped_at_its_target_trains_nothing_more(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # an untrained CartPole policy scores ~9: a target of 5 is reached at the first evaluation
    kw = {**RUN, "total_steps": 3_000, "eval_every": 100, "target_return": 5.0, "eval_episodes": 2}
    report = loop.final_report

    def signalled_report(*args: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's stop, in the final evaluation
        return report(*args)

    monkeypatch.setattr(loop, "final_report", signalled_report)
    result = actorq.train(tiny("dqn", **kw))
    assert result.interrupted and result.reached_target and result.env_steps < 3_000
    monkeypatch.undo()
    run = Path(tiny("dqn", **kw).run_dir)
    again = actorq.train(tiny("dqn", **kw, resume=str(run)))
    # it stops where it stopped (not on to --total-steps) and runs the skipped evaluation
    assert (again.env_steps, again.updates) == (result.env_steps, result.updates)
    assert not again.interrupted and again.eval_return is not None
    assert json.loads((run / "summary.json").read_text())["stop"] == "target"


def test_the_last_partial_intervals_learner_metrics_are_logged(tiny: Callable[..., Any]) -> None:
    r = actorq.train(tiny("dqn", **RUN))  # log_every 1e9: the run's end is its only interval
    rows = [ln.split(",") for ln in (Path(r.run_dir) / "metrics.csv").read_text().splitlines()]
    losses = [int(step) for step, _, name, _ in rows[1:] if name == "losses/td_loss"]
    assert losses == [r.env_steps]


def test_a_resume_past_its_budget_sends_its_actors_no_snapshot(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = actorq.train(tiny("dqn", **RUN, actors=1))
    sent: list[int] = []
    publish = LocalBackend.publish

    def recorded(self: LocalBackend, version: int, data: bytes) -> None:
        sent.append(version)
        publish(self, version, data)

    monkeypatch.setattr(LocalBackend, "publish", recorded)
    again = actorq.train(tiny("dqn", **RUN, actors=1, resume=first.run_dir))
    # without a snapshot the actor processes take no step (docs/reliability.md: resuming)
    assert sent == [] and (again.env_steps, again.updates) == (first.env_steps, first.updates)
    assert again.snapshot_bytes == first.snapshot_bytes and again.eval_return is not None


def test_steps_the_actors_take_after_the_learner_stopped_are_not_counted(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[int] = []  # the env steps the learner's loop read, the last one last
    env_steps, stats = SyncBackend.env_steps, SyncBackend.stats

    def reading(self: SyncBackend) -> int:
        read.append(env_steps(self))
        return read[-1]

    def stepped_on(self: SyncBackend) -> Any:
        monkeypatch.setattr(SyncBackend, "env_steps", env_steps)  # the loop has ended
        for _ in range(3):  # as actor processes do until they are closed
            self._step_actor()
        return stats(self)

    monkeypatch.setattr(SyncBackend, "env_steps", reading)
    monkeypatch.setattr(SyncBackend, "stats", stepped_on)  # only the run's end reads them
    r = actorq.train(tiny("dqn", **RUN))
    state = json.loads((Path(r.run_dir) / "checkpoint" / "state.json").read_text())
    assert r.env_steps == read[-1] == state["counters"]["env_steps"]


def _slow_publishing_run(cfg: DQNConfig, c: Counters, tmp_path: Path) -> tuple[Any, Any]:
    """The pieces ``loop._learn`` drives, with a background publisher whose sends wait for the
    returned event (set it to let them land) and are kept in ``r.sent``; a stub learner."""
    spec = env_spec(cfg.env)
    builder = builder_for(cfg)
    learner = builder.make_learner(cfg, spec)
    publisher = Publisher(cfg, builder.policy_io(cfg, spec, learner), asynchronous=True)
    sent: list[bytes] = []
    landed = threading.Event()

    def slow_send(version: int, data: bytes) -> None:
        assert landed.wait(30)
        sent.append(data)

    publisher.backend = SimpleNamespace(publish=slow_send)  # type: ignore[assignment]
    checkpointer = Checkpointer(tmp_path, learner, c, np.random.default_rng(0), None, False)
    checkpointer.publisher = publisher
    r: Any = SimpleNamespace(
        c=c, publisher=publisher, checkpointer=checkpointer, energy=None, sent=sent,
        start_wall=time.perf_counter(),
        learner=SimpleNamespace(learn=lambda batch: None, read_metrics=dict),
        interval=SimpleNamespace(update_s=0.0, add_metrics=lambda metrics, updates: None),
        backend=SimpleNamespace(env_steps=lambda: 0, ready_batch=lambda: None),
    )  # fmt: skip
    return r, landed


def test_a_checkpoint_with_a_publish_in_the_background_keeps_its_snapshot(tmp_path: Path) -> None:
    # int8 rounded with GPTQ: a snapshot the weights alone do not make again
    cfg = DQNConfig(actors=1, precision="int8", calibration="gptq", publish_every=2,
                    checkpoint_every=2, run_dir=str(tmp_path))  # fmt: skip
    c = Counters(updates=1)
    r, landed = _slow_publishing_run(cfg, c, tmp_path)
    threading.Timer(0.5, landed.set).start()  # still sending when the checkpoint starts
    try:
        loop._learn(cfg, r, batch={})  # update 2: a publish, then a checkpoint
    finally:
        landed.set()
        r.publisher.close()
    assert c.updates == 2 and len(r.sent) == 1
    assert (tmp_path / "checkpoint" / ckpt.SNAPSHOT).read_bytes() == r.sent[0]


def test_a_checkpoint_after_a_skipped_publish_keeps_the_snapshot_of_its_weights(
    tmp_path: Path,
) -> None:
    """A publish due while the previous one still flies is skipped (a slow GPTQ publish): the
    checkpoint then makes the snapshot of the weights it saves, in line, and keeps it."""
    cfg = DQNConfig(actors=1, precision="int8", calibration="gptq", publish_every=1,
                    checkpoint_every=2, updates_per_turn=1, run_dir=str(tmp_path))  # fmt: skip
    c = Counters()
    r, landed = _slow_publishing_run(cfg, c, tmp_path)
    try:
        loop._learn(cfg, r, batch={})  # update 1: a publish, still in flight
        threading.Timer(0.5, landed.set).start()
        loop._learn(cfg, r, batch={})  # update 2: its publish skipped, then a checkpoint
    finally:
        landed.set()
        r.publisher.close()
    assert c.updates == 2 and r.publisher.skipped == 1 and len(r.sent) == 2
    assert (tmp_path / "checkpoint" / ckpt.SNAPSHOT).read_bytes() == r.sent[-1]


def test_replay_sampling_and_the_in_process_actors_exploration_draw_apart(tmp_path: Path) -> None:
    cfg = DQNConfig(env="gym:CartPole-v1", actors=0, seed=3, run_dir=str(tmp_path))
    spec = env_spec(cfg.env)
    builder = builder_for(cfg)
    *_, rng, _ = loop._prepare_learner(cfg, builder, spec, None, tmp_path)  # the run's sampler
    setup = builder.actor_setup(cfg, spec)
    actor = VectorActor.from_config(setup.actor_config(0, in_process=True), _LocalCache())
    try:
        # one stream for both would tie which transitions are sampled to which actions explore
        explore = actor.behaviour.rng.random(64)  # type: ignore[attr-defined]
        assert not np.allclose(rng.random(64), explore)
    finally:
        actor.close()


def test_a_resume_past_its_budget_summarises_without_touching_its_checkpoint(
    tiny: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--resume RUN --total-steps`` below where RUN stands: nothing trains, so nothing of the
    checkpoint is rewritten (it was, with 0.2 ms more wall time), the summary keeps the
    checkpoint's clock, and the plan does not say that training on replaces the checkpoint."""
    kw = {**RUN, "total_steps": 1_000, "eval_every": 500, "eval_episodes": 1}
    first = actorq.train(tiny("dqn", **kw))
    run = Path(first.run_dir)
    assert (run / "best").is_dir()
    files = {p: p.read_bytes() for p in sorted((run / "checkpoint").rglob("*")) if p.is_file()}
    capsys.readouterr()
    again = actorq.train(tiny("dqn", **{**kw, "total_steps": 500}, resume=str(run), progress=True))
    out = capsys.readouterr()
    assert "nothing to train" in out.out + out.err
    assert "training on replaces" not in out.out + out.err
    assert {p: p.read_bytes() for p in files} == files
    assert again.wall_time_s == first.wall_time_s and again.env_steps == first.env_steps


def test_the_summary_says_where_the_best_evaluated_policy_is_kept(tiny: Callable[..., Any]) -> None:
    """The summary's returns are the final policy's; the best periodic evaluation's policy is
    kept in ``best/``, and the summary says so (``--which best`` loads it)."""
    r = actorq.train(tiny("dqn", **{**RUN, "total_steps": 1_000, "eval_every": 500,
                                     "eval_episodes": 1}))  # fmt: skip
    rows = dict(map(tuple, r.summary_rows))
    assert str(Path(r.run_dir) / "best") in rows["best policy kept"]
    assert "--which best" in rows["best policy kept"]
    saved = json.loads((Path(r.run_dir) / "summary.json").read_text())
    assert ["best policy kept", rows["best policy kept"]] in saved["summary_rows"]


def test_a_resume_past_its_budget_keeps_the_snapshot_its_summary_evaluated(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint saved without its weights' snapshot (interrupted while a publish was in
    flight): resumed past its budget, the summary evaluates one calibrated on the restored
    replay, which the checkpoint must then keep (else `actorq eval` makes another and scores a
    policy the summary never saw). One that keeps its snapshot is left untouched."""
    kw = {**RUN, "total_steps": 1_000, "eval_every": 10**9, "eval_episodes": 1}
    with monkeypatch.context() as m:
        m.setattr(Checkpointer, "_snapshot", lambda self, given: None)
        first = actorq.train(tiny("dqn", **kw))
    run = Path(first.run_dir)
    state = run / "checkpoint" / "state.json"
    assert json.loads(state.read_text()).get("snapshot") is None
    actorq.train(tiny("dqn", **{**kw, "total_steps": 100}, resume=str(run)))
    assert json.loads(state.read_text())["snapshot"]["file"] == ckpt.SNAPSHOT
    files = {p: p.read_bytes() for p in sorted((run / "checkpoint").rglob("*")) if p.is_file()}
    actorq.train(tiny("dqn", **{**kw, "total_steps": 100}, resume=str(run)))
    assert {p: p.read_bytes() for p in files} == files


def test_a_summary_without_states_to_compare_on_is_strict_json(tiny: Callable[..., Any]) -> None:
    """A run whose replay was not kept, resumed past its budget, has no replay states for the
    int8-vs-fp32 comparison: its agreement is not measured (null), not a NaN that makes
    summary.json invalid JSON for strict readers."""
    kw = {**RUN, "total_steps": 600, "eval_every": 10**9, "eval_episodes": 1, "save_replay": False}
    run = Path(actorq.train(tiny("dqn", **kw)).run_dir)
    again = actorq.train(tiny("dqn", **{**kw, "total_steps": 100}, resume=str(run)))
    assert again.eval_return is not None and again.action_agreement is None

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    saved = json.loads((run / "summary.json").read_text(), parse_constant=refuse)
    assert saved["action_agreement"] is None and saved["eval_return"] is not None
