"""The limits of the context window, through real runs (DESIGN.md §7, §10): the paging tool is in
every run that has a tool; reminders carry the cause `framework` and are folded from the ledger,
so a successor after a kill does not repeat one and a fork before one gets it again; a result
larger than the whole conversation budget never makes a request pass it; a prefix larger than its
system share takes from the conversation, one larger than the input window is refused."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cp_support import check_run, read, reply, say, two_scripts, workspace

from runfold.api import Workspace
from runfold.core.causes import Cause
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.kinds import Kind
from runfold.core.locator import parse_locator
from runfold.core.records import Record
from runfold.runtime.compaction import prefix_bytes, request_measures
from runfold.runtime.prefix import Prefix
from runfold.store.cas import Cas


def _files(root: Path, n: int, size: int) -> None:
    for i in range(n):
        (root / f"f{i}.txt").write_text("q" * size)


def _tools(ws: Workspace, run: str) -> list[str]:
    assembled = next(r for r in ws.records(run=run) if r.kind is Kind.PROMPT_ASSEMBLED)
    prefix = Prefix.load(Cas(ws.root).get_locator(parse_locator(assembled.env.data["prefix"])), "test")  # type: ignore[arg-type]
    return [t.name for t in prefix.tools]


def _reminders(lines: list[Record]) -> list[Record]:
    return [r for r in lines if r.kind is Kind.STEER_RECEIVED and r.env.data.get("cause") == "framework"]


# ---- read_result in every run with a tool ---------------------------------------------------


def test_every_run_with_a_tool_can_page_an_offloaded_result_back(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    ws = workspace(root, window=60000, extra="offload_bytes = 2000\noffload_head_bytes = 100")
    (root / "big.txt").write_text("b" * 5000)
    p = two_scripts(
        [
            reply(read("c1", "big.txt")),
            reply({"kind": "tool_use", "id": "r1", "name": "read_result", "input": json.dumps({"key": "c1", "offset": 4000})}),
            reply(say("read it")),
        ],
        [],
    )
    out = ws.run("read big.txt", model=p, builtin_tools=["read_file"])  # read_result not named
    assert out.completion == "done", out.reason
    assert _tools(ws, out.run_id) == ["read_file", "read_result"]  # appended last
    page = next(r for r in ws.records(run=out.run_id) if r.kind is Kind.TOOL_RESULT and r.env.data["tool_use_id"] == "r1")
    assert page.env.data.get("error") is None and page.env.data["result"]["offset"] == 4000
    check_run(ws, out.run_id, p.requests)
    # named explicitly: once; no tool at all: none (nothing can be offloaded)
    named = ws.run("hi", model=two_scripts([reply(say("hi"))], []), builtin_tools=["read_result", "read_file"])
    assert _tools(ws, named.run_id) == ["read_result", "read_file"]
    bare = ws.run("hi", model=two_scripts([reply(say("hi"))], []), builtin_tools=False)
    assert _tools(ws, bare.run_id) == []
    ws.close()


def test_an_older_run_without_the_paging_tool_replays_and_forks_with_its_own_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runfold.runtime.assemble as assemble

    root = tmp_path / "ws"
    ws = workspace(root, window=60000)
    (root / "a.txt").write_text("alpha")
    monkeypatch.setattr(assemble, "with_paging", lambda registry: registry)  # a runfold of before
    p = two_scripts([reply(read("c1", "a.txt")), reply(say("alpha"))], [])
    old = ws.run("read a.txt", model=p, builtin_tools=["read_file"])
    monkeypatch.undo()
    assert _tools(ws, old.run_id) == ["read_file"]
    check_run(ws, old.run_id, p.requests)  # replay rebuilds the recorded table, byte-exact
    q = two_scripts([reply(say("still alpha"))], [])
    fork = ws.run("go on", model=q, builtin_tools=["read_file"], fork=(old.run_id, ws.records(run=old.run_id)[-1].seq))
    assert fork.completion == "done", fork.reason
    assert _tools(ws, fork.run_id) == ["read_file", "read_result"]  # the fork's own table
    check_run(ws, fork.run_id, q.requests)
    check_run(ws, old.run_id, p.requests)
    ws.close()


# ---- reminders: cause framework, folded across fork and resume ----------------------------------


def _reminder_session(n: int) -> list[dict[str, Any]]:
    turns = [reply(say(f"r{i}"), read(f"c{i}", f"f{i}.txt")) for i in range(n)]
    return [*turns, reply(say("done"))]


def test_a_reminder_is_framework_and_a_fork_before_it_gets_it_again(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    ws = workspace(root, window=9000, extra="reminders_permille = [500, 250, 100]\ncompaction = []")
    _files(root, 6, 1200)
    p = two_scripts(_reminder_session(6), [])
    out = ws.run("read them", model=p, builtin_tools=["read_file"])
    assert out.completion == "done", out.reason
    lines = ws.records(run=out.run_id)
    given = _reminders(lines)
    assert given, "no reminder was given"
    first = given[0]
    assert first.env.who == "runtime" and first.env.data["source"] == "runtime"
    assert first.env.data["thresholds"] and all(isinstance(t, int) for t in first.env.data["thresholds"])
    # the block the reminder put in the window is attributed to `framework`, never `message`
    folded = ws.fold(out.run_id)
    causes = {s.cause for srcs in folded.sources for s in srcs if s.seq == first.seq}
    assert causes == {Cause.FRAMEWORK}
    texts = [b["text"] for m in folded.messages for b in m["content"] if b["kind"] == "text"]
    assert any(t.startswith("runtime: The conversation has") for t in texts)
    check_run(ws, out.run_id, p.requests)
    # a fork cut before the reminder gets it again, at the same threshold
    before = first.seq - 1
    q = two_scripts([reply(say("forked"))], [])
    fork = ws.run("go on", model=q, builtin_tools=["read_file"], fork=(out.run_id, before))
    assert fork.completion == "done", fork.reason
    again = _reminders(ws.records(run=fork.run_id))
    assert again and again[0].env.data["thresholds"] == first.env.data["thresholds"]
    # a fork after it does not repeat it
    q2 = two_scripts([reply(say("forked late"))], [])
    late = ws.run("go on", model=q2, builtin_tools=["read_file"], fork=(out.run_id, first.seq))
    repeated = [
        t for r in _reminders(ws.records(run=late.run_id)) for t in r.env.data["thresholds"] if t in first.env.data["thresholds"]
    ]
    assert late.completion == "done" and repeated == []
    check_run(ws, fork.run_id, q.requests)
    ws.close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_run_killed_after_a_reminder_is_continued_without_repeating_it(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    extra = 'reminders_permille = [500, 250, 100]\ncompaction = []\n[defaults]\ntools = ["read_file"]'
    ws = workspace(root, window=9000, extra=extra)
    _files(root, 12, 1200)
    ws.close()
    script = root / "session.jsonl"
    entries = [{**e, "delay_ms": 400} for e in _reminder_session(12)]
    script.write_text("".join(json.dumps(e) + "\n" for e in entries))
    env = {**os.environ, "RUNFOLD_WORKSPACE": str(root)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "read them", "--model", f"script:{script}", "--events"],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    killed = False
    for raw in proc.stdout:
        if b'"steer_received"' in raw:  # the reminder, acknowledged (fsynced) before it was printed
            proc.send_signal(signal.SIGKILL)
            killed = True
            break
    proc.wait(timeout=30)
    assert killed, (proc.stderr.read() if proc.stderr else b"").decode()
    ws = Workspace.open(root)
    ws.resume()  # the killed run is frozen as cancelled, process_died (DESIGN.md §7)
    mother = next(r.env.run for r in ws.records() if r.kind is Kind.RUN_STARTED)
    lines = ws.records(run=mother)
    assert lines[-1].kind is Kind.RUN_FROZEN and lines[-1].env.data["cause"] == "process_died"
    given = {t for r in _reminders(lines) for t in r.env.data["thresholds"]}
    assert given
    q = two_scripts([reply(say("done"))], [])
    second = ws.continue_run(mother, model=q, builtin_tools=["read_file"])
    assert second.completion == "done", second.reason
    repeated = [t for r in _reminders(ws.records(run=second.run_id)) for t in r.env.data["thresholds"] if t in given]
    assert repeated == []
    check_run(ws, second.run_id, q.requests)
    ws.close()


# ---- a result larger than the whole conversation budget -------------------------------------------


def test_a_result_larger_than_the_conversation_budget_never_makes_a_request_pass_it(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    window = 6000
    ws = workspace(root, window=window)  # the default offload_bytes (16384) is larger than the budget
    (root / "huge.txt").write_text("h" * 14000)  # about 3500 tokens: more than the whole budget
    p = two_scripts([reply(say("reading"), read("c1", "huge.txt")), reply(say("it is all h"))], [])
    out = ws.run("read huge.txt", model=p, builtin_tools=["read_file"])
    assert out.completion == "done", out.reason
    lines = ws.records(run=out.run_id)
    off = next(r for r in lines if r.kind is Kind.RESULT_OFFLOADED)
    assert off.env.data["forced"] is True and off.env.data["bytes"] > 14000
    budget_bytes = off.env.data["budget_bytes"]
    assert len(off.env.data["head"].encode()) <= budget_bytes // 8
    assembled = next(r for r in lines if r.kind is Kind.PROMPT_ASSEMBLED)
    prefix = Prefix.load(Cas(root).get_locator(parse_locator(assembled.env.data["prefix"])), "test")  # type: ignore[arg-type]
    plen = prefix_bytes(prefix)
    budget = min((window - 500) * 550 // 1000, (window - 500) - (plen + 3) // 4)
    for _, tokens, summary in request_measures(lines, plen):
        assert not summary and tokens <= budget, (tokens, budget)
    check_run(ws, out.run_id, p.requests)
    ws.close()


# ---- the prefix rule --------------------------------------------------------------------------------


def test_a_prefix_over_its_share_runs_and_one_over_the_window_is_refused_before_a_line(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    # the six built-ins' table is ~1500 tokens: more than a 10‰ system share of 7500
    ws = workspace(root, window=8000, extra="")
    cfg = root / ".runfold" / "config.toml"
    cfg.write_text(cfg.read_text().replace("system_permille = 400", "system_permille = 10"))
    ws = Workspace.open(root)
    out = ws.run("hi", model=two_scripts([reply(say("hi"))], []))
    assert out.completion == "done", out.reason
    ws.close()
    cfg.write_text(cfg.read_text().replace("context_window = 8000", "context_window = 1200"))
    ws = Workspace.open(root)
    before = len(ws.records())
    with pytest.raises(RunfoldError) as err:
        ws.run("hi", model=two_scripts([reply(say("hi"))], []))
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert 'models."script".context_window' in err.value.action and "700" in err.value.recovery
    assert len(ws.records()) == before
    ws.close()


# ---- a summary call that fails, through the official SDK and the provider test server -------------

SUMMARY_CASES: dict[str, tuple[list[dict[str, Any]], str | None, int]] = {
    # the summary call's script entries, what the record says failed (None: a summary), attempts
    "a 500 retried, then a summary": ([{"fault": "http_500"}, reply(say("Read f0..f2: tiny files."))], None, 2),
    "three 500s: given up": ([{"fault": "http_500"}] * 3, "failed", 3),
    "a 400: not retried": ([{"fault": "http_400_refusal"}], "failed", 1),
    "an empty summary": ([reply(say("   "))], "no text", 1),
}


@pytest.mark.parametrize("case", list(SUMMARY_CASES))
def test_a_summary_call_through_the_sdk_that_fails_leaves_the_window_and_is_recorded(tmp_path: Path, case: str) -> None:
    pytest.importorskip("anthropic")
    from provider_server import ProviderServer
    from runfold.providers.anthropic import AnthropicProvider
    from runfold.runtime import RetryPolicy

    summaries, failure, attempts = SUMMARY_CASES[case]
    root = tmp_path / "ws"
    ws = workspace(root, window=6000, extra='compaction = ["summary"]')
    cfg = root / ".runfold" / "config.toml"
    cfg.write_text(cfg.read_text().replace('[models."script"]', '[models."test-model"]'))
    ws = Workspace.open(root)
    _files(root, 3, 20)
    turns = [reply(say(f"step {i}: " + "thinking aloud " * 330), read(f"c{i}", f"f{i}.txt")) for i in range(3)]
    script = [*turns, *summaries, reply(say("all read"))]
    with ProviderServer(script) as server:
        p = AnthropicProvider("test-model", api_key="test-key", base_url=server.anthropic_url, max_tokens=500)
        out = ws.run("read every file", model=p, builtin_tools=["read_file"], retry=RetryPolicy(1, 10, 5))
        received = server.requests
    assert out.completion == "done", out.reason
    assert [r.error for r in received if r.entry is None] == []  # nothing refused by the server's rules
    lines = ws.records(run=out.run_id)
    calls = [r for r in lines if r.kind is Kind.MODEL_CALLED and r.env.data.get("purpose") == "compaction"]
    assert len(calls) == attempts  # bounded: SUMMARY_ATTEMPTS, retryable errors only
    assert [r.env.data.get("attempt") for r in calls] == [None, *range(2, attempts + 1)]
    assert sum(1 for r in lines if r.kind is Kind.WATCHDOG_FIRED) == attempts - 1
    changed = [r.env.data for r in lines if r.kind is Kind.CONTEXT_CHANGED]
    assert len(changed) == 1
    rec = changed[0]
    if failure is None:
        assert rec["summary"].startswith("Read f0..f2") and rec["revision_after"] == rec["revision_before"] + 1
    else:
        assert failure in rec["failed"] and rec["revision_after"] == rec["revision_before"]
        assert rec["fallback"] == [] and rec["bytes_added"] == rec["bytes_removed"] == 0
        failed_line = ws.records()[rec["failed_seq"]]
        if failure == "no text":
            assert failed_line.kind is Kind.MODEL_RETURNED and rec["summary_seq"] == rec["failed_seq"]
        else:
            assert failed_line.seq == calls[-1].seq and rec["error"]["code"] == "E_PROVIDER"
        # the window is as it was: the request after the failure extends the one before it
        shapes = [r.env.data["conversation"] for r in lines if r.kind is Kind.PROMPT_SHAPE_COMPARED]
        assert "rewritten" not in shapes
    ws.verify()
    report = ws.replay(out.run_id)
    assert report.ok, report.summary()
    ws.close()


# ---- a successor on a model with a smaller window ---------------------------------------------------


def test_a_successor_on_another_model_with_a_smaller_window_is_compacted_before_its_first_request(
    tmp_path: Path,
) -> None:
    from cp_support import TwoScripts

    from runfold.providers.scripted import ScriptedProvider

    root = tmp_path / "ws"
    ws = workspace(root, window=60000, extra="")
    cfg = root / ".runfold" / "config.toml"
    cfg.write_text(cfg.read_text() + '\n[models."small"]\ncontext_window = 4000\nmax_output_tokens = 500\n')
    ws = Workspace.open(root)
    _files(root, 6, 2500)
    p = two_scripts([reply(say(f"r{i}"), read(f"c{i}", f"f{i}.txt")) for i in range(6)] + [reply(say("paused"))], [])
    first = ws.run("read them", model=p, builtin_tools=["read_file"])
    assert first.completion == "done" and not [r for r in ws.records(run=first.run_id) if r.kind is Kind.CONTEXT_CHANGED]
    small = TwoScripts(
        ScriptedProvider.of([reply(say("done"))], model="small"),
        ScriptedProvider.of([reply(say("summary: six files of q"))], model="small"),
    )
    second = ws.continue_run(first.run_id, model=small, builtin_tools=["read_file"])
    assert second.completion == "done", second.reason
    lines = ws.records(run=second.run_id)
    kinds = [r.kind_name for r in lines]
    assert kinds.index("context_changed") < kinds.index("prompt_assembled")
    called = next(r for r in lines if r.kind is Kind.MODEL_CALLED and r.env.data.get("purpose") is None)
    assert called.env.data["model"] == "small"
    assembled = next(r for r in lines if r.kind is Kind.PROMPT_ASSEMBLED)
    prefix = Prefix.load(Cas(root).get_locator(parse_locator(assembled.env.data["prefix"])), "test")  # type: ignore[arg-type]
    plen = prefix_bytes(prefix)
    budget = min((4000 - 500) * 550 // 1000, (4000 - 500) - (plen + 3) // 4)
    turns = [t for _, t, summary in request_measures(lines, plen) if not summary]
    assert turns and all(t <= budget for t in turns), (turns, budget)
    check_run(ws, second.run_id, small.requests)
    ws.close()


# ---- failed summaries back off ------------------------------------------------------------------


def test_failed_summaries_are_not_retried_at_every_boundary_and_the_wait_is_folded(tmp_path: Path) -> None:
    """A model that answers every summary call with no text: the summary is tried again only
    after 1, 2, 4 … turns (core.compaction.SummaryBackoff), each failure recorded, and the wait
    folds from the ledger's lines (what a fork or successor feeds its window manager)."""
    from runfold.core.compaction import SummaryBackoff

    root = tmp_path / "ws"
    ws = workspace(root, window=6000, extra='compaction = ["summary"]')
    _files(root, 14, 20)
    turns = [reply(say(f"step {i}: " + "thinking aloud " * 200), read(f"c{i}", f"f{i}.txt")) for i in range(14)]
    p = two_scripts([*turns, reply(say("all read"))], [reply(say("  "))] * 14)
    out = ws.run("read every file", model=p, builtin_tools=["read_file"])
    assert out.completion == "done", out.reason
    lines = ws.records(run=out.run_id)
    failed = [r for r in lines if r.kind is Kind.CONTEXT_CHANGED and "failed" in r.env.data]
    turn_calls = [r for r in lines if r.kind is Kind.MODEL_CALLED and r.env.data.get("purpose") != "compaction"]
    assert len(failed) >= 3, [r.env.data for r in failed]
    assert len(failed) < len(turn_calls) - 3  # not tried at every boundary over budget
    for k, (a, b) in enumerate(itertools.pairwise(failed), start=1):
        waited = sum(1 for r in turn_calls if a.seq < r.seq < b.seq)
        assert waited >= min(2 ** (k - 1), 64), (k, waited)
    folded = SummaryBackoff()
    for rec in lines:
        folded.feed(rec)
    assert folded.failures == len(failed)
    check_run(ws, out.run_id, p.requests)
    ws.close()
