"""An SB3 DQN cell's replay buffer in its checkpoint: stacked frames stored once, decoded
exactly, and a damaged or foreign file refused with one ValueError (never another exception,
nothing written into the buffer before every check passed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorq.bench.sb3_replay import encode, load_replay, writer
from tests.damage import HOWS, damaged

ROWS, ENVS, STACK, SIDE, ACTIONS = 64, 2, 4, 6, 5


def _buffer(rows: int = ROWS, envs: int = ENVS, obs: tuple[int, ...] = (STACK, SIDE, SIDE),
            dtype: type = np.uint8, next_obs: bool = True) -> SimpleNamespace:  # fmt: skip
    """An empty buffer laid out as SB3's ReplayBuffer lays out its arrays."""
    b = SimpleNamespace(
        observations=np.zeros((rows, envs, *obs), dtype),
        actions=np.zeros((rows, envs, 1), np.int64),
        rewards=np.zeros((rows, envs), np.float32),
        dones=np.zeros((rows, envs), np.float32),
        timeouts=np.zeros((rows, envs), np.float32),
        pos=0,
        full=False,
    )
    if next_obs:
        b.next_observations = np.zeros_like(b.observations)
    return b


def _play(b: SimpleNamespace, steps: int, seed: int) -> None:
    """Fill ``b`` as SB3 fills it from frame-stacked episodes: each env's stack shifts by one
    frame a step, a new episode's stack repeats its first frame, a done row's next observation
    is the terminal one; past the end the ring wraps around."""
    rng = np.random.default_rng(seed)
    rows = len(b.observations)
    stacks = [np.repeat(rng.integers(0, 256, (1, SIDE, SIDE), np.uint8), STACK, 0)
              for _ in range(ENVS)]  # fmt: skip
    for _ in range(steps):
        for e in range(ENVS):
            frame = rng.integers(0, 256, (1, SIDE, SIDE), np.uint8)
            nxt = np.concatenate([stacks[e][1:], frame])
            done = rng.random() < 0.05
            b.observations[b.pos, e] = stacks[e]
            b.next_observations[b.pos, e] = nxt
            b.actions[b.pos, e] = rng.integers(0, ACTIONS)
            b.rewards[b.pos, e] = rng.normal()
            b.dones[b.pos, e] = done
            stacks[e] = np.repeat(rng.integers(0, 256, (1, SIDE, SIDE), np.uint8), STACK, 0) \
                if done else nxt  # fmt: skip
        b.pos = (b.pos + 1) % rows
        b.full = b.full or b.pos == 0


def _round_trip(b: SimpleNamespace, tmp_path: Path) -> SimpleNamespace:
    path = tmp_path / "replay.npz"
    writer(b, b.pos, b.full)(path)
    out = _buffer(
        len(b.observations), b.observations.shape[1], b.observations.shape[2:],
        b.observations.dtype.type, hasattr(b, "next_observations"),
    )  # fmt: skip
    load_replay(path, out, ACTIONS)
    return out


def _same(a: SimpleNamespace, b: SimpleNamespace) -> None:
    for name in ("observations", "actions", "rewards", "dones", "timeouts"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    if hasattr(a, "next_observations"):
        assert np.array_equal(a.next_observations, b.next_observations)
    assert (a.pos, a.full) == (b.pos, b.full)


@pytest.mark.parametrize("steps", [0, 1, 40, ROWS, ROWS + 23, 3 * ROWS + 5])
def test_stacks_are_stored_once_and_decoded_exactly(steps: int, tmp_path: Path) -> None:
    """Across episode starts and ends and the ring's wrap-around."""
    b = _buffer()
    _play(b, steps, seed=steps)
    _same(_round_trip(b, tmp_path), b)
    if steps >= ROWS:
        saved = encode(b, b.pos, b.full)
        # each row's newest frame, whole stacks where an episode starts, the ring's seam
        assert len(saved["stack_rows"]) < ROWS * ENVS // 5
        assert len(saved["next_rows"]) < ROWS * ENVS // 5
        assert "observations" not in saved and "next_observations" not in saved


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_contents_decode_exactly(data: st.DataObject, tmp_path: Path) -> None:
    """The encoding is checked on the data: arbitrary rows (no stacking at all, stacks that
    only partly continue, equal rows) come back as they were."""
    b = _buffer(rows=8, envs=2)
    pool = data.draw(st.lists(st.integers(0, 255), min_size=1, max_size=3))
    b.observations[...] = np.asarray(pool, np.uint8)[
        data.draw(st.integers(0, 2**32 - 1)) % len(pool)
    ]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    mask = rng.random(b.observations.shape) < data.draw(st.floats(0, 1))
    b.observations[mask] = rng.integers(0, 256, int(mask.sum()), dtype=np.uint8)
    b.next_observations[...] = np.roll(b.observations, -1, axis=0)
    b.next_observations[rng.random(8) < 0.3] = 7
    b.pos, b.full = data.draw(st.integers(0, 7)), data.draw(st.booleans())
    _same(_round_trip(b, tmp_path), b)


def test_vectors_and_a_memory_optimised_buffer_are_saved_as_they_are(tmp_path: Path) -> None:
    vec = _buffer(obs=(4,), dtype=np.float32)
    vec.observations[...] = np.random.default_rng(0).normal(size=vec.observations.shape)
    vec.next_observations[...] = vec.observations * 2
    vec.pos = 9
    assert "observations" in encode(vec, 9, False)
    _same(_round_trip(vec, tmp_path), vec)
    frames = _buffer(next_obs=False)  # optimize_memory_usage: no next_observations
    frames.observations[...] = 3
    frames.pos = 5
    _same(_round_trip(frames, tmp_path), frames)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda a: a.update(rewards=np.full_like(a["rewards"], np.nan)), "rewards have NaN"),
        (lambda a: a.update(dones=a["dones"] + 0.5), "dones are not 0 or 1"),
        (lambda a: a.update(actions=a["actions"] + ACTIONS), "actions are not in [0, 5)"),
        (lambda a: a.update(pos=np.asarray(ROWS, np.int64)), "pos 64 is not a row of 64"),
        (lambda a: a.update(stack_rows=a["stack_rows"][::-1].copy()), "not rows of the buffer"),
        (lambda a: a.update(stack_rows=a["stack_rows"][2:], stacks=a["stacks"][2:]),
         "lack the first row's stacks"),
        (lambda a: a.update(nexts=a["nexts"][1:]), "next_rows and nexts differ in length"),
        (lambda a: a.update(newest=a["newest"][:, :1]), "replay field 'newest' is uint8"),
        (lambda a: a.update(rewards=a["rewards"].astype(np.float64)), "field 'rewards'"),
        (lambda a: a.pop("timeouts"), "lacks 'timeouts'"),
    ],
)  # fmt: skip
def test_a_replay_that_does_not_fit_is_one_error_and_nothing_is_loaded(
    edit: object, needle: str, tmp_path: Path
) -> None:
    b = _buffer()
    _play(b, ROWS + 10, seed=1)
    arrays = encode(b, b.pos, b.full)
    edit(arrays)  # type: ignore[operator]
    path = tmp_path / "replay.npz"
    np.savez(path, **arrays)
    out = _buffer()
    with pytest.raises(ValueError, match=r"^[^\n]*$") as e:
        load_replay(path, out, ACTIONS)
    assert needle in str(e.value)
    _same(out, _buffer())  # untouched


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), how=st.sampled_from(HOWS))
def test_damaged_replays_load_or_fail_with_one_value_error(
    data: st.DataObject, how: str, tmp_path: Path
) -> None:
    b = _buffer(rows=16, envs=1)
    b.observations[...] = np.arange(16, dtype=np.uint8)[:, None, None, None, None]
    path = tmp_path / "replay.npz"
    writer(b, 3, False)(path)
    path.write_bytes(damaged(path.read_bytes(), how, data, random_size=512))
    try:
        load_replay(path, _buffer(rows=16, envs=1), ACTIONS)
    except ValueError as e:
        assert "\n" not in str(e)


@pytest.mark.parametrize(
    ("pos", "full", "cut"), [(5, False, 4), (0, True, ROWS - 1), (0, False, None)]
)
def test_a_memory_optimised_buffer_ends_the_episode_a_resume_cuts(
    pos: int, full: bool, cut: int | None
) -> None:
    """Its last transition's next observation is the row the resumed envs overwrite first."""
    from actorq.bench.sb3_replay import cut_episodes

    b = _buffer(next_obs=False)
    b.pos, b.full = pos, full
    cut_episodes(b)
    expect = np.zeros_like(b.dones)
    if cut is not None:
        expect[cut] = 1.0
    assert np.array_equal(b.dones, expect)
    kept = _buffer()  # next observations kept: the stored transition stays as it was
    kept.pos = pos
    cut_episodes(kept)
    assert not kept.dones.any()


def test_a_member_that_is_not_an_array_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    """np.load reads a member named ``stacks`` (no ``.npy``) as it is, ahead of ``stacks.npy``:
    its header was never checked, so the file is refused whole."""
    import zipfile

    b = _buffer()
    _play(b, ROWS + 10, seed=2)
    path = tmp_path / "replay.npz"
    writer(b, b.pos, b.full)(path)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("stacks", b"\x93NUMPY" + b"\0" * 64)
    out = _buffer()
    with pytest.raises(ValueError, match="member 'stacks' is not an array"):
        load_replay(path, out, ACTIONS)
    _same(out, _buffer())
