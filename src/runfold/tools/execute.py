"""Executing one wave of tool calls (DESIGN.md §5 step 6, §9).

Consecutive read-only calls run concurrently; a writing call runs alone, after every earlier
call has finished and after the `before_write` hook (where the run loop makes the ledger durable
up to that call's `tool_called`). Outcomes come back in call order, so the lines the loop writes
equal a serial run. Every call ends with exactly one result or error object, even when it is
unknown, times out, raises or is cancelled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from runfold.core.canonical import Json, content_hash, encode_json
from runfold.core.errors import ErrorCode, Retry, RunfoldError
from runfold.core.fold.resume import CANCELLED_BEFORE_IT_RAN, not_started_error
from runfold.core.kinds import Kind
from runfold.core.payloads import ToolCalled, ToolResult
from runfold.core.records import Record
from runfold.tools.context import ToolContext
from runfold.tools.exec_tool import Launch, exec_command, launch
from runfold.tools.registry import Tool, ToolRegistry
from runfold.tools.results import valid_text


@dataclass(frozen=True)
class ToolCallRequest:
    """One call the model asked for: its `id` (the `tool_use` id), the tool `name`, and the
    arguments as the model's original JSON text (kept verbatim for the ledger, DESIGN.md §3);
    `pgid`/`pstart`: the process group an `exec` call started, waiting at its gate, when
    `before_write` is called (`tools.exec_tool.Launch`), recorded on its `tool_called`."""

    id: str
    name: str
    args_json: str
    pgid: int | None = None
    pstart: int | None = None


@dataclass(frozen=True)
class ToolOutcome:
    """The answer to one call: exactly one of `result` (a float-free object) or `error` (a §11
    error object); `took_us` is the call's wall time in µs; `cached` is True when the answer came
    from the `DuplicateCallCache` instead of running the tool."""

    id: str
    name: str
    result: dict[str, Json] | None
    error: dict[str, Json] | None
    took_us: int
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_payload(self) -> ToolResult:
        """The `tool_result` payload for this outcome; text that is not valid Unicode (a lone
        surrogate) is replaced and the replacement counted (`results.valid_text`)."""
        data: dict[str, Json] = {"tool_use_id": self.id, "name": self.name, "took_us": self.took_us}
        if self.error is None:
            data["result"] = valid_text(self.result) if self.result is not None else None
        else:
            data["error"] = valid_text(self.error)
        return ToolResult.from_data(data)


@dataclass(frozen=True)
class NotStarted(ToolOutcome):
    """The answer to a call a cancelled wave never started: it did not act; its `error` is
    `core.fold.resume.not_started_error` ("not started: the run was cancelled before it ran"),
    which the run loop records as the call's result so the wave is complete (DESIGN.md §5).
    Only `WaveCancelled.outcomes` holds these."""


def tool_called_payload(call: ToolCallRequest, registry: ToolRegistry) -> ToolCalled:
    """The `tool_called` payload of a call: `args` is the model's original JSON text (a string);
    `effect` and `subject` are filled when the tool is known and its arguments parse."""
    found = registry.get(call.name)
    subject: str | None = None
    if found is not None:
        try:
            subject = found.subject_of(orjson.loads(call.args_json or "{}"))
        except (orjson.JSONDecodeError, AttributeError):
            subject = None
    data: dict[str, Json] = {"id": call.id, "name": call.name, "args": call.args_json}
    if subject is not None:
        data["subject"] = subject
    if found is not None:
        data["effect"] = found.effect
    if call.pgid is not None:
        data["pgid"] = call.pgid
        if call.pstart is not None:
            data["pstart"] = call.pstart
    return ToolCalled.from_data(data)


def canonical_args(args_json: str) -> str:
    """The arguments' identity for duplicate detection: BLAKE3 of their canonical JSON (sorted
    keys, compact) when they parse, else of the raw text."""
    try:
        value = orjson.loads(args_json.strip() or "{}")
        return content_hash(encode_json(value))
    except (orjson.JSONDecodeError, TypeError):
        return content_hash(args_json.encode("utf-8", errors="surrogatepass"))


@dataclass
class DuplicateCallCache:
    """First answers by per-run position (DESIGN.md §9: duplicate calls return the first answer).

    The *per-run position* of a call is its 0-based index among all tool calls of the run in call
    order — every `tool_called` of the run counts, those of earlier waves and those the run
    inherited from its mother (a fork's inherited calls keep their positions), whatever their
    outcome. A call whose position, tool name and canonical arguments equal a remembered call's
    gets that call's answer (result or error) without running the tool. Within one live run
    positions never repeat, so the cache answers only when a run is re-executed over calls that
    already have answers (after resume, a fork cut inside a wave, a continue): the runtime seeds it
    with `remember` from the ledger's `tool_called`/`tool_result` pairs, and the re-issued call
    gets the same answer instead of acting twice.
    """

    _answers: dict[tuple[int, str, str], tuple[dict[str, Json] | None, dict[str, Json] | None]] = field(
        default_factory=dict
    )

    def remember(
        self,
        position: int,
        name: str,
        args_json: str,
        result: dict[str, Json] | None,
        error: dict[str, Json] | None,
    ) -> None:
        """Record the answer of the call at `position`; the first answer for a key wins."""
        self._answers.setdefault((position, name, canonical_args(args_json)), (result, error))

    def lookup(
        self, position: int, name: str, args_json: str
    ) -> tuple[dict[str, Json] | None, dict[str, Json] | None] | None:
        """The remembered `(result, error)` for this call, or None."""
        return self._answers.get((position, name, canonical_args(args_json)))

    def __len__(self) -> int:
        return len(self._answers)

    def remember_records(self, records: Iterable[Record], *, first_position: int = 0) -> int:
        """Remember every answered call among `records` (ledger order), numbering `tool_called`
        lines from `first_position`; unknown kinds are skipped. Returns the next position (the
        `first_position` of the run's next wave). The caller picks the records: a run's own lines,
        preceded by the calls it inherited when it is a fork."""
        position = first_position
        pending: dict[str, tuple[int, str, str]] = {}
        for rec in records:
            if not rec.known:
                continue
            if rec.kind is Kind.TOOL_CALLED:
                called = rec.typed(ToolCalled)
                args = called.args if isinstance(called.args, str) else encode_json(called.args).decode()
                pending[called.id] = (position, called.name, args)
                position += 1
            elif rec.kind is Kind.TOOL_RESULT:
                answered = rec.typed(ToolResult)
                key = pending.pop(answered.tool_use_id, None)
                if key is not None:
                    self.remember(*key, answered.result, answered.error)
        return position


class Approval(Protocol):
    """The approval step of a wave (`runfold.runtime.approvals.Approvals` is one): `needs(tool)`
    says whether a call of `tool` must pass it; `decide(call, tool, args)` is awaited once the
    call's `tool_called` is durable and returns None (it may act) or the outcome it gets instead."""

    def needs(self, tool: Tool) -> bool: ...

    async def decide(self, call: ToolCallRequest, tool: Tool, args: Any) -> ToolOutcome | None: ...


BeforeWrite = Callable[[ToolCallRequest, Sequence[ToolOutcome]], Awaitable[None]]
"""`await before_write(call, earlier)`: called before a writing tool acts; `earlier` holds the
outcomes of every earlier call of the wave, in call order (all finished by then)."""


class WaveCancelled(asyncio.CancelledError):
    """The wave was cancelled from outside. `outcomes` still answers every call in call order:
    calls that were running are `E_TOOL_OUTCOME_UNKNOWN`, calls that never started are
    `NotStarted` (they did not act). Being a CancelledError, it cancels the caller if not caught."""

    def __init__(self, outcomes: list[ToolOutcome]) -> None:
        super().__init__("tool wave cancelled")
        self.outcomes = outcomes


def _us_since(start_ns: int) -> int:
    return (time.perf_counter_ns() - start_ns) // 1000


def _outcome_unknown(call: ToolCallRequest, why: str, took_us: int) -> ToolOutcome:
    err = RunfoldError(
        ErrorCode.TOOL_OUTCOME_UNKNOWN,
        f"finish tool call `{call.name}` ({why})",
        f"call {call.id}",
        "the tool may or may not have acted; check before retrying",
        retry=Retry.UNKNOWN,
    )
    return ToolOutcome(call.id, call.name, None, err.to_data(), took_us)


def _not_started(call: ToolCallRequest) -> NotStarted:
    err = not_started_error(call.id, call.name, CANCELLED_BEFORE_IT_RAN)
    return NotStarted(call.id, call.name, None, err.to_data(), 0)


def _error_of(call: ToolCallRequest, tool: Tool, exc: BaseException) -> RunfoldError:
    """The §11 error for an exception a tool raised (not a RunfoldError)."""
    if isinstance(exc, FileNotFoundError):
        return RunfoldError(
            ErrorCode.PATH_NOT_FOUND,
            f"run tool `{call.name}`",
            repr(exc.filename) if exc.filename else f"call {call.id}",
            "the path does not exist; check it and call again",
        )
    if isinstance(exc, ValueError):
        return RunfoldError(
            ErrorCode.INVALID_ARGS,
            f"run tool `{call.name}`",
            f"call {call.id}",
            f"the tool refused its arguments ({type(exc).__name__}: {exc}); change them and call again",
        )
    acted = (
        "it may have acted before failing; check before retrying"
        if tool.effect == "write"
        else ("change the arguments or try another way")
    )
    return RunfoldError(
        ErrorCode.TOOL_OUTCOME_UNKNOWN,
        f"run tool `{call.name}` (it raised {type(exc).__name__}: {str(exc)[:300]})",
        f"call {call.id}",
        acted,
        retry=Retry.UNKNOWN,
    )


@dataclass
class _Prepared:
    call: ToolCallRequest
    tool: Tool | None
    args: dict[str, Any] | None
    done: ToolOutcome | None  # answered without running (unknown tool, bad args, cached)
    gated: bool = False  # passes the approval step first (it then runs alone, as a write)

    @property
    def writes(self) -> bool:
        return self.done is None and self.tool is not None and (self.tool.effect == "write" or self.gated)


def _prepare(
    call: ToolCallRequest,
    position: int,
    registry: ToolRegistry,
    cache: DuplicateCallCache | None,
    approval: Approval | None = None,
) -> _Prepared:
    start = time.perf_counter_ns()
    if cache is not None:
        hit = cache.lookup(position, call.name, call.args_json)
        if hit is not None:
            return _Prepared(
                call,
                None,
                None,
                ToolOutcome(call.id, call.name, hit[0], hit[1], _us_since(start), cached=True),
            )
    try:
        found = registry.require(call.name)
        args = found.parse_args(call.args_json)
    except RunfoldError as err:
        return _Prepared(
            call, None, None, ToolOutcome(call.id, call.name, None, err.to_data(), _us_since(start))
        )
    return _Prepared(call, found, args, None, approval is not None and approval.needs(found))


async def _run_one(prep: _Prepared, ctx: ToolContext) -> ToolOutcome:
    """Run one prepared call to its outcome. Raises only CancelledError, and only when the
    surrounding task is being cancelled; a tool that raises CancelledError on its own is
    answered with E_TOOL_OUTCOME_UNKNOWN."""
    call, found, args = prep.call, prep.tool, prep.args
    assert found is not None and args is not None
    start = time.perf_counter_ns()
    limit = None if found.times_itself else ctx.tool_timeout_s
    try:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for raises CancelledError even when
        # the tool, told to stop, finished and answered; its answer would be lost
        async with asyncio.timeout(limit):
            result = await found.invoke(args, ctx)
    except RunfoldError as err:
        return ToolOutcome(call.id, call.name, None, err.to_data(), _us_since(start))
    except TimeoutError:
        late = RunfoldError(
            ErrorCode.TIMEOUT,
            f"run tool `{call.name}` (no answer after {limit} s)",
            f"call {call.id}",
            "the tool may still be acting; check before retrying, or ask for less work per call",
            retry=Retry.UNKNOWN,
        )
        return ToolOutcome(call.id, call.name, None, late.to_data(), _us_since(start))
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        return _outcome_unknown(call, "the tool was cancelled mid-execution", _us_since(start))
    except Exception as exc:
        return ToolOutcome(call.id, call.name, None, _error_of(call, found, exc).to_data(), _us_since(start))
    return ToolOutcome(call.id, call.name, result, None, _us_since(start))


async def _prelaunch(prep: _Prepared, ctx: ToolContext) -> tuple[Launch | None, ToolOutcome | None]:
    """For an `exec` call: its process group started and held at its gate (so its `tool_called`
    can record it before it acts), or the outcome of a launch that failed (no sandbox, an empty
    command: nothing started)."""
    if prep.tool is None or prep.tool.fn is not exec_command or prep.args is None:
        return None, None
    start = time.perf_counter_ns()
    try:
        return await launch(str(prep.args.get("command", "")), ctx), None
    except RunfoldError as err:
        return None, ToolOutcome(prep.call.id, prep.call.name, None, err.to_data(), _us_since(start))


async def execute_wave(
    calls: Sequence[ToolCallRequest],
    registry: ToolRegistry,
    ctx: ToolContext,
    *,
    first_position: int = 0,
    cache: DuplicateCallCache | None = None,
    before_write: BeforeWrite | None = None,
    approval: Approval | None = None,
) -> list[ToolOutcome]:
    """Execute one wave and return one outcome per call, in call order.

    - Unknown tools answer `E_TOOL_UNKNOWN` (with the closest names), arguments that are not JSON
      or do not match the schema answer `E_INVALID_ARGS` naming the field; neither runs anything.
    - `first_position` is the per-run position of `calls[0]` (the number of tool calls the run
      made before this wave); with a `cache`, a call whose position, name and arguments were
      answered before gets that answer without running (see `DuplicateCallCache`). The cache is
      not updated here: the caller remembers outcomes once they are durable.
    - Runs of consecutive `read` calls execute concurrently (sync tools in worker threads); a
      `write` call executes alone, after all earlier calls finished and after
      `await before_write(call, earlier_outcomes)`. An exception from `before_write` propagates
      (no call is running at that moment).
    - A tool that raises answers `E_PATH_NOT_FOUND` (FileNotFoundError), `E_INVALID_ARGS`
      (ValueError) or `E_TOOL_OUTCOME_UNKNOWN` (anything else); one that exceeds
      `ctx.tool_timeout_s` answers `E_TIMEOUT` (a sync tool's thread cannot be stopped and may
      finish later); one cancelled on its own answers `E_TOOL_OUTCOME_UNKNOWN`.
    - With an `approval`, a call it `needs` runs alone, like a write: after `before_write` it
      waits for `approval.decide`, and a call that is not allowed gets the outcome it returns
      instead of running.
    - When the wave itself is cancelled, `WaveCancelled` (a CancelledError) is raised carrying an
      outcome for every call (see there).
    """
    prepared = [_prepare(c, first_position + i, registry, cache, approval) for i, c in enumerate(calls)]
    outcomes: list[ToolOutcome | None] = [p.done for p in prepared]
    running: dict[int, asyncio.Task[ToolOutcome]] = {}

    def earlier(index: int) -> list[ToolOutcome]:
        return [o for o in outcomes[:index] if o is not None]  # all answered by then

    i = 0
    since = time.perf_counter_ns()
    try:
        while i < len(prepared):
            if prepared[i].done is not None:
                i += 1
                continue
            if prepared[i].writes:
                call_ctx = ctx
                held = None
                if before_write is not None:
                    held, answered = await _prelaunch(prepared[i], ctx)
                    if answered is not None:
                        outcomes[i] = answered
                        i += 1
                        continue
                    call = prepared[i].call
                    if held is not None:
                        call = dataclasses.replace(call, pgid=held.pgid, pstart=held.pstart)
                        call_ctx = dataclasses.replace(ctx, launched=held)
                    try:
                        await before_write(call, earlier(i))
                    except BaseException:
                        if held is not None:
                            await held.abort()
                        raise
                p = prepared[i]
                if p.gated and approval is not None and p.tool is not None:
                    refused = await approval.decide(p.call, p.tool, p.args)
                    if refused is not None:
                        if held is not None:
                            await held.abort()
                        outcomes[i] = refused
                        i += 1
                        continue
                since = time.perf_counter_ns()
                running = {i: asyncio.create_task(_run_one(prepared[i], call_ctx))}
                outcomes[i] = await running[i]
                running = {}
                i += 1
                continue
            group: list[int] = []
            while i < len(prepared) and not prepared[i].writes:
                if prepared[i].done is None:
                    group.append(i)
                i += 1
            since = time.perf_counter_ns()
            running = {j: asyncio.create_task(_run_one(prepared[j], ctx)) for j in group}
            results = await asyncio.gather(*running.values())
            for j, outcome in zip(group, results, strict=True):
                outcomes[j] = outcome
            running = {}
    except asyncio.CancelledError:
        for task in running.values():
            # a task the cancellation already reached (gather, or the awaited task) is not told
            # twice: a second cancel would interrupt a tool finishing its work and lose its answer
            if task.cancelling() == 0:
                task.cancel()
        if running:
            await asyncio.wait(running.values())
        for j, task in running.items():
            if task.done() and not task.cancelled() and task.exception() is None:
                outcomes[j] = task.result()
            else:
                outcomes[j] = _outcome_unknown(
                    prepared[j].call, "the run was cancelled mid-execution", _us_since(since)
                )
        complete = [
            o if o is not None else _not_started(p.call) for o, p in zip(outcomes, prepared, strict=True)
        ]
        raise WaveCancelled(complete) from None
    return [o for o in outcomes if o is not None]
