"""The import contracts in pyproject.toml can fail: each is run against a copy of the package
with one violating import added, and must come back BROKEN naming that import (DESIGN.md §13:
the core does no I/O and imports nothing else of runfold; imports point inward)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")

CORE_PURE = "the core imports nothing else of runfold"
CORE_NO_IO = "the core does no I/O"
INWARD = "imports point inward"
CONTRACTS = (CORE_PURE, CORE_NO_IO, INWARD)


def _lint(tmp_path: Path, module: str = "", line: str = "") -> subprocess.CompletedProcess[str]:
    """`lint-imports` over a copy of `src/runfold` (with `line` appended to `module`'s file),
    using the repository's pyproject.toml; the copy is first on the path so the checked-out
    package is what is analysed."""
    src = tmp_path / "src"
    shutil.copytree(
        REPO / "src" / "runfold", src / "runfold", ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    if module:
        target = src / Path(*module.split(".")).with_suffix(".py")
        with target.open("a", encoding="utf-8") as f:
            f.write(f"\n{line}  # a violation\n")
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def _verdicts(out: str) -> dict[str, str]:
    """Each contract's KEPT/BROKEN from the summary at the top of the output."""
    summary = " ".join(out.split("Contracts:")[0].split())  # lint-imports wraps long names
    found = {name: re.search(re.escape(name) + r".*? (KEPT|BROKEN)\b", summary) for name in CONTRACTS}
    return {name: m.group(1) if m else "missing" for name, m in found.items()}


def test_the_package_as_it_is_keeps_every_contract(tmp_path: Path) -> None:
    done = _lint(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _verdicts(done.stdout) == {CORE_PURE: "KEPT", CORE_NO_IO: "KEPT", INWARD: "KEPT"}


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("runfold.core.ids", "import runfold.store.layout", {CORE_PURE, CORE_NO_IO, INWARD}),
        ("runfold.core.kinds", "from runfold.tools import Tool", {CORE_PURE, CORE_NO_IO, INWARD}),
        ("runfold.core.ids", "import os", {CORE_NO_IO}),
        ("runfold.core.records", "from pathlib import Path", {CORE_NO_IO}),
        ("runfold.core.fold.run", "import time", {CORE_NO_IO}),
        ("runfold.core.chain", "import random", {CORE_NO_IO}),
        ("runfold.store.layout", "import runfold.runtime.config", {INWARD}),
        ("runfold.api", "import runfold.cli.common", {INWARD}),
    ],
)
def test_a_violating_import_breaks_its_contract(
    tmp_path: Path, module: str, line: str, broken: set[str]
) -> None:
    done = _lint(tmp_path, module, line)
    assert done.returncode == 1, done.stdout + done.stderr
    verdicts = _verdicts(done.stdout)
    assert {name for name, v in verdicts.items() if v == "BROKEN"} == broken, done.stdout
    assert f"{module} ->" in done.stdout  # the report names the importing module
