"""SWE-agent trajectories (`.traj`) as an import plan.

The run's conversation is the top-level `history` (OpenAI function-calling messages; a tool
message answers by `tool_call_ids`, a list). Each `trajectory` step's `query` (`messages` before
1.1.0) is only what that step sent after the history processors elided old observations, so the
last step's is not the whole run: it is read only when a file has no `history`.
"""

from __future__ import annotations

from typing import Any

from runfold.importers.common import obj, whole_json
from runfold.importers.openai_chat import chat_events
from runfold.importers.plan import ImportPlan, Session, bad_source, check_version

FORMAT = "swe-agent"
KNOWN_MAJOR = frozenset({"0", "1"})
SUPPORTED = "this build reads the trajectories of SWE-agent 0.x and 1.x"


def detect(data: bytes) -> bool:
    """Whether `data` looks like a SWE-agent trajectory."""
    head = data[:65536].lstrip()
    return (
        head[:1] == b"{"
        and (b'"history"' in head or b'"trajectory"' in head)
        and (b'"message_type"' in head or b'"tool_call_ids"' in head or b'"swe_agent_version"' in head)
    )


def parse(data: bytes, source: str) -> ImportPlan:
    """The plan of a `.traj` file (see the module docstring). Raises `E_INVALID_ARGS` for
    malformed JSON, a SWE-agent version this build does not know, or a file with neither
    `history` nor `trajectory`."""
    value = whole_json(FORMAT, source, data)
    if not isinstance(value, dict):
        raise bad_source(
            FORMAT, source, "the top level", "a trajectory is a JSON object", "give a .traj file"
        )
    info = obj(value.get("info"))
    facts: dict[str, str] = {}
    version = info.get("swe_agent_version")
    check_version(FORMAT, source, "info.swe_agent_version", "SWE-agent", version, KNOWN_MAJOR, SUPPORTED)
    if isinstance(version, str):
        facts["swe_agent_version"] = version
    for key in ("exit_status", "submission"):
        if isinstance(info.get(key), str):
            facts[key] = info[key][:200]
    skipped: list[tuple[str, str]] = []
    messages: Any = value.get("history")
    where = "history"
    steps = value.get("trajectory")
    if isinstance(steps, list) and steps:
        skipped.append(
            ("trajectory", f"{len(steps)} steps (each step's query is what it sent, not the whole run)")
        )
    if not isinstance(messages, list):
        last = obj(steps[-1]) if isinstance(steps, list) and steps else {}
        holder = "query" if isinstance(last.get("query"), list) else "messages"
        messages = last.get(holder)
        where = f"trajectory[{len(steps) - 1 if isinstance(steps, list) else 0}].{holder}"
        if not isinstance(messages, list):
            raise bad_source(
                FORMAT,
                source,
                "the top level",
                "the file has neither history nor a trajectory step with messages",
                "give a complete .traj file",
            )
        facts["partial"] = (
            "the file has no history; read from the last step's messages (older observations may be elided)"
        )
    events, system, model = chat_events(messages, where, FORMAT, source)
    return ImportPlan(
        FORMAT, source, (Session("main", tuple(events), model, system, None, facts),), tuple(skipped)
    )
