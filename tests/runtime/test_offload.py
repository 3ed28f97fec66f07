"""Large tool results leave the window for the CAS and are paged back (DESIGN.md §10): the request
after an oversized result carries its head and locator, replay stays byte-exact, `read_result`
returns the exact bytes, and a missing CAS object is E_STORAGE_FATAL naming the locator."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from rt_support import call, calls, check_finished, kinds, run_lines, text

from runfold.api import Workspace
from runfold.core.canonical import content_hash, encode_json
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.fold import fold_run
from runfold.core.kinds import Kind
from runfold.core.offload import offloaded_content
from runfold.core.payloads import ResultOffloaded, ToolResult
from runfold.core.tool_result import tool_result_block
from runfold.providers.scripted import ScriptedProvider
from runfold.tools import Tool

OFFLOAD = 60_000
HEAD = 512
BIG = 100_000


def big(n: int = BIG, fill: str = "x") -> dict[str, Any]:
    """Return a large blob.

    Args:
        n: How many characters.
        fill: The character repeated.
    """
    return {"blob": fill * n}


def small() -> dict[str, Any]:
    """Return a small answer."""
    return {"ok": True}


@pytest.fixture
def off_ws(ws: Workspace) -> Workspace:
    cfg = ws.root / ".runfold" / "config.toml"
    # a window large enough that paging 60 KB pages back never calls for compaction (not tested here)
    cfg.write_text(
        cfg.read_text()
        + f"\n[context]\noffload_bytes = {OFFLOAD}\noffload_head_bytes = {HEAD}\n"
        + '\n[models."script"]\ncontext_window = 1000000\n'
    )
    return ws


def scripted(*entries: dict[str, Any]) -> ScriptedProvider:
    return ScriptedProvider.of(list(entries))


def data_of(ws: Workspace, run: str, kind: Kind) -> list[dict[str, Any]]:
    return [orjson.loads(r.raw)["data"] for r in run_lines(ws, run) if r.known and r.kind is kind]


def blob_path(ws: Workspace, locator: str) -> Path:
    digest = locator.removeprefix("cas:b3-")
    return ws.root / ".runfold" / "cas" / "b3" / digest[:2] / digest


def ledger_bytes(ws: Workspace) -> dict[str, bytes]:
    root = ws.root / ".runfold"
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*.jsonl"))
        if p.is_file()
    }


def full_content(ws: Workspace, run: str, call_id: str) -> str:
    for rec in run_lines(ws, run):
        if rec.known and rec.kind is Kind.TOOL_RESULT:
            result = rec.typed(ToolResult)
            if result.tool_use_id == call_id:
                return tool_result_block(result)["content"]
    raise AssertionError(call_id)


def test_an_oversized_result_reaches_the_next_request_as_head_and_locator(off_ws: Workspace) -> None:
    p = scripted(call("b1", "big", {}), text("done"))
    out = off_ws.run("get it", model=p, tools=[big], builtin_tools=False)
    assert out.completion == "done"
    names = kinds(off_ws, out.run_id)
    i = names.index("tool_called")
    assert names[i : i + 3] == ["tool_called", "result_offloaded", "tool_result"]
    content = full_content(off_ws, out.run_id, "b1")  # the ledger keeps every byte
    raw = content.encode()
    assert len(raw) > BIG
    (off,) = data_of(off_ws, out.run_id, Kind.RESULT_OFFLOADED)
    assert off["tool_use_id"] == "b1" and off["bytes"] == len(raw)
    assert raw.startswith(off["head"].encode()) and len(off["head"].encode()) == HEAD
    assert blob_path(off_ws, off["locator"]).read_bytes() == raw
    window = offloaded_content(ResultOffloaded(**{k: off[k] for k in ("tool_use_id", "locator", "head", "bytes")}))
    assert off["bytes_removed"] == len(raw) - len(window.encode())
    second = p.requests[1].body_bytes
    assert window.encode() in orjson.dumps(orjson.loads(second)) or orjson.dumps(window) in second
    assert b"x" * (HEAD + 1) not in second and len(second) < 5_000
    check_finished(off_ws, out)


def test_a_result_at_the_threshold_stays_in_the_window(off_ws: Workspace) -> None:
    # {"blob":"…"} is 11 bytes of frame: n = OFFLOAD - 11 is exactly offload_bytes, not larger
    p = scripted(call("b1", "big", {"n": OFFLOAD - 11}), text("done"))
    out = off_ws.run("get it", model=p, tools=[big], builtin_tools=False)
    assert "result_offloaded" not in kinds(off_ws, out.run_id)
    assert len(full_content(off_ws, out.run_id, "b1").encode()) == OFFLOAD
    assert b"x" * (OFFLOAD - 11) in p.requests[1].body_bytes
    check_finished(off_ws, out)


def test_the_model_pages_the_result_back_in_two_reads(off_ws: Workspace) -> None:
    p = scripted(
        # 2 bytes a character after the 9-byte `{"blob":"`: the first page stops a byte short
        call("b1", "big", {"n": BIG // 2, "fill": "é"}),
        call("r1", "read_result", {"key": "b1"}),
        call("r2", "read_result", {"key": "b1", "offset": OFFLOAD - 1}),
        text("read it all"),
    )
    out = off_ws.run("get it", model=p, tools=[big], builtin_tools=["read_result"])
    assert out.completion == "done", out.reason
    raw = full_content(off_ws, out.run_id, "b1").encode()
    pages = [orjson.loads(full_content(off_ws, out.run_id, cid)) for cid in ("r1", "r2")]
    assert pages[0]["offset"] == 0 and pages[0]["next_offset"] == pages[1]["offset"] == OFFLOAD - 1
    assert "next_offset" not in pages[1] and pages[1]["bytes"] == len(raw)
    assert (pages[0]["content"] + pages[1]["content"]).encode() == raw
    assert len(data_of(off_ws, out.run_id, Kind.RESULT_OFFLOADED)) == 1  # pages are never offloaded
    check_finished(off_ws, out)


def test_a_page_past_the_end_names_the_size(off_ws: Workspace) -> None:
    p = scripted(
        call("b1", "big", {}),
        call("r1", "read_result", {"key": "b1", "offset": 10 * BIG}),
        call("r2", "read_result", {"key": "nope"}),
        text("ok"),
    )
    out = off_ws.run("get it", model=p, tools=[big], builtin_tools=["read_result"])
    size = len(full_content(off_ws, out.run_id, "b1").encode())
    errors = {d["tool_use_id"]: d["error"] for d in data_of(off_ws, out.run_id, Kind.TOOL_RESULT) if "error" in d}
    assert errors["r1"]["code"] == "E_INVALID_ARGS" and f"has {size} bytes" in errors["r1"]["recovery"]
    assert errors["r2"]["code"] == "E_INVALID_ARGS" and "b1" in errors["r2"]["recovery"]
    check_finished(off_ws, out)


def test_a_missing_blob_is_storage_fatal_at_paging_replay_and_fork_and_nothing_is_rewritten(
    off_ws: Workspace,
) -> None:
    where: dict[str, Path] = {}

    def drop() -> dict[str, Any]:
        """Delete the stored blob."""
        where["blob"].chmod(0o644)
        where["blob"].unlink()
        return {"dropped": True}

    def seen(rec: Any) -> None:
        if rec.kind_name == "result_offloaded":
            where["blob"] = blob_path(off_ws, orjson.loads(rec.raw)["data"]["locator"])

    p = scripted(
        call("b1", "big", {}),
        call("d1", "drop", {}),
        call("r1", "read_result", {"key": "b1"}),
        text("lost it"),
    )
    out = off_ws.run("get it", model=p, tools=[big, drop], builtin_tools=["read_result"], on_event=seen)
    (off,) = data_of(off_ws, out.run_id, Kind.RESULT_OFFLOADED)
    err = next(d["error"] for d in data_of(off_ws, out.run_id, Kind.TOOL_RESULT) if d["tool_use_id"] == "r1")
    assert err["code"] == "E_STORAGE_FATAL" and err["subject"] == off["locator"]
    before = ledger_bytes(off_ws)
    with pytest.raises(RunfoldError) as replayed:
        off_ws.replay(out.run_id)
    assert replayed.value.code is ErrorCode.STORAGE_FATAL and replayed.value.subject == off["locator"]
    at = next(r.seq for r in run_lines(off_ws, out.run_id) if r.kind_name == "tool_result")
    with pytest.raises(RunfoldError) as forked:
        asyncio.run(off_ws.arun("go on", model=scripted(text("x")), fork=(out.run_id, at)))
    assert forked.value.code is ErrorCode.STORAGE_FATAL and forked.value.subject == off["locator"]
    with pytest.raises(RunfoldError) as planned:
        off_ws.fork(out.run_id, at)
    assert planned.value.code is ErrorCode.STORAGE_FATAL and off["locator"] in planned.value.display()
    assert ledger_bytes(off_ws) == before  # the ledger's bytes are unchanged


def test_a_parallel_wave_of_two_oversized_and_one_small_result_writes_what_a_serial_run_writes(
    off_ws: Workspace, tmp_path: Path
) -> None:
    wave = calls([("a", "big", {"fill": "a"}), ("b", "small", {}), ("c", "big", {"fill": "c"})])

    def run(ws: Workspace, effect: str) -> tuple[list[str], list[bytes]]:
        tools = [Tool.from_function(big, effect=effect), Tool.from_function(small, effect=effect)]
        out = ws.run("get them", model=scripted(wave, text("done")), tools=tools, builtin_tools=False)
        check_finished(ws, out)
        lines = [r for r in run_lines(ws, out.run_id) if r.kind_name in ("tool_called", "result_offloaded", "tool_result")]
        shapes = [f"{r.kind_name}:{orjson.loads(r.raw)['data'].get('tool_use_id') or orjson.loads(r.raw)['data']['id']}" for r in lines]
        payloads = [
            orjson.dumps({k: v for k, v in orjson.loads(r.raw)["data"].items() if k != "took_us"})
            for r in lines
            if r.kind_name != "tool_called"
        ]
        return shapes, payloads

    parallel = run(off_ws, "read")
    serial_ws = Workspace.init(tmp_path / "serial")
    (serial_ws.root / ".runfold" / "config.toml").write_text(
        (off_ws.root / ".runfold" / "config.toml").read_text()
    )
    serial = run(serial_ws, "write")
    assert parallel[0] == [
        "tool_called:a", "result_offloaded:a", "tool_result:a",
        "tool_called:b", "tool_result:b",
        "tool_called:c", "result_offloaded:c", "tool_result:c",
    ]
    assert parallel == serial


def test_a_fork_before_the_offload_has_no_result_and_one_after_pages_it_back(off_ws: Workspace) -> None:
    p = scripted(text("hello"), call("b1", "big", {}), text("done"))
    first = off_ws.run("say hi", model=p, tools=[big], builtin_tools=["read_result"])
    assert first.completion == "done"
    out = off_ws.run("get it", model=scripted(call("b1", "big", {}), text("done")), tools=[big], builtin_tools=["read_result"])
    lines = run_lines(off_ws, out.run_id)
    called = next(r.seq for r in lines if r.kind_name == "tool_called")
    result = next(r.seq for r in lines if r.kind_name == "tool_result")
    before = fold_run(off_ws.lineage_lines(out.run_id), out.run_id, called)
    assert all(b["kind"] != "tool_result" for m in before.messages for b in m["content"])
    after = fold_run(off_ws.lineage_lines(out.run_id), out.run_id, result)
    shown = [b["content"] for m in after.messages for b in m["content"] if b["kind"] == "tool_result"]
    assert len(shown) == 1 and '"note":"result offloaded"' in shown[0]
    child = asyncio.run(
        off_ws.arun(
            "read it",
            model=scripted(call("r1", "read_result", {"key": "b1"}), text("ok")),
            tools=[big],
            builtin_tools=["read_result"],
            fork=(out.run_id, result),
        )
    )
    assert child.completion == "done", child.reason
    page = orjson.loads(full_content(off_ws, child.run_id, "r1"))
    assert page["content"].encode() == full_content(off_ws, out.run_id, "b1").encode()[:OFFLOAD]
    check_finished(off_ws, child)


def test_a_byte_range_locator_reads_that_range_and_a_damaged_object_is_refused(off_ws: Workspace) -> None:
    content = encode_json({"blob": "x" * BIG})
    locator = "cas:b3-" + content_hash(content)

    def damage() -> dict[str, Any]:
        """Overwrite the stored blob."""
        path = blob_path(off_ws, locator)
        path.chmod(0o644)
        path.write_bytes(b"y" * len(content))
        return {"damaged": True}

    p = scripted(
        call("b1", "big", {}),
        call("r1", "read_result", {"key": f"{locator}#B2-9"}),
        call("r2", "read_result", {"key": f"{locator}#B0-{len(content)}"}),
        call("d1", "damage", {}),
        call("r3", "read_result", {"key": "b1"}),
        text("ok"),
    )
    out = off_ws.run("get it", model=p, tools=[big, damage], builtin_tools=["read_result"])
    page = orjson.loads(full_content(off_ws, out.run_id, "r1"))
    assert page["content"].encode() == content[2:10] and page["tool_use_id"] == "b1"
    errors = {d["tool_use_id"]: d["error"] for d in data_of(off_ws, out.run_id, Kind.TOOL_RESULT) if "error" in d}
    assert errors["r2"]["code"] == "E_INVALID_ARGS" and f"has {len(content)} bytes" in errors["r2"]["recovery"]
    assert errors["r3"]["code"] == "E_LEDGER_CORRUPT"  # the hash is re-verified on every read
