"""`runfold.core.fold` resolves its public names on first use: every name of `__all__` has a home
module that defines it, and importing the package loads none of its modules."""

from __future__ import annotations

import importlib
import subprocess
import sys

import runfold.core.fold as fold


def test_every_public_name_has_its_home() -> None:
    assert sorted(fold.__all__) == sorted(fold._HOMES)
    for name, home in fold._HOMES.items():
        assert getattr(fold, name) is getattr(importlib.import_module(home), name)


def test_importing_the_package_loads_no_fold_module() -> None:
    code = "import sys, runfold.core.fold; print(sorted(m for m in sys.modules if m.startswith('runfold.core.fold.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_public_name_is_also_a_submodule_name() -> None:
    """Importing a submodule binds its name on the package, so a public name equal to a submodule's
    (once `why`) would read as the module instead of the function it names."""
    import pkgutil

    submodules = {m.name for m in pkgutil.iter_modules(fold.__path__)}
    assert not submodules & set(fold.__all__)
