"""Names a package re-exports without importing their modules until first used (PEP 562), so a
command that needs none of them starts without loading them. One helper serves the packages
that do this (`runfold.core.fold`, `runfold.importers`); the `runfold` package keeps its own copy,
because `import runfold` must load no other module of runfold.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, homes: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module-level `__getattr__` for `package`: a name of `homes` (name → the module that
    defines it) is imported from its module on first use and kept in `namespace` (the package's
    globals), so the next use is a plain lookup. Any other name raises `AttributeError`."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    return __getattr__


__all__ = ["lazy_getattr"]
