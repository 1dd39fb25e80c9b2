"""Learner state packing (`actorq.agents.state`): modules and optimizers to safetensors + JSON."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actorq.agents.state import pack, unpack
from actorq.checkpoint import load, save


class _Shared(torch.nn.Module):
    """One trunk under three names, as SB3's CnnPolicy holds its feature extractor."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = torch.nn.Linear(3, 4)
        self.pi_trunk = self.trunk
        self.vf_trunk = self.trunk
        self.head = torch.nn.Linear(4, 2)


def test_a_tensor_held_under_several_names_is_stored_once_and_restored(tmp_path: Path) -> None:
    torch.manual_seed(0)
    src = _Shared()
    opt = torch.optim.Adam(src.parameters(), 1e-3)
    tensors, meta = pack({"m": src}, {"o": opt})
    assert "m.trunk.weight" in tensors and "m.pi_trunk.weight" not in tensors
    assert meta["aliases"]["m.vf_trunk.bias"] == "m.trunk.bias"
    save(
        tmp_path / "ckpt", tensors, {"learner": meta, "counters": {}, "rng": {}}
    )  # safetensors refuses shared memory
    loaded, state, _ = load(tmp_path / "ckpt")
    dst = _Shared()
    unpack(loaded, state["learner"], {"m": dst}, {"o": torch.optim.Adam(dst.parameters())},
           torch.device("cpu"))  # fmt: skip
    for k, v in src.state_dict().items():
        assert torch.equal(dst.state_dict()[k], v), k
    assert dst.pi_trunk is dst.trunk  # still one module


def test_bad_aliases_are_refused() -> None:
    m = _Shared()
    tensors, meta = pack({"m": m}, {})
    with pytest.raises(ValueError, match="aliases"):
        unpack(tensors, {**meta, "aliases": {"m.pi_trunk.weight": "m.nope"}}, {"m": m}, {},
               torch.device("cpu"))  # fmt: skip


def test_modules_without_sharing_keep_their_layout() -> None:
    m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
    tensors, meta = pack({"q": m}, {})
    assert set(tensors) == {f"q.{k}" for k in m.state_dict()} and "aliases" not in meta
