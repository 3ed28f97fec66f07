"""Replay (DESIGN.md §7), the frozen prefix document, SPEC parsing, pricing and the cost fold."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from rt_support import call, check_finished, run_lines, text

from runfold.api import Workspace
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.locator import CasLocator
from runfold.core.payloads import PromptAssembled
from runfold.core.render import SystemSegment, ToolSpec
from runfold.providers.base import CallSettings, Usage
from runfold.providers.registry import SPEC_FORMS, parse_spec
from runfold.providers.scripted import ScriptedProvider, load_script
from runfold.runtime import Prefix, build_prefix, parse_prices, replay_run
from runfold.runtime.pricing import Price
from runfold.store.cas import Cas

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def finished_run(ws: Workspace) -> Any:
    p = ScriptedProvider.of([call("a", "read_file", {"path": "notes.txt"}), text("ok")])
    out = ws.run("read it", model=p)
    check_finished(ws, out)
    return out


def stored_prefix(ws: Workspace, run: str) -> tuple[str, bytes]:
    pa = next(r for r in run_lines(ws, run) if r.kind_name == "prompt_assembled").typed(PromptAssembled)
    assert pa.prefix is not None
    digest = pa.prefix.removeprefix("cas:b3-")
    return digest, Cas(ws.root).get(digest)


def test_replay_reports_the_first_request_that_differs_and_where(ws: Workspace) -> None:
    out = finished_run(ws)
    _, doc = stored_prefix(ws, out.run_id)
    lines = ws.lineage_lines(out.run_id)

    def load_with(changed: dict[str, Any]) -> Any:
        obj = {**orjson.loads(doc), **changed}
        return lambda loc: orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)

    same_len = replay_run(lines, out.run_id, load_with({"max_tokens": 4097}))
    assert not same_len.ok and same_len.exact == 0 and same_len.requests == 2
    first = same_len.first_mismatch
    assert first is not None and first.seq == run_lines(ws, out.run_id)[3].seq
    assert "same length" in first.where and first.expected != first.rebuilt
    assert "0/2 requests byte-exact; first mismatch at seq" in same_len.summary()

    longer = replay_run(lines, out.run_id, load_with({"max_tokens": 100000}))
    assert longer.first_mismatch is not None and "bytes" in longer.first_mismatch.where

    moved = orjson.loads(doc)
    moved["system"][0]["text"] = "Another system text."
    edited = replay_run(lines, out.run_id, lambda loc: orjson.dumps(moved, option=orjson.OPT_SORT_KEYS))
    assert edited.first_mismatch is not None
    assert (
        "does not match prompt_assembled" in edited.first_mismatch.where
        and "workspace" in edited.first_mismatch.where
    )

    assert replay_run(lines, out.run_id, lambda loc: doc).ok


def test_replay_works_offline_after_the_tool_changed_and_refuses_a_missing_prefix(ws: Workspace) -> None:
    def probe(q: str) -> dict[str, Any]:
        """Version one of a tool.

        Args:
            q: A query.
        """
        return {"q": q}

    p = ScriptedProvider.of([call("a", "probe", {"q": "x"}), text("ok")])
    out = ws.run("probe", model=p, tools=[probe], builtin_tools=False)
    probe.__doc__ = "Version two: the source changed since the run."
    assert ws.replay(out.run_id).ok  # the prefix comes from the CAS, not from the function
    digest, _ = stored_prefix(ws, out.run_id)
    shutil.move(Cas(ws.root).path(digest), ws.root / "moved-away")
    with pytest.raises(RunfoldError) as err:
        ws.replay(out.run_id)
    assert err.value.code is ErrorCode.PATH_NOT_FOUND


def test_replay_never_writes(ws: Workspace) -> None:
    out = finished_run(ws)
    before = [f.stat().st_size for f in sorted((ws.root / ".runfold" / "ledger").iterdir())]
    ws.replay(out.run_id)
    assert [f.stat().st_size for f in sorted((ws.root / ".runfold" / "ledger").iterdir())] == before


def test_replay_of_a_foreign_ledger_reports_requests_it_cannot_check() -> None:
    fixture = FIXTURES / "sprawling-golden-p0.jsonl"
    ws = Workspace.open(fixture)
    (run,) = ws.runs()
    report = ws.replay(run)
    assert report.requests == 0 and report.exact == 0 and len(report.skipped) == 3
    assert report.first_mismatch is None and "0/0 requests byte-exact; 3 not checkable" == report.summary()


def test_prefix_document_round_trips_and_checks_segments() -> None:
    tools = [
        ToolSpec("t", "a tool", {"type": "object", "properties": {"x": {"type": "number", "default": 0.5}}})
    ]
    settings = CallSettings(max_tokens=77)
    p = build_prefix(
        dialect="openai-chat", model="m", tools=tools, room="lab/r1", goal="win", settings=settings
    )
    again = Prefix.load(p.document())
    assert again == p and again.document() == p.document()
    assert [s.slot for s in p.segments()] == ["workspace", "room", "run"]
    assert p.cache_key is not None and p.cache_key.startswith("rf-")
    same = build_prefix(
        dialect="openai-chat",
        model="m",
        tools=tools,
        room="lab/r1",
        goal="win",
        settings=settings,
    )
    assert same.cache_key == p.cache_key  # stable across runs with the same prefix
    p.check_against(p.segments(), p.tools_ref(), "here")
    other = Prefix(dialect="openai-chat", model="m", system=(SystemSegment("workspace", "changed"),))
    with pytest.raises(RunfoldError) as err:
        other.check_against(p.segments(), None, "run x")
    assert err.value.code is ErrorCode.WIRE_MISMATCH
    with pytest.raises(RunfoldError) as bad:
        Prefix.load(b'{"format":1}', "cas:b3-00")
    assert bad.value.code is ErrorCode.LEDGER_CORRUPT and "cas:b3-00" in bad.value.subject


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("local", ("local", "", None)),
        ("anthropic:claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5", None)),
        ("openai:gpt-4.1", ("openai", "gpt-4.1", None)),
        ("openai-responses:o4-mini", ("openai-responses", "o4-mini", None)),
        (
            "openai-compat:llama3@http://localhost:11434/v1",
            ("openai-compat", "llama3", "http://localhost:11434/v1"),
        ),
        ("script:replies.jsonl", ("script", "replies.jsonl", None)),
        ("script:r.jsonl#openai-responses", ("script", "r.jsonl", "openai-responses")),
    ],
)
def test_spec_forms_parse(spec: str, parsed: tuple[str, str, str | None]) -> None:
    assert parse_spec(spec) == parsed


def test_bad_specs_list_the_valid_forms() -> None:
    for bad in ("", "gpt-4", "mistral:large", "openai-compat:m", "script:"):
        with pytest.raises(RunfoldError) as err:
            parse_spec(bad)
        assert err.value.code is ErrorCode.INVALID_ARGS
        assert err.value.nearby == SPEC_FORMS


def test_script_files_name_the_bad_line(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text('{"content": []}\n{"content": [{"kind": "tool_result"}]}\n')
    with pytest.raises(RunfoldError) as err:
        load_script(f)
    assert f"{f}:2" in err.value.subject
    with pytest.raises(RunfoldError) as missing:
        load_script(tmp_path / "nope.jsonl")
    assert missing.value.code is ErrorCode.PATH_NOT_FOUND


def test_prices_bill_micro_usd_and_unknown_stays_unknown(ws: Workspace) -> None:
    price = Price(input=3_000_000, output=15_000_000, cache_read=300_000, cache_write=3_750_000)
    usage = Usage(input=1000, output=200, cache_read=10_000, cache_write=0)
    assert price.cost(usage) == 3000 + 3000 + 3000
    assert price.cache_savings(usage) == 10_000 * (3_000_000 - 300_000) // 1_000_000
    (ws.root / ".runfold" / "config.toml").write_text(
        '[prices."priced-model"]\ninput_usd_micros_per_mtok = 1000000\noutput_usd_micros_per_mtok = 2000000\n'
    )
    priced = ScriptedProvider.of([text("hi", usage={"input": 1000, "output": 500})], model="priced-model")
    out = ws.run("x", model=priced)
    assert out.billed_usd_micros == 1000 + 1000
    assert run_lines(ws, out.run_id)[4].env.data["billed_usd_micros"] == 2000
    unknown = ScriptedProvider.of([text("hi", usage={"input": 10, "output": 5})], model="mystery-model-x")
    out2 = ws.run("y", model=unknown)
    assert out2.billed_usd_micros is None
    assert "billed_usd_micros" not in run_lines(ws, out2.run_id)[4].env.data
    report = ws.cost()
    by_model = {row.key: row for row in report.models}
    assert by_model["priced-model"].billed_usd_micros == 2000
    assert by_model["mystery-model-x"].billed_usd_micros is None  # never shown as zero
    assert report.total.billed_usd_micros is None
    assert ws.cost(out.run_id).total.billed_usd_micros == 2000


def test_cost_by_tool_and_bad_price_tables(ws: Workspace) -> None:
    out = ws.run(
        "x",
        model=ScriptedProvider.of(
            [call("a", "read_file", {"path": "notes.txt"}), call("b", "nope", {}), text("ok")]
        ),
    )
    tools = {t.name: t for t in ws.cost(out.run_id).tools}
    assert (
        tools["read_file"].calls == 1
        and tools["read_file"].errors == 0
        and tools["read_file"].result_bytes > 0
    )
    assert tools["nope"].errors == 1
    with pytest.raises(RunfoldError) as err:
        parse_prices({"m": {"input_usd_micros_per_mtok": 1.5, "output_usd_micros_per_mtok": 1}})
    assert err.value.code is ErrorCode.CONFIG_INVALID and "input_usd_micros_per_mtok" in err.value.subject
    (ws.root / ".runfold" / "config.toml").write_text("[defaults\nmodel=")
    with pytest.raises(RunfoldError) as cfg:
        ws.run("x", model=ScriptedProvider.of([text("hi")]))
    assert cfg.value.code is ErrorCode.CONFIG_INVALID and "config.toml" in cfg.value.subject


def test_config_defaults_choose_model_turn_ceiling_and_tools(ws: Workspace, tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text(
        "\n".join(
            orjson.dumps(e).decode()
            for e in [call("a", "list_dir", {}), call("b", "list_dir", {"path": "work"})]
        )
    )
    (ws.root / ".runfold" / "config.toml").write_text(
        f'[defaults]\nmodel = "script:{script}"\nmax_turns = 1\ntools = ["list_dir"]\n'
    )
    out = ws.run("look")
    assert out.completion == "limit" and out.turns == 1
    pa = next(r for r in run_lines(ws, out.run_id) if r.kind_name == "prompt_assembled").typed(
        PromptAssembled
    )
    assert pa.prefix is not None
    doc = orjson.loads(Cas(ws.root).get_locator(CasLocator(pa.prefix.removeprefix("cas:b3-"))))
    assert [t["name"] for t in doc["tools"]] == ["list_dir", "read_result"]  # the paging tool appended
    check_finished(ws, out)


def test_provider_settings_the_provider_does_not_take_are_a_config_error(
    ws: Workspace, tmp_path: Path
) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text(orjson.dumps(text("hi")).decode() + "\n")
    (ws.root / ".runfold" / "config.toml").write_text("[providers.script]\nwarp_speed = 9\n")
    with pytest.raises(RunfoldError) as err:
        ws.run("x", model=f"script:{script}")
    assert err.value.code is ErrorCode.CONFIG_INVALID and "warp_speed" in err.value.subject
