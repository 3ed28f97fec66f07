"""When a tool result leaves the window for the content store, and what stays (DESIGN.md §10).

Pure: the decision (`content` larger than `offload_bytes`), the head cut on a UTF-8 boundary and
the `result_offloaded` payload, so the live run, its tests and any fold agree on one rule. The
runtime stores the bytes in the CAS and writes the line; the run fold puts `offloaded_content` of
the line in the window.
"""

from __future__ import annotations

from typing import Final

from runfold.core.canonical import encode_json
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.ids import is_hex64
from runfold.core.payloads import ResultOffloaded
from runfold.core.window import ContextSettings

PAGING_TOOL = "read_result"
"""The tool the model pages an offloaded result back with; its own results are never offloaded
(a page the model asked for lands in the window, capped at `offload_bytes`)."""


def utf8_head(data: bytes, limit: int) -> str:
    """The longest prefix of `data` of at most `limit` bytes that ends on a UTF-8 character
    boundary, decoded. `data` must be valid UTF-8 (a tool result's content always is)."""
    end = min(limit, len(data))
    while end > 0 and end < len(data) and (data[end] & 0xC0) == 0x80:
        end -= 1  # data[end] continues a character: cut before that character
    return data[:end].decode("utf-8")


FORCED_HEAD_SHARE: Final = 8
"""Under a known conversation budget, an offloaded result's head takes at most this fraction
(1/8) of the budget's bytes, so a wave of several large results still fits."""


def should_offload(content: bytes, settings: ContextSettings, budget_bytes: int | None = None) -> bool:
    """True when a tool result's window content (`content`, the printer's UTF-8 bytes) is larger
    than `settings.offload_bytes`, or alone larger than the whole conversation budget
    (`budget_bytes`, when the run's window is managed), and the content that would replace it
    (`offloaded_content`: head, locator, size) is smaller than it: an offload never makes the
    window bigger (DESIGN.md §10)."""
    if not (len(content) > settings.offload_bytes or (budget_bytes is not None and len(content) > budget_bytes)):
        return False
    return stub_bytes(content, settings, budget_bytes) < len(content)


def stub_bytes(content: bytes, settings: ContextSettings, budget_bytes: int | None = None) -> int:
    """The size in bytes of the `tool_result` content an offload of `content` puts in the window
    (`offloaded_content`: the locator's length is fixed, so it is exact before the CAS stores it)."""
    probe = ResultOffloaded(
        tool_use_id="", locator="cas:b3-" + "0" * 64, head=utf8_head(content, head_bytes(settings, budget_bytes)), bytes=len(content)
    )
    return len(offloaded_content(probe).encode("utf-8"))


def head_bytes(settings: ContextSettings, budget_bytes: int | None = None) -> int:
    """The most bytes of an offloaded result kept in the window as its head: `offload_head_bytes`,
    at most `budget_bytes // FORCED_HEAD_SHARE` under a known conversation budget (never below 1)."""
    if budget_bytes is None:
        return settings.offload_head_bytes
    return max(1, min(settings.offload_head_bytes, budget_bytes // FORCED_HEAD_SHARE))


PAGE_SHARE: Final = 4
"""Under a known conversation budget, one page of the paging tool is at most a quarter of the
budget's bytes (a page lands in the window whole and is never offloaded)."""


def page_bytes(settings: ContextSettings, budget_bytes: int | None = None) -> int:
    """The most bytes one page of the paging tool returns: `offload_bytes`, at most
    `budget_bytes // PAGE_SHARE` under a known conversation budget (never below 1)."""
    if budget_bytes is None:
        return settings.offload_bytes
    return max(1, min(settings.offload_bytes, budget_bytes // PAGE_SHARE))


def offload_payload(
    tool_use_id: str, content: bytes, digest: str, settings: ContextSettings, budget_bytes: int | None = None
) -> ResultOffloaded:
    """The `result_offloaded` line for a result whose `content` is stored as CAS object `digest`:
    `locator` `cas:b3-<digest>`, `bytes` = len(content), `head` = its first `head_bytes` bytes
    (cut on a UTF-8 boundary), `bytes_removed` = bytes the window no longer carries (`bytes`
    minus the size of `offloaded_content`, which replaces the result; never negative). When the
    conversation budget decided the offload or shortened the head, the line also records
    `budget_bytes` and `forced` (true when the result was offloaded only because it alone passes
    the conversation budget)."""
    limit = head_bytes(settings, budget_bytes)
    payload = ResultOffloaded(
        tool_use_id=tool_use_id,
        locator=f"cas:b3-{digest}",
        head=utf8_head(content, limit),
        bytes=len(content),
    )
    payload.bytes_removed = max(0, len(content) - len(offloaded_content(payload).encode("utf-8")))
    forced = len(content) <= settings.offload_bytes
    if budget_bytes is not None and (forced or limit < settings.offload_head_bytes):
        payload.extra.update({"budget_bytes": budget_bytes, "forced": forced})
    return payload


def missing_offload(locator: str, tool_use_id: str, seq: int | None, action: str) -> RunfoldError:
    """`E_STORAGE_FATAL` for an offloaded result whose CAS object is gone (DESIGN.md §10):
    `action` says what needed it (replay, a fork, a page read); the subject names the locator.
    Nothing is rewritten to get past it: the recovery says where the bytes still are."""
    at = f" at seq {seq}" if seq is not None else ""
    return RunfoldError(
        ErrorCode.STORAGE_FATAL,
        f"{action}: the offloaded result of tool call {tool_use_id!r} (result_offloaded{at}) is missing from the CAS",
        locator,
        "restore .runfold/cas from a copy of the workspace; the full result is also in that call's "
        "tool_result line (`runfold show` it), and the ledger was left as it was",
    )


def offload_digest(payload: ResultOffloaded) -> str | None:
    """The CAS hash a `result_offloaded` line names (None when its locator is not `cas:b3-<hex>`)."""
    loc = payload.locator
    digest = loc.removeprefix("cas:b3-")
    return digest if loc.startswith("cas:b3-") and is_hex64(digest) else None


OFFLOAD_NOTE = "result offloaded"


def offloaded_content(payload: ResultOffloaded) -> str:
    """The `tool_result` content that replaces an offloaded result in the window (DESIGN.md §10):
    the compact canonical JSON `{"bytes", "head", "locator", "note"}` (bytes: the full result's
    size in bytes). One printer for the live turn and every fold."""
    obj = {"bytes": payload.bytes, "head": payload.head, "locator": payload.locator, "note": OFFLOAD_NOTE}
    return encode_json(obj).decode("utf-8")
