"""Streaming verification of ledger files, and the torn-tail rule (DESIGN.md §3).

`scan` is the one loop that reads segment bytes and feeds every line to the core `LineChecker`;
`Ledger.open` and `verify_path` both use it, so "what is a torn tail" and "which line is at
fault" have one answer. It reads in big chunks and, when no sink wants each line, hands a
chunk's lines to `LineChecker.check_fast` in one call, falling back to `check` line by line at
the first line the fast path declines (so the refusal names that line exactly).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runfold.core.canonical import Envelope, chain_hash
from runfold.core.chain import Fault, LineChecker, LineRefused, parse_envelope, refuse
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.ids import ZERO_HASH
from runfold.store.layout import RUNFOLD_DIR, Layout, list_segments, parse_segment_name
from runfold.store.marks import Anchor, Mark, check_anchor, check_marks, read_marks

CHUNK_BYTES = 4 << 20
"""Bytes read per chunk (4 MiB); the progress callback fires once per chunk."""

Progress = Callable[[int, int], None]
"""`progress(done_bytes, total_bytes)`."""
Sink = Callable[[int, int, int, str, Envelope], None]
"""`sink(segment_first_seq, offset, length, hash, envelope)` for each verified line (bytes)."""
SegmentList = Sequence[tuple[int | None, Path]]
"""(first seq from the file name or None for a lone foreign file, path), in chain order."""

_LINE_START = b'{"v":'


@dataclass
class ScanResult:
    """What a scan verified. Offsets and lengths are bytes; `end_*` is just after the last
    verified line (where an append, or a torn tail, starts)."""

    lines: int = 0
    first_seq: int | None = None
    next_seq: int = 0
    head: str = ""
    bytes: int = 0
    versions: set[int] = field(default_factory=set)
    skipped_unknown: int = 0
    torn_tail_bytes: int = 0
    end_segment: int = -1
    end_offset: int = 0
    unterminated: bool = False
    """True when the last verified line is complete but lacks its `\n` (a writer adds it)."""
    garbage_tail: bool = False
    """True when `torn_tail_bytes` are a garbage tail that ends with a newline (not a torn
    append: only `scan(garbage_tail=True)` reports one, for `runfold repair --quarantine`)."""
    hashes: dict[int, str] = field(default_factory=dict)
    """The chain hash of each line whose seq the scan was asked to `remember` and verified."""


def is_torn_tail(tail: bytes) -> bool:
    """True when `tail` (the bytes after the last newline of the ledger) holds no valid line.

    A torn write leaves only a prefix of the last line, so a torn tail never holds a newline;
    `scan` only asks about such bytes. "Valid line" means bytes that parse as a ledger
    envelope: any later newline-separated line, or any `{"v":` after the first byte (a line
    whose newline was damaged) up to the next newline. Any such line means the damage is
    followed by history, which must be refused, never cut.
    """
    parts = tail.split(b"\n")
    for later in parts[1:]:
        if later and parse_envelope(later) is not None:
            return False
    p = tail.find(_LINE_START, 1)
    while p != -1:
        end = tail.find(b"\n", p)
        if parse_envelope(tail[p : end if end != -1 else len(tail)]) is not None:
            return False
        p = tail.find(_LINE_START, p + 1)
    return True


def _read_line_at(segments: SegmentList, si: int, offset: int) -> bytes | None:
    """The bytes of the line starting at `offset` in segment `si` (or the next non-empty
    segment when that is the end of `si`), without its newline; None at the end of the ledger."""
    while si < len(segments):
        with open(segments[si][1], "rb") as f:
            f.seek(offset)
            out = bytearray()
            while True:
                block = f.read(1 << 16)
                if not block:
                    break
                nl = block.find(b"\n")
                if nl != -1:
                    out += block[:nl]
                    return bytes(out)
                out += block
            if out:
                return bytes(out)
        si, offset = si + 1, 0
    return None


class _Torn(Exception):
    """Internal: the scan reached a torn tail of `size` bytes at `offset` of the last segment
    (`newline`: a garbage tail that ends with a newline)."""

    def __init__(self, offset: int, size: int, newline: bool = False) -> None:
        self.offset = offset
        self.size = size
        self.newline = newline


def garbage_tail_size(path: Path, offset: int) -> int | None:
    """The size of the bytes from `offset` to the end of the segment `path` when they hold no
    ledger line at all (a garbage tail: `is_torn_tail` of every byte, the first line included),
    else None. Reads at most 64 MiB (a segment's size); a longer tail answers None."""
    try:
        size = os.path.getsize(path) - offset
        if size <= 0 or size > 64 << 20:
            return None
        with open(path, "rb") as f:
            f.seek(offset)
            tail = f.read(size)
    except OSError:
        return None
    first = tail.split(b"\n", 1)[0]
    if parse_envelope(first) is not None or not is_torn_tail(tail):
        return None
    return len(tail)


def _garbage_refusal(exc: LineRefused, size: int, offset: int, path: Path) -> LineRefused:
    """`exc` (the refusal of the first garbage line) with the recovery a garbage tail has."""
    return LineRefused(
        code=exc.code,
        action=f"{exc.action} (the {size} byte(s) from offset {offset} to the end of {path.name} hold "
        "no ledger line and end with a newline: not a torn append, which the next writer would cut)",
        subject=exc.subject,
        recovery="in a workspace, `runfold repair --quarantine` moves those bytes into "
        ".runfold/quarantine/ (never deleting them) and records one log_truncated line; or restore "
        "the ledger from a copy",
        fault=exc.fault,
        line_no=exc.line_no,
        seq=exc.seq,
        detail=exc.detail,
    )


def scan(
    segments: SegmentList,
    checker: LineChecker,
    *,
    start_segment: int = 0,
    start_offset: int = 0,
    line_no: int = 1,
    sink: Sink | None = None,
    sink_from: int = 0,
    progress: Progress | None = None,
    check_names: bool = True,
    remember: frozenset[int] = frozenset(),
    garbage_tail: bool = False,
) -> ScanResult:
    """Verify every line from (`start_segment`, `start_offset`) to the end of the ledger.

    `checker` carries the chain state (expected seq, head) and is advanced; `line_no` is the
    1-based number of the first line read. `sink` receives each verified line whose seq is at
    least `sink_from`. A torn tail (DESIGN.md §3) in the last segment stops the scan and is
    reported in `torn_tail_bytes`; it is never cut here.

    Only bytes after the last newline of the last segment can be a torn tail (a torn write
    leaves a prefix of the last line); a newline-terminated line that fails is always refused.
    A complete last line that verifies but lacks its `\n` is counted as verified and flagged
    in `unterminated` (its `end_offset` is just after its last byte).

    Raises `LineRefused` (core.chain) for the first bad line; a chain break whose own seq is the
    expected one and whose next line links to it is attributed to the line before it (that
    line's bytes were changed). Raises `E_LEDGER_CORRUPT` when a segment's file name does not
    match the seq it continues at, and when a scan from the start of the ledger finds no
    verified line before a torn tail (not a ledger, or its only line was torn).

    `remember`: seqs whose line hash the result keeps in `hashes` (the lines marks outside the
    ledger name, `runfold.store.marks`), when the scan verifies them.

    A garbage tail (`garbage_tail_size`: newline-terminated bytes holding no line, after the
    last valid line of the last segment) is refused with the recovery `runfold repair
    --quarantine`; with `garbage_tail=True` it is reported like a torn tail instead
    (`torn_tail_bytes`, and `garbage_tail` set), for the repair to move it.
    """
    result = ScanResult(next_seq=checker.expected_seq, head=checker.head, first_seq=None)
    result.end_segment = start_segment
    result.end_offset = start_offset
    total = 0
    for si in range(start_segment, len(segments)):
        try:
            total += os.path.getsize(segments[si][1])
        except OSError:
            pass
    total -= start_offset
    done = 0
    start_seq = checker.expected_seq
    check = checker.check
    check_fast = checker.check_fast
    versions = result.versions
    skipped = 0
    nbytes = 0
    count = 0
    wanted = sorted(s for s in remember if s >= start_seq)
    hashes = result.hashes
    try:
        for si in range(start_segment, len(segments)):
            name_seq, path = segments[si]
            last = si == len(segments) - 1
            pos = start_offset if si == start_segment else 0
            if check_names and name_seq is not None and pos == 0 and name_seq != checker.expected_seq:
                raise RunfoldError(
                    ErrorCode.LEDGER_CORRUPT,
                    f"continue the chain at seq {checker.expected_seq} in segment {path.name} "
                    f"(its name says seq {name_seq})",
                    str(path),
                    "segments were renamed, removed or added by hand; restore the ledger directory from a copy",
                )
            where = str(path)
            checker.where = where
            with open(path, "rb") as f:
                f.seek(pos)
                rest = b""
                while True:
                    chunk = f.read(CHUNK_BYTES)
                    if not chunk:
                        break
                    done += len(chunk)
                    buf = rest + chunk if rest else chunk
                    parts = buf.split(b"\n")
                    rest = parts.pop()
                    i = 0
                    n_parts = len(parts)
                    while i < n_parts:
                        if sink is None:
                            if wanted:  # stop the fast path right after the next remembered line
                                room = wanted[0] - checker.expected_seq + 1
                                k = check_fast(parts[: i + room] if room > 0 else parts[:i], i, versions)
                                while wanted and wanted[0] < checker.expected_seq:
                                    if wanted[0] == checker.expected_seq - 1:
                                        hashes[wanted[0]] = checker.head
                                    wanted.pop(0)
                            else:
                                k = check_fast(parts, i, versions)
                            if k:
                                n = sum(map(len, parts[i : i + k])) + k
                                pos += n
                                nbytes += n
                                line_no += k
                                count += k
                                i += k
                                if i == n_parts:
                                    break
                        raw = parts[i]
                        try:
                            env, known = check(raw, line_no)
                        except LineRefused as exc:
                            if count == 0 and si == 0 and pos == 0 and _holds_no_line(segments):
                                raise _no_line_found(segments, total) from None
                            if exc.fault is Fault.NOT_A_LINE and last and checker.expected_seq > 0:
                                size = garbage_tail_size(path, pos)
                                if size is not None:
                                    if garbage_tail:
                                        raise _Torn(pos, size, newline=True) from None
                                    raise _garbage_refusal(exc, size, pos, path) from None
                            _on_refusal(exc, segments, si, pos, raw, line_no, checker)
                            raise AssertionError("unreachable") from exc
                        n = len(raw)
                        if not known:
                            skipped += 1
                        versions.add(env.v)
                        if wanted and wanted[0] == env.seq:
                            hashes[wanted.pop(0)] = checker.head
                        if sink is not None and env.seq >= sink_from:
                            sink(name_seq if name_seq is not None else 0, pos, n, checker.head, env)
                        pos += n + 1
                        nbytes += n + 1
                        line_no += 1
                        count += 1
                        i += 1
                    if progress is not None:
                        progress(done, total)
                result.end_segment = si
                result.end_offset = pos
                if rest:
                    env, known = _on_unterminated(rest, si, pos, line_no, checker, last)
                    n = len(rest)
                    if not known:
                        skipped += 1
                    versions.add(env.v)
                    if wanted and wanted[0] == env.seq:
                        hashes[wanted.pop(0)] = checker.head
                    if sink is not None and env.seq >= sink_from:
                        sink(name_seq if name_seq is not None else 0, pos, n, checker.head, env)
                    result.end_offset = pos + n
                    result.unterminated = True
                    nbytes += n
                    line_no += 1
                    count += 1
    except _Torn as torn:
        if count == 0 and start_segment == 0 and start_offset == 0:
            raise _no_line_found(segments, torn.size) from None
        result.torn_tail_bytes = torn.size
        result.garbage_tail = torn.newline
        result.end_offset = torn.offset
    result.lines = count
    result.bytes = nbytes
    result.skipped_unknown = skipped
    result.next_seq = checker.expected_seq
    result.head = checker.head
    result.first_seq = start_seq if count else None
    return result


def _on_refusal(
    exc: LineRefused,
    segments: SegmentList,
    si: int,
    pos: int,
    raw: bytes,
    line_no: int,
    checker: LineChecker,
) -> None:
    """Decide what a refused newline-terminated line means: a changed previous line (re-raise
    attributed to it), a duplicated or reordered line, or this line's own fault (re-raise as
    is). Never a torn tail: a torn write leaves no newline after the bytes it tore."""
    if exc.fault is Fault.CHAIN_BREAK and exc.seq != checker.expected_seq:
        raise refuse(
            Fault.SEQ_GAP,
            line_no,
            exc.seq,
            f"found seq {exc.seq}, expected {checker.expected_seq}, and its prev does not link to "
            "the line before it: a duplicated or reordered line",
            checker.where,
        ) from None
    if exc.fault is Fault.CHAIN_BREAK and line_no > 1:
        following = _read_line_at(segments, si, pos + len(raw) + 1)
        env = parse_envelope(following) if following is not None else None
        if env is not None and env.prev == chain_hash(raw):
            raise refuse(
                Fault.CHAIN_BREAK,
                line_no - 1,
                checker.expected_seq - 1,
                f"its bytes no longer hash to the prev of line {line_no}, which is intact (line "
                f"{line_no + 1} links to it): this line was changed after it was written, or lines "
                "are missing after it",
                checker.where,
            ) from None
    raise exc


def _holds_no_line(segments: SegmentList) -> bool:
    """True when the ledger is one segment in which no bytes parse as a ledger line (a foreign
    file: binary, TOML, SQLite, or a ledger re-encoded as a whole); reads that one file when it
    is at most one segment's size (64 MiB), else answers False (the plain refusal of line 1)."""
    if len(segments) != 1 or os.path.getsize(segments[0][1]) > 64 << 20:
        return False
    with open(segments[0][1], "rb") as f:
        data = f.read()
    return parse_envelope(data.split(b"\n", 1)[0]) is None and is_torn_tail(data)


def _workspace_of(segment: Path) -> Path | None:
    """The workspace whose `.runfold/ledger/` holds `segment`, else None."""
    ledger_dir = segment.parent
    return ledger_dir.parent.parent if ledger_dir.parent.name == RUNFOLD_DIR else None


def _redo_init(ws: Path) -> str:
    return f"if `runfold init` was interrupted, remove {ws / RUNFOLD_DIR} and run `runfold init` again"


def _no_line_found(segments: SegmentList, size: int) -> RunfoldError:
    path = segments[0][1]
    ws = _workspace_of(path)
    redo = _redo_init(ws) if ws is not None else "if this was meant to be a ledger, restore it from a copy"
    return RunfoldError(
        ErrorCode.LEDGER_CORRUPT,
        f"find a ledger line (no ledger line was found: {size} byte(s) that do not parse as a line)",
        str(path),
        f"this is not a runfold ledger, or its only line was torn; {redo} (nothing was cut)",
    )


def no_lines_error(
    path: Path, segments: SegmentList, lone: bool, action: str = "verify a ledger"
) -> RunfoldError:
    """The refusal of a `path` whose segment files hold 0 bytes: no line at all, so not a
    ledger (every ledger starts with line 0). An empty last segment after earlier ones (a
    roll-over just before a crash) is not this case: those earlier lines are verified.

    `E_LEDGER_CORRUPT` (exit 1, like every failed verification) naming `path`, what was found
    and what to verify instead.
    """
    found = "an empty file" if lone else f"{len(segments)} empty segment file(s)"
    ws = _workspace_of(segments[0][1])
    first_seq = segments[0][0]
    if ws is not None and not lone:
        then = f"restore the ledger directory from a copy; {_redo_init(ws)} (nothing was changed)"
    elif lone and first_seq:
        then = (
            f"an empty segment named after seq {first_seq} is the newest of a ledger, created at "
            f"a roll-over: verify its whole ledger (`runfold verify {segments[0][1].parent}`)"
        )
    else:
        then = (
            "point verify at a workspace (`runfold verify -w DIR`) or a ledger directory "
            "(`runfold verify DIR/.runfold/ledger`); `runfold init -w DIR` creates a workspace"
        )
    return RunfoldError(
        ErrorCode.LEDGER_CORRUPT,
        f"{action} (found {found}: 0 bytes, no line; a ledger holds at least its line 0)",
        str(path),
        then,
    )


def _on_unterminated(
    rest: bytes,
    si: int,
    pos: int,
    line_no: int,
    checker: LineChecker,
    last: bool,
) -> tuple[Envelope, bool]:
    """Bytes after the last newline of a segment: a torn tail (raise _Torn) when it is the
    last segment and they parse as no line; a complete line missing only its `\n` is checked
    by `checker` (advancing it) and returned as (envelope, known); otherwise the refusal."""
    if not last:
        raise refuse(
            Fault.NOT_A_LINE,
            line_no,
            checker.expected_seq,
            f"segment ends with {len(rest)} bytes and no newline, but later segments follow",
            checker.where,
        )
    if parse_envelope(rest) is None:
        if is_torn_tail(rest):
            raise _Torn(pos, len(rest))
        raise refuse(
            Fault.NOT_A_LINE,
            line_no,
            checker.expected_seq,
            "the bytes do not parse as a ledger line",
            checker.where,
        )
    # A complete line without its newline (the write stopped just before "\n", or the file was
    # cut by one byte): it parses, so it is not torn. Kept when it verifies; refused otherwise.
    return checker.check(rest, line_no)


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of `verify_path`.

    `lines` verified lines; `first_seq`/`last_seq` their seq range (None when there are none);
    `head` BLAKE3 of the last verified line (64 zeros when none); `bytes` verified bytes incl.
    newlines; `seconds` wall time; `versions` format versions seen; `segments` files read;
    `torn_tail_bytes` unparseable trailing bytes followed by no line (reported, never cut);
    `skipped_unknown` lines of unknown kinds carried with `ig:true`; `start_note` explains a
    verification that started mid-chain (a lone segment not starting at seq 0), else "";
    `unterminated` True when the last line verifies but lacks its `\n` (the next writer adds it).
    """

    path: str
    lines: int
    first_seq: int | None
    last_seq: int | None
    head: str
    bytes: int
    seconds: float
    versions: frozenset[int]
    segments: int
    torn_tail_bytes: int
    skipped_unknown: int
    start_note: str = ""
    unterminated: bool = False
    marks: tuple[Mark, ...] = ()
    """The marks of the workspace (`runfold.store.marks`) the ledger was found to hold."""
    anchor: Mark | None = None
    """The line holding the head the user kept (`verify_path(anchor=...)`), else None."""

    @property
    def mb_per_s(self) -> float:
        """Throughput in MB/s (10^6 bytes per second); 0.0 when nothing was timed."""
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def check_segment_dir(segments: SegmentList, ledger_dir: Path, action: str) -> None:
    """Refuse a ledger directory that cannot be a whole ledger (DESIGN.md §3 "Storage").

    A workspace always holds at least its first segment (with `workspace_initialized`), and a
    whole ledger starts at seq 0. Raises `E_LEDGER_CORRUPT` naming `ledger_dir` when
    `segments` is empty or its first segment's name is not seq 0; `action` says what failed.
    """
    if not segments:
        raise RunfoldError(
            ErrorCode.LEDGER_CORRUPT,
            f"{action} (the ledger directory holds no segment; a workspace always has at least "
            "its first segment, ledger-00000000000000000000.jsonl)",
            str(ledger_dir),
            "the segments were deleted; restore the ledger directory from a copy (runfold starts "
            "no new chain over a lost one)",
        )
    first_seq, first = segments[0]
    if first_seq != 0:
        raise RunfoldError(
            ErrorCode.LEDGER_CORRUPT,
            f"{action} (its first segment {first.name} does not start at seq 0)",
            str(ledger_dir),
            "restore the missing segments from a copy; `runfold verify FILE` checks a lone segment",
        )


def _ledger_dir_of(p: Path) -> Path:
    for ledger_dir in (p / RUNFOLD_DIR / "ledger", p / "ledger"):
        if ledger_dir.is_dir():
            return ledger_dir
    return p


def resolve_ledger(path: Path) -> tuple[list[tuple[int | None, Path]], bool]:
    """The segments `path` names and whether it is a lone file.

    `path` is a workspace dir, its `.runfold` dir, a ledger dir or one segment file.
    Raises `E_PATH_NOT_FOUND` when it is none of these.
    """
    p = Path(path)
    if p.is_file():
        return [(parse_segment_name(p.name), p)], True
    if p.is_dir():
        for ledger_dir in (p / RUNFOLD_DIR / "ledger", p / "ledger", p):
            if ledger_dir.is_dir() and (
                list_segments(ledger_dir)
                or ledger_dir.name == "ledger"
                or ledger_dir == p / RUNFOLD_DIR / "ledger"
            ):
                return [(s, f) for s, f in list_segments(ledger_dir)], False
    raise RunfoldError(
        ErrorCode.PATH_NOT_FOUND,
        "find a ledger to verify",
        str(path),
        "give a workspace directory, its .runfold or ledger directory, or one ledger-*.jsonl file",
    )


def verify_path(path: Path, progress: Progress | None = None, anchor: Anchor | None = None) -> VerifyReport:
    """Verify a ledger read-only (DESIGN.md §3 "Verification of a line").

    `path` is a workspace dir, a `.runfold` dir, a ledger dir or one segment file. A lone
    segment whose first line is not seq 0 starts the checker at that line's seq and prev, and
    says so in `start_note`; a directory must start at seq 0, like every other reader.
    `progress(done_bytes, total_bytes)` is called once per 4 MiB chunk.

    In a workspace the marks it recorded outside the ledger (`runfold.store.marks`, read before
    the scan) must name lines the ledger still holds; `anchor` (a head the user kept, from
    `runfold head`) must be a line of the ledger too. Else `E_LEDGER_CORRUPT` says what was
    recorded, what was found and what to do (`lost_tail_error`).

    Raises `LineRefused` on the first bad line (1-based line number across the whole ledger,
    seq, fault, next step); `E_LEDGER_CORRUPT` for a misnamed segment, a ledger directory
    holding no segment or whose first segment does not start at seq 0, for bytes holding
    no ledger line at all (only a torn tail), and for segments holding 0 bytes in total (an
    empty file: no line, not a ledger); `E_PATH_NOT_FOUND` when `path` names no ledger.
    Never writes.
    """
    started = time.perf_counter()
    segments, lone = resolve_ledger(Path(path))
    checker = LineChecker()
    note = ""
    if not lone:
        check_segment_dir(segments, _ledger_dir_of(Path(path)), "verify the ledger")
    else:
        first = _read_line_at(segments, 0, 0)
        env = parse_envelope(first) if first is not None else None
        # a later segment starts mid-chain; a first line claiming seq > 0 after the zero hash
        # (which only seq 0 follows) is damage in that line, so it is checked from seq 0
        if env is not None and env.seq != 0 and env.prev != ZERO_HASH:
            checker = LineChecker(env.seq, env.prev)
            note = (
                f"this segment starts at seq {env.seq}: the chain was checked from its first line's "
                "prev, not from seq 0"
            )
    ws = _workspace_of(segments[0][1]) if not lone else None
    marks = read_marks(Layout(ws)) if ws is not None else []
    where = str(segments[0][1].parent)
    if all(os.path.getsize(f) == 0 for _, f in segments):  # torn-only bytes: refused by scan
        check_marks(marks, 0, {}, where, "verify the ledger")
        raise no_lines_error(Path(path), segments, lone)
    wanted = {m.seq for m in marks} | ({anchor.seq} if anchor is not None and anchor.seq is not None else set())
    found: list[tuple[int, str]] = []
    sink: Sink | None = None
    if anchor is not None and anchor.seq is None:
        prefix = anchor.hash

        def sink(_seg: int, _off: int, _len: int, digest: str, env: Envelope) -> None:
            if digest.startswith(prefix):
                found.append((env.seq, digest))

    res = scan(segments, checker, progress=progress, check_names=True, remember=frozenset(wanted), sink=sink)
    check_marks(marks, res.next_seq, res.hashes, where, "verify the ledger")
    held = check_anchor(anchor, res.next_seq, res.hashes, found, where) if anchor is not None else None
    return VerifyReport(
        path=str(path),
        lines=res.lines,
        first_seq=res.first_seq,
        last_seq=res.next_seq - 1 if res.lines else None,
        head=res.head,
        bytes=res.bytes,
        seconds=time.perf_counter() - started,
        versions=frozenset(res.versions),
        segments=len(segments),
        torn_tail_bytes=res.torn_tail_bytes,
        skipped_unknown=res.skipped_unknown,
        start_note=note,
        unterminated=res.unterminated,
        marks=tuple(marks),
        anchor=held,
    )
