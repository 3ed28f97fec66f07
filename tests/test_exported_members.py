"""The public namespace: `__all__` of `runfold` is exactly what the package exports, every name
in it resolves to the object its home module defines, and `import runfold` imports none of them
until they are used (so every `runfold` command starts without them)."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

import runfold
import runfold.api


def test_all_is_sorted_and_unique() -> None:
    assert runfold.__all__ == sorted(set(runfold.__all__))


def test_every_name_in_all_resolves_to_its_home_module() -> None:
    for name in runfold.__all__:
        value = getattr(runfold, name)
        if name == "__version__":
            assert isinstance(value, str)
            continue
        home = sys.modules[value.__module__]
        assert getattr(home, name) is value, name
        assert value.__module__.startswith("runfold."), name


def test_every_public_attribute_is_in_all() -> None:
    for name in runfold.__all__:
        getattr(runfold, name)
    public = {
        name
        for name, value in vars(runfold).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)  # submodules
    }
    assert public == set(runfold.__all__) - {"__version__"}


def test_dir_lists_every_public_name() -> None:
    assert set(runfold.__all__) <= set(dir(runfold))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        getattr(runfold, "NoSuchThing")  # noqa: B009


def test_import_runfold_imports_nothing_else_of_runfold() -> None:
    code = (
        "import json, sys, runfold\n"
        "print(json.dumps({'modules': sorted(m for m in sys.modules if m.startswith('runfold.')),"
        " 'public': sorted(n for n in vars(runfold) if not n.startswith('_'))}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"modules": [], "public": []}


def test_the_workspace_module_imports_no_runtime_until_a_run_needs_it() -> None:
    code = (
        "import json, sys, runfold.api\n"
        "heavy = ('runfold.runtime', 'runfold.providers', 'runfold.tools')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []
    for name in runfold.api.__all__:  # its re-exports of runtime names still resolve
        assert getattr(runfold.api, name) is not None, name
