"""The package's modules: each imports on its own, first thing in a fresh interpreter; the public
faces of split modules export what they did; no module is over the line limit."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dpselect

ROOT = Path(__file__).resolve().parent.parent
# Where the dpselect under test was imported from (the source tree, or an install): child
# interpreters must import the same one.
IMPORTED_FROM = Path(dpselect.__file__).resolve().parent.parent

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
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(IMPORTED_FROM), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr


# What other modules, the tests, the benchmarks and the fuzz targets import from each public face
# (module: names). The implementation lives in underscored modules beside it.
FACES = {
    "dpselect.ingest.rows": [
        "MAX_CODES", "NULL_PRIVACY_UNITS", "ColumnTypeError", "KeyFactorizer", "NullPrivacyUnitError",
        "NullPrivacyUnitsDropped", "PartitionCounts", "RowCounter", "arrow_from_numpy", "check_column_types",
        "import_pyarrow", "key_type",
    ],
    "dpselect.io.files": [
        "DEFAULT_BLOCK_SIZE", "IN_MEMORY_ENV", "INPUT_FORMATS", "OUTPUT_FORMATS", "BatchSource", "ColumnError",
        "InputError", "OutputError", "ValueColumnError", "check_destination", "coalesce", "csv_delimiter",
        "decimal_ids", "detect_format", "in_memory_budget", "open_batches", "read_ahead", "write_outputs",
        "write_table",
    ],
    "dpselect.audit.certify": ["aggregate_metrics", "certificate", "composed_delta", "threshold_release_delta"],
}


@pytest.mark.parametrize("face", sorted(FACES))
def test_each_public_face_exports_what_it_did(face: str) -> None:
    module = importlib.import_module(face)
    assert sorted(module.__all__) == sorted(set(module.__all__))
    assert set(FACES[face]) <= set(module.__all__)
    for name in FACES[face]:
        value = getattr(module, name)
        if isinstance(value, type) or callable(value):
            # Named after the face, where it is imported from (tracebacks, reprs, pickles).
            assert value.__module__ in (face, "dpselect.io.outputs"), (name, value.__module__)


# The project keeps its modules short: one purpose each.
MAX_LINES = 700


def test_no_module_is_over_the_line_limit() -> None:
    long = {str(path.relative_to(ROOT)): n for path in sorted((ROOT / "dpselect").rglob("*.py"))
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}
