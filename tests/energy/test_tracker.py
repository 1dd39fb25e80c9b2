"""EnergyTracker: real measurement on this machine, and failures that must not reach training."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from actorq.energy import EnergyReading, EnergyTracker


def _busy(seconds: float) -> int:
    x, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        x += 1
    return x


def test_measures_busy_work_end_to_end(tmp_path, monkeypatch) -> None:
    pytest.importorskip("codecarbon")
    monkeypatch.chdir(tmp_path)  # codecarbon writes emissions.csv to the cwd by default
    tracker = EnergyTracker(measure_power_secs=1.0)
    tracker.start()
    assert tracker.available
    _busy(1.0)
    mid = tracker.snapshot()
    _busy(0.5)
    final = tracker.stop()
    assert mid.ok and final.ok
    assert 0 < mid.kwh <= final.kwh
    assert 0 < mid.kg_co2 <= final.kg_co2
    # a 2-core VM without RAPL: power modelled from TDP and load
    if not Path("/sys/class/powercap/intel-rapl").exists():
        assert final.estimated
    assert final.as_metrics() == {"energy/kwh": final.kwh, "energy/kg_co2": final.kg_co2}
    assert final.as_summary()["energy_kwh"] == final.kwh
    assert tracker.stop() == final  # idempotent
    assert list(tmp_path.iterdir()) == []  # no files unless output_dir is given


def test_output_dir_receives_codecarbon_csv(tmp_path) -> None:
    pytest.importorskip("codecarbon")
    with EnergyTracker(output_dir=tmp_path, measure_power_secs=1.0) as t:
        _busy(0.3)
    assert t.stop().ok
    assert (tmp_path / "emissions.csv").is_file()


class _Raising:
    def __init__(self, where: str, **kwargs: Any) -> None:
        self.where = where
        if where == "init":
            raise RuntimeError("boom in init")

    def start(self) -> None:
        if self.where == "start":
            raise OSError("boom in start")

    def _measure_power_and_energy_if_stale(self) -> None:
        if self.where == "snapshot":
            raise ZeroDivisionError("boom in snapshot")

    def _prepare_emissions_data(self) -> Any:
        return type("D", (), {"energy_consumed": 1e-6, "emissions": 4e-7})()

    def stop(self) -> None:
        if self.where == "stop":
            raise ValueError("boom in stop")


@pytest.mark.parametrize("where", ["init", "start", "snapshot", "stop"])
def test_backend_failure_never_raises(where: str, capsys) -> None:
    t = EnergyTracker(backend=lambda **kw: _Raising(where, **kw))
    t.start()
    readings = [t.snapshot(), t.snapshot(), t.stop(), t.snapshot()]
    assert not t.available
    assert not readings[-1].ok and readings[-1].as_metrics() == {}
    assert readings[-1].as_summary() == {
        "energy_kwh": None,
        "energy_kg_co2": None,
        "energy_estimated": None,
    }
    err = capsys.readouterr().err
    assert err.count("energy tracking unavailable") == 1  # one warning line, not one per call
    assert f"boom in {where}" in err


def test_a_failing_snapshot_stops_codecarbon(capsys) -> None:
    made: list[_Raising] = []

    def backend(**kw: Any) -> _Raising:
        made.append(_Stops("snapshot", **kw))
        return made[-1]

    t = EnergyTracker(backend=backend)
    t.start()
    assert not t.snapshot().ok and made[0].stopped  # no sampling thread left behind


class _Stops(_Raising):
    stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_a_dependency_codecarbon_lacks_is_named(monkeypatch, capsys) -> None:
    def backend(**kw: Any) -> Any:
        raise ImportError("No module named 'pynvml'", name="pynvml")

    t = EnergyTracker(backend=backend)
    t.start()
    assert not t.available
    assert "codecarbon cannot import pynvml" in capsys.readouterr().err


def test_snapshot_then_failing_stop_is_unavailable() -> None:
    t = EnergyTracker(backend=lambda **kw: _Raising("stop", **kw))
    t.start()
    s = t.snapshot()
    assert s == EnergyReading(kwh=1e-6, kg_co2=4e-7, estimated=True, ok=True)
    assert not t.stop().ok


def test_missing_codecarbon_is_unavailable(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "codecarbon", None)  # import codecarbon -> ImportError
    t = EnergyTracker()
    t.start()
    assert not t.available
    assert not t.snapshot().ok and not t.stop().ok
    assert "codecarbon is not installed" in capsys.readouterr().err


def test_readings_add_only_when_both_were_measured() -> None:
    from actorq.energy import UNAVAILABLE, EnergyReading

    a = EnergyReading(kwh=1.0, kg_co2=0.5, estimated=False, ok=True)
    b = EnergyReading(kwh=2.0, kg_co2=0.25, estimated=True, ok=True)
    assert a.plus(b) == EnergyReading(kwh=3.0, kg_co2=0.75, estimated=True, ok=True)
    assert not a.plus(UNAVAILABLE).ok and not UNAVAILABLE.plus(a).ok
