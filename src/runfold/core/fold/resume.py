"""The resume fold (DESIGN.md §7): which tool calls a dead process left without a result and
which runs it left without `run_frozen`, and the lines that close them.

Pure: `ResumeScan` is fed ledger lines in seq order (all of them, or those after a point known
to be clean) and `resume_drafts` turns its plan into drafts for the writer. Writing them, and
doing so on every writer open, is the runtime's job (`runtime/resume.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from runfold.core.errors import ErrorCode, Gate, Retry, RunfoldError
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.kinds import Kind
from runfold.core.messages import reply_blocks
from runfold.core.payloads import (
    ApprovalRequested,
    ApprovalResolved,
    HandoffWritten,
    ModelReturned,
    RunFrozen,
    RunStarted,
    ToolCalled,
    ToolResult,
)
from runfold.core.records import Draft, Record
from runfold.core.tool_result import gate_rule

RESUME_WHO = "runtime"
"""The author of every line resume writes (the run fold recognizes resume's results by it)."""

PROCESS_DIED = "process_died"
"""`run_frozen.cause` of a run frozen by resume."""

NOT_STARTED_RULE = "a stopped run starts no new tool calls"
"""The gate rule of the error result a call gets when its run stopped before the call began (a
wave is completed, never dropped: DESIGN.md §5, §7); `is_not_started` recognizes it."""

CANCELLED_BEFORE_IT_RAN = "the run was cancelled before it ran"
"""`not_started_error`'s `why` for a call a person's cancel left unstarted."""

DIED_BEFORE_IT_RAN = (
    "the process running the run died before the call was recorded as started; a writing call is "
    "recorded before it acts, so it did not act"
)
"""`not_started_error`'s `why` for a call of a lost run that has no `tool_called` line."""

DIED_WAITING_FOR_APPROVAL = "the process running the run died while the call waited for approval; it never ran"
"""`not_started_error`'s `why` (and the `approval_resolved.reason`) for a call a dead process left
waiting for a person's decision."""


def not_started_error(call_id: str, name: str, why: str) -> RunfoldError:
    """The §11 error (`E_GATE_DENIED`, retry yes, gate `NOT_STARTED_RULE`) a tool call gets as
    its result when its run stopped before the call began: `not started: <why>`. Every call of
    a reply is answered, so a successor inherits the wave whole and sees each call's fate."""
    return RunfoldError(
        ErrorCode.GATE_DENIED,
        f"start tool call `{name}` (not started: {why})",
        f"call {call_id}",
        "the call did not run; call it again if it is still needed",
        retry=Retry.YES,
        gate=Gate(
            rule=NOT_STARTED_RULE,
            violation=f"call {call_id} had not started when the run stopped",
            alternative="call the tool again in the run that continues this one",
        ),
    )


def is_not_started(result: ToolResult) -> bool:
    """Whether a `tool_result` payload is a `not_started_error` (the call never ran)."""
    return gate_rule(result) == NOT_STARTED_RULE


@dataclass(frozen=True, slots=True)
class DanglingCall:
    """A `tool_called` with no `tool_result`: `run`, `seq` of the tool_called line, the call's
    `tool_use_id`, tool `name`, the run's address `addr`; `closable` is False when the run is
    already frozen (a result after `run_frozen` would break its fold; the freeze dropped the
    wave whole, so the history is valid, but the tool may have acted); `pgid`/`pstart`: the
    process group the call started, as its `tool_called` recorded it (`exec`)."""

    run: str
    seq: int
    tool_use_id: str
    name: str
    addr: str | None
    closable: bool = True
    pgid: int | None = None
    pstart: int | None = None
    awaiting_approval: bool = False
    """The call has an `approval_requested` and no `approval_resolved`: it never acted."""


@dataclass(frozen=True, slots=True)
class UnrecordedCall:
    """A call a lost run's last reply asked for that has no `tool_called` line: `run`, the seq
    of the `model_returned` that asked for it, its `tool_use_id`, tool `name` and arguments'
    JSON text `args`. Resume records it and answers it as not started (`not_started_error`)."""

    run: str
    reply_seq: int
    tool_use_id: str
    name: str
    args: str


@dataclass(frozen=True, slots=True)
class LostRun:
    """A run without `run_frozen`: `run`, its first and last `seq`, address, task, and `turns`
    (model replies) it had written; `handed_off` is True when its last line is a
    `handoff_written` (the process died between the handoff and the freeze, e.g. a resume
    killed mid-write), so resume need not write a second one."""

    run: str
    first_seq: int
    last_seq: int
    addr: str | None
    task: str
    turns: int
    handed_off: bool = False


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What resume must write: `dangling` calls (closable ones get a result), `lost` runs (in
    order of first appearance) and the `unrecorded` calls of lost runs' open waves; `clean` is
    True when there is nothing to do."""

    dangling: tuple[DanglingCall, ...]
    lost: tuple[LostRun, ...]
    unrecorded: tuple[UnrecordedCall, ...] = ()

    @property
    def clean(self) -> bool:
        return not self.lost and not any(d.closable for d in self.dangling)


@dataclass(slots=True)
class _RunState:
    first_seq: int
    last_seq: int
    addr: str | None
    task: str = ""
    turns: int = 0
    frozen: bool = False
    handed_off: bool = False
    lines: int = 0
    forked: bool = False
    open_calls: dict[str, tuple[int, str, int | None, int | None]] = field(default_factory=dict)
    asked: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    """The open wave's calls with no `tool_called` yet: id → (reply seq, name, args)."""
    awaiting: set[str] = field(default_factory=set)
    """Calls with an `approval_requested` and no `approval_resolved`."""


class ResumeScan:
    """Feed lines in seq order (`feed`), then read `plan()`. Lines of the workspace run (nil
    UUID) are skipped; a fork that was never run (its lines are only `run_started` and
    `run_forked`: no process ran it, so none died) is not lost (see `not_started`). A run's
    state starts at its first fed line, so feeding only the lines after a seq at which no run
    was open and no call dangled gives the same plan as feeding all."""

    def __init__(self) -> None:
        self._runs: dict[str, _RunState] = {}
        self.lines = 0

    def feed(self, rec: Record) -> None:
        self.lines += 1
        run = rec.run
        if run == WORKSPACE_RUN:
            return
        st = self._runs.get(run)
        if st is None:
            st = self._runs[run] = _RunState(rec.seq, rec.seq, rec.env.addr)
        st.last_seq = rec.seq
        st.lines += 1
        kind = rec.env.kind
        st.forked = st.forked or kind == Kind.RUN_FORKED.value
        st.handed_off = kind == Kind.HANDOFF_WRITTEN.value
        if kind == Kind.RUN_STARTED.value:
            st.task = rec.typed(RunStarted).task
        elif kind == Kind.MODEL_RETURNED.value:
            st.turns += 1
            st.asked = _asked(rec)
        elif kind == Kind.TOOL_CALLED.value:
            call = rec.typed(ToolCalled)
            st.open_calls[call.id] = (rec.seq, call.name, call.pgid, call.pstart)
            st.asked.pop(call.id, None)
        elif kind == Kind.TOOL_RESULT.value:
            answered = rec.typed(ToolResult).tool_use_id
            st.open_calls.pop(answered, None)
            st.asked.pop(answered, None)
            st.awaiting.discard(answered)
        elif kind == Kind.APPROVAL_REQUESTED.value:
            st.awaiting.add(rec.typed(ApprovalRequested).tool_use_id)
        elif kind == Kind.APPROVAL_RESOLVED.value:
            st.awaiting.discard(rec.typed(ApprovalResolved).tool_use_id)
        elif kind == Kind.RUN_FROZEN.value:
            st.frozen = True
            st.asked = {}

    def feed_all(self, records: Iterable[Record]) -> ResumeScan:
        for rec in records:
            self.feed(rec)
        return self

    def plan(self) -> ResumePlan:
        dangling: list[DanglingCall] = []
        lost: list[LostRun] = []
        unrecorded: list[UnrecordedCall] = []
        for run, st in self._runs.items():
            for call_id, (seq, name, pgid, pstart) in st.open_calls.items():
                dangling.append(
                    DanglingCall(
                        run,
                        seq,
                        call_id,
                        name,
                        st.addr,
                        closable=not st.frozen,
                        pgid=pgid,
                        pstart=pstart,
                        awaiting_approval=call_id in st.awaiting,
                    )
                )
            if not st.frozen and not (st.forked and st.lines == 2):
                lost.append(
                    LostRun(run, st.first_seq, st.last_seq, st.addr, st.task, st.turns, st.handed_off)
                )
                unrecorded.extend(
                    UnrecordedCall(run, seq, call_id, name, args) for call_id, (seq, name, args) in st.asked.items()
                )
        dangling.sort(key=lambda d: d.seq)
        return ResumePlan(tuple(dangling), tuple(lost), tuple(unrecorded))


def _asked(rec: Record) -> dict[str, tuple[int, str, str]]:
    """The calls a `model_returned` asks for (id → (seq, name, args)); none when its message
    does not read (the run fold refuses such a line; resume leaves it to verify)."""
    try:
        blocks = reply_blocks(rec.typed(ModelReturned).message)
    except RunfoldError:
        return {}
    return {b["id"]: (rec.seq, b["name"], b["input"]) for b in blocks if b["kind"] == "tool_use"}


def closed_by_resume(rec: Record, result: ToolResult) -> bool:
    """Whether the `tool_result` line `rec` (payload `result`) is one resume wrote for a call
    whose outcome is unknown: author `runtime`, error `E_TOOL_OUTCOME_UNKNOWN`."""
    return (
        rec.env.who == RESUME_WHO
        and result.error is not None
        and result.error.get("code") == ErrorCode.TOOL_OUTCOME_UNKNOWN.value
    )


def outcome_unknown_error(call: DanglingCall, group_killed: bool = False) -> RunfoldError:
    """The §11 error resume writes as the result of a call whose process died after it started;
    `group_killed`: the call's process group was still running and resume killed it."""
    killed = (
        f"; its process group {call.pgid} was still running and resume killed it" if group_killed else ""
    )
    return RunfoldError(
        ErrorCode.TOOL_OUTCOME_UNKNOWN,
        f"finish tool call `{call.name}` (the process running it died after the call started{killed})",
        f"call {call.tool_use_id} (tool_called at seq {call.seq})",
        "the tool may or may not have acted; check its effect before calling it again",
        retry=Retry.UNKNOWN,
    )


def resume_drafts(
    plan: ResumePlan,
    *,
    pending: Mapping[str, Sequence[Draft]] | None = None,
    killed: frozenset[str] = frozenset(),
) -> list[Draft]:
    """The lines that resume `plan` (DESIGN.md §7), in write order: per lost run (in order of
    first appearance), the results of its dangling calls (`tool_result` with an
    `E_TOOL_OUTCOME_UNKNOWN` error, in call order), then each unrecorded call of its open wave
    as a `tool_called` and a `not_started_error` result (the wave is completed, never dropped),
    then `pending[run]` (e.g. steers handed over
    before the process died), then `handoff_written` (left out when the run's last line already
    is one and nothing was written after it: a resume killed mid-write is not handed off twice)
    and `run_frozen {completion: cancelled, cause: process_died}`. Closable dangling calls of runs that are not lost do not exist (a run
    is frozen or lost), so nothing else is written; an empty list for a clean plan. `killed`: the
    tool_use_ids whose recorded process group resume killed (their results say so)."""
    pending = pending or {}
    by_run: dict[str, list[DanglingCall]] = {}
    for call in plan.dangling:
        if call.closable:
            by_run.setdefault(call.run, []).append(call)
    never: dict[str, list[UnrecordedCall]] = {}
    for asked in plan.unrecorded:
        never.setdefault(asked.run, []).append(asked)
    drafts: list[Draft] = []
    for lost in plan.lost:
        for call in by_run.get(lost.run, []):
            error = outcome_unknown_error(call, call.tool_use_id in killed)
            if call.awaiting_approval:  # it never acted: answered as not started
                resolved = ApprovalResolved(
                    tool_use_id=call.tool_use_id, decision="denied", by=RESUME_WHO, reason=DIED_WAITING_FOR_APPROVAL
                )
                drafts.append(Draft(lost.run, RESUME_WHO, Kind.APPROVAL_RESOLVED.value, resolved, addr=lost.addr))
                error = not_started_error(call.tool_use_id, call.name, DIED_WAITING_FOR_APPROVAL)
            result = ToolResult(tool_use_id=call.tool_use_id, name=call.name, error=error.to_data())
            drafts.append(Draft(lost.run, RESUME_WHO, Kind.TOOL_RESULT.value, result, addr=lost.addr))
        for asked in never.get(lost.run, []):
            called = ToolCalled(id=asked.tool_use_id, name=asked.name, args=asked.args)
            drafts.append(Draft(lost.run, RESUME_WHO, Kind.TOOL_CALLED.value, called, addr=lost.addr))
            error = not_started_error(asked.tool_use_id, asked.name, DIED_BEFORE_IT_RAN)
            result = ToolResult(tool_use_id=asked.tool_use_id, name=asked.name, error=error.to_data())
            drafts.append(Draft(lost.run, RESUME_WHO, Kind.TOOL_RESULT.value, result, addr=lost.addr))
        extra = pending.get(lost.run, ())
        drafts.extend(extra)
        closed = len(by_run.get(lost.run, [])) + len(never.get(lost.run, []))
        # a run whose last line is already its handoff (a resume or freeze killed before
        # run_frozen) gets only the freeze
        if not (lost.handed_off and not closed and not extra):
            handoff = HandoffWritten(
                must_read=[],
                overview=lost.task[:500],
                progress=(
                    f"{lost.turns} turn(s); the process running it died after seq {lost.last_seq}"
                    + (
                        f"; {len(by_run[lost.run])} tool call(s) closed with E_TOOL_OUTCOME_UNKNOWN"
                        if by_run.get(lost.run)
                        else ""
                    )
                    + (
                        f"; {len(never[lost.run])} tool call(s) answered as not started"
                        if never.get(lost.run)
                        else ""
                    )
                ),
                context="frozen by resume",
                next_step=f"check the effect of any call closed as unknown, then `runfold continue {lost.run}`",
            )
            drafts.append(Draft(lost.run, RESUME_WHO, Kind.HANDOFF_WRITTEN.value, handoff, addr=lost.addr))
        frozen = RunFrozen(completion="cancelled", cause=PROCESS_DIED)
        drafts.append(Draft(lost.run, RESUME_WHO, Kind.RUN_FROZEN.value, frozen, addr=lost.addr))
    return drafts


def not_started(lines: Sequence[Record]) -> bool:
    """Whether a run's own `lines` (seq order) are those of a fork that was never run: exactly
    `run_started` then `run_forked` (DESIGN.md §5 dispatch), nothing after. Resume leaves such a
    run as it is, and the runs fold shows it as `not_started`, never as a dead process."""
    return len(lines) == 2 and lines[1].env.kind == Kind.RUN_FORKED.value


def successor_note(run: str, lines: Sequence[Record]) -> str | None:
    """The `runtime:` note a successor of `run` starts with (DESIGN.md §7 continue): why the run
    stopped (the process died, its turn ceiling, the person's cancel, an error, or it had
    finished, or it was forked and never run) and, for the run's last wave, each call whose
    outcome is unknown (cut off in flight: check its effect first) and each call that never
    started (call it again if still needed), named by tool and call id. `lines` are the run's own
    lines in seq order. None when the run has no `run_frozen` (still running), unless it is a
    fork that was never run (`not_started`)."""
    frozen: RunFrozen | None = None
    unknown: list[str] = []
    unstarted: list[str] = []
    called = False
    for rec in lines:
        kind = rec.env.kind
        called = called or kind == Kind.MODEL_CALLED.value
        if kind == Kind.RUN_FROZEN.value:
            frozen = rec.typed(RunFrozen)
        elif kind == Kind.MODEL_RETURNED.value:
            unknown, unstarted = [], []  # only the last wave's fates matter to the successor
        elif kind == Kind.TOOL_RESULT.value:
            result = rec.typed(ToolResult)
            named = f"`{result.name}` (call {result.tool_use_id})"
            if is_not_started(result):
                unstarted.append(named)
            elif result.error is not None and result.error.get("code") == ErrorCode.TOOL_OUTCOME_UNKNOWN.value:
                unknown.append(named)
    if frozen is None and not not_started(lines):
        return None
    if frozen is None:
        why = "was forked and not started"
    elif not called:
        why = "had not called a model yet"
    elif frozen.cause == PROCESS_DIED:
        why = "stopped when the process running it died"
    elif frozen.error is not None:
        why = f"stopped on an error ({frozen.error.get('code', 'E_?')}: {frozen.error.get('action', '')})"
    elif frozen.completion == "limit":
        why = "stopped at its limit (turn ceiling or output ceiling)"
    elif frozen.completion == "cancelled":
        why = "was cancelled by the person"
    else:
        why = "had finished"
    text = f"This run continues run {run}, which {why}; its conversation so far is above."
    if unknown:
        text += (
            f" {len(unknown)} tool call(s) were cut off while running and their outcome is unknown: "
            + ", ".join(unknown)
            + "; check their effect before calling them again."
        )
    if unstarted:
        text += (
            f" {len(unstarted)} tool call(s) never started: "
            + ", ".join(unstarted)
            + "; call them again if they are still needed."
        )
    return text + " Go on with the task from where it stopped."
