"""Children of delegating runs dispatched by the serving owner (DESIGN.md §4, §7): a child goes
through the owner's dispatch like any run (the concurrency limit, the durable queue, the event
stream), its request carrying the delegation so a queued child survives a restart with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runfold.runtime.delegation import Desk, cancel_by_inbox
from runfold.runtime.spec import RunSpec

if TYPE_CHECKING:
    from runfold.server.owner import RunOwner


def request_of(spec: RunSpec) -> dict[str, Any]:
    """The dispatch request (`owner.SPEC_FIELDS`, `delegated`) of a child's spec."""
    out: dict[str, Any] = {
        "task": spec.task,
        "goal": spec.goal,
        "model": spec.model if isinstance(spec.model, str) else None,
        "room": spec.room,
        "max_turns": spec.max_turns,
        "builtin_tools": spec.builtin_tools if isinstance(spec.builtin_tools, bool) else (
            list(spec.builtin_tools) if spec.builtin_tools is not None else None
        ),
        "system": spec.system,
        "agents": spec.agents,
        "approvals": dict(spec.approvals) if spec.approvals is not None else None,
    }
    if spec.delegated is not None:
        out["delegated"] = spec.delegated.to_data()
    return {k: v for k, v in out.items() if v is not None}


class OwnerDispatch:
    """The `Dispatcher` of a serving owner: `dispatch` is `RunOwner.dispatch` under the child's
    own run id; `cancel` drops a queued child or cancels a running one through the inbox."""

    def __init__(self, owner: RunOwner, desk: Desk) -> None:
        self.owner = owner
        self.desk = desk

    async def dispatch(self, spec: RunSpec) -> None:
        await self.owner.dispatch(request_of(spec), run_id=spec.run_id)

    def cancel(self, run: str, source: str) -> None:
        h = self.owner.hosted.get(run)
        if h is not None and h.state == "queued":
            self.owner.cancel_queued(run)
            return
        cancel_by_inbox(self.desk, run, source)

    def waiting(self, run: str, waits: bool) -> None:
        self.owner.set_waiting(run, waits)


__all__ = ["OwnerDispatch", "request_of"]
