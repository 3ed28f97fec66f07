"""Bad input is refused with a §11 error naming the source line (or event) and what to do, and
the ledger is left byte-identical (compared byte for byte)."""

from __future__ import annotations

import json
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
