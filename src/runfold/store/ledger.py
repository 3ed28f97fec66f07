"""The workspace ledger on disk: segments, the one-writer lock, group commit, torn tails (DESIGN.md §3).

`Ledger` is the only code that writes ledger files. A writer holds an exclusive OS lock, verifies
the whole chain on open, cuts a torn tail (and records it with one `log_truncated` line), and
appends batches with one fsync each. Readers take no lock and read verified lines through the
disposable index (`runfold.store.index.Index`: its open, check, rebuild and flush), so one run or
one seq costs the size of the answer. Drafts become line bytes in `runfold.store.staging`.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from runfold.core.chain import LineChecker, LineRefused
from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.ids import WORKSPACE_RUN, ZERO_HASH
from runfold.core.payloads import LogTruncated, WorkspaceInitialized
from runfold.core.records import Draft, Record
from runfold.store.durable import fsync_dir
from runfold.store.index import Index
from runfold.store.index_file import Entry, IndexMismatch
from runfold.store.layout import Layout, list_segments
from runfold.store.locks import take_writer_lock
from runfold.store.marks import HeadMarker, check_marks, read_head_mark, read_resume_mark
from runfold.store.one_thread import ThreadGuard, one_thread_at_a_time
from runfold.store.serving import held_recovery
from runfold.store.staging import Stager
from runfold.store.stream import stream_lines
from runfold.store.tail import changed_under_writer, quarantine_bytes
from runfold.store.verify import Progress, check_segment_dir, no_lines_error
from runfold.store.while_syncing import WhileSyncing

SEGMENT_BYTES = 64 << 20
"""A segment rolls over once it holds at least this many bytes (64 MiB)."""
RUNTIME = "runtime"
"""The author of lines the runtime writes about itself."""
OVERLAP_LINES = 50
"""Batches of this many lines build their index rows on the sync helper (smaller: the handoff costs more)."""


def now_ms() -> int:
    """The wall clock as UTC milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


def _default_sync(fd: int) -> None:
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


@dataclass
class WriterIO:
    """The two system calls a batch goes through; tests replace them to inject faults.

    `pwrite(fd, data, offset) -> bytes written` and `sync(fd)` (fdatasync where available).
    """

    pwrite: Callable[[int, bytes, int], int] = field(default=os.pwrite)
    sync: Callable[[int], None] = field(default=_default_sync)


_LONG_LINE = 1 << 24
"""Bytes of an index row's line length past which `_read_entry` checks it against the segment's
size before reading (a damaged row may claim up to 4 GiB, which `os.pread` allocates first)."""


class _Stale(Exception):
    """Internal: a line read through the index did not match its row."""


class Ledger:
    """One workspace's ledger, opened as a reader or as the one writer.

    Build it with `Ledger.create` or `Ledger.open`; use it as a context manager or call `close`.
    A reader's view is the ledger as it was at open; a writer's view advances with its appends.
    Not thread-safe: call it from one thread.
    """

    def __init__(self, ws: Path, *, writer: bool, segment_bytes: int, io: WriterIO | None) -> None:
        self.ws = Path(ws).absolute()
        self.layout = Layout(self.ws)
        self.thread_guard = ThreadGuard(str(self.layout.ledger_dir))
        self.writer = writer
        self.segment_bytes = segment_bytes
        self.io = io or WriterIO()
        self.torn_tail_bytes = 0
        """Bytes of torn tail met on open (a writer cut them; a reader only skips them)."""
        self.newline_restored = False
        """True when this writer's open appended the `\n` a verified last line lacked."""
        self.log_truncated: Record | None = None
        """The `log_truncated` line this writer's open wrote for a torn or quarantined tail."""
        self._segments: list[tuple[int, Path]] = []
        self._next_seq = 0
        self._head = ZERO_HASH
        self._lock_fd: int | None = None
        self._index = Index(self.layout)
        self._fd: int | None = None
        self._size = 0
        self._file_end = 0
        """The size the last segment must have before the next write: another size means another
        process changed the file, and the writer refuses rather than write over it."""
        self._marker = HeadMarker(self.layout)
        self._read_fds: dict[int, int] = {}
        self._poisoned: RunfoldError | None = None
        self._cut_after_next_write = False
        self._closed = False
        self._pending: list[Record] = []
        self._stager = Stager()
        self._while_syncing = WhileSyncing()
        self._entry_checker = LineChecker()
        """Checks lines read through the index, restarted at each entry's seq and prev; it
        keeps the run ids it has seen well-formed, so a run's lines skip that regex."""
        self._segment_names: dict[int, str] = {}
        self.on_durable: list[Callable[[Sequence[Record]], None]] = []
        """Callbacks called as `cb(records)` with each batch once it is durable (after its
        fsync, in seq order); an exception raised by one propagates from `flush`/`append`
        (the batch stays durable). The acknowledgement of `runfold run --events`."""

    # ---- opening ---------------------------------------------------------------------

    @classmethod
    def create(cls, ws: Path, *, segment_bytes: int = SEGMENT_BYTES, io: WriterIO | None = None) -> Ledger:
        """Create `<ws>/.runfold/` (and `ws` if missing), open it as the writer and append
        `workspace_initialized` (who `runtime`, the nil run). Returns the writer.

        Raises `E_INVALID_ARGS` when a ledger already exists there, `E_LEDGER_HELD` when another
        process holds the writer lock.
        """
        layout = Layout(Path(ws).absolute())
        if list_segments(layout.ledger_dir):
            raise _exists(layout)
        for d in (layout.ledger_dir, layout.cas_dir, layout.index_dir):
            d.mkdir(parents=True, exist_ok=True)
        fsync_dir(layout.root)
        fsync_dir(layout.ws)
        ledger = cls._open(layout.ws, writer=True, segment_bytes=segment_bytes, io=io, creating=True)
        try:
            if ledger.next_seq > 0:
                raise _exists(layout)
            ledger.append(
                [Draft(WORKSPACE_RUN, RUNTIME, WorkspaceInitialized.KIND.value, WorkspaceInitialized())]
            )
        except BaseException:
            ledger.close()
            raise
        return ledger

    @classmethod
    def open(
        cls,
        ws: Path,
        *,
        writer: bool,
        segment_bytes: int = SEGMENT_BYTES,
        io: WriterIO | None = None,
        progress: Progress | None = None,
        quarantine_tail: bool = False,
    ) -> Ledger:
        """Open the ledger of workspace `ws` (the directory holding `.runfold/`).

        A reader takes no lock and checks the index against the ledger (rebuilding or extending
        it from verified lines). A writer takes the lock, verifies the whole chain, cuts a torn
        tail and appends exactly one `log_truncated {dropped_bytes}` for it.

        A last line that verifies but lacks its `\n` is kept; a writer appends the `\n` (one
        fsync) before anything else.

        A writer compares the ledger with the marks the workspace recorded outside it
        (`runfold.store.marks`: the head mark, the resume mark) and records its head in the head
        mark once open and after each batch. `quarantine_tail` (a writer only): a garbage tail
        (newline-terminated bytes holding no line after the last valid line) is copied into
        `.runfold/quarantine/` and replaced by one `log_truncated` naming its size, hash and
        quarantine file, like a torn tail (which is then quarantined too, not dropped); without
        it a garbage tail is refused.

        Raises `E_PATH_NOT_FOUND` when there is no ledger, `E_LEDGER_HELD` (writer) naming the
        holder's pid, `LineRefused` for any damage other than a torn tail (nothing is cut), and
        `E_LEDGER_CORRUPT` when segments are misnamed, the ledger directory holds no segment,
        the ledger does not start at seq 0, or it holds no verified line before a torn tail;
        for a writer also when its segments hold 0 bytes (the ledger lost every line) and when the
        ledger does not hold a line a mark names (it lost its tail, or its last line was changed).
        """
        return cls._open(
            ws,
            writer=writer,
            segment_bytes=segment_bytes,
            io=io,
            progress=progress,
            quarantine_tail=quarantine_tail,
        )

    @classmethod
    def _open(
        cls,
        ws: Path,
        *,
        writer: bool,
        segment_bytes: int,
        io: WriterIO | None,
        progress: Progress | None = None,
        creating: bool = False,
        quarantine_tail: bool = False,
    ) -> Ledger:
        if segment_bytes < 1:
            raise invalid_args("open the ledger", f"segment_bytes={segment_bytes}", "give a positive size")
        self = cls(ws, writer=writer, segment_bytes=segment_bytes, io=io)
        if not self.layout.ledger_dir.is_dir():
            raise RunfoldError(
                ErrorCode.PATH_NOT_FOUND,
                "open the ledger",
                str(self.layout.ledger_dir),
                "run `runfold init` to create a workspace there, or pass --workspace DIR",
            )
        try:
            if writer:
                self._lock_fd = take_writer_lock(
                    self.layout.lock_path, lambda holder: held_recovery(self.layout.root.parent, holder)
                )
            self._load(progress, creating, quarantine_tail)
        except BaseException:
            self.close()
            raise
        return self

    def _load(self, progress: Progress | None, creating: bool, quarantine_tail: bool) -> None:
        self._segments = list_segments(self.layout.ledger_dir)
        if not (creating and not self._segments):
            check_segment_dir(self._segments, self.layout.ledger_dir, "open the ledger")
        if self.writer:
            self._load_writer(progress, quarantine_tail)
        else:
            self._load_reader(progress)

    def _load_writer(self, progress: Progress | None, quarantine_tail: bool) -> None:
        action = "open the ledger for writing"
        head_mark = read_head_mark(self.layout)  # marks first: they name lines durable before now
        marks = [m for m in (head_mark, read_resume_mark(self.layout)) if m is not None]
        if self._segments and all(os.path.getsize(p) == 0 for _, p in self._segments):
            check_marks(marks, 0, {}, str(self.layout.ledger_dir), action)
            raise no_lines_error(self.layout.ledger_dir, self._segments, False, action)
        res = self._index.open_writer(
            self._segments, progress, frozenset(m.seq for m in marks), garbage_tail=quarantine_tail
        )
        check_marks(marks, res.next_seq, res.hashes, str(self.layout.ledger_dir), action)
        self._next_seq, self._head = res.next_seq, res.head
        if self._segments:
            path = self._segments[-1][1]
            self._fd = os.open(path, os.O_RDWR)
            self._file_end = os.fstat(self._fd).st_size
            self._size = self._file_end - res.torn_tail_bytes
            if self._size != res.end_offset:  # pragma: no cover - scan and file disagree
                raise RunfoldError(
                    ErrorCode.STORAGE_FATAL,
                    f"open the ledger (segment is {self._size} bytes, verified {res.end_offset})",
                    str(path),
                    "another process changed the file during open; make sure only runfold writes it, then reopen",
                )
        if res.unterminated:
            self._restore_newline()
        self.torn_tail_bytes = res.torn_tail_bytes
        if res.torn_tail_bytes:
            # The log_truncated line is written over the torn bytes and the file is cut right
            # after it, before the one fsync: a crash leaves either the torn tail (cut again on
            # the next open) or the cut recorded, never a silent cut. A garbage tail is copied
            # into the quarantine (durably) before that.
            data: dict[str, object] = {"dropped_bytes": res.torn_tail_bytes}
            if res.garbage_tail or quarantine_tail:
                data.update(quarantine_bytes(self.layout, self._segments[-1][1], self._size).fields())
            self._cut_after_next_write = True
            [self.log_truncated] = self.append(
                [Draft(WORKSPACE_RUN, RUNTIME, LogTruncated.KIND.value, LogTruncated.from_data(data))]
            )
        self._marker.record_open(head_mark, self._next_seq - 1, self._head, self._sync_last_segment)

    def _sync_last_segment(self) -> None:
        if self._fd is not None:
            self.io.sync(self._fd)

    def _restore_newline(self) -> None:
        """Append the `\n` a verified last line lacks, durably (one fsync), before any other
        write; raises `E_STORAGE_FATAL` (nothing else written) when that fails."""
        assert self._fd is not None
        try:
            if self.io.pwrite(self._fd, b"\n", self._size) != 1:
                raise OSError("pwrite wrote no bytes")
            self.io.sync(self._fd)
        except OSError as exc:
            raise RunfoldError(
                ErrorCode.STORAGE_FATAL,
                f"append the missing newline after the last line ({exc})",
                str(self._segments[-1][1]),
                "free disk space or fix the storage error, then reopen the ledger",
            ) from exc
        self._size += 1
        self._file_end += 1
        self.newline_restored = True

    def _load_reader(self, progress: Progress | None) -> None:
        res = self._index.open_reader(self._segments, progress)
        self._next_seq, self._head = res.next_seq, res.head
        self.torn_tail_bytes = res.torn_tail_bytes

    # ---- writing ---------------------------------------------------------------------

    def append(self, drafts: Sequence[Draft]) -> list[Record]:
        """Append a batch durably (group commit, DESIGN.md §3) and return its records.

        Each draft gets `v` = FORMAT_VERSION, the next seq, the chain head as `prev` and, when its
        `t` is None, the wall clock in ms. All lines go out in one write followed by one fsync;
        seq/head advance only after the fsync. Raises `E_INVALID_ARGS` (nothing written) for a
        bad draft (field named by its index in the batch); `E_STORAGE_FATAL` when the write or
        fsync fails (the file is cut back to its pre-batch length and this writer refuses every
        later append until reopened), or on a reader or a poisoned writer.

        Lines staged earlier (`stage`) go out in the same write, before this batch.
        """
        records = self.stage(drafts)
        self.flush()
        return records

    @one_thread_at_a_time
    def stage(self, drafts: Sequence[Draft]) -> list[Record]:
        """Give a batch its seq/prev/t and bytes now, without writing it (group commit with
        staging, DESIGN.md §5: lines get their place when staged; durability comes at `flush`).

        Returns the provisional records (final bytes and chain hashes). Staged lines continue the
        chain after earlier staged lines; readers, `next_seq` and `head` see them only after
        `flush`. Raises `E_INVALID_ARGS` for a bad draft (nothing staged, naming its index),
        `E_STORAGE_FATAL` on a reader, closed or poisoned writer. Lines still staged when the
        writer closes are dropped, as if the process had died before the fsync.

        Drafts become records through `Stager.stage` (checks, canonical bytes, chain hashes).
        """
        self._check_writable()
        if not drafts:
            return []
        seq = self._next_seq + len(self._pending)
        head = self._pending[-1].hash if self._pending else self._head
        records = self._stager.stage(drafts, seq, head, now_ms())
        self._pending.extend(records)
        return records

    @property
    def staged(self) -> int:
        """How many staged lines wait for the next `flush`."""
        return len(self._pending)

    @one_thread_at_a_time
    def flush(self) -> int:
        """Write every staged line in one write and make it durable with one fsync; returns the
        number of lines written (0 when nothing was staged: no system call).

        seq/head advance, the index learns the lines and `on_durable` callbacks run only after
        the fsync. Raises
        `E_STORAGE_FATAL` when the write or fsync fails: the file is cut back to its pre-batch
        length, the staged lines are dropped and this writer refuses every later append until
        reopened (also raised on a reader, closed or poisoned writer).
        """
        self._check_writable()
        if not self._pending:
            return 0
        records = self._pending
        self._pending = []
        self._roll_if_needed()
        assert self._fd is not None
        fd = self._fd
        start = self._size
        buf = b"\n".join([r.raw for r in records] + [b""])
        cutting = self._cut_after_next_write
        index = self._index
        # index rows: built during the fdatasync (on the helper, when worth a handoff), added after it
        rows_job = partial(index.prepare_batch, records[0].seq, self._segments[-1][0], start, records)
        overlap = len(records) >= OVERLAP_LINES or index.flush_due()
        end = os.fstat(fd).st_size
        if end != self._file_end:
            raise self._changed_under_us(end)
        try:
            written = 0
            view = memoryview(buf)
            while written < len(buf):
                n = self.io.pwrite(fd, view[written:].tobytes() if written else buf, start + written)
                if n <= 0:
                    raise OSError("pwrite wrote no bytes")
                written += n
            if cutting:
                os.ftruncate(fd, start + len(buf))
            if overlap:
                rows = self._while_syncing.run(rows_job, lambda: self.io.sync(fd))
            else:
                self.io.sync(fd)
                rows = rows_job()
        except OSError as exc:
            self._poison(exc, None if cutting else start)
            assert self._poisoned is not None
            raise self._poisoned from exc
        # durable: advance
        self._cut_after_next_write = False
        index.add_rows(rows)
        self._size = self._file_end = start + len(buf)
        self._next_seq = records[-1].seq + 1
        self._head = records[-1].hash
        self._marker.write(self._next_seq - 1, self._head)
        for cb in tuple(self.on_durable):
            cb(records)
        return len(records)

    def _check_writable(self) -> None:
        if self._closed:
            raise RunfoldError(
                ErrorCode.STORAGE_FATAL,
                "append to the ledger",
                str(self.ws),
                "this Ledger was closed; open it again",
            )
        if not self.writer:
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                "append to a ledger opened as a reader",
                str(self.ws),
                "open it with Ledger.open(ws, writer=True)",
            )
        if self._poisoned is not None:
            raise self._poisoned

    def _poison(self, exc: OSError, start: int | None) -> None:
        """Refuse every later append. `start` None: the batch was written over a torn tail, so
        nothing is cut here (the next open finds a torn tail again and records its cut)."""
        assert self._fd is not None
        rolled = "cut back to its pre-batch length"
        try:
            if start is None:
                rolled = "left for the next open to check (the batch was written over a torn tail)"
            else:
                os.ftruncate(self._fd, start)
                os.fsync(self._fd)
        except OSError as again:
            rolled = f"could not be cut back ({again}); the next writer's open verifies it"
        self._poisoned = RunfoldError(
            ErrorCode.STORAGE_FATAL,
            f"append a batch at seq {self._next_seq} ({exc}); the file was {rolled}",
            str(self._segments[-1][1]),
            "free disk space or fix the storage error, then reopen the ledger (this writer refuses further appends)",
        )

    def _changed_under_us(self, end: int) -> RunfoldError:
        """Poison this writer (nothing written, nothing cut) because the last segment is `end`
        bytes, not the size this writer left it: another process appended to it or cut it."""
        self._poisoned = changed_under_writer(self._segments[-1][1], self._file_end, end, self._next_seq)
        return self._poisoned

    def _roll_if_needed(self) -> None:
        if self._fd is not None and (self._size < self.segment_bytes or self._cut_after_next_write):
            return
        if self._fd is not None and self._size == 0:
            return
        path = self.layout.segment_path(self._next_seq)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fsync_dir(self.layout.ledger_dir)
        except OSError:
            os.close(fd)
            raise
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd
        self._size = self._file_end = 0
        self._segments.append((self._next_seq, path))

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
        """The segment files of this view, in chain order."""
        return [p for _, p in self._segments]

    def runs(self) -> list[str]:
        """Every run id in order of first appearance, excluding the workspace (nil) run."""
        return self._index.runs()

    def _seq_range_error(self, seq: int, what: str) -> RunfoldError:
        valid = f"0..{self._next_seq - 1}" if self._next_seq else "none (the ledger is empty)"
        return invalid_args(
            what,
            f"seq {seq}",
            f"give a seq in {valid} (the ledger's tail is seq {self._next_seq - 1})",
        )

    @one_thread_at_a_time
    def record_at(self, seq: int) -> Record:
        """The verified line at `seq`. Reads one line through the index.

        Raises `E_INVALID_ARGS` naming the valid range when `seq` is outside it; `LineRefused`
        when the ledger was changed on disk.
        """
        if not 0 <= seq < self._next_seq:
            raise self._seq_range_error(seq, "read a line")
        for attempt in (0, 1):
            try:
                e = self._index.entry(seq)
                if e is None:
                    raise _Stale
                return self._read_entry(e)
            except (_Stale, IndexMismatch, sqlite3.DatabaseError):
                self._after_stale(attempt, seq)
        raise AssertionError("unreachable")

    @one_thread_at_a_time
    def run_records(self, run: str, limit: int | None = None, since: int = 0) -> list[Record]:
        """The verified lines of `run` in seq order ([] when the run has none), from seq `since`
        on; with `limit`, only the first `limit` of those are read.

        Cost is proportional to the lines returned (index lookup plus one read per line). Raises
        `LineRefused` when the ledger was changed on disk.
        """
        entries: list[Entry] = []
        for attempt in (0, 1):
            try:
                entries = self._index.run_entries(run, since, limit)
                self._prefetch(entries)
                out = [self._read_entry(e) for e in entries if e.seq < self._next_seq]
                if any(r.env.run != run for r in out):  # an index renumbered under this reader
                    raise _Stale
                return out
            except (_Stale, IndexMismatch, sqlite3.DatabaseError):
                self._after_stale(attempt, entries[0].seq if entries else 0)
        raise AssertionError("unreachable")

    def _after_stale(self, attempt: int, seq: int) -> None:
        """An index read did not match the ledger: rebuild the index once (which re-verifies
        the chain and raises LineRefused on damage); a second mismatch is corruption."""
        if attempt == 0:
            self._rebuild_index()
            return
        raise RunfoldError(
            ErrorCode.LEDGER_CORRUPT,
            f"read seq {seq} through the index",
            str(self.layout.ledger_dir),
            "run `runfold verify` to find the damaged line, then restore the ledger from a copy",
        )

    def _rebuild_index(self) -> None:
        """Rebuild the index from a full scan; the ledger must still hold this view's lines."""
        end = self._next_seq
        res = self._index.rebuild(self._segments, writer=self.writer)
        if not self.writer:
            self._head, self.torn_tail_bytes = res.head, res.torn_tail_bytes
            if res.next_seq < end:
                raise RunfoldError(
                    ErrorCode.LEDGER_CORRUPT,
                    f"re-read the ledger (it now ends at seq {res.next_seq - 1}, it had {end} lines)",
                    str(self.layout.ledger_dir),
                    "the ledger was cut by another tool; restore it from a copy",
                )
            return
        if res.next_seq != end or res.torn_tail_bytes:
            raise RunfoldError(
                ErrorCode.STORAGE_FATAL,
                f"re-read the ledger (verified {res.next_seq} lines, this writer wrote {end})",
                str(self.layout.ledger_dir),
                "another process changed the ledger under this writer; stop it and reopen",
            )

    def _read_fd(self, seg: int) -> int:
        fd = self._read_fds.get(seg)
        if fd is None:
            try:
                fd = os.open(self.layout.segment_path(seg), os.O_RDONLY)
            except OSError:
                raise _Stale from None
            self._read_fds[seg] = fd
        return fd

    def _read_entry(self, e: Entry) -> Record:
        fd = self._read_fd(e.seg)
        if e.off < 0 or (e.len > _LONG_LINE and e.off + e.len > os.fstat(fd).st_size):
            raise _Stale  # a damaged row: pread would fail, or allocate its length first
        data = os.pread(fd, e.len + 1, e.off)
        if len(data) == e.len and e.seq == self._next_seq - 1:
            raw = data  # the last line, missing only its newline (a writer adds it on open)
        elif len(data) != e.len + 1 or data[-1] != 0x0A:
            raise _Stale
        else:
            raw = data[:-1]
        checker = self._entry_checker
        checker.expected_seq = e.seq
        checker.head = e.prev
        checker.min_version = 1  # one line out of its context: the version order is the scan's
        checker.where = self._segment_names.get(e.seg) or self._segment_name(e.seg)
        try:
            env, _ = checker.check(raw, e.seq + 1)
        except LineRefused:
            raise _Stale from None
        if checker.head != e.hash:
            raise _Stale
        return Record(env, raw, e.hash)

    def _prefetch(self, entries: Sequence[Entry]) -> None:
        """Ask the kernel to read every entry's bytes at once (POSIX_FADV_WILLNEED), so lines
        not in the page cache arrive in parallel instead of one blocking read after another."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None or len(entries) < 2:
            return
        for e in entries:
            try:
                advise(self._read_fd(e.seg), e.off, e.len + 1, os.POSIX_FADV_WILLNEED)
            except OSError:
                return

    def _segment_name(self, seg: int) -> str:
        name = self._segment_names[seg] = str(self.layout.segment_path(seg))
        return name

    def records(self, since: int = 0) -> Iterator[Record]:
        """Every verified line from seq `since` to the end of this view, streamed in chunks.

        The chain is checked line by line from the stored hash of `since - 1`, and the last line
        against the head. Raises `E_INVALID_ARGS` when `since` is outside 0..next_seq;
        `LineRefused` when the ledger was changed on disk.
        """
        end = self._next_seq
        if not 0 <= since <= end:
            raise invalid_args(
                "read lines",
                f"since={since}",
                f"give a seq in 0..{end} ({end} reads nothing; the tail is seq {end - 1})",
            )
        if since == end:
            return
        e: Entry | None = None
        start = 0
        for attempt in (0, 1):
            try:
                e = self._index.entry(since)
                if e is None:
                    raise _Stale
                self._read_entry(e)  # the row is right (else the stream below would refuse a sound ledger)
                start = next(i for i, (s, _) in enumerate(self._segments) if s == e.seg)
                break
            except (_Stale, IndexMismatch, sqlite3.DatabaseError):
                self._after_stale(attempt, since)
        assert e is not None
        yield from stream_lines(
            self._segments[start:], e.off, since, end, e.prev, self._head, self.layout.ledger_dir
        )

    # ---- closing ---------------------------------------------------------------------

    def close(self) -> None:
        """Flush the index, close files and release the locks. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._pending = []  # staged, never flushed: dropped (DESIGN.md §5 durability points)
        self._while_syncing.close()
        self._marker.close()
        try:
            self._index.close(keep=self.writer and self._poisoned is None)
        finally:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._lock_fd is not None:
                try:
                    os.ftruncate(self._lock_fd, 0)
                finally:
                    os.close(self._lock_fd)
                    self._lock_fd = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _exists(layout: Layout) -> RunfoldError:
    return invalid_args(
        "create a workspace (a ledger already exists there)",
        str(layout.ledger_dir),
        "open the existing workspace instead, or choose another directory",
    )
