"""The bytes that cross a process or machine boundary between Ray actors.

actorq never lets pickled data of its own cross a boundary (a snapshot is data, never code). Ray
serializes ``bytes``, ``str`` and plain numbers without pickle (a tuple, a numpy scalar or any
other object goes through pickle), so everything actorq sends through Ray is one of those:
transition batches are a safetensors blob (flat arrays + a JSON header), snapshots are already
safetensors (the parameter server's behind their version, :func:`encode_versioned`), counters and
status are JSON. Ray's own control messages (actor handles, object references) stay Ray's
business, inside the cluster's trust boundary.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from actorq.types import Batch

_META_KEY = "actorq"
_VERSION = struct.Struct("<q")  # a snapshot's version ahead of its bytes; -1: none published


def encode_batch(batch: Batch, meta: dict[str, Any] | None = None) -> bytes:
    """A batch of transitions (and optional JSON-able metadata) as safetensors bytes."""
    arrays = {k: np.ascontiguousarray(v) for k, v in batch.items()}
    return st_save(arrays, metadata={_META_KEY: json.dumps(meta or {})})


def decode_batch(data: bytes) -> tuple[Batch, dict[str, Any]]:
    """Inverse of :func:`encode_batch`; raises ``ValueError`` on malformed bytes."""
    try:
        arrays = st_load(data)
        meta = _read_meta(data)
    except Exception as e:  # safetensors raises its own error types
        raise ValueError(f"malformed transition payload: {e}") from None
    return arrays, meta


def _read_meta(data: bytes) -> dict[str, Any]:
    # safetensors layout: 8-byte little-endian header length, then the JSON header.
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    raw = header.get("__metadata__", {}).get(_META_KEY, "{}")
    out = json.loads(raw)
    if not isinstance(out, dict):
        raise ValueError("metadata is not a JSON object")
    return out


def concat(parts: list[Batch]) -> Batch:
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def encode_versioned(version: int, data: bytes) -> bytes:
    """A snapshot's bytes behind its version, as one ``bytes`` (a ``(version, bytes)`` tuple
    would cross through pickle)."""
    return _VERSION.pack(version) + data


def decode_versioned(payload: bytes) -> tuple[int, bytes]:
    """Inverse of :func:`encode_versioned`; raises ``ValueError`` on a payload too short."""
    if len(payload) < _VERSION.size:
        raise ValueError(f"malformed snapshot payload: {len(payload)} B, no version")
    return int(_VERSION.unpack_from(payload)[0]), payload[_VERSION.size :]
