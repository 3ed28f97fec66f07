"""`runfold conversation`, `fork`, `why`, `context` (and the registration of `runs` and `tree`,
`runfold.cli.runs_cmds`): the folds of the ledger as commands (DESIGN.md §5–§7, §10).

Each verb is a thin view over `runfold.api.Workspace`: the conversation a run would send at a
seq (with the validator's verdict), a fork at a safe cut point, and what fills the context window
and why, region by region against its budgets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

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
from runfold.core.messages import Block
from runfold.core.tokens import TokenCount

if TYPE_CHECKING:

    from runfold.api import Workspace
    from runfold.cli.remote import ForkView
    from runfold.core.fold.why import WhyReport
    from runfold.runtime.window_view import WindowView

RUN_HELP = "The run: its id or a unique prefix, like git. Default: the latest run you started, forked or continued (not a probe question or a delegated child)."
RunArg = Annotated[
    str | None,
    typer.Argument(help=RUN_HELP, show_default=False, metavar="RUN"),
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


def chosen_run(ws: Workspace, run: str | None) -> str:
    """The run a command's RUN argument names: `run` resolved as an id or unique prefix, or
    the latest run when it is omitted (one rule for every command that takes RUN). Raises
    `E_INVALID_ARGS` for an unknown or ambiguous prefix, or a ledger with no run yet."""
    return ws.resolve_run(run) if run is not None else ws.latest_run()


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
    run: RunArg = None,
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
        view = ws.request_at(chosen_run(ws, run), at, None if dialect == "internal" else dialect)
        names = short_run_ids(ws.runs())
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
        con.print(f"lineage: {fold.lineage.describe(names)}", markup=False)
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
    at: Annotated[
        int,
        typer.Option(
            "--at",
            help="The seq to fork at; the cut used is the last safe point at or before it.",
            metavar="SEQ",
            show_default=False,
        ),
    ],
    run: RunArg = None,
    task: Annotated[
        str | None,
        typer.Option("--task", help="A new task for the fork (default: the mother's).", metavar="TEXT"),
    ] = None,
    run_it: Annotated[
        bool,
        typer.Option("--run", help="Run the fork at once, like `runfold run` (live view, summary, exit code)."),
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="With --run: SPEC of the model that runs the fork (default as for `run`); recorded in its run_started.",
            show_default=False,
            metavar="SPEC",
        ),
    ] = None,
    max_turns: Annotated[
        int | None,
        typer.Option("--max-turns", help="With --run: the fork's turn ceiling.", show_default=False, metavar="N"),
    ] = None,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Fork a run at a seq: a new run inheriting its conversation through the last safe cut point.

    Appends the new run's run_started and run_forked (taking the writer lock); the mother's lines
    are untouched. Prints the new run's id and the cut used, and why it moved when it did. A seq
    past the ledger's tail or outside the run is refused, never clamped. With --run the fork runs
    at once (as `runfold run` does, with --model and --max-turns); without it the fork is only
    written and reads as `not started` (`runfold continue NEW` runs it later).

    \b
    Examples:
      runfold fork 0198f6a2 --at 12
      runfold fork 0198f6a2 --at 12 --run --model anthropic:claude-sonnet-4-5 --task "try the other parser"
      runfold fork 0198f6a2 --at 12 --task "try the other parser" --json
    """
    from runfold.api import Workspace
    from runfold.core.errors import invalid_args

    as_json = want_json(ctx, json)
    if not run_it and (model is not None or max_turns is not None):
        given = "--model" if model is not None else "--max-turns"
        raise invalid_args("fork a run", given, f"{given} applies to a fork that runs: add --run")
    if run_it:
        from runfold.runtime.spec import RunSpec

        spec = RunSpec(task or "", model=model, max_turns=max_turns, command_line=True, fork=("", at))
        ws = Workspace.open(workspace)
        try:
            rid = chosen_run(ws, run)
        except BaseException:
            ws.close()
            raise
        from dataclasses import replace

        from runfold.cli.foreground import run_live

        run_live(ctx, ws, replace(spec, fork=(rid, at)), as_json)
        return
    from runfold.cli.remote import ForkView, server_of

    with Workspace.open(workspace) as ws:
        rid = chosen_run(ws, run)
        remote = server_of(ws)
        if remote is not None:  # `runfold serve` owns the workspace: it writes the fork
            plan = remote.fork(rid, at, task)
        else:
            forked = ws.fork(rid, at, task=task)
            plan = ForkView(forked.new_run, forked.mother, forked.asked, forked.cut, forked.moved, len(forked.inherited.messages))
    if as_json:
        echo_json(
            {
                "ok": True,
                "run": plan.new_run,
                "from": plan.mother,
                "asked": plan.asked,
                "cut": plan.cut,
                "moved": plan.moved,
                "messages": plan.messages,
            }
        )
        return
    con = out_console()
    for line in fork_lines(plan):
        con.print(line, markup=False)
    con.print(
        f"next: runfold continue {plan.new_run}{workspace_flag(ws.root)} [--model SPEC] to run it",
        markup=False,
    )


def fork_lines(plan: ForkView) -> list[str]:
    """What `runfold fork` says of a fork it wrote: the new run, its mother and the cut used
    (and why the cut moved), and the messages it inherits."""
    lines = [f"forked {plan.new_run} from {plan.mother} at seq {plan.cut}"]
    if plan.moved is not None:
        lines.append(f"cut moved from seq {plan.asked}: {plan.moved}")
    lines.append(f"inherited {plan.messages} message(s); not started")
    return lines


# ---- runs and tree ------------------------------------------------------------------------


def _method(count: TokenCount) -> str:
    text = f"{count.method}: {count.source}"
    return f"{text}; {count.fallback}" if count.fallback else text


def _window_lines(report: WhyReport) -> list[str]:
    """The model's window, the request's token count and each region against its budget."""
    lines: list[str] = []
    window = report.window
    if window is not None:
        limits = window.limits
        if limits is None or window.budgets is None:
            lines.append(f"budgets: none — {window.problem}")
        elif window.problem is not None:
            lines.append(f"budgets: {window.problem}")
        if limits is not None:
            usable = f", input {limits.context_window - window.output}"
            lines.append(
                f"model {window.model}: window {limits.context_window} tokens, "
                f"reply reserve {window.output} ({window.output_from}){usable}"
            )
    req = report.request
    if req is not None:
        if req.sent_at is not None:
            sent = f", sent at seq {req.sent_at}"
        elif report.next_request is not None:
            sent = f", not what seq {report.next_request[0]} sent (the window changed before it)"
        else:
            sent = ", not sent: no request followed the cut"
        lines.append(
            f"request at the cut: {req.dialect}, {count(req.bytes)} B, {count(req.tokens.tokens)} tokens "
            f"({_method(req.tokens)}){sent}"
        )
    lines.append("regions (tokens against the budgets of [context]):")
    for use in report.regions_used():
        budget = f"budget {count(use.budget):>7}" if use.budget is not None else "budget       -"
        if use.budget is not None and use.tokens.tokens > use.budget:
            budget += " OVER"
        share = f" ({use.budget_permille}‰)" if use.budget_permille is not None else ""
        of_window = f"  {use.window_permille}‰ of the window" if use.window_permille is not None else ""
        lines.append(
            f"  {use.region:<14} {count(use.bytes):>8} B  {count(use.tokens.tokens):>7} tok  {budget}{share}{of_window}"
        )
    methods = {_method(u.tokens) for u in report.regions_used()}
    lines.append(f"  region tokens by {', '.join(sorted(methods))}")
    return lines


def _why_bytes(view: WindowView, as_json: bool) -> None:
    """`why --bytes`: the request's bytes per (seq, cause), and its spans with `--json`."""
    from runfold.core.errors import ErrorCode, RunfoldError
    from runfold.core.fold.why import UNATTRIBUTED

    att = view.attributed()
    report = view.report
    if att is None:
        raise RunfoldError(
            ErrorCode.INVALID_ARGS,
            "attribute the request's bytes",
            f"run {report.run}",
            "the run stored no frozen prefix, so its request cannot be rebuilt; use `runfold why` without --bytes",
        )
    owners = sorted(att.by_owner().items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or 0, kv[0][1] or ""))
    if as_json:
        echo_json(
            {
                "run": report.run,
                "cut": report.cut,
                "bytes": len(att.body),
                "by_line": [{"seq": s, "cause": c, "bytes": n} for (s, c), n in owners],
                "by_cause": {str(c) if c else UNATTRIBUTED: n for c, n in att.by_cause().items()},
                "spans": [[sp.start, sp.end, sp.seq, sp.cause] for sp in att.spans],
            }
        )
        return
    con = out_console()
    con.print(f"run {report.run}  cut at seq {report.cut}: request {count(len(att.body))} bytes", markup=False)
    for (seq, cause), n in owners:
        where = f"seq {seq}" if seq is not None else "no line"
        con.print(f"  {where:<12} {cause or UNATTRIBUTED:<14} {count(n):>9} B", markup=False)
    con.print(f"  {'total':<27} {count(sum(n for _, n in owners)):>9} B", markup=False)


def why_cmd(
    ctx: typer.Context,
    run: RunArg = None,
    at: AtOption = None,
    since: Annotated[
        int | None,
        typer.Option("--since", help="List only the changes after this seq (default: all).", metavar="SEQ"),
    ] = None,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
    by_bytes: Annotated[
        bool,
        typer.Option(
            "--bytes",
            help="Attribute every byte of the request the window renders to: bytes per line and cause.",
        ),
    ] = False,
) -> None:
    """Explain the context window of a run at a seq: the model's window and the region budgets,
    the tokens of each region and of the whole request with the method that produced each
    figure, its size by region and by cause, then every change with the seq and cause that made it.

    Token methods: `tokenizer` (an offline tokenizer counted the request), `calibrated` (bytes
    times the ratio billed on the run's own calls), `estimate` (bytes/4 rounded up). The window
    comes from [models] of config.toml or runfold's table, the budgets from [context]. A change
    with no cause of its own is shown as unattributed, never given a neighbour's cause.
    `--bytes` attributes the exact bytes of the request the window renders to, framing included
    (a message's brackets and role go to the line of its first block, the body's own keys and call
    settings to the prompt_assembled line of its prefix), so the lines add up to the request's size.

    \b
    Examples:
      runfold why 0198f6a2
      runfold why 0198f6a2 --at 12 --since 7 --json
      runfold why 0198f6a2 --at 12 --bytes
    """
    from runfold.api import Workspace
    from runfold.core.fold.why import TOKEN_ESTIMATE, UNATTRIBUTED

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        run = chosen_run(ws, run)
        if by_bytes:
            _why_bytes(ws.context(run, at), as_json)
            return
        report = ws.why(run, at, since=since)
    if as_json:
        echo_json(report.to_data())
        return
    con = out_console()
    con.print(
        f"run {report.run}  " + "\n".join(_cut_lines(report.asked, report.cut, report.moved)), markup=False
    )
    total = report.total
    counted = report.tokens_of(total.bytes)
    con.print(f"window: {count(total.bytes)} bytes, {count(counted.tokens)} tokens ({_method(counted)})", markup=False)
    for line in _window_lines(report):
        con.print(line, markup=False)
    con.print(f"by region: (~tok {TOKEN_ESTIMATE})", markup=False)
    for region, share in report.by_region().items():
        con.print(f"  {region:<14} {count(share.bytes):>8} B  ~{count(share.tokens):>6} tok", markup=False)
    con.print("by cause:", markup=False)
    for cause, share in sorted(report.by_cause().items(), key=lambda kv: -kv[1].bytes):
        con.print(f"  {cause:<14} {count(share.bytes):>8} B  ~{count(share.tokens):>6} tok", markup=False)
    after = f" after seq {report.since}" if report.since is not None else ""
    con.print(f"changes{after}:", markup=False)
    if not report.changes:
        con.print("  none", markup=False)
    for c in report.changes:
        source = "" if c.source_seq in (None, c.seq) else f" (from seq {c.source_seq})"
        sign = "+" if c.bytes >= 0 else "-"
        tokens = f" {'+' if c.recorded_tokens >= 0 else '-'}{count(abs(c.recorded_tokens))} tok" if c.recorded_tokens is not None else ""
        con.print(
            f"  seq {c.seq:>6}  {c.region:<12} {c.cause or UNATTRIBUTED:<12} {sign}{count(abs(c.bytes))} B{tokens}  "
            f"{c.what}{source}",
            markup=False,
        )


def context_cmd(
    ctx: typer.Context,
    run: RunArg = None,
    at: AtOption = None,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Print the context window of a run at a seq region by region, as the model saw it: the
    system segments (from the frozen prefix in the content store), the tool table, the
    conversation message by message and block by block with the seq and cause that put each
    block there, and each region's tokens against its budget.

    With --json: every text, schema and block exactly, the prefix's call settings, and the
    request's size, BLAKE3 and token count (render them and you get the bytes replay rebuilds).

    \b
    Examples:
      runfold context 0198f6a2
      runfold context 0198f6a2 --at 12 --json
    """
    from runfold.api import Workspace
    from runfold.core.fold.why import UNATTRIBUTED

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        view = ws.context(chosen_run(ws, run), at)
    data = view.to_data()
    if as_json:
        echo_json(data)
        return
    report = view.report
    con = out_console()
    con.print(
        f"run {report.run}  " + "\n".join(_cut_lines(report.asked, report.cut, report.moved)), markup=False
    )
    for line in _window_lines(report):
        con.print(line, markup=False)
    for region in data["regions"]:
        budget = f", budget {region['budget']}" if region["budget"] is not None else ""
        con.print(
            f"== {region['region']}: {count(region['bytes'])} B, {count(region['tokens']['tokens'])} tokens{budget}",
            markup=False,
        )
        for seg in region.get("segments", ()):
            text = (
                "(text not in the content store)"
                if seg["text"] is None
                else _preview(seg["text"]) or "(blank: not sent)"
            )
            con.print(
                f"  segment {seg['slot']} {count(seg['bytes'])} B (seq {seg['seq']}, {seg['cause'] or UNATTRIBUTED})",
                markup=False,
            )
            con.print(f"    {text}", markup=False)
        tools = region.get("tools")
        if tools is not None and (tools["bytes"] or tools["table"]):
            names = ", ".join(t["name"] for t in tools["table"]) or "(table not in the content store)"
            con.print(
                f"  tools {count(tools['bytes'])} B (seq {tools['seq']}, {tools['cause'] or UNATTRIBUTED}): {names}",
                markup=False,
            )
        for msg in region.get("messages", ()):
            con.print(f"  [{msg['index']}] {msg['role']}", markup=False)
            for b in msg["blocks"]:
                landed = f", landed at seq {b['landed']}" if b["landed"] not in (None, b["seq"]) else ""
                con.print(
                    f"      {_block_line(b['block'])}   ({count(b['bytes'])} B, seq {b['seq']}, {b['cause']}{landed})",
                    markup=False,
                )
        for part in region.get("parts", ()):
            con.print(f"  {part['name']} {count(part['bytes'])} B (seq {part['seq']}, {part['cause']})", markup=False)
        for held in region.get("held", ()):
            con.print(
                f"  held (not yet delivered): {_preview(held['text'])}   (seq {held['seq']})", markup=False
            )
    if data["regions_block"] is not None:
        con.print("== the regions block, at the end of the last user message (after the tail breakpoint):", markup=False)
        for line in data["regions_block"].splitlines():
            con.print(f"    {line}", markup=False)
    if not view.prefix:
        con.print("prefix: not recorded in the content store; sizes only for the system region", markup=False)


# ---- registration -------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """Add the fold verbs to `app` (`runs` and `tree` from `runfold.cli.runs_cmds`, in this order)."""
    from runfold.cli import runs_cmds

    app.command("conversation", epilog=EXIT_CODES_HELP)(conversation_cmd)
    app.command("fork", epilog=EXIT_CODES_HELP)(fork_cmd)
    app.command("runs", epilog=EXIT_CODES_HELP)(runs_cmds.runs_cmd)
    app.command("tree", epilog=EXIT_CODES_HELP)(runs_cmds.tree_cmd)
    app.command("why", epilog=EXIT_CODES_HELP)(why_cmd)
    app.command("context", epilog=EXIT_CODES_HELP)(context_cmd)
