"""Damage for fuzzing readers of files: the ways a file goes bad on disk or in transit."""

from __future__ import annotations

from hypothesis import strategies as st

HOWS = ("flip", "truncate", "random")
#: JSON that Python's parser fails on with what is not a JSONDecodeError: nesting past its
#: stack (a RecursionError) and integers past its 4,300 digits (a bare ValueError)
HOSTILE_JSON = [b"[" * 100_000, b'{"a": ' * 50_000, b'{"a": ' + b"9" * 5000 + b"}",
                b"[-" + b"1" * 4301 + b"]"]  # fmt: skip


def damaged(blob: bytes, how: str, data: st.DataObject, random_size: int = 64) -> bytes:
    """``blob`` with one bit flipped (``"flip"``), cut short (``"truncate"``), or replaced by
    up to ``random_size`` random bytes (``"random"``), drawn from ``data``."""
    out = bytearray(blob)
    if how == "flip" and out:
        i = data.draw(st.integers(0, len(out) - 1))
        out[i] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "truncate":
        out = out[: data.draw(st.integers(0, max(len(out) - 1, 0)))]
    elif how == "random":
        out = bytearray(data.draw(st.binary(max_size=random_size)))
    return bytes(out)
