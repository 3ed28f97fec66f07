"""`--record`: a real session (the official SDK against the provider test server) recorded to a
JSONL script replays through `script:FILE` to the same `model_called` request hashes, fault
attempts included; the file is in the scripted model's form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provider_server import ProviderServer
from runfold.api import Workspace
from runfold.core.errors import Retry
from runfold.providers.anthropic import AnthropicProvider
from runfold.providers.base import ProviderError, Reply, Usage
from runfold.providers.openai_chat import OpenAIChatProvider
from runfold.providers.recording import RecordingProvider, fault_entry, read_header, reply_entry
from runfold.providers.scripted import ScriptedProvider, load_script
from runfold.runtime import RetryPolicy

FAST = RetryPolicy(base_ms=1, cap_ms=20, max_attempts=4)
SESSION: list[dict[str, Any]] = [
    {
        "content": [
            {"kind": "text", "text": "Let me look at both."},
            {"kind": "tool_use", "id": "toolu_1", "name": "list_dir", "input": '{"path": "."}'},
            {"kind": "tool_use", "id": "toolu_2", "name": "read_file", "input": '{"path": "notes.txt"}'},
        ],
        "usage": {"input": 120, "output": 30, "cache_read": 0, "cache_write": 100},
    },
    {"fault": "http_429", "retry_after_ms": 5},
    {"fault": "http_500"},
    {"content": [{"kind": "text", "text": "The folder holds notes.txt, which says hello."}]},
]


def workspace(root: Path) -> Workspace:
    root.mkdir()
    (root / "notes.txt").write_text("hello\n")
    return Workspace.init(root)


def request_hashes(ws: Workspace, run: str) -> list[str]:
    return [r.env.data["request"]["hash"] for r in ws.records(run=run) if r.env.kind == "model_called"]


@pytest.mark.parametrize("dialect", ["anthropic", "openai-chat"])
def test_recorded_session_replays_through_script_to_the_same_request_hashes(
    tmp_path: Path, dialect: str
) -> None:
    recording = tmp_path / "session.jsonl"
    live_ws = workspace(tmp_path / "live")
    with ProviderServer(SESSION) as server:
        inner: Any = (
            AnthropicProvider("claude-test", api_key="k", base_url=server.anthropic_url, max_tokens=1024)
            if dialect == "anthropic"
            else OpenAIChatProvider("gpt-test", api_key="k", base_url=server.openai_url, max_tokens=1024)
        )
        live = live_ws.run("What is in this folder?", model=RecordingProvider(inner, recording), retry=FAST)
        statuses = [r.status for r in server.requests]
    assert live.completion == "done", live.reason
    assert live.attempts == 4 and live.turns == 2
    assert statuses == [200, 429, 500, 200]  # no request refused by the provider's rules

    header = read_header(recording)
    assert header is not None and header["dialect"] == dialect and header["max_tokens"] == 1024
    entries = load_script(recording)  # the scripted model's own parser accepts the file
    assert [e.fault for e in entries] == [None, "http_429", "http_500", None]
    assert entries[1].retry_after_ms == 5
    assert entries[0].blocks[1]["input"] == '{"path": "."}'

    replay_ws = workspace(tmp_path / "replay")
    replayed = replay_ws.run("What is in this folder?", model=f"script:{recording}", retry=FAST)
    assert replayed.completion == "done" and replayed.attempts == 4
    live_hashes = request_hashes(live_ws, live.run_id)
    assert len(live_hashes) == 4
    assert request_hashes(replay_ws, replayed.run_id) == live_hashes
    report = replay_ws.replay(replayed.run_id)
    assert report.exact == report.requests == 4


def test_entry_forms() -> None:
    reply = Reply(
        [{"kind": "text", "text": "hi"}], "end_turn", Usage(input=3, output=1, cache_read=2, cache_write=0)
    )
    assert reply_entry(reply) == {
        "content": [{"kind": "text", "text": "hi"}],
        "stop": "end_turn",
        "usage": {"cache_read": 2, "cache_write": 0, "input": 3, "output": 1},
    }
    assert "stop" not in reply_entry(Reply([], "pause_turn"))

    def err(status: int | None, retryable: bool, after: int | None = None) -> ProviderError:
        return ProviderError("x", status=status, retryable=retryable, retry_after_ms=after)

    assert fault_entry(err(429, True, 800)) == {"fault": "http_429", "retry_after_ms": 800}
    assert fault_entry(err(503, True)) == {"fault": "http_500"}
    assert fault_entry(err(529, True)) == {"fault": "http_529"}
    assert fault_entry(err(None, True)) == {"fault": "cut_stream"}
    assert fault_entry(err(400, False)) == {"fault": "http_400_refusal"}
    assert fault_entry(err(401, False)) is None
    assert err(None, True).retry is Retry.YES


def test_recording_appends_and_keeps_one_header(tmp_path: Path) -> None:
    import asyncio

    from runfold.providers.base import Request

    path = tmp_path / "rec.jsonl"
    for _ in range(2):
        inner = ScriptedProvider.of([{"content": [{"kind": "text", "text": "ok"}]}], model="m")
        rec = RecordingProvider(inner, path)
        assert (
            rec.dialect == "anthropic"
            and rec.model == "m"
            and rec.settings.max_tokens == inner.settings.max_tokens
        )
        asyncio.run(rec.complete(Request("anthropic", "m", {}, b"{}", False)))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert ["recorded" in line for line in lines] == [True, False, False]
    provider = ScriptedProvider.from_file(path)
    assert (provider.model, provider.dialect, provider.remaining) == ("m", "anthropic", 2)
    assert ScriptedProvider.from_file(path, dialect="openai-chat").dialect == "openai-chat"
