"""The approval step of a tool call (DESIGN.md §4, §9): between a call's `tool_called` and its
acting, a call whose class's policy is `ask` waits for a person, one whose policy is `deny` is
refused.

`ask` records `approval_requested {tool_use_id, tool, class, preview}` (the preview: the diff a
write or edit would make, the command of an exec, the MCP call), makes it durable, then waits for
the first answer: the terminal's (when the run has one), `runfold approve`/`runfold deny` from
another process through the control inbox, or a cancel. The answer is `approval_resolved`; a
denial becomes the call's `E_GATE_DENIED` result, which the model reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import orjson

from runfold.core.approval import (
    DEFAULT_POLICY,
    POLICY_RULE,
    ApprovalClass,
    Policy,
    denial_error,
    policy_error,
)
from runfold.core.errors import RunfoldError
from runfold.core.payloads import ApprovalRequested, ApprovalResolved, GateDenied, Payload
from runfold.core.records import Record
from runfold.store.ledger import RUNTIME
from runfold.tools import Tool, ToolCallRequest, ToolContext, ToolOutcome
from runfold.tools.mcp import McpTool

PREVIEW_CHARS: Final = 8000
"""The longest preview recorded and shown, in characters (a longer one is cut and says so)."""

CANCELLED_WHILE_WAITING: Final = "the run was cancelled while the call waited for approval"


@dataclass(frozen=True)
class ApprovalRequest:
    """What a person is asked: the run, the call's id and tool, its class and the preview."""

    run: str
    tool_use_id: str
    tool: str
    cls: str
    preview: str


@dataclass(frozen=True)
class Decision:
    """A person's answer: `approved` or not, their `reason` (for a denial), `via` (`terminal`
    or `inbox`) and the control `signal` id when it came through the inbox."""

    approved: bool
    reason: str | None = None
    via: str = "terminal"
    signal: str | None = None


Ask = Callable[[ApprovalRequest], Awaitable[Decision]]


class RunChannelsLike(Protocol):
    """What `Approvals.of` reads of a run's channels (`runtime.loop_io.RunChannels`)."""

    @property
    def control(self) -> Any: ...

    @property
    def cancel(self) -> asyncio.Event | None: ...

    @property
    def ask(self) -> Ask | None: ...
"""`await ask(request)`: a terminal's prompt; it returns the person's decision."""


class Waiting:
    """The calls of live runs waiting for a decision, by run and call id, shared with the control
    hub (which delivers `runfold approve`/`deny`)."""

    def __init__(self) -> None:
        self.calls: dict[str, asyncio.Future[Decision]] = {}

    def deliver(self, call: str, decision: Decision) -> str | None:
        """Give `decision` to the waiting `call`; why it cannot be given, or None."""
        fut = self.calls.get(call)
        if fut is None or fut.done():
            waiting = ", ".join(sorted(c for c, f in self.calls.items() if not f.done())) or "none"
            return f"no call {call} is waiting for approval (waiting: {waiting})"
        fut.set_result(decision)
        return None


def approval_class(tool: Tool) -> ApprovalClass:
    """The class of `tool`: `mcp` for an MCP server's tool, `exec` for `exec`, `write` for
    any other tool that may act (effect `write`), `read` for the rest."""
    if isinstance(tool, McpTool):
        return "mcp"
    if tool.name == "exec":
        return "exec"
    return "write" if tool.effect == "write" else "read"


def _cut(text: str) -> str:
    if len(text) <= PREVIEW_CHARS:
        return text
    return text[:PREVIEW_CHARS] + f"\n… ({len(text) - PREVIEW_CHARS} more characters not shown)"


def _diff(ctx: ToolContext, path: str, new_text: str | None, old: str, new: str) -> str:
    """A unified diff of the file at `path` (room-relative) and what the call would make of it:
    `new_text` (a write) or the file with `old` replaced by `new` (an edit)."""
    try:
        real = ctx.resolve_write(path)
        before = real.read_text(encoding="utf-8") if real.is_file() else ""
    except (RunfoldError, OSError, UnicodeDecodeError):
        before = ""
    after = new_text if new_text is not None else before.replace(old, new, 1)
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return text or f"(no change to {path})\n"


def preview_of(tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> str:
    """What the call will do, in words a person checks: the diff of a `write_file` or
    `edit_file`, the command line of an `exec` (and where it runs), the MCP call with its
    arguments, else the tool and its arguments as JSON."""
    if tool.name == "write_file":
        return _cut(_diff(ctx, str(args.get("path", "")), str(args.get("content", "")), "", ""))
    if tool.name == "edit_file":
        return _cut(_diff(ctx, str(args.get("path", "")), None, str(args.get("old", "")), str(args.get("new", ""))))
    if tool.name == "exec":
        return _cut(f"$ {args.get('command', '')}\n(in {ctx.room_label})")
    shown = orjson.dumps(dict(args), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    if isinstance(tool, McpTool):
        return _cut(f"MCP server `{tool.server}`, tool `{tool.remote}`, arguments:\n{shown}")
    return _cut(f"{tool.name} with arguments:\n{shown}")


class Approvals:
    """One run's approval step. `policies`: class → policy (missing classes `allow`);
    `write(payload, who)` stages a line of the run; `await flush()` makes it durable (shared with the other runs of the loop, DESIGN.md §3 group commit); `waiting`: the
    hub's table of waiting calls (None: no other process can answer); `cancel`: the run's
    cancel event; `ask`: the terminal's prompt (None: headless)."""

    def __init__(
        self,
        run_id: str,
        policies: Mapping[str, Policy],
        write: Callable[[Payload, str], Record],
        flush: Callable[[], Awaitable[object]],
        ctx: ToolContext,
        *,
        waiting: Waiting | None = None,
        cancel: asyncio.Event | None = None,
        ask: Ask | None = None,
        acknowledge: Callable[[str, int], object] | None = None,
    ) -> None:
        self.run_id = run_id
        self.policies = {**DEFAULT_POLICY, **policies}
        self.write = write
        self.flush = flush
        self.ctx = ctx
        self.waiting = waiting
        self.cancel = cancel
        self.ask = ask
        self.acknowledge = acknowledge

    @classmethod
    def of(cls, loop: Any, channels: RunChannelsLike) -> Approvals:
        """The approval step of the run loop `loop` (`RunLoop`: its run id, options' policies,
        line writer, flush, tool context and cancel event) watched by `channels` (the terminal's
        `ask`, the control hub's table of waiting calls and its acks)."""
        control = channels.control
        return cls(
            loop.run_id,
            loop.options.approvals,
            lambda payload, who: loop._write(payload, who=who),
            loop._flush,
            loop.ctx,
            waiting=control.waiting if control is not None else None,
            cancel=channels.cancel,
            ask=channels.ask,
            acknowledge=control.recorded if control is not None else None,
        )

    def needs(self, tool: Tool) -> bool:
        """Whether a call of `tool` must pass the step (its class's policy is not `allow`)."""
        return self.policies[approval_class(tool)] != "allow"

    async def decide(self, call: ToolCallRequest, tool: Tool, args: Mapping[str, Any]) -> ToolOutcome | None:
        """Pass `call` (its `tool_called` is durable) through its class's policy: None when it may
        act, else the outcome it gets instead (a `deny` policy's or a person's `E_GATE_DENIED`).
        A cancel while waiting records the call as denied by the runtime and raises
        `asyncio.CancelledError` (the wave answers the call as not started)."""
        cls = approval_class(tool)
        if self.policies[cls] == "deny":
            err = policy_error(call.id, call.name, cls)
            assert err.gate is not None
            self.write(
                GateDenied(
                    rule=POLICY_RULE, violation=err.gate.violation, alternative=err.gate.alternative, tool_use_id=call.id
                ),
                RUNTIME,
            )
            return ToolOutcome(call.id, call.name, None, err.to_data(), 0)
        request = ApprovalRequest(self.run_id, call.id, call.name, cls, preview_of(tool, args, self.ctx))
        self.write(
            ApprovalRequested(tool_use_id=call.id, tool=call.name, class_=cls, preview=request.preview), RUNTIME
        )
        await self.flush()  # durable before anyone is asked: a resume finds the call waiting
        try:
            decision = await self._wait(request)
        except asyncio.CancelledError:
            decision = None
        if decision is None:
            self.write(
                ApprovalResolved(tool_use_id=call.id, decision="denied", by="runtime", reason=CANCELLED_WHILE_WAITING),
                RUNTIME,
            )
            raise asyncio.CancelledError
        rec = self.write(
            ApprovalResolved(
                tool_use_id=call.id,
                decision="approved" if decision.approved else "denied",
                by="person",
                reason=decision.reason,
                via=decision.via,
                signal=decision.signal,
            ),
            "person",
        )
        await self.flush()
        if decision.signal is not None and self.acknowledge is not None:
            self.acknowledge(decision.signal, rec.seq)
        if decision.approved:
            return None
        err = denial_error(call.id, call.name, cls, "person", decision.reason)
        return ToolOutcome(call.id, call.name, None, err.to_data(), 0)

    async def _wait(self, request: ApprovalRequest) -> Decision | None:
        """The first decision from the terminal or the inbox; None when the run is cancelled."""
        loop = asyncio.get_running_loop()
        inbox: asyncio.Future[Decision] = loop.create_future()
        if self.waiting is not None:
            self.waiting.calls[request.tool_use_id] = inbox
        waiters: set[asyncio.Future[Any]] = {inbox}
        prompt = asyncio.ensure_future(self.ask(request)) if self.ask is not None else None
        if prompt is not None:
            waiters.add(prompt)
        stop = asyncio.ensure_future(self.cancel.wait()) if self.cancel is not None else None
        if stop is not None:
            waiters.add(stop)
        try:
            while True:
                done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                for fut in (inbox, prompt):
                    if fut is not None and fut in done and not fut.cancelled() and fut.exception() is None:
                        return fut.result()
                if stop is not None and stop in done:
                    return None
                waiters -= done  # the terminal gave up (closed input): the inbox still answers
        finally:
            if self.waiting is not None:
                self.waiting.calls.pop(request.tool_use_id, None)
            for fut in waiters:
                if not fut.done():
                    fut.cancel()
            if prompt is not None:
                with contextlib.suppress(BaseException):
                    await prompt
