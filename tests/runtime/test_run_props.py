"""Property test over random scripted sessions: whatever the model does — parallel
waves, tool errors, refused writes, retries, text, empty replies, output ceilings, running out of
replies — every run ends with handoff_written + run_frozen, the ledger verifies, replay reports
N/N byte-exact, every request passes the validator, and request n+1 extends request n at message
granularity."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rt_support import calls, check_finished, run_lines, text

from runfold.api import Workspace
from runfold.core.conversation import conversation_shape
from runfold.core.validate import validate
from runfold.providers.scripted import ScriptedProvider
from runfold.runtime import RetryPolicy

CALL_KINDS = (
    ("read_file", {"path": "notes.txt"}),
    ("read_file", {"path": "missing.txt"}),
    ("list_dir", {}),
    ("search", {"pattern": "alpha"}),
    ("write_file", {"path": "out.txt", "content": "x"}),
    ("write_file", {"path": "../other/escape.txt", "content": "x"}),
    ("edit_file", {"path": "todo.md", "old": "one", "new": "uno"}),
    ("no_such_tool", {}),
    ("read_file", "{oops"),
)
FAULTS = ("http_429", "http_500", "cut_stream")


@st.composite
def sessions(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]]]:
    dialect = draw(st.sampled_from(("anthropic", "openai-chat", "openai-responses")))
    entries: list[dict[str, Any]] = []
    n = 0
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.integers(0, 5)) == 0:
            entries.append({"fault": draw(st.sampled_from(FAULTS))})
        picks = draw(st.lists(st.integers(0, len(CALL_KINDS) - 1), min_size=1, max_size=3))
        items = []
        for i in picks:
            n += 1
            name, args = CALL_KINDS[i]
            items.append((f"call_{n}", name, args))
        say = draw(st.sampled_from((None, "Let me check.", "  ")))
        entries.append(calls(items, say=say))
    end = draw(st.sampled_from(("done", "empty", "max_tokens", "none")))
    if end == "done":
        entries.append(text("All done."))
    elif end == "empty":
        entries.append({"content": []})
    elif end == "max_tokens":
        entries.append(text("and then", stop="max_tokens"))
    return dialect, entries


def bodies_messages(dialect: str, body: dict[str, Any]) -> list[Any]:
    items = body["input"] if dialect == "openai-responses" else body["messages"]
    return [_strip_cache(m) for m in items]


def _strip_cache(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache(v) for v in value]
    return value


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_random_scripted_sessions_keep_every_invariant(session: tuple[str, list[dict[str, Any]]]) -> None:
    dialect, entries = session
    tmp = Path(tempfile.mkdtemp())
    try:
        ws = Workspace.init(tmp / "ws")
        (tmp / "ws" / "notes.txt").write_text("alpha\n")
        (tmp / "ws" / "work").mkdir()
        (tmp / "ws" / "work" / "todo.md").write_text("one\n")
        (tmp / "ws" / "other").mkdir()
        p = ScriptedProvider.of(entries, dialect=dialect)
        out = ws.run("do the thing", model=p, room="work", retry=RetryPolicy(1, 2, 5))
        assert out.completion in ("done", "limit", "failed")
        report = check_finished(ws, out)
        assert report.exact == report.requests == len(p.requests)
        previous: list[Any] | None = None
        for req in p.requests:
            assert validate(dialect, req.body) == []
            msgs = bodies_messages(dialect, req.body)
            assert conversation_shape(previous, msgs) != "rewritten"
            previous = msgs
        assert not (tmp / "ws" / "other" / "escape.txt").exists()
        if out.completion == "done":
            assert run_lines(ws, out.run_id)[-1].env.data["evidence"]
        ws.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
