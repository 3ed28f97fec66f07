"""End-to-end tests of `runfold validate`: recorded histories, stdin, exit codes, bad input.

The fixture sweep runs in-process through typer's CliRunner on the real app; stdin, exit codes
and unreadable input also run through a real `python -m runfold` subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runfold.cli.main import app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "histories"
INVALID = sorted((FIXTURES / "invalid").glob("*.json"))
VALID = sorted((FIXTURES / "valid").glob("*.json"))

RULE_OF = {
    "anthropic-cancel-mid-parallel-wave": "tool-call-answered",
    "anthropic-duplicate-tool-use-id": "tool-call-id-unique",
    "anthropic-empty-text-block": "text-not-empty",
    "anthropic-result-without-call": "tool-result-has-call",
    "anthropic-text-before-results": "tool-results-first",
    "anthropic-wave-results-split": "wave-answered-together",
    "openai-chat-foreign-tool-call-id": "tool-result-has-call",
    "openai-chat-tool-message-first": "tool-result-has-call",
    "openai-chat-unanswered-tool-calls": "tool-call-answered",
}


def runfold(*args: str | Path, stdin: str | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    env.update({"NO_COLOR": "1", "COLUMNS": "200"})
    return subprocess.run(
        [sys.executable, "-m", "runfold", *map(str, args)],
        input=stdin,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def request_file(tmp_path: Path, fixture: Path) -> Path:
    """The bare request body of a fixture, as a user would have it."""
    body = json.loads(fixture.read_text(encoding="utf-8"))["request"]
    dest = tmp_path / fixture.name
    dest.write_text(json.dumps(body, indent=1), encoding="utf-8")
    return dest


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_history_exits_1_naming_index_and_rule(path: Path, tmp_path: Path) -> None:
    fixture = json.loads(path.read_text(encoding="utf-8"))
    bare = request_file(tmp_path, path)
    runner = CliRunner()
    for args in ([str(bare)], [str(bare), "--dialect", fixture["dialect"]], [str(path)]):
        r = runner.invoke(app, ["validate", *args])
        assert r.exit_code == 1, r.output
        assert f"[{RULE_OF[path.stem]}]" in r.output
        assert "message " in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["validate", "--json", str(bare)])
    assert r.exit_code == 1
    report = json.loads(r.stdout)
    assert report["ok"] is False and report["dialect"] == fixture["dialect"]
    assert report["dialect_from"] == "inferred"
    hits = [v for v in report["violations"] if v["rule"] == RULE_OF[path.stem]]
    assert hits and all(isinstance(v["index"], int) for v in hits)


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_history_exits_0(path: Path, tmp_path: Path) -> None:
    bare = request_file(tmp_path, path)
    runner = CliRunner()
    r = runner.invoke(app, ["validate", str(bare)])
    assert r.exit_code == 0, r.output
    dialect = json.loads(path.read_text(encoding="utf-8"))["dialect"]
    assert f"{dialect} (inferred)" in r.output and r.output.rstrip().endswith("ok")
    r = runner.invoke(app, ["validate", str(path), "--json"])
    assert r.exit_code == 0
    assert json.loads(r.stdout) == {
        "ok": True,
        "file": str(path),
        "dialect": dialect,
        "dialect_from": "recorded",
        "violations": [],
    }


def test_subprocess_stdin_and_exit_codes(tmp_path: Path) -> None:
    bad = json.loads((FIXTURES / "invalid" / "anthropic-wave-results-split.json").read_text())["request"]
    r = runfold("validate", "-", stdin=json.dumps(bad), cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "stdin: anthropic (inferred), 4 messages, 2 violations"
    assert lines[1].startswith("message 3 [roles-alternate] messages[3].role: ")
    assert lines[2].startswith("message 3 [wave-answered-together] messages[3].content[0]: ")
    good = json.loads((FIXTURES / "valid" / "openai-responses-function-call.json").read_text())["request"]
    r = runfold("validate", "-", stdin=json.dumps(good), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "stdin: openai-responses (inferred), 3 items, ok\n"


def test_subprocess_unreadable_input_exits_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"messages": [\n  {"role": "user",, "content": "x"}]}\n', encoding="utf-8")
    r = runfold("validate", broken, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stdout == ""
    assert "E_INVALID_ARGS" in r.stderr and str(broken) in r.stderr
    assert "line 2" in r.stderr and "column 19" in r.stderr
    assert "Traceback" not in r.stderr

    r = runfold("validate", tmp_path / "missing.json", cwd=tmp_path)
    assert r.returncode == 2 and "missing.json" in r.stderr and "No such file" in r.stderr


def test_not_a_request_and_unknown_dialect_exit_2() -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["validate", "-"], input="[1, 2]")
    assert r.exit_code == 2 and "pass --dialect" in r.output
    r = runner.invoke(app, ["validate", "-", "--dialect", "gemini"], input="{}")
    assert r.exit_code == 2 and "openai-responses" in r.output


def test_given_dialect_wins_over_inference(tmp_path: Path) -> None:
    """A Chat body checked as Anthropic breaks Anthropic's rules (system role, tool role, form)."""
    body = json.loads((FIXTURES / "valid" / "openai-chat-parallel-calls.json").read_text())["request"]
    src = tmp_path / "chat.json"
    src.write_text(json.dumps(body), encoding="utf-8")
    r = CliRunner().invoke(app, ["validate", str(src), "-d", "anthropic"])
    assert r.exit_code == 1
    assert "anthropic (given)" in r.output
    assert "message 0 [role-valid]" in r.output and "[assistant-tool-form]" in r.output
