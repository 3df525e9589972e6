"""The maps stay true: every module under dpselect/ and every unit under csrc/ is named in
docs/architecture.md and in the README's layout; and the public API is what the README says."""
from __future__ import annotations

import re
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
README = ROOT / "README.md"
PACKAGE = ROOT / "dpselect"
CSRC = ROOT / "csrc"

pytestmark = pytest.mark.skipif(not (ARCHITECTURE.is_file() and CSRC.is_dir()),
                                reason="needs the source tree (docs/ and csrc/), not an installed copy")


def _modules() -> list[str]:
    """Every Python or Cython module of the package, as its path below dpselect/."""
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix in (".py", ".pyx", ".pxd") and "__pycache__" not in path.parts:
            found.append(path.relative_to(PACKAGE).as_posix())
    return found


def _c_units() -> list[str]:
    return sorted({p.stem for p in CSRC.glob("*.[ch]")})


def _readme_layout() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Layout")
    end = text.index("\n## ", start + 1)
    return text[start:end]


@pytest.mark.parametrize("module", _modules())
def test_every_module_is_on_the_architecture_page(module: str) -> None:
    if module.endswith("/__init__.py"):  # a subpackage: its section's heading names it
        module = module[: -len("__init__.py")]
    assert f"`{module}`" in ARCHITECTURE.read_text(encoding="utf-8"), (
        f"dpselect/{module} is missing from docs/architecture.md: add it to its package's table")


@pytest.mark.parametrize("unit", _c_units())
def test_every_c_unit_is_on_the_architecture_page_and_in_the_readme(unit: str) -> None:
    assert f"`{unit}`" in ARCHITECTURE.read_text(encoding="utf-8"), f"csrc/{unit} is missing from docs/architecture.md"
    assert f"`{unit}`" in _readme_layout(), f"csrc/{unit} is missing from the README's layout"


def test_every_subpackage_and_top_level_module_is_in_the_readme_layout() -> None:
    layout = _readme_layout()
    missing = []
    for path in sorted(PACKAGE.iterdir()):
        if path.is_dir() and (path / "__init__.py").is_file():
            name = f"`{path.name}/`"
        elif path.suffix in (".py", ".pyx", ".pxd") and path.name != "__init__.py":
            name = f"`{path.name}`"
        else:
            continue
        if name not in layout:
            missing.append(name)
    assert not missing, f"missing from the README's layout: {missing}"


def test_the_pages_name_no_module_that_does_not_exist() -> None:
    """The other direction: a module removed or renamed must leave the maps too."""
    modules = set(_modules())
    named = set(re.findall(r"`((?:[a-z_]+/)*_?[a-z_0-9]+\.(?:py|pyx|pxd))`", ARCHITECTURE.read_text(encoding="utf-8")))
    stale = sorted(m for m in named if m not in modules and not (ROOT / m).is_file())  # a path from the root
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"
