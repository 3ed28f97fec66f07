"""The context tools: the model edits its own window regions — pinned notes, a todo checklist and
scratch — which the runtime keeps at the end of every request, across compactions (DESIGN.md §10).

Each is a writing tool (it runs alone, after its `tool_called` is durable) whose edit the run
loop records as a `context_changed` line (cause `context_tool`) before the call's `tool_result`.
They are opt-in built-ins (named in `tools`), so the tool table of a run that does not ask is
unchanged; an edit that would pass its region's budget comes back as the call's error.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import Field

from runfold.core.canonical import Json
from runfold.core.errors import invalid_args
from runfold.core.regions import NOTE_NAME_CHARS
from runfold.tools.context import ToolContext
from runfold.tools.registry import Tool

NoteName = Annotated[str, Field(min_length=1, max_length=NOTE_NAME_CHARS)]


def _edit(ctx: ToolContext, region: str, op: str, fields: dict[str, Json]) -> dict[str, Any]:
    if ctx.edit_region is None:
        raise invalid_args(
            f"{op} in the {region} region",
            f"region {region}",
            "context tools need a run loop (Workspace.run / runfold run); keep the text in your reply instead",
        )
    return ctx.edit_region(region, op, fields)


async def notes_write(name: NoteName, text: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Pin a note in your context window under a name, replacing the note of that name if any.

    Pinned notes stay at the end of every request, also after older messages are compacted:
    keep there what you must not lose (decisions, paths, figures). Result: {region, op, changed,
    revision, region_tokens, budget_tokens}.

    Args:
        name: The note's name (1 to 64 characters), e.g. `plan`.
        text: The note's whole text.
    """
    return _edit(ctx, "notes", "write", {"name": name, "text": text})


async def notes_append(name: NoteName, text: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Append text to a pinned note (the note is created when missing). Result as notes_write.

    Args:
        name: The note's name.
        text: The text added at the end of the note (include a leading newline or space if wanted).
    """
    return _edit(ctx, "notes", "append", {"name": name, "text": text})


async def notes_delete(name: NoteName, *, ctx: ToolContext) -> dict[str, Any]:
    """Delete a pinned note. Result as notes_write.

    Args:
        name: The note's name.
    """
    return _edit(ctx, "notes", "delete", {"name": name})


async def todo_add(text: Annotated[str, Field(min_length=1)], *, ctx: ToolContext) -> dict[str, Any]:
    """Add an item to your todo checklist, kept at the end of every request. Result: {region,
    op, changed, item (the item's number, for todo_done), revision, region_tokens, budget_tokens}.

    Args:
        text: What is to be done.
    """
    return _edit(ctx, "todo", "add", {"text": text})


async def todo_done(item: Annotated[int, Field(ge=1)], *, ctx: ToolContext) -> dict[str, Any]:
    """Mark a todo item done (it stays on the checklist, ticked). Result as todo_add.

    Args:
        item: The item's number, as todo_add returned it.
    """
    return _edit(ctx, "todo", "done", {"item": item})


async def scratch_write(text: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Replace your scratch text, a free working area kept at the end of every request (empty
    text clears it). Result: {region, op, changed, revision, region_tokens, budget_tokens}.

    Args:
        text: The whole new scratch text.
    """
    return _edit(ctx, "scratch", "write", {"text": text})


CONTEXT_TOOLS: Final[tuple[Tool, ...]] = (
    Tool.from_function(notes_write, effect="write", subject="name"),
    Tool.from_function(notes_append, effect="write", subject="name"),
    Tool.from_function(notes_delete, effect="write", subject="name"),
    Tool.from_function(todo_add, effect="write", subject="text"),
    Tool.from_function(todo_done, effect="write", subject="item"),
    Tool.from_function(scratch_write, effect="write", subject="text"),
)
CONTEXT_TOOL_NAMES: Final[tuple[str, ...]] = tuple(t.name for t in CONTEXT_TOOLS)
"""`notes_write`, `notes_append`, `notes_delete`, `todo_add`, `todo_done`, `scratch_write`."""
