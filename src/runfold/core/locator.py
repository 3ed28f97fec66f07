"""Locators: where a piece of content lives (DESIGN.md §3 "Content store").

`cas:b3-<hex64>` optionally followed by `#L<a>-<b>` (1-based closed line range) or `#B<a>-<b>`
(0-based closed byte range); `file:<address>@<revision>` names a job file in a foreign ledger.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runfold.core.errors import invalid_args

_CAS = re.compile(r"^cas:b3-([0-9a-f]{64})(?:#([LB])(\d+)-(\d+))?$")
_FILE = re.compile(r"^file:([^@]+)@([0-9a-zA-Z]+)$")


@dataclass(frozen=True)
class CasLocator:
    """A CAS object, optionally narrowed to lines (`L`, 1-based) or bytes (`B`, 0-based)."""

    hash: str
    unit: str | None = None
    start: int = 0
    end: int = 0

    def __str__(self) -> str:
        base = f"cas:b3-{self.hash}"
        return base if self.unit is None else f"{base}#{self.unit}{self.start}-{self.end}"

    def slice(self, content: bytes) -> bytes:
        """The part of `content` this locator names (closed ranges; lines keep their newline)."""
        if self.unit == "B":
            return content[self.start : self.end + 1]
        if self.unit == "L":
            lines = content.splitlines(keepends=True)
            return b"".join(lines[self.start - 1 : self.end])
        return content


@dataclass(frozen=True)
class FileLocator:
    address: str
    revision: str

    def __str__(self) -> str:
        return f"file:{self.address}@{self.revision}"


def parse_locator(text: str) -> CasLocator | FileLocator:
    """Parse a locator; raises `E_INVALID_ARGS` for anything else or a reversed range."""
    m = _CAS.match(text)
    if m:
        digest, unit, a, b = m.groups()
        if unit is None:
            return CasLocator(digest)
        start, end = int(a), int(b)
        if end < start or (unit == "L" and start < 1):
            raise invalid_args(
                "read locator range", repr(text), "ranges are closed and ascending; lines start at 1"
            )
        return CasLocator(digest, unit, start, end)
    f = _FILE.match(text)
    if f:
        return FileLocator(f.group(1), f.group(2))
    raise invalid_args(
        "read locator",
        repr(text),
        "use cas:b3-<64 hex>[#L<a>-<b>|#B<a>-<b>] or file:<address>@<revision>",
    )
