"""The Ray backend's replay checkpoint reader (ShardedReplay.load) without a cluster: a file
is read by the local ring's one reader before any shard gets a byte, then dealt out as save()
gathered it. The shards here are stand-ins that record what they are sent."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actorq.distributed import ray_backend, wire
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.specs import UniformSpec
from actorq.types import ArraySpec

SPECS = {"obs": ArraySpec((3,), "float32"), "reward": ArraySpec((), "float32")}


class _Call:
    def __init__(self, sent: list[tuple[dict[str, np.ndarray], int]]) -> None:
        self.sent = sent

    def remote(self, payload: bytes, inserts: int) -> bool:
        self.sent.append((wire.decode_batch(payload)[0], inserts))
        return True  # a reply (a dead shard's is None: see _RayDying)


class _Shard:
    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, np.ndarray], int]] = []
        self.load = _Call(self.sent)


class _Backend:
    def __init__(self, shards: int, capacity: int) -> None:
        self.specs = SPECS
        self.replay_capacity = capacity
        self.shards = [_Shard() for _ in range(shards)]
        self.refreshed_after: list[int] = []  # how many shards had their part when polled

    def refresh_sizes(self) -> None:
        self.refreshed_after.append(sum(bool(s.sent) for s in self.shards))

    lost = 0

    def lose_items(self, n: int) -> None:
        self.lost += n

    def shard_sizes(self) -> list[int]:
        return [5] * len(self.shards)

    def shard_inserts(self) -> list[int]:
        return [5] * len(self.shards)


class _RayError(Exception):
    pass


class _GetTimeout(_RayError):
    """Ray's GetTimeoutError (a RayError)."""


class _Ray:
    exceptions = type("E", (), {"RayError": _RayError, "GetTimeoutError": _GetTimeout})

    @staticmethod
    def get(refs: Any, timeout: float | None = None) -> Any:
        return refs


class _RayDying(_Ray):
    @staticmethod
    def get(refs: Any, timeout: float | None = None) -> Any:
        if any(r is None for r in (refs if isinstance(refs, list) else [refs])):
            raise _RayError("actor died")  # a dead shard's answer
        return refs


@pytest.fixture
def replay(monkeypatch: pytest.MonkeyPatch) -> ray_backend.ShardedReplay:
    monkeypatch.setattr(ray_backend, "import_ray", lambda: _Ray)
    return ray_backend.ShardedReplay(_Backend(shards=2, capacity=100))  # type: ignore[arg-type]


def _save(path: Path, n: int, inserts: int | None = None, **over: np.ndarray) -> Path:
    arrays = {
        "obs": np.arange(3 * n, dtype=np.float32).reshape(n, 3),
        "reward": np.arange(n, dtype=np.float32),
        "_inserts": np.array(n if inserts is None else inserts, np.int64),
        **over,
    }
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def test_a_saved_replay_is_dealt_to_the_shards_as_save_gathered_it(
    replay: ray_backend.ShardedReplay, tmp_path: Path
) -> None:
    replay.load(_save(tmp_path / "r.npz", 7, inserts=40))
    shards = replay._b.shards  # type: ignore[attr-defined]
    (a, ia), (b, ib) = shards[0].sent[0], shards[1].sent[0]
    np.testing.assert_array_equal(a["reward"], [0, 2, 4, 6])
    np.testing.assert_array_equal(b["reward"], [1, 3, 5])
    np.testing.assert_array_equal(b["obs"][0], [3, 4, 5])
    assert ia == ib == 20  # the insert counter, split
    # the polled sizes are read again once every shard holds its part: a resumed run's first
    # snapshot calibrates on them (polled later, the replay said it was empty)
    assert replay._b.refreshed_after == [2]  # type: ignore[attr-defined]


def test_the_insert_count_is_dealt_to_the_shards_whole(
    replay: ray_backend.ShardedReplay, tmp_path: Path
) -> None:
    """41 inserts over 2 shards: 21 and 20, so their sum (the next checkpoint's count) is the
    file's; split by floor division, a count moved between backends lost one per move."""
    replay.load(_save(tmp_path / "r.npz", 7, inserts=41))
    assert [s.sent[0][1] for s in replay._b.shards] == [21, 20]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "over, why",
    [
        ({"reward": np.array([1.0, np.nan, 0.0], np.float32)}, "NaN"),
        ({"reward": np.zeros(2, np.float32)}, "differ in length"),
        ({"obs": np.zeros((3, 5), np.float32)}, "'obs'"),
        ({"_inserts": np.array([1, 2])}, "_inserts"),
    ],
)
def test_a_bad_replay_file_is_refused_before_any_shard_is_touched(
    replay: ray_backend.ShardedReplay, tmp_path: Path, over: dict[str, np.ndarray], why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        replay.load(_save(tmp_path / "r.npz", 3, **over))
    assert all(not s.sent for s in replay._b.shards)  # type: ignore[attr-defined]


def test_a_small_file_claiming_gigabytes_is_refused_from_its_header(
    replay: ray_backend.ShardedReplay, tmp_path: Path
) -> None:
    """A compressed member whose header claims 10**9 rows: refused before np.load allocates."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (10**9, 3)}
    )
    path = _save(tmp_path / "r.npz", 3)
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as out:
        with zipfile.ZipFile(path) as zf:
            for name in ("reward.npy", "_inserts.npy"):
                out.writestr(name, zf.read(name))
        out.writestr("obs.npy", header.getvalue() + b"\0" * 4096)  # 4 KB of the 12 GB
    with pytest.raises(ValueError, match="'obs' is float32\\[1000000000, 3\\]"):
        replay.load(tmp_path / "bomb.npz")
    assert all(not s.sent for s in replay._b.shards)  # type: ignore[attr-defined]


def test_shards_smaller_than_their_count_read_their_own_checkpoint_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--replay-size 2`` over 4 shards: each holds one item, 4 together; their save has 4 rows
    and reads back whole (not refused as more than the table's 2)."""
    table = UniformSpec(2, 1, SampleToInsertRatio(1.0, 1, 10.0))
    assert ray_backend.shard_capacity(table, 4) == 1
    assert ray_backend.shards_hold(table, 4) == 4
    assert ray_backend.shards_hold(UniformSpec(100, 1, table.limiter), 3) == 100
    monkeypatch.setattr(ray_backend, "import_ray", lambda: _Ray)
    replay = ray_backend.ShardedReplay(_Backend(shards=4, capacity=4))  # type: ignore[arg-type]
    replay.load(_save(tmp_path / "r.npz", 4))
    assert [len(s.sent[0][0]["reward"]) for s in replay._b.shards] == [1, 1, 1, 1]  # type: ignore[attr-defined]


class _Dumping:
    """A shard stand-in holding ``items`` oldest first, as ``ReplayShard.dump`` returns them."""

    def __init__(self, rewards: list[int], inserts: int | None = None) -> None:
        batch = {
            "obs": np.repeat(np.asarray(rewards, np.float32)[:, None], 3, axis=1),
            "reward": np.asarray(rewards, np.float32),
        }
        meta = None if inserts is None else {"inserts": inserts}  # the shard's count, dumped
        reply = wire.encode_batch(batch, meta)
        self.dump = type("D", (), {"remote": staticmethod(lambda: reply)})()


def test_a_ray_replay_saved_and_resumed_keeps_each_shards_items_oldest_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Items 0..15 were inserted round robin into 2 shards (shard 0 even, shard 1 odd). Saved
    shard after shard, a resumed shard held ``[0, 2, .., 14, 1, 3, .., 15]``'s halves: shard 0's
    newest (14) ahead of shard 1's oldest (1), so the next inserts evicted the newest data.
    Saved by age, each shard gets its own items back oldest first, and a local ring reading the
    same file (a Ray run resumed with --backend local) holds them oldest first."""
    from actorq.replay.ring import ReplayBuffer

    monkeypatch.setattr(ray_backend, "import_ray", lambda: _Ray)
    old = _Backend(shards=2, capacity=16)
    old.shards = [_Dumping(list(range(0, 16, 2))), _Dumping(list(range(1, 16, 2)))]  # type: ignore[list-item]
    old.shard_inserts = lambda: [8, 8]  # type: ignore[attr-defined]
    ray_backend.ShardedReplay(old).save(tmp_path / "r.npz")  # type: ignore[arg-type]
    ring = ReplayBuffer(16, SPECS)
    ring.load(tmp_path / "r.npz")
    np.testing.assert_array_equal(ring.all()["reward"], np.arange(16))
    new = _Backend(shards=2, capacity=16)
    ray_backend.ShardedReplay(new).load(tmp_path / "r.npz")  # type: ignore[arg-type]
    got = [s.sent[0][0]["reward"].tolist() for s in new.shards]
    assert got == [list(range(0, 16, 2)), list(range(1, 16, 2))]


def test_a_checkpoint_counts_each_shards_inserts_as_of_the_items_it_saves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Actors insert on through a Ray checkpoint: the counts the learner last polled (5 a
    shard) lag the 8 items each shard dumps. The file counts what the dumps say (9 and 8), so
    a ring resumed from it (on either backend) counts the inserts its items took."""
    monkeypatch.setattr(ray_backend, "import_ray", lambda: _Ray)
    b = _Backend(shards=2, capacity=16)
    b.shards = [_Dumping(list(range(0, 16, 2)), 9), _Dumping(list(range(1, 16, 2)), 8)]  # type: ignore[list-item]
    ray_backend.ShardedReplay(b).save(tmp_path / "r.npz")  # type: ignore[arg-type]
    with np.load(tmp_path / "r.npz") as z:
        assert int(z["_inserts"]) == 17 and len(z["reward"]) == 16


def test_a_resumed_shard_starts_its_limiter_where_the_checkpoint_left_it() -> None:
    """``ReplayShard.load`` puts the limiter at its centre; ``resume_at`` then moves it to its
    share of the checkpoint's lead, which ``lead`` reads back; the limiter holds from there
    (here: at the lead's upper bound, an insert must wait for a sample)."""
    import asyncio
    import json

    from actorq.distributed.ray_actors import ReplayShard
    from actorq.replay.specs import RatioGateSpec

    lim = SampleToInsertRatio(samples_per_insert=4.0, min_size_to_sample=10, error_buffer=20.0)
    specs = json.dumps({k: s.to_json() for k, s in SPECS.items()})
    table = json.dumps(UniformSpec(100, 8, lim).to_json())
    shard = ReplayShard(0, specs, table, json.dumps(RatioGateSpec(lim).to_json()), seed=0)
    items = {"obs": np.zeros((30, 3), np.float32), "reward": np.arange(30, dtype=np.float32)}

    async def go() -> tuple[float, float, bool, bool]:
        await shard.load(wire.encode_batch(items), 30)
        centre = await shard.lead()
        await shard.resume_at(lim.max_diff)  # a learner-bound run's actors at the limit
        one = wire.encode_batch({k: v[:1] for k, v in items.items()})
        blocked = not lim.can_insert(1, shard.inserts, shard.samples)
        waited = False
        try:
            await asyncio.wait_for(shard.insert(one), 0.2)
        except TimeoutError:
            waited = True
        return centre, await shard.lead(), blocked, waited

    centre, lead, blocked, waited = asyncio.run(go())
    assert centre == lim.offset and lead == lim.max_diff and blocked and waited

    # a batch the prefetcher took between load and resume_at stays charged to the position
    again = ReplayShard(0, specs, table, json.dumps(RatioGateSpec(lim).to_json()), seed=0)

    async def served_first() -> float:
        await again.load(wire.encode_batch(items), 30)
        await again.sample(8)
        await again.resume_at(lim.max_diff)
        return await again.lead()

    assert asyncio.run(served_first()) == lim.max_diff - 8


def test_the_shards_lead_is_summed_and_split_evenly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[float] = []

    class _Lead:
        def __init__(self, value: float) -> None:
            self.lead = type("L", (), {"remote": staticmethod(lambda: value)})()
            self.resume_at = type("R", (), {"remote": staticmethod(sent.append)})()

    monkeypatch.setattr(ray_backend, "import_ray", lambda: _Ray)
    b = _Backend(shards=2, capacity=100)
    b.shards = [_Lead(30.0), _Lead(50.0)]  # type: ignore[list-item]
    replay = ray_backend.ShardedReplay(b)  # type: ignore[arg-type]
    assert replay.lead == 80.0
    replay.resume_at(90.0)
    assert sent == [45.0, 45.0]


def test_a_shard_that_does_not_answer_leaves_the_lead_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checkpoint while a shard is dead or restarting saves no lead (the resume starts at
    the centre); a shard that dies before resume_at is skipped, the others still move."""

    sent: list[float] = []

    class _Shard2:
        def __init__(self, alive: bool) -> None:
            answer = (lambda *a: sent.append(a[0]) or 1.0) if alive else (lambda *a: None)
            self.lead = type("L", (), {"remote": staticmethod(lambda: answer(0.0))})()
            self.resume_at = type("R", (), {"remote": staticmethod(answer)})()

    monkeypatch.setattr(ray_backend, "import_ray", lambda: _RayDying)
    b = _Backend(shards=2, capacity=100)
    b.shards = [_Shard2(alive=False), _Shard2(alive=True)]  # type: ignore[list-item]
    replay = ray_backend.ShardedReplay(b)  # type: ignore[arg-type]
    assert replay.lead is None
    sent.clear()
    replay.resume_at(90.0)
    assert sent == [45.0]


@pytest.mark.parametrize(
    ("nodes", "actors", "shards"),
    [(2, 4, 4), (2, 64, 8), (3, 5, 2), (1, 3, 4), (3, 7, 5), (4, 4, 4), (2, 3, 3), (5, 9, 3)],
)
def test_every_replay_shard_gets_actors(nodes: int, actors: int, shards: int) -> None:
    """On 2 nodes with 4 actors and 4 shards, actors picked a local shard by their global index:
    shards 1 and 2 got no actor, never filled, and the learner sampled around them."""
    from actorq.distributed.ray_nodes import actor_nodes, actor_shards

    names = [f"node{k}" for k in range(nodes)]
    shards = min(shards, actors)  # as the backend caps them
    shard_node = [names[j % nodes] for j in range(shards)]  # as the backend places them
    placed = actor_nodes(names, actors)
    got = actor_shards(placed, shard_node)
    assert sorted(set(got)) == list(range(shards))
    for node, j in zip(placed, got, strict=True):
        if node in shard_node:  # an actor inserts on its own node where it has a shard
            assert shard_node[j] == node
    # a node's actors share its shards evenly
    for node in set(shard_node):
        counts = [got.count(j) for j, n in enumerate(shard_node) if n == node]
        assert max(counts) - min(counts) <= 1, (node, counts)


class _Held(_Shard):
    """A live shard holding rewards ``first, first + 1, ...``; ``None``: a dead one, whose
    every answer is Ray's error."""

    def __init__(self, first: int | None) -> None:
        super().__init__()
        n = 5
        items = {"obs": np.zeros((n, 3), np.float32), "reward": np.arange(n, dtype=np.float32)}
        if first is None:
            self.load = type("L", (), {"remote": staticmethod(lambda *a: None)})()
            answer: Any = None
        else:
            items["reward"] += first
            answer = wire.encode_batch(items)
        self.dump = type("D", (), {"remote": staticmethod(lambda: answer)})()
        self.peek = type("P", (), {"remote": staticmethod(lambda n, seed: answer)})()


@pytest.fixture
def one_dead(monkeypatch: pytest.MonkeyPatch) -> ray_backend.ShardedReplay:
    """Two shards, the second dead while the learner saves, samples or restores."""
    monkeypatch.setattr(ray_backend, "import_ray", lambda: _RayDying)
    b = _Backend(shards=2, capacity=100)
    b.shards = [_Held(0), _Held(None)]
    return ray_backend.ShardedReplay(b)  # type: ignore[arg-type]


def test_a_checkpoint_holds_the_shards_that_answer(
    one_dead: ray_backend.ShardedReplay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard dying while the learner saved raised Ray's error: the run failed there, its
    checkpoint not written (docs/distributed.md: the run goes on with the other shards)."""
    one_dead.save(tmp_path / "r.npz")
    with np.load(tmp_path / "r.npz") as saved:
        np.testing.assert_array_equal(saved["reward"], [0, 1, 2, 3, 4])
    err = capsys.readouterr().err
    assert "replay shard 1 did not answer (actor died)" in err and "not its 5" in err


def test_a_checkpoint_missing_a_dead_shard_says_so_when_resumed(
    one_dead: ray_backend.ShardedReplay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It looked like a whole checkpoint: only a warning while saving said it was not."""
    from actorq.replay.ring import ReplayBuffer
    from actorq.run.resume import load_replay

    one_dead.save(tmp_path / "r.npz")
    capsys.readouterr()
    load_replay(ReplayBuffer(100, SPECS), tmp_path / "r.npz")
    err = capsys.readouterr().err
    assert "lacks the items of replay shard(s) 1 (5 items), which died while it was saved" in err


class _Slow:
    """A reference to a live shard's answer that takes ``waits`` timed-out waits to come."""

    def __init__(self, answer: Any, waits: int) -> None:
        self.answer, self.waits = answer, waits


class _RaySlow(_Ray):
    @staticmethod
    def get(refs: Any, timeout: float | None = None) -> Any:
        if isinstance(refs, _Slow):
            if refs.waits > 0:
                refs.waits -= 1
                raise _GetTimeout("not yet")
            return refs.answer
        return refs


@pytest.fixture
def one_slow(monkeypatch: pytest.MonkeyPatch) -> ray_backend.ShardedReplay:
    """Two shards, the second alive but slower to save or restore than any deadline."""
    monkeypatch.setattr(ray_backend, "import_ray", lambda: _RaySlow)
    b = _Backend(shards=2, capacity=100)
    b.shards = [_Held(0), _Held(10)]
    slow = b.shards[1]
    dump, load = slow.dump.remote, slow.load.remote
    slow.dump = type("D", (), {"remote": staticmethod(lambda: _Slow(dump(), 3))})()
    slow.load = type("L", (), {"remote": staticmethod(lambda *a: _Slow(load(*a), 3))})()
    return ray_backend.ShardedReplay(b)  # type: ignore[arg-type]


def test_a_slow_live_shard_is_waited_for_not_left_out(
    one_slow: ray_backend.ShardedReplay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One 300 s deadline for every shard, whatever its size: a slow, live shard was taken
    for dead, its items missing from the checkpoint, or counted lost while its load went on
    and restored them."""
    one_slow.save(tmp_path / "r.npz")
    with np.load(tmp_path / "r.npz") as saved:
        assert sorted(saved["reward"].tolist()) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
        assert "_missing_shards" not in saved.files
    err = capsys.readouterr().err
    assert "did not answer" not in err
    assert err.count("replay shard 1 is still saving its 5 items") == 3
    one_slow.load(_save(tmp_path / "r.npz", 7))
    assert one_slow._b.lost == 0  # type: ignore[attr-defined]
    assert len(one_slow._b.shards[1].sent) == 1  # type: ignore[attr-defined]
    assert "replay shard 1 is still restoring its 3 items" in capsys.readouterr().err


def test_a_sample_is_drawn_from_the_shards_that_answer(
    one_dead: ray_backend.ShardedReplay, capsys: pytest.CaptureFixture[str]
) -> None:
    got = one_dead.sample_shards(10, np.random.default_rng(0))
    np.testing.assert_array_equal(got["reward"], [0, 1, 2, 3, 4])
    assert "replay shard 1 did not answer" in capsys.readouterr().err


def test_a_shard_dying_in_a_restore_loses_its_part(
    one_dead: ray_backend.ShardedReplay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one_dead.load(_save(tmp_path / "r.npz", 7))
    ((part, _),) = one_dead._b.shards[0].sent  # type: ignore[attr-defined]
    np.testing.assert_array_equal(part["reward"], [0, 2, 4, 6])
    assert one_dead._b.lost == 3  # type: ignore[attr-defined]  # the dead one's part
    assert "its 3 restored items lost" in capsys.readouterr().err
