"""Shared fixtures. Tests share 2 cores with actor processes: every library gets one thread."""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def quiet() -> dict[str, Any]:
    """Config fields every short test run shares: no progress bar, no log lines, no energy
    tracker (codecarbon's start-up costs more than a short run)."""
    return {"progress": False, "log_every": 1e9, "energy": False}


@pytest.fixture
def tiny(tmp_path: Path, quiet: dict[str, Any]) -> Callable[..., Any]:
    """``tiny("ppo", total_steps=..., ...)``: a small, quiet, in-process (``actors=0``) config
    of any agent, writing into the test's temporary directory (``sub`` names the run)."""
    from actorq.agents import config_class

    def make(agent: str, sub: str = "run", **kw: Any) -> Any:
        base: dict[str, Any] = {"actors": 0, "run_dir": str(tmp_path / sub), **quiet}
        base.update(kw)
        return config_class(agent)(**base)

    return make


@pytest.fixture(autouse=True)
def _graph_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # suite graphs built by tests go to a throwaway cache, never the user's
    monkeypatch.setenv("ACTORQ_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
