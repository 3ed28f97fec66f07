"""The event vocabulary (DESIGN.md §4): every kind, and whether it decides request bytes.

Folds that rebuild conversations read the in-window kinds and must name every record-only kind
as ignored; `Kind` is the single list both sides match against.
"""

from __future__ import annotations

import enum


class Kind(enum.StrEnum):
    """Every event kind this build knows; the value is the wire name."""

    # in-window: the payload decides bytes of a model request
    PROMPT_ASSEMBLED = "prompt_assembled"
    MODEL_CALLED = "model_called"
    MODEL_RETURNED = "model_returned"
    TOOL_CALLED = "tool_called"
    TOOL_RESULT = "tool_result"
    RESULT_OFFLOADED = "result_offloaded"
    STEER_RECEIVED = "steer_received"
    SIGNAL_CONSUMED = "signal_consumed"
    CONTEXT_CHANGED = "context_changed"
    RUN_POLICY_CHANGED = "run_policy_changed"
    # record-only
    WORKSPACE_INITIALIZED = "workspace_initialized"
    RUN_STARTED = "run_started"
    SESSION_OPENED = "session_opened"
    RUN_FORKED = "run_forked"
    PROMPT_SHAPE_COMPARED = "prompt_shape_compared"
    CHECKPOINT_COMMITTED = "checkpoint_committed"
    HANDOFF_WRITTEN = "handoff_written"
    CANCEL_RECEIVED = "cancel_received"
    WATCHDOG_FIRED = "watchdog_fired"
    BUDGET_LIMIT = "budget_limit"
    PROVIDER_DEGRADED = "provider_degraded"
    GATE_DENIED = "gate_denied"
    RUN_FROZEN = "run_frozen"
    LOG_TRUNCATED = "log_truncated"
    SIGNAL_ENQUEUED = "signal_enqueued"
    EVAL_RUN = "eval_run"
    CACHE_RENEWED = "cache_renewed"
    SECRET_CAPTURED = "secret_captured"
    SESSION_IMPORTED = "session_imported"
    ENDPOINT_ATTACHED = "endpoint_attached"
    ENDPOINT_LOST = "endpoint_lost"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_RESOLVED = "approval_resolved"
    SIGNAL_WAIT_STARTED = "signal_wait_started"
    SIGNAL_WAIT_ENDED = "signal_wait_ended"


IN_WINDOW: frozenset[Kind] = frozenset(
    {
        Kind.PROMPT_ASSEMBLED,
        Kind.MODEL_CALLED,
        Kind.MODEL_RETURNED,
        Kind.TOOL_CALLED,
        Kind.TOOL_RESULT,
        Kind.RESULT_OFFLOADED,
        Kind.STEER_RECEIVED,
        Kind.SIGNAL_CONSUMED,
        Kind.CONTEXT_CHANGED,
        Kind.RUN_POLICY_CHANGED,
    }
)
RECORD_ONLY: frozenset[Kind] = frozenset(Kind) - IN_WINDOW
KNOWN_KIND_NAMES: frozenset[str] = frozenset(k.value for k in Kind)


def is_in_window(kind: Kind) -> bool:
    """True when a line of this kind decides bytes of a model request (DESIGN.md §4)."""
    return kind in IN_WINDOW
