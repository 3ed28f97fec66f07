"""The open wave of the run fold (DESIGN.md §5 step 6, §7): a reply's tool calls waiting for
their results, kept apart from the fold's phases so that the per-line work of a wide wave stays
constant (membership in sets, results counted, never rescanned).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runfold.core.conversation import BlockSource
from runfold.core.messages import Block, ToolResultBlock, ToolUseBlock
from runfold.core.payloads import ResultOffloaded
from runfold.core.regions import Regions


@dataclass
class OpenWave:
    """A reply's wave while the fold waits for its results: the reply (seq, blocks, `calls`
    count, tool_use ids), the calls recorded by `tool_called`, the results so far and the
    offloads waiting for their result. Every operation is O(1) per line (a wave may hold
    thousands of calls)."""

    reply_seq: int
    reply: list[Block]
    calls: int
    use_ids: list[str]
    called: dict[str, tuple[ToolUseBlock, BlockSource]] = field(default_factory=dict)
    results: dict[str, tuple[ToolResultBlock, BlockSource]] = field(default_factory=dict)
    offloads: dict[str, ResultOffloaded] = field(default_factory=dict)
    """`result_offloaded` lines waiting for the result they name (written before it)."""
    asked: set[str] = field(default_factory=set)
    """`use_ids` as a set (membership in O(1): a wave may hold thousands of calls)."""
    extra: int = 0
    """Calls recorded by `tool_called` that the reply lacks (the foreign `{}` replies)."""
    regions: Regions = field(default_factory=Regions)
    """The context regions at the wave's opening (a wave dropped whole drops its edits)."""

    def __post_init__(self) -> None:
        self.asked = set(self.use_ids)

    def needed(self) -> int:
        return max(self.calls, len(self.use_ids))

    def unanswered(self) -> list[tuple[ToolUseBlock, bool]]:
        """The calls without a result, in call order, each with whether a `tool_called` line
        recorded it."""
        asked = self.asked
        out = [
            (b, b["id"] in self.called)
            for b in self.reply
            if b["kind"] == "tool_use" and b["id"] not in self.results
        ]
        out += [(b, True) for cid, (b, _) in self.called.items() if cid not in asked and cid not in self.results]
        return out

    def complete(self) -> bool:
        """Every call the reply asked for and every recorded call has a result (results only
        ever answer those calls, so counting them is enough: O(1) per result)."""
        return len(self.results) >= self.needed() and len(self.results) == len(self.asked) + self.extra
