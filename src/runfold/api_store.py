"""The part of `runfold.api.Workspace` that moves a ledger as a whole: importing another tool's
session, copying the ledger into another store (`migrate`), repairing a garbage tail, and finding
the `runfold serve` process that owns the workspace (DESIGN.md §3, §12).

`Workspace` inherits it. Each method opens the writer or the stores it needs when called, so
reading a workspace never loads these paths.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runfold.core.errors import invalid_args
from runfold.core.records import Record
from runfold.store.backend import parse_store_url
from runfold.store.layout import Layout
from runfold.store.view import LedgerWriter

if TYPE_CHECKING:
    from runfold.runtime.importing import ImportReport
    from runfold.store.bare import BareLedger
    from runfold.store.migrate import MigrateReport
    from runfold.store.serving import ServeInfo
    from runfold.store.tail import GarbageTail


@dataclass(frozen=True)
class RepairReport:
    """What `Workspace.repair` found (`found`: a dry run's tail, None when the tail is clean or
    the repair ran) and wrote (`written`: the `log_truncated` line, None when nothing moved)."""

    found: GarbageTail | None
    written: Record | None


class WorkspaceStore:
    """Importing, migrating, repairing, for `Workspace` (see the module docstring)."""

    _root: Path
    _bare: bool

    if TYPE_CHECKING:  # what Workspace defines

        def close(self) -> None: ...
        def _ledger(self) -> LedgerWriter | BareLedger: ...
        def _writable(self, action: str, recovery: str) -> None: ...
        def writer(self, *, resume: bool = True) -> AbstractContextManager[LedgerWriter]: ...

    def import_session(self, path: Path, format: str = "auto") -> ImportReport:
        """Import another tool's session file at `path` as runs of this workspace (`format`: one
        of `runfold.importers.FORMATS`, or `auto` to detect it; the report says which). Each
        session becomes a frozen run: `run_started` with `imported` provenance, `session_imported`
        (format, the file's BLAKE3, the CAS map from each source line or event to its seqs),
        then the lines a native run writes. All or nothing: the file is read and checked before
        the writer opens, every run is folded before one batch is written. Raises
        `E_PATH_NOT_FOUND` for a missing file, `E_INVALID_ARGS` naming the source line or event
        for bad input (a line that is not JSON, a truncated file, an unknown format version, a
        tool result whose call is missing), `E_LEDGER_HELD` when another process writes."""
        from runfold.runtime.importing import prepare_import, write_import

        self._writable("import a session", "a bare ledger is read-only; `runfold init` a workspace")
        prepared = prepare_import(path, format)
        with self.writer() as ledger:
            return write_import(self._root, ledger, prepared)

    def server(self) -> ServeInfo | None:
        """The `runfold serve` process that owns this workspace now (its pid, URL and token
        file), or None: its `serve.json` counts only while that pid holds the writer lock."""
        from runfold.store.serving import find_server

        return None if self._bare else find_server(self._root)

    def queued_runs(self) -> list[tuple[str, str]]:
        """The runs dispatched to `runfold serve` that wait in this workspace's durable queue,
        as (run id, task) in dispatch order: with no server up, they start when the next one
        does (a server that is up may be starting some of them now). A bare ledger has none."""
        from runfold.store.serving import queue_items

        if self._bare:
            return []
        return [(run, str((request or {}).get("task", ""))) for run, request in queue_items(self._root)]

    def drop_queued(self, run: str) -> str:
        """Drop the queued dispatch whose run id starts with `run` (hyphens optional), so the
        next `runfold serve` never starts it; returns the run id. Done under the writer lock, so
        a server cannot be taking it at the same moment. Raises `E_PATH_NOT_FOUND` when no queued
        run matches, `E_INVALID_ARGS` when several do, `E_LEDGER_HELD` when a process (a server)
        holds the writer: cancel through it instead."""
        from runfold.core.errors import ErrorCode, Retry, RunfoldError
        from runfold.core.ids import runs_with_prefix
        from runfold.store.serving import queue_drop

        matches = runs_with_prefix(run, [r for r, _task in self.queued_runs()])
        if not matches:
            raise RunfoldError(
                ErrorCode.PATH_NOT_FOUND, "drop the queued run", f"run {run!r}", "no queued run id starts with that",
                retry=Retry.NO,
            )  # fmt: skip
        if len(matches) > 1:
            raise invalid_args("drop the queued run", f"run {run!r}", "give more characters: " + ", ".join(matches))
        with self.writer(resume=False):
            queue_drop(self._root, matches[0])
        return matches[0]

    def migrate(self, to: str | None = None, to_file: Path | None = None, *, use: bool = False) -> MigrateReport:
        """Copy this ledger byte for byte into another store (DESIGN.md §3): `to` a
        `postgresql://…?workspace=NAME` URL (its workspace must hold no line; one transaction),
        or `to_file` a directory that becomes a workspace with a file ledger (its config is this
        one's without `store`; CAS objects are copied). The source is left as it is; the heads
        match when this returns. Give exactly one of the two. `use` (with `to`, on a workspace)
        then points this workspace's settings at the store (`store = "…"` at the head of
        `.runfold/config.toml`); its file ledger stays as it was, a copy.

        Raises `E_INVALID_ARGS` for both or neither target, a target holding lines or an empty
        source; `E_CONFIG_INVALID` for a bad URL or a missing `postgres` extra; `E_LEDGER_HELD`,
        `E_STORAGE_FATAL` from the target store; `LineRefused` when a source line is damaged.
        """
        from runfold.store.ledger import SEGMENT_BYTES
        from runfold.store.migrate import copy_cas, migrate_to_files, migrate_to_store

        if use and to is None:
            raise invalid_args("migrate the ledger", "--use", "give --use together with --to URL")
        if (to is None) == (to_file is None):
            raise invalid_args(
                "migrate the ledger",
                "--to / --to-file",
                "give one target: --to postgresql://… or --to-file DIR",
            )
        source = self._ledger()
        if to is not None:
            url = parse_store_url(to, "--to")
            local = self._root if not self._bare else self._root.parent
            report = migrate_to_store(source, str(self._root), url, local)
            if use:
                self._writable("switch the store", "a bare ledger has no settings; `runfold init` a workspace")
                self.close()
                _use_store(self._root, to)
            return report
        assert to_file is not None
        dest = to_file.absolute()
        report = migrate_to_files(source, str(self._root), dest, SEGMENT_BYTES)
        if not self._bare:
            copy_cas(self._root, dest)
            copy_settings(self._root, dest)
        return report

    def repair(self, *, quarantine: bool) -> RepairReport:
        """Find the bytes after the ledger's last valid line that are no ledger line (a garbage
        tail that ends with a newline, which no writer cuts on its own, or a torn append) and,
        with `quarantine`, move them (DESIGN.md §3 "Garbage tail"): copied durably into
        `.runfold/quarantine/`, then replaced by one `log_truncated` line naming their size,
        BLAKE3 and quarantine file. Without `quarantine` nothing is written (a dry run).

        Returns what was found and done. Raises `LineRefused` for damage a repair does not touch
        (a changed or missing line), `E_LEDGER_CORRUPT` when the ledger lost its tail,
        `E_LEDGER_HELD` when another process writes the workspace, `E_STORAGE_FATAL` when the
        bytes cannot be copied (nothing is cut), `E_INVALID_ARGS` on a read-only workspace."""
        from runfold.store.backend import store_setting
        from runfold.store.layout import Layout
        from runfold.store.ledger import Ledger
        from runfold.store.tail import find_garbage_tail

        self._writable("repair", "a bare ledger is read-only; copy it into a workspace to repair it")
        if store_setting(self._root) is not None:
            raise invalid_args(
                "repair the ledger's tail",
                str(self._root),
                "a PostgreSQL store writes whole transactions and has no file tail to repair",
            )
        self.close()
        if not quarantine:
            return RepairReport(find_garbage_tail(Layout(self._root)), None)
        ledger = Ledger.open(self._root, writer=True, quarantine_tail=True)
        try:
            written = ledger.log_truncated
        finally:
            ledger.close()
        return RepairReport(None, written)


def _use_store(root: Path, url: str) -> None:
    """Point workspace `root`'s settings at the store `url`: its top-level `store` line
    replaced, or one added at the head of `.runfold/config.toml`."""
    path = Layout(root).root / "config.toml"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    line = "store = " + json.dumps(url, ensure_ascii=False) + "\n"
    path.write_text(line + _without_store(text), encoding="utf-8")


def _without_store(text: str) -> str:
    """TOML `text` without its top-level `store = …` line (a `store` key inside a table stays)."""
    kept: list[str] = []
    top = True
    for line in text.splitlines(keepends=True):
        top = top and not line.lstrip().startswith("[")
        if not (top and line.split("=", 1)[0].strip() == "store"):
            kept.append(line)
    return "".join(kept)


def copy_settings(src: Path, dest: Path, store: str | None = None) -> None:
    """Give workspace `dest` the settings file of `src` without its top-level `store` line (the
    file ledger needs none), headed by `store = "<store>"` when `store` is given, unless `dest`
    has a settings file already."""
    source, target = Layout(src).root / "config.toml", Layout(dest).root / "config.toml"
    if target.exists() or not source.exists():
        return
    head = "" if store is None else "store = " + json.dumps(store, ensure_ascii=False) + "\n"
    target.write_text(head + _without_store(source.read_text(encoding="utf-8")), encoding="utf-8")
