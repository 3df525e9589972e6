"""The lint and type gates of CI, as tests: ``ruff check .`` and ``mypy`` (configured in
pyproject.toml) report nothing. They run only in a source tree with the versions pinned in the
``lint`` extra (``pip install -e ".[lint]"``): another version may find more, or less, and CI runs
the pinned ones (docs/testing.md, "Lint and types")."""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# mypy reads the whole package: about half a minute on an idle machine without its cache, several
# minutes on a loaded one.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _gate(tool: str) -> list[str]:
    """The command line that runs ``tool`` on this source tree, or a skip saying why it cannot."""
    pyproject = ROOT / "pyproject.toml"
    if not pyproject.is_file() or not (ROOT / "dpselect").is_dir():
        pytest.skip("not a source tree (the tests of an installed wheel): nothing to lint")
    pinned = re.search(rf'"{tool}==([^"]+)"', pyproject.read_text(encoding="utf-8"))
    assert pinned is not None, f"pyproject.toml's lint extra pins no {tool} version"
    try:
        installed = importlib.metadata.version(tool)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{tool} is not installed: pip install -e \".[lint]\"")
    if installed != pinned.group(1):
        pytest.skip(f"{tool} {installed} is installed, the gate is pinned at {pinned.group(1)}: "
                    "pip install -e \".[lint]\"")
    return [sys.executable, "-m", tool]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=850)


def test_ruff_finds_nothing() -> None:
    done = _run([*_gate("ruff"), "check", "--no-cache", "."])
    assert done.returncode == 0, f"ruff check . found something:\n{done.stdout}{done.stderr}"


def test_mypy_finds_nothing() -> None:
    done = _run(_gate("mypy"))
    assert done.returncode == 0, f"mypy found something:\n{done.stdout}{done.stderr}"
    assert done.stdout.startswith("Success: no issues found"), done.stdout
