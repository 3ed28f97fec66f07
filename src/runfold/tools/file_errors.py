"""What the file tools say when a path is missing, and how they tell text from binary: shared by
read_file, edit_file, list_dir and search so their errors read alike (DESIGN.md §11)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import orjson

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.tools.context import ToolContext

BINARY_SNIFF_BYTES = 8192
"""A file with a NUL byte in its first 8 KiB is treated as binary."""


def call_hint(tool: str, path: str) -> str:
    """The call a tool error points the model to, written as it would send it:
    `read_file {"path": "todo.md"}`."""
    return f"{tool} {orjson.dumps({'path': path}).decode()}"


def not_found(ctx: ToolContext, path: str, real: Path, action: str) -> RunfoldError:
    """`E_PATH_NOT_FOUND` for `path` (resolved to `real`), with up to three close names of its
    directory in `nearby` and the `list_dir` call that shows what is there."""
    nearby: tuple[str, ...] = ()
    parent = real.parent
    if parent.is_dir() and ctx.is_readable(parent):
        try:
            names = sorted(e.name for e in os.scandir(parent) if e.name.casefold() != ".runfold")
        except OSError:
            names = []
        close = difflib.get_close_matches(real.name, names, n=3, cutoff=0.5)
        nearby = tuple(ctx.display(parent / n) for n in close)
    hint = f" (did you mean {', '.join(f'`{n}`' for n in nearby)}?)" if nearby else ""
    where = ctx.display(parent) if parent.is_dir() and ctx.is_readable(parent) else "."
    return RunfoldError(
        ErrorCode.PATH_NOT_FOUND,
        action,
        repr(path),
        f"no such path{hint}; see what is there with {call_hint('list_dir', where)} — paths are "
        f"relative to {ctx.room_label}",
        nearby=nearby,
    )


def is_binary(head: bytes) -> bool:
    """True when `head` (a file's first bytes) holds a NUL byte within BINARY_SNIFF_BYTES."""
    return b"\x00" in head[:BINARY_SNIFF_BYTES]
