"""The ledger on disk (DESIGN.md §3 "Storage"): create, open, group commit, segments, the writer
lock, torn tails versus damage, failed batches, readers, the golden foreign ledger."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runfold.core.chain import Fault, LineRefused
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.payloads import LogTruncated, WorkspaceInitialized
from runfold.core.records import Draft
from runfold.store.layout import Layout, find_workspace, segment_name
from runfold.store.ledger import Ledger, WriterIO
from runfold.store.verify import verify_path

FIXTURES = Path(__file__).parent.parent / "fixtures"
GOLDEN = FIXTURES / "sprawling-golden-p0.jsonl"
GOLDEN_HEAD = "0baccd18194099432a24e6e820889eac0e3d0d524dbfd1cc8cb646f037284526"
RUN_A = "0190f6a2-7c4a-7bbb-9d1e-00000000000a"
RUN_B = "0190f6a2-7c4a-7bbb-9d1e-00000000000b"


def steer(run: str, text: str) -> Draft:
    return Draft(run, "lab/room1", "steer_received", {"source": "user", "text": text}, addr="lab/room1")


def segment_files(ws: Path) -> list[Path]:
    return sorted(Layout(ws).ledger_dir.glob("ledger-*.jsonl"))


def ledger_bytes(ws: Path) -> bytes:
    return b"".join(p.read_bytes() for p in segment_files(ws))


def test_create_writes_workspace_initialized(tmp_path: Path) -> None:
    with Ledger.create(tmp_path / "ws") as ledger:
        assert ledger.next_seq == 1
        rec = ledger.record_at(0)
        assert rec.kind_name == "workspace_initialized"
        assert rec.env.who == "runtime" and rec.run == WORKSPACE_RUN
        assert isinstance(rec.payload(), WorkspaceInitialized)
        assert ledger.head == rec.hash
    layout = Layout(tmp_path / "ws")
    assert [p.name for p in segment_files(layout.ws)] == [segment_name(0)]
    assert layout.cas_dir.is_dir() and layout.index_dir.is_dir()


def test_create_refuses_an_existing_ledger(tmp_path: Path) -> None:
    Ledger.create(tmp_path).close()
    before = ledger_bytes(tmp_path)
    with pytest.raises(RunfoldError) as err:
        Ledger.create(tmp_path)
    assert err.value.code is ErrorCode.INVALID_ARGS
    assert ledger_bytes(tmp_path) == before


def test_open_without_workspace_says_run_init(tmp_path: Path) -> None:
    with pytest.raises(RunfoldError) as err:
        Ledger.open(tmp_path, writer=False)
    assert err.value.code is ErrorCode.PATH_NOT_FOUND
    assert "runfold init" in err.value.recovery


def test_append_batches_and_read_back(tmp_path: Path) -> None:
    with Ledger.create(tmp_path) as w:
        recs = w.append([steer(RUN_A, "one"), steer(RUN_B, "two"), steer(RUN_A, "three")])
        assert [r.seq for r in recs] == [1, 2, 3]
        assert recs[0].env.prev == w.record_at(0).hash
        assert w.head == recs[-1].hash and w.next_seq == 4
        assert w.append([]) == []
        w.append([steer(RUN_B, "four")])
    with Ledger.open(tmp_path, writer=False) as r:
        assert r.next_seq == 5
        assert r.runs() == [RUN_A, RUN_B]
        assert [x.env.data["text"] for x in r.run_records(RUN_A)] == ["one", "three"]
        assert [x.seq for x in r.records(2)] == [2, 3, 4]
        assert r.record_at(3).raw == recs[2].raw
        assert r.run_records("0190f6a2-7c4a-7bbb-9d1e-0000000000ff") == []
        with pytest.raises(RunfoldError) as err:
            r.record_at(5)
        assert err.value.code is ErrorCode.INVALID_ARGS and "0..4" in err.value.recovery
        with pytest.raises(RunfoldError):
            list(r.records(6))
        with pytest.raises(RunfoldError) as err2:
            r.append([steer(RUN_A, "x")])
        assert err2.value.code is ErrorCode.INVALID_ARGS


def test_bad_drafts_write_nothing(tmp_path: Path) -> None:
    with Ledger.create(tmp_path) as w:
        before = ledger_bytes(tmp_path)
        bad = [
            Draft("not-a-uuid", "runtime", "log_truncated", {"dropped_bytes": 1}),
            Draft(RUN_A, "runtime", "no_such_kind", {}),
            Draft(RUN_A, "runtime", "steer_received", {"source": "user", "ratio": 0.5}),
            Draft(RUN_A, "runtime", "steer_received", {}, addr="/abs"),
            Draft(RUN_A, "runtime", "steer_received", LogTruncated()),
        ]
        for i, d in enumerate(bad):
            with pytest.raises(RunfoldError) as err:
                w.append([steer(RUN_A, "ok"), d])
            assert err.value.code is ErrorCode.INVALID_ARGS, i
        assert ledger_bytes(tmp_path) == before
        assert w.next_seq == 1
        # a foreign kind carried with ig:true is fine and stays in the chain
        (rec,) = w.append([Draft(RUN_A, "city", "future_kind", {"x": 1}, ig=True)])
        assert not rec.known
    assert verify_path(tmp_path).skipped_unknown == 1


@pytest.mark.parametrize("data", [[1, 2], "text", None, 3, (), b"{}"], ids=repr)
def test_a_draft_whose_data_is_neither_an_object_nor_a_payload_is_refused_naming_it(
    tmp_path: Path, data: object
) -> None:
    with Ledger.create(tmp_path) as w:
        before = ledger_bytes(tmp_path)
        for kind, ig in (("steer_received", False), ("future_kind", True)):
            with pytest.raises(RunfoldError) as err:
                w.append([steer(RUN_A, "ok"), Draft(RUN_A, "runtime", kind, data, ig=ig)])  # type: ignore[arg-type]
            assert err.value.code is ErrorCode.INVALID_ARGS and err.value.subject == "drafts[1].data", kind
        with pytest.raises(RunfoldError) as err:
            w.append([Draft(RUN_A, "runtime", "steer_received", LogTruncated())])
        assert err.value.subject.startswith("drafts[0].data (draft of kind steer_received carries a")
        assert ledger_bytes(tmp_path) == before and w.next_seq == 1


def test_segments_roll_and_chain_continues(tmp_path: Path) -> None:
    with Ledger.create(tmp_path, segment_bytes=600) as w:
        for i in range(12):
            w.append([steer(RUN_A, f"line {i}"), steer(RUN_B, f"other {i}")])
        segs = w.segments()
    assert len(segs) > 3
    with Ledger.open(tmp_path, writer=False) as r:
        firsts = [int(p.name[7:27]) for p in segs]
        for first in firsts:
            assert r.record_at(first).seq == first
        assert [x.seq for x in r.records()] == list(range(25))
    report = verify_path(tmp_path)
    assert report.lines == 25 and report.segments == len(segs)
    # one segment alone verifies from its first line's seq and prev, and says so
    lone = verify_path(segs[2])
    assert lone.first_seq == firsts[2] and "starts at seq" in lone.start_note
    # a writer reopening continues in the last segment, then rolls again
    with Ledger.open(tmp_path, writer=True, segment_bytes=600) as w:
        w.append([steer(RUN_A, "after reopen")] * 3)
    assert verify_path(tmp_path).lines == 28


def test_misnamed_segment_is_refused(tmp_path: Path) -> None:
    with Ledger.create(tmp_path, segment_bytes=300) as w:
        for i in range(4):
            w.append([steer(RUN_A, f"line {i}")])
    segs = segment_files(tmp_path)
    segs[-1].rename(segs[-1].with_name(segment_name(99)))
    with pytest.raises(RunfoldError) as err:
        verify_path(tmp_path)
    assert err.value.code is ErrorCode.LEDGER_CORRUPT
    with pytest.raises(RunfoldError):
        Ledger.open(tmp_path, writer=True)


def test_torn_tail_is_cut_with_one_log_truncated(tmp_path: Path) -> None:
    with Ledger.create(tmp_path) as w:
        w.append([steer(RUN_A, "kept")])
    seg = segment_files(tmp_path)[-1]
    good = seg.read_bytes()
    torn = b'{"v":2,"run":"0190f6a2-7c4a-7bb'
    seg.write_bytes(good + torn)
    # a reader reports it and reads everything before it, and writes nothing
    with Ledger.open(tmp_path, writer=False) as r:
        assert r.torn_tail_bytes == len(torn) and r.next_seq == 2
    assert verify_path(tmp_path).torn_tail_bytes == len(torn)
    assert seg.read_bytes() == good + torn
    with Ledger.open(tmp_path, writer=True) as w:
        assert w.torn_tail_bytes == len(torn)
        last = w.record_at(2)
        assert last.kind_name == "log_truncated" and last.env.who == "runtime"
        assert last.typed(LogTruncated).dropped_bytes == len(torn)
    assert seg.read_bytes() == good + last.raw + b"\n"
    # a second open finds nothing to cut and writes nothing
    with Ledger.open(tmp_path, writer=True) as w:
        assert w.torn_tail_bytes == 0 and w.next_seq == 3
    assert seg.read_bytes() == good + last.raw + b"\n"


def test_garbage_followed_by_valid_lines_is_refused_not_cut(tmp_path: Path) -> None:
    with Ledger.create(tmp_path) as w:
        w.append([steer(RUN_A, "a"), steer(RUN_A, "b"), steer(RUN_A, "c")])
    seg = segment_files(tmp_path)[-1]
    lines = seg.read_bytes().split(b"\n")
    damaged = b"\n".join([lines[0], lines[1], b"#garbage#", *lines[3:]])
    seg.write_bytes(damaged)
    for writer in (True, False):
        with pytest.raises(LineRefused) as err:
            Ledger.open(tmp_path, writer=writer)
        assert err.value.line_no == 3 and err.value.fault is Fault.NOT_A_LINE
        assert seg.read_bytes() == damaged
    # garbage at the end whose newline was damaged so it swallowed a valid line: refused too
    merged = b"\n".join(lines[:2]) + b"\n" + b"xx" + lines[2] + b"\n"
    seg.write_bytes(merged)
    with pytest.raises(LineRefused):
        Ledger.open(tmp_path, writer=True)
    assert seg.read_bytes() == merged


def test_chain_break_is_refused_never_truncated(tmp_path: Path) -> None:
    with Ledger.create(tmp_path) as w:
        w.append([steer(RUN_A, "alpha"), steer(RUN_A, "beta"), steer(RUN_A, "gamma")])
    seg = segment_files(tmp_path)[-1]
    data = seg.read_bytes().replace(b"alpha", b"alphA")
    seg.write_bytes(data)
    with pytest.raises(LineRefused) as err:
        Ledger.open(tmp_path, writer=True)
    # line 3 (beta) is intact (line 4 links to it), so the changed line 2 is named
    assert err.value.line_no == 2 and err.value.fault is Fault.CHAIN_BREAK
    assert seg.read_bytes() == data


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from runfold.store.ledger import Ledger
    w = Ledger.open(Path(sys.argv[1]), writer=True)
    print("held", flush=True)
    sys.stdin.readline()
    w.close()
    """
)


def test_second_writer_is_refused_naming_the_holder_pid(tmp_path: Path) -> None:
    Ledger.create(tmp_path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunfoldError) as err:
            Ledger.open(tmp_path, writer=True)
        assert err.value.code is ErrorCode.LEDGER_HELD
        assert f"pid {holder.pid}" in str(err.value)
        # readers need no lock
        with Ledger.open(tmp_path, writer=False) as r:
            assert r.next_seq == 1
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)
    with Ledger.open(tmp_path, writer=True) as w:  # released when the holder closed
        assert w.next_seq == 1


def test_failed_write_rolls_back_and_poisons(tmp_path: Path) -> None:
    def failing_sync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    with Ledger.create(tmp_path) as w:
        w.append([steer(RUN_A, "durable")])
    before = ledger_bytes(tmp_path)
    w = Ledger.open(tmp_path, writer=True, io=WriterIO(sync=failing_sync))
    try:
        head, nxt = w.head, w.next_seq
        with pytest.raises(RunfoldError) as err:
            w.append([steer(RUN_A, "lost 1"), steer(RUN_A, "lost 2")])
        assert err.value.code is ErrorCode.STORAGE_FATAL and "reopen" in err.value.recovery
        assert ledger_bytes(tmp_path) == before  # rolled back on disk
        assert (w.head, w.next_seq) == (head, nxt)  # nothing advanced
        w.io = WriterIO()  # even with healthy storage again, the writer stays refused
        with pytest.raises(RunfoldError) as err2:
            w.append([steer(RUN_A, "refused")])
        assert err2.value.code is ErrorCode.STORAGE_FATAL
    finally:
        w.close()
    with Ledger.open(tmp_path, writer=True) as w2:
        assert w2.torn_tail_bytes == 0
        w2.append([steer(RUN_A, "after reopen")])
    assert verify_path(tmp_path).lines == 3


def test_short_writes_are_completed(tmp_path: Path) -> None:
    def short_pwrite(fd: int, data: bytes, offset: int) -> int:
        return os.pwrite(fd, data[:7], offset)

    Ledger.create(tmp_path).close()
    with Ledger.open(tmp_path, writer=True, io=WriterIO(pwrite=short_pwrite)) as w:
        w.append([steer(RUN_A, "in pieces"), steer(RUN_B, "of seven bytes")])
    assert verify_path(tmp_path).lines == 3


def test_golden_foreign_ledger_verifies_and_accepts_appends(tmp_path: Path) -> None:
    report = verify_path(GOLDEN)
    assert (report.lines, report.head, report.versions) == (18, GOLDEN_HEAD, frozenset({1}))
    assert report.first_seq == 0 and report.last_seq == 17 and report.torn_tail_bytes == 0
    layout = Layout(tmp_path)
    layout.ledger_dir.mkdir(parents=True)
    shutil.copy(GOLDEN, layout.segment_path(0))
    with Ledger.open(tmp_path, writer=True) as w:
        assert w.next_seq == 18 and w.head == GOLDEN_HEAD
        run = w.runs()[0]
        assert len(w.run_records(run)) == 17
        (rec,) = w.append([steer(RUN_A, "after sprawling")])
        assert rec.env.prev == GOLDEN_HEAD and rec.seq == 18
    report = verify_path(tmp_path)
    assert report.lines == 19 and report.versions == frozenset({1, 2})
    assert layout.segment_path(0).read_bytes().startswith(GOLDEN.read_bytes())


def test_find_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    Ledger.create(ws).close()
    deep = ws / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.delenv("RUNFOLD_WORKSPACE", raising=False)
    monkeypatch.chdir(deep)
    assert find_workspace() == ws.absolute()
    assert find_workspace(ws / ".runfold") == ws.absolute()
    monkeypatch.setenv("RUNFOLD_WORKSPACE", str(ws))
    monkeypatch.chdir(tmp_path)
    assert find_workspace() == ws.absolute()
    monkeypatch.delenv("RUNFOLD_WORKSPACE")
    with pytest.raises(RunfoldError) as err:
        find_workspace()
    assert err.value.code is ErrorCode.PATH_NOT_FOUND and "runfold init" in err.value.recovery
    with pytest.raises(RunfoldError):
        find_workspace(deep)


def test_a_lock_left_by_a_dead_writers_child_is_waited_for(tmp_path: Path) -> None:
    """After a SIGKILL, a process the writer had just started may hold the lock for a moment
    (found by the kill test): with the pid in the file gone, the next writer waits for it;
    with the pid alive, it is refused at once."""
    import subprocess
    import sys

    from runfold.store.locks import take_writer_lock as _take_writer_lock

    lock = tmp_path / "ledger.lock"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
            "fcntl.flock(fd, fcntl.LOCK_EX); os.pwrite(fd, sys.argv[2].encode() + b'\\n', 0);"
            "print('held', flush=True); time.sleep(0.4)",
            str(lock),
            dead.stdout.strip(),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    fd = _take_writer_lock(lock)  # waits for the holder to exit instead of refusing
    os.close(fd)
    holder.wait()
    alive = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
            "fcntl.flock(fd, fcntl.LOCK_EX); os.ftruncate(fd, 0); os.pwrite(fd, str(os.getpid()).encode(), 0);"
            "print('held', flush=True); time.sleep(30)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert alive.stdout is not None and alive.stdout.readline().strip() == "held"
        with pytest.raises(RunfoldError) as held:
            _take_writer_lock(lock)
        assert held.value.code is ErrorCode.LEDGER_HELD and str(alive.pid) in held.value.action
    finally:
        alive.kill()
        alive.wait()
