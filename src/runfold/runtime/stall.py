"""The stall guard: a model taking the same action again and again is steered, then stopped.

The same action `STALL_REPEATS` times in a row earns a `watchdog_fired` line and a corrective
`runtime:` steer at the next turn's start; once more after that, the run freezes with
`E_LOOP_SUSPECTED`. Pure bookkeeping: the run loop writes the lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.messages import Block, ToolUseBlock
from runfold.runtime.loop_io import FAILED, Stop
from runfold.tools.execute import canonical_args

STALL_REPEATS: Final = 3
"""The same action this many times in a row gets a corrective `runtime:` steer; one more freezes
the run with `E_LOOP_SUSPECTED`."""

STALL_STEER: Final = (
    "You have taken the same action {n} times in a row with the same result. Do not repeat it: "
    "try a different approach, or give your final answer without calling a tool."
)


@dataclass(frozen=True)
class StallVerdict:
    """What a reply earns: `repeats` > 0 means a `watchdog_fired` (reason `repeat`, attempt
    `repeats`) is due; `steer` the corrective steer; `stop` the run's stop."""

    repeats: int = 0
    steer: str | None = None
    stop: Stop | None = None


class StallGuard:
    """Counts identical consecutive actions (the same tool calls with canonical arguments, or
    the same text when no tool is called)."""

    def __init__(self) -> None:
        self._last_action: tuple[Any, ...] | None = None
        self._repeats = 0

    def observe(self, blocks: Sequence[Block], calls: Sequence[ToolUseBlock], run_id: str) -> StallVerdict:
        """The verdict on one reply (its blocks and tool calls) of run `run_id`."""
        if calls:
            action: tuple[Any, ...] = (
                "calls",
                tuple((c["name"], canonical_args(c["input"])) for c in calls),
            )
        else:
            action = ("text", tuple(b["text"] for b in blocks if b["kind"] == "text"))
        if action == self._last_action:
            self._repeats += 1
        else:
            self._last_action = action
            self._repeats = 1
        if self._repeats == STALL_REPEATS:
            return StallVerdict(self._repeats, steer=STALL_STEER.format(n=self._repeats))
        if self._repeats > STALL_REPEATS:
            what = (
                f"the model took the same action {self._repeats} times in a row, even after a "
                "corrective steer"
            )
            err = RunfoldError(
                ErrorCode.LOOP_SUSPECTED,
                f"take another turn (the stall guard stopped the run: {what})",
                f"run {run_id}",
                "fork the run before the loop and steer it differently, or change the task",
            )
            stop = Stop(FAILED, f"the stall guard stopped the run: {what} ({err.code.value})", error=err)
            return StallVerdict(self._repeats, stop=stop)
        return StallVerdict()
