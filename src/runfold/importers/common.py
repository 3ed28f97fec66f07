"""What every format module needs: reading JSONL or JSON with errors that name the source line,
ISO timestamps as UTC ms, and foreign content flattened to the text the model saw."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from runfold.core.canonical import MAX_DEPTH
from runfold.core.errors import RunfoldError
from runfold.core.exact_json import ExactNumber, dumps_exact, loads_exact
from runfold.core.messages import Block, text_block, tool_use_block
from runfold.importers.plan import bad_source

BOM = "\ufeff"
"""A byte-order mark some editors put before UTF-8 text: not part of the session, dropped."""
MAX_NESTING = MAX_DEPTH
"""The deepest JSON nesting a source value may have (as deep as a ledger payload may nest)."""


def decode(fmt: str, source: str, data: bytes) -> str:
    """`data` as UTF-8 text (a leading byte-order mark dropped); a byte that is not UTF-8 is
    refused naming its line."""
    try:
        return data.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise bad_source(
            fmt,
            source,
            f"line {line}",
            f"byte {exc.start} is not UTF-8",
            "the file is damaged or not a session file; restore it from a copy",
        ) from None


def _cut_inside_string(exc: ValueError) -> bool:
    """Whether a JSON error is a string the text ends inside (`"abc` with no closing quote)."""
    return str(getattr(exc, "msg", "")).startswith("Unterminated string")


def _lone_surrogate(value: Any, path: str = "") -> str | None:
    """The JSON path of the first string (key or value) in `value` holding a lone UTF-16
    surrogate (`\\ud800` without its pair: not text, no ledger can hold it), else None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "the value"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _lone_surrogate(key, f"{path}.{key!r} (a key)") or _lone_surrogate(item, f"{path}.{key}")
            if found:
                return found
    if isinstance(value, list):
        for j, item in enumerate(value):
            found = _lone_surrogate(item, f"{path}[{j}]")
            if found:
                return found
    return None


_SURROGATE_ESCAPE = re.compile(r"(\\u[dD][89abAB][0-9a-fA-F]{2})?(\\u[dD][c-fC-F][0-9a-fA-F]{2})?")


def _lone_escape_at(text: str) -> int:
    """Where the first `\\uD800`-style escape without its pair starts in `text` (0: none found)."""
    for m in _SURROGATE_ESCAPE.finditer(text):
        if bool(m.group(1)) != bool(m.group(2)):
            return m.start()
    return 0


def _too_deep(value: Any) -> bool:
    """Whether `value` nests objects or arrays deeper than MAX_NESTING (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_NESTING:
                return True
            stack.extend((x, depth + 1) for x in (item.values() if isinstance(item, dict) else item))
    return False


def _deep_line(text: str) -> int:
    """The 1-based line of `text` where its JSON first nests deeper than MAX_NESTING (strings
    skipped); the last line when it never does."""
    depth, in_string, escaped, line = 0, False, False, 1
    for ch in text:
        if ch == "\n":
            line += 1
        elif in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return line
        elif ch in "]}":
            depth -= 1
    return line


def _refuse_deep(fmt: str, source: str, where: str) -> RunfoldError:
    return bad_source(
        fmt,
        source,
        where,
        f"its JSON nests deeper than {MAX_NESTING} levels (no session holds that; a ledger cannot)",
        "the file is damaged or not a session file; check it, or remove that value and import again",
    )


def _refuse_surrogates(fmt: str, source: str, value: Any, where: str) -> None:
    path = _lone_surrogate(value)
    if path is not None:
        raise bad_source(
            fmt,
            source,
            where,
            f"the string at {path.lstrip('.')} holds a lone UTF-16 surrogate escape (half a character, not text)",
            "the tool that wrote the file cut a character in half; repair that string (or remove the line) "
            "and import again",
        )


def jsonl(fmt: str, source: str, data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """`(1-based line number, object)` for every non-blank line of a JSONL file. A line that is
    not JSON (a line cut short, the last or any other, included), not an object, or holding a
    lone surrogate is refused naming its number."""
    text = decode(fmt, source, data)
    lines = text.split("\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = loads_exact(line)
        except RecursionError:
            raise _refuse_deep(fmt, source, f"line {i}") from None
        except ValueError as exc:
            last = i == len(lines) and not text.endswith("\n")
            if last:
                what, recovery = (
                    "the last line is cut short (the file is truncated)",
                    "the file was still being written or was truncated; import a complete copy",
                )
            elif _cut_inside_string(exc):
                what, recovery = (
                    "the line is cut short inside a string (a truncated write)",
                    "import a complete copy of the file, or remove that line to import the rest",
                )
            else:
                what, recovery = (
                    f"the line is not JSON ({getattr(exc, 'msg', exc)})",
                    "repair or remove that line (the rest of the file is intact), then import again",
                )
            raise bad_source(fmt, source, f"line {i}", what, recovery) from None
        if _too_deep(value):
            raise _refuse_deep(fmt, source, f"line {i}")
        _refuse_surrogates(fmt, source, value, f"line {i}")
        if not isinstance(value, dict):
            raise bad_source(
                fmt,
                source,
                f"line {i}",
                "the line is not a JSON object",
                f"every line of a {fmt} file is an object; check the format (`runfold import auto FILE`)",
            )
        yield i, value


def whole_json(fmt: str, source: str, data: bytes) -> Any:
    """The file as one JSON value; malformed JSON is refused naming the line and column."""
    text = decode(fmt, source, data)
    try:
        value = loads_exact(text)
    except RecursionError:
        raise _refuse_deep(fmt, source, f"line {_deep_line(text)}") from None
    except ValueError as exc:
        err = exc if hasattr(exc, "lineno") else None
        line = getattr(err, "lineno", 1)
        col = getattr(err, "colno", 1)
        if getattr(err, "pos", 0) >= len(text.rstrip()) or _cut_inside_string(exc):
            what = "the file ends before the JSON does: it is truncated"
            if _cut_inside_string(exc):
                what = "a string starting here never ends: the file is truncated"
            recovery = "the tool may still have been writing it; import a complete copy of the file"
        elif getattr(err, "msg", "") == "Extra data":  # a second value: JSON Lines, most likely
            what = f"a second JSON value starts here (JSON Lines?), but {fmt} reads one JSON document"
            recovery = "check the file's format (`runfold import auto FILE` names it)"
        else:
            what = f"the file is not JSON ({getattr(err, 'msg', exc)})"
            recovery = "import a complete, unmodified copy of the file"
        raise bad_source(fmt, source, f"line {line} column {col}", what, recovery) from None
    if _too_deep(value):
        raise _refuse_deep(fmt, source, f"line {_deep_line(text)}")
    if _lone_surrogate(value) is not None:
        line = text.count("\n", 0, _lone_escape_at(text)) + 1
        _refuse_surrogates(fmt, source, value, f"line {line}")
    return value


def ms(stamp: Any) -> int | None:
    """An ISO-8601 timestamp (`2026-01-21T06:20:30.861Z`) as UTC milliseconds, None if absent
    or unreadable (a time is provenance, never a reason to refuse a file)."""
    if not isinstance(stamp, str) or not stamp or isinstance(stamp, ExactNumber):
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return int(when.timestamp() * 1000)


def obj(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (foreign files omit what they like)."""
    return value if isinstance(value, dict) else {}


def text_of(content: Any) -> str:
    """Foreign message content as the text the model saw: a string as is; an array of parts
    joined by newlines, text parts by their text, any other part as its compact JSON."""
    if content is None:
        return ""
    if isinstance(content, str) and not isinstance(content, ExactNumber):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
            else:
                parts.append(dumps_exact(part))
        return "\n".join(parts)
    return dumps_exact(content)


def args_text(raw: Any) -> str:
    """A tool call's arguments as JSON text: a string (the model's own text) as is, an object
    or other value printed with its numbers as they were spelled."""
    if isinstance(raw, str) and not isinstance(raw, ExactNumber):
        return raw if raw.strip() else "{}"
    if raw is None:
        return "{}"
    return dumps_exact(raw)


def text_blocks(text: str) -> list[Block]:
    """`[text block]`, or nothing for blank text (providers refuse empty text blocks)."""
    return [text_block(text)] if text.strip() else []


def call_block(call_id: str, name: str, raw_args: Any) -> Block:
    """A `tool_use` block for a foreign call."""
    return tool_use_block(call_id, name or "unknown", args_text(raw_args))
