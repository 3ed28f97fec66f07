"""Ledger group commit with staging: lines get seq/prev when staged, become
durable and visible only at flush, and a failed flush rolls back and poisons the writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.payloads import SteerReceived
from runfold.core.records import Draft
from runfold.store.ledger import Ledger, WriterIO
from runfold.store.verify import verify_path

RUN = "0190a0b0-0000-7000-8000-0000000000aa"


def steer(text: str) -> Draft:
    return Draft(RUN, "person", "steer_received", SteerReceived.from_data({"source": "user", "text": text}))


class CountingIO(WriterIO):
    def __init__(self) -> None:
        super().__init__()
        self.syncs = 0
        self.writes = 0
        real_sync, real_write = self.sync, self.pwrite

        def sync(fd: int) -> None:
            self.syncs += 1
            real_sync(fd)

        def pwrite(fd: int, data: bytes, off: int) -> int:
            self.writes += 1
            return real_write(fd, data, off)

        self.sync, self.pwrite = sync, pwrite


def test_staged_lines_get_their_place_but_are_visible_only_after_flush(tmp_path: Path) -> None:
    io = CountingIO()
    led = Ledger.create(tmp_path, io=io)
    before = (io.syncs, io.writes, led.next_seq, led.head)
    a = led.stage([steer("one")])
    b = led.stage([steer("two"), steer("three")])
    assert [r.seq for r in a + b] == [1, 2, 3]
    assert b[0].env.prev == a[0].hash and b[1].env.prev == b[0].hash
    assert (io.syncs, io.writes, led.next_seq, led.head) == before  # nothing written yet
    assert led.staged == 3
    with Ledger.open(tmp_path, writer=False) as reader:
        assert reader.next_seq == 1
    assert led.flush() == 3
    assert (io.syncs - before[0], io.writes - before[1]) == (1, 1)  # one write, one fsync
    assert led.next_seq == 4 and led.head == b[1].hash and led.staged == 0
    assert led.flush() == 0 and io.syncs - before[0] == 1  # nothing staged: no system call
    # what was staged is byte-identical to what is read back
    assert [led.record_at(s).raw for s in (1, 2, 3)] == [r.raw for r in a + b]
    led.close()
    assert verify_path(tmp_path).lines == 4


def test_append_flushes_earlier_staged_lines_first(tmp_path: Path) -> None:
    led = Ledger.create(tmp_path)
    led.stage([steer("staged")])
    rec = led.append([steer("appended")])
    assert rec[0].seq == 2
    assert [r.env.data["text"] for r in led.records(since=1)] == ["staged", "appended"]
    led.close()


def test_close_drops_unflushed_lines(tmp_path: Path) -> None:
    led = Ledger.create(tmp_path)
    led.stage([steer("lost")])
    led.close()
    with Ledger.open(tmp_path, writer=True) as again:
        assert again.next_seq == 1
        assert again.append([steer("kept")])[0].seq == 1
    assert verify_path(tmp_path).lines == 2


def test_failed_flush_rolls_back_and_poisons(tmp_path: Path) -> None:
    io = WriterIO()
    led = Ledger.create(tmp_path, io=io)
    size = led.segments()[-1].stat().st_size

    def broken(fd: int) -> None:
        raise OSError(28, "No space left on device")

    io.sync = broken
    led.stage([steer("a"), steer("b")])
    with pytest.raises(RunfoldError) as err:
        led.flush()
    assert err.value.code is ErrorCode.STORAGE_FATAL
    assert led.segments()[-1].stat().st_size == size  # cut back
    assert led.next_seq == 1 and led.staged == 0
    with pytest.raises(RunfoldError):
        led.stage([steer("c")])
    led.close()
    assert verify_path(tmp_path).lines == 1


def test_stage_refuses_a_bad_draft_and_stages_nothing(tmp_path: Path) -> None:
    led = Ledger.create(tmp_path)
    with pytest.raises(RunfoldError) as err:
        led.stage(
            [steer("ok"), Draft("not-a-uuid", "person", "steer_received", {"source": "user", "text": "x"})]
        )
    assert err.value.code is ErrorCode.INVALID_ARGS and "drafts[1]" in err.value.subject
    assert led.staged == 0
    led.close()
