"""What a resume takes from the invocation and what it keeps from the saved run
(:mod:`actorq.run.resume`), through the library and through ``actorq train --resume``."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from actorq import checkpoint as ckpt
from actorq.agents.dqn.config import DQNConfig
from actorq.agents.ppo.config import PPOConfig
from actorq.cli.train import parse_config
from actorq.config import ExperimentConfig
from actorq.errors import ConfigError
from actorq.run.resume import Counters, adopt_best, resolve_run, trim_metrics
from actorq.rundir import RunDir


def _saved(run: Path, cfg: ExperimentConfig) -> str:
    """A run directory holding ``cfg`` and a checkpoint (what a resume resolves against)."""
    cfg.run_dir = str(run)
    (run / "config.json").write_text(json.dumps(cfg.to_json()))
    (run / "checkpoint").mkdir()
    return str(run)


def test_the_library_resumes_with_the_configs_budget_and_display(tmp_path: Path) -> None:
    run = _saved(tmp_path, DQNConfig(total_steps=777, stop_at_target=False, progress=False))
    out = resolve_run(DQNConfig(resume=run, total_steps=900, log_every=1.0))
    assert (out.total_steps, out.log_every, out.stop_at_target, out.progress) == (
        900, 1.0, True, True
    )  # fmt: skip


def test_the_command_line_keeps_the_saved_budget_unless_its_flags_are_given(
    tmp_path: Path,
) -> None:
    run = _saved(tmp_path, DQNConfig(total_steps=777, stop_at_target=False))

    def resumed(*flags: str) -> DQNConfig:
        return resolve_run(parse_config(DQNConfig, ["--resume", run, *flags], "t"))

    kept = resumed()
    assert (kept.total_steps, kept.stop_at_target) == (777, False)
    # given, even at the class's default values: the command line says so
    given = resumed("--total-steps", "300000", "--stop-at-target")
    assert (given.total_steps, given.stop_at_target) == (300_000, True)
    assert resumed("--total_steps=900").total_steps == 900
    again = resolve_run(parse_config(DQNConfig, [f"--resume={run}", "--no-stop-at-target"], "t"))
    assert (again.total_steps, again.stop_at_target) == (777, False)


def test_an_option_given_on_a_resume_that_differs_from_the_run_is_refused_even_at_its_default(
    tmp_path: Path,
) -> None:
    run = _saved(tmp_path, DQNConfig(learning_rate=3e-4, n_step=5))
    with pytest.raises(ConfigError, match=r"--learning-rate 0.001 \(saved: 0.0003\)"):
        parse_config(DQNConfig, ["--resume", run, "--learning-rate", "0.001"], "t")  # default
    with pytest.raises(ConfigError, match=r"--no-double-q|--double-q False"):
        parse_config(DQNConfig, ["--resume", run, "--no-double-q"], "t")
    # the same values as the run's are no conflict
    ok = parse_config(DQNConfig, ["--resume", run, "--learning-rate", "3e-4", "--n-step=5"], "t")
    assert resolve_run(ok).learning_rate == 3e-4


def test_a_spec_run_resumes_from_python_with_the_preset_and_its_thread_count(
    tmp_path: Path,
) -> None:
    # the bench's Atari cells ran with --learner-threads 2; the preset says 0 (auto): threads
    # change how updates run, not what they compute, so a resume may take either
    run = _saved(tmp_path, PPOConfig.for_env("atari:Pong", learner_threads=2))
    assert resolve_run(PPOConfig.for_env("atari:Pong", resume=run)).learner_threads == 0
    assert resolve_run(PPOConfig(resume=run)).learner_threads == 1


def test_resume_none_is_a_new_run_with_the_preset() -> None:
    cfg = parse_config(PPOConfig, ["--env", "atari:Pong", "--resume", "None"], "t")
    assert cfg.resume is None and cfg.clip_coef == 0.1


def test_a_preset_run_resumes_from_the_command_line(tmp_path: Path) -> None:
    run = _saved(tmp_path, PPOConfig.for_env("atari:Pong", envs_per_actor=16, seed=4))
    for argv in (["--resume", run], ["--env", "atari:Pong", "--resume", run]):
        out = resolve_run(parse_config(PPOConfig, argv, "t"))
        assert (out.envs_per_actor, out.seed, out.total_steps, out.clip_coef) == (
            16, 4, 2_500_000, 0.1
        )  # fmt: skip
    # an option that differs from the saved run is refused, naming it: the env too
    for flags, named in (
        (["--clip-coef", "0.3"], r"--clip-coef 0.3 \(saved: 0.1\)"),
        (["--env", "atari:Breakout"], r"--env atari:Breakout"),
        (["--clip-coef", "0.2"], r"--clip-coef 0.2 \(saved: 0.1\)"),  # CartPole's default
    ):
        with pytest.raises(ConfigError, match=named):
            resolve_run(parse_config(PPOConfig, ["--resume", run, *flags], "t"))


def test_a_resume_of_a_broken_run_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from actorq.cli import main

    for name, text in (("deep", "[" * 100_000), ("digits", '{"total_steps": ' + "9" * 5000 + "}")):
        run = tmp_path / name
        run.mkdir()
        (run / "config.json").write_text(text)
        assert main(["train", "dqn", "--resume", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "corrupt config.json" in err, err
    assert main(["train", "dqn", "--resume", str(tmp_path / ("x" * 300))]) == 2
    assert "not an actorq run directory" in capsys.readouterr().err


def _best(run: Path, best_eval: Any, steps: Any) -> None:
    """A best policy kept at ``best_eval`` (a checkpoint, its manifest and all)."""
    state = {
        "learner": {},
        "rng": {},
        "counters": {"best_eval": best_eval, "best_eval_steps": steps},
    }
    ckpt.save(run / "best", {"w": torch.zeros(1)}, state)


def test_a_resume_keeps_a_better_best_kept_after_its_checkpoint(tmp_path: Path) -> None:
    """Killed after keeping a new best (225.7) but before the next checkpoint (which knew
    73.7): the resumed run counts 225.7, so a later 95 does not replace the better policy."""
    _best(tmp_path, 225.7, 2000)
    c = Counters(best_eval=73.7, best_eval_steps=400)
    adopt_best(c, RunDir(tmp_path))
    assert (c.best_eval, c.best_eval_steps) == (225.7, 2000)
    c = Counters(best_eval=300.0, best_eval_steps=3000)  # the checkpoint's is better: kept
    adopt_best(c, RunDir(tmp_path))
    assert (c.best_eval, c.best_eval_steps) == (300.0, 3000)
    # non-finite, past float's range, a bool, steps not a count: ignored, even by a run whose
    # checkpoint knew no best (any number would beat it)
    for record, steps in ((float("nan"), 9), (10**400, 9), (True, 9), (5, True)):
        _best(tmp_path, record, steps)
        for k in (Counters(best_eval=300.0, best_eval_steps=3000), Counters()):
            before = (k.best_eval, k.best_eval_steps)
            adopt_best(k, RunDir(tmp_path))
            assert (k.best_eval, k.best_eval_steps) == before, record
    adopt_best(c, RunDir(tmp_path / "none"))
    assert c.best_eval == 300.0


def test_a_resume_keeps_a_best_a_kill_left_in_best_old(tmp_path: Path) -> None:
    """Killed between a best's two renames, the policy is in best.old alone: the resumed run
    still counts it, so a worse one later does not replace it (that save deletes best.old)."""
    _best(tmp_path, 225.7, 2000)
    (tmp_path / "best").rename(tmp_path / "best.old")
    c = Counters(best_eval=73.7, best_eval_steps=400)
    adopt_best(c, RunDir(tmp_path))
    assert (c.best_eval, c.best_eval_steps) == (225.7, 2000)


def test_a_best_whose_state_does_not_match_its_manifest_is_not_adopted(tmp_path: Path) -> None:
    _best(tmp_path, 73.7, 400)
    state = json.loads((tmp_path / "best" / "state.json").read_text())
    state["counters"]["best_eval"] = 1e9  # altered behind the manifest
    (tmp_path / "best" / "state.json").write_text(json.dumps(state))
    c = Counters(best_eval=100.0, best_eval_steps=500)
    adopt_best(c, RunDir(tmp_path))
    assert (c.best_eval, c.best_eval_steps) == (100.0, 500)


def test_a_resume_drops_the_metrics_its_checkpoint_had_not_seen(tmp_path: Path) -> None:
    """A dead segment's rows (past the checkpoint's step, or logged after it was saved) would
    put an evaluation the resumed run never made into its curve and time to target."""
    rows = [
        "step,wall_time,metric,value",
        "1000,100.000,charts/eval_return,10",
        "2000,200.000,perf/actor_sps,900",  # at the checkpoint's step, before its save: kept
        "2000,200.700,charts/eval_return,225.7",  # at its step, logged after the save
        "3000,300.000,charts/eval_return,95",  # past its step
        "x,y,odd,row",  # not parsed: kept as it is
    ]
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    trim_metrics(RunDir(tmp_path), 2000, 200.5)
    kept = (tmp_path / "metrics.csv").read_text().splitlines()
    assert kept == [*rows[:3], rows[5]]
    trim_metrics(RunDir(tmp_path), 1000, None)  # a checkpoint from before saved_at: steps only
    assert (tmp_path / "metrics.csv").read_text().splitlines() == [*rows[:2], rows[5]]
    trim_metrics(RunDir(tmp_path / "none"), 0, None)  # no metrics.csv: nothing to do
    assert not list(tmp_path.glob("*.tmp"))


def test_an_evaluation_due_at_the_checkpoint_is_run_again_on_resume() -> None:
    """The periodic checkpoint is saved inside the learner's turn, before that turn's due
    evaluation: killed after evaluating, the resume drops the evaluation's rows (its checkpoint
    had not seen them) and must run it again, not skip to the next multiple of eval_every."""
    from actorq.run.monitor import Evaluator

    cfg = DQNConfig(eval_every=400)
    c = Counters(env_steps=2000, next_eval=2000)  # saved while the evaluation at 2000 was due
    ev = Evaluator(cfg, None, None, None, print, c.env_steps, 0.0, c.next_eval)  # type: ignore[arg-type]
    assert ev.due(2000)
    old = Evaluator(cfg, None, None, None, print, 2000)  # type: ignore[arg-type]
    assert old.next == 2400  # a checkpoint from before next_eval: as before
    assert Counters.from_json(c.to_json()).next_eval == 2000
    assert Counters.from_json({"env_steps": 5}).next_eval is None


def test_trimming_keeps_earlier_steps_whatever_their_clock(tmp_path: Path) -> None:
    """A segment that ran on a node whose clock was ahead logged wall times past a later
    checkpoint's save: rows at earlier steps are the checkpoint's history and stay."""
    rows = [
        "step,wall_time,metric,value",
        "1000,900.000,charts/eval_return,10",  # earlier step, a clock ahead of the save's
        "2000,150.000,perf/actor_sps,900",
        "2000,250.000,charts/eval_return,50",  # at the checkpoint's step, after its save
    ]
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    trim_metrics(RunDir(tmp_path), 2000, 200.0)
    assert (tmp_path / "metrics.csv").read_text().splitlines() == rows[:3]


def test_tensorboard_hides_what_a_killed_segment_logged_past_the_checkpoint(
    tmp_path: Path,
) -> None:
    # a run killed after its checkpoint at step 20 had logged 30 and 40; the resumed run logs
    # 30 and 40 again: metrics.csv drops the dead rows (trim_metrics), TensorBoard's events
    # from step 21 on are purged, so each step has one point (before: 30 and 40 twice)
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from actorq.logging import MetricLogger

    dead = MetricLogger(tmp_path)
    for step in (10, 20, 30, 40):
        dead.log(step, {"charts/x": float(step)})
    dead.close()
    time.sleep(1.1)  # event files are named by the second they open in: a resume comes later
    resumed = MetricLogger(tmp_path, purge_step=21)
    for step in (30, 40):
        resumed.log(step, {"charts/x": step + 0.5})
    resumed.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    got = [(e.step, e.value) for e in acc.Scalars("charts/x")]
    assert got == [(10, 10.0), (20, 20.0), (30, 30.5), (40, 40.5)]


def _moved(run: Path, *flags: str) -> int:
    """``actorq train dqn --resume RUN FLAGS``, quiet."""
    from actorq.cli import main

    return main(["train", "dqn", "--resume", str(run), "--no-progress", "--no-energy", *flags])


def test_a_run_moves_from_in_process_to_local_actors_and_back_keeping_replay_and_counters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--actors 0`` (the in-process backend) -> ``--actors 2`` (local processes) -> ``--actors
    0`` again: each resume restores the checkpoint's replay item for item in its age order,
    its insert count and the rate limiter's very place (not rounded to a whole insert), goes on
    from its counters to its budget, and config.json records where the run went."""
    from actorq import train
    from tests.run.restored import assert_same_items, placement, saved, watch

    run = tmp_path / "run"
    first = train(DQNConfig(actors=0, hidden=(32, 32), envs_per_actor=4, total_steps=1_200,
                            min_replay_size=400, samples_per_insert=3.0, stop_at_target=False,
                            eval_every=10**9, eval_episodes=1, progress=False, energy=False,
                            log_every=1e9, run_dir=str(run)))  # fmt: skip
    for actors, total, backend in (("2", 2_400, "LocalBackend"), ("0", 3_200, "SyncBackend")):
        items, inserts, lead, counters = saved(run)
        seen = watch(monkeypatch)
        assert _moved(run, "--actors", actors, "--total-steps", str(total)) == 0
        assert_same_items(seen["items"], items)
        assert seen["inserts"] == inserts and seen["lead"] == seen["held"] == lead
        assert placement(run) == ("local", int(actors))
        state = json.loads((run / "checkpoint" / "state.json").read_text())["counters"]
        assert state["env_steps"] >= total and state["updates"] > counters["updates"]
        assert json.loads((run / "summary.json").read_text())["stop"] == "budget"
        assert seen["backend"] == backend
    assert first.updates < state["updates"]


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_a_move_the_resume_cannot_make_is_one_line_and_writes_nothing(
    tiny: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ray without actor processes (an in-process run moved with ``--backend ray`` alone), a
    Ray setting for a run that stays local (from Python too: the command line refuses it as it
    parses), another actor count for an on-policy run (its updates train on ``actors ×
    envs_per_actor`` rollouts): one line, exit 2, the run directory as it was."""
    from actorq import train
    from actorq.cli import main

    quiet = {"stop_at_target": False, "eval_every": 10**9, "eval_episodes": 1}
    dqn = Path(train(tiny("dqn", "dqn", total_steps=300, min_replay_size=100, **quiet)).run_dir)
    ppo = Path(train(tiny("ppo", "ppo", total_steps=600, **quiet)).run_dir)
    before = {run: _files(run) for run in (dqn, ppo)}
    capsys.readouterr()
    for agent, run, flags, why in (
        ("dqn", dqn, ["--backend", "ray"], "--backend ray needs --actors >= 1"),
        ("dqn", dqn, ["--replay-shards", "4"], "--replay-shards is a setting of --backend ray"),
        ("ppo", ppo, ["--actors", "2"], r"--actors 2 \(saved: 0\)"),
    ):
        assert main(["train", agent, "--resume", str(run), "--no-progress", *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("actorq: error: "), err
        assert re.search(why, err), err
    with pytest.raises(ConfigError, match="--replay-shards is a setting of --backend ray, and "
                       "this run's backend is local"):  # fmt: skip
        train(DQNConfig(resume=str(dqn), replay_shards=4, progress=False))
    assert {run: _files(run) for run in (dqn, ppo)} == before


def test_the_command_line_moves_a_run_with_the_flags_it_gives_even_at_their_defaults(
    tmp_path: Path,
) -> None:
    """``--backend local`` takes a Ray run home although it is the default (the library cannot
    tell it from one left out, so ``DQNConfig(resume=..., backend="local")`` keeps the run's
    backend); a Ray run's own settings need no ``--backend ray``; what is not given stays the
    run's."""
    from actorq.cli.train import given_settings

    (tmp_path / "ray").mkdir()
    (tmp_path / "local").mkdir()
    ray_run = _saved(tmp_path / "ray", DQNConfig(backend="ray", actors=4, replay_shards=4))
    local_run = _saved(tmp_path / "local", DQNConfig(actors=0))

    def where(run: str, *flags: str) -> tuple[str, int, int]:
        argv = ["--resume", run, *flags]
        cfg = parse_config(DQNConfig, argv, "t")
        out = resolve_run(cfg, given_settings(cfg, argv) if flags else None)
        assert isinstance(out, DQNConfig)
        return out.backend, out.actors, out.ray.replay_shards

    assert where(ray_run, "--backend", "local") == ("local", 4, 4)
    assert where(ray_run, "--replay-shards", "2") == ("ray", 4, 2)
    assert where(ray_run, "--actors", "2") == ("ray", 2, 4)
    assert where(ray_run) == ("ray", 4, 4)  # the library's DQNConfig(resume=...) too
    assert where(local_run, "--backend", "ray", "--actors", "2") == ("ray", 2, 2)
    assert where(local_run, "--actors", "3") == ("local", 3, 2)


def test_a_resume_that_raises_the_budget_keeps_it_for_the_next_resume(tmp_path: Path) -> None:
    """A run resumed with a larger ``--total-steps`` and stopped again (Ctrl-C) prints "Resume
    with: actorq train dqn --resume RUN": that resume goes on to the raised budget, not back
    to the first one (which it would be past, summarising as if finished)."""
    from actorq import train

    run = tmp_path / "run"
    quiet = {"progress": False, "energy": False, "log_every": 1e9, "eval_every": 10**9}
    train(DQNConfig(actors=0, hidden=(32, 32), total_steps=600, min_replay_size=200,
                    eval_episodes=1, stop_at_target=False, run_dir=str(run), **quiet))  # fmt: skip
    train(DQNConfig(resume=str(run), total_steps=1_200, stop_at_target=False, **quiet))
    saved = json.loads((run / "config.json").read_text())
    assert (saved["total_steps"], saved["stop_at_target"], saved["hidden"]) == (
        1_200,
        False,
        [32, 32],
    )
    again = resolve_run(parse_config(DQNConfig, ["--resume", str(run)], "t"))
    assert (again.total_steps, again.stop_at_target) == (1_200, False)


def test_device_cpu_on_the_command_line_takes_a_gpu_run_to_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine with a GPU a run trained there resumes there, unless the command line says
    ``--device cpu`` (the default's value, so the library alone cannot tell it was given)."""
    import actorq.run.resume as resume
    from actorq.cli.train import given_settings

    monkeypatch.setattr(resume, "device_problem", lambda device: None)  # as if CUDA were here
    run = _saved(tmp_path, DQNConfig(actors=0))
    (tmp_path / "config.json").write_text(
        json.dumps({**json.loads((tmp_path / "config.json").read_text()), "device": "cuda"})
    )

    def device(*flags: str) -> str:
        argv = ["--resume", run, *flags]
        cfg = parse_config(DQNConfig, argv, "t")
        monkeypatch.setattr(type(cfg), "validate", lambda self: None)  # no CUDA to check
        return resolve_run(cfg, given_settings(cfg, argv)).device

    assert device() == "cuda"
    assert device("--device", "cpu") == "cpu"


def test_a_resume_that_moves_nothing_leaves_an_older_config_json_as_it_was(
    tmp_path: Path,
) -> None:
    """An older config.json says ``"ray_address": ""`` for no address (read as None): a resume
    that moves nothing neither reports a move nor rewrites the file."""
    from actorq.run.resume import record_move

    run = _saved(tmp_path, DQNConfig(actors=0))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "ray_address": ""}))
    before = path.read_bytes()
    cfg = resolve_run(parse_config(DQNConfig, ["--resume", run], "t"))
    assert record_move(cfg, RunDir(tmp_path)) is None
    assert path.read_bytes() == before
