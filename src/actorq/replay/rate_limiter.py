"""Samples-per-insert rate limiting with Reverb's ``SampleToInsertRatio`` semantics.

Reverb (Cassirer et al., 2021) keeps ``diff = inserts * samples_per_insert - samples`` within
``[min_diff, max_diff]`` once ``min_size_to_sample`` items are in, where
``min_diff = offset - error_buffer``, ``max_diff = offset + error_buffer`` and
``offset = samples_per_insert * min_size_to_sample``. Inserts block when they would push ``diff``
above ``max_diff``; samples block when they would push it below ``min_diff``. So every run —
fp32 or int8, fast or slow actors — consumes the same data per learner update, and a speedup
is the actors' speed, not a different replay ratio.

The limiter is a pure function of two counters, so it works across processes: actors read the
global insert and sample counters from shared memory, the learner its own.
"""

from __future__ import annotations

import dataclasses


def _slack(credit: float) -> float:
    """Rounding allowed in a comparison: with the least error buffer that cannot deadlock
    (:meth:`SampleToInsertRatio.min_error_buffer`) the gap between "may insert" and "may
    sample" is exactly empty, so an error of one ulp in ``inserts * samples_per_insert``
    (13 * 3.4 = 44.199999999999996) refused both sides at once: a deadlock."""
    return 1e-9 * max(1.0, abs(credit))


@dataclasses.dataclass(frozen=True)
class SampleToInsertRatio:
    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float

    def __post_init__(self) -> None:
        if self.samples_per_insert <= 0:
            raise ValueError("samples_per_insert must be positive")
        if self.min_size_to_sample < 1:
            raise ValueError("min_size_to_sample must be at least 1")
        if self.error_buffer < 0:
            raise ValueError("error_buffer must be non-negative")

    @property
    def offset(self) -> float:
        return self.samples_per_insert * self.min_size_to_sample

    @property
    def min_diff(self) -> float:
        return self.offset - self.error_buffer

    @property
    def max_diff(self) -> float:
        return self.offset + self.error_buffer

    def can_insert(self, num: int, inserts: int, samples: int) -> bool:
        # below min_size_to_sample the learner cannot sample, so an insert held back there
        # waits forever: an actor's chunk of k items crossing the threshold (n-step 1, k 16,
        # min 100: refused at 96 inserts) hung the run before its first update
        if inserts < self.min_size_to_sample:
            return True
        credit = (inserts + num) * self.samples_per_insert
        return credit - samples <= self.max_diff + _slack(credit)

    def can_sample(self, num: int, inserts: int, samples: int) -> bool:
        if inserts < self.min_size_to_sample:
            return False
        credit = inserts * self.samples_per_insert
        return credit - (samples + num) >= self.min_diff - _slack(credit)

    @staticmethod
    def min_error_buffer(batch_size: int, samples_per_insert: float, insert_chunk: int) -> float:
        """Smallest error buffer that cannot deadlock: when neither side may proceed,
        ``max_diff - spi*chunk < diff < min_diff + batch`` must be empty."""
        return (batch_size + samples_per_insert * insert_chunk) / 2.0
