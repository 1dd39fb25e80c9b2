"""The learner loop's pieces, each without a long training run."""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actorq import DQNConfig, PPOConfig, train
from actorq.agents import AGENTS, builder_for, config_class
from actorq.distributed.backend import BACKENDS, BackendContext, backend_name, make_backend
from actorq.envs import env_spec
from actorq.errors import ConfigError
from actorq.experiment import (
    Counters,
    Evaluator,
    Publisher,
    open_run_dir,
    registered_threshold,
    resolve_config,
)
from actorq.logging import CONFIRM_METRIC, MetricLogger, read_metrics
from actorq.rundir import RunDir


def test_train_does_not_change_the_callers_config(tiny: Callable[..., Any]) -> None:
    cfg = tiny("dqn", total_steps=1_500, min_replay_size=500, stop_at_target=False)
    before = copy.deepcopy(cfg)
    train(cfg)
    assert cfg == before
    resolved, loaded = resolve_config(cfg)
    assert resolved is not cfg and resolved == cfg and loaded is None


def test_resolve_config_validates(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        resolve_config(DQNConfig(batch_size=0))
    with pytest.raises(ConfigError, match="already holds a run"):
        (tmp_path / "checkpoint").mkdir()
        open_run_dir(DQNConfig(run_dir=str(tmp_path)))


@pytest.mark.parametrize(
    ("left", "needle"),
    [
        ({"best/state.json": "{}"}, "holds a best policy (best/)"),
        ({"metrics.csv": "step,wall_time,metric,value\n1,2,charts/eval_return,3\n"},
         "holds a run's metrics.csv"),
        ({"summary.json": "{}"}, "holds a finished run's summary.json"),
    ],
)  # fmt: skip
def test_a_new_run_never_writes_over_a_killed_runs_output(
    tmp_path: Path, left: dict[str, str], needle: str
) -> None:
    """A run killed before its first checkpoint left its best policy and metrics: a new run
    into that directory is refused (it would replace best/ and append its curve to the old
    one's), not only one into a directory holding a checkpoint."""
    config = json.dumps(DQNConfig(run_dir=str(tmp_path)).to_json())  # what a run writes first
    for name, text in {"config.json": config, **left}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=r"^[^\n]*$") as e:
        train(DQNConfig(run_dir=str(tmp_path), total_steps=500, progress=False))
    assert needle in str(e.value) and "no checkpoint to resume from" in str(e.value)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    # a header alone (a run that logged nothing) or a config.json is no run to keep
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "metrics.csv").write_text("step,wall_time,metric,value\n")
    assert RunDir(tmp_path / "other").held_output() is None


def test_counters_round_trip_and_read_old_checkpoints() -> None:
    c = Counters(env_steps=5, updates=3, last_eval=1.5, steps_to_target=4)
    assert Counters.from_json(c.to_json()) == c
    old = {"env_steps": 7, "updates": 2, "publishes": 1, "version": 1, "episodes": 0,
           "wall_time_s": 1.0, "time_to_target_s": None, "steps_to_target": None,
           "last_eval": None}  # fmt: skip
    assert Counters.from_json(old).updates_at_publish == 0


def test_one_registry_names_every_agent() -> None:
    import actorq
    from actorq.cli.main import USAGE

    for name in AGENTS:
        cls = config_class(name)
        assert cls.agent == name and getattr(actorq, cls.__name__) is cls
        assert f"actorq train {name}" in USAGE
        builder = builder_for(cls())
        for method in ("data_specs", "table_config", "actor_setup", "policy_spec"):
            assert callable(getattr(builder, method))


def test_backend_registry() -> None:
    assert backend_name(DQNConfig(actors=0)) == "sync"
    assert backend_name(DQNConfig(actors=2)) == "local"
    assert backend_name(DQNConfig(actors=2, backend="ray")) == "ray"
    assert set(BACKENDS) == {"sync", "local", "ray"}


def test_evaluator_schedule_and_confirmation(tmp_path: Path) -> None:
    cfg = PPOConfig(eval_every=1_000, eval_episodes=2)
    said: list[str] = []
    logger = MetricLogger(tmp_path)
    spec = env_spec(cfg.env)
    builder = builder_for(cfg)
    io = builder.policy_io(cfg, spec, builder.make_learner(cfg, spec))
    ev = Evaluator(cfg, io, 10.0, logger, said.append, env_steps=2_500)
    assert not ev.due(2_999) and ev.due(3_000)
    snap = io.snapshot(1, "int8")
    c = Counters(env_steps=3_000)
    assert ev.run(snap, c, 1.0)  # a random CartPole policy scores > 10: target, confirmed
    assert c.steps_to_target == 3_000 and ev.next == 4_000 and ev.seconds > 0
    assert not ev.run(snap, c, 2.0)  # reached once
    logger.close()
    assert any("confirmation" in s for s in said)
    # the confirmation is logged, once (a report reads a running run's time to target from it)
    confirmed = [(s, v) for s, v in read_metrics(tmp_path)[CONFIRM_METRIC]]
    assert len(confirmed) == 1 and confirmed[0][0] == 3_000 and confirmed[0][1] >= 10.0
    # each evaluation's time on the run's clock, beside its return (the report's curves)
    rows = [r.split(",") for r in (tmp_path / "metrics.csv").read_text().splitlines()[1:]]
    assert [float(v) for _, _, m, v in rows if m == "perf/run_s"] == [1.0, 2.0]


def test_publisher_versions_and_evaluation_publish(tmp_path: Path) -> None:
    cfg = dataclasses.replace(PPOConfig(), run_dir=str(tmp_path))
    spec = env_spec(cfg.env)
    builder = builder_for(cfg)
    learner = builder.make_learner(cfg, spec)
    pub = Publisher(cfg, builder.policy_io(cfg, spec, learner))
    ctx = BackendContext(
        cfg=dataclasses.replace(cfg, actors=0),
        setup=builder.actor_setup(cfg, spec),
        specs=builder.data_specs(cfg, spec),
        table_config=builder.table_config(cfg, spec),
        snapshot_capacity=1 << 20,
        run_dir=tmp_path,
        rng=np.random.default_rng(0),
    )
    backend = make_backend(ctx)
    try:
        pub.backend, pub.replay = backend, backend.replay
        c = Counters()
        pub.publish(c, pub.snapshot(0))
        assert (c.version, c.publishes) == (0, 0) and pub.latest
        c.updates = 1
        pub.publish(c)
        assert (c.version, c.publishes, c.updates_at_publish) == (1, 1, 1)
    finally:
        backend.close()


class _SlowSink:
    """A backend stand-in whose publish waits for ``gate`` and records what it was sent."""

    def __init__(self) -> None:
        import threading

        self.gate = threading.Event()
        self.sent: list[tuple[int, bytes]] = []

    def publish(self, version: int, data: bytes) -> None:
        assert self.gate.wait(30)
        self.sent.append((version, data))


def _async_publisher(tmp_path: Path) -> tuple[Publisher, Any, _SlowSink]:
    cfg = dataclasses.replace(DQNConfig(actors=1), run_dir=str(tmp_path))
    spec = env_spec(cfg.env)
    builder = builder_for(cfg)
    learner = builder.make_learner(cfg, spec)
    pub = Publisher(cfg, builder.policy_io(cfg, spec, learner), asynchronous=True)
    sink = _SlowSink()
    pub.backend = sink  # type: ignore[assignment]
    return pub, learner, sink


def test_async_publish_sends_the_weights_of_its_call_and_skips_while_busy(
    tmp_path: Path,
) -> None:
    from actorq.quant.snapshot import PolicySnapshot

    pub, learner, sink = _async_publisher(tmp_path)
    assert pub.asynchronous
    try:
        want = PolicySnapshot.from_bytes(pub.snapshot(1)).tensors
        c = Counters(updates=10)
        pub.publish(c)  # returns at once: the sink is still closed
        assert (c.version, c.publishes, c.updates_at_publish) == (1, 1, 10) and not sink.sent
        with torch.no_grad():  # the learner goes on changing its weights in place
            for p in learner.q.parameters():
                p.add_(1.0)
        c.updates = 20
        pub.publish(c)  # one in flight: skipped, not waited for
        assert (c.version, c.publishes, pub.skipped) == (1, 1, 1)
        sink.gate.set()
        pub.settle()
        [(version, data)] = sink.sent
        got = PolicySnapshot.from_bytes(data).tensors
        assert version == 1 and pub.latest == data
        for k, v in want.items():  # the weights as they were at the call
            np.testing.assert_array_equal(got[k], v)
        pub.publish(c)  # nothing in flight: version 2, with the changed weights
        pub.settle()
        assert sink.sent[-1][0] == 2 and sink.sent[-1][1] != data
        assert len(pub.blocked) == 2 and len(pub.times) == 2
        pub.publish(c, in_line=True)  # what an evaluation asks: sent before it returns
        assert sink.sent[-1][0] == 3 and pub.latest == sink.sent[-1][1]
    finally:
        sink.gate.set()
        pub.close()


def test_async_publish_of_non_finite_weights_raises_on_the_learners_thread(
    tmp_path: Path,
) -> None:
    from actorq.errors import DivergedError

    pub, learner, sink = _async_publisher(tmp_path)
    sink.gate.set()
    try:
        with torch.no_grad():
            next(learner.q.parameters()).view(-1)[0] = float("nan")
        c = Counters(updates=1)
        pub.publish(c)
        with pytest.raises(DivergedError, match="NaN"):
            pub.settle()
        assert not sink.sent  # nothing reached the actors
    finally:
        pub.close()


def test_runs_with_actor_processes_publish_in_the_background(tiny: Callable[..., Any]) -> None:
    kw = dict(actors=1, total_steps=1_500, min_replay_size=500, publish_every=5,
              stop_at_target=False, eval_every=10**6)  # fmt: skip
    r = train(tiny("dqn", hidden=(256, 256), **kw))
    assert r.publishes >= 10 and r.publish_blocked_ms is not None
    assert r.publish_blocked_ms < r.publish_ms  # a copy, not quantize + encode + send
    s = train(tiny("dqn", "inline", hidden=(256, 256), publish_async=False, **kw))
    assert s.publish_blocked_ms == pytest.approx(s.publish_ms) and s.publishes_skipped == 0


def test_registered_threshold() -> None:
    assert registered_threshold("gym:CartPole-v1") == 475
    assert registered_threshold("dmc:walker-walk") is None


# -- nothing lost, nothing silently wrong ----------------------------------------------------
def _csv_steps(run_dir: Path) -> list[int]:
    return [int(x.split(",")[0]) for x in (run_dir / "metrics.csv").read_text().splitlines()[1:]]


def test_resume_of_an_in_process_run_continues_its_step_counter(
    tiny: Callable[..., Any], tmp_path: Path
) -> None:
    kw = dict(min_replay_size=500, eval_every=1_000, stop_at_target=False)
    first = train(tiny("dqn", total_steps=4_000, **kw))
    time.sleep(1.5)  # a stop between the segments: on the machine's clock, not on the run's
    second = train(DQNConfig(resume=first.run_dir, total_steps=5_000, progress=False))
    # ~1,000 new steps, not 5,000 from zero; the log never goes back in steps
    assert 5_000 <= second.env_steps < 5_000 + 100
    state = json.loads((Path(first.run_dir) / "checkpoint/state.json").read_text())
    assert state["counters"]["env_steps"] == second.env_steps
    steps = _csv_steps(Path(first.run_dir))
    assert steps == sorted(steps)
    rows = [r.split(",") for r in (Path(first.run_dir) / "metrics.csv").read_text().splitlines()]
    evals = [(float(w), float(v)) for _, w, m, v in rows[1:] if m == "perf/run_s"]
    assert len(evals) >= 4 and [v for _, v in evals] == sorted(v for _, v in evals)
    assert evals[-1][1] <= second.wall_time_s
    # the machine's clock ran on through the stop; the run's did not
    assert (evals[-1][0] - evals[0][0]) - (evals[-1][1] - evals[0][1]) >= 1.4


def test_a_diverging_resume_keeps_the_last_good_checkpoint(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from actorq.agents.dqn.learning import DQNLearner
    from actorq.errors import DivergedError

    first = train(tiny("dqn", total_steps=2_000, min_replay_size=500, stop_at_target=False))
    ckpt = Path(first.run_dir) / "checkpoint"
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    learn = DQNLearner.learn

    def poisoned(self: DQNLearner, batch: Any) -> None:
        learn(self, batch)
        if self.updates > 3:
            with torch.no_grad():
                for p in self.q.parameters():
                    p.fill_(float("nan"))

    monkeypatch.setattr(DQNLearner, "learn", poisoned)
    # caught by the next publish (non-finite weights) or metric read, whichever comes first
    with pytest.raises(DivergedError, match=r"(diverged by update|NaN).* last finite checkpoint"):
        train(DQNConfig(resume=first.run_dir, total_steps=4_000, progress=False, energy=False))
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before


def test_a_crash_mid_run_writes_no_checkpoint(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from actorq.agents.ppo.learning import PPOLearner

    def boom(self: PPOLearner, batch: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(PPOLearner, "learn", boom)
    cfg = tiny("ppo", total_steps=2_000)
    with pytest.raises(RuntimeError, match="a bug"):
        train(cfg)
    assert not (Path(cfg.run_dir) / "checkpoint").exists()


def test_periodic_checkpoints_keep_wall_time(tiny: Callable[..., Any]) -> None:
    r = train(tiny("ppo", total_steps=3_000, checkpoint_every=2, stop_at_target=False))
    state = json.loads((Path(r.run_dir) / "checkpoint/state.json").read_text())
    assert 0 < state["counters"]["wall_time_s"] <= r.wall_time_s + 1e-6


def test_resume_refuses_options_it_would_ignore(tiny: Callable[..., Any]) -> None:
    first = train(tiny("ppo", total_steps=600, stop_at_target=False))
    with pytest.raises(ConfigError, match=r"--learning-rate 0.1 \(saved: 0.00025\)"):
        train(PPOConfig(resume=first.run_dir, learning_rate=0.1, progress=False))
    with pytest.raises(ConfigError, match="is a ppo run"):
        train(DQNConfig(resume=first.run_dir, progress=False))
    # --run-dir elsewhere would be ignored while the run advanced in place (issue 49, item 4)
    before = {p.name: p.read_bytes() for p in (Path(first.run_dir) / "checkpoint").iterdir()}
    other = Path(first.run_dir).parent / "elsewhere"
    with pytest.raises(ConfigError, match="continues in that directory"):
        train(PPOConfig(resume=first.run_dir, run_dir=str(other), progress=False))
    assert not other.exists()
    after = {p.name: p.read_bytes() for p in (Path(first.run_dir) / "checkpoint").iterdir()}
    assert after == before
    # the same directory, spelled the same or not, is fine
    r = train(PPOConfig(resume=first.run_dir, run_dir=first.run_dir + "/", total_steps=700,
                        progress=False, energy=False))  # fmt: skip
    assert r.run_dir == first.run_dir


def test_a_resume_reads_the_runs_config_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actorq.run.resume import resolve_run
    from actorq.rundir import RunDir

    (tmp_path / "config.json").write_text(json.dumps(DQNConfig(run_dir=str(tmp_path)).to_json()))
    (tmp_path / "checkpoint").mkdir()
    reads: list[Path] = []
    read = RunDir.read_config_json

    def counted(self: RunDir) -> dict[str, Any]:
        reads.append(self.path)
        return read(self)

    monkeypatch.setattr(RunDir, "read_config_json", counted)
    cfg = resolve_run(DQNConfig(resume=str(tmp_path), total_steps=123))
    assert cfg.total_steps == 123 and cfg.run_dir == str(tmp_path) and reads == [tmp_path]


def test_run_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        open_run_dir(DQNConfig(run_dir=str(f)))
    assert f.read_text() == "x"


def test_a_learner_diverging_before_its_first_checkpoint_says_none_was_written(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from actorq.agents.ppo.learning import PPOLearner
    from actorq.errors import DivergedError

    read = PPOLearner.read_metrics

    def poisoned(self: PPOLearner) -> dict[str, float]:
        out = read(self)
        out["losses/policy_loss"] = float("nan")
        return out

    monkeypatch.setattr(PPOLearner, "read_metrics", poisoned)
    cfg = tiny("ppo", total_steps=2_000)
    with pytest.raises(DivergedError, match="steps before its first checkpoint, so none was"):
        train(cfg)
    assert not (Path(cfg.run_dir) / "checkpoint").exists()


def test_updates_in_a_row_change_nothing_a_synchronous_run_computes(
    tiny: Callable[..., Any],
) -> None:
    """--actors 0: K updates per loop turn (while the replay rule allows them) take the batches
    the next turns would have taken, so the learner ends bit for bit where K=1 leaves it."""
    from safetensors.numpy import load_file

    kw: dict[str, Any] = dict(total_steps=1_500, min_replay_size=100, eval_every=10**9,
                              stop_at_target=False, samples_per_insert=8.0)  # fmt: skip
    one = train(tiny("dqn", sub="k1", updates_per_turn=1, **kw))
    eight = train(tiny("dqn", sub="k8", updates_per_turn=8, **kw))
    assert one.updates == eight.updates > 0
    ta = load_file(str(Path(one.run_dir) / "checkpoint" / "learner.safetensors"))
    tb = load_file(str(Path(eight.run_dir) / "checkpoint" / "learner.safetensors"))
    for k in ta:
        np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)


def test_train_of_something_that_is_not_a_config_is_one_line() -> None:
    """`actorq.train({"env": ...})` (issue 49 item 14): one ConfigError line, not an
    AttributeError from deep inside."""
    with pytest.raises(ConfigError, match=r"takes an agent's config .* not a dict") as e:
        train({"env": "gym:CartPole-v1"})  # type: ignore[arg-type]
    assert "\n" not in str(e.value)
