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


# Run in a new interpreter: import the package, then import each module the package did not load in
# a forked child of that interpreter, and print one line per module that failed.
_IMPORT_EACH_FIRST = """
import importlib, os, sys
import dpselect
loaded = {m for m in sys.modules if m.startswith("dpselect")}
for name in sys.argv[1:]:
    if name in loaded:
        continue
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        message = ""
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").startswith("dpselect"):
                message = f"{type(exc).__name__}: {exc}"
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if message or status:
        print(f"{name}: {message or 'exit status ' + str(status)}")
print(f"imported {len(loaded)} modules with the package", file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    """No import cycle hides behind the order the package usually imports its modules in: each
    module is imported first, alone, in a fresh interpreter (a missing optional dependency aside).

    Importing ``dpselect.a.b`` runs ``dpselect/__init__.py`` to its end before anything else, so
    each module that ``import dpselect`` loads is imported in that one order whichever module is
    named, and every other module (the optional front ends, the CLI, the audit...) starts from the
    state ``import dpselect`` leaves: a child forked from one interpreter that imported the package
    and nothing else of dpselect is in that state, at a fraction of a new interpreter's cost."""
    names = [_dotted(p) for p in _modules() if p.name != "__main__.py"]
    out = subprocess.run([sys.executable, "-c", _IMPORT_EACH_FIRST, *names], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "imported" in out.stderr, out.stderr[-3000:]
    assert not out.stdout.strip(), out.stdout
