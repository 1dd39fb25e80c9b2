"""The evaluations' seeds (:mod:`actorq.core.seeds`): fixed, and kept in their band."""

from __future__ import annotations

from actorq.core.seeds import CONFIRM_SEED, confirm_seed


def test_confirmations_keep_their_seeds_and_stay_below_a_million() -> None:
    assert [confirm_seed(k, 10) for k in range(3)] == [CONFIRM_SEED, CONFIRM_SEED + 100, 30_200]
    assert confirm_seed(9_699, 100) == CONFIRM_SEED + 100 * 9_699  # the last set that fits
    for episodes in (1, 100, 5_000, 100_000):
        for k in (10**4, 10**5, 123_457):
            assert CONFIRM_SEED <= confirm_seed(k, episodes) <= 1_000_000 - episodes
