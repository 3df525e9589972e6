"""Shared set-up of the fuzz targets (fuzz/fuzz_*.py): the repository root first on sys.path,
so the in-place build is what gets fuzzed, and atheris' entry point."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != ROOT:
    sys.path.insert(0, ROOT)
os.environ.setdefault("DPSELECT_ALLOW_INSECURE_RNG", "1")

import atheris  # noqa: E402


def main(test_one_input: Callable[[bytes], None]) -> None:
    """libFuzzer's command line (corpus directories, -max_total_time=..., -runs=...) and the loop."""
    import dpselect

    if not dpselect.__file__.startswith(ROOT + os.sep):
        raise SystemExit(f"fuzzing {dpselect.__file__}, not the build in {ROOT}: build in place first")
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
