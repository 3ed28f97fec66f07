"""The field failures, one test each: the ways agent sessions break in practice.

Each ends with the same proof: every tool call has exactly one result before its run's
`run_frozen`, nothing of the run follows `run_frozen`, every request (and the tail a successor
would inherit) is valid in all three dialects and extends the one before it, and replay is
byte-exact. Where the person goes on, the next request is sent to the provider test server
through the official SDK and must be accepted.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from crash_support import cli, history_problems, rendered_requests, tail_problems

from provider_server import ProviderServer
from runfold.api import Workspace
from runfold.core.records import Record
from runfold.providers.scripted import ScriptedProvider
from runfold.runtime import RunChannels, RunInputs, RunLoop, RunOptions, build_prefix, tool_specs
from runfold.store.cas import Cas
from runfold.store.ledger import Ledger
from runfold.tools import ToolContext, builtin_registry, tool

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}


def _reply(*content: dict[str, Any], delay_ms: int = 0) -> dict[str, Any]:
    return {"content": list(content), "delay_ms": delay_ms}


def _text(t: str) -> dict[str, Any]:
    return {"kind": "text", "text": t}


def _sound(ws: Workspace) -> None:
    problems = history_problems(ws)
    for run in ws.runs():
        problems += tail_problems(ws, run)
        report = ws.replay(run)
        assert report.ok, report.summary()
    assert not problems, problems


def _results(ws: Workspace, run: str) -> dict[str, dict[str, Any]]:
    return {r.env.data["tool_use_id"]: r.env.data for r in ws.records(run=run, kind="tool_result")}


@pytest.fixture(scope="module")
def server() -> Any:
    with ProviderServer([]) as s:
        yield s


def _continue_through_sdk(root: Path, run: str, server: ProviderServer, *extra: str) -> str:
    """`runfold continue RUN ...` with an Anthropic model served by the provider test server;
    asserts the server accepted every request. Returns the successor's id."""
    seen = len(server.requests)
    server.push({"content": [{"kind": "text", "text": "understood, done"}]})
    res = cli(
        "continue",
        run,
        *extra,
        "--model",
        "anthropic:test-model",
        "--json",
        "-w",
        root,
        cwd=root,
        env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.anthropic_url},
    )
    got = server.requests[seen:]
    assert got and all(r.entry is not None and r.status == 200 for r in got), [
        (r.status, r.error) for r in got
    ]
    assert res.code == 0, res.out + res.err
    return str(json.loads(res.out)["run"])


# ---- a cancel during a three-call parallel wave, then the person's correction ----------------


def _cancelled_mid_wave(root: Path) -> tuple[Workspace, str]:
    """A wave of three calls (a read, a slow exec, a write after it); the person cancels while
    the exec runs. Returns the workspace and the cancelled run."""
    ws = Workspace.init(root)
    (root / "notes.txt").write_text("alpha\n", encoding="utf-8")
    wave = _reply(
        _text("three at once"),
        _use("w1", "read_file", {"path": "notes.txt"}),
        _use("w2", "exec", {"command": "sleep 30"}),
        _use("w3", "write_file", {"path": "out.txt", "content": "x"}),
    )

    async def main() -> str:
        cancel = asyncio.Event()

        def on_event(rec: Record) -> None:
            if rec.kind_name == "tool_called" and rec.env.data["id"] == "w2":
                asyncio.get_running_loop().call_later(0.2, cancel.set)

        out = await ws.arun(
            "tidy the notes",
            model=ScriptedProvider.of([wave, _reply(_text("never"))]),
            on_event=on_event,
            cancel=cancel,
        )
        assert out.completion == "cancelled", out.reason
        return out.run_id

    run = asyncio.run(main())
    results = _results(ws, run)
    assert results["w1"].get("result") is not None  # answered before the cancel: kept
    assert results["w2"]["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"  # cancelled mid-execution
    assert "not started: the run was cancelled before it ran" in results["w3"]["error"]["action"]
    assert not (root / "out.txt").exists()  # never started: answered, the wave is complete
    assert [r.env.data["id"] for r in ws.records(run=run, kind="tool_called")] == ["w1", "w2", "w3"]
    _sound(ws)
    return ws, run


def test_cancel_mid_wave_then_the_correction_as_a_new_task(tmp_path: Path, server: ProviderServer) -> None:
    root = tmp_path / "ws"
    ws, run = _cancelled_mid_wave(root)
    successor = _continue_through_sdk(root, run, server, "--task", "do not run sleep; just write out.txt")
    ws = Workspace.open(root)
    first = rendered_requests(ws, successor)[0].bodies["anthropic"]
    assert "do not run sleep" in json.dumps(first)
    _sound(ws)


def test_cancel_mid_wave_then_the_correction_as_a_steer(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    ws, run = _cancelled_mid_wave(root)

    async def main() -> str:
        steers: asyncio.Queue[str] = asyncio.Queue()
        steers.put_nowait("skip the sleep, it was a mistake")
        out = await ws.arun(
            "", continues=run, model=ScriptedProvider.of([_reply(_text("ok"))]), steers=steers
        )
        assert out.completion == "done", out.reason
        return out.run_id

    successor = asyncio.run(main())
    (first,) = rendered_requests(ws, successor)
    assert "skip the sleep" in json.dumps(first.bodies["anthropic"])
    _sound(ws)


# ---- a crash after the first of two parallel calls answered ---------------------------------


def test_crash_after_the_first_of_two_parallel_calls(tmp_path: Path, server: ProviderServer) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    script = tmp_path / "s.jsonl"
    wave = _reply(
        _use("p1", "write_file", {"path": "a.txt", "content": "first\n"}),
        _use("p2", "exec", {"command": "sleep 10"}),
    )
    script.write_text(json.dumps(wave) + "\n" + json.dumps(_reply(_text("never"))) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "two calls", "--model", f"script:{script}", "--events"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    acked: list[dict[str, Any]] = []
    for raw in proc.stdout:
        acked.append(json.loads(raw))
        if acked[-1]["kind"] == "tool_called" and sum(a["kind"] == "tool_called" for a in acked) == 2:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert [a["kind"] for a in acked][-3:] == ["tool_called", "tool_result", "tool_called"]
    assert (root / "a.txt").read_text() == "first\n"
    res = cli("resume", "--json", "-w", root, cwd=root)
    assert res.code == 0, res.out + res.err
    report = json.loads(res.out)
    assert [c["tool_use_id"] for c in report["closed"]] == ["p2"] and len(report["frozen"]) == 1
    ws = Workspace.open(root)
    for a in acked:
        assert ws.record_at(a["seq"]).hash == a["hash"]
    (run,) = ws.runs()
    results = _results(ws, run)
    assert results["p1"]["result"] is not None  # the answered call keeps its real result
    assert results["p2"]["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    _sound(ws)
    ws.close()
    _continue_through_sdk(root, run, server)
    _sound(Workspace.open(root))


# ---- a result that arrives after its run was cancelled ---------------------------------------


def test_a_call_finishing_after_the_cancel_gets_one_result_before_the_freeze(tmp_path: Path) -> None:
    """Two calls in flight when the person cancels: one a thread that cannot be stopped (it
    finishes and acts after the cancel), one that shields itself and answers late. Each gets
    exactly one terminal result before run_frozen; nothing of the run follows run_frozen, even
    once they have finished."""
    root = tmp_path / "ws"
    ws = Workspace.init(root)
    finished = threading.Event()

    @tool
    def stubborn(seconds: int) -> str:
        """Work that ignores cancellation (a thread).

        Args:
            seconds: how long to work, in tenths of a second.
        """
        time.sleep(seconds / 10)
        (root / "late.txt").write_text("acted after the cancel")
        finished.set()
        return "finished"

    @tool
    async def shielded(seconds: int) -> str:
        """Work that shields itself from cancellation and answers late.

        Args:
            seconds: how long to work, in tenths of a second.
        """
        await asyncio.shield(asyncio.sleep(seconds / 10))
        return "late answer"

    @tool
    async def finisher(seconds: int) -> str:
        """Work that, told to stop, finishes what it was doing and answers.

        Args:
            seconds: how long to work, in tenths of a second.
        """
        try:
            await asyncio.sleep(seconds / 10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)
            return "finished after the cancel"
        return "finished"

    wave = _reply(
        _use("s1", "stubborn", {"seconds": 3}),
        _use("s2", "shielded", {"seconds": 3}),
        _use("s3", "finisher", {"seconds": 30}),
    )

    async def main() -> str:
        cancel = asyncio.Event()

        def on_event(rec: Record) -> None:
            if rec.kind_name == "model_returned":
                asyncio.get_running_loop().call_later(0.05, cancel.set)

        out = await ws.arun(
            "work",
            model=ScriptedProvider.of([wave, _reply(_text("never"))]),
            tools=[stubborn, shielded, finisher],
            builtin_tools=False,
            on_event=on_event,
            cancel=cancel,
        )
        assert out.completion == "cancelled", out.reason
        return out.run_id

    run = asyncio.run(main())
    assert finished.wait(5)  # the thread finished, after the run was frozen
    time.sleep(0.1)
    ws = Workspace.open(root)
    lines = ws.records(run=run)
    kinds = [r.kind_name for r in lines]
    assert kinds[-1] == "run_frozen" and kinds.count("run_frozen") == 1
    results = _results(ws, run)
    assert set(results) == {"s1", "s2", "s3"}
    for data in results.values():
        assert ("error" in data) != ("result" in data)
    assert results["s1"]["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"  # still acting: unknown
    assert results["s2"]["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    assert "finished after the cancel" in json.dumps(results["s3"].get("result")), results["s3"]
    frozen_seq = lines[-1].seq
    assert all(r.seq <= frozen_seq for r in ws.records() if r.run == run)
    # a later run on the same workspace sees no stray line of the cancelled one
    asyncio.run(ws.arun("next", model=ScriptedProvider.of([_reply(_text("hi"))]), builtin_tools=False))
    assert [r.seq for r in Workspace.open(root).records(run=run)] == [r.seq for r in lines]
    _sound(Workspace.open(root))


# ---- a tool that raises, times out or is cancelled mid-execution -----------------------------


@tool
def breaks(what: str) -> str:
    """A tool that fails.

    Args:
        what: what to break.
    """
    raise RuntimeError(f"{what} broke")


@tool
async def hangs(seconds: int) -> str:
    """A tool that takes too long.

    Args:
        seconds: how long to take.
    """
    await asyncio.sleep(seconds)
    return "too late"


@tool
async def gives_up(n: int) -> str:
    """A tool that is cancelled from inside.

    Args:
        n: anything.
    """
    raise asyncio.CancelledError


def _loop(
    root: Path, entries: list[dict[str, Any]], timeout_s: int, cancel: asyncio.Event | None = None
) -> Any:
    Workspace.init(root).close()
    ledger = Ledger.open(root, writer=True)
    registry = builtin_registry([])
    for t in (breaks, hangs, gives_up):
        registry.add(t)
    prefix = build_prefix(
        dialect="anthropic", model="script", tools=tool_specs(registry.tool_table()), room=None
    )
    loop = RunLoop(
        RunInputs(
            ledger,
            Cas(root),
            ScriptedProvider.of(entries),
            registry,
            ToolContext(workspace=root, room=None, tool_timeout_s=timeout_s),
            prefix,
            RunOptions(task="try the tools"),
        ),
        RunChannels(cancel=cancel),
    )
    try:
        return asyncio.run(loop.run())
    finally:
        ledger.close()


def test_a_tool_that_raises_or_times_out_or_gives_up_gets_a_terminal_result(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    wave = _reply(
        _use("t1", "breaks", {"what": "the disk"}),
        _use("t2", "hangs", {"seconds": 30}),
        _use("t3", "gives_up", {"n": 1}),
    )
    out = _loop(root, [wave, _reply(_text("I saw three failures"))], timeout_s=1)
    assert out.completion == "done", out.reason
    ws = Workspace.open(root)
    codes = {k: v["error"]["code"] for k, v in _results(ws, out.run_id).items()}
    assert codes == {"t1": "E_TOOL_OUTCOME_UNKNOWN", "t2": "E_TIMEOUT", "t3": "E_TOOL_OUTCOME_UNKNOWN"}
    _sound(ws)


def test_a_tool_cancelled_mid_execution_gets_a_terminal_result(tmp_path: Path) -> None:
    root = tmp_path / "ws"

    async def run_it() -> Any:
        Workspace.init(root).close()
        ledger = Ledger.open(root, writer=True)
        registry = builtin_registry([])
        registry.add(hangs)
        prefix = build_prefix(
            dialect="anthropic", model="script", tools=tool_specs(registry.tool_table()), room=None
        )
        cancel = asyncio.Event()
        asyncio.get_running_loop().call_later(0.5, cancel.set)
        loop = RunLoop(
            RunInputs(
                ledger,
                Cas(root),
                ScriptedProvider.of([_reply(_use("h1", "hangs", {"seconds": 30})), _reply(_text("never"))]),
                registry,
                ToolContext(workspace=root, room=None),
                prefix,
                RunOptions(task="wait"),
            ),
            RunChannels(cancel=cancel),
        )
        try:
            return await loop.run()
        finally:
            ledger.close()

    out = asyncio.run(run_it())
    assert out.completion == "cancelled"
    ws = Workspace.open(root)
    assert _results(ws, out.run_id)["h1"]["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    kinds = [r.kind_name for r in ws.records(run=out.run_id)]
    assert kinds[-4:] == ["tool_result", "cancel_received", "handoff_written", "run_frozen"]
    _sound(ws)


# ---- a steer arriving between a reply and its wave -------------------------------------------


def test_a_steer_between_a_reply_and_its_wave(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    ws = Workspace.init(root)
    (root / "notes.txt").write_text("alpha\n", encoding="utf-8")
    wave = _reply(
        _use("r1", "read_file", {"path": "notes.txt"}),
        _use("r2", "write_file", {"path": "o.txt", "content": "1"}),
    )

    async def main() -> str:
        steers: asyncio.Queue[str] = asyncio.Queue()

        def on_event(rec: Record) -> None:
            if rec.kind_name == "model_returned" and rec.env.data["calls"] == 2:
                steers.put_nowait("use o.txt, not out.txt")

        out = await ws.arun(
            "copy the notes",
            model=ScriptedProvider.of([wave, _reply(_text("done as asked"))]),
            on_event=on_event,
            steers=steers,
        )
        assert out.completion == "done", out.reason
        return out.run_id

    run = asyncio.run(main())
    kinds = [r.kind_name for r in ws.records(run=run)]
    at = kinds.index("steer_received")
    assert kinds[at - 1] == "model_returned" and kinds[at + 1] == "tool_called"
    first, second = rendered_requests(ws, run)
    last_user = second.bodies["anthropic"]["messages"][-1]["content"]
    assert [b["type"] for b in last_user] == ["tool_result", "tool_result", "text"]
    assert "use o.txt" in last_user[-1]["text"]
    assert "use o.txt" not in json.dumps(first.bodies)
    _sound(ws)


# ---- two `runfold run` processes on one workspace ---------------------------------------------


def test_a_second_run_process_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    script = tmp_path / "slow.jsonl"
    script.write_text(json.dumps(_reply(_text("late"), delay_ms=60_000)) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    env["NO_COLOR"] = "1"
    cmd = [sys.executable, "-m", "runfold", "run"]
    first = subprocess.Popen(
        [*cmd, "first", "--model", f"script:{script}", "--events"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert first.stdout is not None
        for raw in first.stdout:
            if json.loads(raw)["kind"] == "model_called":
                break
        ledger_dir = root / ".runfold" / "ledger"
        before = {p.name: p.read_bytes() for p in ledger_dir.iterdir()}
        second = subprocess.run(
            [*cmd, "second", "--model", f"script:{script}", "--json"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 3, second.stdout + second.stderr
        error = json.loads(second.stdout)["error"]
        assert error["code"] == "E_LEDGER_HELD" and str(first.pid) in error["action"]
        assert {p.name: p.read_bytes() for p in ledger_dir.iterdir()} == before
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    ws = Workspace.open(root)
    assert [r.env.data["task"] for r in ws.records(kind="run_started")] == ["first"]
