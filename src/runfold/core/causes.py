"""The causes of a change to the context window (DESIGN.md §10): each names one path through the
runtime, so every byte of a window can be traced to the ledger line that put it there and why.

The wire names are pinned: a cause is never renamed, and never derived from a variable or
member name. A change with no cause of its own is left unattributed; none of these is a default.
"""

from __future__ import annotations

import enum


class Cause(enum.StrEnum):
    """A §10 cause; the value is its wire name (what `BlockSource.cause` and
    `context_changed.cause` hold)."""

    SEED = "seed"
    """The run's opening and its first frozen prefix: `run_started` (the opening text, or a
    fork's inherited conversation) and the run's first `prompt_assembled`."""
    MESSAGE = "message"
    """Words delivered into a running run: `steer_received` (the person, the runtime, another
    agent's letter), joined to the open user message or held until the next one."""
    MODEL_REPLY = "model_reply"
    """The model's reply: the blocks of `model_returned` and the `tool_use` of each
    `tool_called` the reply lacked."""
    TOOL_RESULT = "tool_result"
    """A tool's answer: a `tool_result` line's result or error (and its head when a large result
    was offloaded by `result_offloaded`)."""
    PRODUCED_PART = "produced_part"
    """A part produced for the window by the runtime rather than a line's own payload, such as
    an attachment or a rendered file; no path writes it yet."""
    COMPACTION = "compaction"
    """The runtime compacting the conversation at a turn boundary (`context_changed` on the
    conversation region: cleared tool results, a summary replacing older exchanges), or, in an
    imported session, the compaction the source's runtime made."""
    TRANSFORM = "transform"
    """A configured rewrite of the window's content applied before a request (e.g. redaction);
    no path writes it yet."""
    CONTEXT_TOOL = "context_tool"
    """The model editing a region through a context tool (pinned notes, the todo checklist,
    scratch): a `context_changed` line on that region."""
    HOOK = "hook"
    """A user hook changing the window; no path writes it yet."""
    FAN_OUT = "fan_out"
    """Results of delegated child runs gathered back into the parent's window: the
    `steer_received` of a letter of kind `reply` (a child's final answer, delivered when it froze)."""
    INTERACTION = "interaction"
    """An exchange with the person outside a steer: the `tool_result` of a call the person denied
    when asked to approve it (`E_GATE_DENIED` with the approval rule and their reason)."""
    RESUME = "resume"
    """Resume closing a call left open by a crash: the `tool_result` error
    `E_TOOL_OUTCOME_UNKNOWN` it writes (DESIGN.md §7)."""
    FRAMEWORK = "framework"
    """The runtime's own additions the other causes do not cover: a runtime reminder of the
    conversation budget left, a `runtime` `steer_received` marked `cause: framework`."""


CAUSES: tuple[str, ...] = tuple(c.value for c in Cause)
"""The wire names in §10 order."""
