"""What the SDK-backed providers share: SDK exceptions mapped to `ProviderError`, retry-after
headers read as ms, a send clock for first-byte/total µs, and delta callbacks (DESIGN.md §8).

Both official SDKs (`anthropic`, `openai`) raise the same family of exceptions (status errors
with the HTTP response, connection errors, stream cuts from their HTTP client); keeping the
mapping here makes a 429 mean the same thing whichever provider answered it. `SdkProvider` is
the construction they share: the key and base URL from the environment, a client that never
retries, the call settings, the headers that leave out credentials when no key is set.
"""

from __future__ import annotations

import email.utils
import importlib
import inspect
import os
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from runfold.core.messages import Block
from runfold.providers.base import CallSettings, ProviderError, StreamCallback, retryable_status

JSON_HEADERS: Mapping[str, str] = {"content-type": "application/json"}
"""The request headers the raw body is sent with (the SDKs add auth, version and user agent)."""


def _http_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's transport errors (the SDKs use `httpx2`; plain `httpx` for older ones)."""
    found: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        found.append(module.HTTPError)
        found.append(module.StreamError)
    return tuple(found)


TRANSPORT_ERRORS = _http_errors()


class Clock:
    """µs since the request was sent: `first()` stamps the first streamed event once,
    `took()` reads the total."""

    def __init__(self) -> None:
        self._start = time.perf_counter_ns()
        self.first_byte_us: int | None = None

    def first(self) -> None:
        if self.first_byte_us is None:
            self.first_byte_us = (time.perf_counter_ns() - self._start) // 1000

    def took(self) -> int:
        return (time.perf_counter_ns() - self._start) // 1000


async def emit(on_delta: StreamCallback | None, kind: str, text: str) -> None:
    """Call the live-view callback with (block kind, text delta); awaits it when it is async."""
    if on_delta is None or not text:
        return
    out = on_delta(kind, text)
    if inspect.isawaitable(out):
        await out


def retry_after_ms(headers: Mapping[str, str] | Any, now: datetime | None = None) -> int | None:
    """The server's back-off hint in ms: `retry-after-ms` (ms, may be fractional), else
    `retry-after` (seconds, or an HTTP date). None when absent or unreadable."""
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms)
        except ValueError:
            value = -1.0
        if value >= 0:
            return int(value)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0, int(float(raw) * 1000))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delta = when - (now or datetime.now(UTC))
    return max(0, int(delta.total_seconds() * 1000))


def error_text(body: Any, fallback: str) -> tuple[str | None, str]:
    """(error type, message) from a provider error body: Anthropic `{type: error, error: {type,
    message}}`, OpenAI `{error: {message, type, code}}` or the inner object the SDK keeps."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            body = inner
        message = body.get("message")
        kind = body.get("type") or body.get("code")
        if isinstance(message, str) and message:
            return (str(kind) if kind else None), message
    if isinstance(body, str) and body:
        return None, body
    return None, fallback


def map_sdk_error(err: BaseException, *, provider: str, key_hint: str | None = None) -> ProviderError:
    """An SDK or transport exception as a `ProviderError`.

    - a status error (any `APIStatusError`): `status` = the HTTP status, retryable for
      408/409/429/5xx (`retryable_status`), `retry_after_ms` from the response headers, the
      provider's own message; a 200 status means an `error` event inside the stream, retryable
      unless its type is `invalid_request_error`;
    - a connection error, a timeout or a cut stream: status None, retryable;
    - anything else the SDK raises (e.g. a malformed event): status None, not retryable.
    `key_hint` is appended to 401/403 messages (e.g. "no API key was sent: set ANTHROPIC_API_KEY").
    """
    status = getattr(err, "status_code", None)
    response = getattr(err, "response", None)
    if isinstance(status, int):
        kind, message = error_text(getattr(err, "body", None), str(getattr(err, "message", err)))
        label = f"{provider} HTTP {status}" + (f" {kind}" if kind else "")
        if status == 200:
            retryable = kind != "invalid_request_error"
            return ProviderError(
                f"{provider} stream error{f' {kind}' if kind else ''}: {message}",
                status=None,
                retryable=retryable,
            )
        if status in (401, 403) and key_hint:
            message = f"{message} ({key_hint})"
        return ProviderError(
            f"{label}: {message}",
            status=status,
            retryable=retryable_status(status),
            retry_after_ms=retry_after_ms(getattr(response, "headers", None)),
        )
    name = type(err).__name__
    if connection_refused(err):
        url = _request_url(err)
        return ProviderError(
            f"nothing answered at {url or provider}: connection refused",
            status=None,
            retryable=True,
            refused=True,
            subject=provider,
        )
    if "Timeout" in name or "Connection" in name or isinstance(err, TRANSPORT_ERRORS):
        return ProviderError(
            f"{provider} connection failed or the stream was cut ({name}: {err})", status=None, retryable=True
        )
    body = getattr(err, "body", None)
    kind, message = error_text(body, str(err))
    if body is not None and kind in ("server_error", "api_error", "overloaded_error", None):
        # an error chunk inside an OpenAI stream (the SDK raises APIError without a status)
        return ProviderError(f"{provider} stream error: {message}", status=None, retryable=True)
    return ProviderError(f"{provider} failed ({name}: {message})", status=None, retryable=False)


def connection_refused(err: BaseException) -> bool:
    """True when `err` or an exception it was raised from (SDK → httpx → the socket) is a
    refused connection: nothing listens at the address."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, ConnectionRefusedError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _request_url(err: BaseException) -> str | None:
    """The URL of the request `err` is about, when the SDK kept it (`err.request.url`)."""
    try:
        url = getattr(getattr(err, "request", None), "url", None)
    except RuntimeError:  # httpx raises when an error carries no request
        return None
    return str(url) if url is not None else None


def cut_stream(provider: str, what: str) -> ProviderError:
    """A stream that ended without its closing event: retryable, status None."""
    return ProviderError(f"{provider} stream ended before {what} (cut stream)", status=None, retryable=True)


def refusal(provider: str, blocks: Sequence[Block], why: str) -> ProviderError:
    """The model refused to answer (Anthropic `stop_reason: refusal`, OpenAI `content_filter`):
    not retryable; the message quotes the start of any text it gave."""
    said = " ".join(b["text"] for b in blocks if b["kind"] == "text").strip()
    quoted = f": {said[:200]!r}" if said else ""
    return ProviderError(f"{provider} refused the request ({why}){quoted}", status=None, retryable=False)


class SdkProvider:
    """The construction every SDK-backed provider shares (subclasses name `SDK` and `CLIENT`,
    the SDK module and its async client class, `KEY_ENV`, `BASE_URL_ENV` and `AUTH_HEADERS`).

    `api_key`: None reads `KEY_ENV`; with neither the request goes out without credentials
    (`AUTH_HEADERS` omitted) and a 401 comes back as a non-retryable `ProviderError` naming the
    variable. `base_url`: None reads `BASE_URL_ENV`, else the SDK's default. `timeout_s`: seconds
    the SDK waits for the response and between streamed events. `client`: an SDK async client to
    reuse (its retries are not used: every attempt is a `model_called` line). `max_tokens`,
    `stream`, `thinking`, `temperature_milli`: the `CallSettings` (`[providers.<family>]`).
    """

    SDK = ""
    CLIENT = ""
    KEY_ENV = ""
    BASE_URL_ENV = ""
    AUTH_HEADERS: tuple[str, ...] = ("Authorization",)
    dialect = ""
    provider_name = ""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float = 600.0,
        client: Any = None,
        max_tokens: int = 4096,
        stream: bool = True,
        thinking: dict[str, Any] | None = None,
        temperature_milli: int | None = None,
    ) -> None:
        self.model = model
        self.settings = CallSettings(max_tokens, stream, thinking, temperature_milli)
        try:
            self._sdk = importlib.import_module(self.SDK)
        except ImportError as err:  # pragma: no cover - the SDKs are runtime dependencies
            raise ProviderError(
                f"import the {self.SDK} SDK ({err}); install it with `pip install {self.SDK}`",
                status=None,
                retryable=False,
            ) from None
        key = api_key if api_key is not None else os.environ.get(self.KEY_ENV)
        self._keyless = not key
        self._key = key or None
        self._client = client or getattr(self._sdk, self.CLIENT)(
            api_key=key or "no-key",
            base_url=base_url or os.environ.get(self.BASE_URL_ENV) or None,
            max_retries=0,
            timeout=timeout_s,
        )

    def credentials(self) -> list[tuple[str, str]]:
        """The key this provider sends, as (the variable it is read from, value); empty when
        keyless. The run loop keeps it out of every line (`runtime.redaction`)."""
        return [] if self._key is None else [(self.KEY_ENV or "API key", self._key)]

    def _headers(self) -> dict[str, Any]:
        headers: dict[str, Any] = dict(JSON_HEADERS)
        if self._keyless:
            for name in self.AUTH_HEADERS:
                headers[name] = self._sdk.Omit()
        return headers

    def _hint(self) -> str:
        return f"no API key was sent: set {self.KEY_ENV}" if self._keyless else f"check {self.KEY_ENV}"

    async def aclose(self) -> None:
        await self._client.close()
