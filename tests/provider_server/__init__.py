"""Provider test servers: a local HTTP app speaking Anthropic Messages and OpenAI Chat
Completions/Responses from a script, refusing what the real APIs refuse.

    with ProviderServer([{"content": [{"kind": "text", "text": "hi"}]}]) as server:
        client = anthropic.Anthropic(api_key="test", base_url=server.anthropic_url)
"""

from .app import RecordedRequest, counted_tokens
from .rules import Rejection, check, check_anthropic, check_openai_chat, check_openai_responses
from .script import Fault, Reply, Usage, load_jsonl, parse_entry, parse_script
from .server import ProviderServer

__all__ = [
    "Fault",
    "ProviderServer",
    "RecordedRequest",
    "Rejection",
    "Reply",
    "Usage",
    "check",
    "check_anthropic",
    "check_openai_chat",
    "check_openai_responses",
    "counted_tokens",
    "load_jsonl",
    "parse_entry",
    "parse_script",
]
