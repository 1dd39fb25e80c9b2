"""A preallocated numpy ring buffer of transitions with uniform sampling."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from actorq.replay.npz import check_header, npz_headers
from actorq.types import ArraySpec, Batch


class ReplayBuffer:
    """Fixed-capacity FIFO of transitions. All memory is allocated up front, so a run that
    would not fit fails at start, not hours in."""

    def __init__(self, capacity: int, specs: dict[str, ArraySpec]) -> None:
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        self.capacity = int(capacity)
        self.specs = dict(specs)
        self._data = {k: s.zeros(self.capacity) for k, s in self.specs.items()}
        self._next = 0  # slot the next item goes to
        self.size = 0
        self.inserts = 0  # total ever inserted (monotone; for rate limiting and logs)

    def add(self, batch: Batch) -> None:
        n = len(next(iter(batch.values())))
        if n == 0:
            return
        if n > self.capacity:  # only the newest `capacity` items would survive anyway
            batch = {k: v[-self.capacity :] for k, v in batch.items()}
            self.inserts += n - self.capacity
            n = self.capacity
        idx = (self._next + np.arange(n)) % self.capacity
        for k, arr in self._data.items():
            arr[idx] = batch[k]
        self._next = (self._next + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.inserts += n

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = rng.integers(0, self.size, size=batch_size)
        return {k: arr[idx] for k, arr in self._data.items()}

    def all(self) -> Batch:
        """The stored items, oldest first (copies)."""
        if self.size < self.capacity:
            return {k: v[: self.size].copy() for k, v in self._data.items()}
        order = (self._next + np.arange(self.capacity)) % self.capacity
        return {k: v[order] for k, v in self._data.items()}

    # -- safe persistence (npz, never pickle) ------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Oldest first, with the slot the next item goes to (``_next``): a load puts every
        item back in its slot, so a resumed run's restored generator samples what it would
        have (``sample`` draws slots, not ages)."""
        data = self.all()
        arrays: dict[str, np.ndarray] = {
            "_inserts": np.array(self.inserts, np.int64), "_next": np.array(self._next, np.int64),
            **data,
        }  # fmt: skip
        np.savez(path, **arrays)  # type: ignore[arg-type]

    def load(self, path: str | Path) -> None:
        """Replace the contents with a saved replay; ``ValueError`` (nothing changed) unless
        every field is there with this buffer's shapes and dtypes and they agree in length."""
        headers = npz_headers(path)  # sizes checked before any array is read
        missing = set(self.specs) - set(headers)
        if missing:
            raise ValueError(f"replay file lacks fields {sorted(missing)}")
        for k, spec in self.specs.items():  # dtypes: after reading (a same-kind cast is taken)
            check_header(headers, k, tuple(spec.shape), most=self.capacity)
        for k in ("_inserts", "_next"):
            if k in headers:
                check_header(headers, k, ())
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in self.specs}
            inserts = z["_inserts"] if "_inserts" in z.files else None
            slot = z["_next"] if "_next" in z.files else None
        lengths = {len(v) if v.ndim else -1 for v in data.values()}
        if len(lengths) != 1 or -1 in lengths:
            raise ValueError("replay fields differ in length")
        for k, v in data.items():
            spec = self.specs[k]
            if v.shape[1:] != spec.shape or not np.can_cast(v.dtype, spec.dtype, "same_kind"):
                raise ValueError(f"replay field {k!r} is {v.dtype}{list(v.shape[1:])}, "
                                 f"expected {spec.dtype}{list(spec.shape)}")  # fmt: skip
            if v.dtype.kind == "f" and not np.isfinite(v).all():
                raise ValueError(f"replay field {k!r} has NaN or Inf")
            if spec.outside(v):  # an action index the network has no output for, a discount > 1
                raise ValueError(
                    f"replay field {k!r} holds values outside [{spec.low}, {spec.high}]"
                )
        n = lengths.pop()
        for name, x in (("_inserts", inserts), ("_next", slot)):
            if x is not None and (x.shape != () or x.dtype.kind not in "iu"):
                raise ValueError(f"replay {name} is not an integer")
        if slot is not None and not 0 <= int(slot) <= n:
            raise ValueError(f"replay _next {int(slot)} is not a slot of its {n} items")
        self._next, self.size = 0, 0
        self.add(data)
        if slot is not None and n == self.capacity:  # a full ring: each item to its own slot
            for arr in self._data.values():
                arr[:] = np.roll(arr, int(slot), axis=0)
            self._next = int(slot) % self.capacity
        self.inserts = max(int(inserts), n) if inserts is not None else n
