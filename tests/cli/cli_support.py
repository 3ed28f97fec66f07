"""Helpers for the CLI tests: run the real `runfold` command in a subprocess."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = FIXTURES / "sprawling-golden-p0.jsonl"
GOLDEN_HEAD = "0baccd18194099432a24e6e820889eac0e3d0d524dbfd1cc8cb646f037284526"
GOLDEN_RUN = "0198f6a2-7c4a-7bbb-9d1e-00000000040a"


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, process: bool = False) -> Result:
    """Run `runfold ARGS` with `cwd` as the current directory and capture everything.

    `process=True` runs the installed package in a real subprocess (`python -m runfold`);
    otherwise the same typer app runs in this process through typer's CliRunner (much cheaper;
    same group, same error handling and exit codes).
    """
    if process:
        full_env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
        full_env.update({"NO_COLOR": "1", "COLUMNS": "200"})
        if env:
            full_env.update(env)
        proc = subprocess.run(
            [sys.executable, "-m", "runfold", *map(str, args)],
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)
    from typer.testing import CliRunner

    from runfold.cli.main import app

    run_env: dict[str, str | None] = {"RUNFOLD_WORKSPACE": None, "NO_COLOR": "1", "COLUMNS": "200"}
    run_env.update(env or {})
    with contextlib.chdir(cwd):
        result = CliRunner().invoke(app, [str(a) for a in args], env=run_env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Result(result.exit_code, result.stdout, result.stderr)
