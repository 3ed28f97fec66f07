"""Secrets kept out of the ledger: a run's lines never hold a secret of the environment runfold
runs in, nor the provider's own key, however it arrives (a tool's output, the task, a steer, a
model reply, a provider's error body); a `secret_captured` line says where, never what; replay
stays byte-exact. Checked on the ledger's bytes: the segments are grepped for every value.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from provider_server import ProviderServer
from runfold.api import Workspace
from runfold.providers.anthropic import AnthropicProvider
from runfold.providers.openai_chat import OpenAIChatProvider
from runfold.providers.openai_responses import OpenAIResponsesProvider
from runfold.providers.scripted import ScriptedProvider
from runfold.tools.sandbox import bwrap_problem

ISSUE_ENV = {
    "MYSQL_PWD": "my-sql-pw-1234",
    "SENTRY_DSN": "https://abc123publickey@o42.ingest.sentry.io/77",
    "HTTPS_PROXY": "http://proxyuser:pr0xy-pw-77@proxy.internal:3128",
    "REDIS_URL": "redis://:r3dis-secret-pw@cache.internal:6379/0",
    "MONGODB_URI": "mongodb+srv://admin:m0ngo-pass-99@cluster0.example.net/db",
    "NPM_CONFIG__AUTH": "bnBtdXNlcjpucG1wYXNzd29yZA==",
    "AZURE_DEVOPS_EXT_PAT": "azdevpat0123456789abcdef",
    "DOCKER_AUTH_CONFIG": '{"auths":{"r.example":{"auth":"ZG9ja2VyOnB3"}}}',
    "CI_JOB_JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjaSJ9.c2lnbmF0dXJl",
    "PASSPHRASE": "correct horse battery staple",
    "STRIPE_API_KEY": "rk_live_0123456789abcdef",
    "VAULT_TOKEN": "hvs.CAESIvault0123456789",
    "APP_SECRET": "app-secret-0123456789",
    "DB_PASSWORD": "db-password-0123",
}
"""Every variable the issue's tester found on the ledger through `exec env`, and one per name rule."""
PASTED = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
"""A GitHub token in no variable: pasted in the task, it is known by its shape."""
PASSWORDS = ("pr0xy-pw-77", "r3dis-secret-pw", "m0ngo-pass-99")


def _ledger_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((root / ".runfold" / "ledger").iterdir()) if p.is_file())


def _use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}


def _text(t: str) -> dict[str, Any]:
    return {"kind": "text", "text": t}


@pytest.mark.skipif(bwrap_problem() is not None, reason="exec needs its sandbox")
def test_secrets_printed_pasted_or_replied_never_reach_the_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in ISSUE_ENV.items():
        monkeypatch.setenv(name, value)
    root = tmp_path / "ws"
    ws = Workspace.init(root)
    # a file holding the secrets: `cat` prints them whatever the sandbox's environment holds
    (root / "creds.txt").write_text("\n".join(f"{k}={v}" for k, v in ISSUE_ENV.items()) + "\n")
    script = [
        {"content": [_use("c1", "exec", {"command": "env"}), _use("c2", "exec", {"command": "cat creds.txt"})]},
        {"content": [_text(f"found {ISSUE_ENV['MYSQL_PWD']} and {PASTED}")]},
        {"content": [_text("done")]},
    ]
    steers: asyncio.Queue[Any] = asyncio.Queue()
    steers.put_nowait(f"also rotate {ISSUE_ENV['VAULT_TOKEN']}")
    out = asyncio.run(
        ws.arun(f"audit the config; my token is {PASTED}", model=ScriptedProvider.of(script), steers=steers)
    )
    assert out.completion == "done", out.reason
    env_result = next(r.env.data for r in ws.records(run=out.run_id, kind="tool_result"))
    seen = dict(line.split("=", 1) for line in env_result["result"]["stdout"].splitlines() if "=" in line)
    assert not set(ISSUE_ENV) & set(seen), "exec's environment holds no secret"
    raw = _ledger_bytes(root)
    for value in [*ISSUE_ENV.values(), PASTED, *PASSWORDS]:
        assert value.encode() not in raw, value
        assert json.dumps(value)[1:-1].encode() not in raw, value  # nor JSON-escaped
    captured = [r.env.data for r in ws.records(run=out.run_id, kind="secret_captured")]
    where = {w for c in captured for w in c["where"]}
    assert {"run_started.task", "tool_result.result.stdout", "model_returned.message.content.text"} <= where
    assert any(w.startswith("steer_received.text") for w in where), where
    names = {n for c in captured for n in c["names"]}
    assert {"MYSQL_PWD", "PASSPHRASE", "GitHub token", "VAULT_TOKEN"} <= names
    assert b"[secret:MYSQL_PWD]" in raw
    report = ws.replay(out.run_id)
    assert report.ok, report.summary()  # the requests sent held the redacted text: replay is exact
    # a successor whose new task holds a secret: said after its run_forked, replay exact
    nxt = asyncio.run(
        ws.acontinue(out.run_id, f"now use {ISSUE_ENV['APP_SECRET']}", model=ScriptedProvider.of([script[-1]]))
    )
    assert nxt.completion == "done", nxt.reason
    kinds = [r.kind_name for r in ws.records(run=nxt.run_id)]
    assert kinds[:3] == ["run_started", "run_forked", "secret_captured"], kinds
    assert ISSUE_ENV["APP_SECRET"].encode() not in _ledger_bytes(root)
    assert ws.replay(nxt.run_id).ok
    ws.close()


PROVIDER_KEY = "prov-key-0123456789-zzyx"
"""A key no shape rule knows and no variable holds: only the provider's own credentials name it."""


@pytest.mark.parametrize(
    "make",
    [
        lambda s: AnthropicProvider("test-model", api_key=PROVIDER_KEY, base_url=s.anthropic_url),
        lambda s: OpenAIChatProvider("test-model", api_key=PROVIDER_KEY, base_url=s.openai_url),
        lambda s: OpenAIResponsesProvider("test-model", api_key=PROVIDER_KEY, base_url=s.openai_url),
    ],
    ids=["anthropic", "openai", "openai-responses"],
)
def test_the_providers_key_echoed_in_an_error_body_never_reaches_a_line(tmp_path: Path, make: Any) -> None:
    root = tmp_path / "ws"
    ws = Workspace.init(root)
    with ProviderServer([{"fault": "http_400_echo_auth"}]) as server:
        out = asyncio.run(ws.arun("say hi", model=make(server), builtin_tools=[]))
        echoed = server.requests[-1].error or ""
    assert PROVIDER_KEY in echoed, "the server echoed the key in its error body"
    assert out.completion == "failed" and out.error is not None
    raw = _ledger_bytes(root)
    assert PROVIDER_KEY.encode() not in raw
    frozen = next(r.env.data for r in ws.records(run=out.run_id, kind="run_frozen"))
    assert "[secret:" in json.dumps(frozen["error"])
    where = {w for r in ws.records(run=out.run_id, kind="secret_captured") for w in r.env.data["where"]}
    assert "run_frozen.error.action" in where and "handoff_written.progress" in where, where
    ws.close()
