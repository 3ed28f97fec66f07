"""What a model's reply says before the run loop records it: whether it stopped at its output
ceiling, whether it says anything, and whether it can continue the conversation at all (a
malformed block, an empty or reused tool call id is refused unrecorded and the model asked again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from runfold.core.errors import RunfoldError
from runfold.core.messages import Block, check_block
from runfold.providers.base import Reply

LIMIT_STOPS: Final = frozenset({"max_tokens", "length", "max_output_tokens", "incomplete"})
"""Stop reasons meaning the reply hit its output ceiling (Anthropic, OpenAI Chat, Responses)."""

MALFORMED_REPLY: Final = "malformed_reply"
"""`watchdog_fired.reason` when a reply was refused unrecorded (an empty or reused tool call id,
an empty tool name, a malformed block) and the model is asked again after a back-off."""


def visible(blocks: Sequence[Block]) -> bool:
    """True when a reply says something: a non-blank text block or a tool call."""
    return any((b["kind"] == "text" and b["text"].strip()) or b["kind"] == "tool_use" for b in blocks)


def reply_problem(reply: Reply, taken: set[str]) -> str | None:
    """Why a reply cannot continue the conversation (malformed block, a tool call with an
    empty id or name, a reused tool call id), checked before it is written or run so the
    ledger never holds a line its fold or a provider refuses; `taken` holds the tool call ids
    the run used already."""
    seen: set[str] = set()
    for i, raw in enumerate(reply.blocks):
        try:
            b = check_block(raw, f"content[{i}]")
        except RunfoldError as err:
            return f"{err.subject}: {err.action}"
        if b["kind"] == "tool_result":
            return f"content[{i}] is a tool_result block"
        if b["kind"] == "tool_use":
            if not b["id"].strip() or not b["name"].strip():
                return f"content[{i}] is a tool call with an empty {'id' if not b['id'].strip() else 'name'}"
            if b["id"] in seen or b["id"] in taken:
                return f"content[{i}] reuses tool call id {b['id']!r}"
            seen.add(b["id"])
    return None
