"""OpenHands event arrays (a trajectory export: `event_to_trajectory` dicts) as an import plan.

An event is an action (`action`, `args`) or an observation (`observation`, `content`, `extras`,
and `cause`: the id of the action it answers). Actions the model asked for carry
`tool_call_metadata` (`function_name`, `tool_call_id`, `model_response`, `total_calls_in_response`);
the actions of one model response share its `model_response.id` and become one reply. A
`condensation` action (`forgotten_event_ids` or a `forgotten_events_start_id`..`end_id` range,
and a `summary`) means the log is not what the model saw afterwards: it becomes a `Compaction`
forgetting those events (the first user message stays, as OpenHands keeps its first events),
and the forgotten ids are kept in the facts. A `finish`
call has no observation: the ledger closes it as a lost call.
"""

from __future__ import annotations

from typing import Any

from runfold.core.exact_json import dumps_exact
from runfold.core.messages import Block
from runfold.importers.common import call_block, ms, obj, text_blocks, text_of, whole_json
from runfold.importers.plan import (
    Compaction,
    Event,
    ImportPlan,
    Reply,
    Result,
    Session,
    Text,
    as_int,
    bad_source,
    check_version,
)

FORMAT = "openhands"
SKIP_OBSERVATIONS = frozenset({"agent_state_changed", "null", "user_rejected", "success"})
KNOWN_MAJOR = frozenset({"0"})
"""The OpenHands major versions (the system action's `openhands_version`) this build reads."""
SUPPORTED = (
    "this build reads OpenHands 0.x trajectories: a JSON array of events, each an `action` "
    "(with `args`) or an `observation` (with `cause`)"
)


def detect(data: bytes) -> bool:
    """Whether `data` looks like an OpenHands event array."""
    head = data[:65536].lstrip()
    return head[:1] == b"[" and (b'"action"' in head or b'"observation"' in head) and b'"source"' in head


def parse(data: bytes, source: str) -> ImportPlan:
    """The plan of an event array (see the module docstring). Raises `E_INVALID_ARGS` naming the
    event index for malformed JSON, an `openhands_version` or event layout (1.x `kind` events)
    this build does not know, an event that is neither action nor observation, or an
    observation whose `cause` names no earlier tool action."""
    value = whole_json(FORMAT, source, data)
    if not isinstance(value, list):
        raise bad_source(
            FORMAT,
            source,
            "the top level",
            "an OpenHands trajectory is an array of events",
            "give an event array",
        )
    events: list[Event] = []
    skipped: list[tuple[str, str]] = []
    facts: dict[str, str] = {}
    system: str | None = None
    model: str = ""
    call_of: dict[int, str] = {}  # action event id → tool_call_id
    reply_at: dict[str, int] = {}  # model_response id → index in events
    forgotten: list[str] = []
    where_of: dict[int, str] = {}  # event id → its source position
    for i, ev in enumerate(value):
        where = f"event {i}" + (f" (id {ev.get('id')})" if isinstance(ev, dict) and "id" in ev else "")
        if isinstance(ev, dict) and "id" in ev:
            where_of.setdefault(as_int(ev.get("id")), where)
        if isinstance(ev, dict) and isinstance(ev.get("kind"), str):
            raise bad_source(  # the 1.x agent SDK writes typed events (`kind: ActionEvent`...)
                FORMAT,
                source,
                where,
                f"an event of kind {ev.get('kind')!r} is the OpenHands 1.x event layout, which this build "
                f"does not know; {SUPPORTED}",
                "export the trajectory from OpenHands 0.x, or upgrade runfold",
            )
        if not isinstance(ev, dict) or ("action" not in ev and "observation" not in ev):
            raise bad_source(
                FORMAT,
                source,
                where,
                "the event is neither an action nor an observation",
                "every event has `action` or `observation`; repair or remove it",
            )
        t = ms(ev.get("timestamp"))
        args = obj(ev.get("args"))
        meta = ev.get("tool_call_metadata") if isinstance(ev.get("tool_call_metadata"), dict) else None
        if "action" in ev:
            action = ev["action"]
            if action == "system":
                system = text_of(args.get("content"))
                version = args.get("openhands_version")
                at = f"{where} args.openhands_version"
                check_version(FORMAT, source, at, "OpenHands", version, KNOWN_MAJOR, SUPPORTED)
                if isinstance(version, str):
                    facts["openhands_version"] = version
                continue
            if action == "condensation":
                ids = args.get("forgotten_event_ids")
                start, end = args.get("forgotten_events_start_id"), args.get("forgotten_events_end_id")
                if isinstance(ids, list):
                    forgotten.extend(str(x) for x in ids)
                    gone = [as_int(x) for x in ids]
                elif start is not None:
                    forgotten.append(f"{start}..{end}")
                    gone = list(range(as_int(start), as_int(end if end is not None else start) + 1))
                else:
                    gone = []
                summary = text_of(args.get("summary"))
                if summary.strip():
                    lost = tuple(where_of[x] for x in gone if x in where_of)
                    events.append(Compaction(summary, (where,), lost, True, t))
                else:
                    skipped.append((where, "condensation without a summary (events forgotten)"))
                continue
            if meta is not None:
                call_id = str(meta.get("tool_call_id"))
                call_of[as_int(ev.get("id"))] = call_id
                response = obj(meta.get("model_response"))
                model = str(response.get("model") or model)
                rid = str(response.get("id") or where)
                block = call_block(
                    call_id, str(meta.get("function_name") or action), _arguments(response, call_id, args)
                )
                if rid in reply_at:
                    k = reply_at[rid]
                    prev = events[k]
                    assert isinstance(prev, Reply)
                    events[k] = Reply(
                        (*prev.blocks, block),
                        (*prev.origin, where),
                        prev.model,
                        prev.usage,
                        prev.stop,
                        prev.t,
                    )
                    continue
                reply_at[rid] = len(events)
                blocks: list[Block] = [*text_blocks(_said(response, args)), block]
                events.append(
                    Reply(
                        tuple(blocks), (where,), str(response.get("model") or ""), _usage(response), None, t
                    )
                )
                continue
            if action == "message":
                text = text_of(args.get("content"))
                if ev.get("source") == "user":
                    events.append(Text("person", text, (where,), t))
                else:
                    events.append(Reply(tuple(text_blocks(text)), (where,), model, None, None, t))
                continue
            skipped.append((where, f"action {action} (not a model call)"))
            continue
        obs = ev.get("observation") if isinstance(ev.get("observation"), str) else None
        cause = ev.get("cause")
        if obs == "recall" and text_of(ev.get("content")).strip():
            events.append(Text("runtime", text_of(ev.get("content")), (where,), t))
            continue
        if cause is None or obs in SKIP_OBSERVATIONS or (meta is None and as_int(cause) not in call_of):
            skipped.append((where, f"observation {obs} (answers no tool call)"))
            continue
        answered = call_of.get(as_int(cause))
        if answered is None:
            raise bad_source(
                FORMAT,
                source,
                where,
                f"the observation's cause {cause} names no earlier tool action",
                "the array is missing the action this answers (cut or edited); export the whole trajectory again",
            )
        events.append(Result(answered, text_of(ev.get("content")), obs == "error", (where,), t))
    if forgotten:
        facts["forgotten_event_ids"] = ",".join(forgotten)
    return ImportPlan(
        FORMAT, source, (Session("main", tuple(events), model, system, None, facts),), tuple(skipped)
    )


def _message(response: dict[str, Any]) -> dict[str, Any]:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    msg = first.get("message")
    return msg if isinstance(msg, dict) else {}


def _said(response: dict[str, Any], args: dict[str, Any]) -> str:
    """The text the model wrote beside its calls: the response's content, else the action's thought."""
    text = text_of(_message(response).get("content"))
    return text if text.strip() else text_of(args.get("thought"))


def _arguments(response: dict[str, Any], call_id: str, args: dict[str, Any]) -> Any:
    """The call's arguments as the model wrote them (from `model_response`), else the action's args."""
    for tc in _message(response).get("tool_calls") or []:
        if isinstance(tc, dict) and tc.get("id") == call_id and isinstance(tc.get("function"), dict):
            return tc["function"].get("arguments")
    return dumps_exact(
        {k: v for k, v in args.items() if k not in ("thought", "is_input", "hidden", "blocking")}
    )


def _usage(response: dict[str, Any]) -> dict[str, int] | None:
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = as_int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return {
        "input": max(as_int(usage.get("prompt_tokens")) - cached, 0),
        "output": as_int(usage.get("completion_tokens")),
        "cache_read": cached,
        "cache_write": 0,
    }
