"""`runfold why` and `runfold context` on a scripted run (DESIGN.md §10): figures against hand
computed ones, the method of each named, budgets from `[models."script"]`, `context --json`
rendering to the very bytes replay rebuilds, and a seq outside the run refused naming its range."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli

from runfold.api import Workspace
from runfold.core.canonical import content_hash
from runfold.core.kinds import Kind
from runfold.core.render import SystemSegment, ToolSpec, render_request, request_bytes
from runfold.core.tokens import TokenCount
from runfold.runtime.prefix import Prefix

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "garden-session.jsonl"
MODELS = '\n[models."script"]\ncontext_window = 16384\nmax_output_tokens = 1024\n'


@pytest.fixture(scope="module")
def garden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The README's garden run: three billed calls (850, 1010, 1090 input tokens)."""
    ws = tmp_path_factory.mktemp("garden") / "garden"
    assert run_cli("init", "-w", ws, cwd=ws.parent).code == 0
    shutil.copytree(REPO / "examples" / "garden", ws, dirs_exist_ok=True)
    r = run_cli("run", "What is on the to-do list?", "--model", f"script:{SCRIPT}", "-w", ws, cwd=ws.parent)
    assert r.code == 0, r.err
    with (ws / ".runfold" / "config.toml").open("a", encoding="utf-8") as f:
        f.write(MODELS)
    with Workspace.open(ws) as w:
        (run,) = [r for r in w.runs() if r != "00000000-0000-0000-0000-000000000000"]
    return ws, run


def _json(ws: Path, *args: str) -> Any:
    r = run_cli(*args, "--json", "-w", ws, cwd=ws.parent)
    assert r.code == 0, r.err
    return json.loads(r.out)


def _calls(ws: Path, run: str) -> list[tuple[int, int]]:
    """(request bytes, billed prompt tokens) per call, from the ledger."""
    with Workspace.open(ws) as w:
        recs = w.records(run=run)
    sizes = [r.env.data["request"]["bytes"] for r in recs if r.kind is Kind.MODEL_CALLED]
    billed = [r.env.data["usage"]["input"] for r in recs if r.kind is Kind.MODEL_RETURNED]
    return list(zip(sizes, billed, strict=True))


def test_why_figures_are_the_hand_computed_ones(garden: tuple[Path, str]) -> None:
    ws, run = garden
    calls = _calls(ws, run)
    assert [t for _, t in calls] == [850, 1010, 1090]
    n_bytes, n_tokens = sum(b for b, _ in calls), sum(t for _, t in calls)
    per_mille = (2 * 1000 * n_tokens + n_bytes) // (2 * n_bytes)  # rounded half up
    j = _json(ws, "why", run[:8])
    assert j["calibration"] == {"per_mille": per_mille, "bytes": n_bytes, "tokens": n_tokens, "samples": 3}
    assert j["model"] == "script"
    usage = {u["region"]: u for u in j["usage"]}
    system_bytes = j["regions"]["system"]["bytes"] + j["regions"]["tools"]["bytes"]
    assert usage["system"]["bytes"] == system_bytes
    assert usage["system"]["tokens"]["tokens"] == (system_bytes * per_mille + 999) // 1000
    assert usage["system"]["tokens"]["method"] == "calibrated"
    assert f"{per_mille}‰" in usage["system"]["tokens"]["source"]
    # the window of [models."script"]; the run asked 4096 tokens of reply, the model gives 1024
    w = j["window"]
    assert (w["context_window"], w["max_output_tokens"], w["output"]) == (16384, 1024, 1024)
    assert w["input"] == 15360 and w["budgets"]["system"] == 15360 * 200 // 1000
    assert usage["conversation"]["budget"] == 15360 * 650 // 1000
    assert usage["system"]["window_permille"] == usage["system"]["tokens"]["tokens"] * 1000 // 16384
    # the request at the cut: counted by the run's calibration, the fallback said
    req = j["request"]
    assert req["tokens"]["method"] == "calibrated" and "no tokenizer" in req["tokens"]["fallback"]
    assert req["tokens"]["tokens"] == (req["bytes"] * per_mille + 999) // 1000
    text = run_cli("why", run[:8], "-w", ws, cwd=ws.parent).out
    assert f"calibrated: {per_mille}‰ tokens per byte over 3 billed calls" in text
    assert "model script: window 16384 tokens, reply reserve 1024" in text
    assert "by region:" in text and "by cause:" in text and "changes:" in text


def test_before_the_first_reply_the_estimate_is_named(garden: tuple[Path, str]) -> None:
    ws, run = garden
    with Workspace.open(ws) as w:
        first = next(r.seq for r in w.records(run=run) if r.kind is Kind.MODEL_CALLED)
    j = _json(ws, "why", run[:8], "--at", str(first))
    assert j["cut"] < first and j["calibration"] is None
    assert {u["tokens"]["method"] for u in j["usage"]} == {"estimate"}
    assert j["request"]["tokens"]["method"] == "estimate"
    assert j["request"]["tokens"]["tokens"] == (j["request"]["bytes"] + 3) // 4
    assert j["request"]["sent_at"] == first  # the first request, with the prefix its turn assembled


def test_a_tokenizer_count_is_named(garden: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    ws, run = garden
    import runfold.runtime.window_view as window_view

    monkeypatch.setattr(
        window_view, "count_offline", lambda request, **_: TokenCount(321, "tokenizer", "o200k_base")
    )
    j = _json(ws, "why", run[:8])
    assert j["request"]["tokens"] == {"method": "tokenizer", "source": "o200k_base", "tokens": 321}
    text = run_cli("why", run[:8], "-w", ws, cwd=ws.parent).out
    assert "321 tokens (tokenizer: o200k_base)" in text


def test_context_json_renders_the_bytes_replay_rebuilds(garden: tuple[Path, str]) -> None:
    ws, run = garden
    with Workspace.open(ws) as w:
        rebuilt = dict(w.replay(run).hashes)
    assert len(rebuilt) == 3
    for seq, digest in rebuilt.items():
        j = _json(ws, "context", run[:8], "--at", str(seq))
        regions = {r["region"]: r for r in j["regions"]}
        assert list(regions) == ["system", "conversation", "notes", "todo", "scratch"]
        system, conv = regions["system"], regions["conversation"]
        prefix = Prefix(
            dialect=j["dialect"],
            model=j["model"],
            system=tuple(SystemSegment(s["slot"], s["text"], s["edge"]) for s in system["segments"]),
            tools=tuple(
                ToolSpec(t["name"], t["description"], t["input_schema"], t.get("strict"))
                for t in system["tools"]["table"]
            ),
            **j["settings"],
        )
        messages = [
            {"role": m["role"], "content": [b["block"] for b in m["blocks"]]} for m in conv["messages"]
        ]
        body = request_bytes(render_request(j["dialect"], prefix.spec(messages)).body)
        assert content_hash(body) == digest == j["request"]["hash"]
        assert j["request"]["sent_at"] == seq and j["request"]["bytes"] == len(body)
        for m in conv["messages"]:
            for b in m["blocks"]:
                assert b["seq"] is not None and b["cause"] in ("seed", "model_reply", "tool_result")


def test_context_text_shows_each_region(garden: tuple[Path, str]) -> None:
    ws, run = garden
    r = run_cli("context", run[:8], "-w", ws, cwd=ws.parent)
    assert r.code == 0, r.err
    for head in ("== system:", "== conversation:", "== notes:", "segment workspace", "tools "):
        assert head in r.out
    assert "[0] user" in r.out and "(51 B, seq" in r.out and "seed)" in r.out
    assert "budget 3072" in r.out  # 200‰ of 16384 - 1024


@pytest.mark.parametrize("verb", ["why", "context"])
def test_a_seq_outside_the_run_names_its_range(garden: tuple[Path, str], verb: str) -> None:
    ws, run = garden
    with Workspace.open(ws) as w:
        seqs = [r.seq for r in w.records(run=run)]
    r = run_cli(verb, run[:8], "--at", "9999", "-w", ws, cwd=ws.parent)
    assert r.code == 2, (r.out, r.err)
    assert f"seqs {seqs[0]}–{seqs[-1]}" in r.err and "past the ledger's tail" in r.err
    r = run_cli(verb, run[:8], "--at", "0", "-w", ws, cwd=ws.parent)
    assert r.code == 2 and "not a line of this run" in r.err and f"seqs {seqs[0]}–{seqs[-1]}" in r.err


def test_the_offline_count_uses_an_encoding_when_one_applies() -> None:
    from runfold.providers.base import Request
    from runfold.providers.tokens import count_offline, have_bpe

    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello world"}]}
    raw = json.dumps(body).encode()
    chat = count_offline(Request("openai-chat", "gpt-4o", body, raw))
    if have_bpe():
        assert (chat.method, chat.source, chat.fallback) == ("tokenizer", "o200k_base", None)
        assert chat.tokens == 3 + 1 + 2 + 3  # per message, "user", "hello world", the reply priming
    else:
        assert chat.method == "estimate" and chat.fallback is not None and "bpe-openai" in chat.fallback
    other = count_offline(Request("anthropic", "script", body, raw))
    assert (other.method, other.tokens) == ("estimate", (len(raw) + 3) // 4)
    assert other.fallback == "no tokenizer for the anthropic dialect of 'script'"
