"""The package's modules: each imports on its own, first thing in a fresh interpreter."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The modules other code imports by name (the CLI's, the front ends', the audit's), each of which
# must import first, before any other part of the package.
ENTRY_MODULES = [
    "dpselect",
    "dpselect.cli",
    "dpselect.io.files",
    "dpselect.io.outputs",
    "dpselect.io.progress",
    "dpselect.ingest.rows",
    "dpselect.ingest.pipeline",
    "dpselect.audit.certify",
]


@pytest.mark.parametrize("module", ENTRY_MODULES)
def test_each_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
