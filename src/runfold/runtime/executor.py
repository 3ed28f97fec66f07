"""The executor: one agent run from dispatch through turns to its freeze (DESIGN.md §5).

Every fact is a ledger line before anything depends on it. Lines are staged as they happen and
made durable (one write + one fsync) at the three durability points: before each model call,
before each writing tool acts, and at the freeze. The request of every turn is rendered from the
conversation as the run fold sees it — each staged line is fed into the same incremental folder
`replay` uses — so replay is byte-exact by construction. asyncio throughout: one process may drive
many runs on one ledger writer (their lines interleave; seq is global).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from runfold.core.canonical import content_hash
from runfold.core.errors import ErrorCode, Retry, RunfoldError
from runfold.core.fold import ForkPlan, RunFolder
from runfold.core.messages import Block, check_block
from runfold.core.payloads import (
    BytesRef,
    CancelReceived,
    Evidence,
    HandoffWritten,
    ModelCalled,
    ModelReturned,
    Payload,
    PromptAssembled,
    PromptShapeCompared,
    RunFrozen,
    RunStarted,
    Segment,
    SteerReceived,
    WatchdogFired,
)
from runfold.core.records import Draft, Record
from runfold.core.render.incremental import IncrementalRenderer
from runfold.core.validate.incremental import IncrementalValidator
from runfold.providers.base import Provider, ProviderError, Reply, Request, StreamCallback, Usage
from runfold.runtime.control import RunControl, Steer, steer_author
from runfold.runtime.prefix import Prefix
from runfold.runtime.prefix import make_struct as _make
from runfold.runtime.spec import new_run_id
from runfold.store.cas import Cas
from runfold.store.ledger import RUNTIME, Ledger, now_ms
from runfold.tools import (
    DuplicateCallCache,
    ToolCallRequest,
    ToolContext,
    ToolOutcome,
    ToolRegistry,
    WaveCancelled,
    execute_wave,
    tool_called_payload,
)
from runfold.tools.execute import canonical_args

T = TypeVar("T")


LIMIT_STOPS: Final = frozenset({"max_tokens", "length", "max_output_tokens", "incomplete"})
"""Stop reasons meaning the reply hit its output ceiling (Anthropic, OpenAI Chat, Responses)."""

STALL_REPEATS: Final = 3
"""The same action this many times in a row gets a corrective `runtime:` steer; one more freezes
the run with `E_LOOP_SUSPECTED`."""

STALL_STEER: Final = (
    "You have taken the same action {n} times in a row with the same result. Do not repeat it: "
    "try a different approach, or give your final answer without calling a tool."
)

FAILED: Final = "failed"
"""`RunOutcome.completion` of a run frozen by an error (the ledger says `cancelled`, cause `error`)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Back-off for retryable provider errors (408/429/5xx/cut streams, DESIGN.md §8):
    attempt n waits `min(cap_ms, base_ms · 2^(n-1))` ms scaled by a random factor in [0.5, 1]
    ("equal jitter"), or the provider's `retry_after_ms` when it is longer (capped at
    `cap_ms`); at most `max_attempts` attempts in all."""

    base_ms: int = 500
    cap_ms: int = 30_000
    max_attempts: int = 5

    def delay_ms(self, attempt: int, retry_after_ms: int | None, rand: float) -> int:
        """The wait in ms after failed attempt `attempt` (1-based); `rand` in [0, 1)."""
        ceiling = min(self.cap_ms, self.base_ms * (1 << min(attempt - 1, 30)))
        delay = int(ceiling * (0.5 + rand / 2))
        if retry_after_ms is not None:
            delay = max(delay, min(retry_after_ms, self.cap_ms))
        return delay


@dataclass(frozen=True)
class RunOptions:
    """What a run is asked to do and how.

    - `task`: the person's words (the opening, `with_person`); `goal`: recorded and put in the
      `run` system segment;
    - `room`: the run's address (its write domain), None for the workspace root;
    - `max_turns`: the turn ceiling (model calls that got a reply), None for no ceiling;
    - `system`: replaces the default `workspace` system segment text;
    - `who`: the author of `run_started` (the person); `agent`: the author of the run's own
      lines (default: the room, or `agent`);
    - `retry`: the back-off policy; `tool_timeout_s`: ceiling per tool call in seconds;
    - `note`: the runtime's word written as the run's first `steer_received` (source `runtime`),
      e.g. why a successor continues its predecessor (DESIGN.md §7).
    """

    task: str
    goal: str = ""
    room: str | None = None
    max_turns: int | None = None
    system: str | None = None
    who: str = "person"
    agent: str | None = None
    retry: RetryPolicy = RetryPolicy()
    note: str | None = None


@dataclass
class RunOutcome:
    """How a run ended.

    - `run_id`; `completion`: `done`, `limit`, `cancelled` or `failed` (an error froze it; the
      ledger line says `cancelled` with `cause: error` and the error);
    - `error`: the error that froze it (None otherwise); `reason`: one line saying why it ended;
    - `turns`: model calls that got a reply; `attempts`: every `model_called` line;
      `tool_calls`: `tool_called` lines;
    - `usage`: token totals; `billed_usd_micros`: total cost in micro-USD, None when a price was
      unknown (never 0 for unknown);
    - `evidence`: the lines `done` cites; `frozen_seq`: the seq of `run_frozen`;
    - `lines`, `ledger_bytes`: lines and bytes (newlines included) the run wrote;
    - `folder_feeds`: lines fed to the run fold: `inherited_lines` (a fork's lineage, folded once)
      plus `lines` — the run is never re-folded per turn.
    """

    run_id: str
    completion: str
    error: RunfoldError | None = None
    reason: str = ""
    turns: int = 0
    attempts: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    billed_usd_micros: int | None = 0
    evidence: list[Evidence] = field(default_factory=list)
    frozen_seq: int = -1
    lines: int = 0
    ledger_bytes: int = 0
    folder_feeds: int = 0
    inherited_lines: int = 0

    @property
    def ok(self) -> bool:
        return self.completion == "done"


Bill = Callable[[str, Usage], "int | None"]
"""`bill(model, usage) -> micro-USD or None when the price is unknown`."""


class _Stop(Exception):
    """Internal: the run ends here (completion, why, evidence, error)."""

    def __init__(
        self,
        completion: str,
        reason: str,
        *,
        evidence: Sequence[Evidence] = (),
        error: RunfoldError | None = None,
    ) -> None:
        super().__init__(reason)
        self.completion = completion
        self.reason = reason
        self.evidence = list(evidence)
        self.error = error


class _Cancelled(Exception):
    """Internal: the cancel event fired while something was in flight."""


def _is_not_started(outcome: ToolOutcome) -> bool:
    """True for the answer execute_wave gives a call that never started (it did not act)."""
    err = outcome.error
    if err is None or err.get("code") != ErrorCode.GATE_DENIED.value:
        return False
    gate = err.get("gate")
    return isinstance(gate, dict) and gate.get("rule") == "a cancelled run starts no new tool calls"


def _visible(blocks: Sequence[Block]) -> bool:
    """True when a reply says something: a non-blank text block or a tool call."""
    return any(
        (b["kind"] == "text" and str(b.get("text", "")).strip()) or b["kind"] == "tool_use" for b in blocks
    )


def _usage_sum(a: Usage, b: Usage) -> Usage:
    return Usage(
        input=a.input + b.input,
        output=a.output + b.output,
        cache_read=a.cache_read + b.cache_read,
        cache_write=a.cache_write + b.cache_write,
    )


class RunLoop:
    """One run (DESIGN.md §5). Build it, then `await loop.run()` once.

    `ledger`: the workspace's writer (shared by concurrent runs); `cas`: where the frozen prefix
    is stored; `provider`: the model; `registry`/`ctx`: the tools and their context; `prefix`:
    the frozen prefix (see `runtime.prefix.build_prefix`); `on_event(record)` is called for every
    line as it is staged (final bytes; durable at the next flush); `cancel` is checked at every
    safe point and aborts an in-flight model call, back-off or tool wave; `steers` (a queue of the
    person's words, or `Steer`s carrying a source and a control signal id) is drained at every
    safe point; `control` links the run to the workspace's control hub (signal ids of cancels,
    acks once recorded, DESIGN.md §5); `bill` prices a reply.
    `rand`/`sleep` may be replaced in tests (jitter, back-off waits).
    """

    def __init__(
        self,
        ledger: Ledger,
        cas: Cas,
        provider: Provider,
        registry: ToolRegistry,
        ctx: ToolContext,
        prefix: Prefix,
        options: RunOptions,
        *,
        run_id: str | None = None,
        on_event: Callable[[Record], None] | None = None,
        on_delta: StreamCallback | None = None,
        cancel: asyncio.Event | None = None,
        bill: Bill | None = None,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        fork: ForkPlan | None = None,
        steers: asyncio.Queue[str | Steer] | None = None,
        control: RunControl | None = None,
    ) -> None:
        self.ledger = ledger
        self.cas = cas
        self.provider = provider
        self.registry = registry
        self.ctx = ctx
        self.prefix = prefix
        self.options = options
        self.run_id = run_id or new_run_id()
        self.on_event = on_event
        self.on_delta = on_delta
        self.cancel = cancel
        self.bill = bill
        self.rand = rand
        self.sleep = sleep
        self.agent = options.agent or options.room or "agent"
        self.addr = options.room
        self.folder = RunFolder()
        self.cache = DuplicateCallCache()
        self.outcome = RunOutcome(self.run_id, completion="running")
        self._position = 0
        self._assembled = False
        self._incremental: tuple[Prefix, IncrementalRenderer, IncrementalValidator] | None = None
        self._recorded_segments: list[Segment] = []
        self._recorded_tools: BytesRef | None = None
        self._last_action: tuple[Any, ...] | None = None
        self._repeats = 0
        self._steer: str | None = None
        self._priced = True
        self._tool_ids: set[str] = set()
        self._held_delivered = False
        self._callback_error: Exception | None = None
        self.fork = fork
        self.steers = steers
        self.control = control
        self._signals: set[str] = set()  # control signal ids this run recorded
        self._unacked: list[tuple[str, int]] = []  # (signal, seq) staged, not yet acked
        if fork is not None:
            self.run_id = fork.new_run
            self.outcome.run_id = fork.new_run

    # ---- writing -------------------------------------------------------------------------

    def _write(
        self, payload: Payload, *, who: str | None = None, t: int | None = None, inherits: bool = False
    ) -> Record:
        """Stage one line of this run, fold it, report it."""
        draft = Draft(self.run_id, who or self.agent, payload.KIND.value, payload, addr=self.addr, t=t)
        rec = self.ledger.stage([draft])[0]
        self.folder.feed(rec, inherits=inherits)
        self.outcome.lines += 1
        self.outcome.ledger_bytes += len(rec.raw) + 1
        if self.on_event is not None:
            try:
                self.on_event(rec)
            except Exception as exc:  # a caller's callback must not tear the run's history
                self._callback_error = exc
                self.on_event = None
        return rec

    def _flush(self) -> None:
        self.ledger.flush()
        if self._unacked:
            done, self._unacked = self._unacked, []
            if self.control is not None:
                for signal, seq in done:
                    self.control.recorded(signal, seq)  # durable now: the inbox file may go

    # ---- cancellation ----------------------------------------------------------------------

    def _cancel_set(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def _safe_point(self, where: str) -> int:
        """A safe point (DESIGN.md §5): steers waiting in the queue are written
        (`steer_received`), then a cancel is consumed here and ends the run. Returns how many
        steers were written."""
        taken = self._take_steers()
        if self._cancel_set():
            self._cancel_line()
            raise _Stop("cancelled", f"cancelled by the person at the safe point {where}")
        return taken

    def _take_steers(self) -> int:
        """Write every steer waiting in the queue as `steer_received` (a plain string is the
        person's words; a `Steer` carries its source and control signal id). A signal already
        recorded is skipped (exactly-once); when a signal was written the ledger is flushed so
        its inbox file can go. Returns how many lines were written."""
        taken = 0
        while self.steers is not None:
            try:
                item = self.steers.get_nowait()
            except asyncio.QueueEmpty:
                break
            steer = item if isinstance(item, Steer) else Steer(item)
            if not steer.text.strip() or not self._new_signal(steer.signal):
                continue
            rec = self._write(
                _make(SteerReceived, source=steer.source, text=steer.text, signal=steer.signal),
                who=steer_author(steer.source, self.options.who),
            )
            self._note_signal(steer.signal, rec)
            taken += 1
        if self._unacked:
            self._flush()
        return taken

    def _new_signal(self, signal: str | None) -> bool:
        if signal is None:
            return True
        return signal not in self._signals and not (
            self.control is not None and self.control.is_recorded(signal)
        )

    def _note_signal(self, signal: str | None, rec: Record) -> None:
        if signal is not None:
            self._signals.add(signal)
            self._unacked.append((signal, rec.seq))

    def _cancel_line(self) -> None:
        """The one writer of this run's `cancel_received` (source `user`): steers still waiting
        are written first (never lost), then the line carries the control signal id of the cancel
        when it came through the inbox (acked once the freeze is flushed)."""
        self._take_steers()
        signal = self.control.cancel_signal if self.control is not None else None
        if signal is not None and not self._new_signal(signal):
            signal = None
        rec = self._write(_make(CancelReceived, source="user", signal=signal), who="person")
        self._note_signal(signal, rec)

    async def _race(self, coro: Awaitable[T]) -> T:
        """Await `coro`, aborting it when the cancel event fires (raises `_Cancelled`)."""
        task = asyncio.ensure_future(coro)
        if self.cancel is None:
            return await task
        waiter = asyncio.ensure_future(self.cancel.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            waiter.cancel()
            raise
        if task.done():
            waiter.cancel()
            return task.result()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise _Cancelled

    # ---- the run ---------------------------------------------------------------------------

    async def run(self) -> RunOutcome:
        """Dispatch, turns, freeze. Returns the outcome; the run is always frozen (handoff then
        run_frozen, flushed) unless the ledger itself fails (`E_STORAGE_FATAL` propagates). An
        outer cancellation of the awaiting task freezes the run as cancelled, then re-raises; an
        unexpected exception (a bug) freezes it as failed, then re-raises; an exception raised by
        `on_event` stops further events and is raised once the run is frozen."""
        opts = self.options
        if self.fork is not None:
            self._inherit(self.fork)
        else:
            policy: dict[str, Any] = {}
            if opts.max_turns is not None:
                policy["max_turns"] = opts.max_turns
            self._write(
                _make(
                    RunStarted,
                    task=opts.task,
                    goal=opts.goal,
                    skills=[],
                    opening="with_person",
                    model=self.provider.model,
                    policy=policy or None,
                ),
                who=opts.who,
            )
        if opts.note is not None:
            self._write(_make(SteerReceived, source="runtime", text=opts.note), who=RUNTIME)
        reraise: BaseException | None = None
        try:
            stop = await self._turns()
        except _Stop as s:
            stop = s
        except asyncio.CancelledError as exc:
            self._cancel_line()
            stop = _Stop("cancelled", "the task driving the run was cancelled")
            reraise = exc
        except RunfoldError as err:
            if err.code is ErrorCode.STORAGE_FATAL:
                raise
            stop = _Stop(FAILED, err.display(), error=err)
        except Exception as exc:  # a bug: freeze the run with a clear error, then let it surface
            bug = RunfoldError(
                ErrorCode.STORAGE_FATAL if isinstance(exc, OSError) else ErrorCode.INVALID_ARGS,
                f"run the agent loop ({type(exc).__name__}: {str(exc)[:300]})",
                f"run {self.run_id}",
                "the run was frozen with a valid history; report this with the traceback and fork the run to continue",
            )
            stop = _Stop(FAILED, bug.display(), error=bug)
            reraise = exc
        self._freeze(stop)
        if reraise is not None:
            raise reraise
        if self._callback_error is not None:
            raise self._callback_error
        return self.outcome

    def _inherit(self, plan: ForkPlan) -> None:
        """Start as a fork (DESIGN.md §7): fold the mother's lineage through the cut once, then
        write the plan's `run_started` (opening `inherited`) and `run_forked`. Inherited tool
        calls keep their per-run positions (duplicate-call cache) and their ids stay taken."""
        lin = plan.inherited.lineage
        for index, step in enumerate(lin.steps):
            for rec in step.lines:
                self.folder.feed(rec, inherits=index > 0 and rec is step.lines[0])
        self._position = self.cache.remember_records(lin.records())
        self.outcome.inherited_lines = self.folder.feeds
        for msg in plan.inherited.messages:
            self._tool_ids.update(str(b["id"]) for b in msg["content"] if b.get("kind") == "tool_use")
        started, forked = plan.drafts
        assert isinstance(started.data, Payload) and isinstance(forked.data, Payload)
        self.addr = started.addr
        self._write(started.data, who=started.who, inherits=True)
        self._write(forked.data, who=forked.who)

    async def _turns(self) -> _Stop:
        turn = 0
        while True:
            if self.options.max_turns is not None and turn >= self.options.max_turns:
                return _Stop("limit", f"the turn ceiling ({self.options.max_turns}) was reached")
            self._safe_point("before assemble")
            if self._steer is not None:
                self._write(_make(SteerReceived, source="runtime", text=self._steer), who=RUNTIME)
                self._steer = None
            request = self._assemble()
            self._safe_point("before call")
            rec, reply = await self._call(request)
            turn += 1
            self.outcome.turns = turn
            calls = [b for b in reply.blocks if b["kind"] == "tool_use"]
            evidence = [_make(Evidence, kind="model_returned", seq=rec.seq)]
            self._check_stall(reply.blocks, calls)
            if reply.stop in LIMIT_STOPS:
                return _Stop(
                    "limit", f"the reply stopped at its output ceiling ({reply.stop})", evidence=evidence
                )
            steered = self._safe_point("before wave")
            if not calls:
                if self._held_delivered or steered:
                    continue  # the person's words wait for an answer: another turn (DESIGN.md §6)
                if not _visible(reply.blocks):
                    return _Stop("limit", "the model returned an empty reply", evidence=evidence)
                return _Stop("done", "the model answered without calling a tool", evidence=evidence)
            await self._wave(calls)

    # ---- assemble ---------------------------------------------------------------------------

    def _assemble(self) -> Request:
        conv = self.folder.conversation
        assert conv is not None
        messages = conv.messages_view()  # the conversation's own messages: no copies
        prefix = self.prefix
        if self._incremental is None or self._incremental[0] is not prefix:
            self._incremental = (
                prefix,
                IncrementalRenderer(prefix.dialect, prefix.spec(())),
                IncrementalValidator(prefix.dialect),
            )
        # per-turn work independent of history (but for joining and hashing the bytes);
        # byte-identical to render_request + ensure_valid + request_bytes
        rendered, body_bytes = self._incremental[1].render_bytes(messages)
        self._incremental[2].ensure_valid(rendered.body)
        shape = conv.check_extends_last_sent()
        if shape == "rewritten":
            raise RunfoldError(
                ErrorCode.WIRE_MISMATCH,
                "send a request that edits a message already sent",
                f"run {self.run_id}",
                "this is a runfold bug; report it with the ledger and fork the run before this turn",
            )
        system_moved: list[str] = []
        tools_moved = False
        if not self._assembled:
            locator = "cas:b3-" + self.cas.put(prefix.document())
            self._recorded_segments = prefix.segments()
            self._recorded_tools = prefix.tools_ref()
            self._write(
                _make(
                    PromptAssembled,
                    segments=self._recorded_segments,
                    tools=self._recorded_tools,
                    breakpoints=list(rendered.breakpoints),
                    prefix=locator,
                )
            )
            self._assembled = True
            system_moved = [s.slot for s in self._recorded_segments]
            tools_moved = True
        prefix.check_against(self._recorded_segments, self._recorded_tools, f"run {self.run_id}")
        self._write(
            _make(
                PromptShapeCompared,
                system_moved=system_moved,
                tools_moved=tools_moved,
                conversation=shape,
                messages=len(messages),
                request_bytes=len(body_bytes),
            )
        )
        return Request(prefix.dialect, prefix.model, rendered.body, body_bytes, stream=prefix.stream)

    # ---- the model call ------------------------------------------------------------------------

    async def _call(self, request: Request) -> tuple[Record, Reply]:
        ref = _make(BytesRef, hash=content_hash(request.body_bytes), bytes=len(request.body_bytes))
        policy = self.options.retry
        attempt = 0
        while True:
            attempt += 1
            self._write(
                _make(
                    ModelCalled,
                    model=request.model,
                    request=ref,
                    dialect=request.dialect,
                    attempt=attempt if attempt > 1 else None,
                )
            )
            self.outcome.attempts += 1
            self._flush()  # durable before the provider is called
            sent_ms = now_ms()
            start = time.perf_counter_ns()
            try:
                reply = await self._race(self.provider.complete(request, self.on_delta))
            except _Cancelled:
                self._cancel_line()
                raise _Stop("cancelled", "cancelled by the person while the model was answering") from None
            except ProviderError as err:
                if err.retry is Retry.YES and attempt < policy.max_attempts:
                    delay = policy.delay_ms(attempt, err.retry_after_ms, self.rand())
                    reason = f"http_{err.status}" if err.status is not None else "stream_cut"
                    self._write(
                        _make(
                            WatchdogFired, reason=reason, attempt=attempt, status=err.status, delay_ms=delay
                        ),
                        who=RUNTIME,
                    )
                    try:
                        await self._race(self.sleep(delay / 1000))
                    except _Cancelled:
                        self._cancel_line()
                        raise _Stop("cancelled", "cancelled by the person during a back-off") from None
                    self._safe_point("before call")
                    continue
                raise _Stop(FAILED, err.display(), error=err) from None
            except RunfoldError as err:
                raise _Stop(FAILED, err.display(), error=err) from None
            except Exception as exc:  # a provider bug: still freeze with a clear error
                bug = RunfoldError(
                    ErrorCode.PROVIDER,
                    f"call the model ({type(exc).__name__}: {str(exc)[:300]})",
                    f"provider {type(self.provider).__name__}",
                    "the provider failed unexpectedly; check its settings and continue the run",
                    retry=Retry.UNKNOWN,
                )
                raise _Stop(FAILED, bug.display(), error=bug) from None
            problem = self._reply_problem(reply)
            if problem is not None:
                bad = RunfoldError(
                    ErrorCode.PROVIDER,
                    f"read the model's reply ({problem})",
                    f"provider {type(self.provider).__name__} model {request.model}",
                    "the reply was not recorded; retry the run or report the provider's output",
                )
                raise _Stop(FAILED, bad.display(), error=bad)
            took_us = reply.took_us if reply.took_us is not None else (time.perf_counter_ns() - start) // 1000
            return self._returned(request, reply, sent_ms, took_us), reply

    def _reply_problem(self, reply: Reply) -> str | None:
        """Why a reply cannot continue the conversation (malformed block, reused tool call id),
        checked before it is written so the ledger never holds a line its fold refuses."""
        seen: set[str] = set()
        for i, b in enumerate(reply.blocks):
            try:
                check_block(b, f"content[{i}]")
            except RunfoldError as err:
                return f"{err.subject}: {err.action}"
            if b["kind"] == "tool_result":
                return f"content[{i}] is a tool_result block"
            if b["kind"] == "tool_use":
                if not isinstance(b["input"], str):
                    return f"content[{i}].input is not the arguments' JSON text"
                if str(b["id"]) in seen or str(b["id"]) in self._tool_ids:
                    return f"content[{i}] reuses tool call id {b['id']!r}"
                seen.add(str(b["id"]))
        return None

    def _returned(self, request: Request, reply: Reply, sent_ms: int, took_us: int) -> Record:
        calls = sum(1 for b in reply.blocks if b["kind"] == "tool_use")
        usage = reply.usage
        billed: int | None = None
        if usage is not None:
            self.outcome.usage = _usage_sum(self.outcome.usage, usage)
            billed = self.bill(request.model, usage) if self.bill is not None else None
        if billed is None:
            self._priced = False
        elif self.outcome.billed_usd_micros is not None:
            self.outcome.billed_usd_micros += billed
        if not self._priced:
            self.outcome.billed_usd_micros = None
        self._tool_ids.update(str(b["id"]) for b in reply.blocks if b["kind"] == "tool_use")
        first_at = sent_ms + reply.first_byte_us // 1000 if reply.first_byte_us is not None else None
        conv = self.folder.conversation
        held_before = len(conv.held) if conv is not None else 0
        rec = self._write(
            _make(
                ModelReturned,
                message={"content": [dict(b) for b in reply.blocks]},
                calls=calls,
                stop=reply.stop,
                usage=usage.to_data() if usage is not None else None,
                billed_usd_micros=billed,
                first_at=first_at,
                took_us=took_us,
            )
        )
        conv = self.folder.conversation
        self._held_delivered = calls == 0 and held_before > 0 and conv is not None and not conv.held
        return rec

    # ---- stall guard ----------------------------------------------------------------------------

    def _check_stall(self, blocks: Sequence[Block], calls: Sequence[Block]) -> None:
        if calls:
            action: tuple[Any, ...] = (
                "calls",
                tuple((str(c["name"]), canonical_args(str(c["input"]))) for c in calls),
            )
        else:
            action = ("text", tuple(str(b.get("text", "")) for b in blocks if b["kind"] == "text"))
        if action == self._last_action:
            self._repeats += 1
        else:
            self._last_action = action
            self._repeats = 1
        if self._repeats == STALL_REPEATS:
            self._write(_make(WatchdogFired, reason="repeat", attempt=self._repeats), who=RUNTIME)
            self._steer = STALL_STEER.format(n=self._repeats)
        elif self._repeats > STALL_REPEATS:
            self._write(_make(WatchdogFired, reason="repeat", attempt=self._repeats), who=RUNTIME)
            err = RunfoldError(
                ErrorCode.LOOP_SUSPECTED,
                f"continue the run (the model took the same action {self._repeats} times in a row, "
                "after a corrective steer)",
                f"run {self.run_id}",
                "fork the run before the loop and steer it differently, or change the task",
            )
            raise _Stop(FAILED, err.display(), error=err)

    # ---- the wave ---------------------------------------------------------------------------------

    async def _wave(self, calls: Sequence[Block]) -> None:
        reqs = [ToolCallRequest(str(c["id"]), str(c["name"]), str(c["input"])) for c in calls]
        index = {r.id: i for i, r in enumerate(reqs)}
        state = {"next": 0}  # first call whose lines are not all written
        called: set[int] = set()
        wave_ms = now_ms()

        def write_called(i: int, t: int) -> None:
            self._write(tool_called_payload(reqs[i], self.registry), t=t)
            called.add(i)
            self.outcome.tool_calls += 1

        def write_pair(i: int, outcome: ToolOutcome) -> None:
            if i not in called:
                write_called(i, wave_ms)
            self._write(outcome.to_payload())
            self.cache.remember(
                self._position + i, reqs[i].name, reqs[i].args_json, outcome.result, outcome.error
            )

        async def before_write(call: ToolCallRequest, earlier: Sequence[ToolOutcome]) -> None:
            i = index[call.id]
            for j in range(state["next"], i):
                write_pair(j, earlier[j])
            state["next"] = i
            if self._cancel_set():  # the safe point before this tool call
                raise asyncio.CancelledError
            self._safe_point("before tool call")  # steers: held by the conversation until the wave ends
            write_called(i, now_ms())
            self._flush()  # durable before a writing tool acts

        async def runner() -> tuple[list[ToolOutcome], bool]:
            try:
                return (
                    await execute_wave(
                        reqs,
                        self.registry,
                        self.ctx,
                        first_position=self._position,
                        cache=self.cache,
                        before_write=before_write,
                    ),
                    False,
                )
            except WaveCancelled as wc:
                return wc.outcomes, True

        task = asyncio.ensure_future(runner())
        outer: asyncio.CancelledError | None = None
        try:
            if self.cancel is not None:
                waiter = asyncio.ensure_future(self.cancel.wait())
                try:
                    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                if not task.done():
                    task.cancel()  # execute_wave answers every call (WaveCancelled); the runner returns them
            outcomes, cancelled = await task
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                # our own cancellation reached the runner, which answered every call and returned
                outer = asyncio.CancelledError()
        except asyncio.CancelledError as exc:
            # the task driving the run was cancelled (e.g. Ctrl-C under asyncio.run): still write
            # the lines of the calls that ran, then let the cancellation through
            outer = exc
            if not task.done():
                task.cancel()
            try:
                outcomes, cancelled = await task
            except asyncio.CancelledError:
                outcomes, cancelled = [], True
        for j in range(state["next"], len(reqs)):
            if j >= len(outcomes) or (cancelled and _is_not_started(outcomes[j])):
                break  # calls that never started get no line
            write_pair(j, outcomes[j])
        self._position += len(reqs)
        if outer is not None:
            raise outer
        if cancelled:
            self._cancel_line()
            raise _Stop("cancelled", "cancelled by the person during a tool wave")

    # ---- freeze ------------------------------------------------------------------------------------

    def _freeze(self, stop: _Stop) -> None:
        out = self.outcome
        completion = stop.completion
        ledger_completion = "cancelled" if completion == FAILED else completion
        self._write(
            _make(
                HandoffWritten,
                must_read=[],
                overview=self.options.task[:500],
                progress=f"{out.turns} turn(s), {out.tool_calls} tool call(s); {stop.reason}",
                context=f"model {self.provider.model} ({self.provider.dialect})",
                next_step=(
                    "nothing: the task is done"
                    if completion == "done"
                    else "continue the run (fork at its last safe point) if the task is not finished"
                ),
            ),
            who=RUNTIME,
        )
        rec = self._write(
            _make(
                RunFrozen,
                completion=ledger_completion,
                evidence=stop.evidence or None,
                cause="error" if completion == FAILED else None,
                error=stop.error.to_data() if stop.error is not None else None,
            ),
            who=RUNTIME,
        )
        self._flush()
        out.completion = completion
        out.error = stop.error
        out.reason = stop.reason
        out.evidence = list(stop.evidence)
        out.frozen_seq = rec.seq
        out.folder_feeds = self.folder.feeds
