"""The run loop's side of the context tools (DESIGN.md §10): a notes, todo or scratch edit the
model asks for is checked against its region's budget and, when it fits, written as one
`context_changed` line (cause `context_tool`) between the call's `tool_called` and its
`tool_result`; the run fold applies that line, so the next request carries the edited regions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from runfold.core.canonical import Json
from runfold.core.causes import Cause
from runfold.core.errors import ErrorCode, RunfoldError, internal
from runfold.core.payloads import ContextChanged
from runfold.core.regions import EDITED_REGIONS, Edit, EditedRegion, apply_edit, region_tokens
from runfold.core.tokens import estimate_tokens
from runfold.core.window import Budgets, budgets
from runfold.runtime.compaction import model_window

if TYPE_CHECKING:
    from runfold.runtime.executor import RunLoop


class RegionEditor:
    """One run's region edits (`ToolContext.edit_region`). The loop tells it which call is
    running (`calling`, from the call's `tool_called`): the context tools are writing tools, so
    each runs alone, after its `tool_called` and before its `tool_result`."""

    def __init__(self, loop: RunLoop) -> None:
        self.loop = loop
        self.call: str | None = None
        self._budgets: Budgets | None = None

    def calling(self, call_id: str) -> None:
        """The call whose `tool_called` was just written."""
        self.call = call_id

    def budgets(self) -> Budgets:
        """The run's budgets in tokens: the window manager's when the window is managed, else
        `[context]` applied to the model's window as `runtime.compaction.model_window` finds it
        (the provider's call settings, `[models]`, runfold's model table, or the default)."""
        if self._budgets is None:
            loop = self.loop
            if loop.window is not None:
                self._budgets = loop.window.budgets
            else:
                window = model_window(loop.options.models, loop.provider)
                self._budgets = budgets(loop.options.context, window.window, window.output, 0, loop.provider.model)
        return self._budgets

    def edit(self, region: str, op: str, fields: Mapping[str, Json]) -> dict[str, Json]:
        """Apply one edit and return the tool's result: `{region, op, changed, revision,
        region_tokens, budget_tokens}` plus `item` (todo). Raises `E_INVALID_ARGS` for an edit
        that cannot apply (a missing note or item; nearby names the ones there are), and
        `E_BUDGET_EXHAUSTED` for one that grows its region past its budget (not applied, nothing
        written); the executor turns either into the call's `tool_result` error."""
        loop = self.loop
        if region not in EDITED_REGIONS or self.call is None:
            raise internal(f"edit region {region!r}", f"run {loop.run_id}", "this is a runfold bug; report it")
        edited: EditedRegion = region
        regions = loop.folder.regions
        name, text, item = fields.get("name"), fields.get("text"), fields.get("item")
        if edited == "todo" and op == "add":
            item = regions.next_item
        edit = Edit(
            edited,
            op,
            name if isinstance(name, str) else None,
            text if isinstance(text, str) else None,
            item if isinstance(item, int) and not isinstance(item, bool) else None,
        )
        applied = apply_edit(regions, edit, loop.ledger.next_seq)
        budget = self.budgets().regions[edited]
        tokens = region_tokens(applied.regions, edited)
        if tokens > budget and applied.bytes_added > applied.bytes_removed:
            permille = loop.options.context.share(edited)
            raise RunfoldError(
                ErrorCode.BUDGET_EXHAUSTED,
                f"{op} in the {region} region (it would take {tokens} tokens, over its budget of "
                f"{budget} tokens: context.{region}_permille = {permille}‰ of the input window)",
                f"region {region}",
                f"the edit was not applied; shorten it, or delete or shorten other {region} entries first",
            )
        revision = loop.folder.revision
        payload = ContextChanged(
            region=region,
            cause=Cause.CONTEXT_TOOL,
            added=list(applied.added),
            removed=list(applied.removed),
            token_delta=estimate_tokens(applied.bytes_added) - estimate_tokens(applied.bytes_removed),
            tool_use_id=self.call,
            **edit.to_data(),
        )
        payload.extra.update(
            {
                "bytes_added": applied.bytes_added,
                "bytes_removed": applied.bytes_removed,
                "tokens_added": estimate_tokens(applied.bytes_added),
                "tokens_removed": estimate_tokens(applied.bytes_removed),
                "revision_before": revision,
                "revision_after": revision + 1,
                "budget": budget,
            }
        )
        loop._write(payload)
        done = {"write": "written", "append": "appended to", "delete": "deleted", "add": "added", "done": "marked done"}
        what = {"notes": f"note {name!r}", "todo": f"item {item}", "scratch": "scratch"}[edited]
        result: dict[str, Json] = {
            "region": region,
            "op": op,
            "changed": "scratch cleared" if edited == "scratch" and not text else f"{what} {done[op]}",
            "revision": revision + 1,
            "region_tokens": tokens,
            "budget_tokens": budget,
        }
        if edited == "todo":
            result["item"] = item
        return result
