"""The ledger's tail, end to end in real processes (DESIGN.md §3): a finished run's ledger that
lost its newest lines (last line deleted, newest segment deleted or zeroed) or whose last line
was re-encoded (`done` → `limit`) is refused by `verify`, `resume` and `run`, which write
nothing and move no mark back; `runfold head` and `verify --head` keep an anchor outside the
workspace; a garbage tail ending with a newline is repaired by `runfold repair --quarantine`;
a writer refuses bytes another process appended to its segment while it runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_support import run_cli

from runfold.api import Workspace
from runfold.store.layout import Layout
from runfold.store.ledger import Ledger

WRITE = {
    "content": [
        {"kind": "text", "text": "writing"},
        {"kind": "tool_use", "id": "a1", "name": "write_file", "input": '{"path":"x.txt","content":"hi"}'},
    ]
}
DONE = {"content": [{"kind": "text", "text": "done"}]}


def _script(path: Path, *entries: dict[str, object]) -> str:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return f"script:{path}"


def _finished(tmp_path: Path) -> Path:
    """A workspace with one run that wrote x.txt and finished `done` (seq 12), then resumed
    (the resume mark says seq 12), as in the field report."""
    ws = tmp_path / "ws"
    assert run_cli("init", "-w", ws, cwd=tmp_path, process=True).code == 0
    out = run_cli("run", "write x", "--model", _script(tmp_path / "s.jsonl", WRITE, DONE), cwd=ws, process=True)
    assert out.code == 0, out.err
    assert run_cli("resume", cwd=ws, process=True).code == 0
    mark = json.loads((ws / ".runfold" / "resume-mark.json").read_bytes())
    assert mark["seq"] == 12
    return ws


def _segments(ws: Path) -> list[Path]:
    return sorted(Layout(ws).ledger_dir.glob("ledger-*.jsonl"))


def _snapshot(ws: Path) -> dict[str, bytes]:
    root = ws / ".runfold"
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ("ledger" in p.parts or p.name.endswith("mark.json"))
    }


def _refused_everywhere(ws: Path, tmp_path: Path, phrase: str) -> None:
    """verify, resume and run all exit 1 with E_LEDGER_CORRUPT naming `phrase`, and change no
    ledger byte and no mark."""
    before = _snapshot(ws)
    spec = _script(tmp_path / "again.jsonl", DONE)
    for args in (("verify",), ("resume",), ("repair", "--quarantine"), ("run", "again", "--model", spec)):
        out = run_cli(*args, cwd=ws, process=True)
        assert out.code == 1, (args, out.out, out.err)
        assert out.err.startswith("E_LEDGER_CORRUPT: cannot ") and phrase in out.err, (args, out.err)
        assert "restore the ledger directory from a copy" in out.err and "`runfold verify`" in out.err
    assert _snapshot(ws) == before


def test_deleting_the_last_line_is_refused_and_resume_moves_no_mark(tmp_path: Path) -> None:
    ws = _finished(tmp_path)
    seg = _segments(ws)[-1]
    lines = seg.read_bytes().split(b"\n")
    assert json.loads(lines[-2])["kind"] == "run_frozen"
    seg.write_bytes(b"\n".join(lines[:-2]) + b"\n")  # the `done` freeze is gone
    _refused_everywhere(ws, tmp_path, "it ends at seq 11, but the head mark")
    assert json.loads((ws / ".runfold" / "resume-mark.json").read_bytes())["seq"] == 12


def test_deleting_three_lines_is_refused(tmp_path: Path) -> None:
    ws = _finished(tmp_path)
    seg = _segments(ws)[-1]
    seg.write_bytes(b"\n".join(seg.read_bytes().split(b"\n")[:-4]) + b"\n")
    _refused_everywhere(ws, tmp_path, "lost its newest lines")


def _two_segments(tmp_path: Path) -> Path:
    ws = _finished(tmp_path)
    with Workspace.open(ws).writer() as _:
        pass
    with Ledger.open(ws, writer=True, segment_bytes=1) as w:  # roll: the next lines start a segment
        from runfold.core.ids import WORKSPACE_RUN
        from runfold.core.records import Draft

        w.append([Draft(WORKSPACE_RUN, "runtime", "cache_renewed", {"reason": "test"})])
    assert len(_segments(ws)) == 2
    return ws


def test_deleting_the_newest_segment_is_refused(tmp_path: Path) -> None:
    ws = _two_segments(tmp_path)
    _segments(ws)[-1].unlink()
    _refused_everywhere(ws, tmp_path, "lost its newest lines")


def test_zeroing_the_newest_segment_is_refused(tmp_path: Path) -> None:
    ws = _two_segments(tmp_path)
    _segments(ws)[-1].write_bytes(b"")
    _refused_everywhere(ws, tmp_path, "lost its newest lines")


def test_zeroing_the_only_segment_is_refused_by_run(tmp_path: Path) -> None:
    ws = _finished(tmp_path)
    seg = _segments(ws)[0]
    seg.write_bytes(b"")
    _refused_everywhere(ws, tmp_path, "holds no line, but the head mark (.runfold/head-mark.json) recorded seq 12")


def test_run_refuses_an_empty_only_segment_as_verify_does(tmp_path: Path) -> None:
    """Without marks (a workspace made before them, or its marks gone too), run refuses 0 bytes
    as verify and resume do: it starts no new chain at line 0."""
    ws = _finished(tmp_path)
    seg = _segments(ws)[0]
    seg.write_bytes(b"")
    for name in ("head-mark.json", "resume-mark.json"):
        (ws / ".runfold" / name).unlink(missing_ok=True)
    out = run_cli("run", "again", "--model", _script(tmp_path / "a.jsonl", DONE), cwd=ws, process=True)
    assert out.code == 1 and "E_LEDGER_CORRUPT" in out.err and "0 bytes, no line" in out.err, out.err
    assert seg.read_bytes() == b""


def test_a_canonical_edit_of_the_last_line_is_refused_not_sealed(tmp_path: Path) -> None:
    ws = _finished(tmp_path)
    seg = _segments(ws)[-1]
    data = seg.read_bytes()
    edited = data.replace(b'"completion":"done"', b'"completion":"limit"')
    assert edited != data
    seg.write_bytes(edited)
    _refused_everywhere(ws, tmp_path, "its line at seq 12 hashes to")


def test_head_and_verify_head_keep_an_anchor_outside_the_workspace(tmp_path: Path) -> None:
    ws = _finished(tmp_path)
    out = run_cli("head", cwd=ws, process=True)
    assert out.code == 0, out.err
    anchor = out.out.strip()
    seq, _, digest = anchor.partition(":")
    assert seq == "12" and len(digest) == 64 and "runfold verify --head" in out.err
    data = json.loads(run_cli("head", "--json", cwd=ws, process=True).out)
    assert data["head"] == anchor and data["seq"] == 12 and data["hash"] == digest
    ok = run_cli("verify", "--head", anchor, cwd=ws, process=True)
    assert ok.code == 0 and f"holds the head you kept: seq 12 {digest}" in ok.out
    assert run_cli("verify", "--head", digest[:16], cwd=ws, process=True).code == 0
    # someone cut the last line and removed the marks too: verify alone cannot tell, the anchor can
    seg = _segments(ws)[-1]
    seg.write_bytes(b"\n".join(seg.read_bytes().split(b"\n")[:-2]) + b"\n")
    for name in ("head-mark.json", "resume-mark.json"):
        (ws / ".runfold" / name).unlink(missing_ok=True)
    assert run_cli("verify", cwd=ws, process=True).code == 0
    for kept in (anchor, digest):
        bad = run_cli("verify", "--head", kept, cwd=ws, process=True)
        assert bad.code == 1 and bad.err.startswith("E_LEDGER_CORRUPT: cannot verify the ledger holds the head you kept")
    wrong = run_cli("verify", "--head", "12:xyz", cwd=ws, process=True)
    assert wrong.code == 2 and wrong.err.startswith("E_INVALID_ARGS")


def test_a_garbage_tail_ending_with_a_newline_is_quarantined_by_repair(tmp_path: Path) -> None:
    ws = _finished(tmp_path)
    seg = _segments(ws)[-1]
    good = seg.read_bytes()
    garbage = b"this is not a ledger line\n{\"half\": 1}\n"
    seg.write_bytes(good + garbage)
    verify = run_cli("verify", cwd=ws, process=True)
    assert verify.code == 1 and "`runfold repair --quarantine`" in verify.err
    run = run_cli("run", "again", "--model", _script(tmp_path / "a.jsonl", DONE), cwd=ws, process=True)
    assert run.code == 1 and "`runfold repair --quarantine`" in run.err
    dry = run_cli("repair", cwd=ws, process=True)
    assert dry.code == 0 and f"{len(garbage)} byte(s) at offset {len(good)}" in dry.out
    assert seg.read_bytes() == good + garbage  # a dry run moves nothing
    done = run_cli("repair", "--quarantine", "--json", cwd=ws, process=True)
    assert done.code == 0, done.err
    written = json.loads(done.out)["written"]
    assert written["seq"] == 13 and written["dropped_bytes"] == len(garbage)
    assert (ws / ".runfold" / written["quarantine"]).read_bytes() == garbage
    assert run_cli("verify", cwd=ws, process=True).code == 0
    log = run_cli("log", "--tail", "1", cwd=ws, process=True)
    assert "log_truncated" in log.out and "moved" in log.out
    again = run_cli("run", "again", "--model", _script(tmp_path / "b.jsonl", DONE), cwd=ws, process=True)
    assert again.code == 0, again.err


def test_a_writer_refuses_bytes_another_process_appended_while_it_runs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    assert run_cli("init", "-w", ws, cwd=tmp_path, process=True).code == 0
    slow = {
        "content": [
            {"kind": "text", "text": "waiting"},
            {"kind": "tool_use", "id": "e1", "name": "exec", "input": '{"command":"sleep 3"}'},
        ]
    }
    spec = _script(tmp_path / "s.jsonl", slow, DONE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "wait", "--model", spec],
        cwd=ws,
        env={**os.environ, "NO_COLOR": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            kinds = [r.env.kind for r in Workspace.open(ws).records(kind="tool_called")]
            if kinds:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the run never called exec")
        seg = _segments(ws)[-1]
        offset = seg.stat().st_size
        with open(seg, "ab") as f:
            f.write(b"another process wrote this\n")
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0
    assert "E_LEDGER_CORRUPT" in err and f"at offset {offset}" in err and seg.name in err, err
    assert seg.read_bytes()[offset:] == b"another process wrote this\n"  # never written over
    verify = run_cli("verify", cwd=ws, process=True)
    assert verify.code == 1 and "`runfold repair --quarantine`" in verify.err
