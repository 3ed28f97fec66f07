"""Bytes at the tail that are not the writer's (DESIGN.md §3): a garbage tail that ends with a
newline is refused with a repair that exists (`quarantine_tail`, the command `runfold repair
--quarantine`), which moves the bytes into `.runfold/quarantine/` and records them in
`log_truncated`; a writer refuses to write over bytes another process appended to its segment.
Also: a ledger whose format version goes down is refused at that line (one line checker)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import blake3
import pytest

from runfold.core.canonical import Envelope, encode_line
from runfold.core.chain import Fault, LineRefused
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.ids import WORKSPACE_RUN, ZERO_HASH
from runfold.core.payloads import LogTruncated
from runfold.core.records import Draft
from runfold.store.layout import Layout
from runfold.store.ledger import Ledger
from runfold.store.verify import verify_path

FIXTURES = Path(__file__).parent.parent / "fixtures"
GOLDEN = FIXTURES / "sprawling-golden-p0.jsonl"
GOLDEN_HEAD = "0baccd18194099432a24e6e820889eac0e3d0d524dbfd1cc8cb646f037284526"
RUN_A = "0190f6a2-7c4a-7bbb-9d1e-00000000000a"


def steer(text: str) -> Draft:
    return Draft(RUN_A, "lab/room1", "steer_received", {"source": "user", "text": text})


def segment(ws: Path) -> Path:
    return sorted(Layout(ws).ledger_dir.glob("ledger-*.jsonl"))[-1]


@pytest.mark.parametrize("garbage", [b"garbage\n", b"junk line\n\n{not json}\n", b"\x00\x00\x00\n", b"x\ny"])
def test_a_garbage_tail_is_refused_then_quarantined_never_deleted(tmp_path: Path, garbage: bytes) -> None:
    with Ledger.create(tmp_path) as w:
        w.append([steer("a"), steer("b")])
        head, end = w.head, w.next_seq
    seg = segment(tmp_path)
    good = seg.read_bytes()
    seg.write_bytes(good + garbage)
    for attempt in (lambda: verify_path(tmp_path), lambda: Ledger.open(tmp_path, writer=True).close()):
        with pytest.raises(LineRefused) as err:
            attempt()
        assert err.value.fault is Fault.NOT_A_LINE and err.value.line_no == end + 1
        assert f"{len(garbage)} byte(s) from offset {len(good)}" in err.value.action
        assert "`runfold repair --quarantine`" in err.value.recovery
    assert seg.read_bytes() == good + garbage
    with Ledger.open(tmp_path, writer=True, quarantine_tail=True) as w:
        rec = w.log_truncated
        assert rec is not None and rec.seq == end and rec.env.prev == head
    data = rec.typed(LogTruncated)
    digest = blake3.blake3(garbage).hexdigest()
    assert data.dropped_bytes == len(garbage) and data.dropped_hash == f"b3-{digest}"
    assert data.segment == seg.name and data.offset == len(good)
    assert data.quarantine is not None
    assert (Layout(tmp_path).root / data.quarantine).read_bytes() == garbage
    assert seg.read_bytes() == good + rec.raw + b"\n"
    assert verify_path(tmp_path).lines == end + 1
    with Ledger.open(tmp_path, writer=True, quarantine_tail=True) as w:
        assert w.log_truncated is None  # nothing left to move


def test_garbage_before_a_valid_line_is_not_a_tail(tmp_path: Path) -> None:
    """Only bytes that hold no line at all are a tail; a repair never moves history."""
    with Ledger.create(tmp_path) as w:
        w.append([steer("a"), steer("b")])
    seg = segment(tmp_path)
    lines = seg.read_bytes().split(b"\n")
    damaged = b"\n".join([lines[0], b"garbage", *lines[1:]])
    seg.write_bytes(damaged)
    with pytest.raises(LineRefused) as err:
        Ledger.open(tmp_path, writer=True, quarantine_tail=True)
    assert "repair" not in err.value.recovery
    assert seg.read_bytes() == damaged
    assert not Layout(tmp_path).quarantine_dir.exists()


def test_old_log_truncated_lines_still_read() -> None:
    assert LogTruncated.from_data({"dropped_bytes": 7}).to_data() == {"dropped_bytes": 7}


def test_a_writer_refuses_bytes_another_process_appended(tmp_path: Path) -> None:
    with Ledger.create(tmp_path) as w:
        w.append([steer("a")])
        seg = segment(tmp_path)
        size = seg.stat().st_size
        subprocess.run(["sh", "-c", f"printf 'foreign bytes\\n' >> '{seg}'"], check=True)
        with pytest.raises(RunfoldError) as err:
            w.append([steer("b")])
        assert err.value.code is ErrorCode.LEDGER_CORRUPT
        assert f"appended 14 byte(s) to it at offset {size}" in err.value.action
        assert str(seg) == err.value.subject and "runfold repair --quarantine" in err.value.recovery
        with pytest.raises(RunfoldError):  # poisoned: every later append is refused too
            w.append([steer("c")])
    assert seg.read_bytes()[size:] == b"foreign bytes\n"


def test_a_writer_refuses_a_segment_another_process_cut(tmp_path: Path) -> None:
    with Ledger.create(tmp_path) as w:
        w.append([steer("a"), steer("b")])
        seg = segment(tmp_path)
        size = seg.stat().st_size
        with open(seg, "r+b") as f:
            f.truncate(size - 5)
        with pytest.raises(RunfoldError) as err:
            w.append([steer("c")])
        assert err.value.code is ErrorCode.LEDGER_CORRUPT and f"cut it from {size} to {size - 5}" in err.value.action


def _line(v: int, seq: int, prev: str) -> bytes:
    return encode_line(
        Envelope(v=v, run=WORKSPACE_RUN, seq=seq, prev=prev, t=1, who="runtime", kind="cache_renewed", data={})
    )


def test_a_version_that_goes_down_is_refused_at_that_line(tmp_path: Path) -> None:
    raws: list[bytes] = []
    prev = ZERO_HASH
    for seq, v in enumerate((1, 1, 2, 2, 1, 2)):
        raw = _line(v, seq, prev)
        raws.append(raw)
        prev = blake3.blake3(raw).hexdigest()
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b"\n".join(raws) + b"\n")
    with pytest.raises(LineRefused) as err:
        verify_path(path)
    e = err.value
    assert e.fault is Fault.VERSION_DOWN and e.line_no == 5 and e.seq == 4
    assert e.code is ErrorCode.LEDGER_CORRUPT and "version 1 follows a line of version 2" in e.action
    assert "restore the ledger from a copy" in e.recovery
    # up is fine: the same lines without the step down verify
    path.write_bytes(b"\n".join(raws[:4]) + b"\n")
    assert verify_path(path).versions == frozenset({1, 2})


def test_the_foreign_golden_ledger_still_verifies_with_its_head(tmp_path: Path) -> None:
    report = verify_path(GOLDEN)
    assert report.head == GOLDEN_HEAD and report.lines == 18
