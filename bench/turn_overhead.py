"""Benchmark of runfold's own cost per agent turn next to LangGraph with `SqliteSaver`.

A zero-latency scripted model drives N turns of one trivial read-only tool call each (`echo`,
returning its argument), then a closing text reply, through both systems in this one process on
this one machine; we measure wall time per turn and bytes stored per turn at several history
sizes, with the marginal figures of the last 10% of turns so growth with history shows.

Usage: python bench/turn_overhead.py [--quick] [--skip-langgraph] [--sizes 10,100,1000]
[--lg-durability async|sync|exit] [--json FILE]. LangGraph is optional (bench/requirements-langgraph.txt);
without it only the runfold half runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _common import agent_graph, fmt_bytes, marginal, missing_modules, scripted_chat_model, tree_bytes
from runfold.api import Workspace
from runfold.core.records import Record

SIZES = (10, 100, 1000)
QUICK_SIZES = (10, 100)
TASK = "Echo each turn's word back, then say finished."
FINAL_TEXT = "finished"
TOOL_NAME = "echo"


def echo(text: str) -> str:
    """Return the text it was given, unchanged.

    Args:
        text: The text to echo back.
    """
    return text


def tool_args(i: int) -> dict[str, str]:
    """The arguments of the tool call of turn `i` (0-based), the same for both systems."""
    return {"text": f"turn {i}"}


def call_id(i: int) -> str:
    """The tool call id of turn `i`, the same for both systems (Anthropic-style id)."""
    return f"toolu_{i:08d}"


def script_entries(turns: int) -> list[dict[str, Any]]:
    """The scripted replies in runfold's internal message form (providers/scripted.py): `turns`
    replies with one `echo` tool call each, then one text reply."""
    out: list[dict[str, Any]] = [
        {
            "content": [
                {"kind": "tool_use", "id": call_id(i), "name": TOOL_NAME, "input": json.dumps(tool_args(i))}
            ]
        }
        for i in range(turns)
    ]
    out.append({"content": [{"kind": "text", "text": FINAL_TEXT}]})
    return out


@dataclass
class Measure:
    """One run of one system at one history size.

    Times in µs per turn, sizes in bytes; `total_s` is wall time, `cpu_s` the process's CPU time
    (all threads) over the same span: on a shared machine the wall time includes waiting for a
    core, the CPU time does not (neither includes the other's time: the systems run one after
    the other). `*_last` are the marginal figures over the last 10% of
    the tool turns (at least one turn). `stored_bytes`: everything the system keeps on disk for
    the run (runfold: the whole `.runfold` directory — ledger, CAS, index, config; LangGraph: the
    SQLite file plus any WAL left after its connection closed); `bytes_per_turn` =
    `stored_bytes / turns` for LangGraph and the run's ledger bytes / turns for runfold.
    `written_bytes` and `bytes_per_turn_last`: runfold: the ledger bytes of the run's own lines
    (newlines included); LangGraph: the bytes of its checkpoint and write rows (blobs + metadata),
    since SQLite's file size does not show per-turn growth."""

    system: str
    turns: int
    total_s: float
    cpu_s: float
    us_per_turn: float
    us_per_turn_last: float
    stored_bytes: int
    bytes_per_turn: float
    bytes_per_turn_last: float
    written_bytes: int
    notes: dict[str, Any] = field(default_factory=dict)


# ---- runfold ----


async def measure_runfold(turns: int, root: Path) -> Measure:
    """Run `turns` one-tool turns through `Workspace.arun` with model `script:<file>`, the `echo`
    tool registered through the API and the built-in tools off, in a fresh workspace under
    `root`. The run must end `done` with `turns` tool calls, else RuntimeError."""
    script = root / f"script-{turns}.jsonl"
    script.write_text("".join(json.dumps(e) + "\n" for e in script_entries(turns)), encoding="utf-8")
    ws_dir = root / f"runfold-{turns}"
    ws_dir.mkdir()
    ws = Workspace.init(ws_dir)
    marks: list[tuple[int, int]] = []
    written = 0

    def on_event(rec: Record) -> None:
        nonlocal written
        if rec.kind_name == "prompt_shape_compared":
            marks.append((time.perf_counter_ns(), written))
        written += len(rec.raw) + 1

    c0 = time.process_time()
    t0 = time.perf_counter_ns()
    out = await ws.arun(
        TASK,
        model=f"script:{script}",
        tools=[echo],
        builtin_tools=False,
        max_turns=turns + 1,
        on_event=on_event,
    )
    total_ns = time.perf_counter_ns() - t0
    cpu_s = time.process_time() - c0
    ws.close()
    if out.completion != "done" or out.tool_calls != turns:
        raise RuntimeError(
            f"runfold run ended {out.completion} after {out.tool_calls} tool calls: {out.reason}"
        )
    last_us, last_b = marginal(marks, turns)
    stored = tree_bytes(ws_dir / ".runfold")
    return Measure(
        "runfold",
        turns,
        total_ns / 1e9,
        cpu_s,
        total_ns / 1000 / turns,
        last_us,
        stored,
        out.ledger_bytes / turns,
        last_b,
        out.ledger_bytes,
        {"run": out.run_id, "lines": out.lines, "model_calls": out.attempts, "workspace": str(ws_dir)},
    )


# ---- LangGraph ----


def langgraph_available() -> bool:
    """True when `langgraph` and `langgraph.checkpoint.sqlite` are importable."""
    return not missing_modules(["langgraph", "langgraph.checkpoint.sqlite"])


def _langgraph_model(turns: int) -> Any:
    """A zero-latency chat model answering from the same script as runfold: AIMessages with one
    `echo` tool call each, then the closing text."""
    from langchain_core.messages import AIMessage

    def reply(i: int, messages: Any) -> Any:
        if i > turns:
            raise RuntimeError(f"the script has no reply left after {turns + 1}")
        if i < turns:
            return AIMessage(
                content="",
                tool_calls=[{"name": TOOL_NAME, "args": tool_args(i), "id": call_id(i), "type": "tool_call"}],
            )
        return AIMessage(content=FINAL_TEXT)

    return scripted_chat_model(reply)


def _langgraph_row_bytes(conn: sqlite3.Connection, lo: int, hi: int) -> int:
    """Bytes of the checkpoint rows (checkpoint blob + metadata) of super-steps `lo` ≤ step < `hi`
    and of the pending writes attached to them. Turn k (0-based) is steps 2k (the model) and
    2k+1 (the tools): the file size cannot show per-turn growth, since SQLite reuses WAL space."""
    row = conn.execute(
        """
        WITH cp AS (
            SELECT checkpoint_id, LENGTH(checkpoint) + LENGTH(metadata) AS n FROM checkpoints
            WHERE CAST(json_extract(CAST(metadata AS TEXT), '$.step') AS INTEGER) >= ?
              AND CAST(json_extract(CAST(metadata AS TEXT), '$.step') AS INTEGER) < ?
        )
        SELECT (SELECT COALESCE(SUM(n), 0) FROM cp)
             + (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE checkpoint_id IN (SELECT checkpoint_id FROM cp))
        """,
        (lo, hi),
    ).fetchone()
    return int(row[0])


def measure_langgraph(turns: int, root: Path, durability: str = "async") -> Measure:
    """Run the same script through the standard LangGraph tool-calling agent: a `StateGraph` over
    `MessagesState` with an `agent` node (the scripted chat model, tools bound) and a `ToolNode`,
    routed by `tools_condition`, compiled with `SqliteSaver` on a file database. One `stream`
    call runs the thread to its end (recursion limit 2·turns+10); the checkpointer persists every
    super-step (`durability`, LangGraph's default `async`)."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver

    graph = agent_graph(_langgraph_model(turns), [echo])

    db = root / f"langgraph-{turns}.sqlite"
    files = [db, Path(f"{db}-wal")]

    def size() -> int:
        return sum(p.stat().st_size for p in files if p.exists())

    conn = sqlite3.connect(str(db), check_same_thread=False)
    saver = SqliteSaver(conn)
    app = graph.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": f"bench-{turns}"}, "recursion_limit": 2 * turns + 10}
    last: Any = None
    c0 = time.process_time()
    t0 = time.perf_counter_ns()
    marks = [(t0, 0)]  # the start of model call k: the run's start, then after each tool step
    for update in app.stream(
        {"messages": [HumanMessage(TASK)]}, config, stream_mode="updates", durability=durability
    ):
        if "tools" in update:
            marks.append((time.perf_counter_ns(), 0))
        last = update
    total_ns = time.perf_counter_ns() - t0
    cpu_s = time.process_time() - c0
    state = app.get_state(config)
    messages = state.values["messages"]
    tool_msgs = sum(1 for m in messages if m.type == "tool")
    if tool_msgs != turns or messages[-1].content != FINAL_TEXT or last is None:
        raise RuntimeError(f"LangGraph thread ended with {tool_msgs} tool results, last {messages[-1]!r}")
    rows = conn.execute(
        "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0), COUNT(*) FROM checkpoints"
    ).fetchone()
    wrows = conn.execute("SELECT COALESCE(SUM(LENGTH(value)), 0), COUNT(*) FROM writes").fetchone()
    last_us, _ = marginal(marks, turns)
    m = max(1, turns // 10)
    last_b = _langgraph_row_bytes(conn, 2 * (turns - m), 2 * turns) / m
    conn.close()  # checkpoints the WAL into the database file
    stored = size()
    return Measure(
        "langgraph",
        turns,
        total_ns / 1e9,
        cpu_s,
        total_ns / 1000 / turns,
        last_us,
        stored,
        stored / turns,
        last_b,
        int(rows[0]) + int(wrows[0]),
        {"checkpoints": int(rows[1]), "writes": int(wrows[1]), "durability": durability, "db": str(db)},
    )


# ---- report ----


def table(results: Sequence[Measure]) -> str:
    """The results as a fixed-width text table."""
    head = (
        f"{'system':<10} {'turns':>6} {'wall s':>9} {'CPU s':>8} {'µs/turn':>10} {'CPU µs/turn':>12} "
        f"{'µs/turn last10%':>16} {'stored':>10} {'B/turn':>10} {'B/turn last10%':>15}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r.system:<10} {r.turns:>6} {r.total_s:>9.3f} {r.cpu_s:>8.3f} {r.us_per_turn:>10.0f} "
            f"{r.cpu_s * 1e6 / r.turns:>12.0f} {r.us_per_turn_last:>16.0f} {fmt_bytes(r.stored_bytes):>10} "
            f"{r.bytes_per_turn:>10.0f} {r.bytes_per_turn_last:>15.0f}"
        )
    return "\n".join(lines)


def _ratio(x: float) -> str:
    return f"{x:.4f} (1/{1 / x:.1f})" if x < 1 else f"{x:.2f} (×{x:.2f})"


def verdicts(results: Sequence[Measure]) -> list[str]:
    """The ratios and goal checks (largest history measured by both systems)."""
    out: list[str] = []
    rf = {r.turns: r for r in results if r.system == "runfold"}
    lg = {r.turns: r for r in results if r.system == "langgraph"}
    both = sorted(set(rf) & set(lg))
    if both:
        n = both[-1]
        t = rf[n].total_s / lg[n].total_s
        c = rf[n].cpu_s / lg[n].cpu_s
        b = rf[n].stored_bytes / lg[n].stored_bytes
        out.append(
            f"{n} turns: runfold wall time / LangGraph wall time = {_ratio(t)}; goal ≤ 1/10: "
            f"{'met' if t <= 0.1 else 'MISSED'} (CPU time ratio {_ratio(c)})"
        )
        out.append(
            f"{n} turns: runfold stored bytes / LangGraph stored bytes = {_ratio(b)}; goal ≤ 1/100: "
            f"{'met' if b <= 0.01 else 'MISSED'}"
        )
    if rf:
        sizes = sorted(rf)
        per = ", ".join(f"{n}: {rf[n].bytes_per_turn_last:.0f}" for n in sizes)
        lo, hi = min(rf[n].bytes_per_turn_last for n in sizes), max(rf[n].bytes_per_turn_last for n in sizes)
        grows = hi > lo * 1.10
        out.append(
            f"runfold ledger bytes per turn, last 10% of turns, by history size: {per} "
            f"(goal: no growth with history: {'MISSED' if grows else 'met'}, spread {hi / lo - 1:.1%})"
        )
    return out


def main(argv: Sequence[str] | None = None, emit: Callable[[str], None] = print) -> list[Measure]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="10 and 100 turns only")
    ap.add_argument("--skip-langgraph", action="store_true", help="measure runfold only")
    ap.add_argument("--sizes", help="comma-separated turn counts (overrides --quick)")
    ap.add_argument("--lg-durability", default="async", choices=("async", "sync", "exit"))
    ap.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory and print its path")
    args = ap.parse_args(argv)
    sizes = (
        tuple(int(s) for s in args.sizes.split(",")) if args.sizes else QUICK_SIZES if args.quick else SIZES
    )
    if any(n < 1 for n in sizes):
        ap.error("--sizes: every turn count must be ≥ 1")
    with_lg = not args.skip_langgraph
    if with_lg and not langgraph_available():
        emit(
            "LangGraph is not importable here: measuring runfold only. For the comparison, install "
            "bench/requirements-langgraph.txt into a separate venv (with `pip install -e .`) and run "
            "this script with that venv's python."
        )
        with_lg = False
    tmp = Path(tempfile.mkdtemp(prefix="runfold-turn-bench-"))
    emit(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, files under {tmp}")
    if with_lg:
        from importlib.metadata import version

        emit(
            f"LangGraph {version('langgraph')}, langgraph-checkpoint-sqlite {version('langgraph-checkpoint-sqlite')}: "
            f"StateGraph(MessagesState) agent + ToolNode, SqliteSaver on a file DB (WAL), one stream() "
            f"call to the end of the thread, durability={args.lg_durability}; stored = DB file after close"
        )
    emit(
        "runfold: Workspace.arun with model script:<file>, one typed tool via the API, built-ins off; "
        "one fsync before each model call"
    )
    results: list[Measure] = []
    try:
        for n in sizes:
            gc.collect()
            results.append(asyncio.run(measure_runfold(n, tmp)))
            if with_lg:
                gc.collect()
                results.append(measure_langgraph(n, tmp, args.lg_durability))
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    emit("")
    emit(table(results))
    emit("")
    for line in verdicts(results):
        emit(line)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
