"""`runfold init`, `verify`, `log`, `show`: the ledger verbs (DESIGN.md §3).

They are thin: each parses its options, calls `runfold.api`, and prints either a readable form
(rich, colour only on a terminal) or, with `--json`, machine-readable JSON on stdout.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from runfold.cli.common import (
    EXIT_CODES_HELP,
    WORKSPACE_HELP,
    JsonOption,
    NumberArgumentCommand,
    WorkspaceOption,
    echo_json,
    err_console,
    out_console,
    stderr_is_tty,
    want_json,
    workspace_flag,
)
from runfold.core.errors import invalid_args
from runfold.core.figures import count
from runfold.core.kinds import Kind
from runfold.core.summary import iso_ms, summarize

# The workspace, the ledger reader and rich's renderables are imported by the commands that
# use them, so `runfold --help` and `runfold verify` load only what they need.
if TYPE_CHECKING:
    from rich.progress import Progress, TaskID
    from rich.text import Text

    from runfold.api import VerifyReport, Workspace
    from runfold.core.records import Record

PROGRESS_MIN_BYTES = 8 * 1024 * 1024
"""Ledgers smaller than this (bytes) verify without a progress bar."""


# ---- init ---------------------------------------------------------------------------------


def init_cmd(
    ctx: typer.Context,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            "-w",
            help="Directory to make a workspace (created if missing). Default: the current directory.",
            show_default=False,
            metavar="DIR",
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="Keep the ledger in PostgreSQL at this URL (postgresql://USER@HOST/DB?workspace=NAME; "
            "needs the `postgres` extra). It is written to .runfold/config.toml as `store`. A store "
            "workspace that already holds lines is joined, not re-created. Default: the file ledger "
            "in .runfold/ledger.",
            show_default=False,
            metavar="URL",
        ),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Create a workspace: DIR/.runfold/ with a ledger whose first line is workspace_initialized.

    Refuses a directory that already holds a workspace (nothing is changed).

    \b
    Examples:
      runfold init --workspace ./agents
      runfold init -w ./evals --store 'postgresql://runfold@db.internal/runfold?workspace=evals'
    """
    from runfold.api import Workspace

    as_json = want_json(ctx, json)
    ws = Workspace.init(workspace if workspace is not None else Path.cwd(), store)
    first = ws.record_at(0)
    ws.close()
    url = ws.settings().store
    place = url.shown if url is not None else str(ws.root / ".runfold")
    if as_json:
        echo_json(
            {"ok": True, "workspace": str(ws.root), "store": place, "seq": first.seq, "hash": first.hash}
        )
        return
    out_console().print(
        f"initialized workspace {ws.root} (ledger in {place}; seq 0 {first.env.kind})",
        markup=False,
    )


# ---- verify -------------------------------------------------------------------------------


def _verify_json(report: VerifyReport) -> dict[str, Any]:
    return {
        "ok": True,
        "path": report.path,
        "lines": report.lines,
        "first_seq": report.first_seq,
        "last_seq": report.last_seq,
        "head": report.head,
        "bytes": report.bytes,
        "seconds": report.seconds,
        "mb_per_s": round(report.mb_per_s, 3),
        "versions": sorted(report.versions),
        "segments": report.segments,
        "torn_tail_bytes": report.torn_tail_bytes,
        "unterminated": report.unterminated,
        "skipped_unknown": report.skipped_unknown,
        "start_note": report.start_note,
        "marks": [{"source": m.source, "seq": m.seq, "hash": m.hash} for m in report.marks],
        "anchor": None if report.anchor is None else {"seq": report.anchor.seq, "hash": report.anchor.hash},
    }


class _LazyBar:
    """A progress callback that shows a rich bar on stderr only once the ledger turns out to be
    at least PROGRESS_MIN_BYTES (the first callback carries the total)."""

    def __init__(self) -> None:
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.off = False

    def __call__(self, done: int, total: int) -> None:
        if self.off:
            return
        if self.bar is None:
            if total < PROGRESS_MIN_BYTES:
                self.off = True
                return
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(
                TextColumn("verifying"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=err_console(),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("verify", total=total)
        assert self.task is not None
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def verify_cmd(
    ctx: typer.Context,
    path: Annotated[
        Path | None,
        typer.Argument(
            help="A workspace, a ledger directory or one segment file; give it or --workspace, "
            "not both. Default: the workspace --workspace names, else $RUNFOLD_WORKSPACE, else "
            "the one found from the current directory upward.",
            show_default=False,
            metavar="PATH",
        ),
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            "-w",
            help=WORKSPACE_HELP + " Not together with PATH: give one or the other; a PATH wins "
            "over $RUNFOLD_WORKSPACE.",
            show_default=False,
            metavar="DIR",
        ),
    ] = None,
    head: Annotated[
        str | None,
        typer.Option(
            "--head",
            help="A head kept outside the workspace, as `runfold head` printed it (SEQ:HASH, or "
            "HASH alone, at least its first 16 hex digits): fail unless the ledger holds that line.",
            show_default=False,
            metavar="SEQ:HASH",
        ),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Check every line of a ledger: parse, version, chain, seq, canonical bytes, kind.

    Prints lines verified, seq range, head hash, format versions and throughput. Read-only:
    never repairs. On the first bad line exits 1 with one message naming the 1-based line
    number, the seq, the fault and what to do next; a PATH holding no line at all (an empty
    file) is not a ledger and also exits 1. In a workspace, the ledger must also hold the lines
    the workspace recorded outside it (.runfold/head-mark.json, .runfold/resume-mark.json): a
    ledger that lost its newest lines, or whose last line was changed, exits 1.

    \b
    Examples:
      runfold verify                      # the workspace around the current directory
      runfold verify examples/sprawling-golden-p0.jsonl
      runfold verify --json .runfold/ledger
      runfold verify --head 12:3f08827f8812f5f8   # a head `runfold head` printed earlier
    """
    from runfold.api import Workspace, verify

    as_json = want_json(ctx, json)
    if path is not None and workspace is not None:
        raise invalid_args(
            "verify (both --workspace and PATH name what to verify)",
            f"--workspace {workspace} and PATH {path}",
            f"give one or the other: `runfold verify {shlex.quote(str(path))}` or "
            f"`runfold verify -w {shlex.quote(str(workspace))}`",
        )
    target = path if path is not None else Workspace.open(workspace).root
    bar = _LazyBar() if not as_json and stderr_is_tty() else None
    try:
        report = verify(target, progress=bar, head=head)
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        echo_json(_verify_json(report))
        return
    con = out_console()
    seq_range = f"seq {report.first_seq}..{report.last_seq}" if report.lines else "no lines"
    versions = ", ".join(str(v) for v in sorted(report.versions)) or "none"
    con.print(
        f"ok: {count(report.lines)} line{'' if report.lines == 1 else 's'} verified ({seq_range})", markup=False
    )
    con.print(f"head: {report.head}", markup=False)
    con.print(f"format version: {versions}", markup=False)
    con.print(
        f"read {count(report.bytes)} bytes {_read_from(report.segments, report.path)}, {report.seconds:.3f} s, "
        f"{report.mb_per_s:.1f} MB/s",
        markup=False,
    )
    if report.anchor is not None:
        con.print(f"holds the head you kept: seq {report.anchor.seq} {report.anchor.hash}", markup=False)
    if report.start_note:
        con.print(f"note: {report.start_note}", markup=False)
    if report.skipped_unknown:
        con.print(
            f"note: {report.skipped_unknown} line(s) of kinds unknown to this build carry ig:true; "
            "they are in the chain and skipped by folds",
            markup=False,
        )
    if report.torn_tail_bytes:
        err_console().print(
            f"warning: {report.torn_tail_bytes} torn byte(s) after the last line (a writer died "
            "mid-append); the next writer cuts them with one log_truncated line",
            markup=False,
        )
    if report.unterminated:
        err_console().print(
            "note: the last line verifies but lacks its newline (a writer died just before it); "
            "the next writer adds the newline and keeps the line",
            markup=False,
        )


# ---- log ----------------------------------------------------------------------------------


def _timeline_row(
    record: Record, who_width: int, kind_width: int, names: dict[str, str], run_width: int
) -> Text:
    from rich.text import Text

    env = record.env
    row = Text()
    row.append(f"{env.seq:>6}", style="cyan")
    row.append("  ")
    row.append(iso_ms(env.t), style="dim")
    row.append("  ")
    row.append(f"{names[env.run]:<{run_width}}", style="magenta")
    row.append("  ")
    row.append(f"{env.who:<{who_width}}", style="green")
    row.append("  ")
    row.append(f"{env.kind:<{kind_width}}", style="bold")
    summary = summarize(env, names)
    if summary:
        row.append("  ")
        row.append(summary)
    return row


def log_cmd(
    ctx: typer.Context,
    run: Annotated[
        str | None,
        typer.Option(
            "--run", "-r", help="Only this run: its id or a unique prefix, like git.", metavar="RUN"
        ),
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            "-k",
            help="Only lines of this kind (repeat for several). Kinds: "
            + ", ".join(k.value for k in Kind)
            + ".",
            metavar="KIND",
        ),
    ] = None,
    since: Annotated[
        int | None, typer.Option("--since", help="Only lines with seq ≥ SEQ (a seq counts from 0).", metavar="SEQ")
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", "-n", help="At most N lines (the first N after the other filters).", metavar="N"
        ),
    ] = None,
    tail: Annotated[
        int | None,
        typer.Option("--tail", help="Only the newest N lines (the last N after the other filters).", metavar="N"),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Then print new lines as they are committed, until Ctrl-C (with --run: until the run "
            "is frozen). A PostgreSQL store wakes it by LISTEN/NOTIFY; a file ledger is polled.",
        ),
    ] = False,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Show the ledger as a timeline: seq, time (UTC), run, who, kind and a one-line summary.

    With --json, prints each line's envelope exactly as stored, one JSON object per line.
    With --follow it keeps going, like `tail -f`.

    \b
    Examples:
      runfold log --run 0198f6a2 --kind tool_called --kind tool_result
      runfold log --since 100 --limit 20 --json
      runfold log --tail 5
      runfold log --run 0198f6a2 --follow
      runfold log -w examples/sprawling-golden-p0.jsonl
    """
    from runfold.api import Workspace
    from runfold.core.errors import invalid_args
    from runfold.core.ids import short_run_ids

    as_json = want_json(ctx, json)
    for flag, value in (("--since", since), ("--limit", limit), ("--tail", tail)):
        if value is not None and value < 0:
            hint = "a seq counts from 0; `--tail N` shows the newest N lines" if flag == "--since" else "give N ≥ 0"
            raise invalid_args("show the log", f"{flag} {value}", hint)
    if tail is not None and limit is not None:
        raise invalid_args("show the log", "--tail with --limit", "give one: --limit N the first N, --tail N the newest N")
    if follow and limit is not None:
        raise invalid_args("follow the log", "--follow with --limit", "give --tail N to start from the newest N lines")
    with Workspace.open(workspace) as ws:
        records = ws.records(run=run, kind=kind or None, since=since, limit=limit)
        if tail is not None:
            records = records[len(records) - tail :] if tail else []
        names = short_run_ids([*ws.runs(), *(r.env.run for r in records)])
        empty = not records and not ws.seq_range()
        if follow:
            _follow(ws, run and ws.resolve_run(run), kind or None, max(ws.seq_range().stop, since or 0), records, as_json)
            return
    if as_json:
        out = sys.stdout.buffer
        for record in records:
            out.write(record.raw + b"\n")
        out.flush()
        return
    con = out_console()
    if empty:
        err_console().print(
            f"the ledger holds no line: {_empty_why(ws.root)} (`runfold verify{workspace_flag(ws.root)}` says what to do)",
            markup=False,
        )
        return
    if not records:
        err_console().print("no lines match", markup=False)
        return
    who_width = min(max(len(r.env.who) for r in records), 24)
    kind_width = max(len(r.env.kind) for r in records)
    run_width = max(len(names[r.env.run]) for r in records)
    for record in records:
        con.print(_timeline_row(record, who_width, kind_width, names, run_width))


def _follow(ws: Workspace, run: str | None, kind: list[str] | None, next_seq: int, first: list[Record], as_json: bool) -> None:
    """`log --follow`: print `first`, then each batch of new lines (filtered by `run`, `kind`)
    once a writer commits it, from `next_seq` on; ends once `run` (when given) is frozen, or at
    Ctrl-C (exit 0)."""
    from runfold.api import Workspace
    from runfold.core.ids import short_run_ids
    from runfold.store.follow import line_waiter

    if ws.read_only:
        raise invalid_args("follow the log", "--follow", "a ledger file or directory has no writer to follow; drop --follow")
    root = ws.root
    con = out_console()

    def show(batch: list[Record]) -> None:
        if as_json:
            sys.stdout.buffer.write(b"".join(r.raw + b"\n" for r in batch))
            sys.stdout.buffer.flush()
            return
        names = short_run_ids([*ws.runs(), *(r.env.run for r in batch)])
        for record in batch:
            con.print(_timeline_row(record, 12, max(len(record.env.kind), 18), names, max(len(n) for n in names.values())))

    def frozen(batch: list[Record]) -> bool:
        return run is not None and any(r.env.run == run and r.env.kind == Kind.RUN_FROZEN.value for r in batch)

    show(first)
    if run is not None and ws.records(run=run, kind=Kind.RUN_FROZEN.value, limit=1):
        return
    try:
        with line_waiter(root) as waiter:
            while True:
                if waiter.wait(next_seq, 5.0) <= next_seq:
                    continue
                with Workspace.open(root) as now:
                    batch = now.records(run=run, since=next_seq)
                    next_seq = max(now.seq_range().stop, next_seq)
                shown = [r for r in batch if kind is None or r.env.kind in kind]
                show(shown)
                if frozen(batch):
                    return
    except KeyboardInterrupt:
        return


# ---- show ---------------------------------------------------------------------------------


def _seq_to_show(text: str, ws: Workspace) -> int:
    """`text` (the SEQ argument) as the seq of a line `ws` holds.

    Raises `E_INVALID_ARGS` when it is not a whole number, negative or outside the ledger,
    naming the argument, the seqs the ledger holds and the commands that show them.
    """
    held = ws.seq_range()
    seq = int(text) if _SEQ_TEXT.fullmatch(text) else None
    if seq is not None and seq in held:
        return seq
    if seq is None:
        why = "not a whole number; a seq is a line's position in the ledger, counted from 0"
    elif seq < 0:
        why = "seqs count up from 0; there are no negative seqs"
    elif not held:
        why = "the ledger holds no line"
    elif seq >= held.stop:
        why = f"past the newest line, seq {held.stop - 1}"
    else:
        why = f"before the first line here, seq {held.start}"
    flag = workspace_flag(ws.root)
    if held:
        where = (
            f"this ledger holds seq {held.start}..{held.stop - 1}: `runfold show {held.stop - 1}{flag}` "
            f"shows the newest line and `runfold log{flag}` lists every line with its seq"
        )
    else:
        where = f"this ledger holds no line: {_empty_why(ws.root)} (`runfold verify{flag}` says what to do)"
    raise invalid_args(f"show seq {text} ({why})", str(ws.root), where)


_SEQ_TEXT = re.compile(r"-?[0-9]+")


def _read_from(segments: int, path: str) -> str:
    """Where verify read its lines: `in N segment(s)` of a file ledger, `from URL workspace NAME`
    of a PostgreSQL store (which has no segments)."""
    return f"in {count(segments)} segment(s)" if segments else f"from {path}"


def _empty_why(root: Path) -> str:
    """Why a ledger that opened holds no line: its segment files are empty, or its store holds
    no line for the workspace."""
    from runfold.store.backend import store_setting

    url = store_setting(root) if root.is_dir() else None
    if url is None:
        return "its segment files are empty"
    return f"the store holds no line for workspace {url.name!r} ({url.shown})"


def show_cmd(
    ctx: typer.Context,
    seq: Annotated[
        str,
        typer.Argument(
            help="The seq of the line to show: its position in the ledger, a whole number from 0 "
            "(`runfold verify` prints the range).",
            show_default=False,
            metavar="SEQ",
        ),
    ],
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Show one line pretty-printed, with its hash, prev and chain position.

    \b
    Examples:
      runfold show 5
      runfold show 17 --json -w examples/sprawling-golden-p0.jsonl
    """
    from rich.text import Text

    from runfold.api import Workspace

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        at = _seq_to_show(seq, ws)
        record = ws.record_at(at)
        position = ws.position(at)
    envelope = orjson.loads(record.raw)
    if as_json:
        echo_json(
            {
                "seq": record.seq,
                "hash": record.hash,
                "prev": record.env.prev,
                "line": position.line,
                "lines": position.lines,
                "segment": str(position.segment),
                "segment_line": position.segment_line,
                "known": record.known,
                "record": envelope,
            }
        )
        return
    con = out_console()
    env = record.env
    con.print(Text.assemble(("seq ", "bold"), (str(env.seq), "cyan"), f"  {env.kind}  {summarize(env)}"))
    con.print(
        f"position: line {position.line} of {position.lines}; {position.segment.name} line {position.segment_line}",
        markup=False,
    )
    con.print(f"hash:     {record.hash}", markup=False)
    con.print(f"prev:     {env.prev}", markup=False)
    con.print(f"time:     {iso_ms(env.t)}  (t={env.t})", markup=False)
    con.print(f"run:      {env.run}", markup=False)
    con.print(f"who:      {env.who}" + (f"  addr {env.addr}" if env.addr else ""), markup=False)
    con.print(orjson.dumps(envelope, option=orjson.OPT_INDENT_2).decode(), markup=False)


# ---- registration -------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """Add the ledger verbs to `app`."""
    app.command("init", epilog=EXIT_CODES_HELP)(init_cmd)
    app.command("verify", epilog=EXIT_CODES_HELP)(verify_cmd)
    app.command("log", epilog=EXIT_CODES_HELP)(log_cmd)
    app.command("show", epilog=EXIT_CODES_HELP, cls=NumberArgumentCommand)(show_cmd)
