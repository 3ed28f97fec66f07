"""The stall guard (DESIGN.md §5): a model that takes the same action turn after turn gets one
corrective `runtime:` steer, then its run is stopped with `E_LOOP_SUSPECTED`.

An action is a reply's tool calls (names and canonical arguments) or, without calls, its text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.messages import Block, ToolUseBlock
from runfold.core.payloads import WatchdogFired
from runfold.runtime.loop_io import FAILED, Stop
from runfold.tools.execute import canonical_args

STALL_REPEATS: Final = 3
"""The same action this many times in a row gets a corrective `runtime:` steer; one more freezes
the run with `E_LOOP_SUSPECTED`."""

STALL_STEER: Final = (
    "You have taken the same action {n} times in a row with the same result. Do not repeat it: "
    "try a different approach, or give your final answer without calling a tool."
)


class StallGuard:
    """Counts repeats of one run's actions. `write(payload)` records a runtime line (the
    `watchdog_fired` of reason `repeat`); `steer` holds the corrective text once it is due."""

    def __init__(self, run_id: str, write: Callable[[WatchdogFired], Any]) -> None:
        self.run_id = run_id
        self.write = write
        self.steer: str | None = None
        self._last: tuple[Any, ...] | None = None
        self._repeats = 0

    def take_steer(self) -> str | None:
        """The corrective steer when one is due (then it is no longer due), else None."""
        steer, self.steer = self.steer, None
        return steer

    def check(self, blocks: Sequence[Block], calls: Sequence[ToolUseBlock]) -> Stop | None:
        """The same action `STALL_REPEATS` times in a row sets `steer`; once more, the run's
        stop (`E_LOOP_SUSPECTED`)."""
        if calls:
            action: tuple[Any, ...] = ("calls", tuple((c["name"], canonical_args(c["input"])) for c in calls))
        else:
            action = ("text", tuple(b["text"] for b in blocks if b["kind"] == "text"))
        if action == self._last:
            self._repeats += 1
        else:
            self._last = action
            self._repeats = 1
        if self._repeats == STALL_REPEATS:
            self.write(WatchdogFired(reason="repeat", attempt=self._repeats))
            self.steer = STALL_STEER.format(n=self._repeats)
        elif self._repeats > STALL_REPEATS:
            self.write(WatchdogFired(reason="repeat", attempt=self._repeats))
            what = (
                f"the model took the same action {self._repeats} times in a row, even after a "
                "corrective steer"
            )
            err = RunfoldError(
                ErrorCode.LOOP_SUSPECTED,
                f"take another turn (the stall guard stopped the run: {what})",
                f"run {self.run_id}",
                "fork the run before the loop and steer it differently, or change the task",
            )
            return Stop(FAILED, f"the stall guard stopped the run: {what} ({err.code.value})", error=err)
        return None
