"""The provider test server's `POST /v1/messages/count_tokens`: the official SDK's
`messages.count_tokens` gets a deterministic count, refusals come back as the SDK's exceptions,
and no script entry is used."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from provider_server import ProviderServer, counted_tokens

MESSAGES = [{"role": "user", "content": "Hello, Claude"}]


def client(server: ProviderServer, key: str = "k") -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=server.anthropic_url, max_retries=0)


def test_sdk_count_is_deterministic_and_uses_no_script_entry() -> None:
    with ProviderServer([{"content": [{"kind": "text", "text": "ok"}]}]) as server:
        first = client(server).messages.count_tokens(
            model="claude-sonnet-4-5", messages=MESSAGES, system="Be brief."
        )
        again = client(server).messages.count_tokens(
            model="claude-sonnet-4-5", messages=MESSAGES, system="Be brief."
        )
        assert server.remaining == 1 and not server.accepted
        recs = server.requests
    expected = counted_tokens({"model": "claude-sonnet-4-5", "messages": MESSAGES, "system": "Be brief."})
    assert first.input_tokens == again.input_tokens == expected
    assert [r.path for r in recs] == ["/v1/messages/count_tokens"] * 2


def test_refusals_are_the_sdk_exceptions() -> None:
    with ProviderServer(api_key="right") as server:
        with pytest.raises(anthropic.AuthenticationError):
            client(server, "wrong").messages.count_tokens(model="m", messages=MESSAGES)
        with pytest.raises(anthropic.BadRequestError, match="max_tokens: Extra inputs are not permitted"):
            client(server, "right").messages.count_tokens(
                model="m", messages=MESSAGES, extra_body={"max_tokens": 10}
            )
        with pytest.raises(anthropic.BadRequestError, match="messages"):
            client(server, "right").messages.count_tokens(
                model="m", messages=[{"role": "assistant", "content": ""}]
            )
        raw = httpx.post(
            server.anthropic_url + "/v1/messages/count_tokens",
            content=b"{not json",
            headers={"x-api-key": "right", "anthropic-version": "2023-06-01"},
        )
        assert raw.status_code == 400 and raw.json()["type"] == "error"
        assert server.remaining == 0
