"""Optional dependencies: imported on first use, with an error that names the extra to install."""
from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, *, feature: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ImportError telling the user which dpselect extra provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.split(".")[0]
        raise ImportError(f'{feature} needs {package}: pip install "dpselect[{extra}]"') from exc
