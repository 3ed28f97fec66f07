"""The agent tools: `delegate` a task to a child run and `wait_for_reply` for the children's
answers (DESIGN.md §4, §6). Both are opt-in (named, or a run's `agents` option) and act through
the run's `AgentDesk`, so the owner hosting the run dispatches the child and delivers its reply
as a letter of kind `reply` that can never pass for the person.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runfold.core.address import address_problem, is_within
from runfold.core.errors import ErrorCode, Gate, Retry, RunfoldError, invalid_args
from runfold.tools.context import AgentDesk, ToolContext
from runfold.tools.registry import Tool

MAX_WAIT_S = 3600
"""The longest one `wait_for_reply` call may wait, in seconds."""


def _desk(ctx: ToolContext, action: str) -> AgentDesk:
    if ctx.agents is None:
        raise invalid_args(
            action,
            "this run",
            "delegation needs a run hosted by the workspace's owner (`runfold serve`, or "
            "Workspace.arun with agents=True); do the work yourself instead",
        )
    return ctx.agents


async def delegate(
    task: str, *, ctx: ToolContext, goal: str = "", room: str = "", detach: bool = False
) -> dict[str, Any]:
    """Hand a task to a new agent (a child run) that works on it while you go on; its final
    answer comes back to you as a letter of kind "reply" (call wait_for_reply to wait for it).

    Args:
        task: What the child should do, in full: it sees only these words (and the goal).
        goal: What done looks like for the child (optional).
        room: The child's room (where it may write): yours (the default) or a room below it.
        detach: True: the child keeps running when you are cancelled (default: it is cancelled too).

    Returns `{run: <child run id>, depth, children}` once the child is dispatched. Raises
    E_GATE_DENIED past the delegation depth or fan-out limit (do the work yourself then), or for
    a room outside yours.
    """
    desk = _desk(ctx, "delegate a task")
    if not task.strip():
        raise invalid_args("delegate a task", "task", "give the child's task in words (not empty)")
    _check_real_room(ctx, room.strip())
    return await desk.delegate(task, goal, room.strip() or None, detach)


def _check_real_room(ctx: ToolContext, room: str) -> None:
    """Refuse a child room that is below this run's room by name but elsewhere by its real path
    (a symlink inside the room leading out): the sandbox would bind the place it leads to."""
    if not room or address_problem(room) is not None or (ctx.room is not None and not is_within(room, ctx.room)):
        return  # the default room, or one the desk or the run's spec refuses by its name
    named = ctx.workspace.joinpath(*room.split("/"))
    if not os.path.lexists(named):
        return  # made when the child starts: a real directory
    real = Path(os.path.realpath(named))
    if real.is_relative_to(ctx.real_room):
        return
    where = os.path.relpath(real, ctx.real_workspace)
    raise RunfoldError(
        ErrorCode.GATE_DENIED,
        f"delegate a task (room {room!r} leads out of {ctx.room_label} through a symbolic link)",
        repr(room),
        f"give a room that is a real directory inside {ctx.room_label}",
        retry=Retry.NO,
        gate=Gate(
            "a delegated run works inside its parent's room, by real path: a symbolic link does not widen it",
            f"room {room!r} is really {where!r}",
            "delegate to a room below yours that is a directory, not a link",
        ),
    )


async def wait_for_reply(*, ctx: ToolContext, runs: list[str] | None = None, timeout_s: int = 300) -> dict[str, Any]:
    """Wait until the children you delegated to have answered (their replies arrive as letters
    right after this call's result), or until the timeout runs out.

    Args:
        runs: The children to wait for (run ids or their starts); default: every child not waited for yet.
        timeout_s: The longest to wait, in seconds (1 to 3600; default 300).

    Returns `{replied: [runs], pending: [runs], timed_out: bool}`; on a timeout the runtime also
    tells you which children are still working.
    """
    desk = _desk(ctx, "wait for replies")
    if not 1 <= timeout_s <= MAX_WAIT_S:
        raise invalid_args(
            "wait for replies", f"timeout_s {timeout_s}", f"give a timeout from 1 to {MAX_WAIT_S} seconds"
        )
    return await desk.wait_for_reply(list(runs or []), timeout_s)


DELEGATE = Tool.from_function(delegate, effect="write", subject="task")
WAIT_FOR_REPLY = Tool.from_function(wait_for_reply, effect="write", subject="runs", times_itself=True)
AGENT_TOOLS: tuple[Tool, ...] = (DELEGATE, WAIT_FOR_REPLY)
"""`delegate` and `wait_for_reply`; with `send_message`, the tools a run's `agents` option adds."""

__all__ = ["AGENT_TOOLS", "DELEGATE", "MAX_WAIT_S", "WAIT_FOR_REPLY", "delegate", "wait_for_reply"]
