"""Every run records its energy and carbon: as metrics while it trains and in its summary."""

import json
from pathlib import Path

import pytest

from actorq import DQNConfig, train
from actorq.energy import EnergyReading
from actorq.logging import read_metrics

pytest.importorskip("codecarbon")


def _cfg(tmp: Path, **kw: object) -> DQNConfig:
    base: dict = dict(
        actors=0, envs_per_actor=8, total_steps=3_000, min_replay_size=500, eval_every=10**9,
        stop_at_target=False, progress=False, log_every=0.5, run_dir=str(tmp),
    )  # fmt: skip
    base.update(kw)
    return DQNConfig(**base)


def test_run_logs_energy_and_writes_it_to_the_summary(tmp_path: Path) -> None:
    r = train(_cfg(tmp_path))
    assert r.energy_kwh is not None and r.energy_kwh > 0
    assert r.energy_kg_co2 is not None and r.energy_kg_co2 > 0
    assert isinstance(r.energy_estimated, bool)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["energy_kwh"] == r.energy_kwh
    kwh = [v for _, v in read_metrics(tmp_path)["energy/kwh"]]
    assert kwh and kwh == sorted(kwh)  # cumulative while training


def test_energy_off_records_nothing(tmp_path: Path) -> None:
    r = train(_cfg(tmp_path, energy=False))
    assert r.energy_kwh is None
    assert "energy/kwh" not in read_metrics(tmp_path)


def _counters(run: Path) -> dict:
    return json.loads((run / "checkpoint" / "state.json").read_text())["counters"]


def test_a_resumed_run_reports_the_energy_of_all_its_segments(tmp_path: Path) -> None:
    first = train(_cfg(tmp_path, total_steps=2_000))
    assert first.energy_kwh is not None and first.energy_kg_co2 is not None
    # the checkpoint carries the total so far
    assert _counters(tmp_path)["energy_kwh"] == pytest.approx(first.energy_kwh)
    second = train(_cfg(tmp_path, resume=str(tmp_path), total_steps=3_500, run_dir=None))
    assert second.energy_kwh is not None and second.energy_kg_co2 is not None
    # the whole run's: the first segment's and the second's (each > 0), not the last one's
    assert second.energy_kwh > first.energy_kwh
    assert second.energy_kg_co2 > first.energy_kg_co2
    assert _counters(tmp_path)["energy_kwh"] == pytest.approx(second.energy_kwh)
    kwh = [v for s, v in read_metrics(tmp_path)["energy/kwh"] if s > 2_000]
    assert kwh and min(kwh) >= first.energy_kwh  # the metrics go on from the total too


def test_a_segment_not_measured_leaves_no_whole_run_energy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from actorq.run import loop

    with monkeypatch.context() as m:  # the first segment ran where codecarbon was missing
        m.setattr(loop, "codecarbon_installed", lambda: False)
        train(_cfg(tmp_path, total_steps=2_000))
    assert _counters(tmp_path)["energy_kwh"] is None
    r = train(_cfg(tmp_path, resume=str(tmp_path), total_steps=3_500, run_dir=None))
    # one segment's energy is not the run's: none, and said so at the start
    assert r.energy_kwh is None and r.energy_kg_co2 is None
    assert json.loads((tmp_path / "summary.json").read_text())["energy_kwh"] is None
    assert "the summary will have none" in capsys.readouterr().err


class _Clock:
    """A tracker of 3.6 kW, constant: its kWh are the seconds it measured over 1,000."""

    def __init__(self, country: str) -> None:
        self.t0: float | None = None

    def start(self) -> None:
        import time

        self.t0 = time.perf_counter()

    def snapshot(self) -> EnergyReading:
        import time

        assert self.t0 is not None
        s = time.perf_counter() - self.t0
        return EnergyReading(kwh=s / 1000, kg_co2=s / 2000, estimated=True, ok=True)

    stop = snapshot


def test_energy_covers_the_window_the_runs_clock_measures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The actors' start (here a second longer) is outside the run's clock (time to target,
    wall time) and outside its energy: a ratio of either compares the same work."""
    import time

    from actorq.run import loop

    real = loop.start_backend

    def slow(*args: object, **kw: object) -> object:
        time.sleep(1.0)
        return real(*args, **kw)

    monkeypatch.setattr(loop, "start_backend", slow)
    monkeypatch.setattr(loop, "EnergyTracker", _Clock)
    r = train(_cfg(tmp_path))
    assert r.energy_kwh is not None
    assert r.energy_kwh * 1000 == pytest.approx(r.wall_time_s, abs=0.3)


def test_a_resume_past_its_budget_adds_no_energy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actorq.run import loop

    monkeypatch.setattr(loop, "EnergyTracker", _Clock)
    first = train(_cfg(tmp_path, total_steps=2_000))
    again = train(_cfg(tmp_path, resume=str(tmp_path), total_steps=2_000, run_dir=None))
    assert first.energy_kwh is not None and again.energy_kwh == first.energy_kwh


def test_actors_get_their_first_snapshot_after_the_tracker_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """codecarbon's start takes ~1.5 s; actors step from their first snapshot on, so a tracker
    started after the first publish leaves that work outside the run's clock and energy."""
    from actorq.run import loop
    from actorq.run.publisher import Publisher

    events: list[str] = []

    class Tracker(_Clock):
        def start(self) -> None:
            events.append("tracker")
            super().start()

    real = Publisher.publish

    def publish(self: Publisher, *args: object, **kw: object) -> None:
        events.append("publish")
        real(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "EnergyTracker", Tracker)
    monkeypatch.setattr(Publisher, "publish", publish)
    train(_cfg(tmp_path, actors=1, total_steps=1_000))
    assert events[:2] == ["tracker", "publish"]
