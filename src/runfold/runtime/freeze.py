"""What a stopping run writes before its `run_frozen` line (DESIGN.md §5, §7): the lines that
close an open wave of tool calls, and the handoff a successor reads.

Pure payload builders for the executor's freeze, kept apart so the loop only orders the lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from runfold.core.errors import ErrorCode, Retry, RunfoldError
from runfold.core.fold.resume import not_started_error
from runfold.core.messages import ToolUseBlock
from runfold.core.payloads import HandoffWritten, Payload, RunFrozen
from runfold.runtime.loop_io import FAILED, RunOutcome, Stop
from runfold.tools import ToolCallRequest, ToolOutcome, tool_called_payload
from runfold.tools.registry import ToolRegistry


def wave_closing_lines(
    unanswered: Iterable[tuple[ToolUseBlock, bool]], registry: ToolRegistry, why: str
) -> Iterator[Payload]:
    """The lines that complete a wave a stopping run left open, in call order: a call with no
    line gets `tool_called` and a not-started `tool_result` saying `why`; a recorded call
    without a result (it may have acted) gets an `E_TOOL_OUTCOME_UNKNOWN` result. `unanswered`
    is `RunFolder.unanswered()`: (the call's block, whether its `tool_called` is recorded)."""
    for block, recorded in unanswered:
        call = ToolCallRequest(block["id"], block["name"], block["input"])
        if recorded:
            err = RunfoldError(
                ErrorCode.TOOL_OUTCOME_UNKNOWN,
                f"finish tool call `{call.name}` (the run stopped while it was in flight)",
                f"call {call.id}",
                "the tool may or may not have acted; check before retrying",
                retry=Retry.UNKNOWN,
            )
        else:
            yield tool_called_payload(call, registry)
            err = not_started_error(call.id, call.name, why)
        yield ToolOutcome(call.id, call.name, None, err.to_data(), 0).to_payload()


def handoff(task: str, outcome: RunOutcome, stop: Stop, model: str, dialect: str) -> HandoffWritten:
    """The `handoff_written` line of a run stopping with `stop` after `outcome`'s turns and calls
    (its overview: the first 500 characters of `task`)."""
    return HandoffWritten(
        must_read=[],
        overview=task[:500],
        progress=f"{outcome.turns} turn(s), {outcome.tool_calls} tool call(s); {stop.reason}",
        context=f"model {model} ({dialect})",
        next_step=(
            "nothing: the task is done"
            if stop.completion == "done"
            else "continue the run (fork at its last safe point) if the task is not finished"
        ),
    )


def run_frozen(stop: Stop) -> RunFrozen:
    """The `run_frozen` line of a run stopping with `stop`: a failure is recorded as `cancelled`
    with cause `error` and the error's data."""
    failed = stop.completion == FAILED
    return RunFrozen(
        completion="cancelled" if failed else stop.completion,
        evidence=list(stop.evidence) or None,
        cause="error" if failed else None,
        error=stop.error.to_data() if stop.error is not None else None,
    )
