"""Old import paths of modules that moved into subpackages, kept working for one release.

``import dpselect.rows`` (and ``from dpselect import rows``, ``dpselect.rows``) still give the
module, now :mod:`dpselect.ingest.rows`, with a :class:`DeprecationWarning` naming the new path.
The alias is the very same module object, so patching or reading it through either name is the
same thing. Remove in the release after next (see CHANGELOG.md).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

__all__ = ["MOVED", "install", "moved_module"]

# old dotted name -> new dotted name
MOVED: dict[str, str] = {
    f"dpselect.{old}": f"dpselect.{new}"
    for old, new in {
        "exact": "core.exact",
        "tables": "core.tables",
        "theory": "core.theory",
        "params": "core.params",
        "verify": "core.verify",
        "guarantee": "core.guarantee",
        "limits": "core.limits",
        "rows": "ingest.rows",
        "frames": "ingest.frames",
        "pipeline": "ingest.pipeline",
        "public_keys": "ingest.public_keys",
        "files": "io.files",
        "outputs": "io.outputs",
        "progress": "io.progress",
        "cli_aggregate": "cli.aggregate",
        "cli_common": "cli.common",
        "interrupts": "cli.signals",
        "strategies": "mechanisms",
    }.items()
}


def _warn(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(f"{old} moved to {new}; the old path will be removed in the release after next: "
                  f"import {new} instead", DeprecationWarning, stacklevel=stacklevel)


def moved_module(old: str) -> types.ModuleType:
    """The module now at ``MOVED[old]``, with the deprecation warning (for ``dpselect.<old>``)."""
    new = MOVED[old]
    _warn(old, new, stacklevel=4)
    return importlib.import_module(new)


class _AliasLoader(importlib.abc.Loader):
    """Loads an old name as the module at its new name: ``exec_module`` puts the real module in
    ``sys.modules[old]``, which the import system then returns (a placeholder was created only
    so that the real module's own ``__spec__`` is left untouched)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return types.ModuleType(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        sys.modules[module.__name__] = importlib.import_module(self.new)


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        # stacklevel: the warning points at the importer's line (past importlib's frames).
        _warn(fullname, new, stacklevel=2)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


_FINDER = _MovedFinder()


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (first, so the old names never reach the file system)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
