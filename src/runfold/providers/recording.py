"""`--record FILE`: wrap any provider and append each answer to a JSONL file in the scripted
model's form, so a real session replays later, deterministically and offline, with `script:FILE`.

The file opens with one header line `{"recorded": {dialect, model, max_tokens, stream, thinking,
temperature_milli}}` holding what the requests were rendered with; the scripted model reads it
back so the replayed run renders the same bodies and its `model_called` lines carry the same
request hashes. Each reply becomes `{"content": [blocks], "stop", "usage"}`; each retryable failure
becomes a fault entry (`http_429` with its `retry_after_ms`, `http_500`, `cut_stream`, ...), so
the replay takes the same attempts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.providers.base import Provider, ProviderError, Reply, Request, StreamCallback

HEADER = "recorded"
SCRIPT_STOPS = ("end_turn", "tool_use", "max_tokens", "refusal")


def reply_entry(reply: Reply) -> dict[str, Any]:
    """A reply as one scripted-model entry: `content` (internal blocks as returned), `stop`
    (when it is one the script form knows), `usage` (tokens by class)."""
    entry: dict[str, Any] = {"content": [dict(b) for b in reply.blocks]}
    if reply.stop in SCRIPT_STOPS:
        entry["stop"] = reply.stop
    if reply.usage is not None:
        entry["usage"] = reply.usage.to_data()
    return entry


def fault_entry(err: ProviderError) -> dict[str, Any] | None:
    """A failed call as a fault entry the scripted model raises the same way: 429 → `http_429`
    (with `retry_after_ms`), 529 → `http_529`, other 5xx/408/409 → `http_500`, a retryable
    failure without status (cut stream, connection) → `cut_stream`, a 400 → `http_400_refusal`.
    None for failures the script form cannot express (401, 403, 404, local failures)."""
    status = err.status
    if status == 429:
        entry: dict[str, Any] = {"fault": "http_429"}
        if err.retry_after_ms is not None:
            entry["retry_after_ms"] = err.retry_after_ms
        return entry
    if status == 529:
        return {"fault": "http_529"}
    if status is not None and (status >= 500 or status in (408, 409)):
        return {"fault": "http_500"}
    if status is None and err.retry.value == "yes":
        return {"fault": "cut_stream"}
    if status == 400:
        return {"fault": "http_400_refusal"}
    return None


def read_header(path: Path) -> dict[str, Any] | None:
    """The `recorded` settings of a script file's first non-blank line, None when the file has
    no header (a hand-written script). Raises `E_INVALID_ARGS` when the header is malformed."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    break
            else:
                return None
    except FileNotFoundError:
        return None
    try:
        first = json.loads(line)
    except ValueError:
        return None
    if not isinstance(first, dict) or HEADER not in first:
        return None
    header = first[HEADER]
    if not isinstance(header, dict) or not isinstance(header.get("dialect"), str):
        raise RunfoldError(
            ErrorCode.INVALID_ARGS,
            "read the recording header",
            f"{path}:1",
            'the first line of a recording is {"recorded": {"dialect": ..., "model": ..., ...}}; '
            "record the session again or remove the line",
        )
    return header


class RecordingProvider:
    """A provider that passes every call to `inner` and appends its answer to `path` (see the
    module docstring); `dialect`, `model` and the call settings are `inner`'s.

    The header is written when the file is empty or new; an existing recording is appended to.
    Each entry is written and flushed before the reply is returned. Raises `E_STORAGE_FATAL`
    when the file cannot be written."""

    def __init__(self, inner: Provider, path: str | Path) -> None:
        self.inner = inner
        self.path = Path(path)
        self.dialect = inner.dialect
        self.model = inner.model
        self.settings = inner.settings
        if not self.path.exists() or self.path.stat().st_size == 0:
            self._append({HEADER: {"dialect": self.dialect, "model": self.model, **self.settings.to_data()}})

    def _append(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as err:
            raise RunfoldError(
                ErrorCode.STORAGE_FATAL,
                f"append to the recording ({err.strerror})",
                str(self.path),
                "record to a writable file (--record FILE) or run without --record",
            ) from None

    async def complete(self, request: Request, on_delta: StreamCallback | None = None) -> Reply:
        """`inner.complete`, recording the reply or the fault (which is re-raised)."""
        try:
            reply = await self.inner.complete(request, on_delta)
        except ProviderError as err:
            fault = fault_entry(err)
            if fault is not None:
                self._append(fault)
            raise
        self._append(reply_entry(reply))
        return reply

    async def aclose(self) -> None:
        await self.inner.aclose()
