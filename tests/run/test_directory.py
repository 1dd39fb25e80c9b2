"""Reading a run directory's config.json: the flat form every actorq version wrote, the nested
form by group, and old GO runs holding knobs retired since."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actorq.agents.go.config import GOConfig
from actorq.errors import CheckpointError
from actorq.run import load_run_config
from actorq.rundir import RunDir

#: what GO runs wrote before these knobs were retired, at their defaults
RETIRED_DEFAULTS = {"explore_guided": False, "explore_cut": 0.0, "cost_input": False,
                    "imitate_guide": 0.0, "start": "none"}  # fmt: skip


def _run(tmp_path: Path, d: dict[str, Any]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    RunDir(run).write_config_json(d)
    return run


def test_an_old_go_run_with_retired_knobs_at_their_defaults_loads(tmp_path: Path) -> None:
    cfg = GOConfig(sil_coef=1.0, imitate="best", hidden=32)
    run = _run(tmp_path, {**cfg.to_json(), **RETIRED_DEFAULTS})
    assert load_run_config(run) == cfg


@pytest.mark.parametrize(
    "key, value",
    [("cost_input", True), ("start", "best"), ("explore_guided", True), ("explore_cut", 0.5),
     ("imitate_guide", 1.0)],
)  # fmt: skip
def test_an_old_go_run_that_used_a_retired_knob_is_one_line(
    tmp_path: Path, key: str, value: Any
) -> None:
    run = _run(tmp_path, {**GOConfig().to_json(), **RETIRED_DEFAULTS, key: value})
    with pytest.raises(CheckpointError) as e:
        load_run_config(run)
    msg = str(e.value)
    flag = "--" + key.replace("_", "-")
    assert "\n" not in msg and f"{flag} was retired" in msg and "commit 67fd709" in msg
    assert "config.json" in msg


def test_a_nested_config_json_loads_like_the_flat_one(tmp_path: Path) -> None:
    cfg = GOConfig(sil_coef=1.0, explore=0.5, hidden=32)
    flat = cfg.to_json()
    nested = {k: v for k, v in flat.items() if k not in ("sil_coef", "explore", "hidden")}
    nested |= {"exploration": {"sil_coef": 1.0, "explore": 0.5}, "policy": {"hidden": 32}}
    assert load_run_config(_run(tmp_path, nested)) == cfg
