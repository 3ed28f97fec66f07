"""Executing waves: read-only calls overlap, writes run alone and in order after `before_write`,
outcomes come back in call order, and every call gets a terminal answer (unknown tool, bad
arguments, exceptions, timeouts, cancellation); the duplicate-call cache answers re-issued calls."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.core.canonical import Envelope, chain_hash, encode_line
from runfold.core.payloads import ToolResult
from runfold.core.records import Record
from runfold.tools import (
    DuplicateCallCache,
    ToolCallRequest,
    ToolContext,
    ToolOutcome,
    ToolRegistry,
    WaveCancelled,
    builtin_registry,
    execute_wave,
    tool_called_payload,
)
from runfold.tools.execute import canonical_args


def req(i: int, name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(f"call_{i}", name, json.dumps(args))


def codes(outcomes: Sequence[ToolOutcome]) -> list[str | None]:
    return [None if o.error is None else o.error["code"] for o in outcomes]


def test_two_slow_async_reads_overlap(ctx: ToolContext) -> None:
    async def main() -> list[ToolOutcome]:
        a_started, b_started = asyncio.Event(), asyncio.Event()

        async def wait_a(label: str) -> str:
            """A: announces itself, then needs B to have started."""
            a_started.set()
            await b_started.wait()
            return label

        async def wait_b(label: str) -> str:
            """B: announces itself, then needs A to have started."""
            b_started.set()
            await a_started.wait()
            return label

        reg = ToolRegistry([wait_a, wait_b])
        # run serially, the first call would wait forever and end as E_TIMEOUT
        return await execute_wave(
            [req(1, "wait_a", label="a"), req(2, "wait_b", label="b")],
            reg,
            dataclasses.replace(ctx, tool_timeout_s=20),
        )

    out = asyncio.run(main())
    assert [o.result for o in out] == [{"value": "a"}, {"value": "b"}]


def test_sync_reads_run_in_overlapping_threads(ctx: ToolContext) -> None:
    barrier = threading.Barrier(2, timeout=20)

    def meet(n: int) -> int:
        """Both calls must be inside the barrier at once."""
        barrier.wait()
        return n

    out = asyncio.run(execute_wave([req(1, "meet", n=1), req(2, "meet", n=2)], ToolRegistry([meet]), ctx))
    assert [o.result for o in out] == [{"value": 1}, {"value": 2}]


def test_outcomes_in_call_order_and_writes_are_barriers(ctx: ToolContext) -> None:
    log: list[str] = []

    async def main() -> list[ToolOutcome]:
        fast_done = asyncio.Event()

        async def slow_read(tag: str) -> str:
            """Finishes only after the fast read."""
            log.append(f"{tag} start")
            await fast_done.wait()
            log.append(f"{tag} end")
            return tag

        async def fast_read(tag: str) -> str:
            """Finishes at once."""
            log.append(f"{tag} start")
            fast_done.set()
            log.append(f"{tag} end")
            return tag

        async def act(tag: str) -> str:
            """A write."""
            log.append(f"{tag} acts")
            return tag

        reg = ToolRegistry([slow_read, fast_read])
        reg.add(act, effect="write")

        async def before_write(call: ToolCallRequest, earlier: Sequence[ToolOutcome]) -> None:
            log.append(f"before {call.id} after {[o.id for o in earlier]}")

        calls = [
            req(0, "slow_read", tag="r0"),
            req(1, "fast_read", tag="r1"),
            req(2, "act", tag="w2"),
            req(3, "fast_read", tag="r3"),
            req(4, "act", tag="w4"),
        ]
        return await execute_wave(calls, reg, ctx, before_write=before_write)

    out = asyncio.run(main())
    assert [o.id for o in out] == [f"call_{i}" for i in range(5)]
    assert [o.result for o in out] == [{"value": t} for t in ("r0", "r1", "w2", "r3", "w4")]
    assert log.index("r1 end") < log.index("r0 end")  # the later read finished first
    assert log[log.index("r0 end") + 1 :] == [
        "before call_2 after ['call_0', 'call_1']",
        "w2 acts",
        "r3 start",
        "r3 end",
        "before call_4 after ['call_0', 'call_1', 'call_2', 'call_3']",
        "w4 acts",
    ]


def test_every_failure_is_a_terminal_answer(ctx: ToolContext) -> None:
    async def self_cancelling(n: int) -> int:
        """Raises CancelledError on its own, mid-execution."""
        raise asyncio.CancelledError

    async def never(n: int) -> int:
        """Never answers."""
        await asyncio.Event().wait()
        return n

    def broken(n: int) -> int:
        """Raises."""
        raise RuntimeError("disk on fire")

    def picky(n: int) -> int:
        """Refuses odd numbers."""
        raise ValueError("n must be even")

    def missing(path: str) -> str:
        """Opens a file."""
        with open(path) as f:
            return f.read()

    reg = ToolRegistry([self_cancelling, never, picky, missing])
    reg.add(broken, effect="write")
    calls = [
        req(0, "self_cancelling", n=1),
        req(1, "never", n=1),
        req(2, "broken", n=1),
        req(3, "picky", n=1),
        req(4, "missing", path="/nonexistent/x"),
        req(5, "nevr", n=1),
        ToolCallRequest("call_6", "picky", '{"n": "one"}'),
        ToolCallRequest("call_7", "picky", "{not json"),
    ]
    out = asyncio.run(execute_wave(calls, reg, dataclasses.replace(ctx, tool_timeout_s=1)))
    assert codes(out) == [
        "E_TOOL_OUTCOME_UNKNOWN",
        "E_TIMEOUT",
        "E_TOOL_OUTCOME_UNKNOWN",
        "E_INVALID_ARGS",
        "E_PATH_NOT_FOUND",
        "E_TOOL_UNKNOWN",
        "E_INVALID_ARGS",
        "E_INVALID_ARGS",
    ]
    errors = [o.error for o in out]
    assert (
        errors[0] is not None
        and errors[0]["recovery"] == "the tool may or may not have acted; check before retrying"
    )
    assert errors[2] is not None and "RuntimeError: disk on fire" in errors[2]["action"]
    assert errors[5] is not None and errors[5]["nearby"] == ["never"]
    assert errors[6] is not None and errors[6]["subject"] == "argument `n`"
    for o in out:  # each becomes a valid, float-free tool_result line
        encode_line(
            Envelope(
                v=2,
                run="r",
                seq=0,
                prev="0" * 64,
                t=0,
                who="runtime",
                kind="tool_result",
                data=o.to_payload().to_data(),
            )
        )


def test_cancelling_a_wave_answers_every_call(ctx: ToolContext) -> None:
    release = threading.Event()

    async def main() -> WaveCancelled:
        started = asyncio.Event()

        async def quick(n: int) -> int:
            """Done at once."""
            return n

        async def hang(n: int) -> int:
            """Signals it started, then waits forever."""
            started.set()
            await asyncio.Event().wait()
            return n

        def stuck(n: int) -> int:
            """A sync tool blocked in its thread."""
            release.wait(20)
            return n

        async def later(n: int) -> int:
            """A write after the reads."""
            return n

        reg = ToolRegistry([quick, hang, stuck])
        reg.add(later, effect="write")
        calls = [req(0, "quick", n=0), req(1, "hang", n=1), req(2, "stuck", n=2), req(3, "later", n=3)]
        task = asyncio.create_task(execute_wave(calls, reg, ctx))
        await started.wait()
        task.cancel()
        with pytest.raises(WaveCancelled) as info:
            await task
        release.set()  # let the abandoned thread end, or asyncio.run waits for it at shutdown
        return info.value

    try:
        cancelled = asyncio.run(main())
    finally:
        release.set()
    assert isinstance(cancelled, asyncio.CancelledError)
    out = cancelled.outcomes
    assert [o.id for o in out] == ["call_0", "call_1", "call_2", "call_3"]
    assert codes(out) == [None, "E_TOOL_OUTCOME_UNKNOWN", "E_TOOL_OUTCOME_UNKNOWN", "E_GATE_DENIED"]
    assert out[0].result == {"value": 0}
    gate = out[3].error["gate"] if out[3].error else None
    assert gate is not None and set(gate) == {"rule", "violation", "alternative"}


def test_before_write_failure_propagates_before_the_write_acts(ctx: ToolContext) -> None:
    acted: list[int] = []

    def act(n: int) -> int:
        """A write."""
        acted.append(n)
        return n

    reg = ToolRegistry()
    reg.add(act, effect="write")

    async def refuse(call: ToolCallRequest, earlier: Sequence[ToolOutcome]) -> None:
        raise OSError("ledger fsync failed")

    with pytest.raises(OSError, match="fsync"):
        asyncio.run(execute_wave([req(0, "act", n=1)], reg, ctx, before_write=refuse))
    assert acted == []


def test_duplicate_call_cache_returns_the_first_answer(ctx: ToolContext) -> None:
    ran: list[int] = []
    hooks: list[str] = []

    def bump(n: int, note: str = "") -> dict[str, int]:
        """A write that counts its runs."""
        ran.append(n)
        return {"runs": len(ran)}

    reg = ToolRegistry()
    reg.add(bump, effect="write")

    async def hook(call: ToolCallRequest, earlier: Sequence[ToolOutcome]) -> None:
        hooks.append(call.id)

    cache = DuplicateCallCache()
    first = asyncio.run(execute_wave([req(0, "bump", n=5)], reg, ctx, cache=cache, before_write=hook))
    assert first[0].result == {"runs": 1} and not first[0].cached
    for position, o in enumerate(first):  # the runtime remembers durable answers
        cache.remember(position, o.name, '{"n": 5}', o.result, o.error)
    cache.remember(1, "bump", '{"n": 6}', None, {"code": "E_TIMEOUT"})

    # re-executed at the same positions: same answers, nothing runs, no before_write
    again = [ToolCallRequest("x0", "bump", '{ "n":5 }'), ToolCallRequest("x1", "bump", '{"n":6}')]
    out = asyncio.run(execute_wave(again, reg, ctx, cache=cache, before_write=hook))
    assert [(o.id, o.result, o.error, o.cached) for o in out] == [
        ("x0", {"runs": 1}, None, True),
        ("x1", None, {"code": "E_TIMEOUT"}, True),
    ]
    assert ran == [5] and hooks == ["call_0"]

    # the same call at another position, or other arguments at the same position, runs
    out = asyncio.run(execute_wave([req(0, "bump", n=5)], reg, ctx, first_position=2, cache=cache))
    out += asyncio.run(execute_wave([req(0, "bump", n=5, note="x")], reg, ctx, cache=cache))
    assert [o.cached for o in out] == [False, False] and ran == [5, 5, 5]
    cache.remember(0, "bump", '{"n": 5}', {"runs": 99}, None)  # the first answer wins
    assert cache.lookup(0, "bump", '{"n":5}') == ({"runs": 1}, None)


def test_builtin_wave_and_line_payloads(ctx: ToolContext) -> None:
    reg = builtin_registry()
    calls = [
        req(0, "write_file", path="notes.md", content="hello\n"),
        req(1, "read_file", path="notes.md"),
        req(2, "list_dir"),
        req(3, "write_file", path="../escape.md", content="no"),
    ]
    out = asyncio.run(execute_wave(calls, reg, ctx))
    assert codes(out) == [None, None, None, "E_OUTSIDE_WRITE_DOMAIN"]
    assert out[1].result is not None and out[1].result["content"] == "hello\n"
    called = tool_called_payload(calls[0], reg).to_data()
    assert called == {
        "id": "call_0",
        "name": "write_file",
        "args": calls[0].args_json,
        "subject": "notes.md",
        "effect": "write",
    }
    assert tool_called_payload(ToolCallRequest("c", "nope", "{"), reg).to_data() == {
        "id": "c",
        "name": "nope",
        "args": "{",
    }
    payload = out[3].to_payload()
    assert isinstance(payload, ToolResult) and payload.result is None
    assert payload.error is not None and payload.error["gate"]["alternative"].startswith("write `escape.md`")


def test_cache_seeded_from_ledger_records_answers_a_re_executed_wave(ctx: ToolContext) -> None:
    ran: list[str] = []

    def note(text: str) -> dict[str, int]:
        """A write that records its runs."""
        ran.append(text)
        return {"runs": len(ran)}

    reg = ToolRegistry()
    reg.add(note, effect="write")
    calls = [req(0, "note", text="a"), req(1, "note", text="b")]
    out = asyncio.run(execute_wave(calls, reg, ctx))
    records: list[Record] = []
    prev = "0" * 64
    for seq, (call, outcome) in enumerate(
        (pair for c, o in zip(calls, out, strict=True) for pair in ((c, None), (c, o)))
    ):
        kind = "tool_called" if outcome is None else "tool_result"
        data = (tool_called_payload(call, reg) if outcome is None else outcome.to_payload()).to_data()
        env = Envelope(
            v=2,
            run="0190a0b0-0000-7000-8000-000000000001",
            seq=seq,
            prev=prev,
            t=0,
            who="runtime",
            kind=kind,
            data=data,
        )
        raw = encode_line(env)
        records.append(Record(env, raw, chain_hash(raw)))
        prev = chain_hash(raw)
    cache = DuplicateCallCache()
    assert cache.remember_records(records) == 2  # the next wave starts at position 2
    again = asyncio.run(
        execute_wave([req(9, "note", text="a"), req(10, "note", text="c")], reg, ctx, cache=cache)
    )
    assert [(o.cached, o.result) for o in again] == [(True, {"runs": 1}), (False, {"runs": 3})]
    assert ran == ["a", "b", "c"]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=100, deadline=None)
@given(args=st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=5), seed=st.randoms())
def test_argument_identity_ignores_key_order_and_spacing(args: dict[str, Any], seed: Any) -> None:
    items = list(args.items())
    seed.shuffle(items)
    spaced = json.dumps(dict(items), indent=2, ensure_ascii=True)
    assert canonical_args(spaced) == canonical_args(json.dumps(args, separators=(",", ":")))
