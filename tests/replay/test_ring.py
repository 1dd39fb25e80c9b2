import numpy as np
import pytest

from actorq.replay.ring import ReplayBuffer
from actorq.types import ArraySpec

SPECS = {"obs": ArraySpec((2,), "float32"), "reward": ArraySpec((), "float32")}


def batch(start: int, n: int) -> dict[str, np.ndarray]:
    v = np.arange(start, start + n, dtype=np.float32)
    return {"obs": np.stack([v, -v], 1), "reward": v}


def test_fifo_overwrite_keeps_newest() -> None:
    rb = ReplayBuffer(5, SPECS)
    rb.add(batch(0, 3))
    rb.add(batch(3, 4))  # wraps
    assert rb.size == 5 and rb.inserts == 7
    np.testing.assert_array_equal(rb.all()["reward"], [2, 3, 4, 5, 6])
    rb.add(batch(7, 12))  # larger than capacity
    np.testing.assert_array_equal(rb.all()["reward"], [14, 15, 16, 17, 18])
    assert rb.inserts == 19


def test_sample_only_stored_items_and_fields_stay_aligned() -> None:
    rb = ReplayBuffer(100, SPECS)
    rb.add(batch(0, 10))
    s = rb.sample(1000, np.random.default_rng(0))
    assert set(np.unique(s["reward"])) <= set(range(10))
    np.testing.assert_array_equal(s["obs"][:, 0], s["reward"])
    assert len(np.unique(s["reward"])) == 10  # uniform over all stored items


def test_empty_sample_and_bad_capacity() -> None:
    with pytest.raises(RuntimeError):
        ReplayBuffer(3, SPECS).sample(1, np.random.default_rng(0))
    with pytest.raises(ValueError):
        ReplayBuffer(0, SPECS)


def test_save_load_roundtrip(tmp_path) -> None:
    rb = ReplayBuffer(4, SPECS)
    rb.add(batch(0, 6))
    rb.save(tmp_path / "r.npz")
    rb2 = ReplayBuffer(4, SPECS)
    rb2.load(tmp_path / "r.npz")
    assert rb2.inserts == 6 and rb2.size == 4
    np.testing.assert_array_equal(rb2.all()["reward"], rb.all()["reward"])


@pytest.mark.parametrize("added", [3, 8, 11, 16])
def test_a_loaded_ring_samples_and_overwrites_as_the_saved_one(tmp_path, added: int) -> None:
    """``sample`` draws slots: a load that put the items back oldest-first from slot 0 made a
    resumed run's restored generator draw other transitions than the run it continues."""
    rb = ReplayBuffer(8, SPECS)
    for start in range(0, added, 3):  # as actors add: a few at a time, wrapping the ring
        rb.add(batch(start, min(3, added - start)))
    rb.save(tmp_path / "r.npz")
    back = ReplayBuffer(8, SPECS)
    back.load(tmp_path / "r.npz")
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    np.testing.assert_array_equal(rb.sample(16, a)["reward"], back.sample(16, b)["reward"])
    rb.add(batch(100, 2))
    back.add(batch(100, 2))  # the same oldest items go
    np.testing.assert_array_equal(rb.all()["reward"], back.all()["reward"])


def test_a_ring_saved_without_its_slot_or_with_a_bad_one(tmp_path) -> None:
    rb = ReplayBuffer(4, SPECS)
    rb.add(batch(0, 6))
    data = {"_inserts": np.array(6), **rb.all()}
    np.savez(tmp_path / "old.npz", **data)  # an older checkpoint's: oldest first from slot 0
    old = ReplayBuffer(4, SPECS)
    old.load(tmp_path / "old.npz")
    np.testing.assert_array_equal(old.all()["reward"], rb.all()["reward"])
    np.savez(tmp_path / "bad.npz", _next=np.array(9), **data)
    with pytest.raises(ValueError, match="_next 9 is not a slot of its 4 items"):
        ReplayBuffer(4, SPECS).load(tmp_path / "bad.npz")
