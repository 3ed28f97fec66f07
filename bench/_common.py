"""Pieces shared by the benchmark scripts of `bench/` (they are scripts, not a package).

The per-turn arithmetic (marginal figures over the last 10% of the turns), the byte counting
and formatting, and the LangGraph side of a scripted tool-calling agent, so `turn_overhead.py`
and `peers.py` measure LangGraph and runfold the same way.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any


def tree_bytes(path: Path) -> int:
    """Total size in bytes of the regular files under `path`."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def last_window(turns: int) -> int:
    """How many turns "the last 10%" of `turns` is (at least one)."""
    return max(1, turns // 10)


def marginal(marks: Sequence[tuple[int, int]], turns: int) -> tuple[float, float]:
    """(µs per turn, bytes per turn) over the last 10% of the tool turns, from `marks[k]` =
    (perf_counter_ns, bytes so far) at the start of model call k (k = 0..turns). Raises
    RuntimeError when there are not `turns + 1` marks."""
    if len(marks) != turns + 1:
        raise RuntimeError(f"expected {turns + 1} model calls, saw {len(marks)}")
    m = last_window(turns)
    (t0, b0), (t1, b1) = marks[turns - m], marks[turns]
    return (t1 - t0) / 1000 / m, (b1 - b0) / m


def fmt_bytes(n: float) -> str:
    """`n` bytes with a decimal unit (B, kB, MB, GB)."""
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n:.0f} B"


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The names of `modules` that are not importable here (dotted names allowed)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            out.append(name)
    return out


# ---- LangGraph ----


def scripted_chat_model(reply: Callable[[int, Any], Any]) -> Any:
    """A zero-latency LangChain chat model: model call k (0-based) answers `reply(k, messages)`,
    an `AIMessage`. `bind_tools` returns the model itself (the script decides the calls)."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult
    from pydantic import PrivateAttr

    class ScriptedChatModel(BaseChatModel):
        _next: int = PrivateAttr(default=0)

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            k = self._next
            self._next += 1
            return ChatResult(generations=[ChatGeneration(message=reply(k, messages))])

    return ScriptedChatModel()


def agent_graph(model: Any, tools: Sequence[Callable[..., Any]]) -> Any:
    """The standard LangGraph tool-calling agent, not yet compiled: a `StateGraph` over
    `MessagesState` with an `agent` node (`model`, tools bound) and a `ToolNode` of `tools`
    (the calls of one reply run concurrently), routed by `tools_condition`."""
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    bound = model.bind_tools(list(tools))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([tool(t) for t in tools]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph
