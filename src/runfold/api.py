"""The public Python entry point of runfold: `Workspace` (DESIGN.md §2, §3, §13).

A `Workspace` is one directory with one ledger. It opens the ledger read-only for queries
(records, runs, verify, folds) and hands out the single writer through `with ws.writer() as
ledger:`; running agents is its part in `runfold.api_runs`. The CLI is built on this class only.
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runfold.api_lines import LinePosition, WorkspaceLines
from runfold.api_runs import WorkspaceRuns
from runfold.api_store import WorkspaceStore
from runfold.core import fold as fold_api
from runfold.core.errors import invalid_args
from runfold.core.ids import WORKSPACE_RUN, run_prefix_key, runs_with_prefix
from runfold.core.records import Record
from runfold.store.backend import (
    create_ledger,
    join_or_create,
    open_ledger,
    parse_store_url,
    store_setting,
    writer_alive,
)
from runfold.store.bare import BareLedger, is_bare_ledger
from runfold.store.cas import Cas
from runfold.store.layout import Layout, find_workspace
from runfold.store.marks import parse_anchor
from runfold.store.verify import Progress, VerifyReport, verify_path
from runfold.store.view import LedgerWriter

if TYPE_CHECKING:
    from runfold.runtime.config import WorkspaceConfig, require_key
    from runfold.runtime.control import ControlHub, ControlReceipt
    from runfold.runtime.cost import CostReport
    from runfold.runtime.executor import RunOutcome
    from runfold.runtime.importing import ImportReport
    from runfold.runtime.prefix import ConversationView
    from runfold.runtime.replay import ReplayReport
    from runfold.runtime.resume import ResumeReport

__all__ = [
    "ControlReceipt",
    "ConversationView",
    "CostReport",
    "ImportReport",
    "LinePosition",
    "ReplayReport",
    "ResumeReport",
    "RunOutcome",
    "VerifyReport",
    "Workspace",
    "WorkspaceConfig",
    "require_key",
    "verify",
]

_LAZY: dict[str, str] = {
    "ControlReceipt": "runfold.runtime.control",
    "ConversationView": "runfold.runtime.prefix",
    "ImportReport": "runfold.runtime.importing",
    "CostReport": "runfold.runtime.cost",
    "ReplayReport": "runfold.runtime.replay",
    "ResumeReport": "runfold.runtime.resume",
    "RunOutcome": "runfold.runtime.executor",
    "WorkspaceConfig": "runfold.runtime.config",
    "require_key": "runfold.runtime.config",
}
"""Names this module re-exports from the runtime, imported on first use (reading a ledger never
loads the runtime or the providers)."""


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        if name in _LAZY:
            return getattr(importlib.import_module(_LAZY[name]), name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_NEARBY_MAX = 8



def verify(path: Path, progress: Progress | None = None, head: str | None = None) -> VerifyReport:
    """Verify a workspace, a ledger directory or one segment file at `path` (DESIGN.md §3).

    In a workspace, the ledger must still hold the lines the workspace's marks name (the head
    mark and the resume mark): a ledger that lost its newest lines, or whose last line was
    changed, is refused. `head` (`HASH` or `SEQ:HASH` as `runfold head` printed it, kept outside
    the workspace) must be a line of the ledger too; `report.anchor` names it.

    Read-only. Returns the report (lines, seq range, head, bytes, seconds, format versions...).
    Raises `LineRefused` (a `RunfoldError`, code E_LEDGER_CORRUPT or E_LOG_VERSION_UNSUPPORTED)
    at the first bad line, naming its 1-based line number, seq and fault; E_LEDGER_CORRUPT when
    `path` holds no line at all (an empty file or only empty segments: not a ledger);
    `E_PATH_NOT_FOUND` when `path` does not exist; E_LEDGER_CORRUPT naming what was recorded and
    what was found when a mark or `head` names a line the ledger does not hold; E_INVALID_ARGS
    for a `head` that is not `HASH` or `SEQ:HASH`. A workspace whose settings name a PostgreSQL
    store is verified from the server (`runfold.store.pg_tools.verify_store`).
    """
    anchor = parse_anchor(head) if head is not None else None
    url = store_setting(Path(path)) if (Path(path) / ".runfold").is_dir() else None
    if url is not None:
        from runfold.store.pg_tools import verify_store

        if anchor is not None:
            raise invalid_args(
                "verify the ledger against a head",
                str(path),
                "a PostgreSQL store keeps its head in the database: verify without --head",
            )
        return verify_store(url, progress=progress)
    return verify_path(path, progress=progress, anchor=anchor)


class Workspace(WorkspaceLines, WorkspaceStore, WorkspaceRuns):
    """One workspace: a directory holding `.runfold/` with one ledger (DESIGN.md §2–§3).

    Open with `Workspace.open()` (discovery like git) or create with `Workspace.init(path)`.
    Readers need no lock; `writer()` takes the one cross-process writer lock.
    """

    def __init__(self, root: Path, *, bare: bool = False) -> None:
        self._root = root
        self._bare = bare
        self._reader: LedgerWriter | BareLedger | None = None
        self._run_ledger: LedgerWriter | None = None
        self._writer_users = 0
        self._hub: ControlHub | None = None  # while runs are driven (see `shared_writer`)
        self.last_resume: ResumeReport | None = None
        """What the resume of the last writer open did (None before any)."""

    # ---- opening -------------------------------------------------------------------------

    @classmethod
    def init(cls, path: Path, store: str | None = None) -> Workspace:
        """Create `path/.runfold/`, write the `workspace_initialized` line (seq 0) and the
        commented default `.runfold/config.toml` (`runfold.runtime.config.DEFAULT_CONFIG_TOML`).

        `store` (a `postgresql://…` URL, DESIGN.md §3) keeps the ledger in PostgreSQL: the
        config names it (`store = "…"`) and seq 0 is written there; a store workspace that
        already holds lines is joined (nothing is written), so several machines share one
        ledger. `path` is created when missing. Raises `E_INVALID_ARGS` when `path` already
        holds a workspace (nothing is changed) or is a file, `E_CONFIG_INVALID` for a bad URL or
        a missing `postgres` extra, `E_STORAGE_FATAL` when the server cannot be reached (the new
        `.runfold/` is removed again).
        """
        root = path.resolve()
        if (root / ".runfold").exists():
            raise invalid_args(
                "initialize a workspace",
                str(root),
                f"{root} already holds a workspace (.runfold/); use it as is (`runfold verify -w {root}`) "
                "or pick another directory",
            )
        if root.exists() and not root.is_dir():
            raise invalid_args("initialize a workspace", str(root), "give a directory, not a file")
        url = parse_store_url(store, "--store") if store is not None else None
        root.mkdir(parents=True, exist_ok=True)
        if url is None:
            create_ledger(root).close()
        else:
            layout = Layout(root)
            layout.cas_dir.mkdir(parents=True)
            try:
                join_or_create(root, url)
            except BaseException:
                shutil.rmtree(layout.root, ignore_errors=True)
                raise
        from runfold.runtime.config import write_default_config

        write_default_config(root, store)  # the commented defaults (model, max_turns, tools, prices)
        return cls(root)

    @classmethod
    def open(cls, path: Path | None = None) -> Workspace:
        """Open the workspace at `path`, or found from the current directory upward (honouring
        `RUNFOLD_WORKSPACE`) when `path` is None.

        `path` may also be a ledger directory or one segment file (e.g. a foreign sprawling
        ledger, DESIGN.md §12): such a workspace is read-only (`writer()` refuses) and its lines
        are verified once, on first read, and kept in memory.
        Raises `E_PATH_NOT_FOUND` when no workspace or ledger is found.
        """
        if path is not None and is_bare_ledger(Path(path)):
            return cls(Path(path).absolute(), bare=True)
        return cls(find_workspace(path))

    @property
    def root(self) -> Path:
        """The workspace directory (the one holding `.runfold/`), or the ledger directory or
        segment file a read-only workspace was opened on."""
        return self._root

    @property
    def read_only(self) -> bool:
        """True when opened on a bare ledger directory or segment file (no `.runfold/`)."""
        return self._bare

    def close(self) -> None:
        """Release the read handle (idempotent)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Workspace({str(self._root)!r})"

    def _ledger(self) -> LedgerWriter | BareLedger:
        if self._reader is None:
            self._reader = BareLedger(self._root) if self._bare else open_ledger(self._root, writer=False)
        return self._reader

    # ---- the writer ----------------------------------------------------------------------

    @contextmanager
    def writer(self, *, resume: bool = True) -> Iterator[LedgerWriter]:
        """The workspace's one writer: `with ws.writer() as ledger: ledger.append([...])`.

        Opening it resumes the ledger first (DESIGN.md §7; `last_resume` says what was closed
        and frozen): pass `resume=False` only to build a history by hand, line by line, across
        several opens. Raises `E_LEDGER_HELD` naming the holder's pid when another process holds
        it. The read view is refreshed when the block ends.
        """
        self._writable(
            "write", "a bare ledger file or directory is read-only; `runfold init` a workspace to write"
        )
        ledger = self._open_writer(resume=resume)
        try:
            yield ledger
        finally:
            ledger.close()
            self.close()

    # ---- reading -------------------------------------------------------------------------

    def verify(self, progress: Progress | None = None) -> VerifyReport:
        """Verify this workspace's whole ledger; see `runfold.api.verify` for the errors."""
        return verify(self._root, progress=progress)

    def runs(self) -> list[str]:
        """Every run id in the ledger in order of first appearance, without the nil workspace run."""
        return list(self._ledger().runs())

    def latest_run(self) -> str:
        """The run a command means when RUN is omitted: the latest run the person started,
        forked or continued, the one whose first line is the newest, passing over runs handed
        down by the runtime or another run (`fold.handed_down`: probe question forks, delegated
        children; the newest run when every run is). Raises `E_INVALID_ARGS` when the ledger
        holds no run yet."""
        runs = [r for r in self.runs() if r != WORKSPACE_RUN]
        if not runs:
            raise invalid_args(
                "pick the latest run",
                str(self._root),
                "the ledger holds no runs yet; start one with `runfold run TASK`",
            )
        for run in reversed(runs):
            first = self.records(run, limit=1)
            if not first or not fold_api.handed_down(first[0]):
                return run
        return runs[-1]

    def resolve_run(self, prefix: str) -> str:
        """The one run whose id starts with `prefix` (hyphens optional, case-insensitive), like git.

        Raises `E_INVALID_ARGS` when no run matches (nearby: the ids closest to `prefix`) or more
        than one does (nearby: the candidates). The nil workspace run matches only `workspace`
        or its full id.
        """
        wanted = prefix.strip().lower()
        runs = self.runs()
        if wanted in ("workspace", WORKSPACE_RUN):
            return WORKSPACE_RUN
        key = run_prefix_key(prefix)
        if not key:
            raise invalid_args(
                "find run", repr(prefix), "give the start of a run id, e.g. from `runfold log`"
            )
        matches = runs_with_prefix(prefix, [r for r in runs if r != WORKSPACE_RUN])
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise invalid_args(
                f"pick one run for the prefix {prefix!r}",
                f"{len(matches)} runs whose ids start with it",
                "give more characters of the run id (`runfold runs` shows the shortest unique ones): "
                + ", ".join(matches[:_NEARBY_MAX]),
                nearby=tuple(matches),
            )
        nearby = _nearby_runs(key, [r for r in runs if r != WORKSPACE_RUN])
        if not nearby:
            hint = "the ledger holds no runs yet"
        elif _shared_prefix(nearby[0], key) == 0:
            hint = "`runfold runs` lists them"
        else:
            hint = "closest: " + ", ".join(nearby)
        raise invalid_args(
            f"find run {prefix!r}",
            str(self._root),
            f"no run id starts with {prefix!r}; {hint}",
            nearby=tuple(nearby),
        )

    # ---- folds: conversation, runs/tree (DESIGN.md §5–§7); pure folds in core/fold (why: api_runs).

    def lineage_lines(self, run: str) -> dict[str, list[Record]]:
        """The lines a fold of `run` reads: the run's and, for a fork, each mother's (recursively
        through `run_forked`), as run id → lines in seq order. `run` is an id or unique prefix.
        Raises `E_INVALID_ARGS` for an unknown/ambiguous run."""
        return fold_api.lineage_lines(self._ledger().run_records, self.resolve_run(run))

    def fold(self, run: str, at: int | None = None) -> fold_api.RunFold:
        """The conversation of `run` (id or prefix) through the last safe cut point ≤ `at`
        (default: its last line), DESIGN.md §7. Raises `E_INVALID_ARGS` when `at` is not a line
        of the run's lineage (naming the range and the ledger's tail, never clamped),
        `E_LEDGER_CORRUPT` naming seq and field for a line that cannot be folded."""
        rid = self.resolve_run(run)
        ledger = self._ledger()
        return fold_api.fold_run(
            fold_api.lineage_lines(ledger.run_records, rid), rid, at, tail=ledger.next_seq - 1
        )

    def raw_prefix(self, run: str, at: int) -> bytes:
        """The ledger's lines 0..=`at`, byte-identical with their newlines, for a seq `at` of
        `run`'s lineage (DESIGN.md §7). Raises `E_INVALID_ARGS` when `at` is not such a seq."""
        rid = self.resolve_run(run)
        ledger = self._ledger()
        lin = fold_api.lineage(fold_api.lineage_lines(ledger.run_records, rid), rid)
        if at not in lin.seqs():
            raise fold_api.not_in_lineage(lin, at, ledger.next_seq - 1)
        return fold_api.raw_prefix([ledger.record_at(s) for s in range(at + 1)], at)

    def run_summaries(self, into: fold_api.RunSummaries | None = None) -> list[fold_api.RunSummary]:
        """One summary per run (status, model, turns, tokens, cost, lineage), by first seq; costs
        priced as `cost` prices them. A run without `run_frozen` while no live process holds the
        writer lock reads `died` (its process is gone; the next writer freezes it; a lone segment
        file has no lock, so its runs stay `running`), a fork never run `not_started`. Raises `E_CONFIG_INVALID` for a bad price table.

        `into` (from `summary_folder()`) keeps the fold between calls: only the lines written
        since it was last fed are read (a viewer following a growing ledger)."""

        acc = into if into is not None else self.summary_folder()
        ledger = self._ledger()
        if acc.next_seq < ledger.next_seq:
            for rec in ledger.records(since=acc.next_seq):
                acc.feed(rec)
        summaries = acc.summaries()
        if (
            not self._bare  # a lone segment has no lock to read: its runs stay `running`
            and any(s.status == "running" for s in summaries)
            and not writer_alive(self._root)
        ):
            fold_api.owner_gone(summaries)
        return summaries

    def summary_folder(self) -> fold_api.RunSummaries:
        """An empty run-summary fold priced as `cost` prices (for `run_summaries(into=...)`).
        Raises `E_CONFIG_INVALID` for a bad price table."""
        from runfold.runtime.cost import workspace_pricing

        return fold_api.RunSummaries(workspace_pricing(self.settings().prices))

    def run_tree(self) -> list[fold_api.TreeNode]:
        """The runs arranged by fork, delegation and successor lineage (roots first)."""
        return fold_api.run_tree(self.run_summaries())

    def request_at(self, run: str, at: int | None = None, dialect: str | None = None) -> ConversationView:
        """The conversation of `run` at the last safe cut point ≤ `at` rendered as the request
        body of `dialect` (`anthropic`, `openai-chat`, `openai-responses`; None: the run's own
        dialect from its frozen prefix, else `anthropic`), with the frozen prefix from the CAS when
        the run recorded one, and the validator's verdict for every dialect. Raises like `fold`,
        `E_INVALID_ARGS` for an unknown dialect, `E_PATH_NOT_FOUND` for a missing prefix object."""
        from runfold.runtime.prefix import conversation_view

        fold = self.fold(run, at)
        return conversation_view(fold, dialect, Cas(self._root if not self._bare else self._root.parent))


def _shared_prefix(run: str, key: str) -> int:
    """How many leading characters of `run` (hyphens dropped) equal those of `key`."""
    n = 0
    for a, b in zip(run.replace("-", ""), key, strict=False):
        if a != b:
            break
        n += 1
    return n


def _nearby_runs(key: str, runs: list[str]) -> list[str]:
    """Run ids sharing the longest common prefix with `key`, most similar first."""

    def shared(run: str) -> int:
        return _shared_prefix(run, key)

    ranked = sorted(runs, key=lambda r: (-shared(r), r))
    best = shared(ranked[0]) if ranked else 0
    return [r for r in ranked if shared(r) == best][:_NEARBY_MAX] if ranked else []
