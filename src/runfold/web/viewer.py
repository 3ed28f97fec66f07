"""What the pages read: the workspace's runs (a run-summary fold kept between requests and fed
only the lines written since), one run's timeline a page at a time, and the ledger's verify
status — also for a ledger that fails verification, which is read up to its bad line.

Every request opens a fresh reader (`Workspace.open`): a reader sees the ledger as it was when it
opened, needs no lock and never writes, so a page is one consistent snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runfold.api import Workspace
from runfold.core import fold as fold_api
from runfold.core.chain import LineRefused
from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.ids import WORKSPACE_RUN, short_run_ids
from runfold.core.records import Record
from runfold.core.summary import iso_ms, summarize

SCAN_LINES = 20_000
"""The most lines of a run one filtered timeline page reads before it stops and offers to go on:
a search through a very long run is paged too."""

_CHUNK = 2_000
WARM_GAP = 50_000
"""Lines the kept run-summary fold may lag behind the ledger's end and still be read on a page
that needs one run only (feeding that many takes well under a second)."""


@dataclass(frozen=True)
class Damage:
    """The first line that fails verification: the verifier's `message`, the 1-based `line_no`,
    the `seq`, the `fault`, and the line's bytes as text (`raw`, at most 64 KiB)."""

    message: str
    line_no: int
    seq: int
    fault: str
    raw: str

    @classmethod
    def of(cls, refusal: LineRefused) -> Damage:
        raw = getattr(refusal, "raw", b"")
        return cls(refusal.display(), refusal.line_no, refusal.seq, refusal.fault.value, raw.decode("utf-8", "replace"))


@dataclass
class VerifyState:
    """The last full verification: `state` `checking` (running in the background), `ok` or
    `bad`; `lines` verified, `next_seq` the ledger's end when it started, `damage` when bad."""

    state: str = "checking"
    lines: int = 0
    next_seq: int = -1
    seconds: float = 0.0
    damage: Damage | None = None
    error: str | None = None


@dataclass
class Row:
    """One timeline row: a line's seq, time, run, kind, author and one-line summary."""

    seq: int
    t: str
    run: str
    kind: str
    who: str
    summary: str

    def to_data(self) -> dict[str, Any]:
        return {"seq": self.seq, "t": self.t, "run": self.run, "kind": self.kind, "who": self.who, "summary": self.summary}


@dataclass
class Page:
    """A page of a run's timeline: `rows`, `next_after` (the seq to continue after, None at the
    end), `scanned_to` (the last seq a filtered page read), and the `damage` met at its end."""

    rows: list[Row] = field(default_factory=list)
    next_after: int | None = None
    scanned_to: int | None = None
    damage: Damage | None = None


def row_of(rec: Record, names: dict[str, str] | None = None) -> Row:
    """The timeline row of one line (the CLI's `log` summary)."""
    env = rec.env
    return Row(env.seq, iso_ms(env.t), env.run, env.kind, env.who, summarize(env, names))


def is_damage(exc: BaseException) -> bool:
    """True for an error that means the ledger fails verification (browse up to the bad line)."""
    return isinstance(exc, LineRefused) or (
        isinstance(exc, RunfoldError) and exc.code is ErrorCode.LEDGER_CORRUPT
    )


@dataclass(frozen=True)
class WaitingCall:
    """A call waiting for approval: the `seq` of its `approval_requested`, its `call` id
    (`tool_use_id`), `tool`, approval class `cls` and the `preview` of what it would do."""

    seq: int
    call: str
    tool: str
    cls: str
    preview: str


class Viewer:
    """The read side of the pages for the workspace at `root` (see the module docstring).
    Thread-safe: the summary fold is guarded by a lock; each request opens its own reader."""

    def __init__(self, root: Path) -> None:
        self.root = Workspace.open(root).root
        self._lock = threading.Lock()
        self._folder: fold_api.RunSummaries | None = None
        self._verify = VerifyState()
        self._verify_thread: threading.Thread | None = None
        self._warming: threading.Thread | None = None
        self._warm_lock = threading.Lock()
        self._verify_lock = threading.Lock()

    @contextmanager
    def open(self) -> Iterator[Workspace]:
        """A fresh reader of the workspace, closed after the block."""
        ws = Workspace.open(self.root)
        try:
            yield ws
        finally:
            ws.close()

    # ---- the runs ------------------------------------------------------------------------

    def summaries(self, ws: Workspace) -> tuple[list[fold_api.RunSummary], Damage | None]:
        """Every run's summary, and the damage when the ledger fails verification (then the
        summaries are those of the lines before the bad one)."""
        try:
            with self._lock:
                if self._folder is None:
                    self._folder = ws.summary_folder()
                return ws.run_summaries(into=self._folder), None
        except Exception as exc:
            if not is_damage(exc):
                raise
            with self._lock:
                self._folder = None  # fed lines may sit past a line that now fails
        folder = ws.summary_folder()
        damage: Damage | None = None
        try:
            for rec in ws.readable_lines():
                folder.feed(rec)
        except LineRefused as refusal:
            damage = Damage.of(refusal)
        return folder.summaries(), damage

    def warm_summaries(self, ws: Workspace) -> tuple[list[fold_api.RunSummary], Damage | None] | None:
        """`summaries` when the fold has already read the ledger to within `WARM_GAP` lines of
        its end (cheap: a small ledger always is); else None, and the fold is started in the background, so a page that
        only needs one run does not wait for a whole large ledger to be folded."""
        folder = self._folder
        done = folder.next_seq if folder is not None else 0
        try:
            end = ws.seq_range().stop
        except Exception as exc:  # opening the ledger met the damage: its readable lines
            if not is_damage(exc):
                raise
            return self.summaries(ws)
        if done + WARM_GAP >= end:
            return self.summaries(ws)
        with self._warm_lock:  # not `_lock`: the fold holds that while it reads the ledger
            busy = self._warming is not None and self._warming.is_alive()
            if not busy:
                self._warming = threading.Thread(target=self._warm, daemon=True)
                self._warming.start()
        return None

    def _warm(self) -> None:
        try:
            with self.open() as ws:
                self.summaries(ws)
        except Exception:  # a page that needs the fold shows the error itself
            return

    def run_head(self, ws: Workspace, run: str) -> fold_api.RunSummary:
        """What the first lines of `run` say of it (task, model, lineage): its summary before
        the whole ledger is folded (status, turns and cost are not known from them)."""
        folder = fold_api.RunSummaries()
        for rec in ws.records(run=run, limit=2):
            folder.feed(rec)
        found = folder.summaries()
        return found[0] if found else fold_api.RunSummary(run=run, first_seq=-1, last_seq=-1)

    @staticmethod
    def waiting_calls(ws: Workspace, run: str, since: int = 0) -> list[WaitingCall]:
        """The calls of `run` that wait for a person's decision among its lines from seq `since`
        on: each `approval_requested` with no `approval_resolved` of the same `tool_use_id` after
        it, in seq order ([] when the run's lines fail verification). Reads only those lines."""
        waiting: dict[str, WaitingCall] = {}
        try:
            found = ws.records(run=run, kind=("approval_requested", "approval_resolved"), since=since)
        except Exception as exc:
            if not is_damage(exc):
                raise
            return []  # the ledger fails verification: nothing is decided from this page
        for rec in found:
            data = rec.env.data
            call = str(data.get("tool_use_id", ""))
            if rec.env.kind == "approval_resolved":
                waiting.pop(call, None)
            elif call:
                waiting[call] = WaitingCall(
                    rec.seq, call, str(data.get("tool", "")), str(data.get("class", "")), str(data.get("preview", ""))
                )
        return list(waiting.values())

    @staticmethod
    def names(summaries: Sequence[fold_api.RunSummary]) -> dict[str, str]:
        """Run id → its shortest unique prefix (as every listing shows runs)."""
        return short_run_ids([s.run for s in summaries])

    # ---- a run's timeline ----------------------------------------------------------------

    def timeline(
        self,
        ws: Workspace,
        run: str,
        *,
        kinds: frozenset[str],
        text: str,
        after: int,
        limit: int,
        names: dict[str, str],
    ) -> Page:
        """The lines of `run` with seq > `after`, at most `limit`, of `kinds` (all when empty)
        whose bytes hold `text` (case-insensitive; all when empty). Reads the run through the
        index a chunk at a time and at most `SCAN_LINES` lines per page."""
        needle = text.lower().encode("utf-8")
        page = Page()
        try:
            source = self.run_lines(ws, run, after + 1)
            scanned = 0
            for rec in source:
                scanned += 1
                page.scanned_to = rec.seq
                if (not kinds or rec.env.kind in kinds) and (not needle or needle in rec.raw.lower()):
                    if len(page.rows) == limit:
                        page.next_after = page.rows[-1].seq
                        break
                    page.rows.append(row_of(rec, names))
                if scanned >= SCAN_LINES and (kinds or needle):
                    page.next_after = rec.seq
                    break
        except Exception as exc:
            if not is_damage(exc):
                raise
            return self._damaged_timeline(ws, run, kinds, needle, after, limit, names)
        return page

    def run_id(self, ws: Workspace, run: str) -> str:
        """`run` (an id or prefix) resolved as `Workspace.resolve_run` does; on a ledger that
        fails verification, among the runs of its readable lines."""
        try:
            return ws.resolve_run(run)
        except Exception as exc:
            if not is_damage(exc):
                raise
        key = run.replace("-", "").lower()
        found = [s.run for s in self.summaries(ws)[0] if s.run.replace("-", "").startswith(key)]
        if len(found) == 1:
            return found[0]
        raise invalid_args(
            f"find run {run!r}", str(ws.root), "no readable run id starts with it", nearby=tuple(found[:8])
        )

    @staticmethod
    def readable_line(ws: Workspace, seq: int) -> Record | Damage:
        """The line at `seq` read from the ledger's readable lines, or the damage that ends them
        before it (for a ledger that fails verification). Raises `E_INVALID_ARGS` past its end."""
        last = -1
        try:
            for rec in ws.readable_lines():
                if rec.seq == seq:
                    return rec
                last = rec.seq
        except LineRefused as refusal:
            return Damage.of(refusal)
        raise invalid_args(f"read seq {seq}", str(ws.root), f"the ledger's readable lines end at seq {last}")

    def readable_run_lines(self, ws: Workspace, run: str, since: int) -> Iterator[Record]:
        """`run_lines`, or on a ledger that fails verification the run's lines before the bad
        one (it ends quietly there; the pages that show lines say where)."""
        next_seq = since
        try:
            for rec in self.run_lines(ws, run, since):
                yield rec
                next_seq = rec.seq + 1
            return
        except Exception as exc:
            if not is_damage(exc):
                raise
        try:
            for rec in ws.readable_lines():
                if rec.run == run and rec.seq >= next_seq:
                    yield rec
        except LineRefused:
            return

    @staticmethod
    def run_lines(ws: Workspace, run: str, since: int) -> Iterator[Record]:
        """The lines of `run` from seq `since` on, read through the index a chunk at a time."""
        while True:
            chunk = ws.records(run=run, since=since, limit=_CHUNK)
            yield from chunk
            if len(chunk) < _CHUNK:
                return
            since = chunk[-1].seq + 1

    @staticmethod
    def _damaged_timeline(
        ws: Workspace,
        run: str,
        kinds: frozenset[str],
        needle: bytes,
        after: int,
        limit: int,
        names: dict[str, str],
    ) -> Page:
        page = Page()
        try:
            for rec in ws.readable_lines():
                if rec.run != run or rec.seq <= after:
                    continue
                if (not kinds or rec.env.kind in kinds) and (not needle or needle in rec.raw.lower()):
                    if len(page.rows) == limit:
                        page.next_after = page.rows[-1].seq
                        return page
                    page.rows.append(row_of(rec, names))
        except LineRefused as refusal:
            page.damage = Damage.of(refusal)
        return page

    def run_lines_of_kind(self, ws: Workspace, run: str, kind: str) -> list[Record]:
        """Every line of `run` of one kind, read a chunk at a time (only those are kept)."""
        return [r for r in self.run_lines(ws, run, 0) if r.env.kind == kind]

    # ---- verification --------------------------------------------------------------------

    def verify_state(self, ws: Workspace) -> VerifyState:
        """The last full verification, started in the background when the ledger grew since
        (the page shows `checking` until it ends)."""
        try:
            end = ws.seq_range().stop
        except Exception as exc:
            if not is_damage(exc):
                raise
            end = -2
        with self._verify_lock:
            busy = self._verify_thread is not None and self._verify_thread.is_alive()
            if not busy and self._verify.next_seq != end:
                self._verify = VerifyState(next_seq=end)
                self._verify_thread = threading.Thread(target=self._run_verify, args=(end,), daemon=True)
                self._verify_thread.start()
            return self._verify

    def wait_verified(self, timeout: float = 300.0) -> VerifyState:
        """Wait for the background verification (tests, `--verify`)."""
        thread = self._verify_thread
        if thread is not None:
            thread.join(timeout)
        return self._verify

    def _run_verify(self, end: int) -> None:
        started = time.perf_counter()
        state = VerifyState(next_seq=end)
        try:
            with self.open() as ws:
                report = ws.verify()
            state.state, state.lines = "ok", report.lines
        except LineRefused as refusal:
            state.state, state.lines = "bad", max(refusal.line_no - 1, 0)
            state.damage = _with_raw(self.root, refusal)
        except Exception as exc:  # shown on the page, never raised into the server
            state.state, state.error = "bad", str(exc)
        state.seconds = time.perf_counter() - started
        with self._verify_lock:
            self._verify = state


def _with_raw(root: Path, refusal: LineRefused) -> Damage:
    """The damage of a full verify, with the bad line's bytes read from the readable prefix."""
    try:
        for _ in Workspace.open(root).readable_lines():
            pass
    except LineRefused as again:
        if again.line_no == refusal.line_no:
            return Damage.of(again)
    return Damage.of(refusal)


def workspace_run(run: str) -> bool:
    """True for the nil run of workspace-level lines."""
    return run == WORKSPACE_RUN
