"""`why` against the model's window (DESIGN.md §10): the calibration on billed calls, per-mille
exact; each figure naming its method; budgets from a custom model row; the sizes that
`context_changed` and `result_offloaded` lines record, read as they are."""

from __future__ import annotations

from typing import Any

from test_fold_support import MemLedger, lines_of, rid

from runfold.core.causes import Cause
from runfold.core.fold import why_report as why
from runfold.core.records import Draft
from runfold.core.tokens import ModelLimits, TokenCount, merge_models
from runfold.core.window import ContextSettings

RUN = rid(77)


def _ledger() -> tuple[MemLedger, dict[str, int]]:
    """A run with two billed calls (4000 B → 900 input + 100 cache_read; 6000 B → 1407 input
    + 100 cache_write), a wave of two calls whose first result is offloaded, and a
    context_changed on the todo region recording its sizes."""
    mem = MemLedger()
    seqs: dict[str, int] = {}

    def line(name: str, kind: str, data: dict[str, Any], who: str = "agent") -> None:
        (rec,) = mem.append([Draft(RUN, who, kind, data)])
        seqs[name] = rec.seq

    line(
        "start",
        "run_started",
        {"task": "count", "goal": "", "skills": [], "opening": "with_person"},
        "person",
    )
    prefix = {
        "segments": [
            {"slot": "workspace", "hash": "a" * 64, "len": 400},
            {"slot": "room", "hash": "b" * 64, "len": 100},
        ],
        "tools": {"hash": "c" * 64, "bytes": 1500},
        "breakpoints": [],
    }
    line("assembled", "prompt_assembled", prefix)
    line("compared1", "prompt_shape_compared", {})
    line("called1", "model_called", {"model": "x", "request": {"hash": "d" * 64, "bytes": 4000}})
    reply = {
        "message": {
            "content": [
                {"kind": "tool_use", "id": "c1", "name": "read_file", "input": "{}"},
                {"kind": "tool_use", "id": "c2", "name": "list_dir", "input": "{}"},
            ]
        },
        "calls": 2,
        "usage": {"input": 900, "output": 10, "cache_read": 100},
    }
    line("returned1", "model_returned", reply)
    line("called_tool", "tool_called", {"id": "c1", "name": "read_file", "args": {}})
    line("result", "tool_result", {"tool_use_id": "c1", "name": "read_file", "result": {"text": "z" * 3000}})
    line(
        "offloaded",
        "result_offloaded",
        {"tool_use_id": "c1", "locator": "cas:b3-" + "e" * 64, "bytes": 3013, "head": "z" * 64},
    )
    line("called_tool2", "tool_called", {"id": "c2", "name": "list_dir", "args": {}})
    line("result2", "tool_result", {"tool_use_id": "c2", "name": "list_dir", "result": {"entries": []}})
    sizes = {
        "region": "todo",
        "cause": "context_tool",
        "added": ["x"],
        "removed": [],
        "token_delta": 3,
        "bytes_added": 40,
        "bytes_removed": 12,
        "tokens_added": 10,
        "tokens_removed": 3,
        "revision_before": 1,
        "revision_after": 2,
        "strategy_note": "kept",
    }
    line("changed", "context_changed", sizes, "runtime")
    line("compared2", "prompt_shape_compared", {})
    line("called2", "model_called", {"model": "x", "request": {"hash": "f" * 64, "bytes": 6000}})
    done = {
        "message": {"content": [{"kind": "text", "text": "done"}]},
        "calls": 0,
        "usage": {"input": 1407, "output": 5, "cache_write": 100},
    }
    line("returned2", "model_returned", done)
    return mem, seqs


def test_calibration_is_the_billed_ratio_per_mille_exact() -> None:
    mem, _ = _ledger()
    report = why(lines_of(mem.records), RUN)
    cal = report.calibration
    assert cal is not None
    # (900 + 100) + (1407 + 100) = 2507 tokens over 4000 + 6000 bytes: 250.7‰ rounds to 251‰
    assert (cal.per_mille, cal.bytes, cal.tokens, cal.samples) == (251, 10_000, 2507, 2)
    assert report.model == "x"
    system = report.region_bytes("system")
    assert system == 400 + 100 + 1500
    count = report.tokens_of(system)
    assert count == TokenCount((2000 * 251 + 999) // 1000, "calibrated", count.source) and count.tokens == 502
    assert "251‰" in count.source
    data = report.to_data()
    assert data["calibration"] == {"per_mille": 251, "bytes": 10_000, "tokens": 2507, "samples": 2}
    usage = {u["region"]: u for u in data["usage"]}  # type: ignore[attr-defined]
    assert usage["system"]["tokens"] == {"method": "calibrated", "source": count.source, "tokens": 502}
    assert usage["conversation"]["tokens"]["method"] == "calibrated"


def test_before_any_billed_call_the_figure_is_the_estimate() -> None:
    mem, seqs = _ledger()
    report = why(lines_of(mem.records), RUN, seqs["start"])
    assert report.calibration is None
    count = report.tokens_of(2001)
    assert (count.tokens, count.method, count.source) == (501, "estimate", "bytes/4")
    # the model comes from the run's first request after the cut
    assert report.model == "x" and report.next_request == (seqs["called1"], "d" * 64)


def test_budgets_with_a_custom_model_window() -> None:
    mem, _ = _ledger()
    models = merge_models({"x": {"context_window": 10_000, "max_output_tokens": 500}})
    report = why(lines_of(mem.records), RUN).with_window(ContextSettings(), models, output=800)
    w = report.window
    assert w is not None and w.limits == ModelLimits(10_000, 500)
    assert (w.output, w.output_from) == (500, "the run's max_tokens, capped by the model's max output")
    assert w.budgets is not None and w.budgets.input == 9_500
    assert dict(w.budgets.regions) == {
        "system": 1_900,
        "conversation": 6_175,
        "notes": 475,
        "todo": 475,
        "scratch": 475,
    }
    used = {u.region: u for u in report.regions_used()}
    assert used["system"].budget == 1_900 and used["system"].budget_permille == 200
    assert used["system"].window_permille == 502 * 1000 // 10_000
    # without the reply reserve given, the model's max output is reserved
    again = why(lines_of(mem.records), RUN).with_window(ContextSettings(), models)
    assert again.window is not None and (again.window.output, again.window.output_from) == (
        500,
        "the model's max output",
    )


def test_an_unknown_model_or_a_prefix_too_large_is_said_not_raised() -> None:
    mem, _ = _ledger()
    report = why(lines_of(mem.records), RUN).with_window(ContextSettings(), {})
    assert report.window is not None and report.window.budgets is None
    assert report.window.problem is not None and '[models."x"].context_window' in report.window.problem
    tiny = merge_models({"x": {"context_window": 2_000, "max_output_tokens": 100}})
    small = why(lines_of(mem.records), RUN).with_window(ContextSettings(), tiny)
    # a prefix larger than its system share: budgets (the difference taken from the
    # conversation, as the run loop does), and the reason said
    assert small.window is not None and small.window.budgets is not None
    assert small.window.problem is not None and "system budget" in small.window.problem
    assert small.window.budgets.conversation == min(1900 * 650 // 1000, 1900 - small.window.budgets.prefix)


def test_the_request_figure_names_its_method_and_where_it_was_sent() -> None:
    mem, seqs = _ledger()
    report = why(lines_of(mem.records), RUN, seqs["start"])
    body = b'{"model":"x"}'
    estimated = report.with_request("anthropic", body, fallback="no tokenizer here")
    assert estimated.request is not None
    assert estimated.request.tokens == TokenCount(4, "estimate", "bytes/4", "no tokenizer here")
    assert estimated.request.sent_at is None  # the recorded hash is not this body's
    counted = report.with_request("openai-chat", body, TokenCount(7, "tokenizer", "o200k_base"))
    assert counted.request is not None and counted.request.to_data()["tokens"] == {
        "method": "tokenizer",
        "source": "o200k_base",
        "tokens": 7,
    }


def test_recorded_sizes_of_region_and_offload_lines() -> None:
    mem, seqs = _ledger()
    report = why(lines_of(mem.records), RUN)
    changed = next(c for c in report.changes if c.seq == seqs["changed"])
    assert (changed.region, changed.cause, changed.bytes, changed.recorded_tokens) == (
        "todo",
        "context_tool",
        28,
        7,
    )
    assert dict(changed.sizes) == {
        "bytes_added": 40,
        "bytes_removed": 12,
        "tokens_added": 10,
        "tokens_removed": 3,
        "revision_before": 1,
        "revision_after": 2,
    }
    assert "revision 1→2" in changed.what
    off = next(c for c in report.changes if c.seq == seqs["offloaded"])
    assert (off.region, off.cause, off.source_seq, off.bytes) == (
        "conversation",
        Cause.TOOL_RESULT,
        seqs["result"],
        0,
    )
    assert dict(off.sizes) == {"bytes": 3013, "head_bytes": 64}
    # the window holds the head and the locator, never the full result
    result = next(p for p in report.parts if p.kind == "tool_result" and p.seq == seqs["result"])
    assert result.bytes < 3013
    data = report.to_data()["changes"]
    assert any(c["tokens_recorded"] == 7 for c in data)  # type: ignore[attr-defined]
