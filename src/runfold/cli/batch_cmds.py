"""`runfold batch`: run a JSONL file of tasks over the owner actors of a Ray cluster.

Thin, like every verb: it reads the tasks, connects to the cluster (`local` starts one here),
runs them through `runfold.server.batch.BatchRunner`, checks the outcome against the ledgers,
and prints one line per task and a summary (or, with `--json`, one JSON document).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runfold.cli.common import (
    EXIT_CANCELLED,
    EXIT_CODES_HELP,
    EXIT_ERROR,
    EXIT_LIMIT,
    EXIT_OK,
    JsonOption,
    WorkspaceOption,
    echo_json,
    err_console,
    out_console,
    want_json,
)
from runfold.core.errors import ErrorCode, Retry, RunfoldError

if TYPE_CHECKING:
    from runfold.server.batch import TaskResult

BATCH_EPILOG = (
    "A task line is a JSON object: `task` (required), `id` (names it in the output; default "
    "line-N), and the run's `model`, `goal`, `room`, `max_turns`, `builtin_tools`, `system`. "
    "One owner actor per workspace holds its single writer: --workers N drives N workspace shards "
    "(.runfold/shards/0 … N-1; one worker: the workspace itself). An owner killed mid-batch is "
    "restarted by Ray; its restart freezes the runs it lost (process_died), --continue-lost "
    "continues each with a successor, and no run is ever started twice. The exit code is the "
    "worst final outcome: 0 every task done · 3 a run failed or was refused · 5 one ended at a "
    "limit · 6 one was cancelled. " + EXIT_CODES_HELP
)


def _line(r: TaskResult) -> str:
    cause = f" ({r.cause})" if r.cause else ""
    what = f"{r.frozen}{cause}" if r.frozen else f"refused: {r.error}" if r.error else "not started"
    text = f"{r.task.id}  {r.run}  {what}  {r.turns} turns"
    if r.continued_by is not None:
        text += f"  → continued by {_line(r.continued_by)}"
    return text


_SEVERITY = (EXIT_OK, EXIT_CANCELLED, EXIT_LIMIT, EXIT_ERROR)
"""Exit codes from the mildest final outcome to the worst."""


def _exit_code(results: list[TaskResult]) -> int:
    """The exit code of the worst final outcome (see BATCH_EPILOG)."""
    codes = [EXIT_OK]
    for r in results:
        f = r.final
        if f.error or f.cause == "error":
            codes.append(EXIT_ERROR)
        else:
            codes.append({"done": EXIT_OK, "limit": EXIT_LIMIT}.get(f.frozen or "", EXIT_CANCELLED))
    return max(codes, key=_SEVERITY.index)


def batch_cmd(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A JSONL file of tasks, one JSON object a line.", metavar="FILE")],
    ray: Annotated[
        str,
        typer.Option(
            "--ray",
            help="The Ray cluster: `local` starts one on this machine; else its address (HOST:PORT as "
            "`ray start --head` prints it, ray://…, or auto). An unreachable cluster is an error.",
            metavar="ADDRESS",
        ),
    ],
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Runs in flight at once, over all workers.", metavar="N")
    ] = 16,
    workers: Annotated[
        int,
        typer.Option("--workers", help="Owner actors (worker processes), one workspace shard each.", metavar="N"),
    ] = 1,
    continue_lost: Annotated[
        bool,
        typer.Option("--continue-lost", help="Continue each run a dead worker left (frozen process_died) with a successor."),
    ] = False,
    model: Annotated[
        str | None,
        typer.Option("--model", help="The model of tasks that name none (default: the workspace's).", metavar="SPEC"),
    ] = None,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Run a JSONL file of tasks as runs spread over a Ray cluster, at most N at once.

    Each workspace's owner (the core of `runfold serve`) runs as a named Ray actor; the ledger
    stays the only history: the outcomes printed are read back from it, and every shard is
    verified at the end.

    \b
    Examples:
      runfold batch evals.jsonl --ray local --workers 2 --concurrency 32
      runfold batch evals.jsonl --ray 10.0.0.5:6379 --workers 8 --continue-lost --json
    """
    from runfold.server.batch import BatchRunner, audit, connect, read_tasks, shard_roots
    from runfold.store.layout import find_workspace

    as_json = want_json(ctx, json)
    root = find_workspace(workspace)
    refuse_served(root)
    tasks = read_tasks(file, model=model)
    roots = shard_roots(root, workers)
    connect(ray, workers=workers)
    con = out_console()
    runner = BatchRunner(roots, concurrency=concurrency, continue_lost=continue_lost)
    if not as_json:
        runner.on_result = lambda r, _n: con.print(_line(r), markup=False, highlight=False)
    try:
        runner.claim()
        report = runner.run(tasks)
    except KeyboardInterrupt:
        err_console().print(
            f"batch interrupted after {runner.done} of {len(tasks)} tasks: the owners freeze their running runs "
            "as cancelled; `runfold runs` lists every run (with --workers N, in each shard: -w .runfold/shards/K)",
            markup=False,
        )
        raise typer.Exit(EXIT_CANCELLED) from None
    finally:
        runner.stop()
    check = audit(report)
    data: dict[str, Any] = report.to_data()
    data["check"] = check
    if as_json:
        echo_json(data)
    else:
        s = data["summary"]
        outcomes = ", ".join(f"{n} {k}" for k, n in s["outcomes"].items())
        con.print(
            f"{s['tasks']} tasks, {s['runs']} runs on {s['workers']} worker(s) in {s['seconds']} s from the "
            f"first dispatch ({s['runs_per_s']} runs/s; the cluster's start-up not counted): {outcomes}; "
            f"lost {s['lost']}, continued {s['continued']}",
            markup=False,
        )
        ok = not (check["started_twice"] or check["not_frozen"] or check["missing"])
        con.print(
            f"ledger check: {check['frozen']}/{check['runs']} runs frozen, "
            f"{check['verified_lines']} lines verified{'' if ok else ' — FAILED: ' + repr(check)}",
            markup=False,
        )
        if workers > 1:
            err_console().print(f"shards: {', '.join(report.shards)}", markup=False)
    code = _exit_code(report.results)
    if code != EXIT_OK:
        raise typer.Exit(code)


def refuse_served(root: Path) -> None:
    """`E_LEDGER_HELD` when `runfold serve` owns `root`: a batch starts owners of its own, so it
    is refused before Ray is started (the server's runs go on)."""
    from runfold.store.serving import find_server

    info = find_server(root)
    if info is not None:
        raise RunfoldError(
            ErrorCode.LEDGER_HELD,
            "run a batch",
            str(root),
            f"`runfold serve` (pid {info.pid}, {info.url}) owns this workspace and a batch starts owners of its "
            "own: stop the server (Ctrl-C) first, or send the tasks to it as runs (`POST /api/runs`)",
            retry=Retry.YES,
        )


def register(app: typer.Typer) -> None:
    """Add `batch` to `app`."""
    app.command("batch", epilog=BATCH_EPILOG)(batch_cmd)


__all__ = ["register"]
