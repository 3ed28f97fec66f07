"""`runfold head` and `runfold repair`: the ledger's tail, kept and mended (DESIGN.md §3).

`head` verifies the ledger and prints its newest line's seq and hash, for the user to keep
outside the workspace and check later with `runfold verify --head`. `repair --quarantine` moves
bytes after the last valid line that are no ledger line into `.runfold/quarantine/`, recording
one `log_truncated`; without `--quarantine` it only says what it would move.
"""

from __future__ import annotations

from typing import Annotated

import typer

from runfold.cli.common import (
    EXIT_CODES_HELP,
    JsonOption,
    WorkspaceOption,
    echo_json,
    err_console,
    out_console,
    want_json,
    workspace_flag,
)
from runfold.core.figures import count


def head_cmd(ctx: typer.Context, workspace: WorkspaceOption = None, json: JsonOption = False) -> None:
    """Verify the ledger and print its head: SEQ:HASH of its newest line.

    Keep it somewhere the workspace cannot change (a ticket, another disk): `runfold verify
    --head SEQ:HASH` later checks that the ledger still holds that line, so a ledger that lost
    its newest lines, or whose last line was changed, cannot pass unnoticed even if the files
    in .runfold/ were changed with it. Read-only.

    \b
    Examples:
      runfold head
      runfold head --json
    """
    from runfold.api import Workspace, verify

    as_json = want_json(ctx, json)
    ws = Workspace.open(workspace)
    report = verify(ws.root)
    last = report.last_seq if report.last_seq is not None else -1
    anchor = f"{last}:{report.head}"
    if as_json:
        echo_json({"ok": True, "seq": last, "hash": report.head, "head": anchor, "lines": report.lines})
        return
    out_console().print(anchor, markup=False)
    err_console().print(
        f"{count(report.lines)} line{'' if report.lines == 1 else 's'} verified; keep this outside the "
        f"workspace and check it later with `runfold verify --head {anchor}{workspace_flag(ws.root)}`",
        markup=False,
    )


def repair_cmd(
    ctx: typer.Context,
    quarantine: Annotated[
        bool,
        typer.Option(
            "--quarantine",
            help="Move the bytes after the last valid line into .runfold/quarantine/ and record one "
            "log_truncated line. Without it, only say what would be moved.",
        ),
    ] = False,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Move bytes that are not ledger lines off the end of the ledger (nothing is deleted).

    A writer that died mid-append leaves a torn last line, which the next writer cuts by
    itself. Bytes after the last valid line that end with a newline are not that: every writer
    refuses them, and verify names them. --quarantine copies them (fsynced) into
    .runfold/quarantine/, cuts them from the segment and appends one log_truncated line with
    their size, BLAKE3 hash and quarantine file. Any other damage (a changed line, lines lost
    from the end) is not repaired: restore the ledger from a copy.

    \b
    Examples:
      runfold repair                  # say what would be moved
      runfold repair --quarantine
    """
    from runfold.api import Workspace

    as_json = want_json(ctx, json)
    ws = Workspace.open(workspace)
    where = workspace_flag(ws.root)
    report = ws.repair(quarantine=quarantine)
    found, written = report.found, report.written
    if as_json:
        echo_json(
            {
                "ok": True,
                "found": None
                if found is None
                else {
                    "segment": found.segment.name,
                    "offset": found.offset,
                    "bytes": found.size,
                    "after_seq": found.after_seq,
                    "ends_with_newline": found.newline,
                },
                "written": None if written is None else {"seq": written.seq, **written.env.data},
            }
        )
        return
    con = out_console()
    if written is not None:
        data = written.env.data
        con.print(
            f"moved {count(int(data['dropped_bytes']))} byte(s) from {data.get('segment')} offset {data.get('offset')} "
            f"to .runfold/{data.get('quarantine')} ({data.get('dropped_hash')}); recorded log_truncated "
            f"at seq {written.seq}",
            markup=False,
        )
        return
    if found is None:
        con.print("nothing to repair: the ledger ends with a valid line", markup=False)
        return
    kind = "a garbage tail ending with a newline" if found.newline else "a torn append"
    con.print(
        f"found {kind}: {count(found.size)} byte(s) at offset {found.offset} of {found.segment.name}, "
        f"after seq {found.after_seq}; `runfold repair --quarantine{where}` moves them into "
        ".runfold/quarantine/ and records log_truncated",
        markup=False,
    )


def register(app: typer.Typer) -> None:
    """Add `head` and `repair` to `app`."""
    app.command("head", epilog=EXIT_CODES_HELP)(head_cmd)
    app.command("repair", epilog=EXIT_CODES_HELP)(repair_cmd)
