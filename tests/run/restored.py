"""Watching a resume restore its checkpoint, for the tests of a run moved to another backend:
the replay's items (oldest first) and insert count as the new backend holds them right after it
read the checkpoint, and the rate limiter's place it was started at; and what the checkpoint
itself holds, to compare with."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actorq.types import Batch

#: a backend's replay view -> its items, oldest first, and its whole-run insert count
Reader = Callable[[Any], tuple[Batch, int]]


def read_ring(replay: Any) -> tuple[Batch, int]:
    """The local and in-process backends' replay (the learner's table over a host ring)."""
    return replay.ring.all(), int(replay.ring.inserts)


def watch(monkeypatch: pytest.MonkeyPatch, read: Reader = read_ring) -> dict[str, Any]:
    """What the next resume restores, filled in as it does: ``items`` and ``inserts`` (by
    ``read``, once the checkpoint's replay is loaded), ``lead`` (the rate limiter's place it
    is started at) and ``backend`` (the backend's class)."""
    from actorq.run import loop

    seen: dict[str, Any] = {}
    load_replay, resume_where = loop.load_replay, loop._resume_where_it_stopped

    def load(replay: Any, path: Path) -> None:
        load_replay(replay, path)
        seen["items"], seen["inserts"] = read(replay)

    def resumed(cfg: Any, publisher: Any, backend: Any, c: Any, *rest: Any) -> Any:
        seen["backend"] = type(backend).__name__
        resume_at = backend.replay.resume_at

        def at(lead: float) -> None:
            seen["lead"] = lead
            resume_at(lead)
            # a local table's own place, read before the learner samples (Ray's shards are
            # sampled by the prefetcher at once: their split is test_ray_backend's)
            seen["held"] = getattr(backend.replay, "lead", None) if read is read_ring else None

        backend.replay.resume_at = at
        return resume_where(cfg, publisher, backend, c, *rest)

    monkeypatch.setattr(loop, "load_replay", load)
    monkeypatch.setattr(loop, "_resume_where_it_stopped", resumed)
    return seen


def saved(run: Path) -> tuple[Batch, int, float, dict[str, Any]]:
    """The checkpoint's replay (oldest first), its insert count, the limiter's place and the
    counters."""
    counters = json.loads((run / "checkpoint" / "state.json").read_text())["counters"]
    with np.load(run / "checkpoint" / "replay.npz", allow_pickle=False) as z:
        items = {k: z[k] for k in z.files if not k.startswith("_")}
        inserts = int(z["_inserts"])
    return items, inserts, float(counters["replay_lead"]), counters


def assert_same_items(got: Batch, want: Batch) -> None:
    """Every field of ``want``, item for item in the same order."""
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def placement(run: Path) -> tuple[str, int]:
    """The backend and actor count the run's config.json records."""
    d = json.loads((run / "config.json").read_text())
    return d["backend"], d["actors"]
