"""The ledger's behaviour on both stores (DESIGN.md §3 "Storage"): the file ledger and the
PostgreSQL ledger, run by the one parametrised fixture `store_url` (tests/conftest.py).

Each test states a behaviour both stores share: create, append and read back, bad drafts,
one writer naming the holder, a failed batch rolled back and refusing later appends, a writer
killed mid-batch (its PostgreSQL analogue of a torn tail: a batch is one transaction, never
half there), damage refused and never truncated, the foreign golden ledger. File-only concepts
(segments rolling, misnamed segments, short writes, the index file) stay in
test_store_ledger.py; PostgreSQL-only ones (the lease fencing) are below, marked so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfold.api import Workspace
from runfold.core.chain import LineRefused
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.payloads import WorkspaceInitialized
from runfold.core.records import Draft
from runfold.store.backend import open_ledger, parse_store_url, store_setting
from runfold.store.layout import Layout
from runfold.store.ledger import Ledger, WriterIO
from runfold.store.pg import PgLedger
from runfold.store.view import LedgerWriter

FIXTURES = Path(__file__).parent.parent / "fixtures"
GOLDEN = FIXTURES / "sprawling-golden-p0.jsonl"
GOLDEN_HEAD = "0baccd18194099432a24e6e820889eac0e3d0d524dbfd1cc8cb646f037284526"
RUN_A = "0190f6a2-7c4a-7bbb-9d1e-00000000000a"
RUN_B = "0190f6a2-7c4a-7bbb-9d1e-00000000000b"
SRC = str(Path(__file__).resolve().parents[2] / "src")


def steer(run: str, text: str, t: int | None = None) -> Draft:
    return Draft(run, "lab/room1", "steer_received", {"source": "user", "text": text}, addr="lab/room1", t=t)


def stored_lines(ws: Path) -> list[bytes]:
    """The exact bytes of every line the workspace's store holds (without newlines), read
    around the ledger classes: the segment files, or the table's rows."""
    url = store_setting(ws)
    if url is None:
        return b"".join(p.read_bytes() for p in sorted(Layout(ws).ledger_dir.glob("ledger-*.jsonl"))).split(
            b"\n"
        )[:-1]
    import psycopg

    with psycopg.connect(url.conninfo) as conn:
        rows = conn.execute(
            "SELECT line FROM runfold_lines WHERE workspace = %s ORDER BY seq", (url.name,)
        ).fetchall()
    return [bytes(r[0]) for r in rows]


def damage_line(ws: Path, seq: int, new: bytes) -> None:
    """Replace line `seq`'s bytes in the store with `new`, as a tool other than runfold would."""
    url = store_setting(ws)
    if url is None:
        (seg,) = sorted(Layout(ws).ledger_dir.glob("ledger-*.jsonl"))
        lines = seg.read_bytes().split(b"\n")
        lines[seq] = new
        seg.write_bytes(b"\n".join(lines))
        return
    import psycopg

    with psycopg.connect(url.conninfo, autocommit=True) as conn:
        conn.execute(
            "UPDATE runfold_lines SET line = %s WHERE workspace = %s AND seq = %s", (new, url.name, seq)
        )


@pytest.fixture
def ws(tmp_path: Path, store_url: str | None) -> Path:
    """A new workspace (seq 0 written) whose ledger is in the store under test."""
    root = tmp_path / "ws"
    Workspace.init(root, store_url).close()
    return root


# ---- shared behaviour ----------------------------------------------------------------------


def test_init_writes_workspace_initialized_in_the_named_store(ws: Path, store_url: str | None) -> None:
    with open_ledger(ws, writer=False) as ledger:
        assert isinstance(ledger, Ledger if store_url is None else PgLedger)
        assert ledger.next_seq == 1
        rec = ledger.record_at(0)
        assert rec.kind_name == "workspace_initialized" and rec.run == WORKSPACE_RUN
        assert isinstance(rec.payload(), WorkspaceInitialized)
        assert ledger.head == rec.hash
    assert stored_lines(ws) == [rec.raw]
    assert Workspace.open(ws).settings().store == (parse_store_url(store_url) if store_url else None)


def test_a_store_workspace_already_holding_lines_is_joined_never_rewritten(
    ws: Path, tmp_path: Path, store_url: str | None
) -> None:
    before = stored_lines(ws)
    with pytest.raises(RunfoldError) as err:
        Workspace.init(ws, store_url)
    assert err.value.code is ErrorCode.INVALID_ARGS
    if store_url is not None:  # a second machine's directory joins the same ledger
        other = Workspace.init(tmp_path / "elsewhere", store_url)
        assert other.record_at(0).raw == before[0]
        with pytest.raises(RunfoldError) as again:
            PgLedger.create(parse_store_url(store_url), tmp_path / "elsewhere")
        assert again.value.code is ErrorCode.INVALID_ARGS
    assert stored_lines(ws) == before


def test_append_batches_and_read_back(ws: Path) -> None:
    with open_ledger(ws, writer=True) as w:
        recs = w.append([steer(RUN_A, "one"), steer(RUN_B, "two"), steer(RUN_A, "three")])
        assert [r.seq for r in recs] == [1, 2, 3]
        assert recs[0].env.prev == w.record_at(0).hash
        assert w.head == recs[-1].hash and w.next_seq == 4
        assert w.append([]) == []
        staged = w.stage([steer(RUN_B, "four")])
        assert w.staged == 1 and w.next_seq == 4
        durable: list[int] = []
        w.on_durable.append(lambda batch: durable.extend(r.seq for r in batch))
        assert w.flush() == 1 and durable == [4] and w.head == staged[0].hash
    with open_ledger(ws, writer=False) as r:
        assert r.next_seq == 5
        assert r.runs() == [RUN_A, RUN_B]
        assert [x.env.data["text"] for x in r.run_records(RUN_A)] == ["one", "three"]
        assert [x.env.data["text"] for x in r.run_records(RUN_A, limit=1)] == ["one"]
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
    assert [b for b in stored_lines(ws)][1:] == [x.raw for x in recs] + [staged[0].raw]


def test_a_reader_sees_the_ledger_as_it_was_when_opened(ws: Path) -> None:
    with open_ledger(ws, writer=False) as r, open_ledger(ws, writer=True) as w:
        w.append([steer(RUN_A, "later")])
        assert r.next_seq == 1 and [x.seq for x in r.records()] == [0] and r.runs() == []


def test_bad_drafts_write_nothing(ws: Path) -> None:
    before = stored_lines(ws)
    with open_ledger(ws, writer=True) as w:
        bad = [
            Draft("not-a-uuid", "runtime", "log_truncated", {"dropped_bytes": 1}),
            Draft(RUN_A, "runtime", "no_such_kind", {}),
            Draft(RUN_A, "runtime", "steer_received", {"source": "user", "ratio": 0.5}),
            Draft(RUN_A, "runtime", "steer_received", {}, addr="/abs"),
        ]
        for i, d in enumerate(bad):
            with pytest.raises(RunfoldError) as err:
                w.append([steer(RUN_A, "ok"), d])
            assert err.value.code is ErrorCode.INVALID_ARGS, i
        assert stored_lines(ws) == before and w.next_seq == 1
        (rec,) = w.append([Draft(RUN_A, "city", "future_kind", {"x": 1}, ig=True)])
        assert not rec.known
    assert Workspace.open(ws).verify().skipped_unknown == 1


def test_both_stores_write_the_same_bytes_and_chain(tmp_path: Path, pg_url: str) -> None:
    """The same drafts after the same seq 0 give the same line bytes and chain on both stores
    (one encoder, one stager): the file workspace's seq 0 is migrated into PostgreSQL first."""
    Workspace.init(tmp_path / "files").close()
    Workspace.open(tmp_path / "files").migrate(to=pg_url)
    Workspace.init(tmp_path / "pg", pg_url).close()  # joins the migrated seq 0
    seen = []
    for name in ("files", "pg"):
        with open_ledger(tmp_path / name, writer=True) as w:
            w.append([steer(RUN_A, "same", t=5), steer(RUN_B, "bytes ✓", t=6)])
            w.append([steer(RUN_A, "again", t=7)])
            head = w.head
        seen.append((stored_lines(tmp_path / name), head, Workspace.open(tmp_path / name).verify().head))
    assert seen[0] == seen[1] and seen[0][1] == seen[0][2]


_HOLDER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    from pathlib import Path
    from runfold.store.backend import open_ledger
    w = open_ledger(Path(sys.argv[1]), writer=True)
    print("held", flush=True)
    sys.stdin.readline()
    w.close()
    """
)


def test_second_writer_is_refused_naming_the_holder(ws: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(ws), SRC],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunfoldError) as err:
            open_ledger(ws, writer=True)
        assert err.value.code is ErrorCode.LEDGER_HELD
        assert f"pid {holder.pid}" in str(err.value)
        with open_ledger(ws, writer=False) as r:  # readers need no lock
            assert r.next_seq == 1
        assert Workspace.open(ws).run_summaries() == []
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=60)
    with open_ledger(ws, writer=True) as w:  # released when the holder closed
        assert w.next_seq == 1


def _failing_writer(ws: Path) -> LedgerWriter:
    """The writer of `ws` whose next batch fails in its store: the fsync fails (files), or the
    server ends the connection inside the batch's transaction before its commit (PostgreSQL)."""
    if store_setting(ws) is None:

        def failing_sync(fd: int) -> None:
            raise OSError(28, "No space left on device")

        return Ledger.open(ws, writer=True, io=WriterIO(sync=failing_sync))
    ledger = open_ledger(ws, writer=True)
    assert isinstance(ledger, PgLedger)
    pid = ledger._conn.info.backend_pid

    def server_goes_away() -> None:
        import psycopg

        with psycopg.connect(ledger.url.conninfo, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    ledger.before_commit = server_goes_away
    return ledger


def test_a_failed_batch_leaves_nothing_and_the_writer_refuses_later_appends(ws: Path) -> None:
    with open_ledger(ws, writer=True) as w:
        w.append([steer(RUN_A, "durable")])
    before = stored_lines(ws)
    w = _failing_writer(ws)
    try:
        head, nxt = w.head, w.next_seq
        with pytest.raises(RunfoldError) as err:
            w.append([steer(RUN_A, "lost 1"), steer(RUN_A, "lost 2")])
        assert err.value.code is ErrorCode.STORAGE_FATAL and "reopen" in err.value.recovery
        assert stored_lines(ws) == before  # no half-written batch
        assert (w.head, w.next_seq) == (head, nxt)
        with pytest.raises(RunfoldError) as err2:
            w.append([steer(RUN_A, "refused")])
        assert err2.value.code is ErrorCode.STORAGE_FATAL
    finally:
        w.close()
    with open_ledger(ws, writer=True) as w2:
        assert w2.torn_tail_bytes == 0
        w2.append([steer(RUN_A, "after reopen")])
    assert Workspace.open(ws).verify().lines == 3


_BATCHER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    from pathlib import Path
    from runfold.core.records import Draft
    from runfold.store.backend import open_ledger
    run = "0190f6a2-7c4a-7bbb-9d1e-00000000000a"
    w = open_ledger(Path(sys.argv[1]), writer=True)
    print("open", flush=True)
    i = 0
    while True:
        w.append([Draft(run, "lab/room1", "steer_received", {"source": "user", "text": f"{i} " + "x" * 2000},
                        addr="lab/room1") for _ in range(50)])
        i += 1
    """
)


def test_a_writer_killed_mid_batch_leaves_whole_batches_only(ws: Path) -> None:
    """The PostgreSQL analogue of a torn tail: a batch is one transaction, so a writer killed
    while sending one leaves it wholly absent; the file ledger cuts a torn tail instead. On both,
    the next writer opens without damage and every batch is there whole or not at all."""
    proc = subprocess.Popen([sys.executable, "-c", _BATCHER, str(ws), SRC], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while True:  # the server notices the dead connection and frees the lease
        try:
            w = open_ledger(ws, writer=True)
            break
        except RunfoldError as exc:
            if exc.code is not ErrorCode.LEDGER_HELD or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with w:
        steers = [r for r in w.run_records(RUN_A)]
        assert len(steers) % 50 == 0 and steers
        texts = [r.env.data["text"].split()[0] for r in steers]
        assert texts == [str(i // 50) for i in range(len(steers))]
        w.append([steer(RUN_B, "after the kill")])
    assert Workspace.open(ws).verify().lines == w.next_seq


def test_a_changed_line_is_refused_by_line_number_and_never_cut(ws: Path) -> None:
    with open_ledger(ws, writer=True) as w:
        w.append([steer(RUN_A, "one"), steer(RUN_A, "two"), steer(RUN_A, "three")])
    lines = stored_lines(ws)
    damage_line(ws, 2, lines[2].replace(b'"two"', b'"TWO"'))
    with pytest.raises(LineRefused) as err:
        Workspace.open(ws).verify()
    assert (err.value.line_no, err.value.seq) == (4, 3)  # the same numbering on both stores
    assert "verify line 4 (seq 3): chain break" in str(err.value)
    with pytest.raises(RunfoldError) as err2, open_ledger(ws, writer=False) as r:
        list(r.records())
    assert err2.value.code is ErrorCode.LEDGER_CORRUPT
    assert len(stored_lines(ws)) == len(lines)  # nothing truncated


def test_the_foreign_golden_ledger_moves_in_and_takes_appends(tmp_path: Path, store_url: str | None) -> None:
    golden = Workspace.open(GOLDEN)
    if store_url is None:
        report = golden.migrate(to_file=tmp_path / "ws")
    else:
        report = golden.migrate(to=store_url)
        Workspace.init(tmp_path / "ws", store_url).close()  # joins it
    assert (report.lines, report.head) == (18, GOLDEN_HEAD)
    ws = Workspace.open(tmp_path / "ws")
    assert ws.verify().head == GOLDEN_HEAD
    assert b"\n".join(stored_lines(tmp_path / "ws")) + b"\n" == GOLDEN.read_bytes()
    with ws.writer(resume=False) as w:
        (rec,) = w.append([steer(RUN_A, "after sprawling")])
        assert rec.env.prev == GOLDEN_HEAD and rec.seq == 18
    assert ws.verify().lines == 19


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.text(max_size=30), min_size=1, max_size=12), min_size=1, max_size=6))
def test_any_batches_verify_and_read_back_byte_for_byte(ws: Path, batches: list[list[str]]) -> None:
    with open_ledger(ws, writer=True) as w:
        start = w.next_seq
        written = [r.raw for b in batches for r in w.append([steer(RUN_A, t) for t in b])]
        head = w.head
    with open_ledger(ws, writer=False) as r:
        assert [x.raw for x in r.records(start)] == written
        assert r.head == head
    assert Workspace.open(ws).verify().head == head


# ---- PostgreSQL only: the lease, the fencing token, LISTEN/NOTIFY ----------------------------


def test_pg_a_writer_whose_lease_was_taken_refuses_naming_the_holder(tmp_path: Path, pg_url: str) -> None:
    Workspace.init(tmp_path, pg_url).close()
    url = parse_store_url(pg_url)
    w = open_ledger(tmp_path, writer=True)
    assert isinstance(w, PgLedger)
    try:
        w.append([steer(RUN_A, "mine")])
        import psycopg

        with psycopg.connect(url.conninfo, autocommit=True) as admin:  # the lease moves on
            admin.execute(
                "UPDATE runfold_writers SET epoch = epoch + 1, holder = 'pid 4242 on elsewhere' WHERE workspace = %s",
                (url.name,),
            )
        before = stored_lines(tmp_path)
        with pytest.raises(RunfoldError) as err:
            w.append([steer(RUN_A, "stale")])
        assert err.value.code is ErrorCode.LEDGER_HELD and "pid 4242 on elsewhere" in str(err.value)
        assert stored_lines(tmp_path) == before
        with pytest.raises(RunfoldError):
            w.append([steer(RUN_A, "still refused")])
    finally:
        w.close()


def test_pg_a_writer_cut_off_while_another_took_over_names_the_new_holder(
    tmp_path: Path, pg_url: str
) -> None:
    Workspace.init(tmp_path, pg_url).close()
    old = open_ledger(tmp_path, writer=True)
    assert isinstance(old, PgLedger)
    import psycopg

    with psycopg.connect(old.url.conninfo, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (old._conn.info.backend_pid,))
    new = open_ledger(tmp_path, writer=True)
    try:
        new.append([steer(RUN_A, "the new writer")])
        with pytest.raises(RunfoldError) as err:
            old.append([steer(RUN_A, "the old writer")])
        assert err.value.code is ErrorCode.LEDGER_HELD
        assert f"pid {os.getpid()}" in str(err.value) and "lost its lease" in str(err.value)
    finally:
        old.close()
        new.close()
    assert Workspace.open(tmp_path).verify().lines == 2


def test_pg_line_waiter_wakes_when_a_batch_commits(tmp_path: Path, pg_url: str) -> None:
    from runfold.store.pg_tools import LineWaiter

    Workspace.init(tmp_path, pg_url).close()
    url = parse_store_url(pg_url)
    with LineWaiter(url) as waiter:
        assert waiter.wait(1, timeout_s=0.2) == 1  # nothing new: the timeout passes

        def append_soon() -> None:
            time.sleep(0.3)
            with open_ledger(tmp_path, writer=True) as w:
                w.append([steer(RUN_A, "wake up"), steer(RUN_A, "twice")])

        t = threading.Thread(target=append_soon)
        t.start()
        assert waiter.wait(1, timeout_s=60) == 3
        t.join()


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('store = "mysql://x/y"\n', "scheme 'mysql'"),
        ("store = 3\n", "not a non-empty string"),
        ('store = "postgresql://x/y?workspace="\n', "workspace name"),
        ('store = "postgresql://u:secret@[::1/y"\n', "does not parse"),
    ],
)
def test_a_bad_store_setting_is_one_line_naming_the_fix(tmp_path: Path, toml: str, needle: str) -> None:
    Workspace.init(tmp_path).close()
    cfg = Layout(tmp_path).root / "config.toml"
    cfg.write_text(toml + cfg.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(RunfoldError) as err:
        Workspace.open(tmp_path).records()
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert needle in str(err.value) and "\n" not in str(err.value) and "postgresql://" in err.value.recovery
    assert "secret" not in str(err.value)


def test_an_unreachable_server_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    url = f"postgresql://nobody@/postgres?host={tmp_path}&workspace=w"  # no server listens there
    with pytest.raises(RunfoldError) as err:
        Workspace.init(tmp_path / "ws", url)
    assert err.value.code is ErrorCode.STORAGE_FATAL and "\n" not in str(err.value)
    assert "PostgreSQL server" in err.value.recovery
    assert not (tmp_path / "ws" / ".runfold").exists()  # nothing left half made


def test_a_missing_driver_names_the_extra(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    Workspace.init(tmp_path, pg_url).close()
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the extra were not installed
    with pytest.raises(RunfoldError) as err:
        Workspace.open(tmp_path).records()
    assert err.value.code is ErrorCode.CONFIG_INVALID and "runfold[postgres]" in err.value.recovery


@pytest.fixture
def racing(postgres: str) -> Iterator[Callable[[int], dict[str, int]]]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import pg_race

    yield lambda trials: pg_race.race(postgres, trials, seed=7)


def test_pg_two_writers_racing_never_both_append_nor_fork_the_chain(
    racing: Callable[[int], dict[str, int]],
) -> None:
    """A sample of bench/pg_race.py (which runs ≥ 100 trials): two processes race for one
    workspace, one is killed between trials; never two appenders, never a gap or a fork."""
    result = racing(6)
    assert result["trials"] == 6
    assert result["both_appended"] == 0 and result["chain_faults"] == 0
    assert result["lines"] > 6


def drop_newest(ws: Path, n: int) -> None:
    """Remove the newest `n` lines from the store, as a tool other than runfold would (a
    restored old backup, a `DELETE`): what remains verifies on its own."""
    url = store_setting(ws)
    if url is None:
        (seg,) = sorted(Layout(ws).ledger_dir.glob("ledger-*.jsonl"))
        lines = seg.read_bytes().split(b"\n")[:-1]
        seg.write_bytes(b"".join(line + b"\n" for line in lines[:-n]))
        return
    import psycopg

    with psycopg.connect(url.conninfo, autocommit=True) as conn:
        conn.execute(
            "DELETE FROM runfold_lines WHERE workspace = %s AND seq >= (SELECT max(seq) + 1 - %s FROM runfold_lines "
            "WHERE workspace = %s)",
            (url.name, n, url.name),
        )


def replace_last(ws: Path, new: bytes) -> None:
    """Replace the last line with `new`, keeping the chain valid (nothing follows it)."""
    import blake3

    url = store_setting(ws)
    if url is None:
        damage_line(ws, len(stored_lines(ws)) - 1, new)
        return
    import psycopg

    with psycopg.connect(url.conninfo, autocommit=True) as conn:
        conn.execute(
            "UPDATE runfold_lines SET line = %s, hash = %s WHERE workspace = %s AND seq = "
            "(SELECT max(seq) FROM runfold_lines WHERE workspace = %s)",
            (new, blake3.blake3(new).hexdigest(), url.name, url.name),
        )


def test_a_writer_refuses_a_ledger_that_lost_its_newest_lines(ws: Path) -> None:
    with open_ledger(ws, writer=True) as w:
        w.append([steer(RUN_A, "one"), steer(RUN_A, "two"), steer(RUN_A, "three")])
    drop_newest(ws, 2)  # what is left is a valid chain: only the head mark knows lines are gone
    with pytest.raises(RunfoldError) as err:
        open_ledger(ws, writer=True).close()
    assert err.value.code is ErrorCode.LEDGER_CORRUPT
    assert "it ends at seq 1, but the head mark (.runfold/head-mark.json) recorded seq 3" in str(err.value)
    assert len(stored_lines(ws)) == 2  # nothing written


def test_a_writer_refuses_a_ledger_whose_last_line_was_replaced(ws: Path) -> None:
    with open_ledger(ws, writer=True) as w:
        w.append([steer(RUN_A, "one"), steer(RUN_A, "two")])
    lines = stored_lines(ws)
    replace_last(ws, lines[-1].replace(b'"two"', b'"TWO"'))
    with pytest.raises(RunfoldError) as err:
        open_ledger(ws, writer=True).close()
    assert err.value.code is ErrorCode.LEDGER_CORRUPT
    assert "its line at seq 2 hashes to" in str(err.value) and "changed or replaced" in str(err.value)
    assert len(stored_lines(ws)) == len(lines)
