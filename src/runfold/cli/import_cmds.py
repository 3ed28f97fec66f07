"""`runfold import`: another tool's session file as runs of the workspace (DESIGN.md §4
`session_imported`). Thin: the work is `Workspace.import_session`; this module prints the runs
it became and the next commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runfold.cli.common import (
    EXIT_CODES_HELP,
    JsonOption,
    WorkspaceOption,
    echo_json,
    out_console,
    want_json,
    workspace_flag,
)
from runfold.core.figures import count
from runfold.core.ids import short_run_ids
from runfold.importers import AUTO, FORMATS


def import_cmd(
    ctx: typer.Context,
    format: Annotated[
        str,
        typer.Argument(
            metavar="FORMAT",
            help=f"The session format: {', '.join(FORMATS)}, or {AUTO} to detect it (the output says what it found).",
        ),
    ],
    file: Annotated[Path, typer.Argument(metavar="FILE", help="The session file another tool wrote.")],
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Import a session another agent tool wrote: each conversation becomes a frozen run.

    Formats: claude-code (a session .jsonl; its subagents/agent-*.jsonl become child runs),
    codex (a rollout .jsonl), openai-chat (a message array, an object holding one, or an array
    of such objects: one run each), swe-agent (a .traj), openhands (an event array). Each run
    gets run_started with the provenance, a session_imported line (format, the file's BLAKE3,
    a CAS map from each source line or event to the seqs it became) and the lines a native run
    writes, usage included where the file has it. Then verify, log, conversation, why, fork,
    continue and cost work as for any run; replay says an imported request has no recorded
    bytes. All or nothing: a file runfold cannot read is refused naming its line (or event),
    and the ledger is left byte-identical.

    \b
    Examples:
      runfold import auto ~/.claude/projects/-home-me-app/0b7e….jsonl
      runfold import codex rollout-2025-12-28T12-18-30.jsonl --json
      runfold import openai-chat chat.json
      runfold continue RUN --model local:smollm2
    """
    as_json = want_json(ctx, json)
    from runfold.api import Workspace

    ws = Workspace.open(workspace)
    report = ws.import_session(file, format)
    where = workspace_flag(ws.root)
    every_run = ws.runs()
    ws.close()
    if as_json:
        echo_json(
            {
                "ok": True,
                "format": report.format,
                "detected": report.detected,
                "source": report.source,
                "hash": report.hash,
                "bytes": report.bytes,
                "skipped": report.skipped,
                "runs": [
                    {
                        "run": r.run,
                        "session": r.session,
                        "first_seq": r.first_seq,
                        "last_seq": r.last_seq,
                        "replies": r.replies,
                        "calls": r.calls,
                        "results": r.results,
                        "lost": r.lost,
                        "rekeyed": r.rekeyed,
                        "map": r.map,
                    }
                    for r in report.runs
                ],
            }
        )
        return
    con = out_console()
    how = f"detected as {report.format}" if report.detected else f"as {report.format}"
    runs = "1 run" if len(report.runs) == 1 else f"{len(report.runs)} runs"
    con.print(
        f"imported {report.source} ({how}, {count(report.bytes)} bytes, b3 {report.hash[:12]}…): {runs}",
        markup=False,
    )
    short = short_run_ids([*every_run, *(r.run for r in report.runs)])  # unique in the workspace
    for r in report.runs:
        extra = []
        if r.lost:
            extra.append(f"{r.lost} call(s) without a result closed as E_TOOL_OUTCOME_UNKNOWN")
        if r.rekeyed:
            extra.append(f"{r.rekeyed} reused call id(s) re-keyed")
        tail = f" ({'; '.join(extra)})" if extra else ""
        con.print(
            f"  run {short[r.run]}  {r.session}: seqs {r.first_seq}..{r.last_seq}, {r.replies} replies, "
            f"{r.calls} tool calls, {r.results} results{tail}",
            markup=False,
        )
    if report.skipped:
        what = "position carries" if report.skipped == 1 else "positions carry"
        con.print(f"  {report.skipped} source {what} nothing the model saw (listed in the map)", markup=False)
    first = report.runs[0].run  # whole: a `next:` command never becomes ambiguous
    con.print(
        f"next: runfold conversation {first}{where} · runfold verify{where} · "
        f"runfold continue {first} --model SPEC{where}",
        markup=False,
    )


def register(app: typer.Typer) -> None:
    """Add `import` to `app`."""
    app.command("import", epilog=EXIT_CODES_HELP)(import_cmd)
