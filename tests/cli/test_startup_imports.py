"""Commands import only what they use: `runfold --help`, `verify` and `log` of a small ledger
never load the run loop, the providers, the tools, the model SDKs or the local model, so they
start in a fraction of the time a run needs (bench/startup.py measures it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMALL_LEDGER = REPO / "examples" / "sprawling-golden-p0.jsonl"

NEVER = (
    "runfold.runtime",
    "runfold.providers",
    "runfold.tools",
    "anthropic",
    "openai",
    "llama_cpp",
    "rich.live",
)
"""Packages (and their submodules) no reading command may import."""


def imported_modules(*args: str) -> set[str]:
    """Every module `python -m runfold ARGS` imported, read from `-X importtime` on stderr;
    the command must succeed."""
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runfold", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {
        line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
    }


def _under(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("verify", str(SMALL_LEDGER)),
        ("log", "-w", str(SMALL_LEDGER)),
        ("show", "3", "-w", str(SMALL_LEDGER)),
    ],
    ids=["help", "verify", "log", "show"],
)
def test_reading_commands_import_no_runtime_provider_or_tool(args: tuple[str, ...]) -> None:
    modules = imported_modules(*args)
    assert "runfold.cli.main" in modules  # the measurement saw the command line being built
    assert _under(modules, NEVER) == []


def test_help_imports_neither_the_workspace_nor_the_ledger() -> None:
    modules = imported_modules("--help")
    assert _under(modules, ("runfold.api", "runfold.store", "runfold.core.fold", "rich.console")) == []


def test_a_run_command_still_finds_the_runtime() -> None:
    # the lazy imports resolve: `runfold cost` reaches the runtime's cost fold
    modules = imported_modules("cost", "-w", str(SMALL_LEDGER))
    assert "runfold.runtime.cost" in modules


def _verb_modules(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.startswith("runfold.cli.") and m.endswith("_cmds"))


def test_help_loads_no_verb_and_verify_only_its_own_without_the_payload_classes() -> None:
    assert _verb_modules(imported_modules("--help")) == []
    verify = imported_modules("verify", str(SMALL_LEDGER))
    assert _verb_modules(verify) == ["runfold.cli.ledger_cmds"]
    assert "runfold.core.payloads" not in verify  # verify checks bytes and chain, not payloads
