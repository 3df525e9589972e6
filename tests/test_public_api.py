"""What semver covers is declared (the README's "What semver covers"): ``dir(dpselect)`` shows the
public API only, the public subpackages load on first use, and every other module is underscored
or says "Internal" in its docstring or its package's."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import dpselect

PACKAGE = Path(dpselect.__file__).resolve().parent
PUBLIC_SUBPACKAGES = {"spark", "rainbow", "personalized", "audit", "testing", "datasets"}


def test_dir_shows_the_public_api_only() -> None:
    shown = {name for name in dir(dpselect) if not name.startswith("__")}
    assert shown == set(dpselect.__all__) | PUBLIC_SUBPACKAGES | {"sum", "mean", "min", "max"}


def test_every_name_in_all_exists() -> None:
    for name in dpselect.__all__:
        assert getattr(dpselect, name) is not None, name


def test_the_public_subpackages_load_on_first_use() -> None:
    code = ("import sys, dpselect\n"
            "assert not {'dpselect.spark', 'dpselect.audit', 'dpselect.rainbow', 'dpselect.personalized',\n"
            "            'pyspark', 'scipy', 'pandas', 'polars'} & set(sys.modules), sorted(sys.modules)\n"
            "assert dpselect.audit.run_all and dpselect.rainbow and dpselect.personalized.pdp_count\n"
            "assert 'dpselect.audit' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_every_module_is_public_underscored_or_says_internal(path: Path) -> None:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or parts[0] in PUBLIC_SUBPACKAGES or any(p.startswith("_") for p in parts):
        return  # the package, a public subpackage (its own __all__ decides), or underscored
    # its own docstring, or that of a package above it, says it is internal
    here = PACKAGE
    docs = []
    for part in parts[:-1]:
        here = here / part
        docs.append(_docstring(here / "__init__.py"))
    docs.append(_docstring(path))
    assert any("Internal:" in d for d in docs), (
        f"dpselect/{path.relative_to(PACKAGE)} is neither public, underscored, nor marked 'Internal:' "
        "in its docstring or its package's")


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@pytest.mark.slow
def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    """No import cycle hides behind the order the package usually imports its modules in: each
    module is imported first, alone, in a new interpreter (a missing optional dependency aside)."""
    from concurrent.futures import ThreadPoolExecutor

    names = [_dotted(p) for p in _modules() if p.name != "__main__.py"]
    code = ("import importlib, sys\n"
            "try:\n    importlib.import_module(sys.argv[1])\n"
            "except ModuleNotFoundError as exc:\n"
            "    if (exc.name or '').startswith('dpselect'):\n        raise\n")

    def run(name: str) -> tuple[str, str]:
        out = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, timeout=300)
        return name, out.stderr.strip().splitlines()[-1] if out.returncode else ""

    with ThreadPoolExecutor(4) as pool:
        failed = {name: err for name, err in pool.map(run, names) if err}
    assert not failed, failed
