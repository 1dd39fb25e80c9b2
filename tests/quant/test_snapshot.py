import itertools
import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actorq.errors import SnapshotError
from actorq.quant.snapshot import PolicySnapshot, PolicySpec, make_snapshot
from tests.damage import HOSTILE_JSON, HOWS, damaged


def layers(spec: PolicySpec, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    d = spec.dims
    return [
        (rng.standard_normal((a, b)).astype(np.float32) / np.sqrt(a), np.zeros(b, np.float32))
        for a, b in itertools.pairwise(d)
    ]


SPEC = PolicySpec(4, (32, 32), 2)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8", "int4"])
def test_roundtrip(precision: str) -> None:
    snap = make_snapshot(layers(SPEC), SPEC, precision, version=7)
    back = PolicySnapshot.from_bytes(snap.to_bytes())
    assert back.version == 7 and back.precision == precision and back.spec == SPEC
    assert back.checksum() == snap.checksum()
    for k, v in snap.tensors.items():
        np.testing.assert_array_equal(back.tensors[k], v)


def test_int8_of_wide_policy_is_at_most_27_percent_of_fp32() -> None:
    spec = PolicySpec(24, (2048, 2048, 2048), 6)
    ls = layers(spec)
    fp32 = len(make_snapshot(ls, spec, "fp32", 0).to_bytes())
    int8 = len(make_snapshot(ls, spec, "int8", 0).to_bytes())
    fp16 = len(make_snapshot(ls, spec, "fp16", 0).to_bytes())
    assert int8 / fp32 <= 0.27
    assert fp16 / fp32 <= 0.51


def test_flipped_byte_is_refused() -> None:
    data = bytearray(make_snapshot(layers(SPEC), SPEC, "int8", 1).to_bytes())
    data[-10] ^= 0xFF  # inside the tensor data
    with pytest.raises(SnapshotError, match="checksum"):
        PolicySnapshot.from_bytes(bytes(data))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_weights_are_refused(bad: float) -> None:
    ls = layers(SPEC)
    ls[1][0][3, 4] = bad
    snap = make_snapshot(ls, SPEC, "fp32", 1)  # checksum is valid: the learner produced NaN
    with pytest.raises(SnapshotError, match="NaN or Inf"):
        PolicySnapshot.from_bytes(snap.to_bytes())


def test_fp16_overflow_is_refused() -> None:
    ls = layers(SPEC)
    ls[0][0][0, 0] = 1e6
    with pytest.raises(SnapshotError, match="NaN or Inf"):
        PolicySnapshot.from_bytes(make_snapshot(ls, SPEC, "fp16", 1).to_bytes())


def test_truncated_and_foreign_data_are_refused() -> None:
    data = make_snapshot(layers(SPEC), SPEC, "int8", 1).to_bytes()
    for bad in (b"", data[:5], data[: len(data) // 2], b"\x00" * 100):
        with pytest.raises(SnapshotError):
            PolicySnapshot.from_bytes(bad)
    header = json.dumps({"__metadata__": {"format": "something-else"}}).encode()
    with pytest.raises(SnapshotError, match="not an actorq"):
        PolicySnapshot.from_bytes(struct.pack("<Q", len(header)) + header)


def test_wrong_shapes_are_refused() -> None:
    snap = make_snapshot(layers(SPEC), SPEC, "fp32", 1)
    tensors = dict(snap.tensors)
    tensors["w1"] = tensors["w1"][:, :5].copy()
    bad = PolicySnapshot(1, "fp32", SPEC, tensors)
    with pytest.raises(SnapshotError, match="not a well-formed fp32"):
        PolicySnapshot.from_bytes(bad.to_bytes())


def test_spec_rejects_nonpositive_sizes() -> None:
    with pytest.raises(ValueError):
        PolicySpec(4, (0, 3), 2)


def _header_bytes(data: bytes) -> tuple[int, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return n, data[8 : 8 + n]


@pytest.mark.parametrize(
    "old, new",
    [
        ('\\"head\\": \\"q\\"', '\\"head\\": \\"c\\"'),  # q head read as something else
        ('"version":"7"', '"version":"8"'),
        ('\\"output_activation\\": \\"tanh\\"', '\\"output_activation\\": \\"none\\"'),
    ],
)
def test_header_is_covered_by_the_checksum(old: str, new: str) -> None:
    # A flipped bit in the metadata changes what the weights mean; it must be refused.
    spec = PolicySpec(4, (16,), 2, output_activation="tanh", head="q")
    data = make_snapshot(layers(spec), spec, "int8", 7).to_bytes()
    n, header = _header_bytes(data)
    text = header.decode()
    assert old in text, text
    bad = text.replace(old, new).encode()
    assert len(bad) == n  # same length: only the meaning changed
    with pytest.raises(SnapshotError, match="checksum"):
        PolicySnapshot.from_bytes(data[:8] + bad + data[8 + n :])


@pytest.mark.parametrize("scale", [3e38, 0.0, -1.0])
def test_absurd_scales_are_refused(scale: float) -> None:
    spec = PolicySpec(4, (16, 16), 2)
    snap = make_snapshot(layers(spec), spec, "int8", 1)
    tensors = dict(snap.tensors)
    tensors["s1"] = np.full_like(tensors["s1"], scale)
    forged = PolicySnapshot(1, "int8", spec, tensors)  # a valid checksum over bad scales
    with pytest.raises(SnapshotError, match="scales"):
        PolicySnapshot.from_bytes(forged.to_bytes())


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupted_snapshots_are_refused_in_one_line(data: Any) -> None:
    spec = PolicySpec(4, (16, 16), 3, head=data.draw(st.sampled_from(["q", "categorical"])))
    blob = make_snapshot(layers(spec), spec, data.draw(st.sampled_from(
        ["fp32", "fp16", "int8", "int4"])), 3).to_bytes()  # fmt: skip
    how = data.draw(st.sampled_from([*HOWS, "hostile"]))
    if how == "hostile":  # a header of JSON the parser raises other errors on
        header = data.draw(st.sampled_from(HOSTILE_JSON))
        blob = struct.pack("<Q", len(header)) + header + blob[8 + _header_bytes(blob)[0] :]
    else:
        blob = damaged(blob, how, data, random_size=256)
    try:
        PolicySnapshot.from_bytes(blob)
    except SnapshotError as e:
        assert str(e) and "\n" not in str(e)
    else:  # accepted only if the corruption left every byte that matters intact
        assert how == "flip"


_FORGED_SPEC = PolicySpec(4, (8, 8), 2, obs_norm=True, obs_clip=5.0)
#: JSON values a forged header may carry: past float's and int64's range, non-finite, the wrong
#: kind
_HOSTILE_VALUES = [10**400, -(10**400), 2**63, float("inf"), float("nan"), -1, "8", None, [8, 8]]


@pytest.mark.parametrize(
    "value",
    _HOSTILE_VALUES,
    ids=["10**400", "-10**400", "2**63", "inf", "nan", "-1", "str", "null", "list"],
)
@pytest.mark.parametrize("name", [*_FORGED_SPEC.to_json(), "version"])
def test_a_resealed_header_with_hostile_values_is_read_or_refused_in_one_line(
    name: str, value: object
) -> None:
    """A header whose checksum was made over hostile values (a forged or resealed snapshot):
    each spec field, or the version, at any of them decodes or is one SnapshotError."""
    import safetensors.numpy

    from actorq.quant.snapshot import _checksum

    extras = {"obs_mean": np.zeros(4, np.float32), "obs_std": np.ones(4, np.float32)}
    snap = make_snapshot(layers(_FORGED_SPEC), _FORGED_SPEC, "int8", 1, extras=extras)
    header = snap.header()
    if name == "version":
        header["version"] = json.dumps(value)
    else:
        header["spec"] = json.dumps({**json.loads(header["spec"]), name: value})
    meta = {**header, "checksum": _checksum(header, snap.tensors)}
    blob = bytes(safetensors.numpy.save(snap.tensors, metadata=meta))
    try:
        PolicySnapshot.from_bytes(blob)
    except SnapshotError as e:
        assert "\n" not in str(e)
