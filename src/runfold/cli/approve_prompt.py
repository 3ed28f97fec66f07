"""The terminal's approval prompt for `runfold run`: a call whose class's policy is `ask` shows
what it will do (the diff, the command, the MCP call) and waits for one line from the person.

`y` or `yes` approves; an empty line, `n` or `no` denies; any other words deny with those words
as the reason the model reads. Reading is non-blocking on the event loop, so a decision sent
from another terminal (`runfold approve`/`deny`) or a Ctrl-C ends the prompt at once.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from runfold.cli.live import LiveView
from runfold.runtime.approvals import ApprovalRequest, Decision

APPROVE_WORDS = frozenset({"y", "yes"})
DENY_WORDS = frozenset({"", "n", "no"})


def decision_of(line: str) -> Decision:
    """The decision one typed line means (see the module docstring)."""
    words = line.strip()
    if words.lower() in APPROVE_WORDS:
        return Decision(True, via="terminal")
    return Decision(False, None if words.lower() in DENY_WORDS else words, via="terminal")


class TerminalAsk:
    """`ask` for a run in a terminal: prints the request on `view`'s console and reads one line
    of `stdin` (a terminal) without blocking the event loop."""

    def __init__(self, view: LiveView, stdin: TextIO | None = None) -> None:
        self.view = view
        self.stdin = stdin if stdin is not None else sys.stdin

    async def __call__(self, request: ApprovalRequest) -> Decision:
        console = self.view.console
        with self.view.paused():
            console.print(
                f"\n── approval needed: {request.tool} ({request.cls} tool), call {request.tool_use_id} ──",
                markup=False,
                highlight=False,
            )
            console.print(request.preview.rstrip("\n"), markup=False, highlight=False)
            console.print(
                "approve? [y]es / [n]o, or type a reason to deny (another terminal: "
                f"runfold approve {request.run} {request.tool_use_id}): ",
                markup=False,
                highlight=False,
                end="",
            )
            line = await self._read_line()
        return decision_of(line)

    async def _read_line(self) -> str:
        loop = asyncio.get_running_loop()
        got: asyncio.Future[str] = loop.create_future()
        fd = self.stdin.fileno()

        def readable() -> None:
            if not got.done():
                line = self.stdin.readline()
                if line:
                    got.set_result(line)
                else:
                    got.set_exception(EOFError("the terminal closed its input"))

        loop.add_reader(fd, readable)
        try:
            return await got
        finally:
            loop.remove_reader(fd)
