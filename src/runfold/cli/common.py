"""Shared pieces of the `runfold` command line: the workspace option, output, errors, exit codes.

Every verb group uses these so that all commands find workspaces the same way, print `--json`
the same way, and turn a `RunfoldError` into one `display()` line on stderr and the same exit
code (documented in `EXIT_CODES_HELP` and the README).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import traceback
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TextIO

import orjson
import typer
from typer.core import TyperCommand, TyperGroup
from typer.exceptions import TyperException

from runfold.core.errors import ErrorCode, RunfoldError

# Every command module imports this one, so it imports only what `--help` needs: the
# workspace, the ledger reader and rich's console are imported where a command uses them.
if TYPE_CHECKING:
    from rich.console import Console

# ---- exit codes -------------------------------------------------------------------------

EXIT_OK = 0
EXIT_VERIFY_FAILED = 1
"""A ledger line failed verification (any command that read a bad line)."""
EXIT_USAGE = 2
"""Bad usage or arguments: unknown option, bad value, unknown or ambiguous run prefix."""
EXIT_ERROR = 3
"""Any other runfold error: no workspace found, ledger held by another writer, storage failure."""
EXIT_INTERNAL = 4
"""A bug in runfold (`E_INTERNAL`, or an exception that is not a RunfoldError); rerun with --debug."""

OWN_PROCESS = False
"""True when the command owns its process (set by `runfold.cli.main.main`): then a Ctrl-C that
arrives after a run is frozen stays ignored until the process exits, so the exit code is the
run's (6 for cancelled), not an interrupt's. In-process callers (tests, embedding) get their
SIGINT handler back when the command returns (`runfold.cli.foreground`)."""
EXIT_LIMIT = 5
"""`runfold run`: the run ended at a limit (turn ceiling, empty reply, max_tokens stop)."""
EXIT_CANCELLED = 6
"""`runfold run`: the run was cancelled (Ctrl-C) and frozen as cancelled at a safe point."""

EXIT_CODES_HELP = (
    "Exit codes: 0 ok (a run: done) · 1 a ledger line failed verification, or a replayed request "
    "differs · 2 bad usage or arguments · 3 other runfold error, or a run frozen by an error (the "
    "E_CODE line on stderr says which) · 4 internal error (rerun with --debug for the traceback) · "
    "5 a run ended at a limit · 6 a run was cancelled."
)

_USAGE_CODES = frozenset({ErrorCode.INVALID_ARGS})
_VERIFY_CODES = frozenset({ErrorCode.LEDGER_CORRUPT, ErrorCode.LOG_VERSION_UNSUPPORTED})

JSON_META_KEY = "runfold.json"
DEBUG_META_KEY = "runfold.debug"


def exit_code_for(error: RunfoldError) -> int:
    """The process exit code for `error`: 1 for a refused ledger line, 2 for bad arguments, 4 for
    a runfold bug (`E_INTERNAL`), else 3."""
    from runfold.core.chain import LineRefused

    if isinstance(error, LineRefused) or error.code in _VERIFY_CODES:
        return EXIT_VERIFY_FAILED
    if error.code in _USAGE_CODES:
        return EXIT_USAGE
    if error.code is ErrorCode.INTERNAL:
        return EXIT_INTERNAL
    return EXIT_ERROR


def error_object(error: RunfoldError) -> dict[str, Any]:
    """The JSON form of an error for `--json` output: the §11 fields, plus fault/line/seq when a
    ledger line was refused, plus the display line."""
    from runfold.core.chain import LineRefused

    obj: dict[str, Any] = dict(error.to_data())
    obj["display"] = error.display()
    if isinstance(error, LineRefused):
        obj["fault"] = error.fault.value
        obj["line"] = error.line_no
        obj["seq"] = error.seq
        obj["detail"] = error.detail
    return obj


# ---- consoles and output ------------------------------------------------------------------


@cache
def _console_class() -> type[Console]:
    """A rich console whose closed-pipe handling leaves the exit code to `RunfoldGroup`
    (rich's default exits 1, which would read as "verification failed"); defined on first use
    so that commands printing nothing through rich never import it."""
    from rich.console import Console
    from rich.segment import Segment
    from rich.text import Text

    from runfold.cli.visible import visible

    def shown(obj: Any) -> Any:
        if isinstance(obj, str):
            return visible(obj)
        if isinstance(obj, Text) and visible(obj.plain) != obj.plain:
            copy = obj.copy()
            copy.plain = visible(obj.plain)  # one for one: the spans stay where they were
            return copy
        return obj

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

        def print(self, *objects: Any, **options: Any) -> None:
            super().print(*(shown(o) for o in objects), **options)

        def _render_buffer(self, buffer: Iterable[Segment]) -> str:
            # what reached the buffer another way (a live display's renderables): rich's own
            # control segments pass, every other text is made visible
            return super()._render_buffer(
                s if s.control else Segment(visible(s.text), s.style, s.control) for s in buffer
            )

    return _Console


def out_console() -> Console:
    """A console on the current stdout (created per call so test runners' captures work). It
    prints control characters visibly (`cli.visible`) and never reads markup or emoji codes in
    text (a path or a reply holding `:smile:` prints as it is)."""
    return _console_on(sys.stdout)


def err_console() -> Console:
    """A console on the current stderr, printing as `out_console` does."""
    return _console_on(sys.stderr)


def _console_on(file: TextIO) -> Console:
    return _console_class()(file=file, highlight=False, soft_wrap=True, markup=False, emoji=False)


def json_line(obj: Any) -> str:
    """One compact JSON text (UTF-8, keys in the given order) for `--json` output."""
    return orjson.dumps(obj).decode("utf-8")


def echo_json(obj: Any) -> None:
    """Print one JSON value on one line of stdout."""
    sys.stdout.write(json_line(obj) + "\n")


def workspace_flag(root: Path) -> str:
    """The ` -w DIR` a suggested command (`next: runfold ...`) needs to reach the workspace at
    `root` when run from the current directory: empty when the default lookup (`$RUNFOLD_WORKSPACE`,
    else upward from the current directory) already finds `root`, else ` -w <root>` quoted for
    a POSIX shell. Never raises."""
    from runfold.api import Workspace

    try:
        with Workspace.open(None) as found:
            if found.root.resolve() == root.resolve():
                return ""
    except (RunfoldError, OSError):
        pass
    return f" -w {shlex.quote(str(root))}"


def want_json(ctx: typer.Context, json_flag: bool) -> bool:
    """Record that this command prints JSON (so errors are also printed as JSON) and return it."""
    if json_flag:
        ctx.meta[JSON_META_KEY] = True
    return json_flag


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


# ---- the workspace option -----------------------------------------------------------------

WORKSPACE_HELP = (
    "The workspace directory (the one holding .runfold/). Read commands also take a ledger "
    "directory or one segment file. Default: $RUNFOLD_WORKSPACE, else found from the current "
    "directory upward, as git does."
)

WorkspaceOption = Annotated[
    Path | None,
    typer.Option("--workspace", "-w", help=WORKSPACE_HELP, show_default=False, metavar="DIR"),
]
JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print machine-readable JSON on stdout (errors too)."),
]


# ---- every command: usage line, negative numbers -----------------------------------------

_NEGATIVE_INT = re.compile(r"-[0-9]+")
_REQUIRED_PIECE = re.compile(r"\{([^{}]+)\}(\.\.\.)?")


class RunfoldCommand(TyperCommand):
    """The class of every `runfold` command (set in `runfold.cli.main`): its usage line names a
    required argument as `SEQ`, like click and man pages, not `{SEQ}` (typer's braces read as
    an unfilled template)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [_REQUIRED_PIECE.sub(r"\1\2", piece) for piece in super().collect_usage_pieces(ctx)]


class NumberArgumentCommand(RunfoldCommand):
    """A command whose one positional argument is a number (`runfold show SEQ`): a negative
    whole number (`-1`, `-12`) given there is taken as that argument instead of click's
    "No such option: -1", so the command itself can say why the value is refused. Any other
    unknown option is still refused as one."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        original = list(args)  # the parser consumes `args`
        try:
            return super().parse_args(ctx, args)
        except TyperException as error:
            # typer's click raises NoSuchOption naming only the first character of an unknown
            # short option ("-1" for "-12")
            unknown = str(getattr(error, "option_name", ""))
            options_end = original.index("--") if "--" in original else len(original)
            numbers = [a for a in original[:options_end] if _NEGATIVE_INT.fullmatch(a)]
            if not (unknown[1:].isdigit() and numbers):
                raise
            rest = list(original)
            rest.remove(numbers[0])
            return super().parse_args(ctx, [*rest, "--", numbers[0]])


# ---- the group: error display and exit codes ----------------------------------------------


def _fail(ctx: Any, message: str, code: int, obj: dict[str, Any] | None) -> NoReturn:
    if obj is not None and ctx.meta.get(JSON_META_KEY):
        echo_json({"ok": False, "error": obj})
    err_console().print(message, markup=False)
    ctx.exit(code)
    raise AssertionError("unreachable")  # pragma: no cover


class RunfoldGroup(TyperGroup):
    """The top-level command group: turns errors into one line on stderr and an exit code.

    A `RunfoldError` prints its `display()` (exit 1, 2, 3 or 4, see `exit_code_for`); any other
    exception prints one line asking for `--debug` (exit 4); `--debug` re-raises so the
    traceback shows. A closed stdout (e.g. `runfold log | head`) ends quietly.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        argv = list(args)
        try:
            return super().parse_args(ctx, args)
        except TyperException as error:  # e.g. `runfold --bogus`: refused before any command
            if not _is_usage_error(error):
                raise
            _usage_failure(ctx, error, "", argv)

    def invoke(self, ctx: Any) -> Any:
        argv = [*(getattr(ctx, "protected_args", None) or []), *ctx.args]  # click clears them
        try:
            return super().invoke(ctx)
        except TyperException as error:
            # a usage error (missing argument, unknown option or command) is raised while
            # parsing, before the command could note --json: one §11 line, JSON too on --json
            if not _is_usage_error(error):
                raise
            _usage_failure(ctx, error, ctx.invoked_subcommand or "", argv)
        except (typer.Exit, typer.Abort):
            raise
        except RunfoldError as error:
            if ctx.meta.get(DEBUG_META_KEY):
                raise
            _fail(ctx, error.display(), exit_code_for(error), error_object(error))
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(EXIT_OK)
        except KeyboardInterrupt:
            err_console().print("interrupted", markup=False)
            ctx.exit(130)
        except (OSError, RecursionError) as error:
            if ctx.meta.get(DEBUG_META_KEY):
                raise
            mapped = environment_error(error)
            _fail(ctx, mapped.display(), exit_code_for(mapped), error_object(mapped))
        except Exception as error:
            if ctx.meta.get(DEBUG_META_KEY):
                raise
            last = traceback.extract_tb(error.__traceback__)[-1]
            where = f"{Path(last.filename).name}:{last.lineno}"
            message = (
                f"internal error: {type(error).__name__}: {error} (at {where}) — this is a bug in "
                "runfold; rerun with --debug for the traceback and report it"
            )
            _fail(
                ctx,
                message,
                EXIT_INTERNAL,
                {"code": "internal", "display": message},
            )


def _is_usage_error(error: TyperException) -> bool:
    """True for click's usage errors (exit code 2), except the bare `runfold` that shows help."""
    return (
        getattr(error, "exit_code", None) == EXIT_USAGE
        and hasattr(error, "format_message")
        and type(error).__name__ != "NoArgsIsHelpError"
    )


def usage_error(error: TyperException, command: str, argv: list[str]) -> RunfoldError:
    """Click's usage error `error` (raised while parsing `runfold COMMAND ARGV`) as the §11
    `E_INVALID_ARGS`: click's own message, the command's usage line and its `--help`."""
    where = " ".join(["runfold", *([command] if command else [])])
    usage = ""
    error_ctx = getattr(error, "ctx", None)
    if error_ctx is not None:
        usage = error_ctx.get_usage().removeprefix("Usage:").strip()
    message = error.format_message().rstrip(".")
    shown = f"usage: `{usage}`, see `{where} --help`" if usage else f"see `{where} --help`"
    return RunfoldError(
        ErrorCode.INVALID_ARGS,
        "parse the command line",
        " ".join([where, *argv]),
        f"{message}; {shown}",
    )


def _usage_failure(ctx: Any, error: TyperException, command: str, argv: list[str]) -> NoReturn:
    mapped = usage_error(error, command, argv)
    if "--json" in argv:
        ctx.meta[JSON_META_KEY] = True
    _fail(ctx, mapped.display(), EXIT_USAGE, error_object(mapped))


def environment_error(error: OSError | RecursionError) -> RunfoldError:
    """The §11 error for a failure of the machine rather than of runfold: a file the OS refused
    (permissions, a directory where a file belongs, a full disk: `E_STORAGE_FATAL` naming the
    path and the OS's reason) or input nested too deeply to read (`E_INVALID_ARGS`)."""
    if isinstance(error, RecursionError):
        return RunfoldError(
            ErrorCode.INVALID_ARGS,
            "read the input (it is nested too deeply to process)",
            "the input",
            "flatten the input: JSON nested thousands of levels deep is not a request or a ledger",
        )
    where = error.filename if error.filename is not None else "the file system"
    reason = error.strerror or type(error).__name__
    return RunfoldError(
        ErrorCode.STORAGE_FATAL,
        f"use the file ({reason})",
        str(where),
        "check that the path exists, is the right kind (file or directory) and that this user may "
        "read and write it, then run the command again",
    )


def _silence_stdout() -> None:
    # stdout's reader went away: point fd 1 at /dev/null so the interpreter's final flush
    # does not raise a second BrokenPipeError.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def set_debug(ctx: typer.Context, debug: bool) -> None:
    """Remember the global `--debug` flag for the error handler of `RunfoldGroup`."""
    ctx.meta[DEBUG_META_KEY] = debug


Command = Callable[..., Any]
