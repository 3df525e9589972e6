"""Modules that moved into subpackages keep their old import paths for one release, with a
DeprecationWarning naming the new path; the alias is the very same module object."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import dpselect
from dpselect._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_the_moved_module_with_a_warning(old: str) -> None:
    new = importlib.import_module(MOVED[old])
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is new
    assert module.__name__ == MOVED[old]
    assert module.__spec__.name == MOVED[old]  # the real module's spec, not the alias's


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_attribute_of_the_package_gives_the_moved_module_with_a_warning(old: str) -> None:
    name = old.rsplit(".", 1)[1]
    vars(dpselect).pop(name, None)  # an earlier import may have set the attribute
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to"):
        module = getattr(dpselect, name)
    assert module is importlib.import_module(MOVED[old])


def test_the_old_from_import_form_works_in_a_fresh_interpreter() -> None:
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import dpselect\n"
            "try:\n    from dpselect import rows\nexcept DeprecationWarning as w:\n    print(w)\n"
            "warnings.simplefilter('ignore', DeprecationWarning)\n"
            "from dpselect import rows\nfrom dpselect.rows import RowCounter\n"
            "import dpselect.ingest.rows as new\nassert rows is new and RowCounter is new.RowCounter\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "dpselect.rows moved to dpselect.ingest.rows" in out.stdout


def test_no_new_code_imports_an_old_path() -> None:
    """The package itself imports only the new paths: importing every public module warns nothing."""
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import dpselect, dpselect.cli, dpselect.ingest.pipeline, dpselect.io.files, dpselect.core.verify\n"
            "import dpselect.aggregation.aggregate, dpselect.audit.runner, dpselect.explain, dpselect.demo\n")
    subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], check=True, timeout=120)


def test_the_arrow_metadata_key_is_part_of_the_output_not_a_module_path() -> None:
    """Results carry their guarantee under the key ``dpselect.guarantee`` (docs/rows.md): a
    name readers depend on, which no module move may change (it once looked like a module path)."""
    from dpselect.ingest.pipeline import GUARANTEE_METADATA_KEY

    assert GUARANTEE_METADATA_KEY == b"dpselect" + b".guarantee"
