"""The writer's sync helper (`WhileSyncing`) and the index work `Ledger.flush` gives it during the
fdatasync (DESIGN.md §3 group commit): the job runs while the wait runs, its outcome reaches the
caller only after both returned, and the index never learns rows of a batch whose sync failed."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.records import Draft
from runfold.store.index_blocks import rows_claimed
from runfold.store.index_file import INDEX_FILE
from runfold.store.layout import Layout
from runfold.store.ledger import Ledger, WriterIO
from runfold.store.verify import verify_path
from runfold.store.while_syncing import WhileSyncing

RUN = "0190f6a2-7c4a-7bbb-9d1e-00000000000a"
GUARD_S = 60.0
"""How long a test waits for the other thread before giving up (a hang guard, not a measure)."""


def steer(text: str) -> Draft:
    return Draft(RUN, "lab/room1", "steer_received", {"source": "user", "text": text})


def test_the_job_runs_on_another_thread_during_the_wait() -> None:
    helper = WhileSyncing()
    started = threading.Event()
    try:

        def job() -> str:
            started.set()  # the wait below returns only once this ran
            return threading.current_thread().name

        def wait() -> None:
            assert started.wait(GUARD_S)

        name = helper.run(job, wait)
        assert name != threading.current_thread().name
        assert helper.run(lambda: 7, lambda: None) == 7  # the same thread serves again
    finally:
        helper.close()
        helper.close()  # twice is fine


def test_a_failed_wait_propagates_after_the_job_returned() -> None:
    helper = WhileSyncing()
    done: list[int] = []
    release = threading.Event()

    def job() -> None:
        assert release.wait(GUARD_S)
        done.append(1)

    def wait() -> None:
        release.set()
        raise OSError(5, "Input/output error")

    try:
        with pytest.raises(OSError, match="Input/output"):
            helper.run(job, wait)
        assert done == [1]
    finally:
        helper.close()


def test_the_jobs_exception_propagates_and_the_helper_stays_usable() -> None:
    helper = WhileSyncing()

    def job() -> None:
        raise sqlite3.OperationalError("disk I/O error")

    try:
        with pytest.raises(sqlite3.OperationalError):
            helper.run(job, lambda: None)
        assert helper.run(lambda: "again", lambda: None) == "again"
    finally:
        helper.close()
    assert helper.run(lambda: "restarted", lambda: None) == "restarted"  # after close: a new thread
    helper.close()


def test_a_forked_child_gets_its_own_helper(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, sys
        from runfold.store.while_syncing import WhileSyncing
        helper = WhileSyncing()
        assert helper.run(lambda: 1, lambda: None) == 1
        pid = os.fork()
        if pid == 0:
            ok = helper.run(lambda: 2, lambda: None) == 2  # the parent's thread is not in the child
            helper.close()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        helper.close()
        sys.exit(os.waitstatus_to_exitcode(status))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], timeout=GUARD_S, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _index_rows(ws: Path) -> int:
    """Seqs covered by the block rows of the index file (what a crash would leave of it)."""
    db = sqlite3.connect(Layout(ws).index_dir / INDEX_FILE)
    try:
        row = db.execute(
            "SELECT first_seq, length(rows) FROM blocks ORDER BY first_seq DESC LIMIT 1"
        ).fetchone()
    finally:
        db.close()
    if row is None:
        return 0
    return int(row[0]) + rows_claimed(int(row[1]))


def test_a_failed_sync_leaves_the_index_behind_the_ledger(tmp_path: Path) -> None:
    calls = 0

    def sync_failing_second(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(28, "No space left on device")

    Ledger.create(tmp_path).close()
    w = Ledger.open(tmp_path, writer=True, io=WriterIO(sync=sync_failing_second))
    try:
        w._index.file().flush_rows = 1  # every batch flushes the rows held before it
        w.append([steer(f"durable {i}") for i in range(3)])  # seqs 1..3
        with pytest.raises(RunfoldError) as err:
            w.append([steer(f"lost {i}") for i in range(3)])  # its sync fails
        assert err.value.code is ErrorCode.STORAGE_FATAL
        assert w.next_seq == 4
        assert w._index.file().next_seq == 4  # the failed batch's rows were never added
        assert _index_rows(tmp_path) <= 4  # the file holds rows of durable lines only
    finally:
        w.close()
    with Ledger.open(tmp_path, writer=False) as r:
        assert [x.env.data["text"] for x in r.run_records(RUN)] == [f"durable {i}" for i in range(3)]
    assert verify_path(tmp_path).lines == 4


def test_rows_flushed_during_the_sync_read_back(tmp_path: Path) -> None:
    with Ledger.create(tmp_path) as w:
        w._index.file().flush_rows = 2
        for b in range(5):
            w.append([steer(f"{b}.{i}") for i in range(3)])
        flushed = _index_rows(tmp_path)
        assert 0 < flushed <= w.next_seq - 3  # flushed during later syncs: never this batch's rows
    with Ledger.open(tmp_path, writer=False) as r:
        assert [x.env.data["text"] for x in r.run_records(RUN)] == [
            f"{b}.{i}" for b in range(5) for i in range(3)
        ]
        assert r.record_at(7).env.data["text"] == "2.0"
