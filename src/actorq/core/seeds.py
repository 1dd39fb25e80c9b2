"""The environment seeds every evaluation draws from, one set for actorq's runs and for other
frameworks' bench cells, so both sides of a comparison play the same episodes.

Every seed an evaluation uses (its episodes' env seeds and its action generator's) lies in
``[EVAL_SEEDS_START, EVAL_SEEDS_END)``, for any episode count the configs allow; training seeds
are kept out of that band (:func:`clear_of_evaluations`), so no actor trains on, or explores
with the generator of, an episode it is then evaluated on.
"""

from __future__ import annotations

EVAL_SEED = 10_000  # periodic evaluations
FINAL_EVAL_SEED = 20_000  # held-out seeds for the final report
CONFIRM_SEED = 30_000  # confirmation of a target reached

EVAL_SEEDS_START = EVAL_SEED
EVAL_SEEDS_END = 1_000_000


def confirm_seed(k: int, episodes: int) -> int:
    """The first seed of the ``k``-th confirmation of ``episodes`` episodes: fresh seeds each
    time, sets disjoint for any episode count. The sets stay in the evaluations' band: past the
    last set that fits (the 9,700th for up to 100 episodes) they start over at the first."""
    stride = max(100, episodes)
    sets = (EVAL_SEEDS_END - CONFIRM_SEED) // stride
    if sets < 1:  # the configs' bound on eval_episodes keeps this from happening
        raise ValueError(f"{episodes} confirmation episodes do not fit below {EVAL_SEEDS_END}")
    return CONFIRM_SEED + stride * (k % sets)


def clear_of_evaluations(seed: int, envs: int = 1) -> int:
    """A training seed whose ``envs`` environments (seeded ``seed .. seed + envs - 1``) stay out
    of the evaluations' band: ``seed`` itself where they do, else ``seed`` moved past the band
    (by a fixed offset for a given ``envs``, so distinct seeds stay distinct)."""
    if seed + envs > EVAL_SEEDS_START and seed < EVAL_SEEDS_END:
        return seed + (EVAL_SEEDS_END - EVAL_SEEDS_START) + envs
    return seed
