"""Every kind has a payload decision and an in-window/record-only decision (DESIGN.md §4)."""

from __future__ import annotations

import pytest

from runfold.core.canonical import Envelope, encode_line
from runfold.core.errors import RunfoldError
from runfold.core.kinds import IN_WINDOW, RECORD_ONLY, Kind
from runfold.core.payloads import PAYLOADS, ModelReturned, RunStarted, ToolResult

DESIGN_IN_WINDOW = {
    "prompt_assembled",
    "model_called",
    "model_returned",
    "tool_called",
    "tool_result",
    "result_offloaded",
    "steer_received",
    "signal_consumed",
    "context_changed",
    "run_policy_changed",
}
DESIGN_RECORD_ONLY = {
    "workspace_initialized",
    "run_started",
    "session_opened",
    "run_forked",
    "prompt_shape_compared",
    "checkpoint_committed",
    "handoff_written",
    "cancel_received",
    "watchdog_fired",
    "budget_limit",
    "provider_degraded",
    "gate_denied",
    "run_frozen",
    "log_truncated",
    "signal_enqueued",
    "eval_run",
    "cache_renewed",
    "secret_captured",
    "session_imported",
    "endpoint_attached",
    "endpoint_lost",
    "approval_requested",
    "approval_resolved",
    "signal_wait_started",
    "signal_wait_ended",
}


def test_split_matches_design_and_covers_every_kind() -> None:
    assert {k.value for k in IN_WINDOW} == DESIGN_IN_WINDOW
    assert {k.value for k in RECORD_ONLY} == DESIGN_RECORD_ONLY
    assert IN_WINDOW | RECORD_ONLY == set(Kind)
    assert not IN_WINDOW & RECORD_ONLY


@pytest.mark.parametrize("kind", list(Kind))
def test_every_kind_has_a_payload_with_defaults_that_round_trips(kind: Kind) -> None:
    cls = PAYLOADS[kind]
    assert cls.KIND is kind
    default = cls()  # every field has a default
    data = default.to_data()
    again = cls.from_data(data)
    assert again.to_data() == data
    encode_line(
        Envelope(v=2, run="0" * 8, seq=0, prev="0" * 64, t=0, who="runtime", kind=kind.value, data=data)
    )


def test_optional_fields_are_omitted_when_absent() -> None:
    data = RunStarted(task="t").to_data()
    assert data == {"goal": "", "skills": [], "task": "t"}
    assert "parent" not in data and "model" not in data


def test_unknown_keys_and_missing_required_keys_round_trip() -> None:
    stored = {"calls": 1, "message": {}, "vendor_extra": {"x": [1, 2]}}
    assert ModelReturned.from_data(stored).to_data() == stored
    minimal = {"message": {}}
    assert ModelReturned.from_data(minimal).to_data() == minimal


def test_float_refused_naming_the_field_path() -> None:
    with pytest.raises(RunfoldError) as err:
        ModelReturned(usage={"input": 3, "ratio": 0.5})
    assert "data.usage.ratio" in err.value.display()
    assert err.value.code.value == "E_INVALID_ARGS"


def test_tool_result_needs_exactly_one_of_result_or_error() -> None:
    assert ToolResult(tool_use_id="a", name="x").result == {}
    with pytest.raises(RunfoldError):
        ToolResult(tool_use_id="a", name="x", result={}, error={"code": "E_TIMEOUT"})
    assert ToolResult(tool_use_id="a", name="x", error={"code": "E_TIMEOUT"}).to_data() == {
        "error": {"code": "E_TIMEOUT"},
        "name": "x",
        "tool_use_id": "a",
    }


def test_wrong_field_type_names_the_path() -> None:
    with pytest.raises(RunfoldError) as err:
        RunStarted.from_data({"task": 3})
    assert "data.task" in err.value.display()
