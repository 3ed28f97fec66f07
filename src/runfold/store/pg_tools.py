"""What runs beside a PostgreSQL ledger: `verify_store` (the whole chain, streamed from the
server), `LineWaiter` (LISTEN/NOTIFY: wake a live tail when lines are committed) and
`load_lines` (copy a verified ledger into an empty workspace in one transaction).

Kept apart from `runfold.store.pg` (the ledger itself) because none of them writes through the
staging path: they read or copy lines that already exist, byte for byte.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from runfold.core.chain import LineChecker
from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.ids import ZERO_HASH
from runfold.core.records import Record
from runfold.store.backend import StoreUrl
from runfold.store.pg import CHANNEL, PgLedger, _fatal, _psycopg, connect, stream_chunks
from runfold.store.verify import Progress, VerifyReport

LOAD_ROWS = 5000
"""Rows per COPY write while loading a ledger (one transaction for all of them)."""


def verify_store(url: StoreUrl, progress: Progress | None = None) -> VerifyReport:
    """Verify every line of `url`'s workspace read-only, streamed from a server-side cursor:
    the same checks as `verify_path` (parse, version, chain, seq, canonical bytes, kind) and the
    same numbering (line n is seq n - 1). `progress(done_bytes, total_bytes)` is called once per
    fetched chunk. Raises `LineRefused` at the first bad line, `E_PATH_NOT_FOUND` when the
    workspace holds no line, `E_STORAGE_FATAL` when the server fails."""
    started = time.perf_counter()
    where = f"{url.shown} workspace {url.name}"
    conn = connect(url)
    try:
        total = 0
        if progress is not None:
            total = conn.execute(
                "SELECT coalesce(sum(length(line) + 1), 0) FROM runfold_lines WHERE workspace = %s",
                (url.name,),
            ).fetchone()[0]
        checker = LineChecker(0, ZERO_HASH, where)
        versions: set[int] = set()
        skipped = nbytes = count = 0
        for chunk in stream_chunks(conn, url, 0):
            i, n = 0, len(chunk)
            while i < n:
                k = checker.check_fast(chunk, i, versions)
                if k:
                    nbytes += sum(map(len, chunk[i : i + k])) + k
                    count += k
                    i += k
                    if i == n:
                        break
                raw = chunk[i]
                env, known = checker.check(raw, count + 1)
                skipped += not known
                versions.add(env.v)
                nbytes += len(raw) + 1
                count += 1
                i += 1
            if progress is not None:
                progress(nbytes, total)
    finally:
        conn.close()
    if count == 0:
        raise RunfoldError(
            ErrorCode.PATH_NOT_FOUND,
            "verify the ledger (the store holds no line for this workspace)",
            where,
            "check `?workspace=NAME` in the store URL, or `runfold migrate --to URL` a ledger into it",
        )
    return VerifyReport(
        path=where,
        lines=count,
        first_seq=0,
        last_seq=count - 1,
        head=checker.head,
        bytes=nbytes,
        seconds=time.perf_counter() - started,
        versions=frozenset(versions),
        segments=0,
        torn_tail_bytes=0,
        skipped_unknown=skipped,
    )


class LineWaiter:
    """Wakes a live tail when a writer commits lines to `url`'s workspace (LISTEN/NOTIFY on
    `runfold_lines`; every batch's transaction sends `<workspace>\\n<next seq>`).

    `wait(next_seq, timeout_s)` blocks until the workspace holds a line at `next_seq` or later
    and returns the workspace's next seq then (unchanged when `timeout_s` passed). Use it as a
    context manager or call `close`. Raises `E_STORAGE_FATAL` when the server is unreachable.
    """

    def __init__(self, url: StoreUrl) -> None:
        self.url = url
        self._conn: Any = connect(url)
        self._conn.execute(f"LISTEN {CHANNEL}")

    def _stored_next(self) -> int:
        row = self._conn.execute(
            "SELECT coalesce(max(seq), -1) + 1 FROM runfold_lines WHERE workspace = %s", (self.url.name,)
        ).fetchone()
        return int(row[0])

    def wait(self, next_seq: int, timeout_s: float) -> int:
        psycopg = _psycopg()
        deadline = time.monotonic() + timeout_s
        try:
            known = self._stored_next()  # lines committed before LISTEN took effect count too
            while known <= next_seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for note in self._conn.notifies(timeout=left, stop_after=1):
                    name, _, seq = note.payload.rpartition("\n")
                    if name == self.url.name and seq.isdigit():
                        known = max(known, int(seq))
            return known
        except psycopg.Error as exc:
            raise _fatal("wait for new lines", exc, self.url) from None

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> LineWaiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_lines(target: PgLedger, records: Iterable[Record]) -> tuple[int, str]:
    """Copy `records` (verified lines from seq 0, in order, e.g. another ledger's `records()`)
    into the empty workspace `target` (an open writer) byte for byte, in one transaction; returns
    (lines, head). Each record must continue the chain (seq, prev): a reader's lines always do.

    Raises `E_INVALID_ARGS` when the target already holds lines (nothing written),
    `E_LEDGER_CORRUPT` when the records do not chain, `E_STORAGE_FATAL` when the server fails
    (the transaction is rolled back: nothing written).
    """
    if target.next_seq > 0:
        raise invalid_args(
            "migrate into the store (the target already holds lines)",
            f"{target.url.shown} workspace {target.url.name} ({target.next_seq} lines)",
            "give an empty target: another `?workspace=NAME`, or drop that workspace's rows first",
        )
    psycopg = _psycopg()
    conn, name = target._conn, target.url.name
    head, seq = ZERO_HASH, 0
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT epoch FROM runfold_writers WHERE workspace = %s FOR UPDATE", (name,))
            row = cur.fetchone()
            if row is None or row[0] != target.epoch:
                raise _lost(target)
            with cur.copy("COPY runfold_lines (workspace, seq, run, hash, line) FROM STDIN") as cp:
                for r in records:
                    if r.env.seq != seq or r.env.prev != head:
                        raise RunfoldError(
                            ErrorCode.LEDGER_CORRUPT,
                            f"migrate line {seq + 1} (seq {r.env.seq}, expected {seq}, or its prev breaks the chain)",
                            f"{target.url.shown} workspace {name}",
                            "verify the source ledger (`runfold verify`) and restore it from a copy",
                        )
                    cp.write_row((name, seq, r.env.run, r.hash, r.raw))
                    head, seq = r.hash, seq + 1
    except psycopg.Error as exc:
        raise _fatal(
            "copy the lines into the store; the transaction was rolled back", exc, target.url
        ) from None
    return seq, head


def _lost(target: PgLedger) -> RunfoldError:
    return RunfoldError(
        ErrorCode.LEDGER_HELD,
        "migrate into the store (this process lost the writer lease)",
        f"{target.url.shown} workspace {target.url.name}",
        "stop the other writer, then retry the migration",
    )
