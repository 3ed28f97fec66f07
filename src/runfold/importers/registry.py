"""The formats `runfold import` reads, in detection order, and the one entry point that reads a
file as one of them (`read_plan`); `runfold.importers` re-exports these when first asked, so a
command that only names the formats loads no parser.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from runfold.core.errors import invalid_args
from runfold.importers import AUTO, FORMATS, claude_code, codex, openai_chat, openhands, swe_agent
from runfold.importers.plan import ImportPlan


@dataclass(frozen=True)
class _Format:
    name: str
    detect: Callable[[bytes], bool]
    parse: Callable[[bytes, str], ImportPlan]


_REGISTRY: tuple[_Format, ...] = (
    _Format(claude_code.FORMAT, claude_code.detect, claude_code.parse),
    _Format(codex.FORMAT, codex.detect, codex.parse),
    _Format(swe_agent.FORMAT, swe_agent.detect, swe_agent.parse),
    _Format(openhands.FORMAT, openhands.detect, openhands.parse),
    _Format(openai_chat.FORMAT, openai_chat.detect, openai_chat.parse),
)
"""In detection order: the most specific shapes first (a SWE-agent history is also Chat messages)."""

def detect(data: bytes, source: str) -> str:
    """The format of `data` (a file named `source`). Raises `E_INVALID_ARGS` naming the formats
    when none matches."""
    for fmt in _REGISTRY:
        if fmt.detect(data):
            return fmt.name
    raise invalid_args(
        f"detect the session format of {source} (no known format matches its start)",
        source,
        f"name the format: runfold import FORMAT FILE, FORMAT one of {', '.join(FORMATS)}",
        FORMATS,
    )


def read_plan(
    fmt: str, data: bytes, source: str, companions: Mapping[str, bytes] | None = None
) -> ImportPlan:
    """The import plan of `data` read as `fmt` (`auto`: detected). `companions` are the files a
    Claude Code session's subagents wrote (name → bytes). Raises `E_INVALID_ARGS` for an unknown
    format, and the format's own errors (naming the source line or event) for bad input."""
    name = detect(data, source) if fmt == AUTO else fmt
    chosen = next((f for f in _REGISTRY if f.name == name), None)
    if chosen is None:
        raise invalid_args(
            f"import {source} as {fmt} (an unknown format)",
            "the format",
            f"name one of: {', '.join((AUTO, *FORMATS))}",
            (AUTO, *FORMATS),
        )
    if name == claude_code.FORMAT:
        return claude_code.parse(data, source, companions)
    return chosen.parse(data, source)


__all__ = ["detect", "read_plan"]
