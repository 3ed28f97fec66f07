"""Large tool results leave the window for the content store, and come back page by page (§10).

A run's `Offloads` decides, for each tool result as it is written, whether its window content is
larger than `[context] offload_bytes`; if so the content is stored durably in the CAS before the
`result_offloaded` line naming it is staged. It also answers the `read_result` tool from the CAS
(hash re-verified) for every offloaded result of the run's lineage; every run with a tool is
given that tool (`with_paging`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.kinds import Kind
from runfold.core.offload import PAGING_TOOL, missing_offload, offload_digest, offload_payload, should_offload
from runfold.core.payloads import ResultOffloaded, ToolResult
from runfold.core.records import Record
from runfold.core.tool_result import tool_result_block
from runfold.core.window import ContextSettings
from runfold.runtime.replay import check_offloaded
from runfold.store.cas import Cas
from runfold.tools import ToolRegistry
from runfold.tools.builtin import READ_RESULT


class Offloads:
    """The offloaded results of one run's lineage: tool_use_id → (locator, seq of its line)."""

    def __init__(self, cas: Cas, settings: ContextSettings) -> None:
        self.cas = cas
        self.settings = settings
        self.by_id: dict[str, tuple[str, int]] = {}
        self.budget_bytes: Callable[[], int] | None = None
        """The conversation budget in bytes when the run's window is managed (set by the run
        loop from its window manager): a result alone larger is offloaded whatever its size."""

    def offload(self, tool: str, result: ToolResult) -> ResultOffloaded | None:
        """The `result_offloaded` payload for `result` when its window content is larger than
        `offload_bytes` or alone larger than the conversation budget (`core.offload.should_offload`;
        pages of the paging tool never are offloaded), after storing the content in the CAS
        durably; None when it stays in the window. Raises `E_STORAGE_FATAL` when the CAS cannot
        store it."""
        if tool == PAGING_TOOL:
            return None
        content = tool_result_block(result)["content"].encode("utf-8")
        budget = self.budget_bytes() if self.budget_bytes is not None else None
        if not should_offload(content, self.settings, budget):
            return None
        digest = self.cas.put(content)  # durable (fsynced, renamed, directory fsynced) first
        return offload_payload(result.tool_use_id, content, digest, self.settings, budget)

    def remember(self, rec: Record) -> None:
        """Note a `result_offloaded` line (written by this run or inherited) for `read`."""
        off = rec.typed(ResultOffloaded)
        self.by_id[off.tool_use_id] = (off.locator, rec.seq)

    def inherit(self, records: Iterable[Record]) -> None:
        """For a fork or successor: every `result_offloaded` of the inherited lineage must have its
        CAS object (read back, hash re-verified) — else `E_STORAGE_FATAL` naming the locator,
        before the new run writes anything; each is remembered for `read`."""
        for rec in check_lineage(records, self.cas):
            self.remember(rec)

    def read(self, key: str) -> tuple[str, str, bytes]:
        """`(tool_use_id, locator, content)` of the offloaded result `key` names (its tool_use_id
        or its locator), read from the CAS with its hash re-verified. Raises `E_INVALID_ARGS`
        naming the offloaded calls for an unknown key, `E_STORAGE_FATAL` naming the locator when
        the object is missing, `E_LEDGER_CORRUPT` when it is damaged."""
        found = self.by_id.get(key)
        call_id = key
        if found is None:
            for cid, (loc, seq) in self.by_id.items():
                if loc == key:
                    call_id, found = cid, (loc, seq)
                    break
        if found is None:
            ids = tuple(self.by_id)
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                "read an offloaded result",
                repr(key),
                "give the tool_use_id or the locator of a result shown as `result offloaded`"
                + (f": {', '.join(ids[-5:])}" if ids else "; this run has none"),
                ids[-5:],
            )
        locator, seq = found
        digest = offload_digest(ResultOffloaded(tool_use_id=call_id, locator=locator))
        if digest is None:
            raise missing_offload(locator, call_id, seq, "read an offloaded result")
        try:
            return call_id, locator, self.cas.get(digest)
        except RunfoldError as err:
            if err.code is ErrorCode.PATH_NOT_FOUND:
                raise missing_offload(locator, call_id, seq, "read an offloaded result") from None
            raise


def check_lineage(records: Iterable[Record], cas: Cas) -> list[Record]:
    """The `result_offloaded` lines of a lineage a fork or successor inherits, each CAS object
    read back (hash re-verified). Raises `E_STORAGE_FATAL` naming the locator of the first one
    missing, `E_LEDGER_CORRUPT` for a damaged one (DESIGN.md §10)."""
    found = [rec for rec in records if rec.known and rec.kind is Kind.RESULT_OFFLOADED]
    for rec in found:
        check_offloaded(rec, cas.get_locator, "fork the run")
    return found


def with_paging(registry: ToolRegistry) -> ToolRegistry:
    """`registry` with the paging tool (`read_result`) appended, last, when it holds any tool and
    no tool of that name: any tool result may be offloaded (larger than `[context] offload_bytes`,
    or alone larger than the conversation budget), so the model can always page it back
    (DESIGN.md §10). Decided once when the run's tool table is built, so the frozen prefix never
    changes mid-run; replay and forks of older runs read their own recorded table. A registry
    with no tool is returned as it is (no result can be offloaded)."""
    if len(registry) and PAGING_TOOL not in registry:
        registry.add(READ_RESULT)
    return registry
