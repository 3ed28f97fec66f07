"""Instruction files (`AGENTS.md`, `CLAUDE.md`) at the workspace and room roots join the frozen
prefix as system segments, pinned by hash in `run_started.instructions` with their bytes in the
content store: the model reads them, `why` names them, and editing a file later changes no
replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli.cli_support import run_cli
from provider_server import ProviderServer
from runfold.api import Workspace
from runfold.core.canonical import content_hash


def say(text: str) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": text}]}


def test_instruction_files_reach_the_model_and_replay_survives_their_edit(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    agents = b"Run `make check` before you say done.\nNever edit vendor/.\n"
    claude = b"In docs, write in British English.\n"
    (root / "AGENTS.md").write_bytes(agents)
    (root / "docs").mkdir()
    (root / "docs" / "CLAUDE.md").write_bytes(claude)
    with ProviderServer([say("Noted.")]) as server:
        res = run_cli(
            "run", "what are the house rules?", "--model", "anthropic:test-model", "--room", "docs", "--json",
            "-w", root, cwd=root,
            env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.anthropic_url},
        )
    assert res.code == 0, res.out + res.err
    run = json.loads(res.out)["run"]
    ws = Workspace.open(root)
    started = ws.records(run=run, kind="run_started")[0].env.data
    assert started["instructions"] == [
        {"name": "AGENTS.md", "hash": content_hash(agents)},
        {"name": "docs/CLAUDE.md", "hash": content_hash(claude)},
    ]
    # the pinned bytes are in the content store under their hash
    for pin, raw in zip(started["instructions"], (agents, claude), strict=True):
        h = pin["hash"]
        assert (root / ".runfold" / "cas" / "b3" / h[:2] / h).read_bytes() == raw
    slots = [s["slot"] for s in ws.records(run=run, kind="prompt_assembled")[0].env.data["segments"]]
    assert slots == ["workspace", "room", "instructions:AGENTS.md", "instructions:docs/CLAUDE.md", "run"]
    body = json.loads(server.requests[0].raw)
    system = "".join(block["text"] for block in body["system"])
    assert "Never edit vendor/." in system and "British English" in system
    why = run_cli("why", run, "-w", root, cwd=root)
    assert why.code == 0 and "instructions:AGENTS.md" in why.out
    # the files change after the run: its replay does not
    (root / "AGENTS.md").write_text("Everything is different now.\n", encoding="utf-8")
    (root / "docs" / "CLAUDE.md").unlink()
    replay = run_cli("replay", run, "-w", root, cwd=root)
    assert replay.code == 0 and "ok: 1/1 requests byte-exact" in replay.out


def test_a_run_without_instruction_files_writes_no_pins(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    (root / "s.jsonl").write_text(json.dumps(say("hi")) + "\n", encoding="utf-8")
    res = run_cli("run", "hello", "--model", "script:s.jsonl", "--json", "-w", root, cwd=root)
    assert res.code == 0, res.out + res.err
    started = Workspace.open(root).records(kind="run_started")[0].env.data
    assert "instructions" not in started


def test_an_instruction_file_that_is_not_utf8_refuses_the_run_naming_it(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    (root / "AGENTS.md").write_bytes(b"caf\xe9\n")
    (root / "s.jsonl").write_text(json.dumps(say("hi")) + "\n", encoding="utf-8")
    before = len(Workspace.open(root).records())
    res = run_cli("run", "hello", "--model", "script:s.jsonl", "-w", root, cwd=root)
    assert res.code == 2, res.out + res.err
    assert "instruction file AGENTS.md (not UTF-8 at byte 3)" in res.err and "save it as UTF-8" in res.err
    assert len(Workspace.open(root).records()) == before
