"""`read_result`: the model pages an offloaded tool result back from the content store (§10).

A result larger than `[context] offload_bytes` reaches the window as its head plus a locator;
this tool returns any byte range of the full content, re-verified against its hash. Every run
with a tool has it (appended last when its tool table is built, `runtime.offload.with_paging`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.locator import CasLocator, parse_locator
from runfold.core.offload import utf8_head
from runfold.tools.context import ToolContext


def read_result(
    key: str,
    offset: Annotated[int, Field(ge=0)] = 0,
    length: Annotated[int, Field(ge=1)] | None = None,
    *,
    ctx: ToolContext,
) -> dict[str, Any]:
    """Read part of a tool result that was too large for the context window.

    Such a result shows as {bytes, head, locator, note: "result offloaded"}: the full content has
    `bytes` bytes and starts with `head`. Read the rest by byte offset, page by page. Result:
    {tool_use_id, locator, offset, length, bytes, content} plus `next_offset` while content
    remains; a page never splits a UTF-8 character, so `length` may be a little less than asked.

    Args:
        key: The tool_use_id of the call whose result was offloaded, or its locator (cas:b3-…,
            optionally with a byte range #B<first>-<last> instead of offset/length).
        offset: First byte to return, 0-based (default 0).
        length: How many bytes to return (default and most: the page size).

    Raises:
        E_INVALID_ARGS (an unknown key, an offset past the end or inside a character: the size is
        named), E_STORAGE_FATAL (the stored result is missing).
    """
    action = "read an offloaded result"
    if ctx.offloaded is None:
        raise RunfoldError(
            ErrorCode.INVALID_ARGS,
            action,
            repr(key),
            "this run has no offloaded results; every result is in the conversation as it came",
        )
    end: int | None = None
    if key.startswith("cas:") and "#" in key:  # a §3 byte-range locator: cas:b3-<hex>#B<a>-<b>
        loc = parse_locator(key)
        if not isinstance(loc, CasLocator) or loc.unit != "B":
            raise invalid_args(action, repr(key), "give a byte range (#B<first>-<last>) or the bare locator with offset/length")
        key, offset, end = str(CasLocator(loc.hash)), loc.start, loc.end
        length = end - offset + 1
    tool_use_id, locator, content = ctx.offloaded(key)
    size = len(content)
    if end is not None and end >= size:
        raise invalid_args(action, "argument `key`", f"the result has {size} bytes: give a range within 0-{size - 1}")
    if offset >= size:
        raise invalid_args(
            action,
            "argument `offset`",
            f"the result has {size} bytes: give an offset within 0-{size - 1}",
        )
    if (content[offset] & 0xC0) == 0x80:
        start = offset
        while start > 0 and (content[start] & 0xC0) == 0x80:
            start -= 1
        raise invalid_args(
            action,
            "argument `offset`",
            f"offset {offset} falls inside a UTF-8 character; start at {start} instead",
        )
    page = min(length or ctx.result_page_bytes, ctx.result_page_bytes)
    text = utf8_head(content[offset:], page)
    if not text:  # a page smaller than the character at `offset`: that whole character
        end = offset + 1
        while end < size and (content[end] & 0xC0) == 0x80:
            end += 1
        text = content[offset:end].decode("utf-8")
    got = len(text.encode("utf-8"))
    out: dict[str, Any] = {
        "tool_use_id": tool_use_id,
        "locator": locator,
        "offset": offset,
        "length": got,
        "bytes": size,
        "content": text,
    }
    if offset + got < size:
        out["next_offset"] = offset + got
    return out

