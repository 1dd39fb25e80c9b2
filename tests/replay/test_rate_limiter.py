import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from actorq.replay.rate_limiter import SampleToInsertRatio


def test_reverb_semantics() -> None:
    rl = SampleToInsertRatio(samples_per_insert=4.0, min_size_to_sample=10, error_buffer=8.0)
    # below min size: inserts always allowed, samples never
    assert rl.can_insert(10, 0, 0)
    assert not rl.can_sample(1, 9, 0)
    # at min size: diff = offset = 40; may sample down to min_diff = 32
    assert rl.can_sample(8, 10, 0)
    assert not rl.can_sample(9, 10, 0)
    # inserts allowed while diff stays <= max_diff = 48: 12 inserts -> 48
    assert rl.can_insert(2, 10, 0)
    assert not rl.can_insert(3, 10, 0)
    # sampling makes room for inserts
    assert rl.can_insert(3, 10, 4)


def test_long_run_ratio_holds_within_error_buffer() -> None:
    rl = SampleToInsertRatio(8.0, 100, error_buffer=64.0)
    inserts = samples = 0
    for step in range(20_000):
        # a fast actor (inserts 4 at a time) and a learner sampling batches of 32
        if step % 3 and rl.can_insert(4, inserts, samples):
            inserts += 4
        elif rl.can_sample(32, inserts, samples):
            samples += 32
        diff = inserts * 8 - samples
        if inserts > 100:
            assert rl.min_diff - 32 <= diff <= rl.max_diff
    assert abs(samples / (inserts - 100) - 8.0) < 0.1


def _run_without_deadlock(rl: SampleToInsertRatio, batch: int, chunk: int, turns: int) -> None:
    """A learner sampling ``batch`` whenever it may, else an actor inserting ``chunk``; fails
    at the first turn neither may."""
    inserts = samples = 0
    for _ in range(turns):
        if rl.can_sample(batch, inserts, samples):
            samples += batch
        elif rl.can_insert(chunk, inserts, samples):
            inserts += chunk
        else:
            pytest.fail(f"deadlock at inserts={inserts} samples={samples}")


def test_min_error_buffer_prevents_deadlock() -> None:
    batch, spi, chunk = 32, 8.0, 4
    rl = SampleToInsertRatio(spi, 50, SampleToInsertRatio.min_error_buffer(batch, spi, chunk))
    _run_without_deadlock(rl, batch, chunk, 5000)


@settings(max_examples=200, deadline=None)
@given(
    batch=st.integers(1, 512),
    spi=st.floats(0.05, 256),
    chunk=st.integers(1, 64),
    min_size=st.integers(1, 5000),
)
@example(batch=1, spi=3.4, chunk=1, min_size=1)  # 13 * 3.4 rounds below 44.2: both refused
def test_no_settings_deadlock_from_the_first_insert(
    batch: int, spi: float, chunk: int, min_size: int
) -> None:
    """An actor inserts ``chunk`` items at a time from the start (k envs, n-step): the chunk
    that crosses min_size_to_sample was refused while the learner could not yet sample."""
    rl = SampleToInsertRatio(spi, min_size, SampleToInsertRatio.min_error_buffer(batch, spi, chunk))
    _run_without_deadlock(rl, batch, chunk, 3 * min_size // chunk + 200)


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        SampleToInsertRatio(0, 1, 1)
    with pytest.raises(ValueError):
        SampleToInsertRatio(1, 0, 1)
