"""Energy and carbon accounting of a run (codecarbon).

QuaRL (Lam et al., TMLR 2022) reports, besides time-to-target speedups, the energy and CO2 of
training with quantized actors against fp32 actors. :class:`EnergyTracker` measures the same
quantities for a whole machine, so the learner and every actor process are covered together.
"""

from actorq.energy.tracker import (
    DEFAULT_COUNTRY,
    METRIC_KG_CO2,
    METRIC_KWH,
    SUMMARY_ESTIMATED,
    SUMMARY_KG_CO2,
    SUMMARY_KWH,
    UNAVAILABLE,
    EnergyReading,
    EnergyTracker,
    RunEnergy,
    codecarbon_installed,
    country_problem,
)

__all__ = [
    "DEFAULT_COUNTRY",
    "METRIC_KG_CO2",
    "METRIC_KWH",
    "SUMMARY_ESTIMATED",
    "SUMMARY_KG_CO2",
    "SUMMARY_KWH",
    "UNAVAILABLE",
    "EnergyReading",
    "EnergyTracker",
    "RunEnergy",
    "codecarbon_installed",
    "country_problem",
]
