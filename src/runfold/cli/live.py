"""The live view of `runfold run`: what the agent is doing while it runs, built from ledger lines.

It is fed every line the run writes (`on_event`) and the streamed reply text (`on_delta`). What
it prints for good is what the ledger says: each reply's whole text comes from its
`model_returned` line. On a terminal it is a rich `Live` status bar under a scrolling log, and
the text streamed while the model answers is shown under the bar as it arrives — provisional,
replaced by the durable reply once its line is written; otherwise it prints plain lines per event
(turn, tool calls with their subjects, tokens, cost, elapsed), which is what logs and tests read.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from runfold.core.errors import RunfoldError
from runfold.core.figures import count, usd
from runfold.core.messages import reply_blocks
from runfold.core.summary import head, short_run

# rich's live display is imported when a run is drawn, not when the command line is built.
if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.live import Live

    from runfold.core.records import Record

STREAM_KEEP_CHARS = 64 * 1024
"""Characters of the streamed reply kept for the provisional display (its end is shown)."""


def _int(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


class LiveView:
    """Shows a run as it happens (see the module docstring).

    `console`: where to draw; `fancy`: a rich Live display (terminals) instead of plain lines;
    `clock`: seconds, monotonic (elapsed time shown is measured here, the ledger keeps its own).
    Use as a context manager around the run; counters (`turns`, `tool_calls`, `input_tokens`,
    `output_tokens`, `cache_read`, `cache_write`, `billed_usd_micros` — None once any reply's
    price is unknown) are readable after it ends.
    """

    def __init__(
        self, console: Console, *, fancy: bool = False, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.console = console
        self.fancy = fancy
        self.clock = clock
        self.started = clock()
        self.run_id = ""
        self.model = ""
        self.last_reply = ""
        """The text of the latest model reply, whole (the live lines show only its head)."""
        self.extra: dict[str, Any] = {}
        """Fields a step after the run (e.g. the handoff probe) adds to the `--json` summary."""
        self.turns = 0
        self.attempts = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read = 0
        self.cache_write = 0
        self.billed_usd_micros: int | None = 0
        self.waiting = ""
        self._streamed = ""
        self._live: Live | None = None

    # ---- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> LiveView:
        self.started = self.clock()
        if self.fancy:
            from rich.live import Live

            self._live = Live(
                self._renderable(),
                console=self.console,
                refresh_per_second=8,
                transient=True,
                get_renderable=self._renderable,
            )
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started

    # ---- output ----------------------------------------------------------------------------

    def line(self, text: str) -> None:
        """Print one log line prefixed with the elapsed time."""
        stamped = f"[{self.elapsed_s:6.1f}s] {text}"
        if self._live is not None:
            self._live.console.print(stamped, markup=False, highlight=False)
        else:
            self.console.print(stamped, markup=False, highlight=False)

    def note(self, text: str) -> None:
        """A message from the command itself (e.g. about Ctrl-C), shown in the log."""
        self.line(text)

    def status(self) -> str:
        """The one-line status: turn, tool calls, tokens, cost, elapsed."""
        parts = [
            f"run {short_run(self.run_id)}" if self.run_id else "starting",
            f"turn {self.turns + (1 if self.waiting else 0)}",
            f"{self.tool_calls} tool call{'s' if self.tool_calls != 1 else ''}",
            f"{count(self.input_tokens)} in / {count(self.output_tokens)} out tokens",
            f"cost {usd(self.billed_usd_micros)}",
            f"{self.elapsed_s:.1f} s",
        ]
        if self.waiting:
            parts.append(self.waiting)
        return " · ".join(parts)

    def _renderable(self) -> Group:
        from rich.console import Group
        from rich.text import Text

        status = Text(self.status(), style="bold")
        if not self._streamed:
            return Group(status)
        return Group(status, Text(self._stream_tail(), style="dim"))

    def _stream_tail(self) -> str:
        """The end of the streamed text that fits under the status bar: as many wrapped lines as
        the terminal has rows, less the bar's."""
        import textwrap

        width = max(self.console.width - 1, 20)
        rows = max(self.console.height - 3, 3)
        wrapped: list[str] = []
        for paragraph in self._streamed.splitlines() or [""]:
            wrapped.extend(textwrap.wrap(paragraph, width) or [""])
        return "\n".join(wrapped[-rows:])

    # ---- feeding ---------------------------------------------------------------------------

    def on_delta(self, kind: str, text: str) -> None:
        """Streamed reply text (`kind` is the block kind), shown as it arrives on a terminal only:
        provisional until the reply's `model_returned` line replaces it."""
        if self._live is None or kind not in ("text", "thinking"):
            return
        self._streamed = (self._streamed + text)[-STREAM_KEEP_CHARS:]

    def on_event(self, record: Record) -> None:
        """One ledger line of the run, as it is written."""
        env = record.env
        data = env.data if isinstance(env.data, dict) else {}
        handler = getattr(self, f"_on_{env.kind}", None)
        if handler is not None:
            handler(record, data)

    def _on_run_started(self, record: Record, data: dict[str, Any]) -> None:
        self.run_id = record.env.run
        self.model = _str(data, "model")
        self.line(f"run {self.run_id} · model {self.model or '?'} · task {head(_str(data, 'task'))}")

    def _on_model_called(self, record: Record, data: dict[str, Any]) -> None:
        self.attempts += 1
        req = data.get("request")
        size = _int(req, "bytes") if isinstance(req, dict) else 0
        attempt = _int(data, "attempt")
        again = f" (attempt {attempt})" if attempt > 1 else ""
        self.waiting = "waiting for the model"
        self._streamed = ""
        self.line(
            f"turn {self.turns + 1} · calling {_str(data, 'model') or self.model}{again} · {count(size)} request bytes"
        )

    def _on_model_returned(self, record: Record, data: dict[str, Any]) -> None:
        said, summary = self._take_reply(data)
        self.line(summary)
        if said and head(said) != f'"{self.last_reply}"':  # the head was cut: the whole reply too
            self._print_whole(self.last_reply)

    def _take_reply(self, data: dict[str, Any]) -> tuple[str, str]:
        """Count a `model_returned` payload in (turns, tokens, cost, `last_reply`); returns its
        text on one line and the turn's one-line summary."""
        self.turns += 1
        self.waiting = ""
        self._streamed = ""
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        self.input_tokens += _int(usage, "input")
        self.output_tokens += _int(usage, "output")
        self.cache_read += _int(usage, "cache_read")
        self.cache_write += _int(usage, "cache_write")
        billed = data.get("billed_usd_micros")
        if not isinstance(billed, int) or isinstance(billed, bool):
            self.billed_usd_micros = None
        elif self.billed_usd_micros is not None:
            self.billed_usd_micros += billed
        try:
            blocks = reply_blocks(data.get("message"))
        except RunfoldError:  # a malformed reply shows as one without content
            blocks = []
        texts = [b["text"] for b in blocks if b["kind"] == "text"]
        thinking = any(b["kind"] in ("thinking", "redacted_thinking") for b in blocks)
        calls = _int(data, "calls")
        said = " ".join(t for t in texts if t.strip())
        self.last_reply = "\n\n".join(t for t in texts if t.strip())
        parts = [f"turn {self.turns} · reply"]
        if thinking:
            parts.append("(thinking)")
        parts.append(head(said) if said else "(no text)")
        parts.append(f"· {calls} tool call{'s' if calls != 1 else ''}")
        parts.append(f"· {count(_int(usage, 'input'))} in / {count(_int(usage, 'output'))} out tokens")
        cached = _int(usage, "cache_read")
        if cached:
            parts.append(f"({count(cached)} cached)")
        parts.append(f"· {usd(billed if isinstance(billed, int) else None)}")
        stop = _str(data, "stop")
        if stop and stop not in ("end_turn", "tool_use", "stop", "tool_calls", "completed"):
            parts.append(f"· stop {stop}")
        return said, " ".join(parts)

    def _print_whole(self, text: str) -> None:
        """A reply's whole text from its durable line, indented under the turn's line."""
        body = "\n".join(f"    {line}".rstrip() for line in text.splitlines())
        target = self._live.console if self._live is not None else self.console
        target.print(body, markup=False, highlight=False)

    def _on_tool_called(self, record: Record, data: dict[str, Any]) -> None:
        self.tool_calls += 1
        subject = _str(data, "subject")
        effect = _str(data, "effect")
        name = _str(data, "name")
        # the approval class a person sets with --approve: `exec` apart from the writing tools
        kind = "(exec)" if name == "exec" else "(writes)" if effect == "write" else ""
        parts = [name, head(subject, 80) if subject else "", kind]
        self.line("  → " + " ".join(p for p in parts if p))

    def _on_tool_result(self, record: Record, data: dict[str, Any]) -> None:
        took = _int(data, "took_us")
        name = _str(data, "name")
        error = data.get("error")
        if isinstance(error, dict):
            self.tool_errors += 1
            code = _str(error, "code") or "error"
            recovery = _str(error, "recovery")
            self.line(f"  ← {name} {code} {head(recovery, 100) if recovery else ''}".rstrip())
        else:
            self.line(f"  ← {name} ok · {took / 1000:.1f} ms")

    def _on_watchdog_fired(self, record: Record, data: dict[str, Any]) -> None:
        reason = _str(data, "reason") or "watchdog"
        delay = data.get("delay_ms")
        wait = f", retrying in {delay} ms" if isinstance(delay, int) else ""
        detail = _str(data, "detail")
        self.line(f"  ! {reason} (attempt {_int(data, 'attempt')}){wait}" + (f": {head(detail, 120)}" if detail else ""))

    def _on_steer_received(self, record: Record, data: dict[str, Any]) -> None:
        self.line(f"  steer from {_str(data, 'source') or '?'}: {head(_str(data, 'text'), 100)}")

    def _on_cancel_received(self, record: Record, data: dict[str, Any]) -> None:
        self.waiting = ""
        self.line("cancel received at a safe point: freezing the run as cancelled")

    def _on_approval_requested(self, record: Record, data: dict[str, Any]) -> None:
        call = _str(data, "tool_use_id")
        self.line(
            f"  ? {_str(data, 'tool')} ({_str(data, 'class')}) waits for approval: "
            f"runfold approve {record.env.run} {call}  |  runfold deny {record.env.run} {call} --reason TEXT"
        )

    def _on_approval_resolved(self, record: Record, data: dict[str, Any]) -> None:
        reason = _str(data, "reason")
        self.line(f"  {_str(data, 'decision')} by {_str(data, 'by')}" + (f": {head(reason, 100)}" if reason else ""))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The live display stopped for the block (a prompt owns the terminal), then resumed."""
        live = self._live
        if live is not None:
            live.stop()
        try:
            yield
        finally:
            if live is not None and self._live is live:
                live.start()
