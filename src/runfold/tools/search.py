"""The `search` tool: lines of the workspace's text files that contain a text or match a regular
expression (DESIGN.md §9).

Regular expressions run on RE2 (`google-re2`), whose time is linear in the text searched, so no
pattern can hold the process (a backtracking engine takes exponential time on `(a|a)*b`). The
scan runs in a worker thread that checks a stop flag between matches: a cancel or a timeout of the
call ends it within milliseconds. RE2 has no backreferences and no lookaround; such a pattern is
refused with an error naming the construct and a pattern that works instead.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2

from runfold.core.errors import RunfoldError, invalid_args
from runfold.tools.context import ToolContext
from runfold.tools.file_errors import is_binary, not_found
from runfold.tools.read_gate import LinkCensus, NotRegularFile, open_checked

SEARCH_MAX_FILE_BYTES = 8 * 1024 * 1024
"""`search` skips files larger than this (8 MiB)."""
SEARCH_LINE_CHARS = 300
"""A matching line is shown up to this many characters."""

_SYNTAX = "search's regular expressions are RE2 syntax (linear time: no backreferences, no lookaround)"

_UNSUPPORTED: tuple[tuple[str, str, str], ...] = (
    # (what RE2's message names, the construct, what to write instead)
    ("(?=", "a lookahead `(?=…)`", "put the following text in the pattern itself (`foo(?=bar)` → `foobar`)"),
    ("(?!", "a negative lookahead `(?!…)`", "search for the wider pattern and read the lines it finds"),
    (
        "(?<=",
        "a lookbehind `(?<=…)`",
        "put the preceding text in the pattern itself (`(?<=foo)bar` → `foobar`)",
    ),
    ("(?<!", "a negative lookbehind `(?<!…)`", "search for the wider pattern and read the lines it finds"),
    (
        "(?P=",
        "a named backreference `(?P=name)`",
        "match the text without the backreference and compare the repeats in the lines it finds",
    ),
    ("(?P>", "a subroutine call `(?P>name)`", "write the group out again"),
    ("(?>", "an atomic group `(?>…)`", "drop the `?>`: RE2 never backtracks, so `(?>a+)` is `(a+)`"),
    ("(?(", "a conditional `(?(…)…)`", "use an alternation `(a|b)`"),
    ("(?#", "a comment `(?#…)`", "remove the comment"),
    ("(?x", "verbose mode `(?x)`", "write the pattern without spaces and comments"),
    ("++", "a possessive quantifier `++`", "use `+`: RE2 never backtracks"),
    ("*+", "a possessive quantifier `*+`", "use `*`: RE2 never backtracks"),
    ("?+", "a possessive quantifier `?+`", "use `?`: RE2 never backtracks"),
    ("\\Z", "`\\Z`", "use `$` (each line is matched on its own)"),
    ("\\G", "`\\G`", "anchor with `^` (each line is matched on its own)"),
)


def _refusal(message: str, pattern: str) -> RunfoldError:
    """The `E_INVALID_ARGS` for a pattern RE2 refused with `message`."""
    recovery: str | None = None
    if "invalid escape sequence: \\" in message and message[-1:].isdigit():
        ref = message.rsplit(" ", 1)[-1]
        recovery = (
            f"the pattern uses a backreference `{ref}`, which {_SYNTAX} cannot run; match the text "
            f"without it (e.g. `(\\w+) \\w+`) and compare the repeats in the lines it finds"
        )
    elif "invalid repetition size" in message:
        recovery = f"a counted repetition `{{n}}` may be at most 1000 ({_SYNTAX}); use `+` or a smaller count"
    elif "pattern too large" in message:
        recovery = f"the regular expression is too large for RE2's memory limit ({_SYNTAX}); make it smaller"
    else:
        for needle, construct, instead in _UNSUPPORTED:
            if needle in message or (needle.startswith("(?P") and "(?P" in message and needle in pattern):
                recovery = f"the pattern uses {construct}, which {_SYNTAX} cannot run; {instead}"
                break
    if recovery is None:
        recovery = (
            f"the regular expression is invalid ({message}; {_SYNTAX}); fix it or search with regex=false"
        )
    return invalid_args("search", "argument `pattern`", recovery)


def compile_pattern(pattern: str, regex: bool) -> Any:
    """An RE2 program finding `pattern` within one line: a regular expression (RE2 syntax, `^` and
    `$` at line edges) when `regex`, else the literal text. A match never spans a newline.

    Raises `E_INVALID_ARGS` naming what RE2 cannot run (a backreference, a lookaround, ...) and
    what to write instead."""
    options = re2.Options()
    options.log_errors = False
    options.never_nl = True
    options.literal = not regex
    try:
        return re2.compile(f"(?m){pattern}" if regex else pattern, options)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b""
        message = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        raise _refusal(message, pattern) from None


def matching_lines(program: Any, data: bytes, stop: threading.Event) -> Iterator[tuple[int, bytes]]:
    """The (1-based line number, line bytes without `\\n`) of each line of `data` holding a match
    of `program`, in order; lines are cut at `\\n`. Stops when `stop` is set. Linear in `data`."""
    end_of_data = len(data)
    pos = 0
    number = 1
    counted = 0
    while pos <= end_of_data and not stop.is_set():
        found = program.search(data, pos)
        if found is None:
            return
        start = data.rfind(b"\n", 0, found.start()) + 1
        if start == end_of_data:  # the empty remainder after a final newline is no line
            return
        end = data.find(b"\n", found.start())
        end = end_of_data if end < 0 else end
        number += data.count(b"\n", counted, start)
        counted = start
        yield number, data[start:end]
        pos = end + 1


def _walk(root: Path) -> Iterable[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d.casefold() != ".runfold")
        for name in sorted(filenames):
            yield Path(dirpath) / name


@dataclass
class _Scan:
    ctx: ToolContext
    path: str
    program: Any
    stop: threading.Event

    def run(self, root: Path) -> dict[str, Any]:
        ctx = self.ctx
        census = LinkCensus(ctx)
        cap = ctx.search_max_results
        matches: list[dict[str, Any]] = []
        searched = skipped = 0
        truncated = False
        explicit = root.is_file()  # a file named by the call: a refusal is the call's error
        for file in _walk(root):
            if truncated or self.stop.is_set():
                break
            target = Path(os.path.realpath(file)) if file.is_symlink() else file
            if not ctx.is_readable(target):
                skipped += 1
                continue
            try:
                with open_checked(ctx, target, self.path, "search", census) as f:
                    raw = f.read(SEARCH_MAX_FILE_BYTES + 1)
            except RunfoldError:
                if explicit:
                    raise
                skipped += 1
                continue
            except (NotRegularFile, OSError):
                skipped += 1
                continue
            if len(raw) > SEARCH_MAX_FILE_BYTES or is_binary(raw):
                skipped += 1
                continue
            searched += 1
            shown = ctx.display(file)
            data = raw.decode("utf-8", errors="replace").encode("utf-8")
            for number, line in matching_lines(self.program, data, self.stop):
                if len(matches) >= cap:
                    truncated = True
                    break
                text = line.decode("utf-8").removesuffix("\r")
                matches.append({"path": shown, "line": number, "text": text[:SEARCH_LINE_CHARS]})
        return {"matches": matches, "files_searched": searched, "skipped": skipped, "truncated": truncated}


async def search(pattern: str, path: str = ".", regex: bool = False, *, ctx: ToolContext) -> dict[str, Any]:
    """Search the text files under a directory (default: your room) for lines containing a pattern.

    Case-sensitive; a plain substring unless `regex` is true: then RE2 syntax, Python's `re`
    without backreferences and lookaround (its time is linear in the text; `(?i)` ignores case,
    `^`/`$` are line edges). Lines end at `\\n`, numbered as read_file numbers them. Files are
    visited in sorted order; binary files, files over 8 MiB, `.runfold`, symlinks leading out of the
    workspace and hard links with a name outside it are skipped. Result: {matches, files_searched,
    skipped, truncated} — each match is {path, line, text} (1-based line, text cut at 300
    characters); at most 100 matches by default, `truncated` says when more exist.

    Args:
        pattern: Text (or regular expression with regex=true) to find within a line.
        path: File or directory to search, relative to the room.
        regex: Treat the pattern as a regular expression (RE2 syntax).

    Raises:
        E_INVALID_ARGS (empty pattern, bad regular expression, or a construct RE2 cannot run, named
        with what to write instead), E_PATH_NOT_FOUND, E_GATE_DENIED.
    """
    action = "search"
    if pattern == "":
        raise invalid_args(action, "argument `pattern`", "`pattern` is empty; give the text to look for")
    program = compile_pattern(pattern, regex)
    real = ctx.resolve_read(path, action)
    if not real.exists():
        raise not_found(ctx, path, real, action)
    stop = threading.Event()
    try:
        return await asyncio.to_thread(_Scan(ctx, path, program, stop).run, real)
    finally:
        stop.set()  # a cancel or a timeout ends the scan at its next match or file
