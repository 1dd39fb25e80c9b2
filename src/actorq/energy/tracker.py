"""Machine-level energy (kWh) and carbon (kg CO2eq) of a run, on codecarbon's offline tracker.

QuaRL (Lam et al., "QuaRL: Quantization for Fast and Environmentally Sustainable Reinforcement
Learning", TMLR 2022) reports the carbon of training with quantized actors as a ratio to fp32
actors. This module gives the two quantities behind that ratio for one run.

Contract for the experiment loop (``actorq.experiment.train``)::

    tracker = EnergyTracker(country_iso_code=cfg_country)   # never raises
    tracker.start()                                         # never raises
    ...
    reading = tracker.snapshot()                            # periodically; never raises
    logger.log(step, reading.as_metrics())                  # {} when not ok
    ...
    final = tracker.stop()                                  # once, at the end; never raises
    summary.update(final.as_summary())                      # energy_kwh, energy_kg_co2, ...

* ``start()`` blocks ~1.5 s (codecarbon detects the hardware): call it before the loop's
  wall clock starts, so time-to-target does not include it. ``stop()`` is safe in a
  ``finally:`` whether or not ``start()`` succeeded; a second ``stop()`` returns the same reading.
* Every method is guarded: a missing codecarbon, or any exception inside it, makes the tracker
  *unavailable*; it prints one warning line to stderr (once per tracker) and every later
  reading has ``ok=False``. Training must go on regardless.
* Readings are cumulative since :meth:`start`; a resumed run adds its earlier segments'
  total, kept in its checkpoint (:meth:`EnergyReading.plus`; ``actorq.run.loop``).
* ``tracking_mode="machine"``: the whole machine's CPU and RAM power, so the learner and all
  actor processes are covered together (and so is anything else running on the machine: bench
  runs should have the machine to themselves).
* ``estimated`` is True when CPU power is not read from a hardware counter (RAPL, Power Gadget,
  powermetrics, Windows EMI) but modelled from the CPU's TDP and load, as codecarbon does on
  machines without ``/sys/class/powercap``. RAM power is always a model.
* Nothing is written to the run directory unless ``output_dir`` is given (then codecarbon's own
  ``emissions.csv`` goes there); codecarbon's logging is set to errors only.

Metric names (CSV/TensorBoard) and summary keys are the constants below; ``actorq report``
reads them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actorq.errors import short

#: metrics.csv / TensorBoard names (fixed names: the same in every run, every backend)
METRIC_KWH = "energy/kwh"
METRIC_KG_CO2 = "energy/kg_co2"
#: summary.json keys
SUMMARY_KWH = "energy_kwh"
SUMMARY_KG_CO2 = "energy_kg_co2"
SUMMARY_ESTIMATED = "energy_estimated"

#: Grid whose average carbon intensity converts kWh to CO2 when no country is given. A fixed
#: country rather than codecarbon's IP geolocation keeps the number offline and reproducible
#: (the same run gives the same CO2 on every machine); the US average mix is the reference many
#: ML carbon reports use (e.g. Strubell et al., ACL 2019). Fp32/quantized CO2 ratios do not
#: depend on it (one intensity for both runs): they equal the energy ratios.
DEFAULT_COUNTRY = "USA"

#: codecarbon CPU modes that read power from a hardware counter (anything else is a model)
_MEASURED_CPU_MODES = frozenset(
    {"intel_rapl", "intel_power_gadget", "windows_emi", "apple_powermetrics"}
)


@dataclasses.dataclass(frozen=True)
class EnergyReading:
    """Energy and carbon since the tracker started; ``ok=False`` when unavailable."""

    kwh: float
    kg_co2: float
    estimated: bool
    ok: bool

    def as_metrics(self) -> dict[str, float]:
        """``{"energy/kwh": ..., "energy/kg_co2": ...}`` for the metric logger; empty if not ok."""
        if not self.ok:
            return {}
        return {METRIC_KWH: self.kwh, METRIC_KG_CO2: self.kg_co2}

    def plus(self, other: EnergyReading) -> EnergyReading:
        """The two readings together (a run's earlier segments and this one); not ok unless
        both are: a segment not measured leaves no whole-run total."""
        if not (self.ok and other.ok):
            return UNAVAILABLE
        return EnergyReading(
            kwh=self.kwh + other.kwh,
            kg_co2=self.kg_co2 + other.kg_co2,
            estimated=self.estimated or other.estimated,
            ok=True,
        )

    def as_summary(self) -> dict[str, Any]:
        """Summary keys; ``None`` values when not ok (the report then says "not recorded")."""
        if not self.ok:
            return {SUMMARY_KWH: None, SUMMARY_KG_CO2: None, SUMMARY_ESTIMATED: None}
        return {
            SUMMARY_KWH: self.kwh,
            SUMMARY_KG_CO2: self.kg_co2,
            SUMMARY_ESTIMATED: self.estimated,
        }


UNAVAILABLE = EnergyReading(kwh=0.0, kg_co2=0.0, estimated=True, ok=False)


def _codecarbon_backend(**kwargs: Any) -> Any:
    from codecarbon import OfflineEmissionsTracker

    # Importing codecarbon sets its logger to INFO, and the tracker logs its set-up before it
    # applies log_level: quiet the logger in between.
    logging.getLogger("codecarbon").setLevel(logging.ERROR)

    return OfflineEmissionsTracker(**kwargs)


def codecarbon_installed() -> bool:
    """Whether the [bench] extra's codecarbon is importable here (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("codecarbon") is not None


@functools.cache
def grid_countries() -> frozenset[str] | None:
    """The ISO 3166 alpha-3 codes codecarbon has an energy mix for (its global energy mix data:
    for any other code it silently takes the world average), or None without codecarbon or
    where its data cannot be read (a release that moved it)."""
    if not codecarbon_installed():
        return None
    try:
        from codecarbon.input import DataSource  # its data's paths; no pandas, no tracker

        with open(DataSource().global_energy_mix_data_path, encoding="utf-8") as f:
            return frozenset(code for code in json.load(f) if isinstance(code, str))
    except Exception:  # any failure: the code's form is still checked
        return None


def country_problem(code: str) -> str | None:
    """Why ``code`` is not a grid a run's CO2 can be computed for (the tail of a line that
    names the setting), or None: three ASCII capital letters (ISO 3166 alpha-3, e.g. USA), and
    one codecarbon has an energy mix for where it is installed."""
    if not (len(code) == 3 and code.isascii() and code.isalpha() and code.isupper()):
        return f"must be an ISO 3166 alpha-3 code in capitals (e.g. USA), got {short(code)}"
    known = grid_countries()
    if known is not None and code not in known:
        return f"{code}: codecarbon has no energy mix for this code (ISO 3166 alpha-3, e.g. USA)"
    return None


class EnergyTracker:
    """Whole-machine energy and carbon of a run; see the module docstring for the contract.

    ``backend`` builds the underlying tracker from codecarbon's keyword arguments (default:
    ``codecarbon.OfflineEmissionsTracker``); tests inject failing ones.
    """

    def __init__(
        self,
        country_iso_code: str = DEFAULT_COUNTRY,
        *,
        output_dir: str | Path | None = None,
        measure_power_secs: float = 5.0,
        carbon_intensity_g_per_kwh: float | None = None,
        backend: Callable[..., Any] | None = None,
    ) -> None:
        self.country_iso_code = country_iso_code
        self.output_dir = None if output_dir is None else Path(output_dir)
        self.measure_power_secs = measure_power_secs
        self.carbon_intensity_g_per_kwh = carbon_intensity_g_per_kwh
        self._backend = backend or _codecarbon_backend
        self._tracker: Any = None
        self._available = True
        self._warned = False
        self._estimated = True
        self._last = UNAVAILABLE

    @property
    def available(self) -> bool:
        """False once codecarbon is missing or has failed; readings then have ``ok=False``."""
        return self._available

    def _fail(self, reason: str) -> EnergyReading:
        self._available = False
        self._tracker = None
        self._last = UNAVAILABLE
        if not self._warned:
            self._warned = True
            print(
                f"actorq: warning: energy tracking unavailable ({reason}); training goes on",
                file=sys.stderr,
                flush=True,
            )
        return UNAVAILABLE

    def start(self) -> None:
        """Start measuring (takes ~1 s: codecarbon detects the hardware). Never raises."""
        if not self._available or self._tracker is not None:
            return
        kwargs: dict[str, Any] = {
            "country_iso_code": self.country_iso_code,
            "tracking_mode": "machine",
            "measure_power_secs": self.measure_power_secs,
            "log_level": "error",
            # several trackers (a bench cell's and its run's, parallel tests) may coexist
            "allow_multiple_runs": True,
            # "csv" is codecarbon's OutputMethod.CSV (emissions.csv); [] writes nothing
            "output_methods": ["csv"] if self.output_dir is not None else [],
        }
        if self.output_dir is not None:
            kwargs["output_dir"] = str(self.output_dir)
        if self.carbon_intensity_g_per_kwh is not None:
            kwargs["force_carbon_intensity_g_co2e_kwh"] = self.carbon_intensity_g_per_kwh
        try:
            tracker = self._backend(**kwargs)
            tracker.start()
            if getattr(tracker, "_start_time", 0.0) is None:
                # codecarbon swallows its own errors in start() and leaves the tracker unstarted
                raise RuntimeError("codecarbon did not start")
        except ImportError as e:
            if e.name in (None, "codecarbon"):
                self._fail("codecarbon is not installed: pip install 'actorq[bench]'")
            else:  # installed, but a package it imports is not (a --no-deps install)
                self._fail(f"codecarbon cannot import {e.name}: pip install 'actorq[bench]'")
            return
        except Exception as e:  # a broken tracker must never stop training
            self._fail(f"{type(e).__name__}: {e}")
            return
        self._tracker = tracker
        self._estimated = _is_estimated(tracker)

    def snapshot(self) -> EnergyReading:
        """Energy and carbon so far. Never raises. The first call takes ~0.1 s (codecarbon
        loads its carbon-intensity data), later ones < 1 ms: fine every log interval."""
        if self._tracker is None:
            return self._last if self._last.ok else UNAVAILABLE
        try:
            t = self._tracker
            t._measure_power_and_energy_if_stale()
            data = t._prepare_emissions_data()
            reading = self._reading(data.energy_consumed, data.emissions)
        except Exception as e:
            with contextlib.suppress(Exception):  # its sampling thread, not left running
                t.stop()
            return self._fail(f"{type(e).__name__}: {e}")
        self._last = reading
        return reading

    def stop(self) -> EnergyReading:
        """Stop measuring and return the final reading (later calls return it again)."""
        if self._tracker is None:
            return self._last if self._last.ok else UNAVAILABLE
        t, self._tracker = self._tracker, None
        try:
            t.stop()
            data = getattr(t, "final_emissions_data", None)
            if data is None:
                raise RuntimeError("codecarbon returned no final reading")
            reading = self._reading(data.energy_consumed, data.emissions)
        except Exception as e:
            return self._fail(f"{type(e).__name__}: {e}")
        self._last = reading
        return reading

    def _reading(self, kwh: Any, kg: Any) -> EnergyReading:
        kwh, kg = float(kwh), float(kg)
        if not (kwh >= 0.0 and kg >= 0.0):  # NaN or negative: not a measurement
            raise ValueError(f"invalid reading: {kwh} kWh, {kg} kg CO2")
        return EnergyReading(kwh=kwh, kg_co2=kg, estimated=self._estimated, ok=True)

    def __enter__(self) -> EnergyTracker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RunEnergy:
    """A run's energy over all its segments: ``before``, its earlier segments' total (kept in its
    checkpoint; not ok where one was not measured), plus this segment's ``tracker``. The same
    calls as :class:`EnergyTracker`, whose readings it adds to ``before``."""

    def __init__(self, tracker: EnergyTracker, before: EnergyReading) -> None:
        self.tracker, self.before = tracker, before

    def start(self) -> None:
        self.tracker.start()

    def snapshot(self) -> EnergyReading:
        return self.before.plus(self.tracker.snapshot())

    def stop(self) -> EnergyReading:
        return self.before.plus(self.tracker.stop())


def _is_estimated(tracker: Any) -> bool:
    """True unless codecarbon reads the CPU's power from a hardware counter.

    Asks codecarbon which mode its CPU meter uses (``cpu_load``/``constant`` are TDP models);
    when that cannot be read, falls back to the absence of the Linux powercap (RAPL) interface.
    """
    try:
        modes = [getattr(h, "_mode", None) for h in tracker._hardware]
    except Exception:
        return not Path("/sys/class/powercap/intel-rapl").exists()
    return not any(m in _MEASURED_CPU_MODES for m in modes)
