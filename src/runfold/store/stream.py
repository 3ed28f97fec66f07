"""Streaming verified lines from a known line to the end of a ledger view (DESIGN.md §3).

`Ledger.records` finds where seq `since` starts through the index and hands the rest to
`stream_lines`, which reads the segments in big chunks and checks every line with the one
`LineChecker`, so a long read costs one pass and no index lookups.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from runfold.core.chain import LineChecker
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.records import Record
from runfold.store.verify import CHUNK_BYTES


def stream_lines(
    segments: Sequence[tuple[int, Path]],
    off: int,
    since: int,
    end: int,
    prev: str,
    head: str,
    ledger_dir: Path,
) -> Iterator[Record]:
    """The verified lines of seqs `since`..`end - 1`, reading from byte `off` of `segments[0]`
    on; `prev` is the hash of line `since - 1`, `head` the hash the last line must have.

    Raises `LineRefused` for a line that fails its check, `E_LEDGER_CORRUPT` naming
    `ledger_dir` when the files end early or the last line is not `head` (changed on disk).
    """
    checker = LineChecker(since, prev)
    seq = since
    for _seg, path in segments:
        checker.where = str(path)
        with open(path, "rb") as f:
            f.seek(off)
            rest = b""
            while seq < end:
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    break
                buf = rest + chunk if rest else chunk
                parts = buf.split(b"\n")
                rest = parts.pop()
                for raw in parts:
                    env, _ = checker.check(raw, seq + 1)
                    yield Record(env, raw, checker.head)
                    seq += 1
                    if seq == end:
                        break
            if rest and seq == end - 1:  # the last line, missing only its newline
                env, _ = checker.check(rest, seq + 1)
                yield Record(env, rest, checker.head)
                seq += 1
        off = 0
        if seq == end:
            break
    if seq != end or checker.head != head:
        raise RunfoldError(
            ErrorCode.LEDGER_CORRUPT,
            f"read lines up to seq {end - 1} (read {seq - since}, head {checker.head[:16]}…)",
            str(ledger_dir),
            "the ledger was changed on disk since it was opened; run `runfold verify` and restore it from a copy",
        )
