"""`runfold validate`: lint any provider request body against its dialect's grammar (DESIGN.md §8).

The same pure validator that guards every send in the run loop, offered to users for their own
agents' histories: it reads one JSON body (a file or stdin), infers the dialect when not given,
and prints every violation with its message index and rule. Exit 0 clean, 1 violations, 2 input
that cannot be read as a request.
"""

from __future__ import annotations

import json as jsonlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from runfold.cli.common import JsonOption, echo_json, out_console, want_json
from runfold.core.errors import invalid_args

EXIT_VIOLATIONS = 1
"""The body breaks at least one rule."""


def read_body(source: str) -> Any:
    """The parsed JSON value of `source` (a path, or `-` for stdin).

    Raises `E_INVALID_ARGS` (exit 2) naming the file when it cannot be read, is not UTF-8, or is
    not JSON — then with the parser's line and column.
    """
    label = "stdin" if source == "-" else source
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as error:
        raise invalid_args(
            "read the request body",
            label,
            f"{error.strerror or error}; pass a readable JSON file, or - to read stdin",
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise invalid_args(
            "read the request body",
            label,
            f"byte {error.start} is not UTF-8; save the body as UTF-8 JSON",
        ) from None
    try:
        return jsonlib.loads(text)
    except jsonlib.JSONDecodeError as error:
        raise invalid_args(
            "parse the request body",
            f"{label} line {error.lineno} column {error.colno}",
            f"{error.msg} at line {error.lineno}, column {error.colno}; fix the JSON there",
        ) from None


def unwrap(value: Any) -> tuple[Any, str | None]:
    """A wrapper gives its body and its dialect: `{"dialect": ..., "request": {...}}` (a recorded
    request, as in fixtures and request logs) or `{"dialect": ..., "body": {...}}` (what
    `runfold conversation RUN --dialect D --json` prints); any other value is the body itself
    (dialect None). Raises `E_INVALID_ARGS` for a conversation printed in the `internal` form,
    which no provider takes."""
    key = next(
        (k for k in ("request", "body") if isinstance(value, dict) and isinstance(value.get(k), dict)), None
    )
    if key is None or "messages" in value or "input" in value:
        return value, None
    from runfold.core.validate import DIALECTS

    dialect = value.get("dialect")
    if key == "body" and dialect == "internal":
        raise invalid_args(
            "validate a request",
            "a conversation in runfold's internal form",
            "render it for a provider first: `runfold conversation RUN --dialect anthropic --json` "
            "(or openai-chat, openai-responses), then validate that",
        )
    return value[key], dialect if dialect in DIALECTS else None


def validate_cmd(
    ctx: typer.Context,
    file: Annotated[
        str,
        typer.Argument(
            help="The request body: a JSON file, or - for stdin. An object whose `request` key holds "
            "the body (a recorded request) is read too, and so is the output of "
            "`runfold conversation RUN --dialect D --json` (its `body`, for dialect D).",
            show_default=False,
            metavar="FILE",
        ),
    ],
    dialect: Annotated[
        str | None,
        typer.Option(
            "--dialect",
            "-d",
            help="anthropic | openai-chat | openai-responses. Default: inferred from the body's shape.",
            show_default=False,
        ),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Check a provider request body and print every violation with its message index and rule.

    Exit 0 when the body passes, 1 when it breaks a rule, 2 when it cannot be read as a request
    (missing file, bad JSON — with line and column —, unknown dialect).

    Example:  runfold validate request.json --dialect anthropic
    """
    from runfold.core.validate import DIALECTS, infer_dialect, validate

    as_json = want_json(ctx, json)
    if dialect is not None and dialect not in DIALECTS:
        raise invalid_args(
            "validate a request",
            f"dialect {dialect!r}",
            "use --dialect " + " | ".join(DIALECTS),
            nearby=DIALECTS,
        )
    body, recorded = unwrap(read_body(file))
    chosen = dialect or recorded or infer_dialect(body)
    how = "given" if dialect else "recorded" if recorded else "inferred"
    found = validate(chosen, body)
    label = "stdin" if file == "-" else file
    if as_json:
        echo_json(
            {
                "ok": not found,
                "file": label,
                "dialect": chosen,
                "dialect_from": how,
                "violations": [v.to_data() for v in found],
            }
        )
    else:
        console = out_console()
        key = "input" if chosen == "openai-responses" else "messages"
        items = body.get(key) if isinstance(body, dict) else None
        count = (
            f"{len(items)} {'items' if chosen == 'openai-responses' else 'messages'}, "
            if isinstance(items, list)
            else ""
        )
        verdict = "ok" if not found else f"{len(found)} violation{'s' if len(found) != 1 else ''}"
        console.print(f"{label}: {chosen} ({how}), {count}{verdict}", markup=False)
        for violation in found:
            console.print(violation.display(), markup=False)
    if found:
        raise typer.Exit(EXIT_VIOLATIONS)


def register(app: typer.Typer) -> None:
    """Add `runfold validate` to `app`."""
    app.command("validate")(validate_cmd)
