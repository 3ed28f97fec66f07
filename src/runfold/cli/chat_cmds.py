"""`runfold chat`: talk with an agent turn after turn in a terminal, each message continuing the
room's conversation as a successor run (DESIGN.md §4 `session_opened`, §7 continue).

The session keeps one model (built once, so a script plays on and a local model loads once) and
one event loop; each message is one run driven like `runfold run` (the same live view, streamed
text, Ctrl-C handling), then the terminal is the person's again. `/fork`, `/why`, `/cost` and
`/runs` run the commands of the same names on the session's current run.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runfold.cli.common import EXIT_CODES_HELP, EXIT_ERROR, WorkspaceOption, err_console, out_console
from runfold.cli.live import LiveView
from runfold.core.errors import RunfoldError

if TYPE_CHECKING:
    import asyncio

    from rich.console import Console

    from runfold.api import RunOutcome
    from runfold.cli.remote import Remote
    from runfold.core.fold import RunSummary
    from runfold.core.payloads import SessionOpened
    from runfold.core.records import Record
    from runfold.providers.base import Provider
    from runfold.runtime.spec import RunSpec

PROMPT = "you> "
HELP_TEXT = """\
Type a message and press Enter: it continues the conversation (a successor run of the last one).
  /fork [SEQ]     branch: a fork of the current run cut at the last safe point <= SEQ
                  (default: its end); your next message continues the fork
  /why [OPTIONS]  `runfold why` on the current run (e.g. /why --bytes)
  /cost [RUN]     `runfold cost` of the current run (or RUN)
  /runs           `runfold runs`
  /help           this text;  /exit (or Ctrl-D) ends the session
Ctrl-C while the model works cancels that turn (the run is frozen as cancelled; the session goes
on and your next message continues it). Ctrl-C at the prompt clears the line."""
COMMANDS = ("fork", "why", "cost", "runs", "help", "exit", "quit")


class ChatView(LiveView):
    """The live view of one chat turn: the model's words are printed whole, as the reply of a
    conversation (the log lines of tool calls, steers and cancels stay as `runfold run` shows
    them); streamed text shows under the status bar while it arrives (terminals only)."""

    def _on_run_started(self, record: Record, data: dict[str, Any]) -> None:
        self.run_id = record.env.run
        self.model = str(data.get("model") or "")

    def _on_model_called(self, record: Record, data: dict[str, Any]) -> None:
        self.attempts += 1
        self.waiting = "waiting for the model"
        self._streamed = ""

    def _on_steer_received(self, record: Record, data: dict[str, Any]) -> None:
        if data.get("source") != "runtime":  # the runtime's note opening each successor is not news here
            super()._on_steer_received(record, data)

    def _on_model_returned(self, record: Record, data: dict[str, Any]) -> None:
        self._take_reply(data)
        if self.last_reply:
            self._print_whole(self.last_reply)

    def _print_whole(self, text: str) -> None:
        target = self._live.console if self._live is not None else self.console
        target.print(text, markup=False, highlight=False)


@dataclass
class ChatSession:
    """One chat: the workspace `root`, the `room` (None: the root), the session's `provider`
    (built once; a SPEC or None when `remote`, the `runfold serve` owning the workspace, runs
    the turns), the `current` run the next message continues (None: the next message starts the room's
    first run), `opening`: the `session_opened` payload the session's first run writes (None once
    written), the runs it made and how many turns `failed` (refused, or frozen by an error)."""

    root: Path
    room: str | None
    provider: Provider | str | None
    current: str | None
    opening: SessionOpened | None
    remote: Remote | None = None
    runs: list[str] = field(default_factory=list)
    failed: int = 0

    def spec(self, text: str) -> RunSpec:
        """The run of the person's message `text`."""
        from runfold.runtime.spec import RunSpec

        return RunSpec(
            text,
            model=self.provider,
            room=self.room or ".",
            continues=self.current,
            session=self.opening,
            command_line=True,
        )


def _previous(summaries: list[RunSummary], room: str | None) -> RunSummary | None:
    """The room's latest run that a session may continue: the last run with the room's address
    that is frozen (or a fork never run)."""
    for s in reversed(summaries):
        if s.addr == room and s.status != "running":
            return s
    return None


@contextlib.contextmanager
def _signals_restored() -> Iterator[None]:
    """A turn's run installs its own Ctrl-C, SIGTERM and SIGHUP handling and leaves them
    ignored when it ends (a summary must not be interrupted); a chat goes on after the turn, so
    the handlers it had come back."""
    saved: list[tuple[int, Any]] = []
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            saved.append((sig, signal.getsignal(sig)))
    try:
        yield
    finally:
        for sig, handler in saved:
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)


def _turn(session: ChatSession, text: str, runner: asyncio.Runner, console: Console) -> None:
    """One person's message: a run driven with the live view (by the server when one owns the
    workspace); its end is said when it is not an answer (cancelled, a limit, an error)."""
    from runfold.api import Workspace
    from runfold.cli import foreground

    if session.remote is not None:
        followed = _remote_turn(session, session.remote, text, console)
        if followed is not None:
            _ended(session, followed, console)
        return
    ws = Workspace.open(session.root)
    view = ChatView(console, fancy=console.is_terminal)
    hooks: dict[str, Any] = {"on_durable": view.on_event, "on_delta": view.on_delta}
    if sys.stdin is not None and sys.stdin.isatty():
        from runfold.cli.approve_prompt import TerminalAsk

        hooks["ask"] = TerminalAsk(view)
    try:
        with _signals_restored(), view:
            outcome = runner.run(foreground._drive(ws, session.spec(text), view, hooks))
    except RunfoldError as err:  # refused before the run started: the session goes on
        err_console().print(err.display(), markup=False)
        session.failed += 1
        return
    finally:
        ws.close()
    _ended(session, outcome, console)


def _remote_turn(session: ChatSession, remote: Remote, text: str, console: Console) -> RunOutcome | None:
    """The turn run by the server: dispatched, then followed through its event stream (durable
    lines; Ctrl-C cancels it there). None when it was refused or no longer followed."""
    from runfold.cli.remote import dispatch_answer, follow, outcome_of, queued_note

    try:
        answer = dispatch_answer(remote, session.spec(text))
    except RunfoldError as err:
        err_console().print(err.display(), markup=False)
        session.failed += 1
        return None
    run = str(answer["run"])
    view = ChatView(console, fancy=console.is_terminal)
    with _signals_restored(), view:
        if answer.get("state") == "queued":
            view.note(queued_note(remote, run))
        records = follow(remote, run, view)
    if records is None:
        session.current = None  # still freezing on the server: the next message waits for it
        console.print(f"(stopped following run {run[:8]}; continue it once it is frozen: /runs)", markup=False)
        return None
    if not records:
        console.print(f"(run {run[:8]} was dropped from the server's queue before it started)", markup=False)
        return None
    return outcome_of(run, records)


def _ended(session: ChatSession, outcome: RunOutcome, console: Console) -> None:
    """The session after a turn: the run it ended with is the next message's to continue."""
    from runfold.cli import foreground

    session.opening = None
    session.current = outcome.run_id
    session.runs.append(outcome.run_id)
    if outcome.error is not None:
        err_console().print(outcome.error.display(), markup=False)
        session.failed += 1
    elif outcome.completion == "cancelled":
        console.print(
            f"(turn cancelled: run {outcome.run_id[:8]} frozen as cancelled; your next message continues it)",
            markup=False,
        )
    elif outcome.completion != "done":
        console.print(f"({foreground.completion_word(outcome)}: {outcome.reason})", markup=False)


def _command(session: ChatSession, line: str, console: Console) -> bool:
    """A `/command` typed in the chat; False when it ends the session."""
    try:
        words = shlex.split(line[1:])
    except ValueError as exc:
        console.print(f"cannot read the command ({exc}); /help lists the commands", markup=False)
        return True
    name, args = (words[0], words[1:]) if words else ("help", [])
    if name in ("exit", "quit"):
        return False
    if name == "help" or name not in COMMANDS:
        if name != "help":
            console.print(f"unknown command /{name}", markup=False)
        console.print(HELP_TEXT, markup=False)
        return True
    if name == "runs":
        _invoke(["runs", *args], session.root)
        return True
    if session.current is None:
        console.print(f"/{name} needs a run: say something first (the session has no run yet)", markup=False)
        return True
    if name == "fork":
        _fork(session, args, console)
        return True
    if not args or args[0].startswith("-"):
        args = [session.current, *args]
    _invoke([name, *args], session.root)
    return True


def _fork(session: ChatSession, args: list[str], console: Console) -> None:
    from runfold.api import Workspace
    from runfold.cli.fold_cmds import fork_lines
    from runfold.cli.remote import ForkView

    assert session.current is not None
    try:
        with Workspace.open(session.root) as ws:
            at = int(args[0]) if args else ws.records(session.current)[-1].seq
            if session.remote is not None:  # the server writes the fork
                view = session.remote.fork(session.current, at, None)
            else:
                plan = ws.fork(session.current, at)
                view = ForkView(plan.new_run, plan.mother, plan.asked, plan.cut, plan.moved, len(plan.inherited.messages))
    except ValueError:
        console.print(f"/fork takes a seq (a whole number), not {args[0]!r}", markup=False)
        return
    except RunfoldError as err:
        err_console().print(err.display(), markup=False)
        return
    for line in fork_lines(view):
        console.print(line, markup=False)
    console.print("your next message continues the fork", markup=False)
    session.current = view.new_run  # the fork's id, whether the server or this process wrote it
    session.runs.append(view.new_run)


def _invoke(argv: list[str], root: Path) -> None:
    """Run `runfold ARGV -w ROOT` in this process: the very command, its output and its errors
    (an exit code ends the command, not the chat)."""
    import click

    from runfold.cli.main import app

    command = typer.main.get_command(app)
    with contextlib.suppress(SystemExit, click.exceptions.Exit, click.exceptions.Abort):
        try:
            command.main([*argv, "-w", str(root)], prog_name="runfold", standalone_mode=False)
        except click.ClickException as exc:
            exc.show()


def _lines(interactive: bool, console: Console) -> Iterator[str]:
    """The person's lines: on a terminal with a prompt (Ctrl-C clears the line, Ctrl-D ends);
    otherwise each line of stdin, until its end."""
    if not interactive:
        for raw in sys.stdin:
            yield raw.rstrip("\n")
        return
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history for input())
    while True:
        try:
            yield input(PROMPT)
        except KeyboardInterrupt:
            console.print("", markup=False)
            console.print("(Ctrl-D or /exit ends the session)", markup=False)
        except EOFError:
            console.print("", markup=False)
            return


def chat_cmd(
    room: Annotated[
        str,
        typer.Option(
            "--room",
            help="The room (address) to talk in; its latest run's conversation is carried on.",
            metavar="ADDR",
        ),
    ] = ".",
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="SPEC of the model to talk with (default as for `run`): built once for the session.",
            show_default=False,
            metavar="SPEC",
        ),
    ] = None,
    new: Annotated[
        bool,
        typer.Option("--new", help="Start a new conversation even when the room has one to carry on."),
    ] = False,
    workspace: WorkspaceOption = None,
) -> None:
    """Talk with an agent in a room, message after message.

    Each message you type continues the room's conversation: the first one carries on the
    room's latest run (a successor of it: its conversation travels with the session, recorded as
    session_opened with carried) or, in a room with none (or with --new), starts a run with your
    words; every later one is a successor of the run before. The model's text streams as it
    arrives. Inside: /fork [SEQ], /why, /cost, /runs, /help, /exit. Ctrl-C cancels the turn in
    flight (the session goes on), Ctrl-D ends the session. With stdin not a terminal, each line
    of stdin is one message and the session ends at its end. Exits 3 when a turn failed (refused,
    or frozen by an error; the session went on after it), else 0.

    \b
    Examples:
      runfold chat
      runfold chat --room docs --model anthropic:claude-sonnet-4-5
      printf 'What is on the to-do list?\\n/cost\\n' | runfold chat --model script:session.jsonl
    """
    import asyncio

    from runfold.api import Workspace
    from runfold.cli.remote import server_of
    from runfold.core.address import parse_address
    from runfold.core.payloads import ForkPoint, SessionOpened
    from runfold.runtime.assemble import session_provider

    room_addr = None if room in (".", "") else room
    if room_addr is not None:
        parse_address(room_addr)
    with Workspace.open(workspace) as ws:
        remote = server_of(ws)
        root = ws.root
        config = ws.settings()
        previous = _previous(ws.run_summaries(), room_addr)
    provider: Provider | str | None = model
    if remote is not None:  # the server runs every turn with the model it builds per run
        talker = f"{model or 'the default model'} through `runfold serve` (pid {remote.info.pid})"
    else:
        provider, _owned = session_provider(model, config, command_line=True)
        talker = provider.model
    where = f"room {room_addr}" if room_addr else "the workspace root"
    console = out_console()
    if previous is not None and not new:
        opening = SessionOpened(from_=ForkPoint(run=previous.run, at_seq=previous.last_seq), carried=True)
        said = f"carrying on run {previous.run[:8]} ({previous.task_head})"
    else:
        origin = ForkPoint(run=previous.run, at_seq=previous.last_seq) if previous is not None else None
        opening = SessionOpened(from_=origin, carried=False)
        said = "a new conversation"
    session = ChatSession(root, room_addr, provider, previous.run if previous and not new else None, opening, remote)
    interactive = sys.stdin is not None and sys.stdin.isatty()
    if interactive:
        console.print(
            f"chat in {where} with {talker}: {said}. /help lists the commands; Ctrl-D ends.",
            markup=False,
        )
    with asyncio.Runner() as runner:
        try:
            for line in _lines(interactive, console):
                text = line.strip()
                if not text:
                    continue
                if not interactive:  # the transcript shows what was said to the model
                    console.print(PROMPT + line, markup=False)
                if text.startswith("/"):
                    if not _command(session, text, console):
                        break
                    continue
                _turn(session, line, runner, console)
        finally:
            if remote is not None:
                remote.close()
            elif not isinstance(provider, str) and provider is not None:
                runner.run(provider.aclose())
    if session.runs:
        console.print(f"session ended: {len(session.runs)} run(s), the last {session.runs[-1]}", markup=False)
    if session.failed:
        err_console().print(f"{session.failed} turn(s) of the session failed (each error is shown above)", markup=False)
        raise typer.Exit(EXIT_ERROR)


def register(app: typer.Typer) -> None:
    """Add `chat` to `app`."""
    app.command("chat", epilog=EXIT_CODES_HELP)(chat_cmd)


__all__ = ["ChatView", "register"]
