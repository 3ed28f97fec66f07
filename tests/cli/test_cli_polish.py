"""End-to-end tests of the rough edges of `runfold verify | show` and the usage lines: PATH
together with --workspace, a SEQ that is negative or not a number, a PATH holding no line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import GOLDEN_HEAD, run_cli

from runfold.cli.reference import command_names
from runfold.core.records import Draft
from runfold.store.layout import Layout
from runfold.store.ledger import Ledger

RUN_A = "0190f6a2-7c4a-7bbb-9d1e-00000000000a"


def _workspace(path: Path, lines: int = 0, segment_bytes: int = 64 << 20) -> Path:
    """A workspace at `path` holding workspace_initialized plus `lines` steer lines."""
    with Ledger.create(path, segment_bytes=segment_bytes) as w:
        for i in range(lines):
            w.append([Draft(RUN_A, "lab/room1", "steer_received", {"source": "user", "text": f"s{i}"})])
    return path


def _segments(ws: Path) -> list[Path]:
    return sorted(Layout(ws).ledger_dir.glob("ledger-*.jsonl"))


# ---- 1. verify: PATH and --workspace ------------------------------------------------------


def test_verify_refuses_workspace_and_path_together(tmp_path: Path, golden: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    for flag in ("-w", "--workspace"):
        r = run_cli("verify", flag, ws, golden, cwd=tmp_path)
        assert r.code == 2, (r.out, r.err)
        assert r.err.startswith("E_INVALID_ARGS: cannot verify (both --workspace and PATH")
        assert "give one or the other" in r.err and str(golden) in r.err and str(ws) in r.err
        assert "ok:" not in r.out

    r = run_cli("verify", "--json", golden, "-w", ws, cwd=tmp_path, process=True)
    assert r.code == 2
    answer = json.loads(r.out)
    assert answer["ok"] is False and answer["error"]["code"] == "E_INVALID_ARGS"
    assert "Traceback" not in r.err

    # each alone still verifies its own ledger
    assert "ok: 1 line verified" in run_cli("verify", "-w", ws, cwd=tmp_path).out
    assert f"head: {GOLDEN_HEAD}" in run_cli("verify", golden, cwd=tmp_path).out


def test_verify_path_wins_over_runfold_workspace(tmp_path: Path, golden: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    for ambient in (ws, tmp_path / "no-workspace-here"):
        r = run_cli("verify", golden, cwd=tmp_path, env={"RUNFOLD_WORKSPACE": str(ambient)})
        assert r.code == 0, r.err
        assert "ok: 18 lines verified" in r.out and GOLDEN_HEAD in r.out


def test_verify_help_says_path_or_workspace(tmp_path: Path) -> None:
    r = run_cli("verify", "--help", cwd=tmp_path)
    assert r.code == 0
    text = " ".join(r.out.split())  # undo the help's line wrapping
    assert "give it or --workspace, not both" in text
    assert "Not together with PATH: give one or the other; a PATH wins over $RUNFOLD_WORKSPACE" in text


# ---- 2. show: a SEQ that is negative or not a number --------------------------------------


@pytest.mark.parametrize(
    ("seq", "why"),
    [
        ("-1", "there are no negative seqs"),
        ("-12", "there are no negative seqs"),
        ("abc", "not a whole number"),
        ("1.5", "not a whole number"),
        ("18", "past the newest line, seq 17"),
    ],
)
def test_show_explains_a_bad_seq(tmp_path: Path, golden: Path, seq: str, why: str) -> None:
    for args in (("show", seq, "-w", golden), ("show", "-w", golden, seq)):
        r = run_cli(*args, cwd=tmp_path)
        assert r.code == 2, (r.out, r.err)
        assert r.err.startswith(f"E_INVALID_ARGS: cannot show seq {seq} ("), r.err
        assert why in r.err
        assert "this ledger holds seq 0..17" in r.err
        assert f"`runfold show 17 -w {golden}`" in r.err and f"`runfold log -w {golden}`" in r.err
        assert "No such option" not in r.err and "Usage:" not in r.err

    r = run_cli("show", seq, "--json", "-w", golden, cwd=tmp_path)
    assert r.code == 2
    error = json.loads(r.out)["error"]
    assert error["code"] == "E_INVALID_ARGS" and error["action"].startswith(f"show seq {seq} (")


def test_show_of_the_newest_line_named_in_the_hint_works(tmp_path: Path, golden: Path) -> None:
    r = run_cli("show", "17", "-w", golden, cwd=tmp_path)
    assert r.code == 0 and r.out.startswith("seq 17")


def test_unknown_options_are_still_unknown_options(tmp_path: Path, golden: Path) -> None:
    r = run_cli("show", "5", "--bogus", "-w", golden, cwd=tmp_path)
    assert r.code == 2 and "No such option: --bogus" in r.err
    r = run_cli("show", "-1", "--bogus", "-w", golden, cwd=tmp_path)
    assert r.code == 2 and "No such option: --bogus" in r.err
    for args in (("log", "-1"), ("fork", "-1", "--at", "3"), ("run", "-5")):  # only SEQ takes -1
        r = run_cli(*args, "-w", golden, cwd=tmp_path)
        assert r.code == 2 and "No such option: -" in r.err, (args, r.err)


def test_usage_lines_name_arguments_without_braces(tmp_path: Path) -> None:
    names = command_names()
    assert "show" in names and "steer" in names
    for name in names:
        assert name is not None
        r = run_cli(name, "--help", cwd=tmp_path)
        assert r.code == 0
        usage = r.out.splitlines()[0]
        assert usage.startswith(f"Usage: runfold {name} [OPTIONS]")
        assert "{" not in usage and "}" not in usage, usage
    assert run_cli("show", "--help", cwd=tmp_path).out.startswith("Usage: runfold show [OPTIONS] SEQ\n")
    r = run_cli("show", cwd=tmp_path)
    assert r.code == 2 and "usage: `runfold show [OPTIONS] SEQ`" in r.err and len(r.err.splitlines()) == 1


# ---- 3. verify: a PATH holding no line ------------------------------------------------------


def test_verify_of_an_empty_file_fails(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    r = run_cli("verify", empty, cwd=tmp_path)
    assert r.code == 1, (r.out, r.err)
    assert r.err.startswith("E_LEDGER_CORRUPT: cannot verify a ledger (found an empty file: 0 bytes")
    assert str(empty) in r.err and "runfold init" in r.err and "runfold verify -w DIR" in r.err
    assert "ok:" not in r.out

    r = run_cli("verify", "--json", empty, cwd=tmp_path, process=True)
    assert r.code == 1
    answer = json.loads(r.out)
    assert answer["ok"] is False
    assert answer["error"]["code"] == "E_LEDGER_CORRUPT" and "0 bytes" in answer["error"]["action"]
    assert empty.read_bytes() == b""  # read-only


def test_verify_of_a_workspace_whose_only_segment_is_empty_fails(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    (segment,) = _segments(ws)
    segment.write_bytes(b"")  # `runfold init` died between creating the file and its line 0
    Layout(ws).head_mark_path.unlink()  # ... so it never recorded line 0 in the head mark either
    for args in (("verify", "-w", ws), ("verify", ws), ("verify", Layout(ws).ledger_dir)):
        r = run_cli(*args, cwd=tmp_path)
        assert r.code == 1, (args, r.out, r.err)
        assert "found 1 empty segment file(s): 0 bytes" in r.err
        assert f"remove {ws / '.runfold'} and run `runfold init` again" in r.err
    r = run_cli("verify", "--json", ws, cwd=tmp_path)
    assert r.code == 1 and json.loads(r.out)["error"]["code"] == "E_LEDGER_CORRUPT"


def test_verify_of_a_lone_empty_later_segment_points_at_its_ledger(tmp_path: Path) -> None:
    lone = tmp_path / "ledger-00000000000000000020.jsonl"
    lone.write_bytes(b"")
    r = run_cli("verify", lone, cwd=tmp_path)
    assert r.code == 1
    assert "named after seq 20" in r.err and f"`runfold verify {tmp_path}`" in r.err


def test_an_empty_last_segment_after_a_roll_over_still_verifies(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", lines=12, segment_bytes=600)
    segments = _segments(ws)
    assert len(segments) >= 3
    with Ledger.open(ws, writer=False) as reader:
        next_seq = reader.next_seq
    Layout(ws).segment_path(next_seq).write_bytes(b"")  # a crash right after a roll-over
    for args in (("verify", "-w", ws), ("verify", Layout(ws).ledger_dir)):
        r = run_cli(*args, cwd=tmp_path)
        assert r.code == 0, r.err
        assert f"ok: {next_seq} lines verified (seq 0..{next_seq - 1})" in r.out
        assert f"in {len(segments) + 1} segment(s)" in r.out
    r = run_cli("verify", "--json", ws, cwd=tmp_path)
    assert r.code == 0 and json.loads(r.out)["ok"] is True
