"""Packaging: metadata, the one version, the installed files and the unbuilt-tree error.

The artefacts themselves (wheel without generated C and with stripped modules, sdist contents)
are checked by .ci/run, which builds them; building here would be too slow for the suite.
setup.py itself is tested in tests/test_build.py.
Tests marked `source_tree` read files of the repository and are skipped when the tests run
against an installed wheel from a copy of tests/.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dpselect

ROOT = Path(__file__).resolve().parents[1]
IN_SOURCE_TREE = (ROOT / "setup.py").is_file() and (ROOT / "pyproject.toml").is_file()
source_tree = pytest.mark.skipif(not IN_SOURCE_TREE, reason="needs the repository's files")
PACKAGE_DIR = Path(dpselect.__file__).resolve().parent


def metadata() -> importlib.metadata.PackageMetadata:
    return importlib.metadata.metadata("dpselect")


def test_version_has_one_source():
    from dpselect import _version

    assert dpselect.__version__ == _version.__version__ == importlib.metadata.version("dpselect")


@source_tree
def test_pyproject_reads_the_version_from_version_py():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "dpselect._version.__version__"}
    # A plain literal, so setuptools reads it without importing the unbuilt package.
    assert re.fullmatch(r'(?s).*\n__version__ = "[^"]+"\n', (ROOT / "dpselect" / "_version.py").read_text())


def test_license_metadata_is_spdx_apache():
    assert metadata()["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (metadata().get_all("License-File") or [])


@source_tree
def test_license_file_is_the_full_apache_text():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


@source_tree
def test_changelog_has_unreleased_and_first_release():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text and "## [0.1.0]" in text


def test_project_urls():
    urls = dict(u.split(", ", 1) for u in metadata().get_all("Project-URL") or [])
    assert set(urls) == {"Homepage", "Documentation", "Source", "Changelog"}
    assert all(u.startswith("https://github.com/dpselect/dpselect") for u in urls.values())


def extra_requirements(extra: str) -> list[str]:
    marker = f'extra == "{extra}"'
    return sorted(r.split(";")[0].strip() for r in metadata().get_all("Requires-Dist") or [] if marker in r)


def test_arrow_extra_is_pyarrow_alone():
    assert extra_requirements("arrow") == ["pyarrow>=19"]
    assert {"pandas>=2.2", "polars>=1.0", "pyarrow>=19"} <= set(extra_requirements("frames"))


def installed_from_wheel() -> list[str]:
    """The files a wheel installed, from RECORD; skips when dpselect was not installed so.

    Run from the source tree, the metadata found may be its dpselect.egg-info (no RECORD), and an
    editable install's RECORD lists no package file: in-place builds are not what ships.
    """
    record = importlib.metadata.distribution("dpselect").read_text("RECORD")
    installed = [line.split(",")[0] for line in (record or "").splitlines()]
    if "dpselect/__init__.py" not in installed:
        pytest.skip("dpselect here is not installed from a wheel")
    return installed


def test_installed_files_have_no_generated_c():
    assert not [f for f in installed_from_wheel() if re.fullmatch(r"dpselect/_\w+\.c", f)]


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("nm") is None,
                    reason="checks ELF symbol tables with nm")
def test_extension_modules_are_stripped():
    if os.environ.get("DPSELECT_DEBUG_BUILD", "") not in ("", "0"):
        pytest.skip("DPSELECT_DEBUG_BUILD keeps symbols")
    modules = [f for f in installed_from_wheel() if re.fullmatch(r"dpselect/_\w+\..*\.so", f)]
    assert modules, "no extension module installed"
    for module in modules:
        out = subprocess.run(["nm", str(PACKAGE_DIR.parent / module)], capture_output=True, text=True)
        assert "no symbols" in out.stderr, f"{module} is not stripped"


# --- importing a tree without its compiled extension ------------------------------------------

def unbuilt_copy(tmp_path: Path, *, source_tree: bool) -> Path:
    """A copy of the package's Python files only, as in a fresh clone."""
    (tmp_path / "dpselect").mkdir()
    for file in PACKAGE_DIR.glob("*.py"):
        shutil.copy(file, tmp_path / "dpselect" / file.name)
    if source_tree:
        (tmp_path / "pyproject.toml").write_text("[project]\nname = 'dpselect'\n")
    return tmp_path


def run_python(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -S: no site-packages, so an editable install's import hook cannot supply the extension
    # from elsewhere; the cwd still comes first on sys.path, as for a user in the repository root.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("args", [("-c", "import dpselect"), ("-m", "dpselect.demo")])
def test_unbuilt_source_tree_says_how_to_build(tmp_path, args):
    root = unbuilt_copy(tmp_path, source_tree=True)
    proc = run_python(root, *args)
    assert proc.returncode != 0
    assert f"dpselect is being imported from its source tree at {root / 'dpselect'}" in proc.stderr
    assert "pip install -e ." in proc.stderr and "run from another directory" in proc.stderr
    assert "circular import" not in proc.stderr


def test_incomplete_install_says_to_reinstall(tmp_path):
    proc = run_python(unbuilt_copy(tmp_path, source_tree=False), "-c", "import dpselect")
    assert proc.returncode != 0
    assert "has no compiled extension" in proc.stderr and "--force-reinstall" in proc.stderr


def test_other_import_errors_of_the_extension_are_not_masked(tmp_path):
    root = unbuilt_copy(tmp_path, source_tree=True)
    (root / "dpselect" / "_rng.py").write_text("import dpselect_missing_dependency\n")
    proc = run_python(root, "-c", "import dpselect")
    assert "No module named 'dpselect_missing_dependency'" in proc.stderr
    assert "source tree" not in proc.stderr
