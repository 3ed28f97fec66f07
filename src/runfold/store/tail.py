"""Bytes at the ledger's tail that are not the writer's: a garbage tail moved into
`.runfold/quarantine/`, and the refusal of a segment another process changed (DESIGN.md §3).

Bytes after the last valid line that end with a newline are not a torn append, so no writer
cuts them on its own. `runfold repair --quarantine` moves them: they are copied durably into a
quarantine file first, and only then does the writer replace them with one `log_truncated`
line naming their size, hash and new place. Nothing is ever deleted, and a writer never writes
over bytes it did not write.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import blake3

from runfold.core.chain import LineChecker
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.store.durable import fsync_dir, replace_durably
from runfold.store.layout import Layout, list_segments
from runfold.store.marks import check_marks, read_marks
from runfold.store.verify import check_segment_dir, no_lines_error, scan


@dataclass(frozen=True)
class Quarantined:
    """Bytes moved out of a segment: `size` bytes whose BLAKE3 is `hash` (`b3-<hex64>`), taken
    from `offset` of `segment` (its file name), now in `quarantine` (a path relative to
    `.runfold/`)."""

    size: int
    hash: str
    segment: str
    offset: int
    quarantine: str

    def fields(self) -> dict[str, object]:
        """The `log_truncated` fields that say where the bytes went (besides `dropped_bytes`)."""
        return {"dropped_hash": self.hash, "quarantine": self.quarantine, "segment": self.segment, "offset": self.offset}


def quarantine_bytes(layout: Layout, segment: Path, offset: int) -> Quarantined:
    """Copy the bytes from `offset` to the end of `segment` into
    `.runfold/quarantine/<segment name>.at-<offset>.<first 16 hex of their BLAKE3>.bin`, durably
    (the file and the directory fsynced) before anything cuts them. Idempotent: the same bytes
    get the same name. Raises `E_STORAGE_FATAL` naming the path when the copy fails (nothing is
    cut then)."""
    target = layout.quarantine_dir
    try:
        with open(segment, "rb") as f:
            f.seek(offset)
            data = f.read()
        digest = blake3.blake3(data).hexdigest()
        path = target / f"{segment.name}.at-{offset}.{digest[:16]}.bin"
        if not target.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            fsync_dir(layout.root)
        replace_durably(path, data, mode=0o600)
    except OSError as exc:
        raise RunfoldError(
            ErrorCode.STORAGE_FATAL,
            f"copy the {os.path.getsize(segment) - offset if segment.exists() else '?'} byte(s) after the "
            f"last valid line into the quarantine ({exc})",
            str(target),
            "free disk space or fix the permissions of that directory, then run `runfold repair "
            "--quarantine` again; nothing was cut",
        ) from exc
    return Quarantined(len(data), f"b3-{digest}", segment.name, offset, str(path.relative_to(layout.root)))


def changed_under_writer(path: Path, expected: int, end: int, next_seq: int) -> RunfoldError:
    """The refusal of a writer whose last segment `path` is `end` bytes instead of the `expected`
    it left (another process appended to it, or cut it): `E_LEDGER_CORRUPT` naming the segment,
    the offset and what to do; the writer wrote nothing over those bytes."""
    if end > expected:
        what = f"another process appended {end - expected} byte(s) to it at offset {expected}"
        then = (
            "`runfold verify` then names those bytes; when they are not ledger lines, `runfold repair "
            "--quarantine` moves them aside"
        )
    else:
        what = f"another process cut it from {expected} to {end} bytes"
        then = "restore the ledger directory from a copy, then run `runfold verify`"
    return RunfoldError(
        ErrorCode.LEDGER_CORRUPT,
        f"append a batch at seq {next_seq} ({what}; nothing was written over it)",
        str(path),
        f"stop the other process (only runfold may write the ledger, one writer at a time); {then}; "
        "this writer refuses further appends",
    )


@dataclass(frozen=True)
class GarbageTail:
    """Bytes after the last valid line that a repair would move: `size` bytes at `offset` of
    `segment`, after line `after_seq`; `newline` False for a torn append (which every writer
    cuts on open, dropping it) and True for a garbage tail (refused until repaired)."""

    segment: Path
    offset: int
    size: int
    after_seq: int
    newline: bool


def find_garbage_tail(layout: Layout) -> GarbageTail | None:
    """Verify the workspace's ledger read-only and return the bytes after its last valid line
    that are no ledger line (a torn append or a garbage tail), or None when there are none.
    Raises what `scan` raises for any other damage (a repair moves only a tail), and
    `E_LEDGER_CORRUPT` when the ledger holds no segment, only empty ones, or not the lines its
    marks name (`runfold.store.marks`: a lost tail is restored from a copy, never repaired)."""
    action = "look for bytes to repair"
    marks = read_marks(layout)
    segments = list_segments(layout.ledger_dir)
    check_segment_dir(segments, layout.ledger_dir, action)
    if all(os.path.getsize(p) == 0 for _, p in segments):
        check_marks(marks, 0, {}, str(layout.ledger_dir), action)
        raise no_lines_error(layout.ledger_dir, segments, False, action)
    res = scan(segments, LineChecker(), garbage_tail=True, remember=frozenset(m.seq for m in marks))
    check_marks(marks, res.next_seq, res.hashes, str(layout.ledger_dir), action)
    if not res.torn_tail_bytes:
        return None
    return GarbageTail(
        Path(segments[-1][1]), res.end_offset, res.torn_tail_bytes, res.next_seq - 1, res.garbage_tail
    )
