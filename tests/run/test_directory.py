"""Reading a run directory's config.json: the flat form every actorq version wrote, the nested
form by group, and old GO runs holding knobs retired since."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorq import DQNConfig, train
from actorq import checkpoint as ckpt
from actorq.agents.go.config import GOConfig
from actorq.core.seeds import FINAL_EVAL_SEED
from actorq.errors import ActorQError, CheckpointError
from actorq.run import load_run_config, load_run_policy
from actorq.rundir import RunDir
from tests.damage import HOWS, damaged

#: what GO runs wrote before these knobs were retired, at their defaults
RETIRED_DEFAULTS = {"explore_guided": False, "explore_cut": 0.0, "cost_input": False,
                    "imitate_guide": 0.0, "start": "none"}  # fmt: skip


def _run(tmp_path: Path, d: dict[str, Any]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    RunDir(run).write_config_json(d)
    return run


def test_an_old_go_run_with_retired_knobs_at_their_defaults_loads(tmp_path: Path) -> None:
    cfg = GOConfig(sil_coef=1.0, imitate="best", hidden=32)
    run = _run(tmp_path, {**cfg.to_json(), **RETIRED_DEFAULTS})
    assert load_run_config(run) == cfg


@pytest.mark.parametrize(
    "key, value",
    [("cost_input", True), ("start", "best"), ("explore_guided", True), ("explore_cut", 0.5),
     ("imitate_guide", 1.0)],
)  # fmt: skip
def test_an_old_go_run_that_used_a_retired_knob_is_one_line(
    tmp_path: Path, key: str, value: Any
) -> None:
    run = _run(tmp_path, {**GOConfig().to_json(), **RETIRED_DEFAULTS, key: value})
    with pytest.raises(CheckpointError) as e:
        load_run_config(run)
    msg = str(e.value)
    flag = "--" + key.replace("_", "-")
    assert "\n" not in msg and f"{flag} was retired" in msg and "commit 67fd709" in msg
    assert "config.json" in msg


def test_a_nested_config_json_loads_like_the_flat_one(tmp_path: Path) -> None:
    cfg = GOConfig(sil_coef=1.0, explore=0.5, hidden=32)
    flat = cfg.to_json()
    nested = {k: v for k, v in flat.items() if k not in ("sil_coef", "explore", "hidden")}
    nested |= {"exploration": {"sil_coef": 1.0, "explore": 0.5}, "policy": {"hidden": 32}}
    assert load_run_config(_run(tmp_path, nested)) == cfg


def test_an_old_dqn_run_loads_with_what_it_ran_a_new_one_with_what_it_says(
    tmp_path: Path,
) -> None:
    # a config.json from before the dueling head and GPTQ rounding existed ran without them;
    # one that names them (every run since) keeps its values; a config a user gives (the
    # bench's cells) takes the class defaults: only saved runs get the older values
    old = {k: v for k, v in DQNConfig().to_json().items() if k not in ("dueling", "calibration")}
    got = load_run_config(_run(tmp_path, old))
    assert (got.dueling, got.calibration) == (False, "none")
    shutil.rmtree(tmp_path / "run")
    assert load_run_config(_run(tmp_path, DQNConfig().to_json())) == DQNConfig()
    given = DQNConfig.from_json(old)
    assert (given.dueling, given.calibration) == (True, "auto")


def test_an_old_run_whose_config_says_empty_for_not_given_loads(tmp_path: Path) -> None:
    # an older actorq took --ray-address "" (a local cluster) and GO's --init-from "" as not
    # given and saved them so; new configs refuse "" (read as absent, it started a new run)
    got = load_run_config(_run(tmp_path, {**DQNConfig(backend="ray").to_json(), "ray_address": ""}))
    assert got.ray_address is None
    shutil.rmtree(tmp_path / "run")
    assert (
        load_run_config(_run(tmp_path, {**GOConfig().to_json(), "init_from": ""})).init_from is None
    )


def test_an_old_run_saved_with_a_lower_case_country_loads(tmp_path: Path) -> None:
    # --energy-country took any three letters until codes had to be capitals: such a run
    # still resumes, evaluates and exports (its code read in capitals)
    got = load_run_config(_run(tmp_path, {**DQNConfig().to_json(), "energy_country": "usa"}))
    assert got.energy_country == "USA"


# ----------------------------------------------------- the policy `actorq eval` / export read


@pytest.fixture(scope="module")
def gptq_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An int8 DQN run whose publishes round with GPTQ on replay states, with a best/ kept."""
    run = tmp_path_factory.mktemp("gptq") / "run"
    cfg = DQNConfig(
        env="gym:CartPole-v1", precision="int8", calibration="gptq", actors=0,
        total_steps=2500, min_replay_size=200, eval_every=1000, eval_episodes=2,
        stop_at_target=False, run_dir=str(run), progress=False, log_every=1e9, energy=False,
    )  # fmt: skip
    assert cfg.uses_gptq()
    train(cfg)
    return run


def test_eval_runs_the_snapshot_the_actors_ran_not_one_rounded_again(gptq_run: Path) -> None:
    """GPTQ's rounding needs replay states, which eval does not have: the checkpoint keeps the
    run's own final snapshot, and evaluating it gives the summary's return exactly."""
    summary = json.loads((gptq_run / "summary.json").read_text())
    cfg, io, data = load_run_policy(str(gptq_run), None)
    assert data == (gptq_run / "checkpoint" / ckpt.SNAPSHOT).read_bytes()
    rets = io.evaluate(data, cfg.eval_episodes, FINAL_EVAL_SEED)
    assert float(rets.mean()) == summary["eval_return"]
    _, state, _ = ckpt.load(gptq_run / "checkpoint")
    again = io.snapshot(int(state["counters"]["version"]) + 1, "int8", None)
    assert len(again) == len(data) and again != data  # rounded to nearest: other codes
    # another precision is made from the weights, as before
    assert load_run_policy(str(gptq_run), "fp32")[2] != data
    # best/ keeps the snapshot its evaluation ran
    best = load_run_policy(str(gptq_run), None, which="best")[2]
    assert best == (gptq_run / "best" / ckpt.SNAPSHOT).read_bytes()


def _resealed(run: Path, where: str, tmp_path: Path, edit: Callable[[Path], None]) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    d = copy / where
    edit(d)
    files = sorted(p.name for p in d.iterdir() if p.name != ckpt.MANIFEST)
    digests = {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in files}
    (d / ckpt.MANIFEST).write_text(json.dumps(digests))
    return copy


def test_a_saved_snapshot_that_does_not_fit_the_policy_is_one_line(
    gptq_run: Path, tmp_path: Path
) -> None:
    copy = _resealed(
        gptq_run, "checkpoint", tmp_path, lambda d: (d / ckpt.SNAPSHOT).write_bytes(b"x")
    )
    with pytest.raises(CheckpointError, match="does not fit the run's policy"):
        load_run_policy(str(copy), None)
    gone = _resealed(gptq_run, "best", tmp_path / "b", lambda d: (d / ckpt.SNAPSHOT).unlink())
    with pytest.raises(CheckpointError, match=r"lacks the snapshot\.bin it names"):
        load_run_policy(str(gone), None, which="best")


def test_a_best_policy_left_in_best_old_by_a_cut_save_is_found(
    gptq_run: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(gptq_run, copy)
    (copy / "best").rename(copy / "best.old")
    assert (
        load_run_policy(str(copy), None, which="best")[2]
        == (copy / "best.old" / ckpt.SNAPSHOT).read_bytes()
    )


def test_a_config_json_whose_precision_is_auto_is_one_line(gptq_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(gptq_run, copy)
    config = copy / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "precision": "auto"}))
    with pytest.raises(CheckpointError, match="'auto' was never resolved; pass --precision"):
        load_run_policy(str(copy), None)


def test_a_run_moved_to_a_path_that_is_not_utf8_still_loads(gptq_run: Path, tmp_path: Path) -> None:
    moved = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xffdir"))
    shutil.copytree(gptq_run, moved)
    assert (
        load_run_policy(str(moved), None)[2] == (moved / "checkpoint" / ckpt.SNAPSHOT).read_bytes()
    )


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(how=st.sampled_from(HOWS), data=st.data())
def test_a_damaged_saved_snapshot_evaluates_or_is_one_line(
    gptq_run: Path, tmp_path: Path, how: str, data: st.DataObject
) -> None:
    """snapshot.bin behind a re-sealed manifest (damage its checksum cannot see): `actorq eval`
    runs it or refuses it in one ActorQError line."""

    def damage(d: Path) -> None:
        (d / ckpt.SNAPSHOT).write_bytes(damaged((d / ckpt.SNAPSHOT).read_bytes(), how, data))

    copy = _resealed(gptq_run, "checkpoint", Path(tempfile.mkdtemp(dir=tmp_path)), damage)
    try:
        _, io, snap = load_run_policy(str(copy), None)
        io.evaluate(snap, 1, 0)
    except ActorQError as e:
        assert "\n" not in str(e)
