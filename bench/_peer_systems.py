"""The systems `peers.py` drives, each through the same scripted agent, run in a child process.

Every system answers from the same zero-latency script (N turns of two concurrent read-only tool
calls with ~500-byte results, then a closing reply) and calls `Probe.call(k)` when its model is
asked for reply k; the probe takes the marks and, at the last turn's model call, writes the
figures and kills its own process with SIGKILL. `resume_*` then runs in a fresh process: open
the stored history, continue it up to the first model call, and fork it at the middle turn up
to the first model call.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import agent_graph, last_window, scripted_chat_model, tree_bytes

TASK = "Read page k and note k at each turn k, then say finished."
FINAL_TEXT = "finished"
RESULT_BYTES = 500
FILLER = (
    "The ledger is the only history: every line is hashed into the next, so a run can be "
    "resumed, replayed or forked from any safe point without a second store. "
)


def _text(kind: str, i: int) -> str:
    head = f"{kind} {i}: "
    body = FILLER * (RESULT_BYTES // len(FILLER) + 1)
    return (head + body)[:RESULT_BYTES]


def read_page(page: int) -> str:
    """Return page `page` of the reference text (500 characters).

    Args:
        page: The page number.
    """
    return _text("page", page)


def read_note(note: int) -> str:
    """Return note `note` of the reading notes (500 characters).

    Args:
        note: The note number.
    """
    return _text("note", note)


TOOLS = (read_page, read_note)


def calls(i: int) -> list[tuple[str, str, dict[str, int]]]:
    """The two tool calls of turn `i` (0-based) as (call id, tool name, arguments)."""
    return [(f"toolu_{i:08d}a", "read_page", {"page": i}), (f"toolu_{i:08d}b", "read_note", {"note": i})]


def vm_hwm_kb() -> int:
    """This process's peak resident set size in kB (`VmHWM` of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


class Probe:
    """The marks of one measured run: `call(k)` at the start of model call k (k = 0..turns).

    At call `turns - m` (m = the last 10%) and at call `turns` it samples `payload()` (the bytes
    the system has stored for the run so far; the sampling time is taken out of the figures);
    at call `turns` it writes `run.json` into `out` and kills the process (SIGKILL), so the
    history is left as a crash at the last turn leaves it."""

    def __init__(self, turns: int, out: Path) -> None:
        self.turns = turns
        self.out = out
        self.m = last_window(turns)
        self.payload: Callable[[], int] = lambda: 0
        self.stored: Callable[[], int] = lambda: 0
        self.notes: dict[str, Any] = {}
        self.on_mid: Callable[[], None] = lambda: None
        self.server_cpu: Callable[[], float] = lambda: 0.0
        self.t0 = self.c0 = 0.0
        self.paused = 0.0
        self.paused_cpu = 0.0
        self.at_window: tuple[float, float, int] = (0.0, 0.0, 0)

    def cpu(self) -> float:
        """CPU seconds of this process (all threads) and of the database server serving it."""
        return time.process_time() + self.server_cpu()

    def start(self) -> None:
        self.t0, self.c0 = time.perf_counter(), self.cpu()

    def call(self, k: int) -> None:
        if k == self.turns // 2:
            self.on_mid()
        if k == self.turns - self.m:
            t, c = time.perf_counter(), self.cpu()
            b = self.payload()
            self.at_window = (t - self.paused, c - self.paused_cpu, b)
            self.paused += time.perf_counter() - t
            self.paused_cpu += self.cpu() - c
        if k < self.turns:
            return
        t1, c1 = time.perf_counter() - self.paused, self.cpu() - self.paused_cpu
        b1 = self.payload()
        tw, cw, bw = self.at_window
        n, m = self.turns, self.m
        result = {
            "turns": n,
            "wall_s": t1 - self.t0,
            "cpu_s": c1 - self.c0,
            "us_turn": (t1 - self.t0) / n * 1e6,
            "cpu_us_turn": (c1 - self.c0) / n * 1e6,
            "us_turn_last": (t1 - tw) / m * 1e6,
            "cpu_us_turn_last": (c1 - cw) / m * 1e6,
            "payload_bytes": b1,
            "bytes_turn_last": (b1 - bw) / m,
            "stored_bytes": self.stored(),
            "rss_kb": vm_hwm_kb(),
            "notes": self.notes,
        }
        (self.out / "run.json").write_text(json.dumps(result), encoding="utf-8")
        os.kill(os.getpid(), signal.SIGKILL)


class Ready:
    """The moment (time.time()) a system's model is first asked for a reply."""

    def __init__(self) -> None:
        self.at: float | None = None

    def call(self, k: int) -> None:
        if self.at is None:
            self.at = time.time()


def _files_bytes(*paths: Path) -> int:
    return sum(p.stat().st_size for p in paths if p.exists())


def _sqlite_files(db: Path) -> list[Path]:
    return [db, Path(f"{db}-wal"), Path(f"{db}-shm")]


def _sqlite_sum(db: Path, sql: str) -> int:
    with sqlite3.connect(str(db)) as conn:
        return int(conn.execute(sql).fetchone()[0] or 0)


# ---- runfold ----


def _runfold_provider(entries: list[dict[str, Any]], on_call: Callable[[int], None]) -> Any:
    from dataclasses import dataclass, field

    from runfold.providers.scripted import ScriptedProvider

    @dataclass
    class ProbedScript(ScriptedProvider):
        hook: Callable[[int], None] = field(default=lambda k: None)

        async def complete(self, request: Any, on_delta: Any = None) -> Any:
            self.hook(self.used)
            return await super().complete(request, on_delta)

    return ProbedScript(entries, keep_requests=False, hook=on_call)


def _runfold_script(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "content": [
                {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}
                for cid, name, args in calls(i)
            ]
        }
        for i in range(turns)
    ]
    return [*out, {"content": [{"kind": "text", "text": FINAL_TEXT}]}]


def _time_fdatasync(notes: dict[str, Any]) -> None:
    """Count the calls and seconds of `os.fdatasync` in this process into `notes` (`syncs`,
    `sync_s`): the ledger's own durable writes, measured in the run itself."""
    real = os.fdatasync
    notes.update(syncs=0, sync_s=0.0)

    def timed(fd: int) -> None:
        t = time.perf_counter()
        real(fd)
        notes["sync_s"] += time.perf_counter() - t
        notes["syncs"] += 1

    os.fdatasync = timed


async def run_runfold(turns: int, d: Path, probe: Probe) -> None:
    """`Workspace.arun` with a `ScriptedProvider` (file ledger, one fsync before each model
    call). Payload: the run's ledger lines (newlines included); stored: the `.runfold` tree."""
    from runfold.api import Workspace

    ws = Workspace.init(d / "ws")
    written = 0
    last_seq = [0]

    def on_event(rec: Any) -> None:
        nonlocal written
        written += len(rec.raw) + 1
        last_seq[0] = rec.seq
        probe.notes.setdefault("run", rec.env.run)

    probe.payload = lambda: written
    probe.stored = lambda: tree_bytes(d / "ws" / ".runfold")
    _time_fdatasync(probe.notes)
    probe.on_mid = lambda: probe.notes.__setitem__("mid_seq", last_seq[0])
    provider = _runfold_provider(_runfold_script(turns), probe.call)
    probe.start()
    await ws.arun(
        TASK, model=provider, tools=list(TOOLS), builtin_tools=False, max_turns=turns + 1, on_event=on_event
    )
    raise RuntimeError("the runfold run ended before its last turn")


async def resume_runfold(turns: int, d: Path, notes: dict[str, Any]) -> tuple[float, float]:
    """A new process opens the workspace and continues the killed run (its writer open resumes
    the ledger, freezing the dead run); then forks it at the middle turn. Each up to the first
    `complete` call. Returns (ready, fork seconds)."""
    from runfold.api import Workspace

    ws = Workspace.open(d / "ws")
    ready = await continue_runfold(ws, notes)
    t0 = time.time()
    return ready, await fork_runfold(ws, notes) - t0


_FINAL = [{"content": [{"kind": "text", "text": FINAL_TEXT}]}]


async def continue_runfold(ws: Any, notes: dict[str, Any]) -> float:
    """`arun(continues=run)` on the killed run; the moment its first request is handed over."""
    ready = Ready()
    provider = _runfold_provider(_FINAL, ready.call)
    await ws.arun("", continues=notes["run"], model=provider, tools=list(TOOLS), builtin_tools=False)
    assert ready.at is not None
    return ready.at


async def fork_runfold(ws: Any, notes: dict[str, Any]) -> float:
    """`arun(fork=(run, mid_seq))`; the moment the fork's first request is handed over."""
    ready = Ready()
    provider = _runfold_provider(_FINAL, ready.call)
    fork = (notes["run"], notes["mid_seq"])
    await ws.arun("", fork=fork, model=provider, tools=list(TOOLS), builtin_tools=False)
    assert ready.at is not None
    return ready.at


# ---- LangGraph ----


def _lg_reply(turns: int, on_call: Callable[[int], None]) -> Callable[[int, Any], Any]:
    from langchain_core.messages import AIMessage

    def reply(k: int, messages: Any) -> Any:
        on_call(k)
        if k < turns:
            tcs = [{"name": n, "args": a, "id": c, "type": "tool_call"} for c, n, a in calls(k)]
            return AIMessage(content="", tool_calls=tcs)
        return AIMessage(content=FINAL_TEXT)

    return reply


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _lg_saver(
    kind: str, d: Path, dsn: str | None
) -> tuple[Any, Callable[[], int], Callable[[], int], Callable[[], float]]:
    """(checkpointer, payload(), stored(), server_cpu()) for `sqlite` (a file DB) or `postgres`
    (database `dsn`; server_cpu: the CPU seconds of the server process serving the saver)."""
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        db = d / "langgraph.sqlite"
        conn = sqlite3.connect(str(db), check_same_thread=False)
        rows = (
            "SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints)"
            " + (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes)"
        )
        return (
            SqliteSaver(conn),
            lambda: _sqlite_sum(db, rows),
            lambda: _files_bytes(*_sqlite_files(db)),
            lambda: 0.0,
        )
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    assert dsn is not None
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)
    saver.setup()
    probe_conn = psycopg.connect(dsn, autocommit=True)
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations")

    def q(sql: str) -> int:
        row = probe_conn.execute(sql).fetchone()
        return int(row[0] or 0) if row else 0

    payload = (
        "SELECT (SELECT COALESCE(SUM(pg_column_size(checkpoint) + pg_column_size(metadata)), 0) FROM checkpoints)"
        " + (SELECT COALESCE(SUM(pg_column_size(blob)), 0) FROM checkpoint_blobs)"
        " + (SELECT COALESCE(SUM(pg_column_size(blob)), 0) FROM checkpoint_writes)"
    )
    stored = "SELECT " + " + ".join(f"pg_total_relation_size('{t}')" for t in tables)
    backend = conn.info.backend_pid
    return saver, lambda: q(payload), lambda: q(stored), lambda: _proc_cpu(backend)


def run_langgraph(kind: str, turns: int, d: Path, probe: Probe, dsn: str | None) -> None:
    """The standard tool-calling agent graph (`_common.agent_graph`) with `SqliteSaver` or
    `PostgresSaver`, run by one `stream` call; the checkpointer persists every super-step
    before the next starts (`durability="sync"`: the default `async` writes in the background and
    a SIGKILL loses the steps not yet written, where every other system here has each turn
    durable before the next model call). Payload: the checkpoint and write rows' bytes."""
    from langchain_core.messages import HumanMessage

    saver, probe.payload, probe.stored, probe.server_cpu = _lg_saver(kind, d, dsn)
    app = agent_graph(scripted_chat_model(_lg_reply(turns, probe.call)), TOOLS).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * turns + 10}
    probe.start()
    for _ in app.stream({"messages": [HumanMessage(TASK)]}, config, stream_mode="updates", durability="sync"):
        pass
    raise RuntimeError("the LangGraph run ended before its last turn")


def resume_langgraph(kind: str, turns: int, d: Path, dsn: str | None) -> tuple[float, float]:
    """A new process opens the checkpointer and `invoke(None, config)` resumes the thread from
    its latest checkpoint; then `get_state_history` (filtered on the step) finds the checkpoint
    after the middle turn's tools and `invoke(None, that config)` forks from it. Each up to the
    first model call."""
    saver, _, _, _ = _lg_saver(kind, d, dsn)
    ready = Ready()
    fork_ready = Ready()
    which = [ready]
    reply = _lg_reply(0, lambda k: which[0].call(k))
    app = agent_graph(scripted_chat_model(reply), TOOLS).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * turns + 10}
    app.invoke(None, config, durability="sync")
    t0 = time.time()
    which[0] = fork_ready
    k = turns // 2
    mid = next(iter(app.get_state_history(config, filter={"step": 2 * k})))
    if len(mid.values["messages"]) != 1 + 3 * k or mid.next != ("agent",):
        raise RuntimeError(f"step {2 * k} is not the checkpoint after turn {k}: next {mid.next}")
    app.invoke(None, mid.config, durability="sync")
    assert ready.at is not None and fork_ready.at is not None
    return ready.at, fork_ready.at - t0


# ---- OpenAI Agents SDK ----


def _agents(turns: int, on_call: Callable[[int], None]) -> Any:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)

    class ScriptModel(Model):
        """Answers model call k from the script (no network)."""

        def __init__(self) -> None:
            self.k = 0

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            k = self.k
            self.k += 1
            on_call(k)
            out: list[Any]
            if k < turns:
                out = [
                    ResponseFunctionToolCall(
                        type="function_call",
                        id=f"fc_{c}",
                        call_id=c,
                        name=n,
                        arguments=json.dumps(a),
                        status="completed",
                    )
                    for c, n, a in calls(k)
                ]
            else:
                text = ResponseOutputText(type="output_text", text=FINAL_TEXT, annotations=[])
                out = [
                    ResponseOutputMessage(
                        id=f"msg_{k}", type="message", role="assistant", status="completed", content=[text]
                    )
                ]
            return ModelResponse(output=out, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark does not stream")

    return Agent(
        name="bench", instructions=TASK, model=ScriptModel(), tools=[function_tool(t) for t in TOOLS]
    )


async def run_agents(turns: int, d: Path, probe: Probe) -> None:
    """`Runner.run` with a `SQLiteSession` on a file DB (the SDK saves each turn's items).
    Payload: the session's item rows (`message_data`)."""
    from agents import RunConfig, Runner, SQLiteSession

    db = d / "agents.sqlite"
    agent = _agents(turns, probe.call)
    session = SQLiteSession("bench", db)
    probe.payload = lambda: _sqlite_sum(
        db, "SELECT COALESCE(SUM(LENGTH(message_data)), 0) FROM agent_messages"
    )
    probe.stored = lambda: _files_bytes(*_sqlite_files(db))
    probe.start()
    await Runner.run(
        agent, TASK, session=session, max_turns=turns + 5, run_config=RunConfig(tracing_disabled=True)
    )
    raise RuntimeError("the Agents SDK run ended before its last turn")


async def resume_agents(turns: int, d: Path) -> tuple[float, float]:
    """A new process opens the `SQLiteSession` and `Runner.run` continues it (the SDK loads the
    session's items into the next input); then the items are cut after the middle turn, written
    to a new session and run from there. Each up to the first model call."""
    from agents import RunConfig, Runner, SQLiteSession

    db = d / "agents.sqlite"
    ready = Ready()
    rc = RunConfig(tracing_disabled=True)
    await Runner.run(_agents(0, ready.call), "continue", session=SQLiteSession("bench", db), run_config=rc)
    t0 = time.time()
    fork_ready = Ready()
    items = await SQLiteSession("bench", db).get_items()
    k = turns // 2
    cut = items[: 1 + 4 * k]  # the task, then per turn two calls and two outputs
    if cut[-1].get("type") != "function_call_output" and k > 0:
        raise RuntimeError(f"item {4 * k} is not the middle turn's last tool output: {cut[-1]!r:.200}")
    fork = SQLiteSession("fork", db)
    await fork.add_items(cut)
    await Runner.run(_agents(0, fork_ready.call), "continue", session=fork, run_config=rc)
    assert ready.at is not None and fork_ready.at is not None
    return ready.at, fork_ready.at - t0


# ---- pydantic-ai ----


def _pydantic_agent(turns: int, on_call: Callable[[int], None]) -> Any:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    k = [0]

    def answer(messages: Any, info: Any) -> ModelResponse:
        i = k[0]
        k[0] += 1
        on_call(i)
        if i < turns:
            return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=c) for c, n, a in calls(i)])
        return ModelResponse(parts=[TextPart(FINAL_TEXT)])

    return Agent(FunctionModel(answer), instructions=TASK, tools=[Tool(t) for t in TOOLS])


def _save_json(path: Path, data: bytes) -> None:
    """Write `data` durably: a temp file, fsync, rename over `path`."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


async def run_pydantic(turns: int, d: Path, probe: Probe) -> None:
    """`Agent.iter` with a `FunctionModel`; before each model request the history so far
    (`all_messages()` plus the request: the last turn's tool returns) is written as JSON with
    `ModelMessagesTypeAdapter`, durably. Payload and stored: the JSON file's size."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai.usage import UsageLimits

    path = d / "history.json"
    agent = _pydantic_agent(turns, probe.call)
    probe.payload = probe.stored = lambda: _files_bytes(path)
    probe.start()
    async with agent.iter(TASK, usage_limits=UsageLimits(request_limit=None)) as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                _save_json(path, ModelMessagesTypeAdapter.dump_json([*run.all_messages(), node.request]))
    raise RuntimeError("the pydantic-ai run ended before its last turn")


async def resume_pydantic(turns: int, d: Path) -> tuple[float, float]:
    """A new process loads the JSON history (`ModelMessagesTypeAdapter.validate_json`) and
    `agent.run(message_history=...)` continues it; then the history is cut after the middle
    turn's tool returns and run from there. Each up to the first model call."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    ready = Ready()
    history = ModelMessagesTypeAdapter.validate_json((d / "history.json").read_bytes())
    await _pydantic_agent(0, ready.call).run(None, message_history=history)
    t0 = time.time()
    fork_ready = Ready()
    history = ModelMessagesTypeAdapter.validate_json((d / "history.json").read_bytes())
    k = turns // 2
    cut = history[: 1 + 2 * k]  # the task, then per turn a response and a request of returns
    if k and cut[-1].parts[0].part_kind != "tool-return":
        raise RuntimeError(f"message {2 * k} is not the middle turn's tool returns")
    await _pydantic_agent(0, fork_ready.call).run(None, message_history=cut)
    assert ready.at is not None and fork_ready.at is not None
    return ready.at, fork_ready.at - t0
