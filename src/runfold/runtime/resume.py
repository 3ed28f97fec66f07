"""Resume (DESIGN.md §7): after a process died, close the tool calls it left without a result and
freeze the runs it left running, so no later request carries a history a provider refuses.

Runs on every writer open (`Workspace.writer()`, every run) and as `runfold resume`. The scan is
incremental: after a resume leaves the ledger clean it records the clean point (seq and line
hash) in `.runfold/resume-mark.json`, and the next open scans only the lines after it. A missing
or unreadable mark means a full scan; a mark naming a line the ledger no longer holds is refused
by the writer's open before resume runs (`runfold.store.marks`), and the mark never moves back.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from runfold.core.errors import RunfoldError
from runfold.core.fold.resume import DanglingCall, LostRun, ResumeScan, resume_drafts
from runfold.core.records import Draft, Record
from runfold.store.marks import read_resume_mark
from runfold.store.view import LedgerWriter
from runfold.tools.exec_tool import end_recorded_group

MARK_FILE = "resume-mark.json"
"""Under `.runfold/`: `{"seq": S, "hash": H}` — at seq S (line hash H) no run was open."""

Pending = Callable[[str], Sequence[Draft]]
"""`pending(run) -> drafts` to write on a lost run just before it is frozen (e.g. steers handed
over to the dead process but not yet recorded)."""


@dataclass
class ResumeReport:
    """What one resume did.

    - `closed`: dangling calls given an `E_TOOL_OUTCOME_UNKNOWN` result; `unclosable`: dangling
      calls of runs frozen earlier (their wave was dropped at the freeze; nothing written);
    - `killed`: tool_use_ids of closed calls whose recorded process group (`exec`) was still
      running and was killed (same leader start time: a recycled pid is left alone);
    - `frozen`: runs frozen `cancelled` with `cause: process_died`;
    - `written`: every line written (empty: the ledger was clean, nothing written);
    - `scanned_from`: the first seq scanned (0 for a full scan); `scanned_lines`: lines read.
    """

    closed: list[DanglingCall] = field(default_factory=list)
    unclosable: list[DanglingCall] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    frozen: list[LostRun] = field(default_factory=list)
    written: list[Record] = field(default_factory=list)
    scanned_from: int = 0
    scanned_lines: int = 0

    @property
    def wrote(self) -> bool:
        return bool(self.written)


def mark_path(ledger: LedgerWriter) -> Path:
    return ledger.layout.resume_mark_path


def _clean_from(ledger: LedgerWriter) -> int:
    """The first seq to scan: just after a valid clean mark, else 0."""
    try:
        mark = orjson.loads(mark_path(ledger).read_bytes())
        seq, digest = mark["seq"], mark["hash"]
        if isinstance(seq, int) and 0 <= seq < ledger.next_seq and ledger.record_at(seq).hash == digest:
            return seq + 1
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, RunfoldError):
        pass
    return 0


def _write_mark(ledger: LedgerWriter) -> None:
    last = ledger.next_seq - 1
    old = read_resume_mark(ledger.layout)
    if last < 0 or (old is not None and old.seq >= last):  # never moved back, nor rewritten in place
        return
    data = orjson.dumps({"seq": last, "hash": ledger.record_at(last).hash})
    path = mark_path(ledger)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:  # a cache: failing to write it only costs a full scan later
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:  # e.g. a directory in the mark's place: leave no temporary file behind
        with contextlib.suppress(OSError):
            tmp.unlink()


def resume_ledger(
    ledger: LedgerWriter, *, pending: Pending | None = None, full: bool = False
) -> ResumeReport:
    """Resume the ledger of `ledger` (an open writer): scan, write the closing lines, flush (one
    fsync), and record the clean point. Idempotent: a second call writes nothing.

    `full` scans from seq 0 even when a clean mark exists (`runfold resume` does). Every line read
    is re-verified by the ledger's reads. Raises what the ledger raises: `E_LEDGER_CORRUPT` for a
    damaged line, `E_STORAGE_FATAL` when the lines cannot be written.
    """
    start = 0 if full else _clean_from(ledger)
    scan = ResumeScan().feed_all(ledger.records(since=start))
    plan = scan.plan()
    report = ResumeReport(scanned_from=start, scanned_lines=scan.lines)
    report.unclosable = [d for d in plan.dangling if not d.closable]
    if not plan.clean:
        lost = {r.run for r in plan.lost}
        report.closed = [d for d in plan.dangling if d.closable and d.run in lost]
        report.frozen = list(plan.lost)
        extra = {r.run: list(pending(r.run)) for r in plan.lost} if pending is not None else None
        killed = frozenset(
            d.tool_use_id
            for d in report.closed
            if d.pgid is not None and end_recorded_group(d.pgid, d.pstart)
        )
        report.killed = sorted(killed)
        report.written = ledger.append(resume_drafts(plan, pending=extra, killed=killed))
    _write_mark(ledger)
    return report
