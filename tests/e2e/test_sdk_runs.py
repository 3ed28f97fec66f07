"""`runfold run` through each official SDK against the provider test server.

The SDKs are pointed at the local server with ANTHROPIC_BASE_URL / OPENAI_BASE_URL, nothing is
patched. One scripted session — thinking/reasoning, parallel tool calls, a tool error, a write
refused outside the room, a 429, a 500 and a cut stream, each followed by success — is driven
through the command line in every dialect. Every run must end `done` with a verified ledger, no
request refused by the server, the bytes the server received equal to the hashes in
`model_called`, and `runfold replay` byte-exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_support import run_cli

from provider_server import ProviderServer
from runfold.api import Workspace
from runfold.core.canonical import content_hash
from runfold.core.payloads import ModelCalled, ToolResult

THINK = {"kind": "thinking", "thinking": "Read a.md and list the room first.", "signature": "sig/EqQB+==é1"}


def use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}


SESSION: list[dict[str, Any]] = [
    {"fault": "http_429", "retry_after_ms": 1},
    {
        "content": [
            THINK,
            {"kind": "text", "text": "Looking at the room — two reads at once."},
            use("call_a1", "read_file", {"path": "a.md"}),
            use("call_b2", "list_dir", {"path": "."}),
        ],
        "usage": {"input": 900, "output": 40, "cache_read": 0, "cache_write": 800},
    },
    {"fault": "http_500"},
    {
        "content": [
            use("call_c3", "write_file", {"path": "../notes.md", "content": "overwritten"}),
            use("call_d4", "read_file", {"path": "missing.md"}),
        ],
        "usage": {"input": 60, "output": 30, "cache_read": 900, "cache_write": 0},
    },
    {"fault": "cut_stream", "after_events": 3},
    {
        "content": [use("call_e5", "write_file", {"path": "summary.md", "content": "a.md says: alpha\n"})],
        "usage": {"input": 80, "output": 25, "cache_read": 950, "cache_write": 0},
    },
    {
        "content": [{"kind": "text", "text": "Wrote summary.md in the room."}],
        "usage": {"input": 40, "output": 9, "cache_read": 1000, "cache_write": 0},
    },
]

FAMILIES = {
    "anthropic": (
        "anthropic:test-model",
        "ANTHROPIC",
        '[providers.anthropic]\nthinking = {type = "enabled", budget_tokens = 1024}\n',
    ),
    "openai-chat": ("openai:test-model", "OPENAI", ""),
    "openai-responses": (
        "openai-responses:test-model",
        "OPENAI",
        '[providers.openai-responses]\nthinking = {effort = "low", summary = "auto"}\n',
    ),
}


def workspace(tmp_path: Path, config: str) -> Path:
    root = tmp_path / "ws"
    Workspace.init(root)
    (root / "notes.md").write_text("keep me\n", encoding="utf-8")
    (root / "docs").mkdir()
    (root / "docs" / "a.md").write_text("alpha\n", encoding="utf-8")
    (root / ".runfold" / "config.toml").write_text(config, encoding="utf-8")
    return root


def env_for(prefix: str, server: ProviderServer) -> dict[str, str]:
    url = server.anthropic_url if prefix == "ANTHROPIC" else server.openai_url
    return {f"{prefix}_API_KEY": "test-key", f"{prefix}_BASE_URL": url}


def drive(
    tmp_path: Path, dialect: str, script: list[dict[str, Any]], stream: bool
) -> tuple[Path, dict[str, Any], ProviderServer]:
    spec, prefix, config = FAMILIES[dialect]
    table = f"[providers.{spec.partition(':')[0]}]"
    if not stream:
        config = (config or table + "\n") + "stream = false\n"
    root = workspace(tmp_path, config)
    with ProviderServer(script) as server:
        res = run_cli(
            "run",
            "summarize a.md into summary.md",
            "--model",
            spec,
            "--room",
            "docs",
            "--json",
            "-w",
            root,
            cwd=root,
            env=env_for(prefix, server),
        )
    assert res.code == 0, res.out + res.err
    return root, json.loads(res.out), server


def check_wire(root: Path, run: str, server: ProviderServer, n_entries: int) -> None:
    """No request refused; each request the server got is byte-for-byte the one hashed."""
    got = server.requests
    # a refused request takes no script entry: every request here was answered from the script
    assert all(r.entry is not None for r in got), [(r.status, r.error) for r in got]
    assert len(got) == n_entries and server.remaining == 0
    ws = Workspace.open(root)
    recorded = [r.typed(ModelCalled).request for r in ws.records(run=run, kind="model_called")]
    assert [content_hash(r.raw) for r in got] == [r.hash for r in recorded]
    assert [len(r.raw) for r in got] == [r.bytes for r in recorded]
    assert run_cli("verify", "-w", root, cwd=root).code == 0
    replay = run_cli("replay", run, "-w", root, cwd=root)
    assert replay.code == 0 and f"ok: {len(recorded)}/{len(recorded)} requests byte-exact" in replay.out


@pytest.mark.parametrize("dialect", list(FAMILIES))
def test_full_session_with_faults_through_the_sdk(tmp_path: Path, dialect: str) -> None:
    root, out, server = drive(tmp_path, dialect, SESSION, stream=True)
    assert out["completion"] == "done" and out["turns"] == 4 and out["attempts"] == 7
    assert out["tool_calls"] == 5
    check_wire(root, out["run"], server, len(SESSION))
    ws = Workspace.open(root)
    lines = ws.records(run=out["run"])
    kinds = [r.kind_name for r in lines]
    assert kinds.count("watchdog_fired") == 3
    # parallel calls: both lines of the wave in call order
    called = [r.env.data["id"] for r in lines if r.kind_name == "tool_called"]
    assert called == ["call_a1", "call_b2", "call_c3", "call_d4", "call_e5"]
    results = {
        r.typed(ToolResult).tool_use_id: r.typed(ToolResult) for r in lines if r.kind_name == "tool_result"
    }
    assert results["call_a1"].result is not None
    assert (
        results["call_c3"].error is not None and results["call_c3"].error["code"] == "E_OUTSIDE_WRITE_DOMAIN"
    )
    assert results["call_d4"].error is not None and results["call_d4"].error["code"] == "E_PATH_NOT_FOUND"
    assert (root / "notes.md").read_text() == "keep me\n"
    assert (root / "docs" / "summary.md").read_text() == "a.md says: alpha\n"
    if dialect != "openai-chat":  # Chat carries no thinking
        first_reply = next(r for r in lines if r.kind_name == "model_returned")
        blocks = first_reply.env.data["message"]["content"]
        assert blocks[0]["kind"] == "thinking" and blocks[0]["signature"] == THINK["signature"]
    # cache tokens are counted and shown
    cost = json.loads(run_cli("cost", out["run"], "--json", "-w", root, cwd=root).out)
    assert cost["total"]["usage"]["cache_read"] == 2850


@pytest.mark.parametrize("dialect", list(FAMILIES))
def test_short_session_without_streaming(tmp_path: Path, dialect: str) -> None:
    script = [SESSION[1], SESSION[-1]]
    root, out, server = drive(tmp_path, dialect, script, stream=False)
    assert out["completion"] == "done" and out["tool_calls"] == 2
    assert not any(r.stream for r in server.requests)
    check_wire(root, out["run"], server, len(script))


def test_openai_compatible_server_by_base_url(tmp_path: Path) -> None:
    """`openai-compat:<model>@<base-url>`: the base URL comes from the SPEC, not the environment."""
    root = workspace(tmp_path, "")
    script = [SESSION[1], SESSION[-1]]
    with ProviderServer(script) as server:
        res = run_cli(
            "run",
            "summarize a.md",
            "--model",
            f"openai-compat:local-llm@{server.openai_url}",
            "--room",
            "docs",
            "--json",
            "-w",
            root,
            cwd=root,
            env={"OPENAI_API_KEY": "any-key", "OPENAI_BASE_URL": "http://127.0.0.1:9/unused"},
        )
    assert res.code == 0, res.out + res.err
    out = json.loads(res.out)
    assert out["completion"] == "done"
    assert {r.dialect for r in server.requests} == {"openai-chat"}
    check_wire(root, out["run"], server, len(script))
