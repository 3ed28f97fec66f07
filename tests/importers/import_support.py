"""Shared helpers of the import tests: the fixture transcripts and their counts, derived from the
source files directly (never through the importer)."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
ALL = sorted(p.name for p in FIXTURES.iterdir())


def source_counts(name: str) -> list[dict[str, int]]:
    """Per session of the file (in file order): `replies` (model replies), `calls` (tool calls),
    `results` (tool results), as the source file itself says."""
    path = FIXTURES / name
    if name.startswith("claude-code"):
        ids: set[str] = set()
        calls: set[str] = set()
        results = 0
        for line in path.read_text().splitlines():
            row = json.loads(line)
            msg = row.get("message") or {}
            content = msg.get("content")
            if row.get("type") == "assistant" and msg.get("model") != "<synthetic>":
                ids.add(msg["id"])
                calls |= {b["id"] for b in content if b.get("type") == "tool_use"}
            if row.get("type") == "user" and isinstance(content, list):
                results += sum(1 for b in content if b.get("type") == "tool_result")
        return [{"replies": len(ids), "calls": len(calls), "results": results}]
    if name.startswith("codex"):
        items = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        payloads = [i["payload"] for i in items if i.get("type") == "response_item"]
        return [
            {
                "replies": sum(
                    1 for p in payloads if p.get("type") == "message" and p.get("role") == "assistant"
                ),
                "calls": sum(1 for p in payloads if p.get("type") == "function_call"),
                "results": sum(1 for p in payloads if p.get("type") == "function_call_output"),
            }
        ]
    if name.startswith("openhands"):
        events = json.loads(path.read_text())
        tool_actions = {e["id"] for e in events if "action" in e and "tool_call_metadata" in e}
        responses = {
            e["tool_call_metadata"]["model_response"]["id"] for e in events if e.get("id") in tool_actions
        }
        answered = sum(1 for e in events if "observation" in e and e.get("cause") in tool_actions)
        return [{"replies": len(responses), "calls": len(tool_actions), "results": answered}]
    data = json.loads(path.read_text())
    convs = [data["history"]] if name.startswith("swe-agent") else [t["traj"] for t in data]
    out = []
    for messages in convs:
        out.append(
            {
                "replies": sum(1 for m in messages if m["role"] == "assistant"),
                "calls": sum(len(m.get("tool_calls") or []) for m in messages if m["role"] == "assistant"),
                "results": sum(len(m.get("tool_call_ids") or [1]) for m in messages if m["role"] == "tool"),
            }
        )
    return out


def forgotten_results(name: str) -> int:
    """How many tool results the source's own compactions took out of its model's window (an
    OpenHands condensation's `forgotten_event_ids` that are observations of tool actions), as
    the source file itself says; 0 for a file without compactions."""
    if not name.startswith("openhands"):
        return 0
    events = json.loads((FIXTURES / name).read_text())
    gone = {i for e in events if e.get("action") == "condensation" for i in e["args"]["forgotten_event_ids"]}
    tool_actions = {e["id"] for e in events if "action" in e and "tool_call_metadata" in e}
    return sum(1 for e in events if e.get("id") in gone and "observation" in e and e.get("cause") in tool_actions)
