"""The environment seeds every evaluation draws from, one set for actorq's runs and for other
frameworks' bench cells, so both sides of a comparison play the same episodes."""

from __future__ import annotations

EVAL_SEED = 10_000  # periodic evaluations
FINAL_EVAL_SEED = 20_000  # held-out seeds for the final report
CONFIRM_SEED = 30_000  # confirmation of a target reached


def confirm_seed(k: int, episodes: int) -> int:
    """The first seed of the ``k``-th confirmation of ``episodes`` episodes: fresh seeds each
    time, sets disjoint for any episode count."""
    return CONFIRM_SEED + max(100, episodes) * k
