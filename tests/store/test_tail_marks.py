"""A ledger's tail cannot vanish unnoticed (DESIGN.md §3 "Marks outside the ledger"): the head
mark and the resume mark name lines the ledger held; verify and every writer refuse a ledger
that no longer holds them (lines deleted from the end, the newest segment deleted or zeroed, the
last line re-encoded), and a mark never moves back. A mark is written only after its lines are
durable, so a mark that lags (a crash before it was written, an older one restored) is never an
alarm. Also: a writer refuses a workspace whose segments hold 0 bytes, as readers do."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.records import Draft
from runfold.store.layout import Layout
from runfold.store.ledger import Ledger
from runfold.store.marks import HEAD_MARK_BYTES, head_mark_bytes, read_head_mark, read_resume_mark
from runfold.store.verify import verify_path

RUN_A = "0190f6a2-7c4a-7bbb-9d1e-00000000000a"


def steer(text: str) -> Draft:
    return Draft(RUN_A, "lab/room1", "steer_received", {"source": "user", "text": text}, addr="lab/room1")


def segments(ws: Path) -> list[Path]:
    return sorted(Layout(ws).ledger_dir.glob("ledger-*.jsonl"))


def build(ws: Path, batches: int = 4, segment_bytes: int = 64 << 20) -> list[tuple[int, str]]:
    """A ledger of `batches` batches of 3 lines; returns (seq, hash) of every line."""
    out: list[tuple[int, str]] = []
    with Ledger.create(ws, segment_bytes=segment_bytes) as w:
        out.append((0, w.head))
        for b in range(batches):
            out += [(r.seq, r.hash) for r in w.append([steer(f"batch {b} line {i}") for i in range(3)])]
    return out


def refused(ws: Path) -> list[RunfoldError]:
    """The refusals of verify and of a writer's open (both must refuse)."""
    errors: list[RunfoldError] = []
    for attempt in (lambda: verify_path(ws), lambda: Ledger.open(ws, writer=True).close()):
        with pytest.raises(RunfoldError) as err:
            attempt()
        errors.append(err.value)
    return errors


def test_the_head_mark_follows_every_durable_batch(tmp_path: Path) -> None:
    lines = build(tmp_path)
    mark = read_head_mark(Layout(tmp_path))
    assert mark is not None and (mark.seq, mark.hash) == lines[-1]
    data = Layout(tmp_path).head_mark_path.read_bytes()
    assert len(data) == HEAD_MARK_BYTES and data == head_mark_bytes(*lines[-1])
    with Ledger.open(tmp_path, writer=True) as w:
        [rec] = w.append([steer("one more")])
        again = read_head_mark(Layout(tmp_path))
        assert again is not None and (again.seq, again.hash) == (rec.seq, rec.hash)
    assert verify_path(tmp_path).marks[0].seq == rec.seq


def test_deleting_the_last_line_is_refused_by_verify_and_writers(tmp_path: Path) -> None:
    lines = build(tmp_path)
    seg = segments(tmp_path)[-1]
    kept = seg.read_bytes().split(b"\n")[:-2]
    seg.write_bytes(b"\n".join(kept) + b"\n")
    for err in refused(tmp_path):
        assert err.code is ErrorCode.LEDGER_CORRUPT
        assert f"ends at seq {len(lines) - 2}" in err.action and f"recorded seq {len(lines) - 1}" in err.action
        assert "lost its newest lines" in err.action and "`runfold verify`" in err.recovery
    assert seg.read_bytes() == b"\n".join(kept) + b"\n"  # nothing written, nothing cut
    mark = read_head_mark(Layout(tmp_path))
    assert mark is not None and mark.seq == len(lines) - 1  # never moved back


def test_deleting_or_zeroing_the_newest_segment_is_refused(tmp_path: Path) -> None:
    build(tmp_path, batches=8, segment_bytes=700)
    segs = segments(tmp_path)
    assert len(segs) >= 3
    backup = tmp_path.parent / "backup"
    shutil.copytree(tmp_path, backup)
    segs[-1].unlink()
    for err in refused(tmp_path):
        assert "lost its newest lines" in err.action
    shutil.rmtree(tmp_path)
    shutil.copytree(backup, tmp_path)
    segs[-1].write_bytes(b"")
    for err in refused(tmp_path):
        assert "lost its newest lines" in err.action
    # the copy verifies and opens: restoring it is the way out the refusal names
    shutil.rmtree(tmp_path)
    shutil.copytree(backup, tmp_path)
    verify_path(tmp_path)
    Ledger.open(tmp_path, writer=True).close()


def test_zeroing_the_only_segment_is_refused_naming_what_was_recorded(tmp_path: Path) -> None:
    build(tmp_path)
    segments(tmp_path)[0].write_bytes(b"")
    for err in refused(tmp_path):
        assert "holds no line" in err.action and "head mark" in err.action


def test_a_writer_refuses_a_workspace_whose_only_segment_is_empty(tmp_path: Path) -> None:
    """Without any mark (a workspace made before marks, or its marks gone too), the writer still
    refuses 0 bytes as verify does, instead of starting a new chain at line 0."""
    build(tmp_path)
    seg = segments(tmp_path)[0]
    seg.write_bytes(b"")
    for name in ("head-mark.json", "resume-mark.json"):
        (Layout(tmp_path).root / name).unlink(missing_ok=True)
    for err in refused(tmp_path):
        assert err.code is ErrorCode.LEDGER_CORRUPT and "0 bytes, no line" in err.action
        assert "restore the ledger directory from a copy" in err.recovery
    assert seg.read_bytes() == b""


def test_a_canonical_edit_of_the_last_line_is_refused(tmp_path: Path) -> None:
    lines = build(tmp_path)
    seg = segments(tmp_path)[-1]
    data = seg.read_bytes()
    edited = data.replace(b"batch 3 line 2", b"batch 3 line X")
    assert edited != data
    seg.write_bytes(edited)
    for err in refused(tmp_path):
        assert f"line at seq {lines[-1][0]} hashes to" in err.action and "changed or replaced" in err.action
    assert seg.read_bytes() == edited  # the next writer did not seal the edit into the chain


def test_a_resume_mark_the_ledger_no_longer_holds_is_evidence_too(tmp_path: Path) -> None:
    lines = build(tmp_path)
    layout = Layout(tmp_path)
    layout.head_mark_path.unlink()
    seq, digest = lines[-1]
    layout.resume_mark_path.write_bytes(orjson.dumps({"seq": seq, "hash": digest}))
    seg = segments(tmp_path)[-1]
    seg.write_bytes(b"\n".join(seg.read_bytes().split(b"\n")[:-3]) + b"\n")
    for err in refused(tmp_path):
        assert "resume mark" in err.action and f"recorded seq {seq}" in err.action
    mark = read_resume_mark(layout)
    assert mark is not None and mark.seq == seq


def test_a_mark_that_lags_is_no_alarm_and_moves_forward(tmp_path: Path) -> None:
    """A crash between a batch's fsync and its mark write leaves the mark one batch behind; an
    older mark restored from a copy is behind too. Neither is an alarm."""
    lines = build(tmp_path)
    layout = Layout(tmp_path)
    layout.head_mark_path.write_bytes(head_mark_bytes(*lines[3]))
    assert verify_path(tmp_path).lines == len(lines)
    with Ledger.open(tmp_path, writer=True):
        pass
    mark = read_head_mark(layout)
    assert mark is not None and (mark.seq, mark.hash) == lines[-1]


@pytest.mark.parametrize(
    "content",
    [b"", b"not json", b"{}", head_mark_bytes(3, "ab" * 32)[:60], head_mark_bytes(99, "cd" * 32).replace(b"cd", b"ce", 1)],
)
def test_an_unreadable_or_torn_head_mark_is_no_evidence(tmp_path: Path, content: bytes) -> None:
    """Empty (a crash before its data reached the disk), garbage, cut, or failing its check (an
    update read half done): ignored, never an alarm; the next writer rewrites it."""
    lines = build(tmp_path)
    layout = Layout(tmp_path)
    layout.head_mark_path.write_bytes(content)
    assert read_head_mark(layout) is None
    verify_path(tmp_path)
    with Ledger.open(tmp_path, writer=True):
        pass
    mark = read_head_mark(layout)
    assert mark is not None and (mark.seq, mark.hash) == lines[-1]


def test_lines_a_dead_writer_left_unsynced_are_synced_before_a_mark_names_them(tmp_path: Path) -> None:
    """The open that finds lines past the head mark fsyncs the segment before recording them."""
    lines = build(tmp_path)
    layout = Layout(tmp_path)
    layout.head_mark_path.write_bytes(head_mark_bytes(*lines[2]))
    synced: list[int] = []
    from runfold.store.ledger import WriterIO

    io = WriterIO()
    io.sync = lambda fd: synced.append(fd)  # type: ignore[method-assign]
    with Ledger.open(tmp_path, writer=True, io=io):
        assert len(synced) == 1
        mark = read_head_mark(layout)
        assert mark is not None and mark.seq == lines[-1][0]
    synced.clear()
    with Ledger.open(tmp_path, writer=True, io=io):
        assert synced == []  # the mark names the last line already: no fsync at open


def test_a_head_mark_that_is_a_symlink_is_never_written_through(tmp_path: Path) -> None:
    # the mark is evidence, not a place to write: a symlink at its name must not let the writer
    # overwrite the first bytes of a file elsewhere
    ws = tmp_path / "ws"
    build(ws, batches=1)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"x" * 300)
    mark = Layout(ws).head_mark_path
    mark.unlink()
    mark.symlink_to(victim)
    with Ledger.open(ws, writer=True) as w:
        w.append([steer("after the symlink")])
    assert victim.read_bytes() == b"x" * 300
    assert read_head_mark(Layout(ws)) is None


def test_a_head_mark_that_is_a_fifo_hangs_no_reader_and_no_writer(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    ws = tmp_path / "ws"
    build(ws, batches=1)
    mark = Layout(ws).head_mark_path
    mark.unlink()
    os.mkfifo(mark)
    script = (
        "import sys; from pathlib import Path\n"
        "from runfold.store.layout import Layout\n"
        "from runfold.store.ledger import Ledger\n"
        "from runfold.store.marks import read_head_mark\n"
        "from runfold.store.verify import verify_path\n"
        "ws = Path(sys.argv[1])\n"
        "assert read_head_mark(Layout(ws)) is None\n"
        "verify_path(ws)\n"
        "with Ledger.open(ws, writer=True) as w: w.append([])\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", script, str(ws)], capture_output=True, text=True, timeout=120)
    assert res.stdout.strip() == "ok", res
