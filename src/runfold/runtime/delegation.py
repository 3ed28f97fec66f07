"""Agents together (DESIGN.md §4–§7): a run delegates a task to a child run, waits for its
reply, and a cancel of the parent reaches its children.

One `Desk` per writer knows the live runs of this process that may delegate. A child is
dispatched by the owner (`Dispatcher`: the serving owner's queue, or a task of this process)
with `parent` and `dispatched_by` in its `run_started`; the depth and fan-out limits are counted
from the ledger's `run_started.parent` chains. When a child is frozen its final answer goes to
the parent through the durable control inbox as a letter of kind `reply` (rendered escaped, never
as the person's words, cause `fan_out`); `wait_for_reply` writes `signal_wait_started` and
`signal_wait_ended` around the wait, and a timeout reaches the model as the runtime's words.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runfold.core.address import is_within
from runfold.core.errors import ErrorCode, Gate, Retry, RunfoldError, invalid_args
from runfold.core.ids import runs_with_prefix
from runfold.core.kinds import Kind
from runfold.core.payloads import Payload, SignalWaitEnded, SignalWaitStarted
from runfold.core.records import Draft
from runfold.core.speakers import Letter
from runfold.runtime.config import AgentLimits
from runfold.runtime.control import ControlHub, Steer, check_request_text
from runfold.runtime.loop_io import FAILED, RunOutcome
from runfold.runtime.spec import Delegated, RunSpec, new_run_id
from runfold.store.control import MAX_REQUEST_BYTES, ControlRequest, new_signal_id
from runfold.store.ledger import now_ms
from runfold.store.view import LedgerWriter

REPLY_MAX_BYTES = MAX_REQUEST_BYTES - 8192
"""The most bytes of a child's answer one reply letter carries (the whole answer stays in the
child's `model_returned`; a longer one is cut and the letter says where the rest is)."""

CASCADE = ("cancelled", FAILED)
"""The completions of a parent that cancel its children that were not detached."""


class Dispatcher(Protocol):
    """How the owner hosting the runs starts and cancels a child: `dispatch(spec)` returns once
    the child is accepted (started, or queued by a serving owner); `cancel(run, source)` cancels
    a live or queued child, `source` a letter from the parent (`cancel_received.source`);
    `waiting(run, True)` when the live `run` begins to wait for its children's replies and
    `waiting(run, False)` when the wait ends (an owner with a limit on concurrent runs lends a
    waiting run's place to its queued children, which could otherwise never start)."""

    async def dispatch(self, spec: RunSpec) -> None: ...

    def cancel(self, run: str, source: str) -> None: ...

    def waiting(self, run: str, waits: bool) -> None: ...


@dataclass
class Member:
    """A live run of this process that may delegate: its id, room, agent identity, spec, steer
    queue; its `children` in dispatch order and those a wait already collected (`waited`)."""

    run: str
    room: str | None
    agent: str
    spec: RunSpec
    steers: asyncio.Queue[Any]
    dispatcher: Dispatcher
    children: list[str] = field(default_factory=list)
    waited: set[str] = field(default_factory=set)


def _sender(room: str | None) -> str:
    return room or "agent"


def final_answer(lines: Sequence[Any]) -> str:
    """The text of the last `model_returned` of a run's lines that holds text ("" when none)."""
    for rec in reversed(lines):
        if rec.env.kind != Kind.MODEL_RETURNED.value:
            continue
        blocks = rec.env.data.get("message", {}).get("content", [])
        text = "\n".join(
            b["text"] for b in blocks if isinstance(b, dict) and b.get("kind") == "text" and isinstance(b.get("text"), str)
        )
        if text.strip():
            return text
    return ""


class Desk:
    """The delegations of one writer (see the module docstring). Built by `desk_of`."""

    def __init__(self, ledger: LedgerWriter, hub: ControlHub) -> None:
        self.ledger = ledger
        self.hub = hub
        self.dispatcher: Dispatcher | None = None
        """Set by a serving owner: children go through its queue; None: tasks of this process."""
        self.members: dict[str, Member] = {}
        self.replied: dict[str, str] = {}
        """Child → its completion, once its reply letter was posted."""
        self.detached: set[str] = set()
        self._parents: dict[str, str | None] = {}
        self._pending_parent: dict[str, str] = {}
        self._waiters: dict[str, set[asyncio.Event]] = {}

    # ---- the ledger's parent chains ------------------------------------------------------------

    def parent_of(self, run: str) -> str | None:
        """The run that delegated `run` (its `run_started.parent`, when it is not a fork or a
        successor), None for a run a person started; a child accepted but not started yet is
        known from its dispatch."""
        if run in self._parents:
            return self._parents[run]
        lines = self.ledger.run_records(run, limit=2)
        if not lines or lines[0].env.kind != Kind.RUN_STARTED.value:
            return self._pending_parent.get(run)
        data = lines[0].env.data
        forked = len(lines) > 1 and lines[1].env.kind == Kind.RUN_FORKED.value
        parent = data.get("parent")
        delegated = isinstance(parent, str) and not forked and data.get("predecessor") is None
        self._parents[run] = parent if delegated and isinstance(parent, str) else None
        return self._parents[run]

    def depth(self, run: str) -> int:
        """Delegation hops from the run a person started to `run` (0 for that run)."""
        hops, seen = 0, {run}
        parent = self.parent_of(run)
        while parent is not None and parent not in seen:
            hops += 1
            seen.add(parent)
            parent = self.parent_of(parent)
        return hops

    def children(self, run: str) -> list[str]:
        """Every run `run` delegated: those the ledger names it the parent of, then those
        accepted and not started yet."""
        found = [r for r in self.ledger.runs() if self.parent_of(r) == run]
        return found + [r for r, p in self._pending_parent.items() if p == run and r not in found]

    # ---- membership ----------------------------------------------------------------------------

    def enter(self, member: Member) -> None:
        self.members[member.run] = member
        if member.spec.delegated is not None:
            self._pending_parent.setdefault(member.run, member.spec.delegated.parent)
            if member.spec.delegated.detach:
                self.detached.add(member.run)

    def leave(self, run: str, outcome: RunOutcome | None) -> None:
        """`run` is frozen (`outcome`; None: it never started): its reply goes to its parent,
        and when it was cancelled or failed, its children that were not detached are cancelled."""
        member = self.members.pop(run, None)
        self._pending_parent.pop(run, None)
        if member is None:
            return
        completion = outcome.completion if outcome is not None else self._frozen_as(run)
        delegated = member.spec.delegated
        if delegated is not None:
            with contextlib.suppress(RunfoldError, OSError):
                self._reply(member, delegated.parent, completion, outcome)
            self.replied[run] = completion
            for ev in self._waiters.get(delegated.parent, ()):
                ev.set()
        if completion in CASCADE:
            source = Letter(_sender(member.room), run, "steer", "cancelled").recorded()
            for child in member.children:
                if child in self.detached or child in self.replied:
                    continue
                with contextlib.suppress(RunfoldError, OSError):
                    member.dispatcher.cancel(child, source)

    def _frozen_as(self, run: str) -> str:
        """The completion of `run`'s `run_frozen` (`failed` for a run an error froze, or that
        has none: the ledger failed before it)."""
        for rec in reversed(self.ledger.run_records(run)):
            if rec.env.kind == Kind.RUN_FROZEN.value:
                data = rec.env.data
                return FAILED if data.get("cause") == "error" else str(data.get("completion", FAILED))
        return FAILED

    def _reply(self, member: Member, parent: str, completion: str, outcome: RunOutcome | None) -> None:
        answer = final_answer(self.ledger.run_records(member.run))
        if not answer:
            why = outcome.reason if outcome is not None and outcome.reason else "no reason recorded"
            answer = f"(no answer: the run ended as {completion}: {why})"
        raw = answer.encode("utf-8", "replace")
        if len(raw) > REPLY_MAX_BYTES:
            answer = raw[:REPLY_MAX_BYTES].decode("utf-8", "ignore") + (
                f"\n[cut: the whole answer is the last reply of run {member.run}]"
            )
        check_request_text(answer, "reply", "send the reply")
        letter = Letter(_sender(member.room), member.run, "reply", completion)
        self.post(ControlRequest(new_signal_id(), parent, "steer", letter.recorded(), answer, now_ms()))

    def post(self, req: ControlRequest) -> None:
        """Write `req` into the durable inbox and hand it over now (the hub's poll would too); a
        refusal (the target is frozen) is answered and its ack removed."""
        self.hub.dir.write_request(req)
        self.hub.poll_once()
        ack = self.hub.dir.read_ack(req.signal)
        if ack is not None and ack.state == "refused":
            self.hub.dir.remove_ack(req.signal)

    # ---- waits ---------------------------------------------------------------------------------

    async def until_replied(self, parent: str, runs: Sequence[str]) -> None:
        """Return once every run of `runs` has replied."""
        while not all(r in self.replied for r in runs):
            ev = asyncio.Event()
            self._waiters.setdefault(parent, set()).add(ev)
            try:
                await ev.wait()
            finally:
                self._waiters[parent].discard(ev)


_DESKS: weakref.WeakKeyDictionary[ControlHub, Desk] = weakref.WeakKeyDictionary()


def desk_of(ledger: LedgerWriter, hub: ControlHub) -> Desk:
    """The one `Desk` of the control hub `hub` (made on first use)."""
    desk = _DESKS.get(hub)
    if desk is None or desk.ledger is not ledger:
        desk = _DESKS[hub] = Desk(ledger, hub)
    return desk


def _limit(action: str, subject: str, rule: str, violation: str) -> RunfoldError:
    return RunfoldError(
        ErrorCode.GATE_DENIED,
        action,
        subject,
        "do this part of the work yourself, or wait for a child's reply and give it the next task",
        retry=Retry.NO,
        gate=Gate(rule, violation, "do the work in this run, or reuse a child you already have"),
    )


class Seat:
    """One run's place at the desk: what its `delegate` and `wait_for_reply` tools call
    (`runfold.tools.context.AgentDesk`). `bind` links it once the run's writer is open."""

    def __init__(self, run: str, room: str | None, agent: str, limits: AgentLimits) -> None:
        self.run = run
        self.room = room
        self.agent = agent
        self.limits = limits
        self.desk: Desk | None = None
        self.member: Member | None = None

    def bind(self, desk: Desk, member: Member) -> None:
        self.desk, self.member = desk, member
        desk.enter(member)

    def _seated(self, action: str) -> tuple[Desk, Member]:
        if self.desk is None or self.member is None:
            raise invalid_args(action, "this run", "delegation needs the workspace's owner; do the work yourself")
        return self.desk, self.member

    def _write(self, payload: Payload) -> None:
        desk, _ = self._seated("record the wait")
        desk.ledger.stage([Draft(self.run, self.agent, payload.KIND.value, payload, addr=self.room)])

    async def delegate(self, task: str, goal: str, room: str | None, detach: bool) -> dict[str, Any]:
        """See `AgentDesk.delegate`."""
        action = "delegate a task"
        desk, me = self._seated(action)
        check_request_text(task, "task", action)
        depth = desk.depth(self.run) + 1
        if depth > self.limits.max_depth:
            raise _limit(
                f"{action} (this run is at delegation depth {depth - 1}; the limit is {self.limits.max_depth})",
                f"run {self.run}",
                f"delegated runs reach at most depth {self.limits.max_depth} ([agents] max_depth of config.toml)",
                f"a child of this run would be at depth {depth}",
            )
        children = desk.children(self.run)
        if len(children) >= self.limits.max_fan_out:
            raise _limit(
                f"{action} (this run already delegated to {len(children)} runs; the limit is {self.limits.max_fan_out})",
                f"run {self.run}",
                f"a run delegates to at most {self.limits.max_fan_out} children ([agents] max_fan_out of config.toml)",
                f"this would be child number {len(children) + 1}",
            )
        child_room = room if room is not None else (self.room or ".")
        if self.room not in (None, ".") and not is_within(child_room, self.room):
            raise RunfoldError(
                ErrorCode.GATE_DENIED,
                f"{action} (room {child_room!r} is outside this run's room {self.room!r})",
                f"run {self.run}",
                f"give a room inside yours: {self.room!r} or below it",
                retry=Retry.NO,
                gate=Gate(
                    f"a delegated run works inside its parent's room (here {self.room!r}): a run writes only inside its room",
                    f"room {child_room!r} is not {self.room!r} nor below it",
                    f"delegate with room {self.room!r} (the default) or a room below it, e.g. '{self.room}/part'",
                ),
            )
        spec = me.spec
        child = new_run_id()
        child_spec = RunSpec(
            task,
            goal,
            spec.model if isinstance(spec.model, str) else None,
            child_room,
            spec.max_turns,
            builtin_tools=spec.builtin_tools,
            system=spec.system,
            run_id=child,
            approvals=spec.approvals,
            agents=True,
            delegated=Delegated(self.run, self.agent, detach),
        )
        desk._pending_parent[child] = self.run
        if detach:
            desk.detached.add(child)
        try:
            await me.dispatcher.dispatch(child_spec)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and not detach:
                # the parent was cancelled while its child was dispatched: the child may already
                # be accepted, and the cascade does not know it yet, so it is cancelled here
                source = Letter(_sender(me.room), self.run, "steer", "cancelled").recorded()
                with contextlib.suppress(RunfoldError, OSError):
                    me.dispatcher.cancel(child, source)
            desk._pending_parent.pop(child, None)
            desk.detached.discard(child)
            raise
        me.children.append(child)
        return {"run": child, "depth": depth, "children": len(children) + 1, "detached": detach}

    async def wait_for_reply(self, runs: list[str], timeout_s: int) -> dict[str, Any]:
        """See `AgentDesk.wait_for_reply`."""
        action = "wait for replies"
        desk, me = self._seated(action)
        mine = desk.children(self.run)
        wanted: list[str] = []
        for given in runs:
            found = runs_with_prefix(given, mine)
            if len(found) != 1:
                raise invalid_args(
                    action,
                    f"run {given!r}",
                    ("give more characters" if found else "name a run you delegated to")
                    + ": " + (", ".join(mine) or "(you have delegated nothing yet)"),
                    nearby=tuple(mine),
                )
            if found[0] not in wanted:
                wanted.append(found[0])
        if not runs:
            wanted = [c for c in mine if c not in me.waited]
        if not wanted:
            raise invalid_args(
                action,
                "this run's children",
                "there is no reply to wait for: delegate a task first (every child's reply was already collected)"
                if mine
                else "there is no reply to wait for: delegate a task first",
            )
        self._write(SignalWaitStarted(for_=list(wanted), timeout_ms=timeout_s * 1000))
        start = time.monotonic()
        outcome = "replied"
        me.dispatcher.waiting(self.run, True)
        try:
            async with asyncio.timeout(timeout_s):
                await desk.until_replied(self.run, wanted)
        except TimeoutError:
            outcome = "timeout"
        except asyncio.CancelledError:
            self._ended("cancelled", wanted, start)
            raise
        finally:
            me.dispatcher.waiting(self.run, False)
        replied, pending = self._ended(outcome, wanted, start)
        me.waited.update(replied)
        if pending:
            me.steers.put_nowait(
                Steer(
                    f"The wait for replies ran out after {timeout_s} s: {len(pending)} of {len(wanted)} "
                    f"children are still working ({', '.join(pending)}). Their replies arrive as letters "
                    "when they finish; wait again, or go on without them.",
                    "runtime",
                )
            )
        return {
            "replied": replied,
            "pending": pending,
            "timed_out": outcome == "timeout",
            "answers": "each reply follows as a letter of kind reply" if replied else "none yet",
        }

    def _ended(self, outcome: str, wanted: list[str], start: float) -> tuple[list[str], list[str]]:
        assert self.desk is not None
        replied = [c for c in wanted if c in self.desk.replied]
        pending = [c for c in wanted if c not in self.desk.replied]
        waited_ms = int((time.monotonic() - start) * 1000)
        self._write(SignalWaitEnded(outcome=outcome, replied=replied, pending=pending, waited_ms=waited_ms))
        return replied, pending


class InProcess:
    """Children as tasks of this process's event loop (no serving owner): `start(spec)` is the
    caller's way to drive a run; cancels go through the control inbox."""

    def __init__(self, desk: Desk, start: Any) -> None:
        self.desk = desk
        self.start = start
        self.tasks: set[asyncio.Task[Any]] = set()

    async def dispatch(self, spec: RunSpec) -> None:
        """Start the child; return once its first line is staged, or raise what refused it
        (a bad room or model: nothing was written)."""
        task = asyncio.get_running_loop().create_task(self.start(spec), name=f"run {spec.run_id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        assert spec.run_id is not None
        try:
            while not task.done() and not self.desk.ledger.run_records(spec.run_id, limit=1):
                await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            task.cancel()  # the delegating run was cancelled before its child began: it never starts
            raise
        if task.done() and not task.cancelled() and task.exception() is not None:
            if not self.desk.ledger.run_records(spec.run_id, limit=1):
                raise task.exception()  # type: ignore[misc]

    def cancel(self, run: str, source: str) -> None:
        cancel_by_inbox(self.desk, run, source)

    def waiting(self, run: str, waits: bool) -> None:
        """Nothing to do: children of this process start at once (no limit to lend a place in)."""


def cancel_by_inbox(desk: Desk, run: str, source: str) -> None:
    """Cancel the live run `run` through the durable inbox, the cancel from `source` (a letter
    from its parent); a run not live here is left alone."""
    if run in desk.hub.live:
        desk.post(ControlRequest(new_signal_id(), run, "cancel", source, "", now_ms()))


def with_agent_tools(names: Sequence[str] | bool, agent_names: Sequence[str], builtin: Sequence[str]) -> list[str]:
    """A tool set (True: every built-in, False: none, or names) with `agent_names` added."""
    base = list(builtin) if names is True else [] if names is False else list(names)
    return base + [n for n in agent_names if n not in base]


__all__ = [
    "CASCADE",
    "REPLY_MAX_BYTES",
    "Desk",
    "Dispatcher",
    "InProcess",
    "Member",
    "Seat",
    "cancel_by_inbox",
    "desk_of",
    "final_answer",
    "with_agent_tools",
]
