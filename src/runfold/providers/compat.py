"""Any OpenAI-compatible server (Ollama, vLLM, llama.cpp server, OpenRouter) by base URL
(DESIGN.md §8).

These servers speak Chat Completions, so this is the Chat provider pointed at another base URL;
the key is optional (`OPENAI_API_KEY` when set, else no credentials are sent).
"""

from __future__ import annotations

from typing import Any

from runfold.core.errors import invalid_args
from runfold.providers.openai_chat import OpenAIChatProvider


class OpenAICompatProvider(OpenAIChatProvider):
    """`openai-compat:<model>@<base-url>`: Chat Completions at `base_url` (e.g.
    `http://localhost:11434/v1` for Ollama; the SDK appends `/chat/completions`).

    `api_key`: sent when given (the registry passes `OPENAI_API_KEY`), else no credentials;
    `settings`: the call settings of `SdkProvider`. Raises `E_INVALID_ARGS` when `base_url` is not
    an http(s) URL."""

    provider_name = "OpenAI-compatible server"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        client: Any = None,
        **settings: Any,
    ) -> None:
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise invalid_args(
                f"use the OpenAI-compatible base URL {base_url!r}",
                "openai-compat:<model>@<base-url>",
                "give the server's http(s) URL including /v1, e.g. openai-compat:llama3@http://localhost:11434/v1",
            )
        super().__init__(
            model, api_key=api_key or "", base_url=base_url, timeout_s=timeout_s, client=client, **settings
        )
        self.provider_name = f"OpenAI-compatible server at {base_url}"
