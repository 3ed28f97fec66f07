"""One-line summaries of ledger lines, shared by the CLI (`runfold log`, `runfold show`) and the
web page's timeline.

`summarize(env)` reads the raw `data` object defensively (foreign and old lines may lack fields
or carry extra ones) and names what matters per kind: a tool call's name and subject, a steer's
source and text head, a reply's calls/stop/tokens, a freeze's completion. `SUMMARIZERS` covers
every `Kind` (a test enumerates it) so a new kind forces a decision here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from runfold.core.canonical import Envelope
from runfold.core.figures import count, usd
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.kinds import Kind

HEAD_CHARS = 60
"""Characters of free text (task, steer, reply text) shown in a summary."""

DAY_MS = 86_400_000


def _civil(days: int) -> tuple[int, int, int]:
    """The proleptic Gregorian (year, month, day) `days` days after 1970-01-01 (H. Hinnant's
    `civil_from_days`, exact for any integer)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def iso_ms(t: int) -> str:
    """UTC milliseconds since the epoch as ISO 8601 with milliseconds and `Z`, e.g.
    `2026-11-30T15:00:00.123Z`; `t=<t>` outside the years 1..9999. Pure arithmetic (the core
    reads no clock and imports no `datetime`)."""
    days, ms = divmod(t, DAY_MS)
    year, month, day = _civil(days)
    if not 1 <= year <= 9999:
        return f"t={t}"
    secs, milli = divmod(ms, 1000)
    return f"{year:04d}-{month:02d}-{day:02d}T{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}.{milli:03d}Z"


RunNames = Mapping[str, str]
"""Run id → how it is shown: `core.ids.short_run_ids` over every run of the ledger."""


def short_run(run: str, names: RunNames | None = None) -> str:
    """How a run named in a payload is shown: its entry in `names` (the shortest unique prefix,
    the same rule as every listing), else the whole id (always unique); `workspace` for the
    nil run."""
    if run == WORKSPACE_RUN:
        return "workspace"
    return names.get(run, run) if names is not None else run


def head(text: str, limit: int = HEAD_CHARS) -> str:
    """`text` on one line (whitespace runs collapsed), cut to `limit` characters with `…`, quoted."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return f'"{flat}"'


def _s(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _i(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _n(data: dict[str, Any], key: str) -> str:
    """The whole number at `key` as shown everywhere (`core.figures.count`), `0` when absent,
    the raw value when it is not a whole number."""
    value = data.get(key, 0)
    return count(value) if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _d(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _compact(value: Any, limit: int = HEAD_CHARS) -> str:
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _join(*parts: str | None) -> str:
    return " ".join(p for p in parts if p)


def _workspace_initialized(d: dict[str, Any]) -> str:
    fmt = _i(d, "format")
    return f"format {fmt}" if fmt is not None else ""


def _run_started(d: dict[str, Any], names: RunNames | None = None) -> str:
    task = _s(d, "task")
    goal = _s(d, "goal")
    parent = _s(d, "parent")
    predecessor = _s(d, "predecessor")
    return _join(
        f"task {head(task, 40)}" if task else None,
        f"goal {head(goal, 40)}" if goal else None,
        f"opening {d['opening']}" if _s(d, "opening") else None,
        f"parent {short_run(parent, names)}" if parent else None,
        f"predecessor {short_run(predecessor, names)}" if predecessor else None,
        f"model {d['model']}" if _s(d, "model") else None,
        _instructions(d.get("instructions")),
    )


def _instructions(pins: Any) -> str | None:
    if not isinstance(pins, list) or not pins:
        return None
    return "instructions " + ", ".join(str(p.get("name")) for p in pins if isinstance(p, dict))


def _run_forked(d: dict[str, Any], names: RunNames | None = None) -> str:
    mother = _s(d, "from") or "?"
    return f"from {short_run(mother, names)} at seq {_i(d, 'at_seq')}"


def _session_opened(d: dict[str, Any], names: RunNames | None = None) -> str:
    origin = _d(d, "from")
    carried = "carried" if d.get("carried") is True else "fresh"
    if origin:
        return f"{carried} from {short_run(str(origin.get('run', '?')), names)} at seq {origin.get('at_seq')}"
    return carried


def _prompt_assembled(d: dict[str, Any]) -> str:
    segments = d.get("segments")
    slots = (
        [s.get("slot", "?") for s in segments if isinstance(s, dict)] if isinstance(segments, list) else []
    )
    tools = _d(d, "tools")
    breakpoints = d.get("breakpoints")
    return _join(
        f"{len(slots)} segments ({', '.join(slots)})" if slots else "0 segments",
        f"tools {str(tools.get('hash', ''))[:8]} ({tools.get('bytes')} B)" if tools else None,
        f"{len(breakpoints)} breakpoints" if isinstance(breakpoints, list) else None,
    )


def _prompt_shape_compared(d: dict[str, Any]) -> str:
    moved = d.get("system_moved")
    return _join(
        f"conversation {d.get('conversation')}" if _s(d, "conversation") else None,
        f"{_i(d, 'messages')} messages" if _i(d, "messages") is not None else None,
        f"request {_n(d, 'request_bytes')} B" if _i(d, "request_bytes") is not None else None,
        f"system moved: {', '.join(map(str, moved))}" if isinstance(moved, list) and moved else None,
        "tools moved" if d.get("tools_moved") is True else None,
    )


def _model_called(d: dict[str, Any]) -> str:
    request = _d(d, "request")
    return _join(
        _s(d, "model") or "?",
        f"request {str(request.get('hash', ''))[:8]} ({_n(request, 'bytes')} B)" if request else None,
        f"attempt {_i(d, 'attempt')}" if _i(d, "attempt") is not None else None,
        f"for {_s(d, 'purpose')}" if _s(d, "purpose") else None,
    )


def _model_returned(d: dict[str, Any]) -> str:
    usage = _d(d, "usage")
    tokens = None
    if usage:
        tokens = f"tokens in {_n(usage, 'input')} out {_n(usage, 'output')}"
        if usage.get("cache_read") or usage.get("cache_write"):
            tokens += f" cache r {_n(usage, 'cache_read')} w {_n(usage, 'cache_write')}"
    text = ""
    content = _d(d, "message").get("content")
    if isinstance(content, list):
        texts = [str(b["text"]) for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
        if texts:
            text = head(" ".join(texts), 40)
    cost = _i(d, "billed_usd_micros")
    return _join(
        f"calls {_i(d, 'calls') or 0}",
        f"stop {d['stop']}" if _s(d, "stop") else None,
        tokens,
        usd(cost) if cost is not None else None,
        text or None,
    )


def _tool_called(d: dict[str, Any]) -> str:
    name = _s(d, "name") or "?"
    subject = _s(d, "subject")
    effect = _s(d, "effect")
    args = d.get("args")
    detail = subject if subject else (_compact(args, 40) if args not in (None, {}, "", "{}") else None)
    return _join(name, detail, f"({effect})" if effect else None, f"[{d['id']}]" if _s(d, "id") else None)


def _tool_result(d: dict[str, Any]) -> str:
    name = _s(d, "name") or "?"
    error = d.get("error")
    took = _i(d, "took_us")
    if isinstance(error, dict):
        outcome = f"error {error.get('code', '?')}"
    else:
        outcome = "ok"
    return _join(
        name,
        outcome,
        f"took {took / 1000:.1f} ms" if took is not None else None,
        f"[{d['tool_use_id']}]" if _s(d, "tool_use_id") else None,
    )


def _result_offloaded(d: dict[str, Any]) -> str:
    return _join(
        f"[{d.get('tool_use_id')}]",
        f"→ {_s(d, 'locator') or '?'}",
        f"({_n(d, 'bytes')} B)" if _i(d, "bytes") is not None else None,
    )


def _steer_received(d: dict[str, Any]) -> str:
    return f"{_s(d, 'source') or '?'}: {head(_s(d, 'text') or '')}"


def _signal_enqueued(d: dict[str, Any]) -> str:
    return _join(
        _s(d, "type") or "steer",
        f"from {_s(d, 'source') or '?'}",
        f"to {d['target']}" if _s(d, "target") else None,
        head(_s(d, "text") or "", 40),
    )


def _signal_consumed(d: dict[str, Any]) -> str:
    return f"signal {_s(d, 'signal') or '?'}"


def _context_changed(d: dict[str, Any]) -> str:
    delta = _i(d, "token_delta")
    return _join(
        f"region {_s(d, 'region') or '?'}",
        f"cause {_s(d, 'cause') or '?'}",
        f"strategy {_s(d, 'strategy')}" if _s(d, "strategy") else None,
        f"tokens {delta:+d}" if delta is not None else None,
    )


def _run_policy_changed(d: dict[str, Any]) -> str:
    return f"policy {', '.join(sorted(_d(d, 'policy')))}"


def _checkpoint_committed(d: dict[str, Any]) -> str:
    return f"job {d['job']}" if _s(d, "job") else ""


def _handoff_written(d: dict[str, Any]) -> str:
    next_step = _s(d, "next_step")
    return f"next {head(next_step)}" if next_step else head(_s(d, "overview") or "")


def _cancel_received(d: dict[str, Any]) -> str:
    return f"from {_s(d, 'source') or '?'}"


def _watchdog_fired(d: dict[str, Any]) -> str:
    return _join(
        _s(d, "reason") or "?",
        f"attempt {_i(d, 'attempt')}" if _i(d, "attempt") is not None else None,
        f"status {_i(d, 'status')}" if _i(d, "status") is not None else None,
        f"delay {_i(d, 'delay_ms')} ms" if _i(d, "delay_ms") is not None else None,
        head(_s(d, "detail") or "") or None,
    )


def _budget_limit(d: dict[str, Any]) -> str:
    return f"{_s(d, 'budget') or '?'} {_i(d, 'used')}/{_i(d, 'limit')}"


def _provider_degraded(d: dict[str, Any]) -> str:
    return _join(_s(d, "provider") or "?", head(_s(d, "detail") or "", 40))


def _gate_denied(d: dict[str, Any]) -> str:
    return f"{_s(d, 'rule') or '?'}: {head(_s(d, 'violation') or '', 40)}"


def _run_frozen(d: dict[str, Any]) -> str:
    evidence = d.get("evidence")
    seqs = [str(e.get("seq")) for e in evidence if isinstance(e, dict)] if isinstance(evidence, list) else []
    error = _d(d, "error")
    return _join(
        _s(d, "completion") or "?",
        f"evidence seq {', '.join(seqs)}" if seqs else None,
        f"cause {d['cause']}" if _s(d, "cause") else None,
        f"error {error.get('code')}" if error else None,
    )


def _log_truncated(d: dict[str, Any]) -> str:
    moved = _s(d, "quarantine")
    if moved:
        return f"moved {_n(d, 'dropped_bytes')} bytes to .runfold/{moved}"
    return f"dropped {_n(d, 'dropped_bytes')} bytes"


def _eval_run(d: dict[str, Any]) -> str:
    lost = d.get("lost")
    return _join(
        f"probe {_s(d, 'probe') or '?'} v{_i(d, 'version')}",
        f"kept {_i(d, 'kept')}",
        f"lost {len(lost)}" if isinstance(lost, list) else None,
    )


def _cache_renewed(d: dict[str, Any]) -> str:
    return _s(d, "reason") or ""


def _secret_captured(d: dict[str, Any]) -> str:
    names = d.get("names")
    where = d.get("where")
    return _join(
        f"{_i(d, 'count')} replaced",
        ", ".join(str(n) for n in names) if isinstance(names, list) else None,
        f"in {', '.join(str(w) for w in where)}" if isinstance(where, list) else None,
    )


def _session_imported(d: dict[str, Any]) -> str:
    digest = _s(d, "hash") or ""
    return _join(
        f"{_s(d, 'format') or '?'} {_s(d, 'source') or '?'}",
        f"session {_s(d, 'session')}" if _s(d, "session") else None,
        f"b3 {digest[:12]}…" if digest else None,
        f"map {_s(d, 'map')}" if _s(d, "map") else None,
    )


def _endpoint_attached(d: dict[str, Any]) -> str:
    tools = d.get("tools")
    count = len(tools) if isinstance(tools, list) else 0
    return _join(_s(d, "kind") or "?", _s(d, "name") or "?", f"({_s(d, 'transport') or '?'})", f"{count} tool(s)")


def _endpoint_lost(d: dict[str, Any]) -> str:
    return f"{_s(d, 'name') or '?'}: {head(_s(d, 'reason') or '', 60)}"


def _approval_requested(d: dict[str, Any]) -> str:
    return _join(_s(d, "tool") or "?", f"[{_s(d, 'class') or '?'}]", _s(d, "tool_use_id"))


def _approval_resolved(d: dict[str, Any]) -> str:
    reason = _s(d, "reason")
    return _join(
        _s(d, "decision") or "?", f"by {_s(d, 'by') or '?'}", _s(d, "tool_use_id"), f"({head(reason, 40)})" if reason else None
    )


def _signal_wait_started(d: dict[str, Any]) -> str:
    runs = d.get("for")
    names = [r[:13] for r in runs if isinstance(r, str)] if isinstance(runs, list) else []
    timeout = d.get("timeout_ms")
    return _join(f"for {', '.join(names) or '?'}", f"(timeout {timeout // 1000} s)" if isinstance(timeout, int) else None)


def _signal_wait_ended(d: dict[str, Any]) -> str:
    replied, pending = d.get("replied"), d.get("pending")
    n = len(replied) if isinstance(replied, list) else 0
    return _join(
        f"ended {_s(d, 'outcome') or '?'}",
        f"{n} {'reply' if n == 1 else 'replies'}",
        f"{len(pending)} pending" if isinstance(pending, list) and pending else None,
    )


SUMMARIZERS: dict[Kind, Callable[[dict[str, Any]], str]] = {
    Kind.WORKSPACE_INITIALIZED: _workspace_initialized,
    Kind.RUN_STARTED: _run_started,
    Kind.RUN_FORKED: _run_forked,
    Kind.SESSION_OPENED: _session_opened,
    Kind.PROMPT_ASSEMBLED: _prompt_assembled,
    Kind.PROMPT_SHAPE_COMPARED: _prompt_shape_compared,
    Kind.MODEL_CALLED: _model_called,
    Kind.MODEL_RETURNED: _model_returned,
    Kind.TOOL_CALLED: _tool_called,
    Kind.TOOL_RESULT: _tool_result,
    Kind.RESULT_OFFLOADED: _result_offloaded,
    Kind.STEER_RECEIVED: _steer_received,
    Kind.SIGNAL_ENQUEUED: _signal_enqueued,
    Kind.SIGNAL_CONSUMED: _signal_consumed,
    Kind.CONTEXT_CHANGED: _context_changed,
    Kind.RUN_POLICY_CHANGED: _run_policy_changed,
    Kind.CHECKPOINT_COMMITTED: _checkpoint_committed,
    Kind.HANDOFF_WRITTEN: _handoff_written,
    Kind.CANCEL_RECEIVED: _cancel_received,
    Kind.WATCHDOG_FIRED: _watchdog_fired,
    Kind.BUDGET_LIMIT: _budget_limit,
    Kind.PROVIDER_DEGRADED: _provider_degraded,
    Kind.GATE_DENIED: _gate_denied,
    Kind.RUN_FROZEN: _run_frozen,
    Kind.LOG_TRUNCATED: _log_truncated,
    Kind.EVAL_RUN: _eval_run,
    Kind.CACHE_RENEWED: _cache_renewed,
    Kind.SECRET_CAPTURED: _secret_captured,
    Kind.SESSION_IMPORTED: _session_imported,
    Kind.ENDPOINT_ATTACHED: _endpoint_attached,
    Kind.ENDPOINT_LOST: _endpoint_lost,
    Kind.APPROVAL_REQUESTED: _approval_requested,
    Kind.APPROVAL_RESOLVED: _approval_resolved,
    Kind.SIGNAL_WAIT_STARTED: _signal_wait_started,
    Kind.SIGNAL_WAIT_ENDED: _signal_wait_ended,
}


_NAMING_RUNS: dict[Kind, Callable[[dict[str, Any], RunNames | None], str]] = {
    Kind.RUN_STARTED: _run_started,
    Kind.RUN_FORKED: _run_forked,
    Kind.SESSION_OPENED: _session_opened,
}
"""The summaries that name other runs: they show them as `names` says."""


def summarize(env: Envelope, names: RunNames | None = None) -> str:
    """A one-line summary of a line's payload (no newline); never raises on odd payloads.
    `names`: how the runs it names are shown (see `short_run`)."""
    try:
        kind = Kind(env.kind)
    except ValueError:
        return f"(kind unknown to this build, skipped) {_compact(env.data)}"
    try:
        naming = _NAMING_RUNS.get(kind)
        return naming(env.data, names) if naming is not None else SUMMARIZERS[kind](env.data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return _compact(env.data)
