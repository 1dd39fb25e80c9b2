"""DQN behaviour: learns CartPole, is deterministic for a seed, resumes, rejects bad input."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from actorq import DQNConfig, train
from actorq.errors import CheckpointError, ConfigError


def small(tmp: Path, **kw) -> DQNConfig:  # type: ignore[no-untyped-def]
    base = dict(actors=0, envs_per_actor=8, progress=False, log_every=1e9, run_dir=str(tmp))
    base.update(kw)
    return DQNConfig(**base)  # type: ignore[arg-type]


def test_learns_cartpole_to_threshold(tmp_path: Path) -> None:
    # the synchronous single-actor mode: same learner, replay, limiter and snapshots
    # target: CartPole-v1's registered threshold, 475, confirmed on fresh seeds
    r = train(small(tmp_path, envs_per_actor=16, total_steps=120_000, eval_every=5_000))
    assert r.target_return == 475 and r.reached_target, r
    assert r.eval_return >= 400  # held-out seeds, same weights
    assert r.action_agreement >= 0.98  # near-tied actions flip; docs/results.md
    assert r.snapshot_bytes < 0.3 * r.fp32_snapshot_bytes


def test_same_seed_same_result(tmp_path: Path) -> None:
    kw = dict(total_steps=2_000, min_replay_size=500, eval_every=1_000, stop_at_target=False)
    a = train(small(tmp_path / "a", seed=3, **kw))
    b = train(small(tmp_path / "b", seed=3, **kw))
    train(small(tmp_path / "c", seed=4, **kw))
    wa = load_file(str(tmp_path / "a/checkpoint/learner.safetensors"))
    wb = load_file(str(tmp_path / "b/checkpoint/learner.safetensors"))
    wc = load_file(str(tmp_path / "c/checkpoint/learner.safetensors"))
    assert a.updates == b.updates > 0
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k])
    assert any(not np.array_equal(wa[k], wc[k]) for k in wa)


def test_resume_continues_counters_and_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kw = dict(min_replay_size=500, eval_every=1_000, stop_at_target=False)
    first = train(small(tmp_path, total_steps=2_000, **kw))
    state = json.loads((tmp_path / "checkpoint/state.json").read_text())
    assert state["counters"]["env_steps"] == first.env_steps >= 2_000
    # the library's resume takes the caller's stop rule: this run reaches its target (475) by
    # 1,000 steps, and with --stop-at-target a resume of it would train nothing
    again = dict(resume=str(tmp_path), progress=False, stop_at_target=False)
    second = train(DQNConfig(total_steps=4_000, log_every=1e9, **again))  # type: ignore[arg-type]
    assert second.env_steps >= 4_000
    assert second.updates > first.updates
    evals = [
        int(line.split(",")[0])
        for line in (tmp_path / "metrics.csv").read_text().splitlines()
        if ",charts/eval_return," in line
    ]
    assert evals == sorted(evals) and evals[-1] >= 4_000 and min(evals) <= 2_000
    # a budget the run is already past trains nothing, and says so
    capsys.readouterr()
    third = train(DQNConfig(total_steps=3_000, **again))  # type: ignore[arg-type]
    assert (third.env_steps, third.updates) == (second.env_steps, second.updates)
    out = capsys.readouterr().out
    assert "is already at" in out and "nothing to train" in out  # past its budget


def test_a_resumed_replay_keeps_the_rate_limiters_place_so_learning_goes_on_as_unbroken(
    tmp_path: Path,
) -> None:
    """The restored replay (1,500 items, min_replay_size 1,000) counts as the inserts the
    checkpoint's rate limiter stood at: the resumed learner keeps samples-per-insert's pace from
    its first step, as an unbroken run does, instead of waiting for 1,000 new inserts
    (10M-frame Atari DQN: 100k steps unlearned on every resume) or starting at the rule's
    centre (the error buffer's worth of samples off: here 19 updates more than unbroken; the
    Atari DQN's actors 10k steps ahead of its learner after every resume)."""
    kw = dict(min_replay_size=1_000, samples_per_insert=8.0, batch_size=32, stop_at_target=False)
    kw.update(eval_every=10**6, eval_episodes=1)
    whole = train(small(tmp_path / "whole", total_steps=3_000, **kw))
    first = train(small(tmp_path / "split", total_steps=1_500, **kw))
    second = train(DQNConfig(resume=str(tmp_path / "split"), total_steps=3_000, progress=False,
                             log_every=1e9))  # fmt: skip
    resumed = second.updates - first.updates
    unbroken = whole.updates - first.updates  # the same seed: the same first 1,500 steps
    # what stays apart: the n-step adder's pending transitions, dropped with the stop (a few
    # inserts per env), and the resumed envs' fresh episodes
    assert unbroken > 200 and abs(resumed - unbroken) <= 8, (resumed, unbroken)
    # no interval was logged: the episodes counted are the run's end's (CartPole: ≤ 500 steps)
    counters = json.loads((tmp_path / "split" / "checkpoint" / "state.json").read_text())
    assert counters["counters"]["episodes"] >= 3_000 // 500


@pytest.mark.parametrize(
    ("key", "value"),
    [("replay_lead", v) for v in ("1e400", "NaN", "true", '"8000"', "[1]", "-1e300")]
    + [("actor_restarts", v) for v in ('"abc"', "null", "-5", "1.5", "true", "1e30")]
    + [("publishes_skipped", "[1]"), ("rejected_snapshots", str(2**63))]
    + [("totals", v) for v in ("[1]", '{"publish_s": -1}', '{"publish_n": NaN}')],
)
def test_a_bad_counter_in_a_resealed_checkpoint_is_one_line(
    tmp_path: Path, key: str, value: str
) -> None:
    # replay_lead is a rate limiter's position, the totals are added to: a bad one crashed the
    # resumed run at its end with a traceback, before its final checkpoint (a review's repro)
    import hashlib

    train(small(tmp_path, total_steps=600, min_replay_size=300, stop_at_target=False))
    d = tmp_path / "checkpoint"
    state = (d / "state.json").read_text()
    assert f'"{key}": ' in state
    state = state.replace(f'"{key}": ', f'"{key}": {value}, "was": ', 1)
    (d / "state.json").write_text(state)
    sums = json.loads((d / "manifest.json").read_text())
    sums["state.json"] = hashlib.sha256(state.encode()).hexdigest()
    (d / "manifest.json").write_text(json.dumps(sums))
    metrics = (tmp_path / "metrics.csv").read_bytes()
    with pytest.raises(CheckpointError, match=rf"^checkpoint counters hold a bad {key}") as e:
        train(DQNConfig(resume=str(tmp_path), total_steps=900, progress=False))
    assert "\n" not in str(e.value) and (tmp_path / "metrics.csv").read_bytes() == metrics


def test_a_random_warmup_fills_the_first_replay_with_uniform_actions(tmp_path: Path) -> None:
    """Before the learner's first publish, greedy actors (epsilon 0) on seed 1's untrained
    network push CartPole one way on every step; with ``random_warmup`` each step is a
    uniform action, as SB3's and CleanRL's DQN start (the replay of runs that never learn)."""
    share = {}
    for warm in (False, True):
        run = tmp_path / str(warm)
        train(small(run, total_steps=800, min_replay_size=800, random_warmup=warm, epsilon=0.0,
                    seed=1, stop_at_target=False, eval_every=10**6, eval_episodes=1))  # fmt: skip
        with np.load(run / "checkpoint" / "replay.npz") as z:
            share[warm] = float((z["action"] == 1).mean())
    assert share[False] in (0.0, 1.0) and abs(share[True] - 0.5) < 0.08, share


def test_resume_refuses_missing_or_corrupt_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        train(DQNConfig(resume=str(tmp_path / "nowhere"), progress=False))
    train(small(tmp_path, total_steps=600, min_replay_size=300, stop_at_target=False))
    f = tmp_path / "checkpoint/learner.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    before = f.read_bytes()
    with pytest.raises(CheckpointError, match="corrupt"):
        train(DQNConfig(resume=str(tmp_path), total_steps=1200, progress=False))
    assert f.read_bytes() == before  # nothing written over


def test_existing_run_dir_is_not_overwritten(tmp_path: Path) -> None:
    train(small(tmp_path, total_steps=600, min_replay_size=300, stop_at_target=False))
    with pytest.raises(ConfigError, match="--resume"):
        train(small(tmp_path, total_steps=600, min_replay_size=300))


@pytest.mark.parametrize(
    "kw",
    [
        {"precision": "int3"},
        {"hidden": "64,0"},
        {"hidden": "a,b"},
        {"env": "gym:Pendulum-v1"},  # continuous actions: DQN does not fit
        {"env": "nope:CartPole-v1"},
    ],
)
def test_bad_config_fails_before_writing_anything(tmp_path: Path, kw: dict) -> None:
    with pytest.raises((ConfigError, ValueError)) as e:
        train(small(tmp_path / "run", **kw))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_precision_auto_resolves_and_logs_its_choice(tmp_path: Path) -> None:
    r = train(small(tmp_path, precision="auto", total_steps=1_000, min_replay_size=500))
    assert r.precision in ("fp32", "fp16", "int8", "int4")
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["precision"] == r.precision  # a resume keeps the choice
    table = (tmp_path / "precision_auto.md").read_text()
    assert f": {r.precision}" in table.splitlines()[0]
    assert all(p in table for p in ("| fp32 |", "| int8 |", "| int4 |"))
