"""`runfold conversation`, `fork`, `runs`, `tree`, `why`: the folds of the ledger as commands
(DESIGN.md §5–§7, §10).

Each verb is a thin view over `runfold.api.Workspace`: the conversation a run would send at a
seq (with the validator's verdict), a fork at a safe cut point, the runs and their lineage, and
what fills the context window and why.
"""

from __future__ import annotations

from typing import Annotated, Any

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
from runfold.core.ids import short_run_ids
from runfold.core.messages import Block

RunArg = Annotated[
    str,
    typer.Argument(help="The run: its id or a unique prefix, like git.", show_default=False, metavar="RUN"),
]
AtOption = Annotated[
    int | None,
    typer.Option(
        "--at",
        help="A seq of the run (or of the runs it inherits from); the view is taken at the last "
        "safe cut point at or before it. Default: the run's last line.",
        metavar="SEQ",
    ),
]
DIALECT_CHOICES = ("anthropic", "openai-chat", "openai-responses", "internal")

_PREVIEW = 96


def _preview(text: str) -> str:
    flat = text.replace("\n", "⏎")
    return flat if len(flat) <= _PREVIEW else flat[: _PREVIEW - 1] + "…"


def _block_line(block: Block) -> str:
    if block["kind"] == "text":
        return f"text  {_preview(block['text'])}"
    if block["kind"] == "tool_use":
        return f"tool_use {block['id']} {block['name']}  {_preview(block['input'])}"
    if block["kind"] == "tool_result":
        error = " error" if block["is_error"] else ""
        return f"tool_result {block['tool_use_id']}{error}  {_preview(block['content'])}"
    if block["kind"] == "thinking":
        return f"thinking  {_preview(block['thinking'])}"
    if block["kind"] == "redacted_thinking":
        return "redacted_thinking"
    return f"image {block['media_type']} {block['locator']}"


def _cut_lines(asked: int, cut: int, moved: str | None) -> list[str]:
    if moved is None:
        return [f"at seq {cut}"]
    return [f"asked seq {asked}, cut at seq {cut}", f"moved: {moved}"]


# ---- conversation -------------------------------------------------------------------------


def conversation_cmd(
    ctx: typer.Context,
    run: RunArg,
    at: AtOption = None,
    dialect: Annotated[
        str,
        typer.Option(
            "--dialect",
            "-d",
            help="Render for anthropic, openai-chat, openai-responses, or show the internal model.",
            metavar="DIALECT",
        ),
    ] = "internal",
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Show the conversation a run's fold rebuilds at a seq, with the validator's verdict.

    Readable by default: each message's role and blocks with the line (seq) and cause that put
    each block there. With --json: the exact request body for --dialect (the internal messages
    for `internal`) and the verdict. Exit 1 when the validator rejects the request.

    \b
    Examples:
      runfold conversation 0198f6a2
      runfold conversation 0198f6a2 --at 12 --dialect openai-chat --json
    """
    from runfold.api import Workspace

    as_json = want_json(ctx, json)
    if dialect not in DIALECT_CHOICES:
        from runfold.core.errors import invalid_args

        raise invalid_args(
            "render the conversation", f"--dialect {dialect}", "use one of: " + ", ".join(DIALECT_CHOICES)
        )
    with Workspace.open(workspace) as ws:
        view = ws.request_at(run, at, None if dialect == "internal" else dialect)
    fold = view.fold
    checked = list(view.verdicts) if dialect == "internal" else [dialect]
    rejected = {d: v for d, v in view.verdicts.items() if d in checked and v}
    if as_json:
        body: Any = {"messages": fold.messages} if dialect == "internal" else view.body
        echo_json(
            {
                "run": fold.run,
                "asked": fold.asked,
                "cut": fold.cut,
                "moved": fold.moved,
                "dialect": dialect,
                "with_prefix": view.with_prefix,
                "body": body,
                "sources": [[{"seq": s.seq, "cause": s.cause} for s in m] for m in fold.sources],
                "held": [{"seq": h.source.seq, "text": h.block["text"]} for h in fold.conversation.held],
                "valid": not rejected,
                "violations": {d: [v.to_data() for v in view.verdicts[d]] for d in checked},
            }
        )
    else:
        con = out_console()
        con.print(f"run {fold.run}  " + "\n".join(_cut_lines(fold.asked, fold.cut, fold.moved)), markup=False)
        con.print(f"lineage: {fold.lineage.describe()}", markup=False)
        for i, (msg, srcs) in enumerate(zip(fold.messages, fold.sources, strict=True)):
            con.print(f"[{i}] {msg['role']}", markup=False)
            for block, src in zip(msg["content"], srcs, strict=True):
                con.print(f"    {_block_line(block)}   (seq {src.seq}, {src.cause})", markup=False)
        for held in fold.conversation.held:
            con.print(
                f"held (not yet delivered): {_preview(held.block['text'])}   (seq {held.source.seq})",
                markup=False,
            )
        if not view.with_prefix:
            con.print("prefix: not recorded in the CAS; messages only", markup=False)
        verdict = " · ".join(
            f"{d} {'ok' if not view.verdicts[d] else f'{len(view.verdicts[d])} violation(s)'}"
            for d in checked
        )
        con.print(f"validator: {verdict}", markup=False)
        for d, violations in rejected.items():
            for v in violations:
                con.print(f"  {d}: {v.display()}", markup=False)
    if rejected:
        raise typer.Exit(1)


# ---- fork ---------------------------------------------------------------------------------


def fork_cmd(
    ctx: typer.Context,
    run: RunArg,
    at: Annotated[
        int,
        typer.Option(
            "--at",
            help="The seq to fork at; the cut used is the last safe point at or before it.",
            metavar="SEQ",
            show_default=False,
        ),
    ],
    task: Annotated[
        str | None,
        typer.Option("--task", help="A new task for the fork (default: the mother's).", metavar="TEXT"),
    ] = None,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Fork a run at a seq: a new run inheriting its conversation through the last safe cut point.

    Appends the new run's run_started and run_forked (taking the writer lock); the mother's lines
    are untouched. Prints the new run's id and the cut used, and why it moved when it did. A seq
    past the ledger's tail or outside the run is refused, never clamped. The fork does not run:
    `runfold continue NEW [--model SPEC]` runs it (the next writer freezes an unrun fork first).

    \b
    Examples:
      runfold fork 0198f6a2 --at 12
      runfold fork 0198f6a2 --at 12 --task "try the other parser" --json
    """
    from runfold.api import Workspace

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        plan = ws.fork(run, at, task=task)
    if as_json:
        echo_json(
            {
                "ok": True,
                "run": plan.new_run,
                "from": plan.mother,
                "asked": plan.asked,
                "cut": plan.cut,
                "moved": plan.moved,
                "messages": len(plan.inherited.messages),
            }
        )
        return
    con = out_console()
    con.print(f"forked {plan.new_run} from {plan.mother} at seq {plan.cut}", markup=False)
    if plan.moved is not None:
        con.print(f"cut moved from seq {plan.asked}: {plan.moved}", markup=False)
    con.print(f"inherited {len(plan.inherited.messages)} message(s)", markup=False)
    con.print(
        f"next: runfold continue {plan.new_run}{workspace_flag(ws.root)} [--model SPEC] to run it",
        markup=False,
    )


# ---- runs and tree ------------------------------------------------------------------------


def _tokens_text(tokens: dict[str, int] | None) -> str:
    if tokens is None:
        return "unknown"
    return str(tokens["input"] + tokens["output"])


def runs_cmd(ctx: typer.Context, workspace: WorkspaceOption = None, json: JsonOption = False) -> None:
    """List the runs: id, status, model, turns, tokens (input+output), cost, task.

    Turns, tokens and cost are those `runfold cost` shows: a reply's recorded bill, else its tokens
    priced by config.toml's [prices] or runfold's table; with no usage or no price: `unknown`, never 0.

    \b
    Examples:
      runfold runs
      runfold runs --json
    """
    from runfold.api import Workspace
    from runfold.core.fold.runs import cost_text, short_id, status_text

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        summaries = ws.run_summaries()
    if as_json:
        echo_json([s.to_data() for s in summaries])
        return
    con = out_console()
    if not summaries:
        con.print("no runs yet", markup=False)
        return
    names = short_run_ids([s.run for s in summaries] + [s.origin for s in summaries if s.origin])
    rows = [
        (
            short_id(s.run, names),
            status_text(s),
            s.model or "-",
            str(s.turns),
            _tokens_text(s.tokens),
            cost_text(s.cost_usd_micros),
            (f"{s.relation} of {short_id(s.origin or '', names)}" if s.relation else "-"),
            s.task_head,
        )
        for s in summaries
    ]
    header = ("run", "status", "model", "turns", "tokens", "cost", "from", "task")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        con.print("  ".join([*cells, row[-1]]).rstrip(), markup=False)


def tree_cmd(ctx: typer.Context, workspace: WorkspaceOption = None, json: JsonOption = False) -> None:
    """Show the runs as a tree: forks (with the seq they were cut at), delegations and successors.

    \b
    Examples:
      runfold tree
      runfold tree --json
    """
    from runfold.api import Workspace
    from runfold.core.fold.runs import render_tree

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        roots = ws.run_tree()
    if as_json:
        echo_json([r.to_data() for r in roots])
        return
    con = out_console()
    lines = render_tree(roots)
    if not lines:
        con.print("no runs yet", markup=False)
    for line in lines:
        con.print(line, markup=False)


# ---- why ----------------------------------------------------------------------------------


def why_cmd(
    ctx: typer.Context,
    run: RunArg,
    at: AtOption = None,
    since: Annotated[
        int | None,
        typer.Option("--since", help="List only the changes after this seq (default: all).", metavar="SEQ"),
    ] = None,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Explain the context window of a run at a seq: its size by region and by cause (bytes and
    estimated tokens), then every change with the seq and cause that made it.

    Tokens are estimated as bytes/4 rounded up. A change with no cause of its own is shown as
    unattributed, never given a neighbour's cause.

    \b
    Examples:
      runfold why 0198f6a2
      runfold why 0198f6a2 --at 12 --since 7 --json
    """
    from runfold.api import Workspace
    from runfold.core.fold.why import TOKEN_ESTIMATE, UNATTRIBUTED

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        report = ws.why(run, at, since=since)
    if as_json:
        echo_json(report.to_data())
        return
    con = out_console()
    con.print(
        f"run {report.run}  " + "\n".join(_cut_lines(report.asked, report.cut, report.moved)), markup=False
    )
    total = report.total
    con.print(f"window: {total.bytes} bytes, ~{total.tokens} tokens ({TOKEN_ESTIMATE})", markup=False)
    con.print("by region:", markup=False)
    for region, share in report.by_region().items():
        con.print(f"  {region:<14} {share.bytes:>8} B  ~{share.tokens:>6} tok", markup=False)
    con.print("by cause:", markup=False)
    for cause, share in sorted(report.by_cause().items(), key=lambda kv: -kv[1].bytes):
        con.print(f"  {cause:<14} {share.bytes:>8} B  ~{share.tokens:>6} tok", markup=False)
    after = f" after seq {report.since}" if report.since is not None else ""
    con.print(f"changes{after}:", markup=False)
    if not report.changes:
        con.print("  none", markup=False)
    for c in report.changes:
        source = "" if c.source_seq in (None, c.seq) else f" (from seq {c.source_seq})"
        sign = "+" if c.bytes >= 0 else "-"
        con.print(
            f"  seq {c.seq:>6}  {c.region:<12} {c.cause or UNATTRIBUTED:<12} {sign}{abs(c.bytes)} B  "
            f"{c.what}{source}",
            markup=False,
        )


# ---- registration -------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """Add the fold verbs to `app`."""
    app.command("conversation", epilog=EXIT_CODES_HELP)(conversation_cmd)
    app.command("fork", epilog=EXIT_CODES_HELP)(fork_cmd)
    app.command("runs", epilog=EXIT_CODES_HELP)(runs_cmd)
    app.command("tree", epilog=EXIT_CODES_HELP)(tree_cmd)
    app.command("why", epilog=EXIT_CODES_HELP)(why_cmd)
