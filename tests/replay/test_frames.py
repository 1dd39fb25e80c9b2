"""The frame-deduplicating pixel replay: each frame stored once, and every transition it samples
exactly one the naive n-step adder emits, across episode ends, actor restarts and ring wrap."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import FrameStackObservation

from actorq.replay.adders import NStepAdder
from actorq.replay.frames import FrameAdder, FrameStackReplay, record_specs
from actorq.replay.ring import ReplayBuffer
from actorq.types import ArraySpec, Batch, transition_specs
from actorq.types import EnvSpec as Spec

FRAME = ArraySpec((5, 5), "uint8")
ACTION = ArraySpec((), "int64")
SPEC = Spec("toy", ArraySpec((4, 5, 5), "uint8"), ACTION, num_actions=3)


class Flicker(gym.Env[np.ndarray, np.int64]):
    """Random 5×5 frames; episodes of random length end by termination or truncation."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (5, 5), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.t, self.limit = 0, 0

    def _frame(self) -> np.ndarray:
        return self.np_random.integers(0, 256, (5, 5), dtype=np.uint8)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t, self.limit = 0, int(self.np_random.integers(1, 12))
        return self._frame(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        end = self.t >= self.limit
        term = end and bool(self.np_random.random() < 0.5)
        reward = float(self.np_random.normal()) + float(action)
        return self._frame(), reward, term, end and not term, {}


def run(steps: int, k: int = 3, n: int = 3, seed: int = 0) -> tuple[Batch, list[Batch]]:
    """Both adders on the same vector steps: (naive transitions, frame records per step)."""
    env = SyncVectorEnv(
        [lambda: FrameStackObservation(Flicker(), 4) for _ in range(k)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    naive, frames = NStepAdder(n, 0.9, k, SPEC.observation, ACTION), FrameAdder(k, 0, ACTION)
    obs, _ = env.reset(seed=seed)
    naive.observe_first(obs)
    frames.observe_first(obs)
    rng = np.random.default_rng(seed)
    out, records = [], []
    for _ in range(steps):
        a = rng.integers(0, 3, k)
        obs, r, term, trunc, info = env.step(a)
        final = None
        if (term | trunc).any():
            final = np.stack(
                [info["final_obs"][i] if d else obs[i] for i, d in enumerate(term | trunc)]
            )
        args = (a, r.astype(np.float32), obs, term, trunc, final)
        out.append(naive.add(*args))
        records.append(frames.add(*args))
    naive_all = {f: np.concatenate([o[f] for o in out if o]) for f in transition_specs(SPEC)}
    return naive_all, records


def keyed(batch: Batch) -> list[tuple[bytes, ...]]:
    """Transitions as sortable rows, without the reward (its float32 sum may differ in the last
    bit: the adder sums by matrix product)."""
    rows = []
    for i in range(len(batch["action"])):
        rows.append(
            (
                batch["obs"][i].tobytes(),
                batch["action"][i].tobytes(),
                batch["discount"][i].tobytes(),
                batch["next_obs"][i].tobytes(),
            )
        )
    return sorted(rows)


def rewards_by_key(batch: Batch) -> dict[tuple[bytes, ...], float]:
    return {
        (batch["obs"][i].tobytes(), batch["action"][i].tobytes()): float(batch["reward"][i])
        for i in range(len(batch["action"]))
    }


def filed(records: list[Batch], capacity: int, k: int = 3, n: int = 3) -> FrameStackReplay:
    replay = FrameStackReplay(capacity, k, FRAME, ACTION, 4, n, 0.9)
    for rec in records:
        replay.insert(rec)
    return replay


def test_rebuilt_transitions_are_exactly_the_naive_ones() -> None:
    naive, records = run(300)
    replay = filed(records, 3 * 2000)
    rebuilt = replay.transitions(*replay.valid_starts())
    assert len(naive["action"]) > 800  # many episodes ended, by termination and truncation
    assert (naive["discount"] == 0).any() and (naive["discount"] > 0.9**3).any()
    assert keyed(rebuilt) == keyed(naive)
    want, got = rewards_by_key(naive), rewards_by_key(rebuilt)
    assert want.keys() == got.keys()
    for k, r in want.items():
        assert got[k] == pytest.approx(r, rel=1e-6, abs=1e-6)


def test_no_stack_crosses_an_episode_start() -> None:
    _, records = run(200, k=1)
    replay = filed(records, 1000, k=1)
    s, a = replay.valid_starts()
    firsts = replay.flags[s, a % replay.slots] & 1 > 0
    obs = replay.transitions(s, a)["obs"]
    # a first observation is its frame four times (FrameStackObservation's padding)
    assert firsts.sum() > 10
    assert (obs[firsts] == obs[firsts][:, -1:]).all()


def test_wrapped_rings_sample_only_stored_transitions() -> None:
    naive, records = run(400)
    replay = filed(records, 3 * 40)  # 40 slots a stream: wrapped ten times over
    assert (replay.written > 3 * replay.slots).all()
    known = set(keyed(naive))
    sample = replay.sample(500, np.random.default_rng(1))
    assert set(keyed(sample)) <= known
    # every slot but the few at a ring's seams starts a transition
    assert len(replay.valid_starts()[0]) >= replay.capacity - 3 * (4 + 3 + 3)


def test_an_actor_restart_mid_episode_starts_a_new_episode() -> None:
    _, records = run(30, k=1)
    replay = filed(records, 500, k=1)
    before = len(replay.valid_starts()[0])
    restart = FrameAdder(1, 0, ACTION)
    restart.observe_first(np.full((1, 4, 5, 5), 7, np.uint8))
    a = np.array([1])
    nxt = np.full((1, 4, 5, 5), 9, np.uint8)
    for _ in range(5):
        no = np.array([False])
        replay.insert(restart.add(a, np.ones(1, np.float32), nxt, no, no))
    rebuilt = replay.transitions(*replay.valid_starts())

    # the interrupted episode's open windows are dropped, none reaches into the new episode
    def new_frames(stacks: np.ndarray) -> np.ndarray:  # frames of the new episode, per stack
        return ((stacks == 7) | (stacks == 9)).all(axis=(2, 3)).any(axis=1)

    old_obs = ~new_frames(rebuilt["obs"])
    assert old_obs.sum() >= before - 3 and (~old_obs).sum() >= 2
    assert not new_frames(rebuilt["next_obs"][old_obs]).any()


def test_a_step_without_an_episode_is_refused() -> None:
    replay = FrameStackReplay(100, 1, FRAME, ACTION, 4, 1)
    rec = {
        "stream": np.zeros(1, np.int32),
        "frame": np.zeros((1, 5, 5), np.uint8),
        "flags": np.zeros(1, np.uint8),
        "action": np.zeros(1, np.int64),
        "reward": np.zeros(1, np.float32),
    }
    with pytest.raises(ValueError, match="no episode"):
        replay.insert(rec)


def test_a_million_atari_transitions_take_about_7_gb_not_56() -> None:
    frame, obs = ArraySpec((84, 84), "uint8"), ArraySpec((4, 84, 84), "uint8")
    spec = Spec("atari:Pong", obs, ACTION, num_actions=6)
    dedup = FrameStackReplay(1000, 4, frame, ACTION, 4, 3)
    naive = ReplayBuffer(1000, transition_specs(spec))
    per = dedup.nbytes() / dedup.capacity
    assert per == 84 * 84 + 8 + 4 + 1  # 7,069 B: 1M transitions = 7.07 GB
    naive_per = sum(a.nbytes for a in naive._data.values()) / naive.capacity
    assert naive_per == 2 * 4 * 84 * 84 + 8 + 4 + 4
    assert naive_per / per > 7.9


def test_save_load_round_trip_and_layout_check(tmp_path: Any) -> None:
    _, records = run(120)
    replay = filed(records, 3 * 60)
    replay.save(tmp_path / "r.npz")
    back = FrameStackReplay(3 * 60, 3, FRAME, ACTION, 4, 3, 0.9)
    back.load(tmp_path / "r.npz")
    assert back.inserts == replay.inserts and back.size == replay.size
    a = replay.sample(64, np.random.default_rng(5))
    b = back.sample(64, np.random.default_rng(5))
    for f in a:
        np.testing.assert_array_equal(a[f], b[f])
    other = FrameStackReplay(3 * 60, 3, FRAME, ACTION, 4, 1, 0.9)
    with pytest.raises(ValueError, match="n\\] = \\[3, 60, 4, 3\\]"):
        other.load(tmp_path / "r.npz")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"inserts": np.array(1e30)}, "inserts is float64"),
        ({"inserts": np.array(2**64 - 1, np.uint64)}, "past 2\\*\\*62"),
        ({"inserts": np.array(-1)}, "negative"),
        ({"inserts": np.array([3])}, "inserts' is int64\\[1\\]"),
        ({"written": np.full(3, 2**63 - 1, np.int64)}, "past 2\\*\\*62"),
        ({"inserts": np.array(10**6)}, "counts 1000000 transitions from"),
    ],
)
def test_a_saved_replay_with_impossible_counters_is_refused(
    tmp_path: Any, change: dict[str, np.ndarray], match: str
) -> None:
    """Counters that would overflow later (the next insert, the next checkpoint's save: a
    traceback mid-run) or count more transitions than frames are refused at load."""
    _, records = run(60)
    replay = filed(records, 3 * 60)
    replay.save(tmp_path / "r.npz")
    with np.load(tmp_path / "r.npz") as z:
        saved = {k: z[k] for k in z.files}
    written = saved["written"]
    np.savez(tmp_path / "bad.npz", **{**saved, **change})
    back = FrameStackReplay(3 * 60, 3, FRAME, ACTION, 4, 3, 0.9)
    with pytest.raises(ValueError, match=match):
        back.load(tmp_path / "bad.npz")
    assert back.inserts == 0 and (back.written == 0).all()  # nothing changed
    assert written.dtype == back.written.dtype


def test_a_saved_replay_is_refused_from_its_headers_before_any_array_is_read(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small compressed file whose frames claim 64 MB (a zip bomb claims gigabytes) is
    refused on its header: np.load is never reached."""
    _, records = run(60)
    replay = filed(records, 3 * 60)
    replay.save(tmp_path / "r.npz")
    with np.load(tmp_path / "r.npz") as z:
        saved = {k: z[k] for k in z.files}
    saved["frames"] = np.zeros((64, 1000, 1000), np.uint8)
    np.savez_compressed(tmp_path / "bomb.npz", **saved)
    assert (tmp_path / "bomb.npz").stat().st_size < 1_000_000

    def no_reading(*a: Any, **k: Any) -> None:
        raise AssertionError("an array was read before its header was checked")

    monkeypatch.setattr(np, "load", no_reading)
    back = FrameStackReplay(3 * 60, 3, FRAME, ACTION, 4, 3, 0.9)
    with pytest.raises(ValueError, match=r"'frames' is uint8\[64, 1000, 1000\]"):
        back.load(tmp_path / "bomb.npz")
    (tmp_path / "not.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(ValueError, match="not an npz file"):
        back.load(tmp_path / "not.npz")


def test_frame_stacks_are_recognised_only_with_reset_padding() -> None:
    from actorq.envs import frame_stack

    assert frame_stack(FrameStackObservation(Flicker(), 4)) == 4
    assert frame_stack(gym.wrappers.TimeLimit(FrameStackObservation(Flicker(), 3), 5)) == 3
    assert frame_stack(FrameStackObservation(Flicker(), 4, padding_type="zero")) == 0
    assert frame_stack(Flicker()) == 0


def test_the_frames_table_rebuilds_batches_behind_the_ratio_rule() -> None:
    from actorq.replay.rate_limiter import SampleToInsertRatio
    from actorq.replay.specs import FramesSpec, adder_from_json, table_from_json

    spec = FramesSpec(3 * 200, 16, SampleToInsertRatio(1.0, 50, 100.0), 3, 4, 3, 0.9)
    again = table_from_json(spec.to_json())
    assert again == spec
    adder = adder_from_json({"kind": "frames"}).build(3, SPEC, actor=0)
    assert isinstance(adder, FrameAdder)
    table = spec.build(record_specs(FRAME, ACTION))
    assert table.kind == "frames" and spec.ring_capacity() is None
    naive, records = run(60)
    for rec in records:
        table.insert(rec)
    assert table.inserts == sum(len(r["stream"]) for r in records)
    batch = table.next_batch(np.random.default_rng(0))
    assert batch is not None and batch["obs"].shape == (16, 4, 5, 5)
    assert set(keyed(batch)) <= set(keyed(naive))
    assert table.sample_states(8, np.random.default_rng(1)).shape == (8, 4, 5, 5)


def test_states_come_from_complete_transitions_even_when_they_are_rare() -> None:
    """``sample_states`` (every publish's calibration) samples by rejection and only scans the
    replay when that finds nothing: 3 complete transitions among ~600 held slots still give
    states, each one of theirs; an empty replay gives none."""
    from actorq.replay.frames import FIRST

    replay = FrameStackReplay(600 * 10, 600, FRAME, ACTION, 4, 3, 0.9)
    assert replay.sample_states(4, np.random.default_rng(0)).shape == (0, 4, 5, 5)
    rng = np.random.default_rng(1)

    def records(streams: np.ndarray, flags: int) -> Batch:
        m = len(streams)
        return {"stream": streams, "frame": rng.integers(0, 256, (m, 5, 5), dtype=np.uint8),
                "flags": np.full(m, flags, np.uint8), "action": np.zeros(m, np.int64),
                "reward": np.ones(m, np.float32)}  # fmt: skip

    replay.insert(records(np.arange(600), FIRST))  # every stream starts; only stream 0 steps on
    for _ in range(5):
        replay.insert(records(np.zeros(1, np.int64), 0))
    s, a = replay.valid_starts()
    assert len(s) == 3
    states = replay.sample_states(16, np.random.default_rng(2))
    assert states.shape == (16, 4, 5, 5)
    allowed = {o.tobytes() for o in replay.transitions(s, a)["obs"]}
    assert {o.tobytes() for o in states} <= allowed
