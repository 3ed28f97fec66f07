"""`runfold runs` and `runfold tree`: the workspace's runs as a table and as a tree (DESIGN.md §7),
with the runs a `runfold serve` holds in its queue, which have no line yet.

Both read `runfold.api.Workspace.run_summaries` and `run_tree`; `runfold.cli.fold_cmds` registers
them beside the other folds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from runfold.cli.common import JsonOption, WorkspaceOption, echo_json, err_console, out_console, want_json
from runfold.core.figures import count, usd
from runfold.core.ids import WORKSPACE_RUN, short_run_ids

if TYPE_CHECKING:
    from collections.abc import Sequence

    from runfold.api import Workspace
    from runfold.core.fold.runs import TreeNode


def _tokens_text(tokens: dict[str, int] | None) -> str:
    if tokens is None:
        return "unknown"
    return count(tokens["input"] + tokens["output"])


def _queued(ws: Workspace) -> list[dict[str, str]]:
    """The runs dispatched and not started, so not in the ledger yet (`run`, `task`, `status`):
    those queued on the `runfold serve` that owns `ws` (`queued`; none when it does not answer
    in `remote.LIST_TIMEOUT_S` or not as runfold's API: a note on stderr says so, the ledger's
    runs are listed all the same), or with no server up, those its durable queue holds for the
    next one (`queued for the next serve`)."""
    from runfold.cli.remote import LIST_TIMEOUT_S, queued_runs, server_of
    from runfold.core.errors import RunfoldError

    remote = server_of(ws)
    if remote is None:
        return [{"run": run, "task": task, "status": "queued for the next serve"} for run, task in ws.queued_runs()]
    try:
        return [{**q, "status": "queued"} for q in queued_runs(remote, LIST_TIMEOUT_S)]
    except RunfoldError as err:
        err_console().print(f"note: runs queued on the server are not listed: {err.display()}", markup=False)
        return []
    finally:
        remote.close()


def runs_cmd(ctx: typer.Context, workspace: WorkspaceOption = None, json: JsonOption = False) -> None:
    """List the runs: id, status, model, turns, tokens (input+output), cost, task.

    Status: done, limit, cancelled (process_died when resume froze it), failed (E_CODE) for a run
    an error froze, running, `not started` for a fork never run, `died, not yet resumed` for
    a run without run_frozen while no live process holds the writer lock, and `queued` for a run
    waiting in the queue of the `runfold serve` that owns the workspace (listed last; with no
    server up, `queued for the next serve`: `runfold cancel` drops it).

    Turns, tokens and cost are those `runfold cost` shows: a reply's recorded bill, else its tokens
    priced by config.toml's [prices] or runfold's table; with no usage or no price: `unknown`, never 0.

    \b
    Examples:
      runfold runs
      runfold runs --json
    """
    from runfold.api import Workspace
    from runfold.core.fold.runs import first_line, short_id, status_text

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        summaries = ws.run_summaries()
        queued = _queued(ws)
    if as_json:
        echo_json([s.to_data() for s in summaries] + queued)
        return
    con = out_console()
    if not summaries and not queued:
        con.print("no runs yet", markup=False)
        return
    names = short_run_ids([s.run for s in summaries] + [s.origin for s in summaries if s.origin] + [q["run"] for q in queued])
    rows = [
        (
            short_id(s.run, names),
            status_text(s),
            s.model or "-",
            count(s.turns),
            _tokens_text(s.tokens),
            usd(s.cost_usd_micros),
            (
                f"import: {s.imported_from}"
                if s.relation == "import"
                else f"{s.relation} of {short_id(s.origin or '', names)}"
                if s.relation
                else "-"
            ),
            s.task_head,
        )
        for s in summaries
    ] + [(short_id(q["run"], names), q["status"], "-", "-", "-", "-", "-", first_line(q["task"], 72)) for q in queued]
    header = ("run", "status", "model", "turns", "tokens", "cost", "from", "task")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        con.print("  ".join([*cells, row[-1]]).rstrip(), markup=False)


def _tree_ids(nodes: Sequence[TreeNode]) -> set[str]:
    return {n.summary.run for n in nodes} | {r for n in nodes for r in _tree_ids(n.children)}


def tree_cmd(
    ctx: typer.Context,
    run: Annotated[
        str | None,
        typer.Argument(help="Show only this run and the runs that came from it (id or unique prefix).", metavar="[RUN]"),
    ] = None,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Show the runs as a tree: forks (with the seq they were cut at), delegations and successors.

    \b
    Examples:
      runfold tree
      runfold tree 0198f6a2
      runfold tree --json
    """
    from runfold.api import Workspace
    from runfold.core.errors import invalid_args
    from runfold.core.fold.runs import render_tree

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        rid = ws.resolve_run(run) if run is not None else None
        if rid == WORKSPACE_RUN:
            raise invalid_args(
                "show the tree of a run", "the workspace run", "it roots no tree: leave RUN out to see every run"
            )
        roots = ws.run_tree()
        names = short_run_ids(ws.runs())
    held = _tree_ids(roots)
    if rid is not None:

        def find(nodes: list[TreeNode]) -> list[TreeNode]:
            for node in nodes:
                if node.summary.run == rid:
                    return [node]
                below = find(node.children)
                if below:
                    return below
            return []

        roots = find(roots)
    if as_json:
        echo_json([r.to_data() for r in roots])
        return
    con = out_console()
    lines = render_tree(roots, names=names, held=held)
    if not lines:
        con.print("no runs yet", markup=False)
    for line in lines:
        con.print(line, markup=False)


# ---- why and context ----------------------------------------------------------------------


__all__ = ["runs_cmd", "tree_cmd"]
