"""Damage that is not a torn tail (DESIGN.md §3 "Storage"): re-encoded or foreign files, a last
line missing only its newline, a ledger directory without segments or without its first one,
duplicated lines. Every case runs on real files; a refusal must leave the bytes untouched."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runfold.cli.main import app
from runfold.core.chain import Fault, LineRefused
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.records import Draft
from runfold.store.layout import Layout
from runfold.store.ledger import Ledger
from runfold.store.verify import verify_path

RUN_A = "0190f6a2-7c4a-7bbb-9d1e-00000000000a"


def steer(text: str) -> Draft:
    return Draft(RUN_A, "lab/room1", "steer_received", {"source": "user", "text": text}, addr="lab/room1")


def run_cli(*args: str | Path, cwd: Path) -> tuple[int, str, str]:
    """`runfold ARGS` through typer's CliRunner: (exit code, stdout, stderr)."""
    env: dict[str, str | None] = {"RUNFOLD_WORKSPACE": None, "NO_COLOR": "1", "COLUMNS": "200"}
    with contextlib.chdir(cwd):
        result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def segments(ws: Path) -> list[Path]:
    return sorted(Layout(ws).ledger_dir.glob("ledger-*.jsonl"))


def make_ws(ws: Path, n: int = 4, segment_bytes: int = 64 << 20) -> Path:
    with Ledger.create(ws, segment_bytes=segment_bytes) as w:
        for i in range(n):
            w.append([steer(f"line {i}")])
    return ws


def refused_everywhere(ws: Path) -> RunfoldError:
    """Verify, a reader and a writer all refuse; no byte of the ledger changes. Returns the
    writer's error."""
    before = {p: p.read_bytes() for p in segments(ws)}
    with pytest.raises(RunfoldError):
        verify_path(ws)
    with pytest.raises(RunfoldError):
        Ledger.open(ws, writer=False)
    with pytest.raises(RunfoldError) as err:
        Ledger.open(ws, writer=True)
    assert {p: p.read_bytes() for p in segments(ws)} == before
    return err.value


# ---- 1. a re-encoded segment is corruption, never a torn tail ---------------------------------


def _indent2(data: bytes) -> bytes:
    return b"".join(
        json.dumps(json.loads(line), indent=2, ensure_ascii=False).encode() + b"\n"
        for line in data.splitlines()
    )


@pytest.mark.parametrize(
    "recode",
    [
        _indent2,
        lambda data: gzip.compress(data, mtime=0),
        lambda data: data.decode().encode("utf-16"),
    ],
    ids=["indent2", "gzip", "utf16"],
)
def test_reencoded_segment_is_refused_not_cut(tmp_path: Path, recode: object) -> None:
    ws = make_ws(tmp_path / "ws")
    (seg,) = segments(ws)
    assert callable(recode)
    seg.write_bytes(recode(seg.read_bytes()))
    err = refused_everywhere(ws)
    assert err.code is ErrorCode.LEDGER_CORRUPT
    code, out, err_text = run_cli("verify", ws, cwd=tmp_path)
    assert code == 1 and "ok:" not in out, (out, err_text)
    assert "torn byte" not in err_text  # not the torn-tail warning


def test_reencoded_middle_segment_is_refused_not_cut(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws", n=6, segment_bytes=300)
    segs = segments(ws)
    assert len(segs) >= 3
    segs[-1].write_bytes(_indent2(segs[-1].read_bytes()))
    refused_everywhere(ws)


def test_newline_terminated_bad_last_line_is_refused(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws")
    (seg,) = segments(ws)
    lines = seg.read_bytes().split(b"\n")[:-1]
    seg.write_bytes(b"\n".join([*lines[:-1], b"#garbage#"]) + b"\n")
    err = refused_everywhere(ws)
    assert isinstance(err, LineRefused) and err.line_no == len(lines) and err.fault is Fault.NOT_A_LINE


# ---- 2. a verified last line missing only its newline is kept -------------------------------


def test_last_line_missing_its_newline_is_kept_and_completed(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws")
    (seg,) = segments(ws)
    whole = seg.read_bytes()
    with Ledger.open(ws, writer=False) as r:
        last = r.record_at(r.next_seq - 1)
        n = r.next_seq
    os.truncate(seg, len(whole) - 1)  # `truncate -s -1`

    report = verify_path(ws)
    assert report.lines == n and report.torn_tail_bytes == 0 and report.unterminated
    assert report.head == last.hash
    with Ledger.open(ws, writer=False) as r:
        assert r.next_seq == n and r.torn_tail_bytes == 0
        assert r.record_at(n - 1).raw == last.raw
        assert [x.raw for x in r.records(n - 2)][-1] == last.raw
    assert seg.read_bytes() == whole[:-1]  # readers write nothing

    with Ledger.open(ws, writer=True) as w:
        assert w.newline_restored and w.torn_tail_bytes == 0 and w.next_seq == n
        assert seg.read_bytes() == whole  # the newline came back before anything else
        (rec,) = w.append([steer("after")])
        assert rec.seq == n and rec.env.prev == last.hash
    assert seg.read_bytes() == whole + rec.raw + b"\n"
    assert verify_path(ws).lines == n + 1


def test_last_line_missing_its_newline_that_does_not_verify_is_refused(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws")
    (seg,) = segments(ws)
    lines = seg.read_bytes().split(b"\n")[:-1]
    bad = lines[-1].replace(b'"kind"', b' "kind"')  # parses, not canonical
    seg.write_bytes(b"\n".join([*lines[:-1], bad]))
    err = refused_everywhere(ws)
    assert isinstance(err, LineRefused) and err.line_no == len(lines) and err.fault is Fault.NOT_CANONICAL


# ---- 3. no ledger line at all ---------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        os.urandom(3000),
        b'[workspace]\nname = "x"\n',
        b"SQLite format 3\x00" + bytes(200),
        b'{"v":2,"run":"01',
    ],
    ids=["random", "toml", "sqlite", "torn-only-line"],
)
def test_file_without_a_ledger_line_fails_verify(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bin.dat"
    path.write_bytes(content)
    with pytest.raises(RunfoldError) as err:
        verify_path(path)
    assert err.value.code is ErrorCode.LEDGER_CORRUPT and "no ledger line was found" in err.value.action
    code, out, err_text = run_cli("verify", path, cwd=tmp_path)
    assert code == 1 and "no ledger line was found" in err_text and "ok:" not in out
    assert path.read_bytes() == content


def test_workspace_whose_only_line_is_torn_is_refused_not_cut(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws", n=0)
    (seg,) = segments(ws)
    torn = seg.read_bytes()[:40]
    seg.write_bytes(torn)
    err = refused_everywhere(ws)
    assert err.code is ErrorCode.LEDGER_CORRUPT and "no ledger line was found" in err.action
    assert "runfold init" in err.recovery and str(ws / ".runfold") in err.recovery


# ---- 4. no segment at all -------------------------------------------------------------------


def test_ledger_dir_without_segments_is_refused(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws")
    for seg in segments(ws):
        seg.unlink()
    ledger_dir = Layout(ws).ledger_dir
    for open_it in (
        lambda: verify_path(ws),
        lambda: verify_path(ledger_dir),
        lambda: Ledger.open(ws, writer=False),
        lambda: Ledger.open(ws, writer=True),
    ):
        with pytest.raises(RunfoldError) as err:
            open_it()
        assert err.value.code is ErrorCode.LEDGER_CORRUPT and err.value.subject == str(ledger_dir)
        assert segments(ws) == []  # no new chain was started
    assert run_cli("verify", ws, cwd=tmp_path)[0] == 1


# ---- 5. a directory must start at seq 0 -----------------------------------------------------


def test_verify_of_a_directory_missing_its_first_segment_fails(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws", n=6, segment_bytes=300)
    segs = segments(ws)
    assert len(segs) >= 3
    segs[0].unlink()
    for path in (ws, Layout(ws).ledger_dir):
        with pytest.raises(RunfoldError) as err:
            verify_path(path)
        assert err.value.code is ErrorCode.LEDGER_CORRUPT and "does not start at seq 0" in err.value.action
    assert run_cli("verify", ws, cwd=tmp_path)[0] == 1
    # a lone segment file may start elsewhere, and says so
    report = verify_path(segs[1])
    assert report.lines >= 1 and "starts at seq" in report.start_note


# ---- 6. a duplicated line is blamed on itself ------------------------------------------------


def test_duplicated_line_is_blamed_not_the_intact_line_before_it(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws", n=14)
    (seg,) = segments(ws)
    lines = seg.read_bytes().split(b"\n")[:-1]
    damaged = b"\n".join([*lines[:11], lines[10], *lines[11:]]) + b"\n"  # line 12 = copy of 11
    seg.write_bytes(damaged)
    err = refused_everywhere(ws)
    assert isinstance(err, LineRefused) and err.line_no == 12 and err.seq == 10
    assert "found seq 10, expected 11" in err.action
    with pytest.raises(LineRefused) as v:
        verify_path(ws)
    assert v.value.line_no == 12


def test_changed_line_is_still_blamed_when_the_next_links_to_it(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws", n=5)
    (seg,) = segments(ws)
    seg.write_bytes(seg.read_bytes().replace(b"line 2", b"line X"))
    with pytest.raises(LineRefused) as err:
        verify_path(ws)
    assert err.value.line_no == 4 and err.value.fault is Fault.CHAIN_BREAK
