"""The runtime: the executor (turn loop, safe points, retries, stall guard), the assembly of a
run, the frozen prefix, replay, pricing and the cost fold (DESIGN.md §5, §7, §8).

It sits between the API and the providers/tools/store: `assemble.drive_run` turns a `RunSpec`
into a `RunLoop` driving one run on a shared ledger writer; `replay_run` rebuilds every request
of a run offline and checks its hash.
"""

from runfold.runtime.cost import CostReport, CostRow, ToolRow, cost_report
from runfold.runtime.executor import (
    FAILED,
    RetryPolicy,
    RunChannels,
    RunInputs,
    RunLoop,
    RunOptions,
    RunOutcome,
    Stop,
)
from runfold.runtime.prefix import ConversationView, Prefix, build_prefix, conversation_view, tool_specs
from runfold.runtime.pricing import Price, make_bill, parse_prices, price_of
from runfold.runtime.replay import Mismatch, ReplayReport, replay_run

__all__ = [
    "FAILED",
    "ConversationView",
    "CostReport",
    "CostRow",
    "Mismatch",
    "Prefix",
    "Price",
    "ReplayReport",
    "RetryPolicy",
    "RunChannels",
    "RunInputs",
    "RunLoop",
    "RunOptions",
    "RunOutcome",
    "Stop",
    "ToolRow",
    "build_prefix",
    "conversation_view",
    "cost_report",
    "make_bill",
    "parse_prices",
    "price_of",
    "replay_run",
    "tool_specs",
]
