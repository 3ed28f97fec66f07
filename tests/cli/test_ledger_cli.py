"""End-to-end tests of `runfold init`, `verify`, `log`, `show` through a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import GOLDEN, GOLDEN_HEAD, GOLDEN_RUN, run_cli


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def _no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text


# ---- init + verify ------------------------------------------------------------------------


def test_init_then_verify_then_refuse_second_init(tmp_path: Path) -> None:
    ws = tmp_path / "agents"
    r = run_cli("init", "--workspace", ws, cwd=tmp_path, process=True)
    assert r.code == 0, r.err
    assert str(ws) in r.out
    assert (ws / ".runfold" / "ledger").is_dir()

    r = run_cli("verify", cwd=ws, process=True)  # found from the current directory
    assert r.code == 0, r.err
    assert "ok: 1 line verified (seq 0..0)" in r.out
    assert "format version: 2" in r.out

    r = run_cli("log", "--json", cwd=ws / ".runfold" / "ledger")  # found upward, like git
    assert r.code == 0, r.err
    (line,) = [json.loads(x) for x in r.out.splitlines()]
    assert line["kind"] == "workspace_initialized" and line["seq"] == 0

    r = run_cli("init", "-w", ws, cwd=tmp_path, process=True)
    assert r.code == 2
    assert r.err.startswith("E_INVALID_ARGS: cannot initialize a workspace")
    assert "already holds a workspace" in r.err
    _no_traceback(r.out, r.err)
    r = run_cli("verify", "-w", ws, cwd=tmp_path)
    assert "ok: 1 line verified" in r.out  # the refused init changed nothing


def test_verify_honours_runfold_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    assert run_cli("init", "-w", ws, cwd=tmp_path).code == 0
    r = run_cli("verify", cwd=tmp_path, env={"RUNFOLD_WORKSPACE": str(ws)})
    assert r.code == 0, r.err
    assert "ok: 1 line verified" in r.out


def test_no_workspace_is_one_clear_line_exit_3(tmp_path: Path) -> None:
    r = run_cli("log", cwd=tmp_path, process=True)
    assert r.code == 3
    assert r.err.startswith("E_PATH_NOT_FOUND: cannot find a workspace")
    assert "runfold init" in r.err
    assert len(r.err.strip().splitlines()) == 1
    _no_traceback(r.out, r.err)


def test_verify_foreign_ledger(golden: Path) -> None:
    r = run_cli("verify", golden, cwd=golden.parent, process=True)
    assert r.code == 0, r.err
    assert r.err == ""  # no progress bar off a terminal
    assert "ok: 18 lines verified (seq 0..17)" in r.out
    assert f"head: {GOLDEN_HEAD}" in r.out
    assert "format version: 1" in r.out
    assert "MB/s" in r.out


def test_verify_json(golden: Path) -> None:
    r = run_cli("verify", "--json", golden, cwd=golden.parent)
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["ok"] is True
    assert (report["lines"], report["first_seq"], report["last_seq"]) == (18, 0, 17)
    assert report["head"] == GOLDEN_HEAD
    assert report["versions"] == [1]
    assert report["bytes"] == GOLDEN.stat().st_size


def test_verify_missing_path_exit_3(tmp_path: Path) -> None:
    r = run_cli("verify", tmp_path / "nope.jsonl", cwd=tmp_path)
    assert r.code == 3
    assert r.err.startswith("E_PATH_NOT_FOUND")
    _no_traceback(r.err)


@pytest.mark.parametrize("line_no", [1, 8, 18])
def test_verify_flipped_prev_byte_names_line_and_seq(golden: Path, line_no: int) -> None:
    lines = _lines(golden)
    line = bytearray(lines[line_no - 1])
    at = line.index(b'"prev":"') + len(b'"prev":"') + 10
    line[at] = ord("f") if line[at] != ord("f") else ord("e")
    lines[line_no - 1] = bytes(line)
    golden.write_bytes(b"\n".join(lines) + b"\n")
    before = golden.read_bytes()

    r = run_cli("verify", golden, cwd=golden.parent, process=line_no == 8)
    assert r.code == 1
    assert r.out == ""
    (message,) = r.err.strip().splitlines()  # one message
    assert message.startswith("E_LEDGER_CORRUPT:")
    assert f"line {line_no} (seq {line_no - 1})" in message
    assert "chain break" in message
    assert "restore" in message  # what to do next
    _no_traceback(r.err)
    assert golden.read_bytes() == before  # read-only


def test_verify_edited_text_names_the_edited_line(golden: Path) -> None:
    data = golden.read_bytes()
    golden.write_bytes(data.replace(b"narrow the search", b"narrow the seArch"))
    r = run_cli("verify", "--json", golden, cwd=golden.parent)
    assert r.code == 1
    error = json.loads(r.out)["error"]
    assert (error["fault"], error["line"], error["seq"]) == ("chain break", 6, 5)
    assert error["code"] == "E_LEDGER_CORRUPT"


def test_verify_not_canonical_line(golden: Path) -> None:
    lines = _lines(golden)
    lines[3] = lines[3].replace(b'"seq":3,', b'"seq": 3,')
    golden.write_bytes(b"\n".join(lines) + b"\n")
    r = run_cli("verify", golden, cwd=golden.parent)
    assert r.code == 1
    assert "line 4 (seq 3): not canonical" in r.err


def test_debug_shows_the_traceback(golden: Path) -> None:
    golden.write_bytes(golden.read_bytes().replace(b"narrow the search", b"narrow the seArch"))
    r = run_cli("--debug", "verify", golden, cwd=golden.parent, process=True)
    assert r.code != 0
    assert "Traceback" in r.err
    assert "LineRefused" in r.err


# ---- log ----------------------------------------------------------------------------------


def test_log_timeline(golden: Path) -> None:
    r = run_cli("log", "-w", golden, cwd=golden.parent)
    assert r.code == 0, r.err
    rows = r.out.splitlines()
    assert len(rows) == 18
    assert rows[0].split()[0] == "0"
    assert "1970-01-01T00:00:00.000Z" in rows[0]
    steer = rows[5]
    assert steer.split()[:2] == ["5", "1970-01-01T00:00:00.002Z"]
    assert "0198f6a2" in steer and "worker@sim.1" in steer and "steer_received" in steer
    assert 'user: "narrow the search to the changed files"' in steer
    assert "probe" in rows[6] and "tool_called" in rows[6]
    assert "run_frozen" in rows[-1] and "done" in rows[-1]


def test_log_json_is_the_stored_lines(golden: Path) -> None:
    r = run_cli("log", "-w", golden, "--json", cwd=golden.parent, process=True)
    assert r.code == 0, r.err
    assert r.out.encode().splitlines() == _lines(golden)
    for text in r.out.splitlines():
        assert isinstance(json.loads(text), dict)


def test_log_filters(golden: Path) -> None:
    def seqs(*args: str) -> list[int]:
        r = run_cli("log", "-w", golden, "--json", *args, cwd=golden.parent)
        assert r.code == 0, r.err
        return [json.loads(x)["seq"] for x in r.out.splitlines()]

    everything = [json.loads(x) for x in _lines(golden)]
    of_run = [e["seq"] for e in everything if e["run"] == GOLDEN_RUN]
    assert seqs("--run", "0198f6a2") == of_run
    assert seqs("--run", GOLDEN_RUN.upper()) == of_run
    assert seqs("--run", "0198f6a27c4a") == of_run  # hyphens optional
    calls = [e["seq"] for e in everything if e["kind"] == "tool_called"]
    assert calls == [6, 11]
    assert seqs("--kind", "tool_called") == calls
    both = [e["seq"] for e in everything if e["kind"] in ("tool_called", "tool_result")]
    assert seqs("-k", "tool_called", "-k", "tool_result") == both
    assert seqs("--since", "10") == list(range(10, 18))
    assert seqs("--since", "10", "--limit", "3") == [10, 11, 12]
    assert seqs("--limit", "0") == []
    assert seqs("--run", "workspace") == [e["seq"] for e in everything if e["run"].startswith("00000000")]


def test_log_unknown_kind_suggests(golden: Path) -> None:
    r = run_cli("log", "-w", golden, "--kind", "tool_call", cwd=golden.parent)
    assert r.code == 2
    assert r.err.startswith("E_INVALID_ARGS")
    assert "tool_called" in r.err
    _no_traceback(r.err)


def test_log_unknown_run_prefix(golden: Path) -> None:
    r = run_cli("log", "-w", golden, "--run", "0198f6a3", cwd=golden.parent)
    assert r.code == 2
    assert r.err.startswith("E_INVALID_ARGS: cannot find run '0198f6a3'")
    assert GOLDEN_RUN in r.err  # the closest id
    _no_traceback(r.err)
    r = run_cli("log", "-w", golden, "--run", "0198f6a3", "--json", cwd=golden.parent)
    error = json.loads(r.out)["error"]
    assert error["code"] == "E_INVALID_ARGS" and error["nearby"] == [GOLDEN_RUN]


def test_log_bad_option_is_usage_error(golden: Path) -> None:
    r = run_cli("log", "-w", golden, "--since", "ten", cwd=golden.parent)
    assert r.code == 2
    _no_traceback(r.err)


# ---- show ---------------------------------------------------------------------------------


def test_show_one_line(golden: Path) -> None:
    lines = _lines(golden)
    hash_of_5 = json.loads(lines[6])["prev"]  # line 7 chains to seq 5
    r = run_cli("show", "5", "-w", golden, cwd=golden.parent)
    assert r.code == 0, r.err
    assert f"hash:     {hash_of_5}" in r.out
    assert f"prev:     {json.loads(lines[5])['prev']}" in r.out
    assert f"position: line 6 of 18; {golden.name} line 6" in r.out
    assert '"text": "narrow the search to the changed files"' in r.out

    r = run_cli("show", "5", "-w", golden, "--json", cwd=golden.parent)
    shown = json.loads(r.out)
    assert shown["hash"] == hash_of_5
    assert (shown["seq"], shown["line"], shown["lines"], shown["segment_line"]) == (5, 6, 18, 6)
    assert shown["record"] == json.loads(lines[5])
    assert list(shown["record"]) == list(json.loads(lines[5]))  # envelope key order kept


def test_show_out_of_range_names_the_tail(golden: Path) -> None:
    r = run_cli("show", "18", "-w", golden, cwd=golden.parent)
    assert r.code == 2
    assert "seq 0..17" in r.err
    _no_traceback(r.err)


# ---- help ---------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["init", "verify", "log", "show"])
def test_help_teaches_with_an_example(tmp_path: Path, verb: str) -> None:
    r = run_cli(verb, "--help", cwd=tmp_path)
    assert r.code == 0
    assert "Example" in r.out
    assert f"runfold {verb}" in r.out
    assert "Exit codes" in r.out


def test_top_level_help_lists_verbs_and_exit_codes(tmp_path: Path) -> None:
    r = run_cli("--help", cwd=tmp_path, process=True)
    assert r.code == 0
    for verb in ("init", "verify", "log", "show"):
        assert verb in r.out
    assert "Exit codes" in r.out and "--debug" in r.out
