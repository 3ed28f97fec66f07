"""The executor on scripted sessions (DESIGN.md §5): ledger order and durability, the
user's own typed tools, waves, errors, refusals, retries, the stall guard, completions, cancel."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from rt_support import call, calls, check_finished, kinds, run_lines, text

from runfold.api import Workspace
from runfold.cli.common import EXIT_INTERNAL, exit_code_for
from runfold.core.canonical import content_hash
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.fold import RunFolder
from runfold.core.kinds import Kind
from runfold.core.payloads import (
    ModelCalled,
    PromptAssembled,
    RunFrozen,
    ToolCalled,
    ToolResult,
    WatchdogFired,
)
from runfold.core.records import Record
from runfold.providers.scripted import ScriptedProvider
from runfold.runtime import RetryPolicy, RunChannels, RunInputs, RunLoop, RunOptions, build_prefix, tool_specs
from runfold.store.cas import Cas
from runfold.store.ledger import Ledger, WriterIO
from runfold.tools import (
    Tool,
    ToolCallRequest,
    ToolContext,
    ToolOutcome,
    ToolRegistry,
    WaveCancelled,
    builtin_registry,
    execute_wave,
)
from runfold.tools.execute import NotStarted

FAST = RetryPolicy(base_ms=1, cap_ms=5, max_attempts=5)


def scripted(*entries: dict[str, Any], dialect: str = "anthropic") -> ScriptedProvider:
    return ScriptedProvider.of(list(entries), dialect=dialect)


def weather(city: str, days: int = 1) -> dict[str, Any]:
    """Forecast for a city.

    Args:
        city: The city name.
        days: How many days ahead.
    """
    return {"city": city, "days": days, "sky": "clear"}


def test_a_users_typed_tool_is_called_and_its_schema_and_result_are_in_ledger_and_replay(
    ws: Workspace,
) -> None:
    p = scripted(
        call("w1", "weather", {"city": "Lyon", "days": 2}),
        text("Clear skies in Lyon."),
    )
    out = ws.run("What is the weather in Lyon?", model=p, tools=[weather], builtin_tools=False)
    assert out.completion == "done" and out.turns == 2 and out.tool_calls == 1
    assert kinds(ws, out.run_id) == [
        "run_started",
        "prompt_assembled",
        "prompt_shape_compared",
        "model_called",
        "model_returned",
        "tool_called",
        "tool_result",
        "prompt_shape_compared",
        "model_called",
        "model_returned",
        "handoff_written",
        "run_frozen",
    ]
    lines = run_lines(ws, out.run_id)
    result = next(r for r in lines if r.kind_name == "tool_result").typed(ToolResult)
    assert result.result == {"city": "Lyon", "days": 2, "sky": "clear"}
    # the schema: in the frozen prefix stored in the CAS and in the bytes that were sent
    assembled = next(r for r in lines if r.kind_name == "prompt_assembled").typed(PromptAssembled)
    assert assembled.prefix is not None
    doc = orjson.loads(Cas(ws.root).get(assembled.prefix.removeprefix("cas:b3-")))
    (tool, paging) = doc["tools"]  # the paging tool is appended to every run with a tool
    assert paging["name"] == "read_result"
    assert tool["name"] == "weather" and tool["input_schema"]["properties"]["city"]["type"] == "string"
    assert "days" not in tool["input_schema"].get("required", [])
    second = p.requests[1]
    assert second.body["tools"][0]["input_schema"] == tool["input_schema"]
    tool_results = [b for b in second.body["messages"][2]["content"] if b["type"] == "tool_result"]
    assert orjson.loads(tool_results[0]["content"]) == result.result
    # replay rebuilds exactly those bytes
    replay = check_finished(ws, out)
    assert replay.exact == 2
    called = [r.typed(ModelCalled) for r in lines if r.kind_name == "model_called"]
    assert [c.request.hash for c in called] == [content_hash(r.body_bytes) for r in p.requests]
    assert [h for _, h in replay.hashes] == [c.request.hash for c in called]


def test_parallel_wave_tool_errors_and_refused_write_outside_the_room(ws: Workspace) -> None:
    p = scripted(
        calls(
            [
                ("a", "read_file", {"path": "todo.md"}),
                ("b", "list_dir", {"path": "."}),
                ("c", "no_such_tool", {}),
                ("d", "read_file", "{not json"),
                ("e", "write_file", {"path": "../other/x.txt", "content": "nope"}),
                ("f", "write_file", {"path": "done.txt", "content": "ok"}),
            ],
            say="Working on it.",
        ),
        text("Wrote done.txt."),
    )
    out = ws.run("tidy up", model=p, room="work")
    assert out.completion == "done"
    lines = run_lines(ws, out.run_id)
    wave = [r for r in lines if r.kind_name in ("tool_called", "tool_result")]
    # lines in call order, each call followed by its result
    assert [(r.kind_name, r.env.data.get("id") or r.env.data.get("tool_use_id")) for r in wave] == [
        (k, c) for c in "abcdef" for k in ("tool_called", "tool_result")
    ]
    results = {
        r.typed(ToolResult).tool_use_id: r.typed(ToolResult) for r in wave if r.kind_name == "tool_result"
    }
    assert results["a"].result is not None and "one" in str(results["a"].result)
    assert results["c"].error is not None and results["c"].error["code"] == "E_TOOL_UNKNOWN"
    assert results["d"].error is not None and results["d"].error["code"] == "E_INVALID_ARGS"
    refused = results["e"].error
    assert refused is not None and refused["code"] == "E_OUTSIDE_WRITE_DOMAIN"
    assert set(refused["gate"]) == {"rule", "violation", "alternative"}
    assert not (ws.root / "other" / "x.txt").exists()
    assert (ws.root / "work" / "done.txt").read_text() == "ok"
    assert all(r.env.addr == "work" for r in lines)
    check_finished(ws, out)


def test_durability_one_fsync_before_each_model_call_each_writing_tool_and_the_freeze(tmp_path: Path) -> None:
    syncs: list[int] = []
    io = WriterIO()
    real = io.sync

    def sync(fd: int) -> None:
        syncs.append(ledger.next_seq)
        real(fd)

    io.sync = sync
    Workspace.init(tmp_path / "w")
    ledger = Ledger.open(tmp_path / "w", writer=True, io=io)
    registry = builtin_registry()
    p = scripted(
        calls([("r1", "list_dir", {}), ("w1", "write_file", {"path": "a.txt", "content": "1"})]),
        calls(
            [("w2", "write_file", {"path": "b.txt", "content": "2"}), ("r2", "read_file", {"path": "a.txt"})]
        ),
        text("done"),
    )
    prefix = build_prefix(
        dialect="anthropic", model="script", tools=tool_specs(registry.tool_table()), room=None
    )
    events: list[str] = []
    loop = RunLoop(
        RunInputs(
            ledger,
            Cas(tmp_path / "w"),
            p,
            registry,
            ToolContext(workspace=tmp_path / "w", room=None),
            prefix,
            RunOptions(task="write two files"),
        ),
        RunChannels(on_event=lambda r: events.append(r.kind_name)),
    )
    out = asyncio.run(loop.run())
    ledger.close()
    assert out.completion == "done"
    # 3 model calls + 2 writing tools + the freeze; nothing else fsyncs
    assert len(syncs) == 6
    ws = Workspace.open(tmp_path / "w")
    lines = ws.records(run=out.run_id)
    by_seq = {r.seq: r.kind_name for r in lines}
    flushed_through = [s - 1 for s in syncs[1:]] + [lines[-1].seq]  # last seq durable at each fsync
    durable_kinds = [by_seq.get(s) for s in flushed_through]
    assert durable_kinds == [
        "model_called",
        "tool_called",
        "model_called",
        "tool_called",
        "model_called",
        "run_frozen",
    ]
    assert events == [r.kind_name for r in lines]
    assert out.folder_feeds == out.lines == len(lines)  # each line folded once, no re-fold


def test_empty_reply_freezes_as_limit(ws: Workspace) -> None:
    out = ws.run("say nothing", model=scripted({"content": [{"kind": "text", "text": "  "}]}))
    assert out.completion == "limit" and "empty" in out.reason
    frozen = run_lines(ws, out.run_id)[-1].typed(RunFrozen)
    assert frozen.completion == "limit" and frozen.error is None
    check_finished(ws, out)


def test_max_tokens_stop_freezes_as_limit(ws: Workspace) -> None:
    out = ws.run("write a lot", model=scripted(text("and so on and so", stop="max_tokens")))
    assert out.completion == "limit" and "max_tokens" in out.reason
    assert run_lines(ws, out.run_id)[-1].typed(RunFrozen).completion == "limit"
    check_finished(ws, out)


def test_turn_ceiling_freezes_as_limit(ws: Workspace) -> None:
    p = scripted(*[call(f"c{i}", "list_dir", {"path": "."} if i % 2 else {}) for i in range(5)])
    out = ws.run("look around", model=p, max_turns=2)
    assert out.completion == "limit" and out.turns == 2 and "ceiling" in out.reason
    check_finished(ws, out)


def test_retries_are_recorded_and_every_attempt_is_a_model_call(ws: Workspace) -> None:
    p = scripted(
        {"fault": "http_429", "retry_after_ms": 3},
        {"fault": "http_500"},
        {"fault": "cut_stream"},
        call("c1", "list_dir", {}),
        text("ok"),
    )
    out = ws.run("list", model=p, retry=FAST)
    assert out.completion == "done" and out.attempts == 5 and out.turns == 2
    lines = run_lines(ws, out.run_id)
    fired = [r.typed(WatchdogFired) for r in lines if r.kind_name == "watchdog_fired"]
    assert [(w.reason, w.attempt, w.status) for w in fired] == [
        ("http_429", 1, 429),
        ("http_500", 2, 500),
        ("stream_cut", 3, None),
    ]
    assert fired[0].delay_ms is not None and fired[0].delay_ms >= 3
    attempts = [r.typed(ModelCalled) for r in lines if r.kind_name == "model_called"]
    assert [a.attempt for a in attempts] == [None, 2, 3, 4, None]
    assert len({a.request.hash for a in attempts[:4]}) == 1  # the same bytes each attempt
    replay = check_finished(ws, out)
    assert replay.exact == 5


def test_retries_give_up_after_max_attempts_and_refusals_freeze_at_once(ws: Workspace) -> None:
    out = ws.run("x", model=scripted(*[{"fault": "http_529"}] * 6), retry=RetryPolicy(1, 2, 3))
    assert out.completion == "failed" and out.attempts == 3
    assert out.error is not None and out.error.code is ErrorCode.PROVIDER
    frozen = run_lines(ws, out.run_id)[-1].typed(RunFrozen)
    assert frozen.completion == "cancelled" and frozen.cause == "error" and frozen.error is not None
    check_finished(ws, out)
    out2 = ws.run("y", model=scripted({"fault": "http_400_refusal"}, text("never")), retry=FAST)
    assert out2.completion == "failed" and out2.attempts == 1
    assert "model_returned" not in kinds(ws, out2.run_id)
    check_finished(ws, out2)


def test_out_of_replies_freezes_with_a_clear_error(ws: Workspace) -> None:
    out = ws.run("x", model=scripted(call("c1", "list_dir", {})))
    assert out.completion == "failed" and out.error is not None
    assert "no reply left" in out.error.action
    check_finished(ws, out)


def test_stall_guard_steers_on_the_third_repeat_and_freezes_on_the_fourth(ws: Workspace) -> None:
    same = [call(f"s{i}", "read_file", {"path": "notes.txt"}) for i in range(4)]
    out = ws.run("loop", model=scripted(*same, text("never reached")))
    assert out.completion == "failed" and out.error is not None
    assert out.error.code is ErrorCode.LOOP_SUSPECTED
    ks = kinds(ws, out.run_id)
    steers = [r for r in run_lines(ws, out.run_id) if r.kind_name == "steer_received"]
    assert len(steers) == 1 and steers[0].env.data["source"] == "runtime"
    assert ks.count("watchdog_fired") == 2
    check_finished(ws, out)
    # the steer reached the model as `runtime:` text after the third wave's results
    lines = run_lines(ws, out.run_id)
    assert steers[0].seq > [r.seq for r in lines if r.kind_name == "tool_result"][2]


def test_stall_guard_recovers_when_the_model_changes_course(ws: Workspace) -> None:
    same = [call(f"s{i}", "read_file", {"path": "notes.txt"}) for i in range(3)]
    p = scripted(*same, call("d1", "list_dir", {}), text("done differently"))
    out = ws.run("loop then stop", model=p)
    assert out.completion == "done"
    last_request = p.requests[3].body["messages"][-1]["content"]
    assert any(b.get("type") == "text" and b["text"].startswith("runtime: ") for b in last_request)
    check_finished(ws, out)


def test_done_cites_its_own_final_reply(ws: Workspace) -> None:
    first = ws.run("a", model=scripted(text("first")))
    second = ws.run("b", model=scripted(call("x", "list_dir", {}), text("second")))
    for out in (first, second):
        frozen = run_lines(ws, out.run_id)[-1].typed(RunFrozen)
        assert frozen.completion == "done" and frozen.evidence
        (ev,) = frozen.evidence
        rec = ws.record_at(ev.seq)
        assert rec.run == out.run_id and rec.kind_name == "model_returned"
        check_finished(ws, out)


def test_cancel_during_the_model_call_freezes_cancelled_with_a_valid_history(ws: Workspace) -> None:
    async def main() -> Any:
        cancel = asyncio.Event()
        p = scripted(call("c1", "list_dir", {}), text("slow", delay_ms=30_000))

        def on_event(rec: Any) -> None:
            if rec.kind_name == "model_called" and rec.env.data.get("attempt") is None and p.used == 1:
                asyncio.get_running_loop().call_later(0.05, cancel.set)

        return await ws.arun("wait", model=p, cancel=cancel, on_event=on_event)

    out = asyncio.run(main())
    assert out.completion == "cancelled"
    ks = kinds(ws, out.run_id)
    assert ks[-5:] == ["model_called", "cancel_received", "handoff_written", "run_frozen"][-5:] or ks[
        -4:
    ] == [
        "model_called",
        "cancel_received",
        "handoff_written",
        "run_frozen",
    ]
    check_finished(ws, out)


def test_cancel_during_a_wave_answers_calls_that_never_started_as_not_started(ws: Workspace) -> None:
    started = asyncio.Event()

    async def slow(seconds: int) -> dict[str, Any]:
        """Wait a while.

        Args:
            seconds: How long.
        """
        started.set()
        await asyncio.sleep(seconds)
        return {"slept": seconds}

    async def main() -> Any:
        cancel = asyncio.Event()
        p = scripted(
            calls(
                [("s1", "slow", {"seconds": 30}), ("w1", "write_file", {"path": "late.txt", "content": "x"})]
            ),
            text("never"),
        )

        async def trip() -> None:
            await started.wait()
            cancel.set()

        task = asyncio.ensure_future(trip())
        out = await ws.arun("slow then write", model=p, cancel=cancel, tools=[slow])
        await task
        return out

    out = asyncio.run(main())
    assert out.completion == "cancelled"
    lines = run_lines(ws, out.run_id)
    called = [r.typed(ToolCalled).id for r in lines if r.kind_name == "tool_called"]
    assert called == ["s1", "w1"]  # the wave is completed: every call is recorded and answered
    res, never = [r.typed(ToolResult) for r in lines if r.kind_name == "tool_result"]
    assert res.error is not None and res.error["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    assert never.error is not None and "not started: the run was cancelled before it ran" in str(never.error["action"])
    assert not (ws.root / "late.txt").exists()
    assert [r.kind_name for r in lines[-3:]] == ["cancel_received", "handoff_written", "run_frozen"]
    check_finished(ws, out)


def test_cancel_before_the_first_turn(ws: Workspace) -> None:
    async def main() -> Any:
        cancel = asyncio.Event()
        cancel.set()
        return await ws.arun("never", model=scripted(text("x")), cancel=cancel)

    out = asyncio.run(main())
    assert out.completion == "cancelled" and out.attempts == 0
    assert kinds(ws, out.run_id) == ["run_started", "cancel_received", "handoff_written", "run_frozen"]
    check_finished(ws, out)


def test_many_runs_concurrently_on_one_writer(ws: Workspace) -> None:
    async def main() -> list[Any]:
        runs = [
            ws.arun(
                f"task {i}",
                model=scripted(
                    call(f"c{i}", "read_file", {"path": "notes.txt"}, delay_ms=5), text(f"done {i}")
                ),
            )
            for i in range(4)
        ]
        return list(await asyncio.gather(*runs))

    outs = asyncio.run(main())
    assert [o.completion for o in outs] == ["done"] * 4
    seqs = sorted(r.seq for r in ws.records())
    assert seqs == list(range(len(seqs)))
    runs_at = [r.run for r in ws.records() if r.run in {o.run_id for o in outs}]
    assert len({runs_at[i] for i in range(8)}) > 1  # the runs' lines interleave
    for o in outs:
        check_finished(ws, o)


def test_other_dialects_render_validate_and_replay(ws: Workspace) -> None:
    for dialect in ("openai-chat", "openai-responses"):
        p = scripted(
            calls([("c1", "list_dir", {}), ("c2", "read_file", {"path": "notes.txt"})]),
            text("done"),
            dialect=dialect,
        )
        out = ws.run("look", model=p)
        assert out.completion == "done"
        assert run_lines(ws, out.run_id)[3].typed(ModelCalled).dialect == dialect
        assert check_finished(ws, out).exact == 2


def test_fork_continues_from_the_mothers_conversation(ws: Workspace) -> None:
    mother = ws.run(
        "first part", model=scripted(call("m1", "read_file", {"path": "notes.txt"}), text("half"))
    )
    cut = next(r.seq for r in run_lines(ws, mother.run_id) if r.kind_name == "tool_result")
    p = scripted(text("continued"))
    child = ws.run("", model=p, fork=(mother.run_id, cut))
    assert child.completion == "done"
    assert kinds(ws, child.run_id)[:2] == ["run_started", "run_forked"]
    assert child.inherited_lines > 0 and child.folder_feeds == child.inherited_lines + child.lines
    body = p.requests[0].body
    assert body["messages"][0]["content"][0]["text"] == "first part"  # the inherited opening
    check_finished(ws, child)


def test_provider_events_and_run_folder_agree_with_the_ledger(ws: Workspace) -> None:
    seen: list[str] = []
    out = ws.run(
        "x", model=scripted(call("a", "list_dir", {}), text("ok")), on_event=lambda r: seen.append(r.hash)
    )
    lines = run_lines(ws, out.run_id)
    assert seen == [r.hash for r in lines]
    folder = RunFolder()
    for r in lines:
        folder.feed(r)
    assert folder.feeds == len(lines) and folder.phase.value == "frozen"
    assert lines[-1].known and lines[-1].kind is Kind.RUN_FROZEN


@pytest.mark.parametrize(
    "bad", ["nonsense", "script:", "openai-compat:m@ftp://x", "anthropic:", "script:x#klingon"]
)
def test_bad_model_specs_are_refused_listing_the_valid_forms(ws: Workspace, bad: str) -> None:
    from runfold.core.errors import RunfoldError

    with pytest.raises(RunfoldError) as err:
        ws.run("x", model=bad)
    assert err.value.code is ErrorCode.INVALID_ARGS
    assert "anthropic:<model>" in err.value.recovery or "anthropic" in err.value.recovery
    assert ws.runs() == []  # nothing was written


def test_script_spec_reads_a_jsonl_file(ws: Workspace, tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text(
        orjson.dumps(call("c", "list_dir", {})).decode() + "\n\n" + orjson.dumps(text("ok")).decode() + "\n"
    )
    out = ws.run("x", model=f"script:{f}#openai-chat")
    assert out.completion == "done"
    assert run_lines(ws, out.run_id)[3].typed(ModelCalled).dialect == "openai-chat"
    check_finished(ws, out)


def test_run_events_yields_every_line_then_the_outcome(ws: Workspace) -> None:
    async def main() -> list[Any]:
        got: list[Any] = []
        async for item in ws.run_events("x", model=scripted(call("a", "list_dir", {}), text("ok"))):
            got.append(item)
        return got

    got = asyncio.run(main())
    *records, outcome = got
    assert outcome.completion == "done"
    assert [r.hash for r in records] == [r.hash for r in run_lines(ws, outcome.run_id)]


def test_leaving_the_event_stream_early_cancels_the_run(ws: Workspace) -> None:
    async def main() -> str:
        stream = ws.run_events("x", model=scripted(call("a", "list_dir", {}), text("ok", delay_ms=30_000)))
        async for item in stream:
            if item.kind_name == "tool_result":
                run = str(item.run)
                break
        await stream.aclose()
        return run

    run = asyncio.run(main())
    assert kinds(ws, run)[-3:] == ["cancel_received", "handoff_written", "run_frozen"]
    assert run_lines(ws, run)[-1].typed(RunFrozen).completion == "cancelled"


def test_a_failing_event_callback_cannot_tear_the_history(ws: Workspace) -> None:
    def boom(rec: Any) -> None:
        if rec.kind_name == "model_returned":
            raise RuntimeError("callback bug")

    with pytest.raises(RuntimeError, match="callback bug"):
        ws.run("x", model=scripted(call("a", "list_dir", {}), text("ok")), on_event=boom)
    (run,) = ws.runs()
    assert kinds(ws, run)[-2:] == ["handoff_written", "run_frozen"]
    assert run_lines(ws, run)[-1].typed(RunFrozen).completion == "done"
    assert ws.replay(run).ok


def test_cancelling_the_driving_task_mid_wave_keeps_the_lines_of_calls_that_ran(ws: Workspace) -> None:
    started = asyncio.Event()

    async def slow(seconds: int) -> dict[str, Any]:
        """Wait a while.

        Args:
            seconds: How long.
        """
        started.set()
        await asyncio.sleep(seconds)
        return {"slept": seconds}

    async def main() -> None:
        p = scripted(
            calls([("s1", "slow", {"seconds": 30}), ("w1", "write_file", {"path": "x.txt", "content": "x"})])
        )
        task = asyncio.ensure_future(ws.arun("slow", model=p, tools=[slow]))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (run,) = ws.runs()
    assert kinds(ws, run)[-5:] == [
        "tool_called",
        "tool_result",
        "cancel_received",
        "handoff_written",
        "run_frozen",
    ]
    assert [r.typed(ToolCalled).id for r in run_lines(ws, run) if r.kind_name == "tool_called"] == ["s1", "w1"]
    assert ws.replay(run).ok and ws.verify().lines > 0


def test_steers_are_held_while_in_flight_and_the_run_answers_them(ws: Workspace) -> None:
    async def main() -> tuple[Any, ScriptedProvider]:
        steers: asyncio.Queue[str] = asyncio.Queue()
        p = scripted(
            call("a", "list_dir", {}, delay_ms=50),
            text("Here is the listing.", delay_ms=50),
            text("Done, and I read your note."),
        )
        sent: list[int] = []

        def on_event(rec: Any) -> None:
            if rec.kind_name == "model_called":
                sent.append(rec.seq)
                if len(sent) == 1:
                    steers.put_nowait("also check the work folder")
                if len(sent) == 2:
                    steers.put_nowait("and say when you are done")

        out = await ws.arun("list files", model=p, steers=steers, on_event=on_event)
        return out, p

    out, p = asyncio.run(main())
    assert out.completion == "done" and out.turns == 3
    lines = run_lines(ws, out.run_id)
    steer_seqs = [r.seq for r in lines if r.kind_name == "steer_received"]
    assert len(steer_seqs) == 2
    # the first steer arrived mid-call: held, it lands after the wave's result
    second = p.requests[1].body["messages"][-1]["content"]
    assert [b["type"] for b in second] == ["tool_result", "text"]
    assert second[1]["text"] == "user: also check the work folder"
    # the second arrived during a reply without calls: the run takes another turn for it
    third = p.requests[2].body["messages"]
    assert third[-1]["content"][-1]["text"] == "user: and say when you are done"
    check_finished(ws, out)


def test_a_bug_in_the_run_loop_freezes_the_run_as_internal_then_surfaces(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: RunLoop) -> None:
        raise KeyError("a runfold bug")

    monkeypatch.setattr(RunLoop, "_assemble", broken)
    events: list[Record] = []
    with pytest.raises(KeyError):
        ws.run("anything", model=scripted(text("never")), on_event=events.append)
    frozen = events[-1].typed(RunFrozen)
    assert frozen.completion == "cancelled" and frozen.cause == "error"
    assert frozen.error is not None and frozen.error["code"] == "E_INTERNAL"  # not E_INVALID_ARGS
    assert exit_code_for(RunfoldError.from_data(frozen.error)) == EXIT_INTERNAL == 4
    assert ws.verify().lines == events[-1].seq + 1  # verify raises on a bad line


def test_a_cancelled_wave_answers_calls_that_never_started_with_a_typed_outcome(tmp_path: Path) -> None:
    async def slow_write(n: int) -> dict[str, Any]:
        """Write slowly.

        Args:
            n: anything.
        """
        await asyncio.sleep(30)
        return {"n": n}

    registry = ToolRegistry()
    registry.add(Tool.from_function(slow_write, effect="write"))
    reqs = [ToolCallRequest("w1", "slow_write", '{"n": 1}'), ToolCallRequest("w2", "slow_write", '{"n": 2}')]

    async def cancel_mid_wave() -> list[ToolOutcome]:
        task = asyncio.ensure_future(execute_wave(reqs, registry, ToolContext(workspace=tmp_path, room=None)))
        await asyncio.sleep(0.1)
        task.cancel()
        try:
            await task
        except WaveCancelled as wc:
            return wc.outcomes
        raise AssertionError("the wave was not cancelled")

    ran, waiting = asyncio.run(cancel_mid_wave())
    assert not isinstance(ran, NotStarted) and ran.error is not None
    assert ran.error["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    assert isinstance(waiting, NotStarted) and waiting.error is not None
    assert waiting.error["code"] == "E_GATE_DENIED"
