"""The `exec` tool: a shell command in the run's room, inside the OS sandbox (`tools.sandbox`),
in a process group of its own that never outlives its call, its run or runfold (DESIGN.md §9).

A command is launched in two steps: `launch` starts its process group held at a gate (nothing
of the command has run yet), so the run loop can record the group on the call's `tool_called`
before it acts; `Launch.release` opens the gate. A group is killed when its call ends, is
cancelled or times out; the exec guard kills it when runfold dies; resume kills a recorded group
that is still alive (`end_recorded_group`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from runfold.core.errors import ErrorCode, Retry, invalid_args
from runfold.tools.context import ToolContext
from runfold.tools.exec_guard import guard_preexec, release_group
from runfold.tools.results import ToolError
from runfold.tools.sandbox import bwrap_argv

GATE_SCRIPT = 'read -r _ || exit 125; exec "$@" </dev/null'
"""The gate a command waits at: one line on its stdin (a pipe from runfold) lets it exec the
sandbox with no stdin; the pipe closing first (runfold died before the call was recorded) ends
it unrun (exit 125)."""


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22),
    None when it is gone or /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        return int(raw[raw.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group `pgid` (gone already: nothing to do)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def end_recorded_group(pgid: int, pstart: int | None) -> bool:
    """Kill the group `pgid` recorded on a `tool_called` when its leader is still the process
    that was recorded (same start time: a recycled id is left alone). True when it was killed."""
    if pstart is None or pgid <= 1 or process_start(pgid) != pstart:
        return False
    kill_group(pgid)
    return True


@dataclass
class Launch:
    """A command's process group, started and held at its gate: `pgid` (the leader's pid) and
    `pstart` (its start time, `process_start`) are what `tool_called` records."""

    command: str
    proc: asyncio.subprocess.Process
    gate: int
    pgid: int
    pstart: int | None
    released: bool = field(default=False)

    def release(self) -> None:
        """Open the gate: the command starts."""
        if not self.released:
            self.released = True
            with contextlib.suppress(OSError):
                os.write(self.gate, b"go\n")
            with contextlib.suppress(OSError):
                os.close(self.gate)

    async def abort(self) -> None:
        """End the group unrun (the call was cancelled before it was recorded) and reap it."""
        self.released = True
        kill_group(self.pgid)
        with contextlib.suppress(OSError):
            os.close(self.gate)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.proc.wait(), 2)
        release_group(self.pgid)


def _argv(command: str, ctx: ToolContext) -> list[str]:
    settings = ctx.sandbox
    if settings.sandbox == "none":
        return ["/bin/sh", "-c", command]
    return bwrap_argv(command, workspace=ctx.real_workspace, room=ctx.real_room, network=settings.network)


async def launch(command: str, ctx: ToolContext) -> Launch:
    """Start `command`'s process group in the room, held at its gate (see the module docstring).

    Raises `E_INVALID_ARGS` for an empty command and `E_GATE_DENIED` when no sandbox can hold it
    (`tools.sandbox.sandbox_refused`); nothing is started then."""
    if not command.strip():
        raise invalid_args("run command", "argument `command`", "`command` is empty; give a shell command")
    ctx.ensure_room()
    argv = _argv(command, ctx)
    read_end, write_end = os.pipe()
    try:
        spawn = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                GATE_SCRIPT,
                "runfold-gate",
                *argv,
                cwd=ctx.room_dir,
                env=ctx.exec_env(),
                stdin=read_end,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=guard_preexec(),  # the group is known to the guard before it can act
            )
        )
        try:
            # shielded: a cancel while asyncio connects the pipes must not leave the group behind
            proc = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            os.close(write_end)
            with contextlib.suppress(Exception):
                started = await spawn
                kill_group(started.pid)
                await asyncio.wait_for(started.wait(), 2)
                release_group(started.pid)
            raise
        except BaseException:
            os.close(write_end)
            raise
    finally:
        os.close(read_end)
    return Launch(command, proc, write_end, proc.pid, process_start(proc.pid))


class _Capture:
    """Keeps the first and last halves of a stream within `cap` bytes and counts all bytes."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65536):
            self.feed(chunk)

    @property
    def truncated(self) -> bool:
        return self.total > self.head_cap + self.tail_cap

    def text(self) -> str:
        if not self.truncated:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", errors="replace")
        tail = bytes(self.tail[-self.tail_cap :])
        omitted = self.total - len(self.head) - len(tail)
        return (
            bytes(self.head).decode("utf-8", errors="replace")
            + f"\n…[{omitted} bytes omitted]…\n"
            + tail.decode("utf-8", errors="replace")
        )


async def _exited(proc: asyncio.subprocess.Process) -> None:
    """Wait until the shell itself exited. `proc.wait()` would also wait for every process still
    holding its pipes (a `cmd &` left behind), so the exit status is polled instead (≤ 50 ms)."""
    delay = 0.002
    while proc.returncode is None:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)


async def exec_command(
    command: str,
    timeout_s: Annotated[int, Field(ge=1, le=600)] = 30,
    *,
    ctx: ToolContext,
) -> dict[str, Any]:
    """Run a shell command (`/bin/sh -c`) in your room directory and return its exit code and output.

    The command runs in a sandbox: it may write only inside your room (everything else is
    read-only, `.runfold` too), has a private /tmp, and no network unless the workspace allows it.
    No stdin; the environment is this machine's without secrets (variables named like keys,
    tokens, passwords, DSNs, or holding credentials, are removed). Each of stdout and stderr is
    capped (32 KiB by default): a longer stream keeps its head and tail with a `…[N bytes
    omitted]…` marker. Processes the command leaves behind are killed when it ends. Result:
    {exit_code, stdout, stderr, took_ms, truncated, stdout_bytes, stderr_bytes}. A command still
    running after timeout_s is killed (with all its child processes) and the call fails with
    E_TIMEOUT, whose `detail` holds the partial output in the same shape.

    Args:
        command: The shell command line.
        timeout_s: Seconds before the command is killed (1-600).

    Raises:
        E_TIMEOUT (partial output in `detail`), E_INVALID_ARGS (an empty command), E_GATE_DENIED
        (no sandbox can be had here).
    """
    held = ctx.launched
    started_launch = (
        held if isinstance(held, Launch) and held.command == command else await launch(command, ctx)
    )
    limit = min(timeout_s, ctx.exec_max_timeout_s)
    proc = started_launch.proc
    out, err = _Capture(ctx.exec_output_max_bytes), _Capture(ctx.exec_output_max_bytes)
    started = time.monotonic_ns()
    readers = [asyncio.create_task(out.drain(proc.stdout)), asyncio.create_task(err.drain(proc.stderr))]
    timed_out = False
    try:
        started_launch.release()
        try:
            await asyncio.wait_for(_exited(proc), limit)
        except TimeoutError:
            timed_out = True
        kill_group(proc.pid)  # on timeout: the command; after exit: what it left running
        _done, pending = await asyncio.wait([*readers, asyncio.create_task(proc.wait())], timeout=2)
        for task in pending:  # a process that left the group still holds the pipe
            task.cancel()
    except BaseException:  # cancelled mid-run: kill everything, reap it, then let the cancel through
        kill_group(proc.pid)
        for task in readers:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(proc.wait(), 2)
        release_group(proc.pid)
        raise
    release_group(proc.pid)
    took_ms = (time.monotonic_ns() - started) // 1_000_000
    result: dict[str, Any] = {
        "exit_code": proc.returncode if proc.returncode is not None else -1,
        "stdout": out.text(),
        "stderr": err.text(),
        "took_ms": took_ms,
        "truncated": out.truncated or err.truncated,
        "stdout_bytes": out.total,
        "stderr_bytes": err.total,
    }
    if timed_out:
        raise ToolError(
            ErrorCode.TIMEOUT,
            f"run command (killed after {limit} s)",
            repr(command[:200]),
            "make the command finish sooner (less input, fewer steps) or give a larger timeout_s; "
            "its partial output is in detail",
            retry=Retry.UNKNOWN,
            detail=result,
        )
    return result
