"""A replay ring mirrored on the learner's device (Menger's "learner input pipeline that never
starves", for one GPU): batches are gathered there, so an update never waits on a host copy.

The host ring stays the source of truth (checkpoints save it, ``--resume`` loads it, and the
mirror is rebuilt from it); the device copy receives each insert once. Sampling draws its
indices with the host ring's own rule from the same generator, so a device batch holds exactly
the items the host ring would have returned: runs with ``--actors 0`` stay deterministic, and
the sampled distribution is the host's by construction. Only the indices cross to the device
(8 bytes an item, from pinned memory, without blocking).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from actorq.replay.ring import ReplayBuffer
from actorq.types import ArraySpec, Batch


def to_device(batch: Batch, device: torch.device) -> dict[str, torch.Tensor]:
    """A batch on the learner's device. Tensors already there pass through (a device-resident
    replay's batches); numpy arrays go to a CUDA device from pinned memory without blocking
    the host (a pageable copy waits for every queued kernel: a sync per update)."""
    out: dict[str, torch.Tensor] = {}
    for k, v in batch.items():
        t = v if isinstance(v, torch.Tensor) else torch.as_tensor(v)
        if t.device != device:
            if device.type == "cuda" and t.device.type == "cpu":
                t = t.pin_memory().to(device, non_blocking=True)
            else:
                t = t.to(device)
        out[k] = t
    return out


def replay_bytes(capacity: int, specs: dict[str, ArraySpec]) -> int:
    per_item = sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize for s in specs.values())
    return capacity * per_item


def replay_device(cfg: Any, capacity: int, specs: dict[str, ArraySpec]) -> str | None:
    """The device a local backend's replay is mirrored on, or None (host only).

    ``replay_on_device``: ``yes`` (on the learner's device), ``no``, or ``auto``: yes on a CUDA
    learner when the replay takes at most a quarter of the device's memory."""
    choice = getattr(cfg, "replay_on_device", "no")
    device = str(getattr(cfg, "device", "cpu"))
    if choice == "no" or (choice == "auto" and not device.startswith("cuda")):
        return None
    if choice == "auto":
        total = torch.cuda.get_device_properties(torch.device(device)).total_memory
        if replay_bytes(capacity, specs) > total // 4:
            return None
    return device


class DeviceReplayBuffer(ReplayBuffer):
    """:class:`ReplayBuffer` with a copy of every field on ``device``; ``sample`` returns
    device tensors."""

    def __init__(self, capacity: int, specs: dict[str, ArraySpec], device: str) -> None:
        super().__init__(capacity, specs)
        self.device = torch.device(device)
        self._dev = {
            k: torch.from_numpy(arr).to(self.device) for k, arr in self._data.items()
        }  # zeros, as the host ring starts

    def _to_device(self, x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(x))
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)

    def add(self, batch: Batch) -> None:
        start = self._next
        n = min(len(next(iter(batch.values()))), self.capacity)
        super().add(batch)
        if n == 0:
            return
        idx = (start + np.arange(n)) % self.capacity
        t_idx = self._to_device(idx)
        for k, arr in self._data.items():
            self._dev[k].index_copy_(0, t_idx, self._to_device(arr[idx]))

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = rng.integers(0, self.size, size=batch_size)  # the host ring's rule
        t_idx = self._to_device(idx)
        return {k: buf.index_select(0, t_idx) for k, buf in self._dev.items()}  # type: ignore[misc]
