"""MCP servers written with the official SDK, started by runs: their tools through each dialect's
official SDK against the provider test server, replay byte-exact without the server, a server
killed mid-call, streamable HTTP with headers, and `runfold mcp list`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.cli_support import run_cli
from provider_server import ProviderServer
from runfold.api import Workspace
from runfold.core.canonical import content_hash
from runfold.core.payloads import ModelCalled, ToolResult

SERVER = Path(__file__).with_name("mcp_server.py")

FAMILIES = {
    "anthropic": ("anthropic:test-model", "ANTHROPIC"),
    "openai-chat": ("openai:test-model", "OPENAI"),
    "openai-responses": ("openai-responses:test-model", "OPENAI"),
}


def use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}


def say(text: str) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": text}]}


def stdio_table(tmp_path: Path, name: str = "t") -> str:
    env = {"MCP_NOTES": str(tmp_path / "notes.txt"), "MCP_HANG_PID": str(tmp_path / "hang.pid")}
    return (
        f"[mcp.{name}]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(SERVER))}, \"stdio\"]\n"
        f"env = {{ MCP_NOTES = {json.dumps(env['MCP_NOTES'])}, MCP_HANG_PID = {json.dumps(env['MCP_HANG_PID'])} }}\n"
    )


def workspace(tmp_path: Path, config: str) -> Path:
    root = tmp_path / "ws"
    Workspace.init(root)
    (root / ".runfold" / "config.toml").write_text(config, encoding="utf-8")
    return root


def env_for(prefix: str, server: ProviderServer) -> dict[str, str]:
    url = server.anthropic_url if prefix == "ANTHROPIC" else server.openai_url
    return {f"{prefix}_API_KEY": "test-key", f"{prefix}_BASE_URL": url}


def run(root: Path, dialect: str, script: list[dict[str, Any]], env: dict[str, str] | None = None) -> tuple[dict[str, Any], ProviderServer]:
    spec, prefix = FAMILIES[dialect]
    with ProviderServer(script) as server:
        res = run_cli(
            "run", "use the tools", "--model", spec, "--json", "-w", root, cwd=root, env={**env_for(prefix, server), **(env or {})}
        )
    assert res.code == 0, res.out + res.err
    return json.loads(res.out), server


def check_replay(root: Path, run_id: str, server: ProviderServer) -> None:
    """Every request the provider got is byte-for-byte the hashed one, and replay rebuilds each."""
    assert all(r.entry is not None for r in server.requests), [(r.status, r.error) for r in server.requests]
    ws = Workspace.open(root)
    recorded = [r.typed(ModelCalled).request for r in ws.records(run=run_id, kind="model_called")]
    assert [content_hash(r.raw) for r in server.requests] == [r.hash for r in recorded]
    assert run_cli("verify", "-w", root, cwd=root).code == 0
    replay = run_cli("replay", run_id, "-w", root, cwd=root)
    assert replay.code == 0 and f"ok: {len(recorded)}/{len(recorded)} requests byte-exact" in replay.out, replay.out


def results(root: Path, run_id: str) -> dict[str, ToolResult]:
    ws = Workspace.open(root)
    return {r.typed(ToolResult).tool_use_id: r.typed(ToolResult) for r in ws.records(run=run_id, kind="tool_result")}


@pytest.mark.parametrize("dialect", list(FAMILIES))
def test_an_mcp_tool_round_trip_through_each_dialect_replays_without_the_server(tmp_path: Path, dialect: str) -> None:
    root = workspace(tmp_path, stdio_table(tmp_path))
    script = [
        {"content": [{"kind": "text", "text": "Adding, then noting."}, use("c1", "t__add", {"a": 2, "b": 3}), use("c2", "t__note", {"text": "hello"})]},
        say("2 + 3 = 5, noted."),
    ]
    out, server = run(root, dialect, script)
    assert out["completion"] == "done" and out["tool_calls"] == 2
    ws = Workspace.open(root)
    lines = ws.records(run=out["run"])
    kinds = [r.kind_name for r in lines]
    assert kinds[:2] == ["run_started", "endpoint_attached"]
    assert lines[1].env.data == {"kind": "mcp", "name": "t", "transport": "stdio", "tools": ["t__add", "t__note", "t__pid", "t__hang"]}
    got = results(root, out["run"])
    assert got["c1"].result == {"content": [{"type": "text", "text": "2 + 3 = 5"}]}
    assert got["c2"].result == {"content": [{"type": "text", "text": "noted: hello"}]}
    assert (tmp_path / "notes.txt").read_text() == "hello\n"
    called = {r.env.data["id"]: r.env.data for r in lines if r.kind_name == "tool_called"}
    assert called["c1"]["effect"] == "read" and called["c2"]["effect"] == "write"
    # the model saw the MCP tools in its tool table, under the prefixed names
    first = json.loads(server.requests[0].raw)
    names = [t.get("name") or t.get("function", {}).get("name") for t in first["tools"]]
    assert "t__add" in names and "t__hang" in names
    # the result reached the model: the second request carries the tool's text
    assert "2 + 3 = 5" in server.requests[1].raw.decode()
    check_replay(root, out["run"], server)
    # replay needs no server: with the server gone from the config, every request still rebuilds
    (root / ".runfold" / "config.toml").write_text("", encoding="utf-8")
    replay = run_cli("replay", out["run"], "-w", root, cwd=root)
    assert replay.code == 0 and "ok: 2/2 requests byte-exact" in replay.out


def _kill_when_hanging(pid_file: Path, done: threading.Event) -> None:
    deadline = time.monotonic() + 120
    while not pid_file.exists() and time.monotonic() < deadline and not done.is_set():
        time.sleep(0.05)
    if pid_file.exists():
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_server_killed_mid_call_leaves_a_valid_history_and_the_run_goes_on(tmp_path: Path) -> None:
    root = workspace(tmp_path, stdio_table(tmp_path))
    script = [
        {"content": [use("c1", "t__hang", {"seconds": 120})]},
        {"content": [use("c2", "t__add", {"a": 1, "b": 1})]},
        say("The server is gone; stopping here."),
    ]
    done = threading.Event()
    killer = threading.Thread(target=_kill_when_hanging, args=(tmp_path / "hang.pid", done), daemon=True)
    killer.start()
    try:
        out, server = run(root, "anthropic", script)
    finally:
        done.set()
        killer.join(5)
    assert out["completion"] == "done"
    got = results(root, out["run"])
    assert got["c1"].error is not None and got["c1"].error["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    assert "t" in got["c1"].error["action"] and "lost" in got["c1"].error["action"]
    # a call to the lost server after that did not run, and says so
    assert got["c2"].error is not None and got["c2"].error["code"] == "E_TOOL_UNKNOWN"
    assert "did not run" in got["c2"].error["recovery"]
    ws = Workspace.open(root)
    lines = ws.records(run=out["run"])
    lost = [r for r in lines if r.kind_name == "endpoint_lost"]
    assert len(lost) == 1 and lost[0].env.data["name"] == "t" and lost[0].env.data["reason"]
    # the loss is recorded after the wave that met it, before the next request
    kinds = [r.kind_name for r in lines]
    assert kinds.index("endpoint_lost") == kinds.index("tool_result") + 1
    # the errors reached the model
    assert "E_TOOL_OUTCOME_UNKNOWN" in server.requests[1].raw.decode()
    check_replay(root, out["run"], server)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port), "--token", "s3cret"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("the MCP HTTP server did not come up")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_streamable_http_server_with_headers_from_the_environment(tmp_path: Path, http_server: str) -> None:
    config = f'[mcp.web]\nurl = "{http_server}"\nheaders = {{ Authorization = "Bearer ${{MCP_TEST_TOKEN}}" }}\n'
    root = workspace(tmp_path, config)
    script = [{"content": [use("c1", "web__add", {"a": 40, "b": 2})]}, say("42.")]
    out, server = run(root, "openai-chat", script, env={"MCP_TEST_TOKEN": "s3cret"})
    assert out["completion"] == "done"
    ws = Workspace.open(root)
    attached = ws.records(run=out["run"], kind="endpoint_attached")[0].env.data
    assert attached["transport"] == "http" and "web__add" in attached["tools"]
    assert results(root, out["run"])["c1"].result == {"content": [{"type": "text", "text": "40 + 2 = 42"}]}
    # the token never reaches the ledger
    ledger = b"".join(p.read_bytes() for p in (root / ".runfold" / "ledger").iterdir())
    assert b"s3cret" not in ledger
    check_replay(root, out["run"], server)
    # a wrong token: the run is refused before any line, naming the server
    before = len(ws.records())
    with ProviderServer([say("never")]) as provider:
        res = run_cli(
            "run", "x", "--model", "openai:test-model", "-w", root, cwd=root,
            env={**env_for("OPENAI", provider), "MCP_TEST_TOKEN": "wrong"},
        )
    assert res.code == 3 and "E_CONFIG_INVALID: cannot start the MCP server `web`" in res.err
    assert len(Workspace.open(root).records()) == before


def test_mcp_list_shows_servers_and_their_tools(tmp_path: Path) -> None:
    root = workspace(tmp_path, stdio_table(tmp_path) + '[mcp.gone]\ncommand = "/nonexistent/mcp-server"\n')
    res = run_cli("mcp", "list", "--json", "-w", root, cwd=root)
    assert res.code == 1
    servers = {s["name"]: s for s in json.loads(res.out)["servers"]}
    assert [t["name"] for t in servers["t"]["tools"]] == ["t__add", "t__note", "t__pid", "t__hang"]
    assert servers["t"]["tools"][0]["effect"] == "read" and servers["t"]["tools"][1]["effect"] == "write"
    assert servers["gone"]["error"]["code"] == "E_CONFIG_INVALID" and servers["gone"]["tools"] == []
    text = run_cli("mcp", "list", "-w", root, cwd=root)
    assert "t__add  (read)" in text.out and "gone  stdio  /nonexistent/mcp-server  — not started" in text.out
