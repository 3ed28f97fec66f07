"""Read a Python function's docstring into a tool description and per-parameter descriptions.

Custom tools are declared as typed Python functions (DESIGN.md §9); the model sees the
docstring's leading text as the tool description and the `Args:` (Google) or `Parameters`
(NumPy) entries as the descriptions of the JSON-schema properties.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

_GOOGLE_HEADER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z ]*):\s*$")
_NUMPY_RULE = re.compile(r"^-{3,}\s*$")
_PARAM_SECTIONS = frozenset(
    {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
)
_KNOWN_SECTIONS = _PARAM_SECTIONS | frozenset(
    {
        "returns",
        "return",
        "yields",
        "yield",
        "raises",
        "raise",
        "examples",
        "example",
        "notes",
        "note",
        "see also",
        "attributes",
        "warnings",
        "warning",
        "references",
        "todo",
        "other parameters",
        "methods",
    }
)
# `name (type): text`, `name: text`, `*name: text`
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*:\s*(?P<text>.*)$")
# `name : type` or `name`
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(:.*)?$")


@dataclass(frozen=True)
class ParsedDocstring:
    """`description`: the text before the first section, dedented, each paragraph's hard-wrapped
    lines joined by spaces (list items, indented and fenced lines keep their breaks; "" if none);
    `params`: parameter name → its description with continuation lines joined by one space."""

    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


def _section_at(lines: list[str], i: int) -> tuple[str, int] | None:
    """The section starting at line i as (lowercased name, index of its first body line)."""
    if _indent(lines[i]) != 0:
        return None
    line = lines[i].strip()
    m = _GOOGLE_HEADER.match(line)
    if m and m.group("name").strip().lower() in _KNOWN_SECTIONS:
        return m.group("name").strip().lower(), i + 1
    if line.lower() in _KNOWN_SECTIONS and i + 1 < len(lines) and _NUMPY_RULE.match(lines[i + 1].strip()):
        return line.lower(), i + 2
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _parse_entries(body: list[str], numpy: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    nonblank = [ln for ln in body if ln.strip()]
    if not nonblank:
        return out
    base = min(_indent(ln) for ln in nonblank)
    current: str | None = None
    for line in body:
        if not line.strip():
            continue
        if _indent(line) == base:
            m = (_NUMPY_ENTRY if numpy else _GOOGLE_ENTRY).match(line.strip())
            if m is None:
                current = None
                continue
            current = m.group("name")
            text = "" if numpy else m.group("text").strip()
            out[current] = text
        elif current is not None:
            out[current] = (out[current] + " " + line.strip()).strip()
    return out


_KEEP_BREAK = re.compile(r"^(\s|[-*+] |\d+[.)] |>|```|\|)")


def _reflow(lines: list[str]) -> str:
    """Join the hard-wrapped lines of each paragraph with single spaces; blank lines, indented
    lines, list items, quotes, tables and code fences keep their line breaks."""
    out: list[str] = []
    for line in lines:
        if (
            out
            and out[-1]
            and line.strip()
            and not _KEEP_BREAK.match(line)
            and not _KEEP_BREAK.match(out[-1])
        ):
            out[-1] = out[-1].rstrip() + " " + line.strip()
        else:
            out.append(line.rstrip())
    return "\n".join(out).strip()


def parse_docstring(doc: str | None) -> ParsedDocstring:
    """Split a docstring into its description and its parameter descriptions.

    Understands Google style (`Args:` with `name (type): text` entries) and NumPy style
    (`Parameters` underlined with dashes, `name : type` then indented text). Sections other than
    the parameter ones (Returns, Raises, Examples, ...) are left out of both parts. Never raises:
    an unparseable docstring becomes its whole text as the description.
    """
    if not doc:
        return ParsedDocstring()
    lines = inspect.cleandoc(doc).splitlines()
    sections: list[tuple[str, int, int]] = []  # (name, body start, body end)
    first_section = len(lines)
    i = 0
    while i < len(lines):
        found = _section_at(lines, i)
        if found is not None:
            name, start = found
            if sections:
                prev_name, prev_start, _ = sections[-1]
                sections[-1] = (prev_name, prev_start, i)
            else:
                first_section = i
            sections.append((name, start, len(lines)))
            i = start
            continue
        i += 1
    description = _reflow(lines[:first_section])
    params: dict[str, str] = {}
    for name, start, end in sections:
        if name in _PARAM_SECTIONS or name == "other parameters":
            numpy = start >= 2 and _NUMPY_RULE.match(lines[start - 1].strip()) is not None
            params.update(_parse_entries(lines[start:end], numpy))
    return ParsedDocstring(description, params)
