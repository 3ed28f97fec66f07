"""`runfold resume` and `runfold continue` (DESIGN.md §7): put a workspace a process
died in back into a state every provider accepts, then go on with a run from where it stopped.

Both are thin: the work is `Workspace.resume()` / `Workspace.arun_spec(RunSpec(continues=...))`; this module
prints what was done and the next command.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

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
from runfold.cli.fold_cmds import RunArg, chosen_run
from runfold.cli.run_cmds import RUN_EPILOG
from runfold.core.figures import count
from runfold.core.ids import short_run_ids

if TYPE_CHECKING:
    from runfold.api import RunOutcome, Workspace
    from runfold.cli.live import LiveView
    from runfold.runtime.spec import RunSpec

_T = TypeVar("_T")

LISTED_MAX = 10
"""Runs listed per section of `runfold resume` (the newest); `--all` lists every one."""


def _newest(items: list[_T], every: bool, what: str, where: str) -> tuple[list[_T], list[str]]:
    """The items a section lists (all with `every`, else the newest `LISTED_MAX`, kept in ledger
    order) and the `+N more` line naming the command that lists them all."""
    if every or len(items) <= LISTED_MAX:
        return items, []
    more = len(items) - LISTED_MAX
    return items[-LISTED_MAX:], [f"  +{count(more)} more {what} (older): `runfold resume --all{where}` lists every one"]


def resume_cmd(
    ctx: typer.Context,
    every: Annotated[
        bool,
        typer.Option("--all", help=f"List every run waiting or frozen (default: the newest {LISTED_MAX} of each)."),
    ] = False,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Verify the ledger, then close what a dead process left open.

    Every tool call left without a result gets an E_TOOL_OUTCOME_UNKNOWN result (the tool may
    or may not have acted: check before calling it again); every run left without run_frozen is
    frozen as cancelled with cause process_died. Safe to run any time: a second resume writes
    nothing. Every writer (runfold run, continue, fork) also does this when it opens the
    workspace; this command does a full scan and lists the runs waiting for you.

    \b
    Examples:
      runfold resume
      runfold resume --all
      runfold resume --json
    """
    as_json = want_json(ctx, json)
    from runfold.api import Workspace

    ws = Workspace.open(workspace)
    verified = ws.verify()  # refuses a damaged ledger before anything is written
    report = ws.resume()
    waiting = ws.waiting_runs()
    all_runs = ws.runs()
    where = workspace_flag(ws.root)
    ws.close()
    if as_json:
        echo_json(
            {
                "ok": True,
                "verified": {"lines": verified.lines, "head": verified.head},
                "closed": [
                    {
                        "run": c.run,
                        "seq": c.seq,
                        "tool_use_id": c.tool_use_id,
                        "name": c.name,
                        "killed_group": c.pgid if c.tool_use_id in report.killed else None,
                    }
                    for c in report.closed
                ],
                "frozen": [{"run": r.run, "last_seq": r.last_seq, "turns": r.turns} for r in report.frozen],
                "unclosable": [
                    {"run": c.run, "seq": c.seq, "tool_use_id": c.tool_use_id, "name": c.name}
                    for c in report.unclosable
                ],
                "written": [r.seq for r in report.written],
                "waiting": [
                    {"run": s.run, "status": s.status, "cause": s.cause, "task": s.task} for s in waiting
                ],
            }
        )
        return
    short = short_run_ids(all_runs)  # unique among every run, not only the ones listed
    lines = [
        f"ok: {count(verified.lines)} line{'' if verified.lines == 1 else 's'} verified (head {verified.head[:16]}…)"
    ]
    if not report.wrote:
        lines.append("nothing to close: every tool call has its result and every run is frozen")
    if report.closed:
        lines.append(
            f"closed {len(report.closed)} tool call(s) left without a result "
            "(E_TOOL_OUTCOME_UNKNOWN: check their effect before calling them again):"
        )
        lines += [
            f"  seq {c.seq:<6} {c.name:<12} {c.tool_use_id}  run {short[c.run]}"
            + (f"  (its process group {c.pgid} was still running: killed)" if c.tool_use_id in report.killed else "")
            for c in report.closed
        ]
    if report.frozen:
        lines.append(
            f"froze {len(report.frozen)} run(s) left running by a dead process (cancelled, process_died):"
        )
        shown, more = _newest(list(report.frozen), every, "frozen runs", where)
        lines += [f"  {short[r.run]}  {r.turns} turn(s), last seq {r.last_seq}  {_head(r.task)}" for r in shown]
        lines += more
    if report.unclosable:
        lines.append(
            f"note: {len(report.unclosable)} tool call(s) of runs frozen earlier have no result; their "
            "wave was dropped when the run froze (the history is valid), but the tool may have acted:"
        )
        lines += [f"  seq {c.seq:<6} {c.name:<12} {c.tool_use_id}" for c in report.unclosable]
    if waiting:
        from runfold.core.fold.runs import status_text

        lines.append(f"waiting for you (ended without finishing, not continued yet): {count(len(waiting))}")
        shown_waiting, more = _newest(list(waiting), every, "waiting runs", where)
        lines += [
            f"  {short[s.run]}  {status_text(s)}  {_head(s.task)}"
            f"\n      runfold continue {s.run}{where}  [--task TEXT] [--model SPEC]"
            for s in shown_waiting
        ]
        lines += more
    out_console().print("\n".join(lines), markup=False, highlight=False)


def _head(task: str) -> str:
    from runfold.core.fold.runs import first_line

    return repr(first_line(task, 60))


def continue_cmd(
    ctx: typer.Context,
    run: RunArg = None,
    task: Annotated[
        str | None,
        typer.Option("--task", help="New words for the task (default: the run's own task).", metavar="TEXT"),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="SPEC of the model that continues (any model may continue any run; default as for `run`).",
            show_default=False,
            metavar="SPEC",
        ),
    ] = None,
    max_turns: Annotated[
        int | None,
        typer.Option("--max-turns", help="Turn ceiling of the successor.", show_default=False, metavar="N"),
    ] = None,
    events: Annotated[
        bool,
        typer.Option(
            "--events",
            help='Print each line of the successor as JSON Lines on stdout once durable: {"seq", "run", "kind", "hash"} (as for `run`).',
        ),
    ] = False,
    probe: Annotated[
        Path | None,
        typer.Option(
            "--probe",
            help="A probe file (JSON: questions) asked of RUN's last state and of the successor's once it "
            "ends; an eval_run line records the answers, what was kept and what was lost.",
            show_default=False,
            metavar="FILE",
        ),
    ] = None,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Continue a frozen run: a successor inherits its conversation and goes on.

    The successor (predecessor = RUN) is a fork at RUN's last line: it inherits the conversation
    through RUN's last safe point, starts with a runtime note saying why it continues (the
    process died, a limit, a cancel), and runs like `runfold run`. A run left running by a dead
    process is frozen first (resume). Thinking blocks of another model are left out, never edited.
    RUN omitted: the latest run (`runfold run -c` does the same).
    --probe FILE checks the handoff: each question of the probe is asked of RUN's last state and
    of the successor's (one-turn forks without tools, by the successor's model), and eval_run on
    the successor records the answers, how many were kept and which were lost (a question with
    `expect` the predecessor could not answer is not judged). A probe file:
    {"probe": "NAME", "version": 1, "questions": [{"ask": "...", "expect": "..."}, "..."]}.
    The probe writes the ledger itself: it is refused while `runfold serve` owns the workspace.

    \b
    Examples:
      runfold continue 0198f6a2
      runfold continue
      runfold continue 0198f6a2 --task "skip the tests, just fix the parser" --model anthropic:claude-sonnet-4-5
      runfold continue 0198f6a2 --probe probe.json
    """
    from runfold.runtime.spec import RunSpec

    want_json(ctx, json)
    spec = RunSpec(task or "", model=model, max_turns=max_turns, continues=run or "", command_line=True)
    from runfold.api import Workspace

    ws = Workspace.open(workspace)
    try:
        rid = chosen_run(ws, run)
    except BaseException:
        ws.close()
        raise
    after = None
    if probe is not None:  # a probe that cannot be asked refuses the continue before anything is said
        spec, after = _with_probe(ws, spec, probe)
    earlier = [s.run for s in ws.run_summaries() if s.predecessor == rid]
    if earlier:
        (err_console() if json else out_console()).print(
            f"note: run {rid} was already continued by {', '.join(earlier)}; this starts another successor",
            markup=False,
        )
    from runfold.cli.foreground import run_live

    run_live(ctx, ws, replace(spec, continues=rid), json, events=events, after=after)


def _with_probe(ws: Workspace, spec: RunSpec, path: Path) -> tuple[RunSpec, Callable[..., Awaitable[None]]]:
    """`spec` with its model built once, and the probe to ask once the successor is frozen (by
    that model, on the same event loop). The probe file is read now: a bad one refuses the
    continue before anything runs."""
    from runfold.core.errors import invalid_args
    from runfold.core.probe import parse_probe
    from runfold.runtime.assemble import session_provider

    try:
        if ws.server() is not None:
            raise invalid_args(
                "probe the handoff",
                "--probe",
                "the probe writes the ledger itself: stop `runfold serve` (Ctrl-C) and run this again, or "
                "continue without --probe (the server runs the successor)",
            )
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise invalid_args("read the probe", str(path), f"give the path of a probe JSON file ({exc.strerror})") from None
        probe = parse_probe(raw, str(path))
        provider, owned = session_provider(spec.model, ws.settings(), command_line=True)
    except BaseException:
        ws.close()
        raise

    async def after(ws: Workspace, outcome: RunOutcome, view: LiveView) -> None:
        from runfold.core.fold.runs import first_line

        try:
            line = await ws.aprobe(probe, outcome.run_id, model=provider)
        finally:
            if owned:
                await provider.aclose()
        data = line.env.data
        lost = [int(i) for i in data.get("lost", [])]
        kept = int(data.get("kept", 0))
        asked = len(probe.questions)
        judged = kept + len(lost)  # a question the predecessor could not answer is not judged
        view.extra["probe"] = {
            "name": probe.name, "version": probe.version, "seq": line.seq,
            "asked": asked, "judged": judged, "kept": kept, "lost": lost,
        }  # fmt: skip
        view.note(
            f"probe {probe.name} v{probe.version} (eval_run, seq {line.seq}): kept {kept} of {judged} judged"
            + (f" ({asked - judged} of {asked} not known before, not judged)" if judged < asked else "")
            + (f", lost {len(lost)}:" if lost else "")
        )
        for i in lost:
            view.note(
                f"  lost #{i} {first_line(probe.questions[i].ask, 60)!r}: before {first_line(data['before'][i], 60)!r}, "
                f"after {first_line(data['after'][i], 60)!r}"
            )

    return replace(spec, model=provider), after


def register(app: typer.Typer) -> None:
    """Add `resume` and `continue` to `app`."""
    app.command("resume", epilog=EXIT_CODES_HELP)(resume_cmd)
    app.command("continue", epilog=RUN_EPILOG)(continue_cmd)
