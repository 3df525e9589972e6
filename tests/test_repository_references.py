"""What ships stands on its own: no source, doc, test or benchmark points at material outside
the repository (design notes, papers' local copies, issue numbers), every quoted docs/ path
exists, and every privacy page has its statement, argument, certificate and references.

These are checks of the source tree: they skip when the tests run against an installed wheel
from a copy of tests/ (the docs ship with the sdist, not the wheel)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (ROOT / "docs" / "privacy").is_dir() or not (ROOT / "csrc").is_dir(),
                                reason="runs on a source checkout")

# Spelled so that this file does not match itself.
UNSHIPPED = re.compile(r"\.\./shared|shared/sp[e]c|sp[e]c\s[a-z-]+\.md|[a-z-]+\.md\s§|seed\s00\d|\bissue\s\d|sp[e]c\s§")
SUFFIXES = {".py", ".pyx", ".pxd", ".pyi", ".c", ".h", ".md", ".toml", ".cfg", ".txt"}


def _shipped_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "pyproject.toml", ROOT / "setup.py"]
    for folder in ("dpselect", "csrc", "docs", "tests", "bench", "examples", "scripts", "fuzz"):
        for path in sorted((ROOT / folder).rglob("*")):
            generated = path.parent.name == "dpselect" and path.suffix == ".c"  # Cython output
            if path.is_file() and path.suffix in SUFFIXES and not generated:
                files.append(path)
    return files


FILES = _shipped_files()


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_points_outside_the_repository(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not UNSHIPPED.findall(text), UNSHIPPED.findall(text)
    for quoted in re.findall(r"docs/[\w/.-]+\.(?:md|png)", text):
        assert (ROOT / quoted).is_file(), f"{path.name} cites {quoted}, which does not exist"


PAGES = sorted((ROOT / "docs" / "privacy").glob("*.md"))


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "README.md"], ids=lambda p: p.name)
def test_every_privacy_page_states_argues_certifies_and_cites(page: Path) -> None:
    text = page.read_text(encoding="utf-8").lower()
    for part in ("statement", "argument", "certif", "references"):
        assert part in text, f"{page.name} lacks a {part} section"


def test_the_privacy_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "privacy" / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        if page.name != "README.md":
            assert page.name in index, page.name
