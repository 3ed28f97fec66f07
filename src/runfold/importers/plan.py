"""The typed import plan: what a foreign session file says, in runfold's terms, before any line.

Every format module reads its bytes into `Session`s of `Text`, `Reply`, `Result` and
`Compaction` events, each naming the source positions it came from (`origin`);
`runfold.importers.drafts` turns the plan into ledger drafts. Nothing here reads files or clocks: a plan is a value of the source bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from runfold.core.errors import RunfoldError, invalid_args
from runfold.core.messages import Block

Speaker = Literal["person", "runtime"]


@dataclass(frozen=True)
class Text:
    """User-side words: the person's (`person`) or text the foreign tool injected (`runtime`:
    reminders, hook output, command echoes, environment notes, summaries)."""

    speaker: Speaker
    text: str
    origin: tuple[str, ...]
    t: int | None = None


@dataclass(frozen=True)
class Reply:
    """One model reply, merged from every source position that carried part of it. `blocks` are
    internal blocks (DESIGN.md §8); `usage` is `{input, output, cache_read, cache_write}` when
    the source has it; `t` the reply's time in UTC ms when the source has it."""

    blocks: tuple[Block, ...]
    origin: tuple[str, ...]
    model: str = ""
    usage: dict[str, int] | None = None
    stop: str | None = None
    t: int | None = None

    @property
    def calls(self) -> tuple[Block, ...]:
        return tuple(b for b in self.blocks if b["kind"] == "tool_use")


@dataclass(frozen=True)
class Result:
    """A tool's answer to the call `call_id` (the source's id) as the model saw it: `content`
    text, `is_error` when the source marked it failed."""

    call_id: str
    content: str
    is_error: bool
    origin: tuple[str, ...]
    t: int | None = None


@dataclass(frozen=True)
class Compaction:
    """The source runtime replaced its model's window with `summary` (a Claude Code compaction,
    an OpenHands condensation): the model no longer saw the events at the `forgotten` source
    positions (None: every earlier one). `keeps_opening` when the window kept its first user
    message (OpenHands keeps its first events); Claude Code's summary replaces it too."""

    summary: str
    origin: tuple[str, ...]
    forgotten: tuple[str, ...] | None
    keeps_opening: bool
    t: int | None = None


Event = Text | Reply | Result | Compaction


@dataclass(frozen=True)
class Session:
    """One conversation of the source: becomes one run. `key` names it inside the source (the
    main session, a subagent, a task); `parent` is the key of the session that delegated it;
    `system` the source's system prompt; `facts` provenance copied into `session_imported`
    (session id, tool version, fork origin...)."""

    key: str
    events: tuple[Event, ...]
    model: str = ""
    system: str | None = None
    parent: str | None = None
    facts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportPlan:
    """A whole source file read: its `format`, `source` name, `sessions` (parents before their
    children), and `skipped` — `(origin, why)` for every source position that carries nothing
    the model saw (metadata, duplicates of another position, UI events)."""

    format: str
    source: str
    sessions: tuple[Session, ...]
    skipped: tuple[tuple[str, str], ...] = ()


def bad_source(fmt: str, source: str, where: str, what: str, recovery: str) -> RunfoldError:
    """The §11 error of an importer: `E_INVALID_ARGS: cannot import <source> as <fmt> (<what>)
    on <where> of <source> — <recovery>`; nothing has been written when it is raised."""
    return invalid_args(f"import {source} as {fmt} ({what})", f"{where} of {source}", recovery)


def check_version(
    fmt: str, source: str, where: str, tool: str, version: Any, known: frozenset[str], supported: str
) -> None:
    """Refuse a `version` (a `major.minor...` string) whose major is not in `known`, naming
    `where` in `source` and what this build reads (`supported`); anything else passes (a file
    that names no version is read as the layout it has)."""
    if isinstance(version, str) and version.split(".")[0] not in known:
        raise bad_source(
            fmt,
            source,
            where,
            f"{tool} version {version} is a format this build does not know; {supported}",
            "upgrade runfold, or import the file with a runfold that reads this version",
        )


def as_int(value: Any) -> int:
    """A JSON number read by `loads_exact` (or an int) as an int; 0 for anything else."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                return int(float(value))
            except ValueError:
                return 0
    return 0
