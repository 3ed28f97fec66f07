"""runfold's own renderers against the provider test servers' rules: any well-formed internal
conversation, rendered for each dialect, is a request the servers accept (the issue's "no
request is rejected by the server", checked for every shape the generator reaches).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from provider_server import rules
from runfold.core.render import RequestSpec, SystemSegment, ToolSpec, render

TOOL = ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})
words = st.text(alphabet="abc xyz éü", min_size=1, max_size=12).filter(lambda s: s.strip() != "")


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Internal conversations: alternating, every call answered first in the next user message,
    optional thinking first in a reply, optional held text after the results."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"kind": "text", "text": draw(words)}]}]
    n = 0
    for _ in range(draw(st.integers(0, 4))):
        k = draw(st.integers(0, 3))
        ids = [f"toolu_{n + i}" for i in range(k)]
        n += k
        reply: list[dict[str, Any]] = []
        if draw(st.booleans()):
            reply.append({"kind": "thinking", "thinking": draw(words), "signature": f"sig{n}"})
        if draw(st.booleans()) or not ids:
            reply.append({"kind": "text", "text": draw(words)})
        path = draw(words)
        reply += [
            {"kind": "tool_use", "id": i, "name": "read_file", "input": json.dumps({"path": path})}
            for i in ids
        ]
        messages.append({"role": "assistant", "content": reply})
        answer: list[dict[str, Any]] = [
            {"kind": "tool_result", "tool_use_id": i, "content": draw(words), "is_error": draw(st.booleans())}
            for i in ids
        ]
        if draw(st.booleans()) or not ids:
            answer.append({"kind": "text", "text": draw(words)})
        messages.append({"role": "user", "content": answer})
    return messages


@settings(max_examples=100, deadline=None)
@given(
    messages=conversations(),
    dialect=st.sampled_from(rules.DIALECTS),
    stream=st.booleans(),
    system=st.booleans(),
)
def test_rendered_requests_pass_the_servers_own_rules(
    messages: list[dict[str, Any]], dialect: str, stream: bool, system: bool
) -> None:
    spec = RequestSpec(
        model="m",
        system=(SystemSegment("workspace", "You are careful.", edge=True),) if system else (),
        tools=(TOOL,),
        messages=messages,
        cache_key="run-1",
        stream=stream,
    )
    body = json.loads(json.dumps(render(dialect, spec)))
    own = {
        rules.ANTHROPIC: rules.check_anthropic,
        rules.OPENAI_CHAT: rules.check_openai_chat,
        rules.OPENAI_RESPONSES: rules.check_openai_responses,
    }[dialect](body)
    assert own is None, (own, body)
    assert rules.check(dialect, body) is None
