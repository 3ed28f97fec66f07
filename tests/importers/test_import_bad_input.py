"""Bad input is refused with a §11 error naming the source line (or event) and what to do, and
the ledger is left byte-identical (compared byte for byte)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from import_support import FIXTURES

from runfold.api import Workspace
from runfold.core.errors import RunfoldError

HELLO = (FIXTURES / "claude-code-hello-world.jsonl").read_bytes()


def _ledger_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((root / ".runfold" / "ledger").glob("*.jsonl")))


def _lines(raw: bytes) -> list[bytes]:
    return raw.split(b"\n")


def _truncated() -> bytes:
    return HELLO[: HELLO.rindex(b"\n", 0, len(HELLO) - 1) + 40]  # the last line cut short


def _not_json() -> bytes:
    lines = _lines(HELLO)
    lines[4] = b'{"type":"assistant", this is not json'
    return b"\n".join(lines)


def _unknown_version() -> bytes:
    return HELLO.replace(b'"version":"2.1.14"', b'"version":"9.0.0"')


def _result_without_call() -> bytes:
    lines = _lines(HELLO)
    del lines[2]  # the assistant line that made the first call
    return b"\n".join(lines)


CASES = {
    "truncated": (_truncated, "claude-code", "line 9", "cut short"),
    "not json": (_not_json, "claude-code", "line 5", "not JSON"),
    "unknown version": (_unknown_version, "claude-code", "line 2", "version 9.0.0"),
    "result without its call": (_result_without_call, "claude-code", "line 3", "which no earlier reply made"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_names_the_line_and_writes_nothing(tmp_path: Path, case: str) -> None:
    make, fmt, where, what = CASES[case]
    ws = Workspace.init(tmp_path / "ws")
    ws.import_session(FIXTURES / "swe-agent-function-calling-simple.traj")  # the ledger holds a run already
    before = _ledger_bytes(ws.root)
    bad = tmp_path / "session.jsonl"
    bad.write_bytes(make())
    with pytest.raises(RunfoldError) as err:
        ws.import_session(bad, fmt)
    shown = err.value.display()
    assert shown.startswith("E_INVALID_ARGS: cannot import session.jsonl as claude-code"), shown
    assert f"on {where} of session.jsonl" in shown, shown
    assert what in shown, shown
    assert err.value.recovery.strip()
    assert _ledger_bytes(ws.root) == before
    assert ws.verify().lines == len(before.splitlines())


def test_openhands_observation_without_its_action_names_the_event(tmp_path: Path) -> None:
    events = json.loads((FIXTURES / "openhands-fix-add.json").read_text())
    events = [e for e in events if e.get("id") != 12]  # drop the edit action, keep its observation
    bad = tmp_path / "oh.json"
    bad.write_text(json.dumps(events))
    ws = Workspace.init(tmp_path / "ws")
    before = _ledger_bytes(ws.root)
    with pytest.raises(RunfoldError) as err:
        ws.import_session(bad, "openhands")
    assert "event 12 (id 13)" in err.value.display()
    assert _ledger_bytes(ws.root) == before


def test_cli_import_error_is_one_line_and_exits_2_or_3(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
    from cli_support import run_cli

    ws = Workspace.init(tmp_path / "ws")
    bad = tmp_path / "session.jsonl"
    bad.write_bytes(_not_json())
    before = _ledger_bytes(ws.root)
    proc = run_cli("import", "claude-code", bad, "--workspace", ws.root, cwd=tmp_path, process=True)
    assert proc.code in (2, 3), proc
    assert "E_INVALID_ARGS: cannot import session.jsonl as claude-code" in proc.err
    assert "line 5" in proc.err
    assert _ledger_bytes(ws.root) == before


def test_a_device_is_refused_not_read_forever(tmp_path: Path) -> None:
    # /dev/zero never ends: reading it whole would take all memory (capped here so a regression
    # fails with a MemoryError instead of starving the machine)
    import resource
    import subprocess
    import sys

    ws = Workspace.init(tmp_path / "ws")
    before = _ledger_bytes(ws.root)
    ws.close()

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    res = subprocess.run(
        [sys.executable, "-m", "runfold", "import", "auto", "/dev/zero", "-w", str(ws.root)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
    )
    assert res.returncode == 2, res
    assert "E_INVALID_ARGS" in res.stderr and "device" in res.stderr
    assert _ledger_bytes(ws.root) == before


CODEX = (FIXTURES / "codex-rollout-sample.jsonl").read_bytes()
OPENHANDS = (FIXTURES / "openhands-fix-add.json").read_bytes()


def _cut_mid_string() -> bytes:
    lines = _lines(HELLO)
    lines[4] = lines[4][: lines[4].index(b'"content"') + 20]  # a line cut inside a string, the rest intact
    return b"\n".join(lines)


def _surrogate_line() -> bytes:
    return HELLO.replace(b'prints \\"Hello world\\"', b'prints \\"Hello \\ud800world\\"', 1)


def _codex_version() -> bytes:
    return CODEX.replace(b'"cli_version":"0.77.0"', b'"cli_version":"1.2.0"')


def _codex_line_type() -> bytes:
    lines = _lines(CODEX)
    lines[2] = lines[2].replace(b'"type":"response_item"', b'"type":"turn_snapshot"', 1)
    return b"\n".join(lines)


def _openhands_version() -> bytes:
    return OPENHANDS.replace(b'"openhands_version": "0.40.0"', b'"openhands_version": "1.0.0"')


def _openhands_v1_layout() -> bytes:
    events = json.loads(OPENHANDS)
    events[1] = {"id": "e1", "kind": "MessageEvent", "source": "user", "llm_message": {"role": "user"}}
    return json.dumps(events, indent=1).encode()


def _openhands_surrogate() -> bytes:
    return OPENHANDS.replace(b"Fix add() in app.py: the tests fail.", b"Fix add() \\udc00in app.py", 1)


def _line_of(raw: bytes, needle: bytes) -> int:
    """The 1-based line of `raw` where `needle` first occurs (read from the bytes, not the importer)."""
    return raw[: raw.index(needle)].count(b"\n") + 1


def _openhands_cut_in_string() -> bytes:
    return OPENHANDS[: OPENHANDS.index(b"Let me look at the repository")]


MORE_CASES = {
    # (make, format, where, what the message says)
    "line cut inside a string": (_cut_mid_string, "claude-code", "line 5", "cut short inside a string"),
    "lone surrogate (jsonl)": (_surrogate_line, "claude-code", "line 2", "message.content holds a lone UTF-16 surrogate"),
    "codex unknown cli version": (_codex_version, "codex", "line 1", "Codex CLI version 1.2.0"),
    "codex unknown line type": (_codex_line_type, "codex", "line 3", "a line of type 'turn_snapshot'"),
    "openhands unknown version": (_openhands_version, "openhands", "event 0 (id 0) args.openhands_version", "OpenHands version 1.0.0"),
    "openhands 1.x layout": (_openhands_v1_layout, "openhands", "event 1 (id e1)", "OpenHands 1.x event layout"),
    "lone surrogate (json)": (_openhands_surrogate, "openhands", f"line {_line_of(OPENHANDS, b'Fix add() in')}", "[1].message holds a lone UTF-16 surrogate"),
    "json cut inside a string": (_openhands_cut_in_string, "openhands", f"line {_line_of(OPENHANDS, b'Let me look')}", "never ends: the file is truncated"),
}
SUPPORTED = {"codex": "this build reads Codex CLI 0.x rollouts", "openhands": "this build reads OpenHands 0.x"}


@pytest.mark.parametrize("case", sorted(MORE_CASES))
def test_more_bad_input_names_the_source_position_and_writes_nothing(tmp_path: Path, case: str) -> None:
    """The source line (or event) is named, never a ledger field; an unknown version or layout
    says what this build reads."""
    make, fmt, where, what = MORE_CASES[case]
    ws = Workspace.init(tmp_path / "ws")
    ws.import_session(FIXTURES / "swe-agent-function-calling-simple.traj")
    before = _ledger_bytes(ws.root)
    bad = tmp_path / "session.src"
    bad.write_bytes(make())
    with pytest.raises(RunfoldError) as err:
        ws.import_session(bad, fmt)
    shown = err.value.display()
    assert shown.startswith(f"E_INVALID_ARGS: cannot import session.src as {fmt}"), shown
    assert re.search(rf"on {re.escape(where)}( column \d+)? of session\.src", shown), shown
    assert what in shown, shown
    assert "data." not in err.value.subject  # never a ledger field
    if "version" in case or "layout" in case or "line type" in case:
        assert SUPPORTED[fmt] in shown, shown
    assert err.value.recovery.strip()
    assert _ledger_bytes(ws.root) == before
