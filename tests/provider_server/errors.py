"""Error responses in each provider's own shape: status, JSON body and headers.

Anthropic: `{"type":"error","error":{"type":...,"message":...},"request_id":...}`;
OpenAI: `{"error":{"message":...,"type":...,"param":...,"code":...}}`. The wording of the fixed
messages follows what the real APIs answer, so SDK error handling sees what it sees in the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ErrorReply:
    """An error answer: HTTP status, JSON body, extra headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        err = self.body.get("error", {})
        return str(err.get("message", "")) if isinstance(err, dict) else ""


ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def anthropic(
    status: int, message: str, request_id: str, headers: dict[str, str] | None = None
) -> ErrorReply:
    """An Anthropic error of `status` (its `error.type` follows the status)."""
    kind = ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}
    return ErrorReply(status, body, {"request-id": request_id, **(headers or {})})


def openai(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> ErrorReply:
    """An OpenAI error (Chat Completions and Responses share the shape)."""
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return ErrorReply(status, body, dict(headers or {}))


def retry_headers(retry_after_ms: int | None) -> dict[str, str]:
    """`retry-after` (whole seconds, rounded up) and `retry-after-ms`, as both providers send."""
    if retry_after_ms is None:
        return {}
    return {
        "retry-after": str(max(0, math.ceil(retry_after_ms / 1000))),
        "retry-after-ms": str(retry_after_ms),
    }


# Auth ---------------------------------------------------------------------------------------

ANTHROPIC_NO_KEY = "x-api-key header is required"
ANTHROPIC_BAD_KEY = "invalid x-api-key"
ANTHROPIC_NO_VERSION = "anthropic-version: header is required"
OPENAI_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using "
    "Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if "
    "you're accessing the API from your browser and are prompted for a username and password. You can "
    "obtain an API key from https://platform.openai.com/account/api-keys."
)


def openai_bad_key(key: str) -> str:
    """OpenAI's wording for a wrong key; the key is masked except its last four characters."""
    shown = key[:3] + "*" * max(0, len(key) - 7) + key[-4:] if len(key) > 8 else key
    return f"Incorrect API key provided: {shown}. You can find your API key at https://platform.openai.com/account/api-keys."


# Faults -------------------------------------------------------------------------------------


def anthropic_fault(name: str, retry_after_ms: int | None, request_id: str) -> ErrorReply:
    """The Anthropic answer for an injected `http_*` fault."""
    if name == "http_429":
        return anthropic(
            429,
            "This request would exceed the rate limit for your organization of 50 requests per minute. "
            "For details, refer to: https://docs.claude.com/en/api/rate-limits.",
            request_id,
            retry_headers(retry_after_ms),
        )
    if name == "http_500":
        return anthropic(500, "Internal server error", request_id)
    if name == "http_529":
        return anthropic(529, "Overloaded", request_id, {"x-should-retry": "true"})
    return anthropic(400, "Output blocked by content filtering policy", request_id)


def openai_fault(name: str, retry_after_ms: int | None, model: str) -> ErrorReply:
    """The OpenAI answer for an injected `http_*` fault (`http_529` answers 503 overloaded)."""
    if name == "http_429":
        wait = retry_after_ms if retry_after_ms is not None else 1000
        return openai(
            429,
            f"Rate limit reached for {model} in organization org-test on requests per min (RPM): "
            f"Limit 3, Used 3, Requested 1. Please try again in {wait}ms.",
            type="requests",
            code="rate_limit_exceeded",
            headers=retry_headers(retry_after_ms),
        )
    if name == "http_500":
        return openai(
            500,
            "The server had an error while processing your request. Sorry about that!",
            type="server_error",
        )
    if name == "http_529":
        return openai(503, "The engine is currently overloaded, please try again later.", type="server_error")
    return openai(
        400,
        "Invalid prompt: your prompt was flagged as potentially violating our usage policy.",
        code="invalid_prompt",
    )
