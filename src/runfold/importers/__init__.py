"""Importers: another tool's session file → a typed import plan → ledger drafts. Pure: bytes in,
values out; the workspace (`Workspace.import_session`) does the writing, all or nothing.

One module per format, one entry point: `read_plan(format, data, source)`. `FORMATS` is the
exhaustive list of formats (wire names, pinned by a test); `detect` says which one a file is.
The parsers load when one of their names is first used (`runfold --help` names only `FORMATS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfold.core.lazy import lazy_getattr

if TYPE_CHECKING:
    from runfold.importers.drafts import ImportDrafts, ImportedRun, import_drafts
    from runfold.importers.plan import Compaction, Event, ImportPlan, Reply, Result, Session, Text
    from runfold.importers.registry import detect, read_plan

__all__ = [
    "AUTO",
    "FORMATS",
    "Compaction",
    "Event",
    "ImportDrafts",
    "ImportPlan",
    "ImportedRun",
    "Reply",
    "Result",
    "Session",
    "Text",
    "detect",
    "import_drafts",
    "read_plan",
]

AUTO = "auto"

FORMATS: tuple[str, ...] = ("claude-code", "codex", "openai-chat", "swe-agent", "openhands")
"""Every format `runfold import` reads, by wire name."""

_LAZY = {
    "ImportDrafts": "runfold.importers.drafts",
    "ImportedRun": "runfold.importers.drafts",
    "import_drafts": "runfold.importers.drafts",
    "Compaction": "runfold.importers.plan",
    "Event": "runfold.importers.plan",
    "ImportPlan": "runfold.importers.plan",
    "Reply": "runfold.importers.plan",
    "Result": "runfold.importers.plan",
    "Session": "runfold.importers.plan",
    "Text": "runfold.importers.plan",
    "detect": "runfold.importers.registry",
    "read_plan": "runfold.importers.registry",
}

if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all attribute
    __getattr__ = lazy_getattr(__name__, _LAZY, globals())
