"""What the run fold does with each kind of line, and the phases of a run it tracks (DESIGN.md §4,
§5): `DECISIONS` decides every `Kind` (a test checks it covers them exactly), and `SAFE_PHASES` are
the phases after which a fork may cut.
"""

from __future__ import annotations

import enum

from runfold.core.kinds import Kind


class Decision(enum.StrEnum):
    """What the run fold does with a line of a kind (DESIGN.md §4: every kind is decided)."""

    OPEN = "open"
    """`run_started`: the opening joins the conversation (cause `seed`)."""
    FORKED = "forked"
    """`run_forked`: names the mother; the lineage is folded from it before the run's own lines."""
    ASSEMBLE = "assemble"
    """`prompt_assembled`: the frozen prefix of the next request (kept for `why`)."""
    MARK_SENT = "mark_sent"
    """`prompt_shape_compared`: the conversation is marked sent."""
    CALL = "call"
    """`model_called`: a request leaves (marked sent here when the turn had no comparison); a
    summary call's (`purpose: compaction`) changes nothing, at a turn boundary."""
    REPLY = "reply"
    """`model_returned`: the reply; with calls it opens a wave. A summary call's reply does not
    join the conversation (its text arrives with the `context_changed` that uses it)."""
    TOOL_CALL = "tool_call"
    """`tool_called`: a call of the open wave (its `tool_use` when the reply lacks it)."""
    TOOL_RESULT = "tool_result"
    """`tool_result`: a result of the open wave; the last one commits the wave."""
    OFFLOAD = "offload"
    """`result_offloaded`: a result of the open wave is replaced by its head and locator."""
    STEER = "steer"
    """`steer_received`: user content (cause `message`), held when the open message was sent."""
    REGION = "region"
    """`context_changed`: a change to a region; for the conversation region a compaction at a
    turn boundary, applied by `core.compaction.apply_change` (an unknown strategy is refused,
    `E_LOG_VERSION_UNSUPPORTED`, never skipped)."""
    FREEZE = "freeze"
    """`run_frozen`: the run ends; an incomplete wave is dropped."""
    NO_WINDOW_EFFECT = "no_window_effect"
    """In-window kinds that change no conversation bytes: `signal_consumed` (the text arrives
    with its `steer_received`), `run_policy_changed` (the policy shapes calls, not messages)."""
    IGNORE = "ignore"
    """Record-only kinds: they never decide request bytes."""


DECISIONS: dict[Kind, Decision] = {
    Kind.RUN_STARTED: Decision.OPEN,
    Kind.RUN_FORKED: Decision.FORKED,
    Kind.PROMPT_ASSEMBLED: Decision.ASSEMBLE,
    Kind.PROMPT_SHAPE_COMPARED: Decision.MARK_SENT,
    Kind.MODEL_CALLED: Decision.CALL,
    Kind.MODEL_RETURNED: Decision.REPLY,
    Kind.TOOL_CALLED: Decision.TOOL_CALL,
    Kind.TOOL_RESULT: Decision.TOOL_RESULT,
    Kind.RESULT_OFFLOADED: Decision.OFFLOAD,
    Kind.STEER_RECEIVED: Decision.STEER,
    Kind.CONTEXT_CHANGED: Decision.REGION,
    Kind.RUN_FROZEN: Decision.FREEZE,
    Kind.SIGNAL_CONSUMED: Decision.NO_WINDOW_EFFECT,
    Kind.RUN_POLICY_CHANGED: Decision.NO_WINDOW_EFFECT,
    Kind.WORKSPACE_INITIALIZED: Decision.IGNORE,
    Kind.SESSION_OPENED: Decision.IGNORE,
    Kind.CHECKPOINT_COMMITTED: Decision.IGNORE,
    Kind.HANDOFF_WRITTEN: Decision.IGNORE,
    Kind.CANCEL_RECEIVED: Decision.IGNORE,
    Kind.WATCHDOG_FIRED: Decision.IGNORE,
    Kind.BUDGET_LIMIT: Decision.IGNORE,
    Kind.PROVIDER_DEGRADED: Decision.IGNORE,
    Kind.GATE_DENIED: Decision.IGNORE,
    Kind.LOG_TRUNCATED: Decision.IGNORE,
    Kind.SIGNAL_ENQUEUED: Decision.IGNORE,
    Kind.EVAL_RUN: Decision.IGNORE,
    Kind.CACHE_RENEWED: Decision.IGNORE,
    Kind.SECRET_CAPTURED: Decision.IGNORE,
    Kind.SESSION_IMPORTED: Decision.IGNORE,
    Kind.ENDPOINT_ATTACHED: Decision.IGNORE,
    Kind.ENDPOINT_LOST: Decision.IGNORE,
    Kind.APPROVAL_REQUESTED: Decision.IGNORE,
    Kind.APPROVAL_RESOLVED: Decision.IGNORE,
    Kind.SIGNAL_WAIT_STARTED: Decision.IGNORE,
    Kind.SIGNAL_WAIT_ENDED: Decision.IGNORE,
}
"""Every `Kind` and what the run fold does with it; a test checks it covers `Kind` exactly."""


class Phase(enum.StrEnum):
    """Where a run stands after a line (see the module docstring); safe cuts are IDLE and FROZEN."""

    IDLE = "idle"
    ASSEMBLED = "assembled"
    CALLING = "calling"
    WAVE = "wave"
    FROZEN = "frozen"


SAFE_PHASES: frozenset[Phase] = frozenset({Phase.IDLE, Phase.FROZEN})
