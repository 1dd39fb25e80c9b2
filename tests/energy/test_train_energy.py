"""Every run records its energy and carbon: as metrics while it trains and in its summary."""

import json
from pathlib import Path

import pytest

from actorq import DQNConfig, train
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
