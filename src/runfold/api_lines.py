"""The part of `runfold.api.Workspace` that reads verified lines: filtered records, a line by
seq and its place in the segment files, and every readable line of a ledger `verify` refuses
(DESIGN.md §3).

`Workspace` inherits it; reading needs no lock and never loads the runtime.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runfold.core.chain import Fault, LineRefused, refuse
from runfold.core.errors import invalid_args
from runfold.core.kinds import KNOWN_KIND_NAMES
from runfold.core.records import Record
from runfold.store.bare import BareLedger, segment_first_seq
from runfold.store.view import LedgerWriter

if TYPE_CHECKING:
    from runfold.store.verify import VerifyReport


@dataclass(frozen=True, slots=True)
class LinePosition:
    """Where a line sits in the chain: `line` is its 1-based line number in the whole ledger,
    `segment` the segment file holding it, `segment_line` its 1-based line number in that file,
    `lines` the number of lines in the ledger."""

    seq: int
    line: int
    segment: Path
    segment_line: int
    lines: int


class WorkspaceLines:
    """Reading lines, for `Workspace` (see the module docstring)."""

    _root: Path
    _bare: bool

    if TYPE_CHECKING:  # what Workspace defines

        def resolve_run(self, prefix: str) -> str: ...
        def verify(self) -> VerifyReport: ...
        def _ledger(self) -> LedgerWriter | BareLedger: ...

    def records(
        self,
        run: str | None = None,
        kind: str | Iterable[str] | None = None,
        since: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Verified lines in seq order, filtered.

        `run`: a run id or unique prefix (see `resolve_run`); `kind`: one kind name or several;
        `since`: only lines with seq ≥ since (past the tail gives []); `limit`: at most this many
        lines (the first ones after the other filters). Raises `E_INVALID_ARGS` for an unknown kind name (nearby: the
        closest names), a negative `since`/`limit`, or a run prefix that is unknown/ambiguous;
        `LineRefused` when a line fails verification while reading.
        """
        kinds = self._kinds(kind)
        if since is not None and since < 0:
            raise invalid_args("filter lines", f"since {since}", "give a seq ≥ 0")
        if limit is not None and limit < 0:
            raise invalid_args("filter lines", f"limit {limit}", "give a limit ≥ 0")
        if limit == 0:
            return []
        ledger = self._ledger()
        source: Iterable[Record]
        if run is not None:
            first = limit if kinds is None else None  # read only what is kept
            source = ledger.run_records(self.resolve_run(run), first, since or 0)
        elif since is not None and since >= ledger.next_seq:
            source = ()  # past the tail: nothing yet (a filter, not an address)
        else:
            source = ledger.records(since=since or 0)
        out: list[Record] = []
        stream = iter(source)
        for record in stream:
            if since is not None and record.seq < since:
                continue
            if kinds is not None and record.env.kind not in kinds:
                continue
            out.append(record)
            if limit is not None and len(out) >= limit:
                if run is None:  # the stream stopped early: the line after proves this one's bytes
                    _check_linked(stream, record)
                break
        return out

    def seq_range(self) -> range:
        """The seqs of the lines this ledger holds, `range(first, next)`: first is 0 for a
        workspace (a lone segment file may start later); empty when it holds no line."""
        ledger = self._ledger()
        first = ledger.first_seq if isinstance(ledger, BareLedger) else 0
        return range(first, max(first, ledger.next_seq))

    def record_at(self, seq: int) -> Record:
        """The verified line at `seq`. Raises `E_INVALID_ARGS` naming the ledger's seq range when
        `seq` is outside it."""
        ledger = self._ledger()
        held = self.seq_range()
        if seq not in held:
            tail = f"seq {held.start}..{held.stop - 1}" if held else "no lines yet"
            raise invalid_args(
                f"read seq {seq}",
                str(self._root),
                f"the ledger holds {tail}; give a seq in that range",
            )
        return ledger.record_at(seq)

    def position(self, seq: int) -> LinePosition:
        """Where the line at `seq` sits: its 1-based line number in the ledger, its segment file
        and its line number in that file (a PostgreSQL store has one "segment", its table
        `runfold_lines`). Raises `E_INVALID_ARGS` like `record_at`."""
        self.record_at(seq)
        ledger = self._ledger()
        first = ledger.first_seq if isinstance(ledger, BareLedger) else 0
        starts = [(segment_first_seq(p, first), p) for p in ledger.segments()] or [
            (first, Path("runfold_lines"))
        ]
        seg_first, segment = max((s for s in starts if s[0] <= seq), key=lambda s: s[0])
        return LinePosition(
            seq=seq,
            line=seq - first + 1,
            segment=segment,
            segment_line=seq - seg_first + 1,
            lines=ledger.next_seq - first,
        )

    def _kinds(self, kind: str | Iterable[str] | None) -> frozenset[str] | None:
        if kind is None:
            return None
        names = [kind] if isinstance(kind, str) else list(kind)
        if not names:
            return None
        for name in names:
            if name not in KNOWN_KIND_NAMES:
                close = difflib.get_close_matches(name, sorted(KNOWN_KIND_NAMES), n=3, cutoff=0.5)
                hint = f"did you mean {', '.join(close)}?" if close else "see `runfold log --help` for kinds"
                raise invalid_args(
                    "filter by kind",
                    repr(name),
                    f"{name!r} is not an event kind; {hint}",
                    nearby=tuple(close),
                )
        return frozenset(names)

    def readable_lines(self) -> Iterator[Record]:
        """Every line before the first one `verify` refuses, in seq order, read straight from the
        segment files (no index, no lock); then, on a damaged ledger, raises the verifier's
        `LineRefused` (its `line_no`, `seq`, fault and next step) with the bad line's bytes (at
        most 64 KiB) in `refusal.raw`. For browsing a ledger `verify` refuses, up to the bad line
        (a torn tail is no line and ends it quietly). Two passes over the ledger; never writes."""
        from runfold.core.chain import LineChecker, LineRefused
        from runfold.store.verify import resolve_ledger

        refusal: LineRefused | None = None
        try:
            good = self.verify().lines
        except LineRefused as exc:
            refusal, good = exc, exc.line_no - 1
        segments, _lone = resolve_ledger(self._root)
        checker = LineChecker()
        line_no = 0
        for _first, path in segments:
            checker.where = str(path)
            with open(path, "rb") as f:
                for raw_nl in f:
                    line_no += 1
                    raw = raw_nl.removesuffix(b"\n")
                    if line_no > good:
                        if refusal is not None:
                            refusal.raw = raw[:65536]  # type: ignore[attr-defined]
                            raise refusal
                        return
                    env, _known = checker.check(raw, line_no)
                    yield Record(env, raw, checker.head)
        if refusal is not None:
            raise refusal


def _check_linked(stream: Iterator[Record], last: Record) -> None:
    """Read one more line of `stream` (a verified read that stopped at `last`): the shared line
    checker then proves `last`'s bytes, since the next line's prev (or, at the tail, the head)
    must be their hash. A line edited in place passes its own checks and breaks only the link
    after it; that refusal is attributed to `last`, as `verify` attributes it (DESIGN.md §3)."""
    try:
        next(stream, None)
    except LineRefused as exc:
        if exc.fault is not Fault.CHAIN_BREAK or exc.seq != last.seq + 1:
            raise
        raise refuse(
            Fault.CHAIN_BREAK,
            exc.line_no - 1,
            last.seq,
            f"its bytes no longer hash to the prev of line {exc.line_no}: this line was changed "
            "after it was written, or lines are missing after it",
            exc.subject,
        ) from None
