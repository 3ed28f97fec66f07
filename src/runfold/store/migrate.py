"""Copy a ledger between stores byte for byte: files into PostgreSQL and back (DESIGN.md §3).

The source is any verified view (a workspace's file or PostgreSQL ledger, or a bare foreign
ledger); its lines are streamed through the line checker and written unchanged, so the target's
head equals the source's. A target that already holds lines is refused: a migration never
merges two histories.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.records import Record
from runfold.store.backend import StoreUrl
from runfold.store.durable import fsync_dir
from runfold.store.layout import Layout, list_segments
from runfold.store.view import LedgerView


@dataclass(frozen=True, slots=True)
class MigrateReport:
    """What a migration copied: `lines` and `bytes` (with newlines) from `source` to `target`,
    the chain `head` both now end with, and the wall time in `seconds`."""

    source: str
    target: str
    lines: int
    bytes: int
    head: str
    seconds: float


class _Counted:
    """The records of a view, counting their bytes (with newlines) as they pass."""

    def __init__(self, records: Iterable[Record]) -> None:
        self._records = records
        self.bytes = 0

    def __iter__(self) -> Iterator[Record]:
        for r in self._records:
            self.bytes += len(r.raw) + 1
            yield r


def _check_heads(source: LedgerView, lines: int, head: str, target: str) -> None:
    if lines != source.next_seq or head != source.head:
        raise RunfoldError(
            ErrorCode.LEDGER_CORRUPT,
            f"migrate the ledger (the target ends at {lines} lines, head {head[:16]}…; the source "
            f"at {source.next_seq}, head {source.head[:16]}…)",
            target,
            "the source changed during the copy or the target was written by another process; "
            "verify both, drop the target and migrate again",
        )


def _empty_source(source: LedgerView, name: str) -> None:
    if source.next_seq == 0 or getattr(source, "first_seq", 0) != 0:
        raise invalid_args(
            "migrate the ledger",
            name,
            "give a ledger that starts at seq 0 (a whole workspace or ledger directory, not a later segment)",
        )


def migrate_to_store(source: LedgerView, name: str, url: StoreUrl, ws: Path) -> MigrateReport:
    """Copy every line of `source` (named `name` in messages) into `url`'s workspace, which
    must hold no line, in one transaction under its writer lease (`ws`: the local workspace
    directory the store is used from). Returns the report once the target's head, re-read
    from the server, equals the source's.

    Raises `E_INVALID_ARGS` for an empty source or a target holding lines (nothing written),
    `E_LEDGER_HELD` when another process writes the target, `E_STORAGE_FATAL` when the server
    fails (nothing written), `LineRefused` when a source line fails verification (nothing written).
    """
    from runfold.store.pg import PgLedger
    from runfold.store.pg_tools import load_lines

    _empty_source(source, name)
    started = time.perf_counter()
    records = _Counted(source.records())
    with PgLedger.open(url, ws, writer=True, marks=False) as target:  # the source's marks name the copy
        load_lines(target, records)
    with PgLedger.open(url, ws, writer=False) as check:
        _check_heads(source, check.next_seq, check.head, url.shown)
    return MigrateReport(
        name, f"{url.shown} workspace {url.name}", source.next_seq, records.bytes, source.head,
        time.perf_counter() - started,
    )  # fmt: skip


def migrate_to_files(source: LedgerView, name: str, dest: Path, segment_bytes: int) -> MigrateReport:
    """Write every line of `source` as the file ledger of workspace directory `dest` (created
    with `.runfold/ledger`, `cas` and `index`), in segments rolled past `segment_bytes`, each
    fsynced, then verified by opening it. Returns the report once its head equals the source's.

    Raises `E_INVALID_ARGS` for an empty source or when `dest` already holds ledger segments
    (nothing written), `LineRefused` when a source line fails verification, OSError from the disk.
    """
    from runfold.store.ledger import Ledger

    _empty_source(source, name)
    layout = Layout(dest.absolute())
    if list_segments(layout.ledger_dir):
        raise invalid_args(
            "migrate the ledger (the target already holds ledger segments)",
            str(layout.ledger_dir),
            "give a directory without a ledger (a new one is created)",
        )
    started = time.perf_counter()
    for d in (layout.ledger_dir, layout.cas_dir, layout.index_dir):
        d.mkdir(parents=True, exist_ok=True)
    fsync_dir(layout.root)
    records = _Counted(source.records())
    _write_segments(layout, records, segment_bytes)
    with Ledger.open(layout.ws, writer=False) as check:
        _check_heads(source, check.next_seq, check.head, str(layout.ledger_dir))
    return MigrateReport(
        name,
        str(layout.ledger_dir),
        source.next_seq,
        records.bytes,
        source.head,
        time.perf_counter() - started,
    )


def _write_segments(layout: Layout, records: Iterable[Record], segment_bytes: int) -> None:
    """Write `records` as segments `ledger-<first seq>.jsonl` (a new one once the current holds
    `segment_bytes`), each fsynced when complete, then the directory."""
    fd: int | None = None
    size = 0
    buf: list[bytes] = []
    pending = 0

    def drain() -> None:
        nonlocal pending
        if fd is not None and buf:
            data = b"".join(buf)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            buf.clear()
            pending = 0

    try:
        for r in records:
            if fd is None or size >= segment_bytes:
                drain()
                if fd is not None:
                    os.fsync(fd)
                    os.close(fd)
                fd = os.open(layout.segment_path(r.seq), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                size = 0
            line = r.raw + b"\n"
            buf.append(line)
            size += len(line)
            pending += len(line)
            if pending >= 1 << 20:
                drain()
        drain()
        if fd is not None:
            os.fsync(fd)
    finally:
        if fd is not None:
            os.close(fd)
    fsync_dir(layout.ledger_dir)


def copy_cas(src: Path, dest: Path) -> int:
    """Copy the CAS objects of workspace `src` missing from workspace `dest` (the objects are
    named by their hash, so an existing one is the same bytes); returns how many were copied."""
    src_cas, dest_cas = Layout(src).cas_dir, Layout(dest).cas_dir
    if not src_cas.is_dir() or src_cas.resolve() == dest_cas.resolve():
        return 0
    copied = 0
    for obj in src_cas.rglob("*"):
        if obj.is_file() and not obj.name.startswith("."):
            target = dest_cas / obj.relative_to(src_cas)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(obj, target)
                copied += 1
    return copied
