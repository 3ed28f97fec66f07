"""Claude Code session files (`~/.claude/projects/<dir>/<session>.jsonl`) as an import plan.

A file is a tree of lines linked by `uuid` → `parentUuid`, not a list: one API reply is spread
over several assistant lines sharing `message.id` (merged here, usage counted once with the
highest `output_tokens` of the streamed snapshots); the results of a parallel wave hang off
different lines of that reply, so the active branch is the leaf's ancestry *plus* every line
that answers one of its calls (regrouped by `tool_use_id`); a `parentUuid` naming a line never
written continues from the line before it; a compaction starts a new root (`compact_boundary`
with `logicalParentUuid`) followed by the runtime's summary (`isCompactSummary`): it becomes a
`Compaction` (the model saw only the summary, and the boundary's `preservedSegment` when it
names one, after it; the earlier lines stay in the ledger), and a second compaction may
re-append old rows with their original uuids (copies the model never saw again: kept once). `isMeta` user lines
(hook output, CLI notes) are runtime text. Sidechain lines and `subagents/agent-*.jsonl`
companion files become child sessions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from runfold.core.messages import Block, redacted_thinking_block, text_block, thinking_block
from runfold.importers.common import call_block, jsonl, ms, obj, text_of
from runfold.importers.plan import (
    Compaction,
    Event,
    ImportPlan,
    Reply,
    Result,
    Session,
    Speaker,
    Text,
    as_int,
    bad_source,
    check_version,
)

FORMAT = "claude-code"
MESSAGE_TYPES = frozenset({"user", "assistant"})
KNOWN_MAJOR = frozenset({"0", "1", "2"})
SUPPORTED = "this build reads the session files of Claude Code 0.x to 2.x"
_MESSAGE_TYPE = re.compile(rb'"type"\s*:\s*"(user|assistant)"')
"""A message line's type, however the file spaces its JSON."""


def detect(data: bytes) -> bool:
    """Whether `data` looks like a Claude Code file: JSONL lines with `type` user/assistant and
    a `sessionId`."""
    head = data[:65536]
    return b'"sessionId"' in head and _MESSAGE_TYPE.search(head) is not None


def parse(data: bytes, source: str, companions: Mapping[str, bytes] | None = None) -> ImportPlan:
    """The plan of a Claude Code file (see the module docstring); `companions` maps the names of
    its subagent files to their bytes. Raises `E_INVALID_ARGS` naming the line for a line that
    is not JSON, a `version` this build does not know, or a tool result whose call is missing."""
    skipped: list[tuple[str, str]] = []
    rows = list(jsonl(FORMAT, source, data))
    bounds: dict[str, tuple[int, dict[str, Any]]] = {}
    main_lines, side_lines = _split(rows, source, skipped, bounds)
    sessions = [_session(main_lines, source, "main", None, skipped, bounds=bounds)]
    side_by_agent: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for n, row in side_lines:
        side_by_agent.setdefault(str(row.get("agentId") or "sidechain"), []).append((n, row))
    for agent, lines in side_by_agent.items():
        sessions.append(_session(lines, source, f"sidechain {agent}", "main", skipped))
    for name in sorted(companions or {}):
        sub_rows = list(jsonl(FORMAT, name, (companions or {})[name]))
        sub_bounds: dict[str, tuple[int, dict[str, Any]]] = {}
        sub_main, sub_side = _split(sub_rows, name, skipped, sub_bounds)
        sessions.append(
            _session(
                sub_main + sub_side, name, f"subagent {name}", "main", skipped, f"{name} ", sub_bounds
            )
        )
    for n, _ in bounds.values():  # a boundary no summary line followed
        skipped.append((f"line {n}", "compact_boundary with no summary line after it"))
    return ImportPlan(FORMAT, source, tuple(s for s in sessions if s.events), tuple(skipped))


def _split(
    rows: list[tuple[int, dict[str, Any]]],
    source: str,
    skipped: list[tuple[str, str]],
    bounds: dict[str, tuple[int, dict[str, Any]]],
) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, dict[str, Any]]]]:
    """The message lines of the main chain and of sidechains; `compact_boundary` lines go to
    `bounds` (by uuid), the other lines to `skipped`. A line re-appended with a uuid seen before
    is kept once."""
    main: list[tuple[int, dict[str, Any]]] = []
    side: list[tuple[int, dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for n, row in rows:
        check_version(FORMAT, source, f"line {n}", "Claude Code", row.get("version"), KNOWN_MAJOR, SUPPORTED)
        kind = row.get("type") if isinstance(row.get("type"), str) else None
        if kind == "system" and row.get("subtype") == "compact_boundary":
            bounds[str(row.get("uuid"))] = (n, row)
            continue
        if kind not in MESSAGE_TYPES:
            skipped.append((f"line {n}", f"{kind or 'untyped'} line (not part of the conversation)"))
            continue
        uuid = row.get("uuid")
        if isinstance(uuid, str):
            if uuid in seen:
                skipped.append((f"line {n}", f"re-appended copy of line {seen[uuid]} (same uuid)"))
                continue
            seen[uuid] = n
        (side if row.get("isSidechain") else main).append((n, row))
    return main, side


def _active(
    lines: list[tuple[int, dict[str, Any]]], source: str, skipped: list[tuple[str, str]], prefix: str
) -> list[tuple[int, dict[str, Any]]]:
    """The lines of the active branch in file order: the last line's ancestry (a missing parent
    continues from the line before; a compaction root from its `logicalParentUuid`), the other
    lines of every reply on it (same `message.id`), and every line answering one of its calls."""
    if not lines:
        return []
    by_uuid = {row["uuid"]: i for i, (_, row) in enumerate(lines) if isinstance(row.get("uuid"), str)}
    keep: set[int] = set()
    i: int | None = len(lines) - 1
    while i is not None and i not in keep:
        keep.add(i)
        row = lines[i][1]
        parent = row.get("parentUuid") or row.get("logicalParentUuid")
        if isinstance(parent, str) and by_uuid.get(parent) in keep:
            raise bad_source(
                FORMAT,
                source,
                f"{prefix}line {lines[i][0]}",
                f"its parent {parent} is the line itself or one of its descendants (line "
                f"{lines[by_uuid[parent]][0]}): the uuid links form a cycle",
                "the file was edited or damaged; repair that line's parentUuid and import again",
            )
        if isinstance(parent, str):
            i = by_uuid.get(parent, i - 1 if i > 0 else None)  # a parent never written: the line before
        elif row.get("isCompactSummary") or (i > 0 and _is_root_after_compaction(row)):
            i = i - 1 if i > 0 else None
        else:
            i = None
    ids = {_msg_id(lines[k][1]) for k in keep} - {None}
    keep |= {k for k, (_, row) in enumerate(lines) if _msg_id(row) in ids}
    calls = {_id(b, "id") for k in keep for b in _blocks(lines[k][1]) if b.get("type") == "tool_use"} - {None}
    keep |= {
        k
        for k, (_, row) in enumerate(lines)
        if any(b.get("type") == "tool_result" and _id(b, "tool_use_id") in calls for b in _blocks(row))
    }
    for k, (n, _) in enumerate(lines):
        if k not in keep:
            skipped.append((f"{prefix}line {n}", "on a branch the session left (rewound or edited)"))
    return [lines[k] for k in sorted(keep)]


def _id(block: dict[str, Any], key: str) -> str | None:
    """`block[key]` when it is a string (a call id), else None (a file may hold anything)."""
    value = block.get(key)
    return value if isinstance(value, str) else None


def _is_root_after_compaction(row: dict[str, Any]) -> bool:
    return row.get("parentUuid") is None and row.get("type") == "user"


def _msg_id(row: dict[str, Any]) -> str | None:
    msg = row.get("message")
    if row.get("type") == "assistant" and isinstance(msg, dict) and isinstance(msg.get("id"), str):
        return str(msg["id"])
    return None


def _blocks(row: dict[str, Any]) -> list[dict[str, Any]]:
    msg = row.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _session(
    lines: list[tuple[int, dict[str, Any]]],
    source: str,
    key: str,
    parent: str | None,
    skipped: list[tuple[str, str]],
    prefix: str = "",
    bounds: dict[str, tuple[int, dict[str, Any]]] | None = None,
) -> Session:
    events: list[Event] = []
    order: list[str] = []  # the positions read so far, in order
    at_uuid: dict[str, int] = {}  # uuid → its index in `order`
    replies: dict[str, int] = {}  # message.id → index in events
    peak: dict[str, int] = {}
    facts: dict[str, str] = {}
    model = ""
    for n, row in _active(lines, source, skipped, prefix):
        where = f"{prefix}line {n}"
        if isinstance(row.get("uuid"), str):
            at_uuid.setdefault(row["uuid"], len(order))
        order.append(where)
        for fact, name in (("sessionId", "session_id"), ("version", "version"), ("agentId", "agent_id")):
            if isinstance(row.get(fact), str):
                facts.setdefault(name, row[fact])
        msg = obj(row.get("message"))
        t = ms(row.get("timestamp"))
        if row.get("type") == "assistant":
            if msg.get("model") == "<synthetic>":
                skipped.append((where, "a message the CLI wrote itself (model <synthetic>), not the model's"))
                continue
            model = str(msg.get("model") or model)
            mid = _msg_id(row) or f"{where}"
            blocks = _reply_blocks(_blocks(row), str(msg.get("model") or ""))
            usage = _usage(msg.get("usage"))
            if mid in replies:
                k = replies[mid]
                prev = events[k]
                assert isinstance(prev, Reply)
                out = as_int(obj(msg.get("usage")).get("output_tokens"))
                if usage is not None and prev.usage is not None and out > peak.get(mid, 0):
                    peak[mid] = out
                    usage = {**prev.usage, "output": out}
                else:
                    usage = prev.usage
                events[k] = Reply(
                    (*prev.blocks, *blocks),
                    (*prev.origin, where),
                    prev.model,
                    usage,
                    msg.get("stop_reason") or prev.stop,
                    prev.t,
                )
                continue
            replies[mid] = len(events)
            peak[mid] = usage["output"] if usage else 0
            events.append(
                Reply(tuple(blocks), (where,), str(msg.get("model") or ""), usage, msg.get("stop_reason"), t)
            )
            continue
        if row.get("isCompactSummary"):
            events.append(_compaction(row, where, prefix, order, at_uuid, bounds or {}, t))
            continue
        speaker: Speaker = "runtime" if row.get("isMeta") else "person"
        content = msg.get("content")
        if isinstance(content, str):
            events.append(Text(speaker, content, (where,), t))
            continue
        for block in _blocks(row):
            if block.get("type") == "tool_result":
                events.append(
                    Result(
                        str(block.get("tool_use_id")),
                        text_of(block.get("content")),
                        bool(block.get("is_error")),
                        (where,),
                        t,
                    )
                )
            elif block.get("type") == "text":
                events.append(Text(speaker, str(block.get("text") or ""), (where,), t))
            else:
                skipped.append((where, f"a {block.get('type')} block in a user line (kept as its JSON text)"))
                events.append(Text(speaker, text_of([block]), (where,), t))
    return Session(key, tuple(events), model, None, parent, facts)


def _compaction(
    row: dict[str, Any],
    where: str,
    prefix: str,
    order: list[str],
    at_uuid: dict[str, int],
    bounds: dict[str, tuple[int, dict[str, Any]]],
    t: int | None,
) -> Compaction:
    """The runtime's summary line (`isCompactSummary`) with its `compact_boundary` (its parent,
    taken out of `bounds`): the model saw the summary, then the boundary's preserved segment
    (`compactMetadata.preservedSegment.headUuid` onward) when it names a line read before."""
    summary = text_of(obj(row.get("message")).get("content"))
    bound = bounds.pop(str(row.get("parentUuid")), None)
    origin = (f"{prefix}line {bound[0]}", where) if bound else (where,)
    meta = obj(bound[1].get("compactMetadata") or bound[1].get("compact_metadata")) if bound else {}
    segment = obj(meta.get("preservedSegment") or meta.get("preserved_segment"))
    head = segment.get("headUuid") or segment.get("head_uuid")
    forgotten = tuple(order[: at_uuid[head]]) if isinstance(head, str) and head in at_uuid else None
    return Compaction(summary, origin, forgotten, False, t)


def _reply_blocks(raw: list[dict[str, Any]], model: str) -> list[Block]:
    out: list[Block] = []
    for b in raw:
        kind = b.get("type")
        if kind == "text":
            out.append(text_block(str(b.get("text") or "")))
        elif kind == "thinking":
            out.append(
                thinking_block(
                    str(b.get("thinking") or ""),
                    str(b.get("signature") or ""),
                    dialect="anthropic",
                    model=model or None,
                )
            )
        elif kind == "redacted_thinking":
            out.append(
                redacted_thinking_block(str(b.get("data") or ""), dialect="anthropic", model=model or None)
            )
        elif kind == "tool_use":
            out.append(call_block(str(b.get("id")), str(b.get("name") or ""), b.get("input")))
    return out


def _usage(raw: Any) -> dict[str, int] | None:
    if not isinstance(raw, dict):
        return None
    return {
        "input": as_int(raw.get("input_tokens")),
        "output": as_int(raw.get("output_tokens")),
        "cache_read": as_int(raw.get("cache_read_input_tokens")),
        "cache_write": as_int(raw.get("cache_creation_input_tokens")),
    }
