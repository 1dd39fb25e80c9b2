"""Checkpoints: what a load refuses (one CheckpointError line), the fallback to the previous
checkpoint when a save was cut between its renames, and a corrupt replay behind a valid
manifest. Property-based: random damage to every file of a real checkpoint."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorq import DQNConfig, train
from actorq import checkpoint as ckpt
from actorq.agents import builder_for
from actorq.bench.results import MAX_MAGNITUDE, read_checkpoint_steps
from actorq.cli import main
from actorq.envs import env_spec
from actorq.errors import ActorQError, CheckpointError
from actorq.experiment import Counters, load_replay, restore
from actorq.run import load_run_config
from tests.damage import HOSTILE_JSON, HOWS, damaged


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("ckpt") / "run"
    train(
        DQNConfig(
            actors=0, envs_per_actor=4, total_steps=1_500, min_replay_size=300,
            stop_at_target=False, progress=False, log_every=1e9, energy=False, run_dir=str(run),
        )
    )  # fmt: skip
    return run


def _copy(saved: Path, dst: Path) -> Path:
    shutil.copytree(saved, dst)
    return dst / "checkpoint"


def _reseal(d: Path) -> None:
    """Rewrite the manifest for the files as they are now (damage a checksum cannot see)."""
    files = sorted(p.name for p in d.iterdir() if p.name != ckpt.MANIFEST)
    manifest = {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in files}
    (d / ckpt.MANIFEST).write_text(json.dumps(manifest))


def test_a_manifest_must_list_the_required_files(saved: Path, tmp_path: Path) -> None:
    d = _copy(saved, tmp_path / "r")
    (d / ckpt.MANIFEST).write_text("{}")
    with pytest.raises(CheckpointError, match=r"does not list learner\.safetensors"):
        ckpt.load(d)


def test_an_interrupted_save_falls_back_to_the_previous_checkpoint(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _copy(saved, tmp_path / "r")
    d.rename(d.with_name("checkpoint.old"))  # cut after the first rename of a save
    tensors, state, _ = ckpt.load(d)
    assert state["counters"]["env_steps"] >= 1_500 and tensors
    assert "checkpoint.old" in capsys.readouterr().err
    # and a resume from that run works
    r = train(DQNConfig(resume=str(tmp_path / "r"), total_steps=2_000, progress=False))
    assert r.env_steps >= 2_000


def test_a_corrupt_replay_behind_a_valid_manifest_is_one_line(saved: Path, tmp_path: Path) -> None:
    d = _copy(saved, tmp_path / "r")
    np.savez(d / "replay.npz", obs=np.zeros((3, 7), np.float32))  # wrong shape, fields missing
    _reseal(d)
    config = tmp_path / "r" / "config.json"  # energy tracked (where codecarbon is installed)
    config.write_text(json.dumps({**json.loads(config.read_text()), "energy": True}))
    # a dead segment's row, which a resume that goes ahead drops: a refused one writes nothing
    metrics = tmp_path / "r" / "metrics.csv"
    with open(metrics, "a") as f:
        f.write("999999999,1.0,charts/eval_return,1.0\n")
    before, threads = metrics.read_bytes(), set(threading.enumerate())
    with pytest.raises(CheckpointError, match="replay"):
        train(DQNConfig(resume=str(tmp_path / "r"), total_steps=3_000, progress=False))
    assert metrics.read_bytes() == before
    # nothing left running in the caller's process (codecarbon's threads, the publisher's)
    deadline = time.monotonic() + 10
    while set(threading.enumerate()) - threads and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(threading.enumerate()) - threads


_FILES = ["state.json", "learner.safetensors", "replay.npz", ckpt.MANIFEST, "../config.json"]
#: where a report's reader (:func:`read_checkpoint_steps`) looks in state.json: actorq's
#: counter, and SB3's (its learner's own)
_STEP_FIELDS = [("counters",), ("counters", "env_steps"), ("learner",), ("learner", "counters"),
                ("learner", "counters", "num_timesteps")]  # fmt: skip
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([2**63, -(2**63) - 1, 10**30, 1e15 + 1, -1]),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=6,
)  # fmt: skip


def _with_a_step_field(raw: bytes, data: Any) -> bytes:
    """state.json, its shape kept, with one field the step readers use set to any JSON value."""
    state = json.loads(raw)
    *parents, key = data.draw(st.sampled_from(_STEP_FIELDS))
    inner = state
    for p in parents:
        if not isinstance(inner.get(p), dict):
            inner[p] = {}
        inner = inner[p]
    inner[key] = data.draw(_JSON)
    return json.dumps(state).encode()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    target=st.sampled_from(_FILES),
    how=st.sampled_from([*HOWS, "json", "step", "hostile"]),
    reseal=st.booleans(),
    cut_save=st.booleans(),
    data=st.data(),
)
def test_damaged_checkpoints_load_or_fail_in_one_line(
    saved: Path, tmp_path: Path, target: str, how: str, reseal: bool, cut_save: bool, data: Any
) -> None:
    """Every reader of a checkpoint, a resume's (read whole, restored into a learner and its
    replay) and a report's (state.json alone: the env steps it holds), of the checkpoint or,
    after a save cut between its renames, of its ``.old`` copy: a value, or one ActorQError
    line naming what was read; never a traceback, never a write."""
    root = Path(tempfile.mkdtemp(dir=tmp_path)) / "r"  # a fresh copy for every example
    d = _copy(saved, root)
    path = d / ("state.json" if how == "step" else target)
    blob = bytearray(damaged(path.read_bytes(), how, data))
    if how == "json":  # valid JSON of the wrong shape
        value = data.draw(
            st.recursive(
                st.none() | st.integers() | st.text(max_size=5),
                lambda c: (
                    st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3)
                ),
            )
        )
        blob = bytearray(json.dumps(value).encode())  # fmt: skip
    elif how == "step":
        blob = bytearray(_with_a_step_field(path.read_bytes(), data))
    elif how == "hostile":  # JSON's parser's own RecursionError or digit-limit ValueError
        blob = bytearray(data.draw(st.sampled_from(HOSTILE_JSON)))
    path.write_bytes(bytes(blob))
    if reseal and target != ckpt.MANIFEST:
        _reseal(d)
    if cut_save:  # only the previous checkpoint is whole: every reader falls back to it
        d.rename(d.with_name("checkpoint.old"))
    before = sorted(p.name for p in root.rglob("*"))
    try:
        cfg = load_run_config(root)
        loaded = ckpt.read(d)
        builder = builder_for(cfg)
        spec = env_spec(cfg.env)
        learner = builder.make_learner(cfg, spec)
        restore(loaded, learner, Counters())
        if (replay := loaded.replay) is not None:
            table = builder.table_config(cfg, spec).build(builder.data_specs(cfg, spec))
            load_replay(table, replay)
    except ActorQError as e:
        assert str(e) and "\n" not in str(e)
    for native in (True, False):  # an actorq cell's counter, and an SB3 cell's
        try:
            steps = read_checkpoint_steps(root, native)
        except ActorQError as e:
            assert str(e) and "\n" not in str(e)
            # what was read is named: checkpoint.old's files after a cut save
            assert not cut_save or "checkpoint/" not in str(e) or "no checkpoint in" in str(e)
        else:
            assert steps is None or (type(steps) is int and 0 <= steps <= MAX_MAGNITUDE)
    assert sorted(p.name for p in root.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("hostile", HOSTILE_JSON, ids=["deep", "deep-objects", "big", "neg"])
@pytest.mark.parametrize("target", [ckpt.MANIFEST, "state.json", "../config.json"])
def test_json_the_parser_raises_other_errors_on_is_one_line(
    saved: Path, tmp_path: Path, target: str, hostile: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nesting past the parser's stack (RecursionError) and an integer past Python's 4,300
    digits (a ValueError that is not a JSONDecodeError), in a checkpoint's manifest, its state
    (resealed: only the parser sees it) or the run's config.json: eval and export are one line."""
    d = _copy(saved, tmp_path / "r")
    (d / target).write_bytes(hostile)
    if target == "state.json":
        _reseal(d)
    for argv in (["eval", str(d.parent), "--episodes", "1"], ["export", str(d.parent),
                 "--out", str(tmp_path / "p.onnx")]):  # fmt: skip
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("actorq: error: "), err
        assert "not valid JSON" in err
    assert not (tmp_path / "p.onnx").exists()


def test_config_json_must_match_the_checkpoint(
    saved: Path, tmp_path: Path, tiny: Callable[..., Any]
) -> None:
    from actorq.cli import main

    run = tmp_path / "r"
    _copy(saved, run)
    cfg = json.loads((run / "config.json").read_text())
    cfg["hidden"] = [32, 32]  # weights on disk are 256×256
    (run / "config.json").write_text(json.dumps(cfg))
    assert main(["eval", str(run), "--episodes", "1"]) == 2


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_optimizer_state_never_resumes(tiny: Any, bad: float) -> None:
    """A checkpoint re-saved with NaN in the optimizer (a self-consistent manifest) is refused
    on resume with one line, before anything is written (issue 49 item 11)."""
    from actorq.rundir import RunDir

    r = train(tiny("dqn", total_steps=400, min_replay_size=100))
    run = RunDir(Path(r.run_dir))
    tensors, state, _, _ = run.load_checkpoint()
    name = next(k for k in tensors if k.startswith("opt") and tensors[k].is_floating_point())
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] = bad
    ckpt.save(run.checkpoint, tensors, state)
    before = run.metrics.read_bytes()
    with pytest.raises(
        CheckpointError, match=rf"{name!r} is NaN or infinite: this checkpoint"
    ) as e:
        train(tiny("dqn", resume=str(run), total_steps=800))
    assert "\n" not in str(e.value) and run.metrics.read_bytes() == before


@pytest.mark.parametrize("how", ["oserror", "safetensors"])
def test_a_full_disk_during_a_save_keeps_the_old_checkpoint_and_leaves_no_temporary(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Disk full mid-save (issue 49 item 14): one CheckpointError line, the previous checkpoint
    still loads, and no half-written checkpoint.tmp is left to fill the disk. safetensors
    reports a full disk as its own error, not an OSError (seen on a full tmpfs)."""
    import safetensors.torch
    from safetensors import SafetensorError

    d = _copy(saved, tmp_path / "r")
    before = ckpt.load(d)

    def full(*args: Any, **kwargs: Any) -> None:
        if how == "oserror":
            raise OSError(28, "No space left on device")
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
            'space left on device" })'
        )

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(
        CheckpointError, match=r"No space left on device.*; the previous one is kept"
    ):
        ckpt.save(d, before[0], before[1])
    assert not d.with_name(d.name + ".tmp").exists()
    tensors, state, _ = ckpt.load(d)
    assert state == before[1] and tensors.keys() == before[0].keys()


def test_a_save_after_a_cut_one_keeps_the_only_checkpoint_until_it_is_replaced(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save cut between its two renames leaves only ``checkpoint.old``; the next save must
    not delete it before its own copy is in place: killed there, the run still resumes."""
    d = _copy(saved, tmp_path / "r")
    tensors, state, _ = ckpt.load(d)
    old = d.with_name(d.name + ".old")
    d.rename(old)  # the cut save's state: the previous checkpoint moved aside, no new one
    real = Path.rename

    def killed(self: Path, target: Any) -> Any:
        if self.name.endswith(".tmp"):
            raise KeyboardInterrupt  # the process dies before the new copy is renamed in
        return real(self, target)

    monkeypatch.setattr(Path, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(d, tensors, state)
    monkeypatch.undo()
    again, state_again, _ = ckpt.load(d)  # falls back to checkpoint.old, as it did before
    assert state_again == state and again.keys() == tensors.keys()


def test_a_save_that_fails_on_anything_leaves_no_temporary_and_the_old_checkpoint(
    tmp_path: Path,
) -> None:
    """Not only OSError: a writer that raises anything else (an overflow from a damaged
    counter, Ctrl-C) takes its half-written copy with it and keeps the previous checkpoint."""
    import torch

    cd = tmp_path / "checkpoint"
    ckpt.save(cd, {"w": torch.zeros(2)}, {"v": 1})

    def broken(path: Path) -> None:
        path.write_bytes(b"half")
        raise OverflowError("Python int too large to convert to C long")

    with pytest.raises(OverflowError):
        ckpt.save(cd, {"w": torch.ones(2)}, {"v": 2}, broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert json.loads((cd / "state.json").read_text()) == {"v": 1}


def test_cuda_random_streams_are_kept_and_restored_where_the_devices_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a GPU here, torch.cuda is stood in for: a process that used CUDA saves each
    device's stream; a resume sets the ones this machine has (tests/test_cuda.py: the real one)."""
    import torch

    from actorq import checkpoint as ckpt

    assert ckpt.cuda_rng_states() == {} or torch.cuda.is_initialized()  # CPU-only: nothing
    streams = [torch.arange(8, dtype=torch.uint8), torch.arange(8, 16, dtype=torch.uint8)]
    set_calls: list[tuple[list[int], int]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: streams)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(
        torch.cuda, "set_rng_state", lambda t, i: set_calls.append((t.tolist(), int(i)))
    )
    saved = ckpt.cuda_rng_states()
    assert sorted(saved) == ["rng.cuda.0", "rng.cuda.1"]
    ckpt.restore_cuda_rng({**saved, "rng.torch": torch.zeros(1), "rng.cuda.x": streams[0]})
    assert set_calls == [(list(range(8)), 0)]  # device 1 is not on this machine


def test_a_read_overtaken_by_a_save_reads_the_new_checkpoint_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`actorq eval` of a live run: a save replaced the checkpoint between a read's files, and
    the read called it corrupt (or paired one checkpoint's weights with the next's snapshot)."""
    import torch

    d = tmp_path / "checkpoint"

    def save(i: int) -> None:
        state = {"learner": {}, "counters": {"i": i}, "rng": {}}
        ckpt.save(d, {"w": torch.full((4,), float(i))}, state, files={ckpt.SNAPSHOT: b"v%d" % i})

    save(1)
    take, reads = ckpt._take, []

    def overtaken(fd: int, where: Path, name: str, keep: bool = True) -> tuple[str, bytes]:
        found = take(fd, where, name, keep)
        reads.append(name)
        if len(reads) == 2:  # the manifest and one file read: a save replaces the directory
            save(2)
        return found

    monkeypatch.setattr(ckpt, "_take", overtaken)
    tensors, state, _, snapshot = ckpt.read(d)
    assert (state["counters"]["i"], float(tensors["w"][0]), snapshot) == (2, 2.0, b"v2")
    assert reads.count(ckpt.MANIFEST) == 2  # read again, from the new directory


def test_a_damaged_checkpoint_is_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    d = tmp_path / "checkpoint"
    ckpt.save(d, {"w": torch.zeros(4)}, {"learner": {}, "counters": {}, "rng": {}})
    (d / "state.json").write_text("{}")
    calls = []
    take = ckpt._take
    monkeypatch.setattr(ckpt, "_take", lambda *a, **k: calls.append(a[2]) or take(*a, **k))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        ckpt.read(d)
    assert calls.count(ckpt.MANIFEST) == 1  # the same directory: damaged, not overtaken


def _opt_group(s: dict[str, Any]) -> dict[str, Any]:
    return next(iter(s["learner"]["optimizers"].values()))["groups"][0]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda s: _opt_group(s).update(betas=[0.9, "x"]), "betas"),
        (lambda s: _opt_group(s).update(lr=float("nan")), "lr nan is bad"),
        (lambda s: _opt_group(s).update(weight_decay=-1.0), "weight_decay -1.0 is bad"),
        (lambda s: _opt_group(s).update(lr=float("inf")), "lr inf is bad"),
        (lambda s: _opt_group(s).update(eps=float("inf")), "eps inf is bad"),
        (lambda s: _opt_group(s).update(betas=[0.9, 1.5]), "betas"),
        (lambda s: _opt_group(s).update(params=[0]), "groups unlike this run's"),
        (lambda s: _opt_group(s).update(surprise=1), "groups unlike this run's"),
    ]
    + [
        (lambda s, k=k, v=v: s["counters"].update({k: v}), f"counters hold a bad {k}")
        for k, v in [
            ("env_steps", float("nan")),
            ("env_steps", -5),
            ("episodes", -1),
            ("wall_time_s", float("nan")),
            ("eval_time_s", -1.0),
            ("best_eval", float("inf")),
            ("next_eval", float("nan")),
            ("energy_kwh", float("nan")),
            ("time_to_target_s", float("nan")),
            ("last_eval", "x"),
            ("energy_estimated", 1),
            ("updates", 2**63),
            ("steps_to_target", 1.5),
        ]
    ],
)
def test_a_resealed_state_json_with_a_bad_setting_never_resumes(
    saved: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], Any], says: str
) -> None:
    """A state.json edited and resealed (a consistent manifest): a NaN learning rate trained on
    NaN, a string beta or a NaN step count crashed with a traceback after writing metrics; a
    negative count or a NaN wall time was resumed and written back (a review's repros)."""
    d = _copy(saved, tmp_path / "r")
    state = json.loads((d / "state.json").read_text())
    edit(state)
    (d / "state.json").write_text(json.dumps(state))
    _reseal(d)
    metrics = (d.parent / "metrics.csv").read_bytes()
    with pytest.raises(CheckpointError, match=says) as e:
        train(DQNConfig(resume=str(d.parent), total_steps=3_000, progress=False, energy=False))
    assert "\n" not in str(e.value) and (d.parent / "metrics.csv").read_bytes() == metrics


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [("action", 99, r"'action' holds values outside \[0, 1\]"),
     ("action", -5, "'action' holds values outside"),
     ("discount", 5.0, r"'discount' holds values outside \[0\.0, 1\.0\]")],
)  # fmt: skip
def test_a_resealed_replay_with_impossible_values_never_resumes(
    saved: Path, tmp_path: Path, field: str, value: float, says: str
) -> None:
    """An action index CartPole's network has no output for crashed the resumed learner (after
    it wrote metrics); a discount of 5 was trained on."""
    d = _copy(saved, tmp_path / "r")
    with np.load(d / "replay.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays[field][0] = value
    np.savez(d / "replay.npz", **arrays)  # type: ignore[arg-type]
    _reseal(d)
    metrics = (d.parent / "metrics.csv").read_bytes()
    with pytest.raises(CheckpointError, match=says) as e:
        train(DQNConfig(resume=str(d.parent), total_steps=3_000, progress=False, energy=False))
    assert "\n" not in str(e.value) and (d.parent / "metrics.csv").read_bytes() == metrics


def test_a_learning_rate_a_schedule_took_below_zero_resumes(saved: Path, tmp_path: Path) -> None:
    """SB3's linear schedules end a hair below 0 when a rollout overshoots the budget: such a
    checkpoint resumes (only a non-finite learning rate is refused)."""
    d = _copy(saved, tmp_path / "r")
    state = json.loads((d / "state.json").read_text())
    _opt_group(state).update(lr=-9.6e-09)
    (d / "state.json").write_text(json.dumps(state))
    _reseal(d)
    r = train(DQNConfig(resume=str(d.parent), total_steps=1_600, progress=False, energy=False))
    assert r.env_steps >= 1_600


def test_read_state_verifies_the_state_alone(tmp_path: Path) -> None:
    """A report reads a running cell's progress: state.json against the manifest, without
    loading the tensors or hashing a replay of gigabytes."""
    import torch

    d = tmp_path / "checkpoint"
    state = {"learner": {}, "counters": {"env_steps": 1_365_000}, "rng": {}}
    ckpt.save(d, {"w": torch.zeros(2)}, state, lambda path: path.write_bytes(b"frames"))
    (d / "learner.safetensors").write_bytes(b"not read")  # nor is the replay below
    (d / "replay.npz").write_bytes(b"not hashed")
    assert ckpt.read_state(d) == (d, state)
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        ckpt.read(d)
    (d / "state.json").write_text(json.dumps({**state, "counters": {"env_steps": 9}}))
    with pytest.raises(CheckpointError, match=r"checksum mismatch.*state\.json"):
        ckpt.read_state(d)


#: the least a state.json holds (what a save's read checks)
STATE = {"learner": {}, "counters": {}, "rng": {}}


def _linked_checkpoint(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(run, disk, RUN/checkpoint): the checkpoint a link to ``disk/ck`` (on another disk)."""
    run, disk = tmp_path / "run", tmp_path / "disk"
    run.mkdir()
    (disk / "ck").mkdir(parents=True)
    link = run / "checkpoint"
    link.symlink_to(disk / "ck")
    return run, disk, link


def test_saves_through_a_linked_checkpoint_directory_keep_the_link(tmp_path: Path) -> None:
    """``checkpoint/`` may link to another disk (RunDir.prepare allows it): each save replaces
    the directory linked to, its copies beside that one, and leaves the link as it was (the
    second save once found the link moved to checkpoint.old and stopped the run)."""
    import torch

    run, disk, link = _linked_checkpoint(tmp_path)
    for v in range(3):
        ckpt.save(link, {"w": torch.full((2,), float(v))}, {**STATE, "v": v})
        assert link.is_symlink() and link.resolve() == (disk / "ck").resolve()
        assert json.loads((disk / "ck" / "state.json").read_text())["v"] == v
        assert sorted(p.name for p in run.iterdir()) == ["checkpoint"]
        assert sorted(p.name for p in disk.iterdir()) == ["ck"]
    # a save cut between its renames leaves ck.old on that disk, which a read falls back to
    (disk / "ck").rename(disk / "ck.old")
    assert ckpt.read_state(link) == (ckpt.previous(link), {**STATE, "v": 2})
    ckpt.save(link, {"w": torch.zeros(2)}, {**STATE, "v": 3})
    assert link.is_symlink() and ckpt.read_state(link) == (link, {**STATE, "v": 3})
    assert sorted(p.name for p in disk.iterdir()) == ["ck"]


def test_a_users_directory_beside_a_linked_checkpoint_is_never_removed(tmp_path: Path) -> None:
    """A save's copies sit beside the directory ``checkpoint/`` links to: there, a name like
    ``ck.old`` or ``ck.tmp`` may be the user's own. Refused in one line, left as it was."""
    import torch

    _, disk, link = _linked_checkpoint(tmp_path)
    ckpt.save(link, {"w": torch.zeros(2)}, {**STATE, "v": 1})
    for name in ("ck.old", "ck.tmp"):
        mine = disk / name
        mine.mkdir()
        (mine / "thesis.tex").write_text("mine")
        with pytest.raises(CheckpointError, match=rf"{name} holds what is not a checkpoint's"):
            ckpt.save(link, {"w": torch.ones(2)}, {**STATE, "v": 2})
        assert (mine / "thesis.tex").read_text() == "mine"
        assert ckpt.read_state(link) == (link, {**STATE, "v": 1})
        (mine / "thesis.tex").unlink()
        mine.rmdir()
    ckpt.save(link, {"w": torch.ones(2)}, {**STATE, "v": 2})  # its own copies go as before
    assert ckpt.read_state(link) == (link, {**STATE, "v": 2})


def test_a_checkpoint_old_that_cannot_be_removed_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy a save moves the checkpoint to must be gone first: where it cannot be removed,
    one CheckpointError line, and the checkpoint stays as it was."""
    import torch

    d = tmp_path / "checkpoint"
    ckpt.save(d, {"w": torch.zeros(2)}, {"v": 1})
    (tmp_path / "checkpoint.old").mkdir()
    (tmp_path / "checkpoint.old" / "state.json").write_text("{}")
    monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)  # EBUSY, a mount point...
    with pytest.raises(CheckpointError, match=r"cannot remove .*checkpoint\.old.*move it away"):
        ckpt.save(d, {"w": torch.ones(2)}, {"v": 2})
    assert json.loads((d / "state.json").read_text()) == {"v": 1}
