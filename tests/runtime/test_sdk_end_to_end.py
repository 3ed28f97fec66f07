"""End to end through each official SDK against the provider test server: the executor
sends exact bytes through the `anthropic`/`openai` providers; a session with a 429, a 500, a cut
stream, a parallel wave, a tool error and a refused write ends with a valid ledger, no request is
rejected by the server, the server received exactly the hashed bytes, and replay is byte-exact."""

from __future__ import annotations

from typing import Any

import pytest
from rt_support import calls, check_finished, run_lines, text

from provider_server import ProviderServer
from runfold.api import Workspace
from runfold.core.canonical import content_hash
from runfold.core.payloads import ModelCalled, ToolResult
from runfold.providers.base import Provider
from runfold.runtime import RetryPolicy

MODEL = "test-model"


def provider(dialect: str, server: ProviderServer) -> Provider:
    return server.provider(dialect, MODEL)


SESSION: list[dict[str, Any]] = [
    {"fault": "http_429", "retry_after_ms": 5},
    calls(
        [
            ("call_1", "read_file", {"path": "todo.md"}),
            ("call_2", "list_dir", {}),
            ("call_3", "no_such_tool", {}),
            ("call_4", "write_file", {"path": "../other/escape.txt", "content": "x"}),
        ],
        say="Looking around.",
        usage={"input": 120, "output": 30, "cache_read": 0, "cache_write": 0},
    ),
    {"fault": "http_500"},
    {"fault": "cut_stream", "after_events": 2},
    calls([("call_5", "write_file", {"path": "done.txt", "content": "ok"})]),
    text("Done: wrote done.txt.", usage={"input": 300, "output": 12, "cache_read": 200, "cache_write": 0}),
]


@pytest.mark.parametrize("dialect", ["anthropic", "openai-chat", "openai-responses"])
def test_session_through_the_official_sdk(ws: Workspace, dialect: str) -> None:
    pytest.importorskip("anthropic" if dialect == "anthropic" else "openai")
    with ProviderServer(SESSION) as server:
        p = provider(dialect, server)
        out = ws.run("tidy the room", model=p, room="work", retry=RetryPolicy(1, 10, 5))
        received = server.requests
    assert out.completion == "done", out.reason
    assert [r.error for r in received if r.entry is None] == []  # nothing rejected by the rules
    lines = run_lines(ws, out.run_id)
    called = [r.typed(ModelCalled) for r in lines if r.kind_name == "model_called"]
    assert len(called) == len(received) == 6
    assert [c.request.hash for c in called] == [content_hash(r.raw) for r in received]
    assert [r.kind_name for r in lines].count("watchdog_fired") == 3
    results = {
        r.typed(ToolResult).tool_use_id: r.typed(ToolResult) for r in lines if r.kind_name == "tool_result"
    }
    assert results["call_3"].error is not None and results["call_4"].error is not None
    assert results["call_4"].error["code"] == "E_OUTSIDE_WRITE_DOMAIN"
    assert (ws.root / "work" / "done.txt").read_text() == "ok"
    assert out.usage.input >= 420 and out.usage.cache_read == 200
    replay = check_finished(ws, out)
    assert replay.exact == 6
