"""The house's import contracts (pyproject.toml's [tool.importlinter]): kept by the code, and
broken by an import that goes the wrong way, so CI would catch one that comes back."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.is_file(), reason="import-linter not installed")


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the package under ``src`` with the project's contracts."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("layering") / "src"
    shutil.copytree(ROOT / "src" / "actorq", src / "actorq", ignore=shutil.ignore_patterns("*.pyc"))
    return src


def test_the_code_keeps_the_contracts(tree: Path) -> None:
    r = _lint(tree)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 kept, 0 broken" in r.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # a world reaching up into an agent
        ("graphopt/simulator.py", "from actorq.agents.go import networks", "leaves"),
        # a lazy import counts too: a world reading a run directory
        ("chip/cost.py", "def _f():\n    from actorq.run import load_run_config", "leaves"),
        # a cycle between two packages (replay already imports actorq.types)
        ("types.py", "import actorq.replay.ring", "cycles"),
    ],
)
def test_a_wrong_way_import_breaks_a_contract(
    tree: Path, tmp_path: Path, module: str, line: str, broken: str
) -> None:
    src = tmp_path / "src"
    shutil.copytree(tree, src)
    path = src / "actorq" / module
    path.write_text(path.read_text() + "\n\n" + line + "\n")
    r = _lint(src)
    assert r.returncode != 0
    # the contract named is broken (a world's upward import is also a cycle: agents use worlds)
    verdicts = [ln for ln in r.stdout.splitlines() if ln.endswith(("KEPT", "BROKEN"))]
    assert any(broken in ln.lower() and ln.endswith("BROKEN") for ln in verdicts), r.stdout
