"""Marks a workspace keeps outside its ledger of lines the ledger held, and the check that it
still holds them (DESIGN.md §3 "Marks outside the ledger").

A chain verifies from its first line to its last, so losing the newest lines (a deleted segment
or line, a zeroed file) or re-encoding the last line leaves a ledger that verifies. The writer
therefore records its head in `head-mark.json` after each durable batch, resume records its
clean point in `resume-mark.json`, and `verify` and every writer's open refuse a ledger that no
longer holds a line a mark names. A mark is written only after the lines it names are durable
and without an fsync of its own: a crash can leave it behind the ledger, never ahead of it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import blake3
import orjson

from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.store.layout import Layout

HEAD_MARK_BYTES = 128
"""Size of `head-mark.json`: one JSON object padded with spaces and ended by a newline, so each
update is one `pwrite` of the same length over the same bytes."""

_HEX64 = re.compile(r"[0-9a-f]{64}")
_READ_TRIES = 3
"""Reads of a head mark whose check fails before it is treated as absent (a reader may meet an
update half done)."""


@dataclass(frozen=True)
class Mark:
    """A line the workspace recorded outside the ledger: its `seq`, its chain `hash` (64 hex)
    and `source`, the words naming where it was recorded (e.g. `the head mark (.runfold/head-mark.json)`)."""

    seq: int
    hash: str
    source: str


def _check_of(seq: int, digest: str) -> str:
    return blake3.blake3(f"{seq}:{digest}".encode()).hexdigest()[:16]


def head_mark_bytes(seq: int, digest: str) -> bytes:
    """The `HEAD_MARK_BYTES` bytes of `head-mark.json` naming line `seq` with hash `digest`:
    `{"seq":S,"hash":H,"check":C}` (C: the first 16 hex of BLAKE3 of `S:H`, so a torn update
    reads as no mark, never as a wrong one), spaces, newline."""
    body = orjson.dumps({"seq": seq, "hash": digest, "check": _check_of(seq, digest)})
    return body.ljust(HEAD_MARK_BYTES - 1) + b"\n"


def _parse(data: bytes, source: str, *, checked: bool) -> Mark | None:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    seq, digest = obj.get("seq"), obj.get("hash")
    if type(seq) is not int or seq < 0 or not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        return None
    if checked and obj.get("check") != _check_of(seq, digest):
        return None
    return Mark(seq, digest, source)


_MARK_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK
"""A mark file is opened without following a symlink and without waiting on a FIFO: a mark that
is not a regular file is no evidence and is never written through."""


def _open_regular(path: os.PathLike[str], flags: int) -> int:
    """An fd of `path` opened with `flags` (plus `_MARK_OPEN`); raises OSError when it is not a
    regular file (a symlink, FIFO, device or directory)."""
    fd = os.open(path, flags | _MARK_OPEN, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def _read_mark_file(path: os.PathLike[str]) -> bytes:
    fd = _open_regular(path, os.O_RDONLY)
    try:
        return os.read(fd, 4 * HEAD_MARK_BYTES)  # a mark is small: a huge file is read no further
    finally:
        os.close(fd)


def read_head_mark(layout: Layout) -> Mark | None:
    """The head mark of the workspace at `layout`, or None when it is missing or unreadable
    (a torn or damaged mark is no evidence; the next writer rewrites it)."""
    for _ in range(_READ_TRIES):
        try:
            data = _read_mark_file(layout.head_mark_path)
        except OSError:
            return None
        mark = _parse(data, f"the head mark ({layout.head_mark_path.relative_to(layout.ws)})", checked=True)
        if mark is not None:
            return mark
    return None


def read_resume_mark(layout: Layout) -> Mark | None:
    """The clean point resume recorded (`{"seq": S, "hash": H}`), or None when it is missing or
    malformed (a cache entry that never named a line is no evidence)."""
    try:
        data = _read_mark_file(layout.resume_mark_path)
    except OSError:
        return None
    return _parse(data, f"the resume mark ({layout.resume_mark_path.relative_to(layout.ws)})", checked=False)


def read_marks(layout: Layout) -> list[Mark]:
    """Every readable mark of the workspace: read them before scanning the ledger, so a writer
    that appends meanwhile cannot make a mark name a line the scan did not reach."""
    return [m for m in (read_head_mark(layout), read_resume_mark(layout)) if m is not None]


class HeadMarker:
    """Writes `head-mark.json` for the one writer: `write(seq, hash)` after each durable batch.

    One `pwrite` of `HEAD_MARK_BYTES` per call, no fsync (DESIGN.md §3: the mark may lag the
    ledger after a crash, never lead it). A mark that cannot be written is skipped: it is
    evidence, not history. Never moves the mark to a lower seq than this writer wrote.
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._fd: int | None = None
        self._seq = -1

    def write(self, seq: int, digest: str) -> None:
        """Record line `seq` (hash `digest`) as the newest durable line (skipped when `seq` is
        below the last one written)."""
        if seq < self._seq:
            return
        try:
            if self._fd is None:
                self._fd = _open_regular(self.layout.head_mark_path, os.O_WRONLY | os.O_CREAT)
            os.pwrite(self._fd, head_mark_bytes(seq, digest), 0)
        except OSError:
            return
        self._seq = seq

    def record_open(self, mark: Mark | None, seq: int, digest: str, sync: Callable[[], object]) -> None:
        """At a writer's open, record its verified last line `seq` (hash `digest`; nothing when
        `seq` < 0) unless `mark` (the head mark read before the open's scan) names it already.
        `sync()` runs first and makes the lines the open verified durable: a writer that died
        between its write and its fsync left lines a mark must not name before they are; when
        it raises OSError, no mark is written."""
        if seq < 0 or (mark is not None and (mark.seq, mark.hash) == (seq, digest)):
            return
        try:
            sync()
        except OSError:
            return
        self.write(seq, digest)

    def close(self) -> None:
        """Close the file (safe to call twice)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lost_tail_error(mark: Mark, next_seq: int, found: str | None, where: str, action: str) -> RunfoldError:
    """The refusal of a ledger that no longer holds `mark`'s line: it ends before `mark.seq`
    (`found` None), or its line at `mark.seq` hashes to `found`. `E_LEDGER_CORRUPT` naming
    `where` (the ledger directory), what was recorded, what was found and how to recover."""
    recorded = f"{mark.source} recorded seq {mark.seq}, hash {mark.hash[:16]}…"
    if found is None:
        ends = f"it ends at seq {next_seq - 1}" if next_seq else "it holds no line"
        what = f"{ends}, but {recorded}: the ledger lost its newest lines"
    else:
        what = (
            f"its line at seq {mark.seq} hashes to {found[:16]}…, but {recorded}: that line was "
            "changed or replaced after it was written"
        )
    return RunfoldError(
        ErrorCode.LEDGER_CORRUPT,
        f"{action} ({what})",
        where,
        f"restore the ledger directory from a copy that holds seq {mark.seq} with hash "
        f"{mark.hash[:16]}…, then run `runfold verify`; nothing was written (runfold never "
        "writes after a ledger that lost its tail, and never moves a mark back)",
    )


def check_marks(
    marks: Sequence[Mark], next_seq: int, hashes: dict[int, str], where: str, action: str
) -> None:
    """Raise `lost_tail_error` for the first of `marks` the ledger does not hold: a ledger of
    `next_seq` verified lines whose line hashes at the marks' seqs are `hashes` (from
    `scan(remember=...)`)."""
    for mark in sorted(marks, key=lambda m: -m.seq):
        if mark.seq >= next_seq:
            raise lost_tail_error(mark, next_seq, None, where, action)
        found = hashes.get(mark.seq)
        if found is not None and found != mark.hash:
            raise lost_tail_error(mark, next_seq, found, where, action)


@dataclass(frozen=True)
class Anchor:
    """A head the user kept outside the workspace (`runfold head`): a line's `hash` (16 to 64
    lowercase hex: the whole hash or its start) and, when known, its `seq`."""

    seq: int | None
    hash: str


_ANCHOR = re.compile(r"(?:(\d+):)?([0-9a-f]{16,64})")


def parse_anchor(text: str) -> Anchor:
    """`HASH` or `SEQ:HASH` (as `runfold head` prints them; HASH at least 16 hex digits) as an
    `Anchor`. Raises `E_INVALID_ARGS` naming the text and the expected form."""
    m = _ANCHOR.fullmatch(text.strip().lower())
    if m is None:
        raise invalid_args(
            "check the head you kept",
            f"--head {text!r}",
            "give the hash `runfold head` printed (64 hex digits, or at least its first 16), or SEQ:HASH",
        )
    return Anchor(int(m.group(1)) if m.group(1) is not None else None, m.group(2))


def check_anchor(anchor: Anchor, next_seq: int, hashes: dict[int, str], found: Sequence[tuple[int, str]], where: str) -> Mark:
    """The line that holds `anchor`, as a Mark (source `the head you kept`). `hashes`: the
    verified line hashes by seq (`scan(remember={anchor.seq})`); `found`: (seq, hash) of every
    line whose hash starts with `anchor.hash` (for an anchor without a seq). Raises
    `lost_tail_error` (`E_LEDGER_CORRUPT`) when the ledger does not hold it."""
    mark = Mark(anchor.seq if anchor.seq is not None else -1, anchor.hash, "the head you kept")
    action = "verify the ledger holds the head you kept"
    if anchor.seq is None:
        if found:
            seq, digest = found[-1]
            return Mark(seq, digest, mark.source)
        ends = f"which ends at seq {next_seq - 1}" if next_seq else "which holds no line"
        raise RunfoldError(
            ErrorCode.LEDGER_CORRUPT,
            f"{action} (no line of the ledger, {ends}, hashes to {anchor.hash[:16]}…: that line was lost "
            "or changed)",
            where,
            f"restore the ledger directory from a copy that holds the line with hash {anchor.hash[:16]}…, "
            f"then run `runfold verify --head {anchor.hash}`",
        )
    if anchor.seq >= next_seq:
        raise lost_tail_error(mark, next_seq, None, where, action)
    got = hashes.get(anchor.seq)
    if got is None or not got.startswith(anchor.hash):
        raise lost_tail_error(mark, next_seq, got or "?", where, action)
    return Mark(anchor.seq, got, mark.source)
