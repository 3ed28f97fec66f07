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
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from runfold.core.canonical import content_hash
from runfold.core.errors import ErrorCode, Retry, RunfoldError, internal, invalid_args
from runfold.core.fold import ForkPlan, RunFolder
from runfold.core.fold.resume import CANCELLED_BEFORE_IT_RAN
from runfold.core.messages import Block, ToolUseBlock
from runfold.core.offload import page_bytes
from runfold.core.payloads import (
    BytesRef,
    Evidence,
    ModelCalled,
    ModelReturned,
    Payload,
    PromptAssembled,
    PromptShapeCompared,
    RunStarted,
    SecretCaptured,
    Segment,
    SteerReceived,
    WatchdogFired,
)
from runfold.core.records import Draft, Record
from runfold.core.regions import with_regions
from runfold.core.render.incremental import IncrementalRenderer
from runfold.core.render.spec import Rendered
from runfold.core.validate.incremental import IncrementalValidator
from runfold.providers.base import ProviderError, Reply, Request
from runfold.runtime.approvals import Approvals
from runfold.runtime.compaction import WindowDeps, WindowManager
from runfold.runtime.freeze import handoff, run_frozen, wave_closing_lines
from runfold.runtime.loop_io import FAILED, RunChannels, RunInputs, RunOptions, RunOutcome, Stop
from runfold.runtime.offload import Offloads
from runfold.runtime.prefix import Prefix
from runfold.runtime.redaction import P, redact_payload, run_redactor
from runfold.runtime.regions import RegionEditor
from runfold.runtime.replies import LIMIT_STOPS, MALFORMED_REPLY, reply_problem, visible
from runfold.runtime.retry import RetryPolicy, backoff_reason
from runfold.runtime.safe_points import Interrupted, SafePoints
from runfold.runtime.spec import new_run_id
from runfold.runtime.stall import StallGuard
from runfold.store.ledger import RUNTIME, now_ms
from runfold.tools import (
    DuplicateCallCache,
    ToolCallRequest,
    ToolOutcome,
    WaveCancelled,
    execute_wave,
    tool_called_payload,
)
from runfold.tools.execute import NotStarted

__all__ = ["FAILED", "RetryPolicy", "RunChannels", "RunInputs", "RunLoop", "RunOptions", "RunOutcome", "Stop"]

class RunLoop:
    """One run (DESIGN.md §5). Build it, then `await loop.run()` once.

    `inputs`: what the run needs (see `RunInputs`); `channels`: what it reports to and listens on
    (see `RunChannels`; None: none). `rand`/`sleep` may be replaced in tests (jitter, back-off waits).
    """

    def __init__(
        self,
        inputs: RunInputs,
        channels: RunChannels | None = None,
        *,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.ledger = inputs.ledger
        self.cas = inputs.cas
        self.provider = inputs.provider
        self.registry = inputs.registry
        self.prefix = inputs.prefix
        self.options = options = inputs.options
        self.offloads = Offloads(inputs.cas, options.context)
        self.regions = RegionEditor(self)  # the context tools' edits (DESIGN.md §10)
        self.ctx = dataclasses.replace(
            inputs.ctx,
            offloaded=self.offloads.read,
            result_page_bytes=options.context.offload_bytes,
            edit_region=self.regions.edit,
        )
        self.fork = inputs.fork
        self.bill = inputs.bill
        self.run_id = (
            inputs.fork.new_run
            if inputs.fork is not None
            else inputs.run_id or new_run_id()
        )
        channels = channels or RunChannels()
        self.on_event = channels.on_event
        self.on_delta = channels.on_delta
        self.cancel = channels.cancel
        self.points = SafePoints(
            channels,
            options.who,
            lambda payload, who: self._write(payload, who=who),
            self.ledger,
            settle=lambda: self._complete_wave(CANCELLED_BEFORE_IT_RAN),
        )
        self.rand = rand
        self.sleep = sleep
        self.agent = options.agent or options.room or "agent"
        self.addr = options.room
        self.folder = RunFolder()
        self.cache = DuplicateCallCache()
        self.outcome = RunOutcome(self.run_id, completion="running")
        self.tally = self.outcome.tally  # the runs fold over the lines this run writes
        self._position = 0
        self._assembled = False
        self._incremental: tuple[Prefix, IncrementalRenderer, IncrementalValidator] | None = None
        self._recorded_segments: list[Segment] = []
        self._recorded_tools: BytesRef | None = None
        self.stall = StallGuard()
        self.redactor = inputs.redactor or run_redactor(self.provider)
        self._captured: SecretCaptured | None = None
        self._steer: str | None = None
        self.endpoints = inputs.endpoints
        self.approvals = Approvals.of(self, channels)
        self._tool_ids: set[str] = set()
        self._held_delivered = False
        self._callback_error: Exception | None = None
        self.window = self._window_manager()

    def _window_manager(self) -> WindowManager | None:
        """The run's window manager (DESIGN.md §10), None when the window is not managed; a
        result alone larger than the conversation budget is then offloaded, and a page of
        `read_result` is at most a quarter of it (`core.offload.page_bytes`)."""
        window = self.options.window
        if window is None:
            return None
        deps = WindowDeps(
            prefix=self.prefix,
            provider=self.provider,
            folder=self.folder,
            render=self.render,
            write=lambda payload, who: self._write(payload, who=who),
            flush=self._flush,
            race=self.points.race,
            next_seq=lambda: self.ledger.next_seq,
            bill=self.bill,
            retry=self.options.retry,
            rand=self.rand,
            sleep=self.sleep,
        )
        manager = WindowManager(deps, self.options.context, window)
        self.offloads.budget_bytes = manager.budget_bytes
        self.ctx = dataclasses.replace(
            self.ctx, result_page_bytes=page_bytes(self.options.context, manager.budget_bytes())
        )
        return manager

    # ---- writing -------------------------------------------------------------------------

    def _write(
        self, payload: Payload, *, who: str | None = None, t: int | None = None, inherits: bool = False
    ) -> Record:
        """Stage one line of this run, its secrets replaced (a `secret_captured` line before it
        when some were, after it for the run's first line; `runtime.redaction`), fold it, report it."""
        payload, after = self._redacted(payload)
        draft = Draft(self.run_id, who or self.agent, payload.KIND.value, payload, addr=self.addr, t=t)
        rec = self.ledger.stage([draft])[0]
        self.folder.feed(rec, inherits=inherits)
        self.tally.feed(rec)
        self.outcome.lines += 1
        self.outcome.ledger_bytes += len(rec.raw) + 1
        if self.on_event is not None:
            try:
                self.on_event(rec)
            except Exception as exc:  # a caller's callback must not tear the run's history
                self._callback_error = exc
                self.on_event = None
        if after is not None and inherits:  # a fork's run_started: run_forked comes first
            self._captured = after
        elif after is not None:
            self._write(after, who=RUNTIME)
        return rec

    def _redacted(self, payload: P) -> tuple[P, SecretCaptured | None]:
        """The payload without secrets, its `secret_captured` written first, or returned to be
        written after it when nothing of the run may precede it (`run_started`)."""
        clean, captured = redact_payload(self.redactor, payload)
        if captured is not None and isinstance(payload, RunStarted):
            return clean, captured
        if captured is not None:
            self._write(captured, who=RUNTIME)
        return clean, None

    async def _flush(self) -> None:
        await self.points.commit()

    # ---- the run ---------------------------------------------------------------------------

    async def run(self) -> RunOutcome:
        """Run it, in the order of DESIGN.md §5, and return the outcome:

        0. dispatch: `run_started` (a fork: its lineage folded once, then `run_started` and
           `run_forked`), then the `note` as a runtime `steer_received`;
        then each turn (`_turns`), until it gives the stop:
        1. the turn ceiling (`limit`); safe point *before assemble* (cancel → `cancel_received`,
           stop `cancelled`; steer → `steer_received`), then a stall guard's corrective steer;
        2. `prompt_assembled` (first turn, or when the prefix changed) and
           `prompt_shape_compared` (`_assemble`);
        3. safe point *before call*;
        4. `model_called`, durable before the provider is called, → provider → `model_returned`
           (`_call`; a retryable failure: `watchdog_fired`, a back-off, a safe point, again);
           the stall guard (`E_LOOP_SUSPECTED`), and a reply at its output ceiling (`limit`);
        5. safe point *before wave*; a reply with no tool calls ends the run — `done` citing its
           `model_returned`, `limit` when it is empty — unless steer text waits for an answer
           (DESIGN.md §6: another turn);
        6. the wave (`_wave`): for each call in call order, safe point *before tool call*,
           `tool_called` (durable before a writing tool acts), `tool_result`; read-only calls may
           run concurrently, their lines are written in call order;
        7. the turn closes: the run fold commits the exchange to the conversation;
        8. the freeze (`_freeze`): `handoff_written`, then `run_frozen`, flushed.

        The run is always frozen unless the ledger itself fails (`E_STORAGE_FATAL` propagates). A
        `RunfoldError` raised inside a turn freezes it as failed with that error; an outer
        cancellation of the awaiting task freezes it as cancelled, then re-raises; an unexpected
        exception (a bug) freezes it as failed with `E_INTERNAL`, then re-raises; an exception
        raised by `on_event` stops further events and is raised once the run is frozen. A new
        run (not a fork) whose task is blank is refused with `E_INVALID_ARGS` before any line."""
        opts = self.options
        if self.fork is not None:
            self._inherit(self.fork)
        else:
            if not opts.task.strip():  # refused before any line: the person's words open the run
                raise invalid_args(
                    "start a run (the task is empty or whitespace-only)",
                    "the task",
                    "give the task in words; providers refuse an empty opening",
                )
            asked = {c: p for c, p in opts.approvals.items() if p != "allow"}
            policy: dict[str, Any] = {"approvals": asked} if asked else {}
            if opts.max_turns is not None:
                policy["max_turns"] = opts.max_turns
            self._write(
                RunStarted(
                    task=opts.task,
                    goal=opts.goal,
                    skills=[],
                    opening=opts.opening, parent=opts.parent, dispatched_by=opts.dispatched_by,
                    model=self.provider.model,
                    policy=policy or None,
                    instructions=list(opts.instructions) or None,
                ),
                who=opts.who,
            )
        if opts.note is not None:
            self._write(SteerReceived(source="runtime", text=opts.note), who=RUNTIME)
        self._endpoint_lines(attached=True)
        reraise: BaseException | None = None
        try:
            stop = await self._turns()
        except asyncio.CancelledError as exc:
            self.points.cancel_line()
            stop = Stop("cancelled", "the task driving the run was cancelled")
            reraise = exc
        except RunfoldError as err:
            if err.code is ErrorCode.STORAGE_FATAL:
                raise
            stop = Stop.failed(err)
        except Exception as exc:  # a bug: freeze the run with a clear error, then let it surface
            bug = RunfoldError(
                ErrorCode.STORAGE_FATAL if isinstance(exc, OSError) else ErrorCode.INTERNAL,
                f"run the agent loop ({type(exc).__name__}: {str(exc)[:300]})",
                f"run {self.run_id}",
                "the run was frozen with a valid history; report this with the traceback and fork the run to continue",
            )
            stop = Stop.failed(bug)
            reraise = exc
        await self._freeze(stop)
        if reraise is not None:
            raise reraise
        if self._callback_error is not None:
            raise self._callback_error
        return self.outcome

    def _inherit(self, plan: ForkPlan) -> None:
        """Start as a fork (DESIGN.md §7): take over the plan's fold of the mother's lineage
        through the cut (folded once, by `plan_fork`), then write the plan's `run_started`
        (opening `inherited`) and `run_forked`. Inherited tool
        calls keep their per-run positions (duplicate-call cache) and their ids stay taken."""
        lin = plan.inherited.lineage
        self.folder = RunFolder.continuing(plan.inherited)  # the plan folded the lineage once
        self.window = self._window_manager()  # its dependencies name the folder just taken over
        records = list(lin.records())
        if self.window is not None:
            self.window.inherit(records)  # the reminders given in this compaction cycle
        self.offloads.inherit(records)  # E_STORAGE_FATAL before a line when a result's object is gone
        self._position = self.cache.remember_records(records)
        self.outcome.inherited_lines = self.folder.feeds
        for msg in plan.inherited.conversation.messages_view():
            self._tool_ids.update(b["id"] for b in msg["content"] if b["kind"] == "tool_use")
        started, forked = plan.drafts
        assert isinstance(started.data, Payload) and isinstance(forked.data, Payload)
        self.addr = started.addr
        self._write(started.data, who=started.who, inherits=True)
        self._write(forked.data, who=forked.who)
        if self._captured is not None:  # secrets in the new task: said after run_forked
            self._write(self._captured, who=RUNTIME)

    async def _turns(self) -> Stop:
        """The turns, steps 1–7 of `run`, until one gives the run's stop."""
        while True:
            if self.options.max_turns is not None and self.tally.turns >= self.options.max_turns:
                return Stop("limit", f"the turn ceiling ({self.options.max_turns}) was reached")
            if (stop := self.points.at("before assemble")) is not None:
                return stop
            if self._steer is not None:
                self._write(SteerReceived(source="runtime", text=self._steer), who=RUNTIME)
                self._steer = None
            if self.window is not None:
                await self.window.at_boundary()  # compaction and reminders (DESIGN.md §10)
            request = self._assemble()
            if (stop := self.points.at("before call")) is not None:
                return stop
            answered = await self._call(request)
            if isinstance(answered, Stop):
                return answered
            rec, reply = answered
            calls = [b for b in reply.blocks if b["kind"] == "tool_use"]
            evidence = [Evidence(kind="model_returned", seq=rec.seq)]
            if (stop := self._check_stall(reply.blocks, calls)) is not None:
                return stop
            if reply.stop in LIMIT_STOPS:
                return Stop("limit", f"the reply stopped at its output ceiling ({reply.stop})", evidence)
            steered = self.points.take_steers()
            if (stop := self.points.at("before wave")) is not None:
                return stop
            if not calls:
                if self._held_delivered or steered:
                    continue  # the person's words wait for an answer: another turn (DESIGN.md §6)
                if not visible(reply.blocks):
                    return Stop("limit", "the model returned an empty reply", evidence)
                return Stop("done", "the model answered without calling a tool", evidence)
            if (stop := await self._wave(calls)) is not None:
                return stop

    # ---- assemble ---------------------------------------------------------------------------

    def render(self) -> tuple[Rendered, bytes]:
        """The request the conversation renders now and its exact bytes, validated; per-turn
        work independent of history (but for joining and hashing the bytes), byte-identical
        to render_request + ensure_valid + request_bytes."""
        conv = self.folder.conversation
        assert conv is not None
        prefix = self.prefix
        if self._incremental is None or self._incremental[0] is not prefix:
            self._incremental = (
                prefix,
                IncrementalRenderer(prefix.dialect, prefix.spec(())),
                IncrementalValidator(prefix.dialect),
            )
        # the conversation's own messages, no copies; the context regions after the tail breakpoint
        messages, uncached = with_regions(conv.messages_view(), self.folder.regions)
        rendered, body_bytes = self._incremental[1].render_bytes(messages, uncached)
        self._incremental[2].ensure_valid(rendered.body)
        return rendered, body_bytes

    def _assemble(self) -> Request:
        conv = self.folder.conversation
        assert conv is not None
        prefix = self.prefix
        rendered, body_bytes = self.render()
        messages = conv.messages_view()
        shape = conv.check_extends_last_sent()
        if shape == "rewritten" and not conv.compacted:
            raise internal(
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
                PromptAssembled(
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
            PromptShapeCompared(
                system_moved=system_moved,
                tools_moved=tools_moved,
                conversation=shape,
                messages=len(messages),
                request_bytes=len(body_bytes),
            )
        )
        return Request(prefix.dialect, prefix.model, rendered.body, body_bytes, stream=prefix.stream)

    # ---- the model call ------------------------------------------------------------------------

    async def _call(self, request: Request) -> tuple[Record, Reply] | Stop:
        """Step 4: call the model until it replies (the `model_returned` and the reply), retrying
        retryable provider errors after a back-off; or the run's stop (cancelled, failed)."""
        ref = BytesRef(hash=content_hash(request.body_bytes), bytes=len(request.body_bytes))
        policy = self.options.retry
        attempt = 0
        while True:
            attempt += 1
            self._write(
                ModelCalled(
                    model=request.model,
                    request=ref,
                    dialect=request.dialect,
                    attempt=attempt if attempt > 1 else None,
                )
            )
            await self._flush()  # durable before the provider is called
            sent_ms = now_ms()
            start = time.perf_counter_ns()
            try:
                reply = await self.points.race(self.provider.complete(request, self.on_delta))
            except ProviderError as err:
                if err.retry is not Retry.YES or attempt >= policy.attempts_for(err):
                    return Stop.failed(err)
                delay = policy.delay_ms(attempt, err.retry_after_ms, self.rand())
                self._write(
                    WatchdogFired(
                        reason=backoff_reason(err),
                        attempt=attempt,
                        status=err.status,
                        delay_ms=delay,
                    ),
                    who=RUNTIME,
                )
                if await self.points.race(self.sleep(delay / 1000)) is Interrupted.CANCELLED:
                    return self.points.cancelled("during a back-off")
                if (stop := self.points.at("before call")) is not None:
                    return stop
                continue
            except RunfoldError as err:
                return Stop.failed(err)
            except Exception as exc:  # a provider bug: still freeze with a clear error
                return Stop.failed(
                    RunfoldError(
                        ErrorCode.PROVIDER,
                        f"call the model ({type(exc).__name__}: {str(exc)[:300]})",
                        f"provider {type(self.provider).__name__}",
                        "the provider failed unexpectedly; check its settings and continue the run",
                        retry=Retry.UNKNOWN,
                    )
                )
            if reply is Interrupted.CANCELLED:
                return self.points.cancelled("while the model was answering")
            problem = reply_problem(reply, self._tool_ids)
            if problem is not None:
                # refused before anything of it is recorded or run; the model is asked again
                if attempt >= policy.max_attempts:
                    return Stop.failed(
                        RunfoldError(
                            ErrorCode.PROVIDER,
                            f"read the model's reply ({problem}; {attempt} attempt(s))",
                            f"provider {type(self.provider).__name__} model {request.model}",
                            "the replies were not recorded; continue the run or report the provider's output",
                        )
                    )
                delay = policy.delay_ms(attempt, None, self.rand())
                self._write(
                    WatchdogFired(reason=MALFORMED_REPLY, attempt=attempt, delay_ms=delay, detail=problem), who=RUNTIME
                )
                if await self.points.race(self.sleep(delay / 1000)) is Interrupted.CANCELLED:
                    return self.points.cancelled("during a back-off")
                if (stop := self.points.at("before call")) is not None:
                    return stop
                continue
            took_us = reply.took_us if reply.took_us is not None else (time.perf_counter_ns() - start) // 1000
            return self._returned(request, reply, sent_ms, took_us), reply

    def _returned(self, request: Request, reply: Reply, sent_ms: int, took_us: int) -> Record:
        calls = sum(1 for b in reply.blocks if b["kind"] == "tool_use")
        usage = reply.usage
        billed = self.bill(request.model, usage) if usage is not None and self.bill is not None else None
        self._tool_ids.update(b["id"] for b in reply.blocks if b["kind"] == "tool_use")
        first_at = sent_ms + reply.first_byte_us // 1000 if reply.first_byte_us is not None else None
        if self.window is not None:
            self.window.observe(len(request.body_bytes), usage.to_data() if usage is not None else None)
        conv = self.folder.conversation
        held_before = len(conv.held) if conv is not None else 0
        rec = self._write(
            ModelReturned(
                message={"content": [b.copy() for b in reply.blocks]},
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

    def _check_stall(self, blocks: Sequence[Block], calls: Sequence[ToolUseBlock]) -> Stop | None:
        """The stall guard (`runtime.stall.StallGuard`): its watchdog line, its corrective steer
        (written at the next turn's start), or the run's stop."""
        verdict = self.stall.observe(blocks, calls, self.run_id)
        if verdict.repeats:
            self._write(WatchdogFired(reason="repeat", attempt=verdict.repeats), who=RUNTIME)
        if verdict.steer is not None:
            self._steer = verdict.steer
        return verdict.stop

    # ---- the wave ---------------------------------------------------------------------------------

    async def _wave(self, calls: Sequence[ToolUseBlock]) -> Stop | None:
        """Step 6: execute one wave of tool calls and write their lines in call order (a call a
        cancel left unstarted is answered as not started); the run's stop when it was
        cancelled, else None. An outer cancellation is re-raised once every call's lines are
        written."""
        reqs = [ToolCallRequest(c["id"], c["name"], c["input"]) for c in calls]
        index = {r.id: i for i, r in enumerate(reqs)}
        state = {"next": 0}  # first call whose lines are not all written
        called: set[int] = set()
        wave_ms = now_ms()

        def write_called(i: int, t: int, call: ToolCallRequest | None = None) -> None:
            self._write(tool_called_payload(call or reqs[i], self.registry), t=t)
            self.regions.calling(reqs[i].id)
            called.add(i)

        def write_pair(i: int, outcome: ToolOutcome) -> None:
            if i not in called:
                write_called(i, wave_ms)
            result, _ = self._redacted(outcome.to_payload())  # before the CAS holds its content
            offloaded = self.offloads.offload(reqs[i].name, result)  # stored in the CAS first
            if offloaded is not None:
                self.offloads.remember(self._write(offloaded))
            self._write(result)
            if not isinstance(outcome, NotStarted):  # it never ran: nothing to answer again
                self.cache.remember(
                    self._position + i, reqs[i].name, reqs[i].args_json, outcome.result, outcome.error
                )

        async def before_write(call: ToolCallRequest, earlier: Sequence[ToolOutcome]) -> None:
            i = index[call.id]
            for j in range(state["next"], i):
                write_pair(j, earlier[j])
            state["next"] = i
            # the safe point before this tool call: a cancel unwinds the wave (execute_wave
            # answers every call, `WaveCancelled`); steers wait in the conversation till it ends
            if self.points.cancel_set():
                raise asyncio.CancelledError
            self.points.take_steers()
            if self.points.cancel_set():
                raise asyncio.CancelledError
            write_called(i, now_ms(), call)  # with the process group an exec call holds
            await self._flush()  # durable before a writing tool acts

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
                        approval=self.approvals,
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
        # every call is answered: the finished ones with their result, the ones in flight with
        # E_TOOL_OUTCOME_UNKNOWN, the ones that never began as not started (the wave is
        # completed, never dropped); calls without an outcome are answered at the freeze
        for j in range(state["next"], min(len(reqs), len(outcomes))):
            write_pair(j, outcomes[j])
        self._position += len(reqs)
        self._endpoint_lines()
        if outer is not None:
            raise outer
        if cancelled:
            return self.points.cancelled("during a tool wave")
        return None

    # ---- freeze ------------------------------------------------------------------------------------

    def _complete_wave(self, why: str) -> None:
        """A run stopping with a wave open completes it (`runtime.freeze.wave_closing_lines`);
        a successor then inherits every call and its fate. Nothing is written outside a wave."""
        for payload in wave_closing_lines(self.folder.unanswered(), self.registry, why):
            self._write(payload)

    def _endpoint_lines(self, attached: bool = False) -> None:  # attached: at dispatch; lost: since
        for payload in self.endpoints.lines(attached):
            self._write(payload, who=RUNTIME)

    async def _freeze(self, stop: Stop) -> None:
        self._endpoint_lines()
        self._complete_wave(
            CANCELLED_BEFORE_IT_RAN if stop.completion == "cancelled" else f"the run stopped before it ran: {stop.reason[:300]}"
        )
        out = self.outcome
        completion = stop.completion
        self._write(handoff(self.options.task, out, stop, self.provider.model, self.provider.dialect), who=RUNTIME)
        rec = self._write(run_frozen(stop), who=RUNTIME)
        await self._flush()
        out.completion = completion
        out.error = stop.error
        out.reason = stop.reason
        out.evidence = list(stop.evidence)
        out.frozen_seq = rec.seq
        out.folder_feeds = self.folder.feeds
