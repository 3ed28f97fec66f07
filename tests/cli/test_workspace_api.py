"""`runfold.api.Workspace`: the public Python entry point the CLI is built on (real files, no mocks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import GOLDEN_HEAD, GOLDEN_RUN, run_cli

from runfold.api import Workspace, verify
from runfold.cli.ledger_cmds import PROGRESS_MIN_BYTES, _LazyBar
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.payloads import RunFrozen, RunStarted, SteerReceived
from runfold.core.records import Draft

RUN_A = "0198f6a2-0000-7000-8000-00000000000a"
RUN_B = "0198f6a2-0000-7000-8000-00000000000b"
RUN_C = "01990000-0000-7000-8000-00000000000c"


@pytest.fixture
def three_runs(tmp_path: Path) -> Workspace:
    """A workspace with runs A and B (sharing the prefix 0198f6a2-0000) and C."""
    ws = Workspace.init(tmp_path / "ws")
    with ws.writer() as ledger:
        for run in (RUN_A, RUN_B, RUN_C):
            ledger.append(
                [
                    Draft(run, "runtime", "run_started", RunStarted(task=f"task of {run[-1]}", goal="g")),
                    Draft(
                        run, "person", "steer_received", SteerReceived(source="user", text=f"steer {run[-1]}")
                    ),
                ]
            )
        ledger.append([Draft(RUN_A, "runtime", "run_frozen", RunFrozen(completion="limit"))])
    return ws


def test_init_writes_workspace_initialized(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "new")
    (first,) = ws.records()
    assert (first.seq, first.run, first.env.kind, first.env.who) == (
        0,
        WORKSPACE_RUN,
        "workspace_initialized",
        "runtime",
    )
    assert ws.runs() == []
    with pytest.raises(RunfoldError) as refused:
        Workspace.init(tmp_path / "new")
    assert refused.value.code is ErrorCode.INVALID_ARGS
    assert len(ws.records()) == 1


def test_open_finds_the_workspace_upward(three_runs: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = three_runs.root / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.delenv("RUNFOLD_WORKSPACE", raising=False)
    monkeypatch.chdir(deep)
    assert Workspace.open().root == three_runs.root


def test_records_filters(three_runs: Workspace) -> None:
    ws = three_runs
    assert [r.seq for r in ws.records()] == list(range(8))
    assert [r.seq for r in ws.records(run=RUN_A)] == [1, 2, 7]
    assert [r.seq for r in ws.records(run="0198f6a2-0000-7000-8000-00000000000b")] == [3, 4]
    assert [r.seq for r in ws.records(kind="steer_received")] == [2, 4, 6]
    assert [r.seq for r in ws.records(kind=["run_started", "run_frozen"], since=3)] == [3, 5, 7]
    assert [r.seq for r in ws.records(since=2, limit=2)] == [2, 3]
    assert [r.seq for r in ws.records(run="0199", kind="steer_received")] == [6]
    assert ws.records(limit=0) == []
    assert ws.records(since=8) == ws.records(since=100) == []
    with pytest.raises(RunfoldError) as bad_kind:
        ws.records(kind="steer_recieved")
    assert bad_kind.value.nearby[0] == "steer_received"
    with pytest.raises(RunfoldError):
        ws.records(since=-1)


def test_resolve_run_unique_ambiguous_unknown(three_runs: Workspace) -> None:
    ws = three_runs
    assert ws.runs() == [RUN_A, RUN_B, RUN_C]
    assert ws.resolve_run("0199") == RUN_C
    assert ws.resolve_run("0198F6A200007000800000000000000A") == RUN_A
    assert ws.resolve_run("workspace") == WORKSPACE_RUN
    with pytest.raises(RunfoldError) as ambiguous:
        ws.resolve_run("0198f6a2")
    assert ambiguous.value.code is ErrorCode.INVALID_ARGS
    assert set(ambiguous.value.nearby) == {RUN_A, RUN_B}
    assert RUN_A in ambiguous.value.recovery and RUN_B in ambiguous.value.recovery
    with pytest.raises(RunfoldError) as unknown:
        ws.resolve_run("0198f6a2-0000-7000-8000-00000000000d")
    assert set(unknown.value.nearby) == {RUN_A, RUN_B}  # the closest ids
    for nothing in ("", "-", " -- "):  # "-" used to name every run, so the only one resolved
        with pytest.raises(RunfoldError) as blank:
            ws.resolve_run(nothing)
        assert "give the start of a run id" in blank.value.recovery


def test_record_at_and_position(three_runs: Workspace) -> None:
    ws = three_runs
    record = ws.record_at(4)
    assert record.env.data == {"source": "user", "text": "steer b"}
    assert ws.record_at(5).env.prev == record.hash
    pos = ws.position(4)
    assert (pos.line, pos.lines, pos.segment_line, pos.segment.name) == (
        5,
        8,
        5,
        "ledger-00000000000000000000.jsonl",
    )
    with pytest.raises(RunfoldError) as out_of_range:
        ws.record_at(8)
    assert "seq 0..7" in out_of_range.value.recovery


def test_writer_is_exclusive_and_readers_need_no_lock(three_runs: Workspace) -> None:
    ws = three_runs
    with ws.writer(resume=False) as ledger:
        with pytest.raises(RunfoldError) as held:
            with Workspace.open(ws.root).writer():
                pass
        assert held.value.code is ErrorCode.LEDGER_HELD
        assert len(Workspace.open(ws.root).records()) == 8  # a reader while the writer is held
        ledger.append([Draft(RUN_B, "runtime", "run_frozen", RunFrozen(completion="cancelled"))])
    assert [r.seq for r in ws.records(run=RUN_B)] == [3, 4, 8]  # the read view was refreshed
    assert ws.verify().lines == 9


def test_bare_ledger_file_is_read_only(golden: Path) -> None:
    with Workspace.open(golden) as ws:
        assert ws.read_only
        assert ws.runs() == [GOLDEN_RUN]
        assert len(ws.records()) == 18
        assert ws.record_at(17).hash == GOLDEN_HEAD
        with pytest.raises(RunfoldError) as refused, ws.writer():
            pass
        assert refused.value.code is ErrorCode.INVALID_ARGS
    report = verify(golden)
    assert (report.lines, report.head, set(report.versions)) == (18, GOLDEN_HEAD, {1})


def test_cli_ambiguous_run_prefix(three_runs: Workspace, tmp_path: Path) -> None:
    r = run_cli("log", "-w", three_runs.root, "--run", "0198f6a2", cwd=tmp_path)
    assert r.code == 2
    assert r.err.startswith(
        "E_INVALID_ARGS: cannot pick one run for the prefix '0198f6a2' on 2 runs whose ids start with it"
    )
    assert RUN_A in r.err and RUN_B in r.err
    assert "Traceback" not in r.err
    r = run_cli(
        "log", "-w", three_runs.root, "--run", "0198f6a2-0000-7000-8000-00000000000b", "--json", cwd=tmp_path
    )
    assert [json.loads(x)["seq"] for x in r.out.splitlines()] == [3, 4]
    r = run_cli("log", "-w", three_runs.root, "--run", "0199", cwd=tmp_path)
    assert r.code == 0 and "01990000" in r.out and 'user: "steer c"' in r.out


def test_verify_reports_a_torn_tail_without_cutting_it(three_runs: Workspace, tmp_path: Path) -> None:
    segment = three_runs.root / ".runfold" / "ledger" / "ledger-00000000000000000000.jsonl"
    with segment.open("ab") as f:
        f.write(b'{"v":2,"run":"01')
    before = segment.read_bytes()
    r = run_cli("verify", "-w", three_runs.root, cwd=tmp_path)
    assert r.code == 0, r.err
    assert "ok: 8 lines verified (seq 0..7)" in r.out
    assert "16 torn byte(s)" in r.err
    assert segment.read_bytes() == before


def test_progress_bar_only_for_large_ledgers() -> None:
    small = _LazyBar()
    small(4 << 20, PROGRESS_MIN_BYTES - 1)
    assert small.bar is None
    large = _LazyBar()
    try:
        large(4 << 20, PROGRESS_MIN_BYTES)
        assert large.bar is not None
    finally:
        large.close()


@pytest.mark.parametrize("as_json", [False, True])
def test_log_into_a_closed_pipe_ends_quietly(tmp_path: Path, as_json: bool) -> None:
    ws = Workspace.init(tmp_path / "ws")
    with ws.writer() as ledger:
        ledger.append(
            [
                Draft(RUN_A, "person", "steer_received", SteerReceived(text=f"steer {i} " + "x" * 300))
                for i in range(1000)
            ]
        )
    args = [sys.executable, "-m", "runfold", "log", "-w", str(ws.root)] + (["--json"] if as_json else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()  # read one line, then hang up (like `| head -1`)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in err and err == ""
