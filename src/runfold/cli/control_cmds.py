"""`runfold steer` and `runfold cancel`: reach a run that another process is running.

Both write one request into the workspace's control inbox and wait for the owning process's
answer; the run records it at its next safe point (DESIGN.md §5). With nobody running the
workspace they refuse plainly and queue nothing. A run queued on `runfold serve` (no line yet)
is reached through the server's API instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runfold.cli.common import (
    EXIT_CODES_HELP,
    JsonOption,
    WorkspaceOption,
    echo_json,
    out_console,
    want_json,
)
from runfold.core.errors import invalid_args
from runfold.core.ids import runs_with_prefix

if TYPE_CHECKING:
    from runfold.api import ControlReceipt, Workspace
    from runfold.cli.remote import Remote

WaitOption = Annotated[
    bool,
    typer.Option(
        "--wait",
        help="Wait until the run has recorded it at a safe point and print the ledger seq.",
    ),
]


def _receipt_json(r: ControlReceipt) -> dict[str, Any]:
    return {
        "signal": r.signal,
        "run": r.run,
        "type": r.type,
        "source": r.source,
        "state": r.state,
        "seq": r.seq,
        "path": str(r.path) if r.path is not None else None,
        "owner_pid": r.owner_pid,
    }


def _report(r: ControlReceipt, as_json: bool) -> None:
    if as_json:
        echo_json(_receipt_json(r))
        return
    what = "steer" if r.type == "steer" else "cancel"
    if r.state == "recorded":
        text = f"{what} recorded on run {r.run} at seq {r.seq} ({r.signal})"
    elif r.state == "accepted":
        text = (
            f"{what} handed to run {r.run} (owner pid {r.owner_pid}, {r.signal}): it is recorded at "
            "the run's next safe point"
            + ("" if r.type == "steer" else ", where the run is frozen as cancelled")
        )
    else:
        text = (
            f"no answer from the owner (pid {r.owner_pid}) yet: the {what} stays queued at {r.path}; "
            "it is recorded at the run's next safe point, or by `runfold resume` if its process died"
        )
    out_console().print(text, markup=False, highlight=False)


def _server_for_queued(ws: Workspace, run: str) -> Remote | None:
    """The server to ask about `run` when `runfold serve` owns the workspace and no run of the
    ledger matches `run` (a run queued there has no line yet), or a run queued there matches it
    too (the server names them all: the prefix is ambiguous). None: the inbox serves."""
    from runfold.cli.remote import LIST_TIMEOUT_S, queued_runs, server_of
    from runfold.core.errors import RunfoldError

    remote = server_of(ws)
    if remote is None:
        return None
    try:
        ws.resolve_run(run)
    except RunfoldError:
        return remote
    try:
        queued = queued_runs(remote, LIST_TIMEOUT_S)
    except RunfoldError:
        queued = []  # the inbox serves the ledger's run; the server is not needed for it
    if runs_with_prefix(run, [q["run"] for q in queued]):
        return remote
    remote.close()
    return None


def _queued_for_next_server(ws: Workspace, run: str) -> str | None:
    """The id of the run `run` names when no ledger run matches it and it waits in the durable
    queue for the next `runfold serve` (None otherwise)."""
    from runfold.core.errors import RunfoldError

    try:
        ws.resolve_run(run)
        return None
    except RunfoldError:
        matches = runs_with_prefix(run, [r for r, _task in ws.queued_runs()])
        return matches[0] if len(matches) == 1 else None


def _through_server(remote: Remote, run: str, type: str, body: dict[str, Any], as_json: bool) -> None:
    """Steer or cancel `run` through the server's API (a queued run) and report its answer."""
    try:
        answer = remote.call("POST", f"/runs/{run}/{type}", body, need={"state": str})
    finally:
        remote.close()
    if as_json:
        echo_json(answer)
        return
    rid, state = answer.get("run", run), answer.get("state")
    if state == "dropped":
        text = f"run {rid} was queued on the server and is dropped: it never started, the ledger has no line of it"
    elif state == "recorded":
        text = f"{type} recorded on run {rid} at seq {answer.get('seq')}"
    else:
        text = f"{type} handed to run {rid} by the server: it is recorded at the run's next safe point"
    out_console().print(text, markup=False, highlight=False)


def steer_cmd(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="The run to steer: its id or a unique prefix.", metavar="RUN")],
    text: Annotated[
        str | None,
        typer.Argument(help="The words to deliver; - reads them from standard input.", metavar="TEXT"),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="Read the words from this UTF-8 file instead of TEXT (up to the inbox's 4 MiB; "
            "a command-line argument stops near 128 KiB).",
            metavar="PATH",
        ),
    ] = None,
    from_addr: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="Deliver as a letter from this room address (another agent), never as the person.",
            metavar="ADDR",
        ),
    ] = None,
    from_run: Annotated[
        str | None,
        typer.Option("--from-run", help="With --from: the sending run (id or prefix).", metavar="RUN"),
    ] = None,
    wait: WaitOption = False,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Deliver TEXT into RUN, which another `runfold` process is running.

    The run records it as `steer_received` at its next safe point; it reaches the model with the
    next request that may carry it (after the current tool results, DESIGN.md §6). With --from
    it is a letter from another agent, rendered as `<letter from="@ADDR" ...>`. When no process
    runs the workspace, nothing is queued: continue the run with your words instead. A run still
    queued on `runfold serve` cannot be steered until it starts.

    \b
    Examples:
      runfold steer 01a22d10 "use the staging database, not prod"
      runfold steer 01a22d10 "tests pass on my side" --from lab/room2 --wait
      runfold steer 01a22d10 --file review.md
      git diff | runfold steer 01a22d10 -
    """
    from runfold.api import Workspace
    from runfold.core.speakers import Letter

    as_json = want_json(ctx, json)
    text = _steer_text(text, file)
    if from_addr is not None:  # refused before anything is opened: the grammar and reserved names
        from runfold.runtime.control import inbox_source_problem

        problem = inbox_source_problem(Letter(from_=from_addr.removeprefix("@"), kind="steer").recorded())
        if problem is not None:
            raise invalid_args("steer the run", f"--from {from_addr}", problem)
    with Workspace.open(workspace) as ws:
        remote = _server_for_queued(ws, run) if from_addr is None and from_run is None else None
        if remote is not None:
            _through_server(remote, run, "steer", {"text": text, "wait": wait}, as_json)
            return
        waiting = _queued_for_next_server(ws, run) if ws.server() is None else None
        if waiting is not None:
            raise invalid_args(
                "steer the run",
                f"run {waiting}",
                "it waits in the queue for the next `runfold serve` and has not started: steer it once it runs, "
                "or drop it with `runfold cancel`",
            )
        source = "user"
        if from_addr is not None:
            sender = ws.resolve_run(from_run) if from_run is not None else None
            source = Letter(from_=from_addr.removeprefix("@"), run=sender, kind="steer").recorded()
        elif from_run is not None:
            raise invalid_args("steer the run", "--from-run", "give --from ADDR too (the sender's room)")
        receipt = ws.send_control(run, "steer", text, source=source, until_recorded=wait)
    _report(receipt, as_json)


def _steer_text(text: str | None, file: Path | None) -> str:
    """The words of a steer: TEXT, the file `--file` names, or standard input for TEXT `-`
    (one trailing line break cut from a file or stdin). At most the inbox's request size is
    read. Raises `E_INVALID_ARGS` for none or both, a terminal on stdin, an unreadable file, or
    bytes that are not UTF-8."""
    import sys

    from runfold.store.control import MAX_REQUEST_BYTES

    action = "steer the run"
    if file is not None and text is not None:
        raise invalid_args(action, "TEXT with --file", "give the words once: as TEXT, with --file PATH, or - to read stdin")
    if file is None and text is None:
        raise invalid_args(
            action,
            "TEXT",
            "give the words: as TEXT, with --file PATH, or - to read them from standard input "
            "(see `runfold steer --help`)",
        )
    if file is None and text != "-":
        assert text is not None
        return text
    subject = f"--file {file}" if file is not None else "TEXT -"
    if file is None:
        if sys.stdin is None or sys.stdin.isatty():
            raise invalid_args(action, subject, "pipe the words in (`echo 'use staging' | runfold steer RUN -`)")
        data = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    else:
        try:
            with open(file, "rb") as f:
                data = f.read(MAX_REQUEST_BYTES + 1)
        except OSError as exc:
            raise invalid_args(action, subject, f"the file cannot be read ({exc.strerror}); give a readable file") from None
    try:
        words = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= MAX_REQUEST_BYTES - 3:  # cut inside a character at the read limit: too long anyway
            words = data[: exc.start].decode("utf-8")
        else:
            raise invalid_args(
                action, subject, f"the words are not UTF-8 text (byte {exc.start}); give UTF-8 text"
            ) from None
    return words.removesuffix("\n").removesuffix("\r")


def cancel_cmd(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="The run to cancel: its id or a unique prefix.", metavar="RUN")],
    wait: WaitOption = False,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Cancel RUN, which another `runfold` process is running.

    The run records `cancel_received` at its next safe point (an in-flight model call or tool
    wave is stopped; calls that never started get no line) and is frozen as cancelled with a
    valid history. When no process runs the workspace, nothing is queued. A run waiting in the
    queue of the `runfold serve` that owns the workspace is dropped there, and one a stopped
    server left queued for the next is dropped from the queue: it never starts.

    \b
    Examples:
      runfold cancel 01a22d10
      runfold cancel 01a22d10 --wait --json
    """
    from runfold.api import Workspace

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        remote = _server_for_queued(ws, run)
        waiting = _queued_for_next_server(ws, run) if remote is None and ws.server() is None else None
        if waiting is not None:
            ws.drop_queued(waiting)
        elif remote is None:
            receipt = ws.send_control(run, "cancel", until_recorded=wait)
    if waiting is not None:
        if as_json:
            echo_json({"run": waiting, "state": "dropped", "signal": None, "seq": None})
        else:
            out_console().print(
                f"run {waiting} waited in the queue for the next `runfold serve` and is dropped: it will not start",
                markup=False,
                highlight=False,
            )
        return
    if remote is not None:
        _through_server(remote, run, "cancel", {"wait": wait}, as_json)
        return
    _report(receipt, as_json)


def approve_cmd(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="The run: its id or a unique prefix.", metavar="RUN")],
    call: Annotated[str, typer.Argument(help="The waiting call's id (its tool_use_id).", metavar="CALL")],
    wait: WaitOption = False,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Approve CALL of RUN, which waits for approval in another `runfold` process.

    A call of a tool class whose policy is `ask` (`[approvals]` of config.toml, `runfold run
    --approve CLASS=ask`) is recorded with `approval_requested` and waits; the run's output and
    `runfold log --kind approval_requested` name RUN and CALL. The run records
    `approval_resolved` (approved) and the call acts.

    \b
    Examples:
      runfold approve 01a22d10 toolu_01XyZ
      runfold approve 01a22d10 call_3 --wait --json
    """
    _decide(ctx, run, call, "approve", "", wait, workspace, json)


def deny_cmd(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="The run: its id or a unique prefix.", metavar="RUN")],
    call: Annotated[str, typer.Argument(help="The waiting call's id (its tool_use_id).", metavar="CALL")],
    reason: Annotated[
        str, typer.Option("--reason", help="Why: the model reads it in the call's error.", metavar="TEXT")
    ] = "",
    wait: WaitOption = False,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Deny CALL of RUN, which waits for approval in another `runfold` process.

    The run records `approval_resolved` (denied, with the reason); the call does not act and its
    result is an `E_GATE_DENIED` error carrying the reason, which the model reads and answers.

    \b
    Examples:
      runfold deny 01a22d10 toolu_01XyZ --reason "do not touch the lockfile; edit package.json"
    """
    _decide(ctx, run, call, "deny", reason, wait, workspace, json)


def _decide(
    ctx: typer.Context, run: str, call: str, type: str, reason: str, wait: bool, workspace: Any, json: bool
) -> None:
    from runfold.api import Workspace

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        receipt = ws.send_control(run, type, reason, call=call, until_recorded=wait)
    if as_json:
        echo_json({**_receipt_json(receipt), "call": call})
        return
    what = "approval" if type == "approve" else "denial"
    if receipt.state == "recorded":
        text = f"{what} of call {call} recorded on run {receipt.run} at seq {receipt.seq}"
    elif receipt.state == "accepted":
        text = f"{what} of call {call} handed to run {receipt.run} (owner pid {receipt.owner_pid})"
    else:
        text = f"no answer from the owner (pid {receipt.owner_pid}) yet: the {what} stays queued at {receipt.path}"
    out_console().print(text, markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add `steer`, `cancel`, `approve` and `deny` to `app`."""
    app.command("steer", epilog=EXIT_CODES_HELP)(steer_cmd)
    app.command("cancel", epilog=EXIT_CODES_HELP)(cancel_cmd)
    app.command("approve", epilog=EXIT_CODES_HELP)(approve_cmd)
    app.command("deny", epilog=EXIT_CODES_HELP)(deny_cmd)


__all__ = ["register"]
