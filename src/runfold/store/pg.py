"""The workspace ledger in PostgreSQL: the same canonical lines and chain as the file ledger (DESIGN.md §3).

One table holds every workspace's lines (`workspace`, `seq`, `run`, chain `hash`, exact `line`
bytes; primary key (workspace, seq)). One writer per workspace is enforced by the database: a
session advisory lock, released when the writer's connection dies, plus a lease row whose
`epoch` each new writer bumps; every batch is one transaction that re-reads the lease and the
head seq (the fencing token), so a writer whose lease was taken, or whose head is stale, can
never append. Drafts become lines through `runfold.store.staging`, readers check every line they
read with the one line checker, and `LISTEN/NOTIFY` wakes live tails.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

import blake3

from runfold.core.chain import LineChecker
from runfold.core.errors import ErrorCode, Retry, RunfoldError, invalid_args
from runfold.core.ids import WORKSPACE_RUN, ZERO_HASH
from runfold.core.payloads import WorkspaceInitialized
from runfold.core.records import Draft, Record
from runfold.store.backend import StoreUrl
from runfold.store.layout import Layout
from runfold.store.marks import HeadMarker, check_marks, read_head_mark, read_resume_mark
from runfold.store.staging import Stager

RUNTIME = "runtime"
CHANNEL = "runfold_lines"
"""The NOTIFY channel: payload `<workspace name>\\n<next seq>` after each committed batch."""
STREAM_ROWS = 2000
"""Rows a server-side cursor fetches per round trip while streaming lines."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS runfold_lines (
    workspace text NOT NULL,
    seq bigint NOT NULL,
    run text NOT NULL,
    hash text NOT NULL,
    line bytea NOT NULL,
    PRIMARY KEY (workspace, seq)
);
CREATE INDEX IF NOT EXISTS runfold_lines_run ON runfold_lines (workspace, run, seq);
CREATE TABLE IF NOT EXISTS runfold_writers (
    workspace text PRIMARY KEY,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    since timestamptz NOT NULL DEFAULT now()
);
"""
"""The store's tables: the lines (exact bytes, the seq → line and run → seqs index is the primary
key and `runfold_lines_run`) and one lease row per workspace."""
_SCHEMA_LOCK = 0x72756E666F6C64  # "runfold": serialises concurrent CREATE TABLE IF NOT EXISTS


def _psycopg() -> ModuleType:
    """The psycopg module, or `E_CONFIG_INVALID` naming the extra to install."""
    try:
        import psycopg
    except ImportError:
        raise RunfoldError(
            ErrorCode.CONFIG_INVALID,
            "open a PostgreSQL store (the psycopg driver is not installed)",
            "store",
            "install the extra: pip install 'runfold[postgres]', or remove `store` from .runfold/config.toml",
        ) from None
    return psycopg


def connect(url: StoreUrl) -> Any:
    """An autocommit connection to `url`'s database with the schema in place. Raises
    `E_STORAGE_FATAL` naming the URL (without password) when the server cannot be reached."""
    psycopg = _psycopg()
    try:
        conn = psycopg.connect(url.conninfo, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise RunfoldError(
            ErrorCode.STORAGE_FATAL,
            f"connect to the store ({_first_line(exc)})",
            url.shown,
            "start the PostgreSQL server or fix `store` in .runfold/config.toml (user, host, database)",
            retry=Retry.YES,
        ) from None
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            conn.execute(SCHEMA)
    except psycopg.Error as exc:
        conn.close()
        raise _fatal("create the store's tables", exc, url) from None
    return conn


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _fatal(action: str, exc: BaseException, url: StoreUrl) -> RunfoldError:
    return RunfoldError(
        ErrorCode.STORAGE_FATAL,
        f"{action} ({_first_line(exc)})",
        f"{url.shown} workspace {url.name}",
        "check that the PostgreSQL server is up and reachable, then reopen the workspace "
        "(this writer refuses further appends)",
    )


def lock_key(name: str) -> int:
    """The advisory lock key of workspace `name`: a signed 64-bit integer from BLAKE3."""
    return int.from_bytes(blake3.blake3(b"runfold-writer\0" + name.encode()).digest()[:8], "big", signed=True)


def holder_text() -> str:
    """How a writer names itself in the lease row: `pid <pid> on <host>`."""
    return f"pid {os.getpid()} on {socket.gethostname()}"


def _held(url: StoreUrl, holder: str, why: str) -> RunfoldError:
    return RunfoldError(
        ErrorCode.LEDGER_HELD,
        f"{why} ({holder} holds the writer lease)",
        f"{url.shown} workspace {url.name}",
        f"another runfold process ({holder}) is writing this workspace; wait for it to finish or "
        "stop it, then retry (readers such as verify and log need no lease)",
        retry=Retry.YES,
    )


def lease_held(url: StoreUrl) -> bool:
    """Whether a live session holds the writer lock of `url`'s workspace."""
    conn = connect(url)
    try:
        key = lock_key(url.name) & 0xFFFFFFFFFFFFFFFF  # pg_locks shows a bigint key as two oids
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 1",
            (key >> 32, key & 0xFFFFFFFF),
        ).fetchone()
        return bool(row and row[0])
    finally:
        conn.close()


class PgLedger:
    """One workspace's ledger in PostgreSQL, opened as a reader or as the one writer; the
    `LedgerWriter` shape of `runfold.store.ledger.Ledger` (same lines, chain and errors).

    Build it with `PgLedger.create` or `PgLedger.open`; use it as a context manager or call
    `close`. A reader's view is the ledger as it was at open; a writer's advances with its
    appends. Not thread-safe. `before_commit` (tests) is called inside each batch's transaction
    after its rows are sent, before the commit.
    """

    def __init__(self, url: StoreUrl, ws: Path, *, writer: bool) -> None:
        self.url = url
        self.ws = Path(ws).absolute()
        self.layout = Layout(self.ws)
        self.writer = writer
        self.torn_tail_bytes = 0
        """Always 0: a batch is one transaction, so a line is never torn."""
        self.newline_restored = False
        self.on_durable: list[Callable[[Sequence[Record]], None]] = []
        """Callbacks `cb(records)` called with each batch once committed, as in `Ledger`."""
        self.before_commit: Callable[[], None] | None = None
        self.epoch = 0
        """The lease epoch this writer took (its fencing token with the head seq)."""
        self._conn: Any = None
        self._read_conn: Any = None
        self._next_seq = 0
        self._head = ZERO_HASH
        self._pending: list[Record] = []
        self._stager = Stager()
        self._poisoned: RunfoldError | None = None
        self._closed = False
        self._where = f"{url.shown} workspace {url.name}"
        self._marker = HeadMarker(self.layout)

    # ---- opening ---------------------------------------------------------------------

    @classmethod
    def create(cls, url: StoreUrl, ws: Path) -> PgLedger:
        """Open the writer of `url`'s workspace and append `workspace_initialized` (seq 0).
        Raises `E_INVALID_ARGS` when the workspace already holds lines, `E_LEDGER_HELD` when
        another process holds its lease."""
        ledger = cls.open(url, ws, writer=True)
        try:
            if ledger.next_seq > 0:
                raise invalid_args(
                    "create a workspace (the store already holds its lines)",
                    ledger._where,
                    "open the existing workspace instead, or give another `?workspace=NAME` in the URL",
                )
            ledger.append(
                [Draft(WORKSPACE_RUN, RUNTIME, WorkspaceInitialized.KIND.value, WorkspaceInitialized())]
            )
        except BaseException:
            ledger.close()
            raise
        return ledger

    @classmethod
    def open(cls, url: StoreUrl, ws: Path, *, writer: bool, marks: bool = True) -> PgLedger:
        """Open workspace `url.name` of the database (`ws` is the local workspace directory
        holding `.runfold/`). A writer takes the advisory lock and bumps the lease epoch.
        Both check the last line (its bytes, chain hash and seq) and that seqs are contiguous.
        A writer also checks, as the file writer does, that the database still holds the lines
        the workspace's marks name (`runfold.store.marks`: the head mark, the resume mark — each
        line re-read and its bytes re-checked), then records its head in the head mark, at open
        and after each batch. `marks=False` skips the check for a writer that fills an empty
        workspace with a copy of the ledger the marks name (`runfold migrate`).

        Raises `E_LEDGER_HELD` naming the holder, `E_STORAGE_FATAL` when the server cannot be
        reached, `LineRefused`/`E_LEDGER_CORRUPT` for a damaged tail or a seq gap, and
        `E_LEDGER_CORRUPT` (`marks.lost_tail_error`) when the table lost its newest lines or a
        marked line was changed.
        """
        self = cls(url, ws, writer=writer)
        try:
            self._conn = connect(url)
            if writer:
                self._take_lease()
                head_mark = read_head_mark(self.layout)  # marks first: they name lines committed before now
                named = [m for m in (head_mark, read_resume_mark(self.layout)) if m is not None] if marks else []
            self._load()
            if writer:
                held = {m.seq: self.record_at(m.seq).hash for m in named if m.seq < self._next_seq}
                check_marks(named, self._next_seq, held, self._where, "open the ledger for writing")
                self._marker.record_open(head_mark, self._next_seq - 1, self._head, lambda: None)
        except BaseException:
            self.close()
            raise
        return self

    def _take_lease(self) -> None:
        psycopg = _psycopg()
        try:
            got = self._conn.execute(
                "SELECT pg_try_advisory_lock(%s)", (lock_key(self.url.name),)
            ).fetchone()[0]
            if not got:
                row = self._conn.execute(
                    "SELECT holder FROM runfold_writers WHERE workspace = %s", (self.url.name,)
                ).fetchone()
                raise _held(self.url, row[0] if row else "an unknown process", "open the ledger for writing")
            self.epoch = self._conn.execute(
                "INSERT INTO runfold_writers (workspace, holder, epoch) VALUES (%s, %s, 1) "
                "ON CONFLICT (workspace) DO UPDATE SET holder = excluded.holder, "
                "epoch = runfold_writers.epoch + 1, since = now() RETURNING epoch",
                (self.url.name, holder_text()),
            ).fetchone()[0]
        except psycopg.Error as exc:
            raise _fatal("take the writer lease", exc, self.url) from None

    def _load(self) -> None:
        psycopg = _psycopg()
        try:
            rows = self._conn.execute(
                "SELECT seq, hash, line FROM runfold_lines WHERE workspace = %s ORDER BY seq DESC LIMIT 2",
                (self.url.name,),
            ).fetchall()
            count = self._conn.execute(
                "SELECT count(*) FROM runfold_lines WHERE workspace = %s", (self.url.name,)
            ).fetchone()[0]
        except psycopg.Error as exc:
            raise _fatal("read the ledger's head", exc, self.url) from None
        if not rows:
            return
        last_seq, last_hash, last_line = rows[0]
        if count != last_seq + 1:
            raise RunfoldError(
                ErrorCode.LEDGER_CORRUPT,
                f"open the ledger (it holds {count} lines but its last seq is {last_seq}: a seq gap)",
                self._where,
                "run `runfold verify` to find the first missing line, then restore the table from a copy",
            )
        prev = rows[1][1] if len(rows) > 1 else ZERO_HASH
        checker = LineChecker(last_seq, prev, self._where)
        checker.check(bytes(last_line), last_seq + 1)
        if checker.head != last_hash:
            raise _index_mismatch(self._where, last_seq)
        self._next_seq, self._head = last_seq + 1, last_hash

    # ---- writing ---------------------------------------------------------------------

    def append(self, drafts: Sequence[Draft]) -> list[Record]:
        """Append a batch in one transaction and return its records (see `Ledger.append`)."""
        records = self.stage(drafts)
        self.flush()
        return records

    def stage(self, drafts: Sequence[Draft]) -> list[Record]:
        """Give a batch its seq/prev/t and bytes now, without writing it (see `Ledger.stage`)."""
        self._check_writable()
        if not drafts:
            return []
        seq = self._next_seq + len(self._pending)
        head = self._pending[-1].hash if self._pending else self._head
        records = self._stager.stage(drafts, seq, head, time.time_ns() // 1_000_000)
        self._pending.extend(records)
        return records

    @property
    def staged(self) -> int:
        """How many staged lines wait for the next `flush`."""
        return len(self._pending)

    def flush(self) -> int:
        """Commit every staged line in one transaction; returns how many were written.

        Inside the transaction the lease row is locked and its epoch compared with this
        writer's, and the stored head seq compared with this writer's: a mismatch refuses the
        batch (nothing written) with `E_LEDGER_HELD` naming the holder. A database error
        (the server gone, the connection cut) rolls the whole batch back and raises
        `E_STORAGE_FATAL`. After either, this writer refuses every later append.
        """
        self._check_writable()
        if not self._pending:
            return 0
        records = self._pending
        self._pending = []
        psycopg = _psycopg()
        name = self.url.name
        params = {
            "ws": name,
            "epoch": self.epoch,
            "expected": self._next_seq - 1,
            "seqs": [r.env.seq for r in records],
            "runs": [r.env.run for r in records],
            "hashes": [r.hash for r in records],
            "lines": [r.raw for r in records],
            "channel": CHANNEL,
            "note": f"{name}\n{records[-1].env.seq + 1}",
        }
        try:
            if self.before_commit is None:  # one statement: its own transaction, one round trip
                inserted = self._conn.execute(_APPEND, params).fetchone()[0]
            else:
                with self._conn.transaction():
                    inserted = self._conn.execute(_APPEND, params).fetchone()[0]
                    self.before_commit()
        except psycopg.Error as exc:
            self._poisoned = self._diagnose(exc)
            raise self._poisoned from None
        if inserted != len(records):
            self._poisoned = self._fenced()
            raise self._poisoned
        self._next_seq = records[-1].env.seq + 1
        self._head = records[-1].hash
        self._marker.write(self._next_seq - 1, self._head)
        for cb in tuple(self.on_durable):
            cb(records)
        return len(records)

    def _fenced(self) -> RunfoldError:
        """The refusal of a batch the fencing check kept out (nothing was written): the lease
        has another epoch (`E_LEDGER_HELD` naming its holder) or the head moved."""
        psycopg = _psycopg()
        try:
            lease = self._conn.execute(
                "SELECT epoch, holder FROM runfold_writers WHERE workspace = %s", (self.url.name,)
            ).fetchone()
            stored = self._conn.execute(
                "SELECT coalesce(max(seq), -1) FROM runfold_lines WHERE workspace = %s", (self.url.name,)
            ).fetchone()[0]
        except psycopg.Error as exc:
            return _fatal(f"append a batch at seq {self._next_seq}", exc, self.url)
        if lease is None or lease[0] != self.epoch:
            holder = lease[1] if lease else "nobody"
            return _held(
                self.url, holder, f"append a batch at seq {self._next_seq} (this writer lost its lease)"
            )
        return RunfoldError(
            ErrorCode.STORAGE_FATAL,
            f"append a batch at seq {self._next_seq} (the store's head is seq {stored}: another writer appended)",
            self._where,
            "reopen the workspace; this writer refuses further appends",
        )

    def _diagnose(self, exc: BaseException) -> RunfoldError:
        """The refusal after a failed batch: `E_LEDGER_HELD` naming the new holder when another
        writer took the lease meanwhile (read over a fresh connection), else `E_STORAGE_FATAL`."""
        fatal = _fatal(
            f"append a batch at seq {self._next_seq}; the transaction was rolled back", exc, self.url
        )
        try:
            conn = connect(self.url)
        except RunfoldError:
            return fatal
        try:
            row = conn.execute(
                "SELECT epoch, holder FROM runfold_writers WHERE workspace = %s", (self.url.name,)
            ).fetchone()
        except Exception:
            return fatal
        finally:
            conn.close()
        if row is not None and row[0] != self.epoch:
            return _held(
                self.url, row[1], f"append a batch at seq {self._next_seq} (this writer lost its lease)"
            )
        return fatal

    def _check_writable(self) -> None:
        if self._closed:
            raise RunfoldError(
                ErrorCode.STORAGE_FATAL,
                "append to the ledger",
                self._where,
                "this ledger was closed; open it again",
            )
        if not self.writer:
            raise invalid_args(
                "append to a ledger opened as a reader", self._where, "open it with writer=True"
            )
        if self._poisoned is not None:
            raise self._poisoned

    # ---- reading ---------------------------------------------------------------------

    @property
    def next_seq(self) -> int:
        """The seq the next line will get (= number of lines in this view)."""
        return self._next_seq

    @property
    def head(self) -> str:
        """BLAKE3 of the last line (64 lowercase hex; 64 zeros for an empty ledger)."""
        return self._head

    def segments(self) -> list[Path]:
        """[]: the lines are rows, not segment files."""
        return []

    def _reader(self) -> Any:
        """The connection reads use (the writer's own one stays free for its transactions)."""
        if self._read_conn is None:
            self._read_conn = connect(self.url)
        return self._read_conn

    def _query(self, sql: str, params: tuple[object, ...]) -> list[Any]:
        psycopg = _psycopg()
        try:
            return list(self._reader().execute(sql, params).fetchall())
        except psycopg.Error as exc:
            raise _fatal("read the ledger", exc, self.url) from None

    def runs(self) -> list[str]:
        """Every run id in order of first appearance, excluding the workspace (nil) run."""
        rows = self._query(
            "SELECT run FROM runfold_lines WHERE workspace = %s AND seq < %s AND run <> %s "
            "GROUP BY run ORDER BY min(seq)",
            (self.url.name, self._next_seq, WORKSPACE_RUN),
        )
        return [r[0] for r in rows]

    def _checked(self, rows: list[Any]) -> list[Record]:
        """Rows (seq, line, hash, prev hash) each checked as line seq + 1: its bytes with the
        line checker from its predecessor's stored hash, its own stored hash against BLAKE3."""
        out: list[Record] = []
        checker = LineChecker(0, ZERO_HASH, self._where)
        for seq, line, digest, prev in rows:
            checker.expected_seq = seq
            checker.head = prev if prev is not None else ZERO_HASH
            raw = bytes(line)
            env, _ = checker.check(raw, seq + 1)
            if checker.head != digest:
                raise _index_mismatch(self._where, seq)
            out.append(Record(env, raw, digest))
        return out

    _ROWS = (
        "SELECT l.seq, l.line, l.hash, p.hash FROM runfold_lines l LEFT JOIN runfold_lines p "
        "ON p.workspace = l.workspace AND p.seq = l.seq - 1 WHERE l.workspace = %s "
    )

    def record_at(self, seq: int) -> Record:
        """The verified line at `seq`. Raises `E_INVALID_ARGS` naming the valid range."""
        if not 0 <= seq < self._next_seq:
            valid = f"0..{self._next_seq - 1}" if self._next_seq else "none (the ledger is empty)"
            raise invalid_args("read a line", f"seq {seq}", f"give a seq in {valid}")
        rows = self._query(self._ROWS + "AND l.seq = %s", (self.url.name, seq))
        if not rows:
            raise _index_mismatch(self._where, seq)
        return self._checked(rows)[0]

    def run_records(self, run: str, limit: int | None = None, since: int = 0) -> list[Record]:
        """The verified lines of `run` in seq order ([] for none), from seq `since` on; at most
        `limit` of them."""
        sql = self._ROWS + "AND l.run = %s AND l.seq >= %s AND l.seq < %s ORDER BY l.seq"
        params: tuple[object, ...] = (self.url.name, run, since, self._next_seq)
        if limit is not None:
            sql += " LIMIT %s"
            params = (*params, limit)
        return self._checked(self._query(sql, params))

    def records(self, since: int = 0) -> Iterator[Record]:
        """Every verified line from seq `since` to the end of this view, streamed from a
        server-side cursor and checked line by line from the stored hash of `since - 1`."""
        end = self._next_seq
        if not 0 <= since <= end:
            raise invalid_args("read lines", f"since={since}", f"give a seq in 0..{end}")
        if since == end:
            return
        prev = ZERO_HASH if since == 0 else self.record_at(since - 1).hash
        checker = LineChecker(since, prev, self._where)
        seq = since
        for raw in stream_lines(self._reader(), self.url, since, end):
            env, _ = checker.check(raw, seq + 1)
            yield Record(env, raw, checker.head)
            seq += 1
        if seq != end or checker.head != self._head:
            raise RunfoldError(
                ErrorCode.LEDGER_CORRUPT,
                f"read lines up to seq {end - 1} (read {seq - since}, head {checker.head[:16]}…)",
                self._where,
                "the table was changed since it was opened; run `runfold verify` and restore it from a copy",
            )

    # ---- closing ---------------------------------------------------------------------

    def close(self) -> None:
        """Drop staged lines, release the lease (closing the connection) and the reader's
        connection. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._pending = []
        self._marker.close()
        for conn in (self._read_conn, self._conn):
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
        self._conn = self._read_conn = None

    def __enter__(self) -> PgLedger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_APPEND = """
WITH lease AS (
    SELECT epoch FROM runfold_writers WHERE workspace = %(ws)s FOR UPDATE
), ins AS (
    INSERT INTO runfold_lines (workspace, seq, run, hash, line)
    SELECT %(ws)s, t.seq, t.run, t.hash, t.line
    FROM unnest(%(seqs)s::bigint[], %(runs)s::text[], %(hashes)s::text[], %(lines)b::bytea[])
        AS t(seq, run, hash, line)
    WHERE (SELECT epoch FROM lease) = %(epoch)s
      AND (SELECT coalesce(max(seq), -1) FROM runfold_lines WHERE workspace = %(ws)s) = %(expected)s
    RETURNING 1
), n AS (SELECT count(*) AS n FROM ins)
SELECT n, CASE WHEN n > 0 THEN pg_notify(%(channel)s, %(note)s) END FROM n
"""
"""One batch as one statement (its own transaction; one round trip): the lease row locked and its
epoch compared with the writer's, the stored head seq compared with the writer's (the fencing
token), the rows inserted only when both match, a NOTIFY sent at commit. Returns the rows
inserted (0: fenced out). The primary key refuses a seq twice whatever the snapshot saw."""


def _index_mismatch(where: str, seq: int) -> RunfoldError:
    return RunfoldError(
        ErrorCode.LEDGER_CORRUPT,
        f"read seq {seq} (its stored hash or row does not match its bytes)",
        where,
        "run `runfold verify` to find the damaged line, then restore the table from a copy",
    )


def stream_lines(conn: Any, url: StoreUrl, since: int, end: int | None = None) -> Iterator[bytes]:
    """The exact bytes of lines `since`.. (before `end` when given) of `url`'s workspace, in seq
    order (see `stream_chunks`)."""
    for chunk in stream_chunks(conn, url, since, end):
        yield from chunk


def stream_chunks(conn: Any, url: StoreUrl, since: int, end: int | None = None) -> Iterator[list[bytes]]:
    """Lines `since`.. (before `end` when given) of `url`'s workspace in seq order, as lists of
    exact bytes of up to `STREAM_ROWS` lines: one server-side cursor round trip each. Raises
    `E_STORAGE_FATAL` when the server fails mid-stream."""
    psycopg = _psycopg()
    sql = "SELECT line FROM runfold_lines WHERE workspace = %s AND seq >= %s"
    params: tuple[object, ...] = (url.name, since)
    if end is not None:
        sql += " AND seq < %s"
        params = (*params, end)
    try:
        with conn.transaction(), conn.cursor(name=f"runfold_stream_{id(params)}", binary=True) as cur:
            cur.execute(sql + " ORDER BY seq", params)
            while rows := cur.fetchmany(STREAM_ROWS):
                yield [bytes(r[0]) for r in rows]
    except psycopg.Error as exc:
        raise _fatal("stream the ledger's lines", exc, url) from None
