"""The one interface every model provider implements (DESIGN.md §8).

The run loop renders and validates the request itself and hands the provider the exact bytes
to send, so `model_called.request.hash` is the hash of what went on the wire; the provider
sends them, streams the reply and returns it in the internal message form.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from runfold.core.errors import ErrorCode, Retry, RunfoldError
from runfold.core.messages import Block

Dialect = str
"""One of `anthropic`, `openai-chat`, `openai-responses` (the renderer/validator names)."""

DEFAULT_MAX_TOKENS = 4096
"""Output ceiling in tokens when neither the provider nor the workspace config sets one."""


@dataclass(frozen=True)
class CallSettings:
    """What every request of a run is rendered with besides the conversation (DESIGN.md §8):
    `max_tokens` (output ceiling, tokens), `stream`, `thinking` (the dialect's own keys, e.g.
    Anthropic `{type: enabled, budget_tokens: 2048}`, OpenAI `{effort: low, summary: auto}`),
    `temperature_milli` (per-mille). Frozen into the run's prefix and a recording's header.
    `context_window`: the model's context window in tokens when the provider itself fixes it (the
    embedded model's `n_ctx`); None: from `[models]` (DESIGN.md §10). Not part of the request."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    stream: bool = False
    thinking: dict[str, Any] | None = None
    temperature_milli: int | None = None
    context_window: int | None = None

    def to_data(self) -> dict[str, Any]:
        """The settings as a JSON object, keyed by field name (a recording's header);
        `context_window` only when set."""
        data = asdict(self)
        if self.context_window is None:
            del data["context_window"]
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any], base: CallSettings | None = None) -> CallSettings:
        """`base` (default: the defaults) with the fields `data` holds; other keys are ignored."""
        given = {k: data[k] for k in CALL_SETTING_KEYS if k in data}
        return replace(base if base is not None else cls(), **given)


CALL_SETTING_KEYS: tuple[str, ...] = ("max_tokens", "stream", "thinking", "temperature_milli", "context_window")
"""The fields of `CallSettings`, in order."""


@dataclass(frozen=True)
class Usage:
    """Token counts of one call; cache_read/cache_write are prompt tokens served from or written
    to the provider's prompt cache (Anthropic `cache_read_input_tokens`/`cache_creation_input_tokens`,
    OpenAI `prompt_tokens_details.cached_tokens`)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def to_data(self) -> dict[str, int]:
        return {
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "input": self.input,
            "output": self.output,
        }


@dataclass(frozen=True)
class Reply:
    """A model's reply: internal content blocks, stop reason (`end_turn`, `tool_use`,
    `max_tokens`, `refusal`, ...), usage, µs from send to the first streamed byte and to the end."""

    blocks: list[Block]
    stop: str | None = None
    usage: Usage | None = None
    first_byte_us: int | None = None
    took_us: int | None = None
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    """What the run loop hands a provider: the rendered body, the exact bytes of it that must be
    sent (and were hashed into `model_called`), and whether to stream."""

    dialect: Dialect
    model: str
    body: dict[str, Any]
    body_bytes: bytes
    stream: bool = True


StreamCallback = Callable[[str, str], Awaitable[None] | None]
"""Called with (block kind, text delta) while a reply streams; for live views only."""


REFUSED_RECOVERY = (
    "nothing answered at that URL: check that the server is running and listening there, and "
    "that the URL is right (for openai-compat: the part after @)"
)


class ProviderError(RunfoldError):
    """A provider call failed. `status` is the HTTP status (None for a cut stream or a local
    failure); `retry` says whether the run loop backs off and tries again (408/429/5xx/cut);
    `refused`: nothing answered at the URL (connection refused), which the loop retries at
    most once (`runtime.retry.RetryPolicy`)."""

    status: int | None
    refused: bool

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        retryable: bool,
        retry_after_ms: int | None = None,
        subject: str = "the model provider",
        refused: bool = False,
    ) -> None:
        super().__init__(
            code=ErrorCode.PROVIDER,
            action=f"call the model ({message})",
            subject=subject,
            recovery=(
                REFUSED_RECOVERY
                if refused
                else "runfold retries this with back-off; if it persists check the provider's status"
                if retryable
                else "fix the request or the provider settings (model name, key, base URL) and continue the run"
            ),
            retry=Retry.YES if retryable else Retry.NO,
            retry_after_ms=retry_after_ms,
        )
        self.status = status
        self.refused = refused


def retryable_status(status: int) -> bool:
    """408, 409, 429 and every 5xx are retried (DESIGN.md §8)."""
    return status in (408, 409, 429) or status >= 500


class Provider(Protocol):
    """A model provider. `dialect` picks the renderer and validator; `model` is the provider's
    model name as recorded in `model_called.model`; `settings` the call settings the run loop
    renders its requests with (frozen into the run's prefix)."""

    dialect: Dialect
    model: str
    settings: CallSettings

    async def complete(self, request: Request, on_delta: StreamCallback | None = None) -> Reply:
        """Send `request.body_bytes` exactly and return the reply. Raises ProviderError."""
        ...

    async def aclose(self) -> None:
        """Release connections (HTTP clients, model weights)."""
        ...
