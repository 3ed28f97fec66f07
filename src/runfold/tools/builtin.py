"""The built-in tools a run may opt into: read_file, write_file, edit_file, list_dir, search, exec,
and (by name only) send_message, the context tools (`tools/regions.py`), and read_result (by name,
or added to every run with a tool).

Each is a typed function turned into a `Tool`, so its schema and description come from the
same place as a user's tools (DESIGN.md §9). Paths are relative to the run's room; writes pass
the write-domain check of `ToolContext`; results are float-free JSON objects (sizes in bytes,
durations in ms) and failures are `RunfoldError`s whose `to_data()` is the `tool_result.error`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import Field

from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.offload import PAGING_TOOL
from runfold.tools.agents import AGENT_TOOLS
from runfold.tools.context import ToolContext
from runfold.tools.exec_tool import exec_command
from runfold.tools.file_errors import BINARY_SNIFF_BYTES
from runfold.tools.file_errors import call_hint as _call
from runfold.tools.file_errors import is_binary as _is_binary
from runfold.tools.file_errors import not_found as _not_found
from runfold.tools.paging import read_result
from runfold.tools.read_gate import LinkCensus, NotRegularFile, open_checked
from runfold.tools.regions import CONTEXT_TOOLS
from runfold.tools.registry import Tool, ToolRegistry
from runfold.tools.search import search
from runfold.tools.write_domain import write_in_room

Line = Annotated[int, Field(ge=1)]


# ---- helpers ----------------------------------------------------------------------------




def _encode_text(text: str, field: str, action: str, path: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_args(
            action,
            f"argument `{field}` for {path!r}",
            f"`{field}` must be valid Unicode (no lone surrogates)",
        ) from None


# ---- read_file --------------------------------------------------------------------------


def read_file(
    path: str,
    start_line: Line | None = None,
    end_line: Line | None = None,
    *,
    ctx: ToolContext,
) -> dict[str, Any]:
    """Read a text file of the workspace, whole or a range of lines.

    The content is returned as plain text, exactly as in the file (no line-number prefixes), so it
    can be copied into edit_file. Result: {path, content, start_line, end_line, total_lines, bytes,
    truncated} — `end_line` is the last line included; when the output cap (64 KiB by default) cut
    the range, `truncated` is true and `next_start_line` says where to continue. Paths are relative
    to your room; `..` may reach other parts of the workspace; `.runfold` is never readable, nor
    a file with another name (a hard link) outside the workspace or inside `.runfold`.

    Args:
        path: File path, relative to the room.
        start_line: First line to return, 1-based (default 1).
        end_line: Last line to return, inclusive (default: the end of the file).

    Raises:
        E_PATH_NOT_FOUND (with close names), E_INVALID_ARGS (a directory, a binary file, a range
        past the end), E_GATE_DENIED (outside the workspace or into .runfold, through a symlink or
        a hard link).
    """
    action = "read file"
    real = ctx.resolve_read(path, action)
    if not real.exists():
        raise _not_found(ctx, path, real, action)
    if real.is_dir():
        raise invalid_args(
            action,
            repr(path),
            f"this is a directory, not a file: list it with {_call('list_dir', ctx.display(real))}",
        )
    if start_line is not None and end_line is not None and end_line < start_line:
        raise invalid_args(
            action,
            "argument `end_line`",
            f"end_line ({end_line}) is before start_line ({start_line}); give end_line >= start_line",
        )
    try:
        opened = open_checked(ctx, real, path, action, LinkCensus(ctx))
    except NotRegularFile:
        raise invalid_args(
            action, repr(path), "this is not a regular file (a device, pipe or socket); read files only"
        ) from None
    start = start_line or 1
    cap = ctx.read_max_bytes
    chunks: list[bytes] = []
    used = 0
    last = start - 1
    total = 0
    truncated = False
    next_start: int | None = None
    with opened as f:
        size = os.fstat(f.fileno()).st_size
        if _is_binary(f.read(BINARY_SNIFF_BYTES)):
            raise invalid_args(
                action,
                repr(path),
                f"this is a binary file ({size} bytes); read_file reads text — inspect it with exec if needed",
            )
        f.seek(0)
        for total, line in enumerate(f, 1):
            if total < start or (end_line is not None and total > end_line) or truncated:
                continue
            if used + len(line) > cap:
                truncated = True
                if chunks:
                    next_start = total
                else:  # one line longer than the cap: give its head
                    chunks.append(line[:cap])
                    last = total
                    next_start = total + 1
                continue
            chunks.append(line)
            used += len(line)
            last = total
    if start > 1 and start > total:
        raise invalid_args(
            action,
            "argument `start_line`",
            f"start_line {start} is past the end of {path!r} ({total} lines); give a start_line of at most {total}",
        )
    out: dict[str, Any] = {
        "path": ctx.display(real),
        "content": b"".join(chunks).decode("utf-8", errors="replace"),
        "start_line": start,
        "end_line": last,
        "total_lines": total,
        "bytes": size,
        "truncated": truncated,
    }
    if next_start is not None and (end_line is None or next_start <= end_line) and next_start <= total:
        out["next_start_line"] = next_start
    return out


# ---- write_file / edit_file -------------------------------------------------------------


def write_file(path: str, content: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Create or overwrite a text file inside your room (missing directories are created).

    The whole file is replaced by `content` (UTF-8). Result: {path, written, created} —
    `written` in bytes, `created` true when the file did not exist. Writes outside your room, into
    `.runfold`, through `..`, to absolute paths or through symlinks leaving the room are refused
    with E_OUTSIDE_WRITE_DOMAIN, which names a path that works.

    Args:
        path: File path, relative to the room.
        content: The complete new content of the file.

    Raises:
        E_OUTSIDE_WRITE_DOMAIN (with a gate: rule, violation, alternative), E_INVALID_ARGS.
    """
    action = "write file"
    real = ctx.resolve_write(path, action)
    if real.exists() and not real.is_file():
        raise invalid_args(action, repr(path), "this is a directory or special file; give a file path")
    data = _encode_text(content, "content", action, path)
    created = not real.exists()
    write_in_room(ctx, real, data, action, path)
    return {"path": ctx.display(real), "written": len(data), "created": created}


def _match_starts(text: str, old: str) -> list[int]:
    starts: list[int] = []
    i = text.find(old)
    while i != -1:
        starts.append(i)
        i = text.find(old, i + 1)
    return starts


def edit_file(path: str, old: str, new: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Replace one exact occurrence of `old` with `new` in a text file inside your room.

    `old` must match the file's text exactly once (whitespace and line breaks included); with 0
    or several matches nothing is changed and the error says how many and where. Result: {path,
    replaced, line, written} — `line` is the 1-based line where the replacement starts, `written`
    the new file size in bytes.

    Args:
        path: File path, relative to the room.
        old: The exact text to replace (must occur exactly once).
        new: The replacement text.

    Raises:
        E_INVALID_ARGS (0 or several matches, empty `old`, not UTF-8), E_PATH_NOT_FOUND,
        E_OUTSIDE_WRITE_DOMAIN, E_GATE_DENIED (a hard link to a file outside the workspace).
    """
    action = "edit file"
    real = ctx.resolve_write(path, action)
    if not real.exists():
        raise _not_found(ctx, path, real, action)
    if not real.is_file():
        raise invalid_args(action, repr(path), "this is not a regular file; give a file path inside the room")
    if old == "":
        raise invalid_args(action, "argument `old`", "`old` is empty; give the exact text to replace")
    with open_checked(ctx, real, path, action, LinkCensus(ctx)) as f:  # its lines show in errors
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_args(
            action, repr(path), f"the file is not UTF-8 text (byte {exc.start}); rewrite it with write_file"
        ) from None
    starts = _match_starts(text, old)
    if len(starts) != 1:
        lines = text.splitlines()
        if starts:
            where = [text.count("\n", 0, s) + 1 for s in starts]
            nearby = tuple(f"line {n}: {lines[n - 1].strip()[:120]}" for n in where[:5])
            shown = ", ".join(str(n) for n in where[:10]) + (", …" if len(where) > 10 else "")
            recovery = (
                f"`old` matches {len(starts)} times (at lines {shown}); include more of the surrounding "
                "text in `old` so it matches exactly once"
            )
        else:
            probe = next((ln.strip() for ln in old.splitlines() if ln.strip()), old.strip())
            stripped = [ln.strip() for ln in lines]
            close = difflib.get_close_matches(probe, stripped, n=3, cutoff=0.5)
            nearby = tuple(f"line {stripped.index(c) + 1}: {c[:120]}" for c in close)
            recovery = "`old` matches 0 times; copy the exact text (whitespace included) from read_file" + (
                " — the closest lines are listed in nearby" if nearby else ""
            )
        raise RunfoldError(
            ErrorCode.INVALID_ARGS, action, f"argument `old` in {path!r}", recovery, nearby=nearby
        )
    at = starts[0]
    updated = text[:at] + new + text[at + len(old) :]
    data = _encode_text(updated, "new", action, path)
    write_in_room(ctx, real, data, action, path)
    return {
        "path": ctx.display(real),
        "replaced": 1,
        "line": text.count("\n", 0, at) + 1,
        "written": len(data),
    }


# ---- list_dir / search ------------------------------------------------------------------


def _entry(e: os.DirEntry[str]) -> dict[str, Any]:
    if e.is_symlink():
        return {"name": e.name, "type": "symlink"}
    if e.is_dir(follow_symlinks=False):
        return {"name": e.name, "type": "dir"}
    if e.is_file(follow_symlinks=False):
        return {"name": e.name, "type": "file", "bytes": e.stat(follow_symlinks=False).st_size}
    return {"name": e.name, "type": "other"}


def list_dir(path: str = ".", *, ctx: ToolContext) -> dict[str, Any]:
    """List a directory of the workspace (default: your room), sorted by name.

    Result: {path, entries, total, truncated} — each entry is {name, type} with type `file`,
    `dir`, `symlink` or `other`, and `bytes` for files; `.runfold` is never listed; at most 1000
    entries by default (`truncated` says when more exist, `total` counts them all).

    Args:
        path: Directory path, relative to the room (default: the room itself).

    Raises:
        E_PATH_NOT_FOUND, E_INVALID_ARGS (a file), E_GATE_DENIED (outside the workspace or .runfold).
    """
    action = "list directory"
    real = ctx.resolve_read(path, action)
    if not real.exists():
        raise _not_found(ctx, path, real, action)
    if not real.is_dir():
        raise invalid_args(
            action,
            repr(path),
            f"this is a file, not a directory: read it with {_call('read_file', ctx.display(real))} "
            f"(list_dir lists directories: {_call('list_dir', ctx.display(real.parent))})",
        )
    with os.scandir(real) as it:
        found = sorted((e for e in it if e.name.casefold() != ".runfold"), key=lambda e: e.name)
    cap = ctx.list_max_entries
    return {
        "path": ctx.display(real),
        "entries": [_entry(e) for e in found[:cap]],
        "total": len(found),
        "truncated": len(found) > cap,
    }




# ---- letters between runs -----------------------------------------------------------------


async def send_message(to: str, text: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Send a message to another run that is running now; it reaches that run as a letter from you
    at its next safe point (it is never mistaken for the person's words).

    `to` is the target run's id or the start of it; `text` is your message. Returns
    `{delivered_to: <full run id>, signal: <delivery id>}`.
    """
    if ctx.messenger is None:
        raise invalid_args(
            "send a message",
            f"run {to!r}",
            "messages need a run driven by a workspace (Workspace.arun); answer in your reply instead",
        )
    return ctx.messenger(to, text)  # on the event loop's thread: the hub is not thread-safe


# ---- the set ----------------------------------------------------------------------------

READ_FILE = Tool.from_function(read_file, effect="read", subject="path")
WRITE_FILE = Tool.from_function(write_file, effect="write", subject="path")
EDIT_FILE = Tool.from_function(edit_file, effect="write", subject="path")
LIST_DIR = Tool.from_function(list_dir, effect="read", subject="path")
SEARCH = Tool.from_function(search, effect="read", subject="pattern")
EXEC = Tool.from_function(exec_command, name="exec", effect="write", subject="command", times_itself=True)

BUILTIN_TOOLS: tuple[Tool, ...] = (READ_FILE, WRITE_FILE, EDIT_FILE, LIST_DIR, SEARCH, EXEC)
BUILTIN_NAMES: tuple[str, ...] = tuple(t.name for t in BUILTIN_TOOLS)
"""`read_file`, `write_file`, `edit_file`, `list_dir`, `search`, `exec`."""

SEND_MESSAGE = Tool.from_function(send_message, effect="write", subject="to")
READ_RESULT = Tool.from_function(read_result, name=PAGING_TOOL, effect="read", subject="key")
OPT_IN_TOOLS: tuple[Tool, ...] = (SEND_MESSAGE, READ_RESULT, *CONTEXT_TOOLS, *AGENT_TOOLS)
"""Built-ins not in the default set: `send_message`, the context tools and the agent tools are
given only when named (`builtin_tools=[..., "send_message"]`, config `tools`) or, for the agent
tools, by a run's `agents` option, so they never change the tool table of a run that did not ask;
`read_result` is also appended to every run that has a tool (`runtime.offload.with_paging`)."""
OPT_IN_NAMES: tuple[str, ...] = tuple(t.name for t in OPT_IN_TOOLS)
"""`send_message`, `read_result` (pages back an offloaded tool result, DESIGN.md §10), the
context tools of `tools.regions` (notes, todo, scratch regions, DESIGN.md §10), and the agent
tools of `tools.agents` (`delegate`, `wait_for_reply`)."""
AGENT_NAMES: tuple[str, ...] = (SEND_MESSAGE.name, *(t.name for t in AGENT_TOOLS))
"""The tools a run's `agents` option adds: `send_message`, `delegate`, `wait_for_reply`."""


def builtin_registry(names: Iterable[str] | None = None) -> ToolRegistry:
    """A registry holding the named built-ins in the order given (default: the six of
    BUILTIN_NAMES, in that order; the OPT_IN_NAMES only when named). Unknown names raise
    `E_TOOL_UNKNOWN` with the closest built-in names."""
    if names is None:
        return ToolRegistry(BUILTIN_TOOLS)
    return ToolRegistry((*BUILTIN_TOOLS, *OPT_IN_TOOLS)).subset(names)
