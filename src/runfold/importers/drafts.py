"""An import plan as ledger drafts: the lines a native run writes, plus `session_imported`.

Each session becomes one run: `run_started` (the person's first words as the opening, provenance
in `imported`), `session_imported` (format, source hash, the CAS locator of the source → seqs
map), the source's system prompt as `runtime:` text, then per reply `model_called` (no request
bytes: the source never recorded them) and `model_returned`, per answered call `tool_called`
and `tool_result`, user-side words as `steer_received`, a compaction the source runtime made as
the conversation `context_changed` a native summary compaction writes (`imported`: the window
after it is the one the source's model saw; the earlier lines stay), and `run_frozen`. The rules a
conversation keeps (DESIGN.md §6) are kept here, not hoped for: a call id used earlier in the
session is re-keyed (`<id>-<n>`, the map keeps the source's id), a call the source never
answered is closed with `E_TOOL_OUTCOME_UNKNOWN` as resume closes a lost call, and a result
that answers no open call is refused naming its source position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runfold.core.canonical import FORMAT_VERSION, Envelope, Json, content_hash, encode_json
from runfold.core.causes import Cause
from runfold.core.compaction import SUMMARY, Change, apply_change, change_data
from runfold.core.conversation import Conversation
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.messages import Block
from runfold.core.payloads import (
    ContextChanged,
    Evidence,
    ModelCalled,
    ModelReturned,
    Payload,
    RunFrozen,
    RunStarted,
    SessionImported,
    SteerReceived,
    ToolCalled,
    ToolResult,
)
from runfold.core.records import Draft, Record
from runfold.importers.plan import Compaction, Event, ImportPlan, Reply, Result, Session, Text, bad_source

AGENT = "agent"
PERSON = "person"
RUNTIME = "runtime"
NO_OPENING = "Continue the imported session below."
"""The opening of a session whose first words are not the person's (the run needs one)."""


@dataclass(frozen=True)
class ImportedRun:
    """One run an import wrote: its id, the source `session` key, its first and last seq, the
    counts of its lines (`replies` model_returned, `calls` tool calls the source answered or
    not, `results` answers the source holds, `lost` calls closed as E_TOOL_OUTCOME_UNKNOWN,
    `rekeyed` call ids renamed because the session used them before) and its `map` locator."""

    run: str
    session: str
    first_seq: int
    last_seq: int
    replies: int
    calls: int
    results: int
    lost: int
    rekeyed: int
    map: str


@dataclass(frozen=True)
class ImportDrafts:
    """What to write: `objects` (map documents) into the CAS first, then `drafts` in one batch;
    `origin` names, for each seq a source position became, the first such position (`line 12`,
    `event 4 (id 5)`), so a line that will not read can be blamed on the source."""

    drafts: tuple[Draft, ...]
    objects: tuple[bytes, ...]
    runs: tuple[ImportedRun, ...]
    origin: Mapping[int, str] = field(default_factory=dict)


@dataclass
class _Wave:
    reply_origin: tuple[str, ...]
    t: int | None
    open: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """source call id → [(ledger call id, tool name)] not yet answered, in call order."""
    answered: set[str] = field(default_factory=set)


class _Run:
    """Builds one session's lines (see the module docstring)."""

    def __init__(self, plan: ImportPlan, session: Session, run: str, first_seq: int) -> None:
        self.plan = plan
        self.session = session
        self.run = run
        self.lines: list[tuple[Payload, str, int | None]] = []
        self.rows: list[dict[str, Any]] = []
        self.first_seq = first_seq
        self.used_ids: set[str] = set()
        self.wave: _Wave | None = None
        self.replies = self.calls = self.results = self.lost = self.rekeyed = 0
        self.last_reply_seq: int | None = None
        self.done = False

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self.lines)

    def add(self, payload: Payload, who: str, t: int | None = None) -> int:
        seq = self.next_seq
        self.lines.append((payload, who, t))
        return seq

    def row(self, origin: Sequence[str], seqs: list[int], **more: Any) -> None:
        for where in origin:
            self.rows.append({"at": where, "seqs": seqs, **more})

    # -- events ----------------------------------------------------------------------------

    def text(self, ev: Text) -> None:
        if not ev.text.strip():
            return
        source = "user" if ev.speaker == PERSON else "runtime"
        seq = self.add(SteerReceived(source=source, text=ev.text), PERSON if source == "user" else RUNTIME)
        self.row(ev.origin, [seq])
        self.done = False

    def reply(self, ev: Reply) -> None:
        self.close_wave()
        blocks: list[Block] = []
        wave = _Wave(ev.origin, ev.t)
        for block in ev.blocks:
            if block["kind"] == "tool_use":
                source_id = block["id"]
                new_id = source_id
                n = 1
                while new_id in self.used_ids:
                    n += 1
                    new_id = f"{source_id}-{n}"
                if new_id != source_id:
                    self.rekeyed += 1
                self.used_ids.add(new_id)
                wave.open.setdefault(source_id, []).append((new_id, block["name"]))
                blocks.append({**block, "id": new_id})
            else:
                blocks.append(block)
        calls = sum(1 for b in blocks if b["kind"] == "tool_use")
        called = self.add(
            ModelCalled(model=ev.model or self.session.model, absent=frozenset({"request"})), AGENT, ev.t
        )
        returned = self.add(
            ModelReturned(
                message={"content": _json(blocks)}, calls=calls, stop=ev.stop, usage=_json_obj(ev.usage)
            ),
            AGENT,
            ev.t,
        )
        self.replies += 1
        self.calls += calls
        new_ids = [c["id"] for c in blocks if c["kind"] == "tool_use"]
        old_ids = [c["id"] for c in ev.blocks if c["kind"] == "tool_use"]
        rekeys = {old: new for old, new in zip(old_ids, new_ids, strict=True) if old != new}
        self.row(ev.origin, [called, returned], **({"rekeyed": rekeys} if rekeys else {}))
        self.last_reply_seq = returned
        self.done = calls == 0
        self.wave = wave if calls else None

    def result(self, ev: Result) -> None:
        wave = self.wave
        pending = wave.open.get(ev.call_id) if wave is not None else None
        if wave is None or not pending:
            where = ", ".join(ev.origin)
            why = (
                f"the tool result for call {ev.call_id!r} comes after its wave was closed or answers it twice"
                if ev.call_id in self.used_ids
                else f"the tool result answers call {ev.call_id!r}, which no earlier reply made"
            )
            raise bad_source(
                self.plan.format,
                self.plan.source,
                where,
                why,
                "the file is missing the reply that made the call (truncated or edited); import a complete copy",
            )
        ledger_id, name = pending.pop(0)
        called = self.add(
            ToolCalled(id=ledger_id, name=name, args=_args_of(self.lines, ledger_id)), AGENT, wave.t
        )
        body = {"content": ev.content}
        payload = (
            ToolResult(tool_use_id=ledger_id, name=name, error=body)
            if ev.is_error
            else ToolResult(tool_use_id=ledger_id, name=name, result=body)
        )
        got = self.add(payload, AGENT, ev.t)
        self.results += 1
        self.row(ev.origin, [called, got])
        if not any(wave.open.values()):
            self.wave = None

    def compaction(self, ev: Compaction) -> None:
        """The source's compaction as a conversation `context_changed` (strategy `summary`,
        `imported`): `through` covers every message holding a forgotten position (whole waves),
        the whole window when the source forgot everything before it. A compaction the window
        cannot take (a blank summary, not at a turn boundary) is runtime text instead, its map
        row saying why."""
        self.close_wave()
        conv, revision = self._folded()
        if conv is None or not ev.summary.strip():
            self.text(Text("runtime", ev.summary, ev.origin, ev.t))
            return
        messages = conv.messages
        if ev.forgotten is None:
            through = len(messages)
        else:
            at = {src.seq: i for i, row in enumerate(conv.sources) for src in row}
            gone = set(ev.forgotten)
            seqs = {q for row in self.rows if row["at"] in gone for q in row["seqs"]}
            last = max((at[q] for q in seqs if q in at), default=0)
            through = min(len(messages), 1 if last == 0 else last + 1 + last % 2)
        change = Change(
            SUMMARY, through=through, summary=ev.summary, imported=True, keep_opening=ev.keeps_opening
        )
        try:
            after = apply_change(conv.copy(), change, self.next_seq).messages
        except RunfoldError as exc:  # e.g. text held mid-wave: the summary still reaches the window
            self.text(Text("runtime", ev.summary, ev.origin, ev.t))
            self.rows[-1]["compaction_refused"] = exc.action
            return
        payload = ContextChanged(region="conversation", cause=Cause.COMPACTION)
        before, now = len(encode_json(messages)), len(encode_json(after))
        added = len(encode_json(after[0]["content"][-1]))  # the summary block
        payload.extra.update(
            {
                **change_data(change),
                "bytes_added": added,
                "bytes_removed": before + added - now,
                "window_bytes_before": before,
                "window_bytes_after": now,
                "revision_before": revision,
                "revision_after": revision + 1,
            }
        )
        seq = self.add(payload, RUNTIME, ev.t)
        self.row(ev.origin, [seq], compaction={"through": through, "forgotten": len(ev.forgotten or ())})
        self.done = False

    def _folded(self) -> tuple[Conversation | None, int]:
        """The conversation the lines so far fold to (the fold every reader uses) and the window
        revision, or `(None, 0)` when they do not fold (the import's own check then names why)."""
        from runfold.core.fold import RunFolder  # here: `runfold --help` lists `import` without the folds

        folder = RunFolder()
        try:
            for i, (payload, who, t) in enumerate(self.lines):
                env = Envelope(
                    v=FORMAT_VERSION,
                    run=self.run,
                    seq=self.first_seq + i,
                    prev="",
                    t=t or 0,
                    who=who,
                    kind=payload.KIND.value,
                    data=payload.to_data(),
                )
                folder.feed(Record(env, b"", ""))
        except RunfoldError:
            return None, 0
        return folder.conversation, folder.revision

    def close_wave(self) -> None:
        """Close every call of the open wave the source never answered (a lost call)."""
        wave = self.wave
        if wave is None:
            return
        for pending in wave.open.values():
            for ledger_id, name in pending:
                called = self.add(
                    ToolCalled(id=ledger_id, name=name, args=_args_of(self.lines, ledger_id)), AGENT, wave.t
                )
                error = RunfoldError(
                    ErrorCode.TOOL_OUTCOME_UNKNOWN,
                    f"learn the outcome of {name} (call {ledger_id})",
                    f"the imported session {self.session.key}",
                    "the source file records no result for this call; check its effect before calling it again",
                )
                got = self.add(ToolResult(tool_use_id=ledger_id, name=name, error=error.to_data()), RUNTIME)
                self.lost += 1
                self.row(wave.reply_origin, [called, got], lost=ledger_id)
        self.wave = None


def _args_of(lines: Sequence[tuple[Payload, str, int | None]], call_id: str) -> Any:
    """The arguments text of `call_id` from the reply that asked for it (latest first)."""
    for payload, _, _ in reversed(lines):
        if isinstance(payload, ModelReturned):
            content = payload.message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("kind") == "tool_use" and block.get("id") == call_id:
                    return block["input"]
    return "{}"


def _json(blocks: Sequence[Block]) -> list[Json]:
    """Blocks as the JSON a payload holds (they are plain JSON objects already)."""
    return [dict(b) for b in blocks]


def _json_obj(usage: dict[str, int] | None) -> dict[str, Json] | None:
    return dict(usage) if usage else None


def _opening(session: Session) -> tuple[str, int | None]:
    """The opening text and the index of the event it consumed: the person's first words before
    the first reply, else the fixed `NO_OPENING` note."""
    for i, ev in enumerate(session.events):
        if isinstance(ev, Reply | Compaction):
            break
        if isinstance(ev, Text) and ev.speaker == PERSON and ev.text.strip():
            return ev.text, i
    return NO_OPENING, None


def _merged(events: Sequence[Event]) -> list[Event]:
    """Consecutive replies with no user-side event between them as one reply (the conversation
    never holds two assistant messages in a row); a reply with no blocks, and user-side text
    with nothing but whitespace (no line is written for it), dropped first."""
    out: list[Event] = []
    for ev in events:
        if (isinstance(ev, Reply) and not ev.blocks) or (isinstance(ev, Text) and not ev.text.strip()):
            continue
        prev = out[-1] if out else None
        if isinstance(ev, Reply) and isinstance(prev, Reply) and not prev.calls:
            out[-1] = Reply(
                (*prev.blocks, *ev.blocks),
                (*prev.origin, *ev.origin),
                ev.model or prev.model,
                _sum_usage(prev.usage, ev.usage),
                ev.stop,
                prev.t,
            )
            continue
        out.append(ev)
    return out


def _sum_usage(a: dict[str, int] | None, b: dict[str, int] | None) -> dict[str, int] | None:
    if a is None or b is None:
        return a or b
    return {k: a.get(k, 0) + b.get(k, 0) for k in sorted(set(a) | set(b))}


def import_drafts(
    plan: ImportPlan,
    *,
    run_ids: Sequence[str],
    first_seq: int,
    source_hash: str,
    source_bytes: int,
) -> ImportDrafts:
    """The drafts of `plan` for a ledger whose next seq is `first_seq`, one run per session
    (`run_ids[i]` for `plan.sessions[i]`). Pure: the caller stores `objects` in the CAS, then
    appends `drafts` in one batch. Raises `E_INVALID_ARGS` naming the source position for a
    tool result that answers no open call."""
    if len(run_ids) != len(plan.sessions):
        raise ValueError("one run id per session")
    runs_by_key = {s.key: r for s, r in zip(plan.sessions, run_ids, strict=True)}
    drafts: list[Draft] = []
    objects: list[bytes] = []
    made: list[ImportedRun] = []
    origin: dict[int, str] = {}
    seq = first_seq
    for session, run_id in zip(plan.sessions, run_ids, strict=True):
        b = _Run(plan, session, run_id, seq)
        task, used = _opening(session)
        parent = runs_by_key.get(session.parent) if session.parent is not None else None
        b.add(
            RunStarted(
                task=task,
                opening="with_person",
                model=session.model or None,
                parent=parent,
                imported={"format": plan.format, "source": plan.source, "session": session.key},
            ),
            PERSON,
        )
        if used is not None:
            b.row(session.events[used].origin, [b.first_seq])
        b.add(SessionImported(), RUNTIME)  # filled below, once the map is known
        if session.system is not None and session.system.strip():
            b.add(SteerReceived(source="runtime", text=session.system), RUNTIME)
        for ev in _merged([e for j, e in enumerate(session.events) if j != used]):
            if isinstance(ev, Text):
                b.text(ev)
            elif isinstance(ev, Reply):
                b.reply(ev)
            elif isinstance(ev, Compaction):
                b.compaction(ev)
            else:
                b.result(ev)
        b.close_wave()
        if b.done and b.last_reply_seq is not None:
            frozen = RunFrozen(
                completion="done", evidence=[Evidence(kind="model_returned", seq=b.last_reply_seq)]
            )
        else:
            frozen = RunFrozen(completion="cancelled")
        b.add(frozen, RUNTIME)
        document = encode_json(
            {
                "format": plan.format,
                "run": run_id,
                "session": session.key,
                "source": plan.source,
                "rows": b.rows,
                "skipped": [{"at": at, "why": why} for at, why in plan.skipped]
                if session is plan.sessions[0]
                else [],
            }
        )
        locator = f"cas:b3-{content_hash(document)}"
        objects.append(document)
        b.lines[1] = (
            SessionImported(
                format=plan.format,
                source=plan.source,
                hash=source_hash,
                bytes=source_bytes,
                session=session.key,
                map=locator,
                facts=dict(session.facts),
            ),
            RUNTIME,
            None,
        )
        for payload, who, t in b.lines:
            drafts.append(Draft(run_id, who, payload.KIND.value, payload, t=t))
        made.append(
            ImportedRun(
                run_id,
                session.key,
                b.first_seq,
                b.next_seq - 1,
                b.replies,
                b.calls,
                b.results,
                b.lost,
                b.rekeyed,
                locator,
            )
        )
        for row in b.rows:
            for q in row["seqs"]:
                origin.setdefault(q, row["at"])
        seq = b.next_seq
    return ImportDrafts(tuple(drafts), tuple(objects), tuple(made), origin)
