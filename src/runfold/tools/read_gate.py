"""The read gate for file contents: a tool reads a file only when every name the file has lies
inside the workspace and outside `.runfold` (DESIGN.md §9).

A path is checked by `ToolContext.resolve_read` (symlinks resolved); the file is then opened
without following a symlink that appeared since, and the open file itself is checked: it must be
a regular file, and a file with several names (hard links) is read only when all of them are found
inside the workspace and none inside `.runfold` — otherwise a link would read a ledger segment or
a file outside the workspace through a name that looks local.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from runfold.core.errors import ErrorCode, Gate, RunfoldError
from runfold.tools.context import READ_RULE, ToolContext, is_reserved_segment

LINK_CENSUS_MAX_ENTRIES = 200_000
"""The most directory entries one tool call walks to find the other names of a hard-linked file;
a file whose names were not all found within them is refused."""


class NotRegularFile(Exception):
    """The opened path is a directory, device, pipe or socket (its `st_mode` is in `mode`)."""

    def __init__(self, mode: int) -> None:
        super().__init__(stat.filemode(mode))
        self.mode = mode


@dataclass
class LinkCensus:
    """The names, inside the workspace, of every file there with more than one name: walked once
    per tool call on first need (at most LINK_CENSUS_MAX_ENTRIES entries), symlinks not followed.
    Names are workspace-relative, `/`-separated."""

    ctx: ToolContext
    _names: dict[tuple[int, int], list[str]] | None = field(default=None, init=False)
    _complete: bool = field(default=True, init=False)

    def _walk(self) -> dict[tuple[int, int], list[str]]:
        if self._names is not None:
            return self._names
        root = self.ctx.real_workspace
        names: dict[tuple[int, int], list[str]] = {}
        budget = LINK_CENSUS_MAX_ENTRIES
        stack = [root]
        while stack and self._complete:
            here = stack.pop()
            try:
                with os.scandir(here) as it:
                    entries = list(it)
            except OSError:
                continue
            for entry in entries:
                budget -= 1
                if budget < 0:
                    self._complete = False
                    break
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        if st.st_nlink > 1:
                            rel = Path(entry.path).relative_to(root).as_posix()
                            names.setdefault((st.st_dev, st.st_ino), []).append(rel)
                except OSError:
                    continue
        self._names = names
        return names

    def violation(self, shown: str, st: os.stat_result) -> str | None:
        """Why the file `shown` (with stat `st`) may not be read, or None when it may: it has one
        name, or all its `st_nlink` names were found inside the workspace, none inside `.runfold`."""
        if st.st_nlink <= 1:
            return None
        found = self._walk().get((st.st_dev, st.st_ino), [])
        reserved = [n for n in found if any(is_reserved_segment(s) for s in n.split("/"))]
        if reserved:
            return f"`{shown}` is a hard link to `{reserved[0]}`, inside the reserved .runfold directory"
        if len(found) < st.st_nlink:
            why = "" if self._complete else " (the workspace is too large to look further)"
            return (
                f"`{shown}` is a hard link: the file has {st.st_nlink} names and only {len(found)} of "
                f"them were found inside the workspace{why}, so its content may live outside it"
            )
        return None


def refuse_link(ctx: ToolContext, path: str, violation: str, action: str) -> RunfoldError:
    """The three-part refusal of a read through a link (`E_GATE_DENIED`)."""
    return RunfoldError(
        ErrorCode.GATE_DENIED,
        action,
        repr(path),
        "read a file whose only name is inside the workspace; to use this content, have it copied "
        "into the workspace as a file of its own (a copy, not a link)",
        gate=Gate(
            rule=READ_RULE,
            violation=violation,
            alternative=f"read another file (paths are relative to {ctx.room_label}); a copy of this "
            "one made with `cp` is a file of its own and can be read",
        ),
    )


def open_checked(ctx: ToolContext, real: Path, path: str, action: str, census: LinkCensus) -> BinaryIO:
    """Open the resolved path `real` (from `ctx.resolve_read(path)`) for reading, binary.

    The final component is not followed if it became a symlink since it was resolved, a pipe is
    not waited on, and the open file is checked: `NotRegularFile` when it is not a regular file,
    `E_GATE_DENIED` (a three-part refusal) when it has other names that are not all inside the
    workspace or one inside `.runfold` (see `LinkCensus`). Other OS errors propagate."""
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse_link(
                ctx, path, f"`{path}` became a symlink while it was being read", action
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(st.st_mode)
        why = census.violation(ctx.display(real), st)
        if why is not None:
            raise refuse_link(ctx, path, why, action)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
