"""Addresses (rooms) and their write domains (DESIGN.md §9).

An address is a relative, `/`-separated path of non-empty UTF-8 segments inside the workspace.
`.runfold` is reserved anywhere: it parses as an address but is never writable by a run.
"""

from __future__ import annotations

import re
from typing import NewType

from runfold.core.errors import invalid_args

Address = NewType("Address", str)

RESERVED_SEGMENT = ".runfold"
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def address_problem(text: str) -> str | None:
    """Why `text` is not an address, or None when it is one."""
    if not text:
        return "it is empty"
    if text.startswith("/"):
        return "it is absolute (starts with /)"
    if text.endswith("/"):
        return "it ends with /"
    if _DRIVE.match(text):
        return "it starts with a drive letter"
    if "\\" in text:
        return "it contains a backslash"
    if ":" in text:
        return "it contains ':'"
    if _CONTROL.search(text):
        return "it contains a control character"
    for segment in text.split("/"):
        if segment == "":
            return "it has an empty segment (//)"
        if segment in (".", ".."):
            return f"it has a {segment!r} segment"
    return None


def parse_address(text: str) -> Address:
    """Return `text` as an Address; raises `E_INVALID_ARGS` saying which rule it breaks."""
    problem = address_problem(text)
    if problem is not None:
        raise invalid_args(
            f"use address ({problem})",
            repr(text),
            "give a relative path such as `lab/room1`: no leading or trailing /, no . or .., no \\ or :",
        )
    return Address(text)


def is_reserved(address: str) -> bool:
    """True when any segment is `.runfold` (never writable by a run)."""
    return RESERVED_SEGMENT in address.split("/")


def is_within(address: str, room: str) -> bool:
    """True when `address` equals `room` or lies below it (segment-wise, not by prefix text)."""
    a, r = address.split("/"), room.split("/")
    return a[: len(r)] == r
