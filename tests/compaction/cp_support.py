"""Helpers for the compaction tests: a workspace whose config gives the scripted model a small
window, a provider that answers the run's turns and its summary calls from two scripts, and the
checks every compacted run must pass (verified, replay byte-exact, every request valid)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runfold.api import Workspace
from runfold.core.compaction import SUMMARY_ASK
from runfold.core.kinds import Kind
from runfold.core.records import Record
from runfold.core.validate import validate
from runfold.providers.base import CallSettings, Reply, Request, StreamCallback
from runfold.providers.scripted import ScriptedProvider

DIALECTS = ("anthropic", "openai-chat", "openai-responses")


def config_toml(window: int, output: int = 500, keep_waves: int = 1, extra: str = "") -> str:
    return (
        f"[context]\nkeep_waves = {keep_waves}\nsystem_permille = 400\nconversation_permille = 550\n"
        "notes_permille = 20\ntodo_permille = 10\nscratch_permille = 10\n"
        f"{extra}\n"
        f'[models."script"]\ncontext_window = {window}\nmax_output_tokens = {output}\n'
    )


def workspace(root: Path, window: int, **kw: Any) -> Workspace:
    ws = Workspace.init(root)
    (root / ".runfold" / "config.toml").write_text(config_toml(window, **kw))
    return ws


def read(cid: str, path: str) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": "read_file", "input": json.dumps({"path": path})}


def reply(*blocks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"content": list(blocks), **extra}


def say(text: str) -> dict[str, Any]:
    return {"kind": "text", "text": text}


def is_summary_request(request: Request) -> bool:
    return SUMMARY_ASK.encode() in request.body_bytes


@dataclass
class TwoScripts:
    """A provider answering summary calls from `summaries` and every other request from `turns`
    (both scripted providers, same dialect)."""

    turns: ScriptedProvider
    summaries: ScriptedProvider
    requests: list[Request] = field(default_factory=list)

    @property
    def dialect(self) -> str:
        return self.turns.dialect

    @property
    def model(self) -> str:
        return self.turns.model

    @property
    def settings(self) -> CallSettings:
        return self.turns.settings

    async def complete(self, request: Request, on_delta: StreamCallback | None = None) -> Reply:
        self.requests.append(request)
        if is_summary_request(request):
            return await self.summaries.complete(request, on_delta)
        return await self.turns.complete(request, on_delta)

    async def aclose(self) -> None:
        return None


def two_scripts(
    turns: Sequence[Mapping[str, Any]], summaries: Sequence[Mapping[str, Any]], dialect: str = "anthropic"
) -> TwoScripts:
    return TwoScripts(
        ScriptedProvider.of(turns, dialect=dialect), ScriptedProvider.of(summaries, dialect=dialect)
    )


def changes(lines: Sequence[Record]) -> list[dict[str, Any]]:
    return [
        dict(r.env.data)
        for r in lines
        if r.known and r.kind is Kind.CONTEXT_CHANGED and r.env.data.get("region") == "conversation"
    ]


def check_run(ws: Workspace, run: str, requests: Sequence[Request]) -> None:
    """Verified, the fold accepts it, replay byte-exact, every request valid in its dialect."""
    ws.verify()
    report = ws.replay(run)
    assert report.ok, report.summary()
    for req in requests:
        assert validate(req.dialect, req.body) == [], req.dialect
