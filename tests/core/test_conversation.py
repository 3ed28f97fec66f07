"""The Conversation's rules, one test each (DESIGN.md §6), plus the foreign ledger's run folded
by hand through it (the run fold proper is `core/fold`)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from runfold.core.conversation import BlockSource, Conversation, conversation_shape
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.messages import Block, text_block, thinking_block, tool_use_block
from runfold.core.payloads import ToolCalled, ToolResult
from runfold.core.tool_result import tool_result_block, tool_use_block_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def src(seq: int, cause: str = "message") -> BlockSource:
    return BlockSource(seq, cause)


def result(call_id: str, value: int = 1) -> Block:
    return tool_result_block(ToolResult(tool_use_id=call_id, name="probe", result={"n": value}))


def opened(text: str = "do the task") -> Conversation:
    conv = Conversation()
    conv.open_with(text, src(1, "seed"))
    return conv


def texts(conv: Conversation) -> list[list[str]]:
    """Each message as a list of short labels: text, `result:<id>`, `call:<id>`."""
    out = []
    for m in conv.messages:
        row = []
        for b in m["content"]:
            if b["kind"] == "text":
                row.append(b["text"])
            elif b["kind"] == "tool_result":
                row.append(f"result:{b['tool_use_id']}")
            elif b["kind"] == "tool_use":
                row.append(f"call:{b['id']}")
            else:
                row.append(b["kind"])
        out.append(row)
    return out


def roles(conv: Conversation) -> list[str]:
    return [m["role"] for m in conv.messages]


# ---- the tool block printer ------------------------------------------------------------


def test_tool_result_block_prints_compact_canonical_json() -> None:
    ok = ToolResult(tool_use_id="c1", name="read", result={"z": 1, "a": "é\n", "m": [1, {"y": 2, "b": 3}]})
    assert tool_result_block(ok) == {
        "kind": "tool_result",
        "tool_use_id": "c1",
        "content": '{"a":"é\\n","m":[1,{"b":3,"y":2}],"z":1}',
        "is_error": False,
    }
    err = RunfoldError(ErrorCode.TOOL_OUTCOME_UNKNOWN, "run tool", "c2", "check before retrying")
    bad = ToolResult(tool_use_id="c2", name="write", error=err.to_data())
    block = tool_result_block(bad)
    assert block["is_error"] is True
    assert orjson.loads(block["content"])["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    assert block["content"].startswith('{"action":"run tool","code":')
    # the payload read back from a line prints the same bytes
    again = ToolResult.from_data(orjson.loads(orjson.dumps(bad.to_data())))
    assert tool_result_block(again) == block


def test_tool_use_block_of_keeps_argument_text_verbatim() -> None:
    assert tool_use_block_of(ToolCalled(id="c1", name="f", args='{"x": 1.50}')) == tool_use_block(
        "c1", "f", '{"x": 1.50}'
    )
    assert (
        tool_use_block_of(ToolCalled(id="c2", name="f", args={"b": 1, "a": "x"}))["input"]
        == '{"a":"x","b":1}'
    )


# ---- alternation and the open message --------------------------------------------------


def test_all_user_content_joins_the_open_user_message() -> None:
    conv = opened()
    assert conv.add_steer("user", "also check tests", src(2)) == "joined"
    assert conv.add_steer("runtime", "budget at 50%", src(3, "framework")) == "joined"
    assert texts(conv) == [["do the task", "user: also check tests", "runtime: budget at 50%"]]
    assert conv.sources == [[src(1, "seed"), src(2), src(3, "framework")]]


def test_text_after_send_is_held_and_lands_after_the_tool_results() -> None:
    conv = opened()
    assert conv.mark_sent() == "first"
    assert conv.add_steer("user", "early", src(2)) == "held"
    conv.add_reply(
        [text_block("calling"), tool_use_block("c1", "probe", "{}"), tool_use_block("c2", "probe", "{}")],
        src(3, "model_reply"),
    )
    assert conv.open_calls == ["c1", "c2"]
    assert conv.add_steer("@lab/room2 kind=steer", "between reply and wave", src(4)) == "held"
    assert not conv.is_sendable
    # results arrive out of call order: written in call order, held text after them
    conv.add_tool_results([result("c2"), result("c1")], [src(6, "tool_result"), src(5, "tool_result")])
    assert texts(conv) == [
        ["do the task"],
        ["calling", "call:c1", "call:c2"],
        [
            "result:c1",
            "result:c2",
            "user: early",
            '<letter from="@lab/room2" kind="steer">between reply and wave</letter>',
        ],
    ]
    assert conv.sources[2] == [src(5, "tool_result"), src(6, "tool_result"), src(2), src(4)]
    assert conv.held == []
    assert conv.is_sendable
    assert conv.mark_sent() == "extended"


def test_steer_before_any_send_joins_and_after_a_text_reply_opens_the_next_message() -> None:
    conv = opened()
    conv.mark_sent()
    conv.add_reply([text_block("done")], src(2, "model_reply"))
    assert conv.open_calls == []
    assert conv.add_steer("user", "one more thing", src(3)) == "opened"
    assert roles(conv) == ["user", "assistant", "user"]
    assert conv.add_steer("user", "and another", src(4)) == "joined"
    assert conv.mark_sent() == "extended"


def test_a_reply_marks_its_request_sent_even_without_mark_sent() -> None:
    """Foreign ledgers have no prompt_shape_compared: the reply itself proves the request left."""
    conv = opened()
    conv.add_reply([tool_use_block("a", "f", "{}")], src(2, "model_reply"))
    assert conv.sent_count == 1
    conv.add_tool_results([result("a")], [src(3, "tool_result")])
    conv.add_reply([], src(4, "model_reply"))
    assert conv.add_steer("user", "late", src(5)) == "held"


def test_a_reopened_message_takes_further_text_until_the_next_send() -> None:
    conv = opened()
    conv.mark_sent()
    conv.add_steer("user", "a", src(2))
    conv.add_reply([], src(3, "model_reply"))
    assert conv.flush_held() is True
    assert conv.add_steer("user", "b", src(4)) == "joined"
    assert conv.mark_sent() == "reopened"
    assert conv.add_steer("user", "c", src(5)) == "held"


def test_held_text_is_flushed_after_a_reply_without_calls() -> None:
    conv = opened()
    conv.mark_sent()
    conv.add_steer("user", "wait", src(2))
    assert conv.flush_held() is False  # no reply yet: nothing may land
    conv.add_reply([text_block("finished")], src(3, "model_reply"))
    assert conv.flush_held() is True
    assert texts(conv) == [["do the task"], ["finished"], ["user: wait"]]
    assert conv.flush_held() is False
    assert conv.mark_sent() == "extended"


def test_held_order_is_kept_when_new_text_arrives_before_the_flush() -> None:
    conv = opened()
    conv.mark_sent()
    conv.add_steer("user", "first", src(2))
    conv.add_reply([text_block("ok")], src(3, "model_reply"))
    conv.add_steer("user", "second", src(4))
    assert texts(conv)[-1] == ["user: first", "user: second"]


def test_empty_reply_pushes_nothing_and_held_text_reopens_the_sent_message() -> None:
    conv = opened()
    conv.mark_sent()
    conv.add_steer("user", "hurry", src(2))
    assert conv.add_reply([], src(3, "model_reply")) is False
    assert conv.add_reply([text_block("  \n")], src(4, "model_reply")) is False  # blank text is no content
    assert len(conv) == 1
    before = conv.messages
    assert conv.flush_held() is True
    assert texts(conv) == [["do the task", "user: hurry"]]
    assert conv.sent_count == 0
    assert conversation_shape(before, conv.messages) == "reopened"
    assert conv.check_extends_last_sent() == "reopened"
    assert conv.mark_sent() == "reopened"


def test_results_after_an_empty_reply_write_the_recorded_calls() -> None:
    """The foreign shape: the reply is stored as `{}`; its calls exist only as tool_called lines."""
    conv = opened()
    conv.mark_sent()
    conv.add_reply([], src(4, "model_reply"))
    conv.add_steer("user", "narrow it", src(5))
    call = tool_use_block_of(ToolCalled(id="call-1", name="probe", args={}))
    conv.add_tool_results(
        [result("call-1")], [src(7, "tool_result")], calls=[call], call_sources=[src(6, "model_reply")]
    )
    assert texts(conv) == [["do the task"], ["call:call-1"], ["result:call-1", "user: narrow it"]]
    assert conv.sources[1] == [src(6, "model_reply")]
    assert conv.mark_sent() == "extended"


def test_recorded_calls_the_reply_already_holds_are_not_repeated_and_missing_ones_are_appended() -> None:
    conv = opened()
    conv.mark_sent()
    conv.add_reply([text_block("x"), tool_use_block("a", "f", "{}")], src(2, "model_reply"))
    conv.add_tool_results(
        [result("a"), result("b")],
        [src(5, "tool_result"), src(6, "tool_result")],
        calls=[tool_use_block("a", "f", "{}"), tool_use_block("b", "f", "{}")],
        call_sources=[src(3, "model_reply"), src(4, "model_reply")],
    )
    assert texts(conv)[1:] == [["x", "call:a", "call:b"], ["result:a", "result:b"]]


@pytest.mark.parametrize(
    ("results", "calls", "needle"),
    [
        (["a"], [], "calls without a result: b"),
        (["a", "b", "z"], [], "results for no call of this wave: z"),
        (["a", "a", "b"], [], "two results"),
    ],
)
def test_incomplete_or_foreign_waves_are_refused_and_change_nothing(
    results: list[str], calls: list[str], needle: str
) -> None:
    conv = opened()
    conv.mark_sent()
    conv.add_reply([tool_use_block("a", "f", "{}"), tool_use_block("b", "f", "{}")], src(2, "model_reply"))
    before = (conv.messages, conv.sources, conv.open_calls)
    with pytest.raises(RunfoldError) as err:
        conv.add_tool_results(
            [result(r) for r in results], [src(9 + i, "tool_result") for i in range(len(results))]
        )
    assert err.value.code is ErrorCode.INVALID_ARGS
    assert needle in err.value.action
    assert err.value.subject.startswith("seq")  # names the line(s)
    assert (conv.messages, conv.sources, conv.open_calls) == before


def test_results_with_no_call_are_refused() -> None:
    conv = opened()
    conv.mark_sent()
    conv.add_reply([], src(2, "model_reply"))
    with pytest.raises(RunfoldError, match="no call before them"):
        conv.add_tool_results([result("x")], [src(3, "tool_result")])


def test_duplicate_tool_call_ids_are_refused() -> None:
    conv = opened()
    conv.mark_sent()
    conv.add_reply([tool_use_block("a", "f", "{}")], src(2, "model_reply"))
    conv.add_tool_results([result("a")], [src(3, "tool_result")])
    conv.mark_sent()
    with pytest.raises(RunfoldError, match="duplicate tool call id 'a'"):
        conv.add_reply([tool_use_block("a", "f", "{}")], src(4, "model_reply"))
    with pytest.raises(RunfoldError, match="duplicate"):
        conv.add_reply(
            [tool_use_block("b", "f", "{}"), tool_use_block("b", "f", "{}")], src(4, "model_reply")
        )


def test_reply_needs_a_user_turn() -> None:
    with pytest.raises(RunfoldError, match="no user turn"):
        Conversation().add_reply([text_block("hi")], src(1, "model_reply"))
    conv = opened()
    conv.add_reply([text_block("a")], src(2, "model_reply"))
    with pytest.raises(RunfoldError, match="no user turn"):
        conv.add_reply([text_block("b")], src(3, "model_reply"))


def test_blank_user_text_is_refused_at_the_entrance() -> None:
    conv = opened()
    for text in ["", "   ", "\n\t"]:
        with pytest.raises(RunfoldError) as err:
            conv.add_user_text(text, src(7))
        assert err.value.subject == "seq 7"
        assert "empty" in err.value.action
    with pytest.raises(RunfoldError):
        Conversation().open_with(" ", src(0, "seed"))


def test_reply_keeps_thinking_first_and_drops_only_blank_text() -> None:
    conv = opened()
    conv.mark_sent()
    think = thinking_block("hmm", "sig", dialect="anthropic")
    conv.add_reply([think, text_block(""), tool_use_block("a", "f", "{}")], src(2, "model_reply"))
    assert conv.messages[1]["content"] == [think, tool_use_block("a", "f", "{}")]


def test_unknown_block_kind_in_a_reply_names_the_seq_and_index() -> None:
    conv = opened()
    conv.mark_sent()
    with pytest.raises(RunfoldError) as err:
        conv.add_reply([text_block("a"), {"kind": "video"}], src(5, "model_reply"))
    assert err.value.subject == "seq 5 message.content[1]"


def test_mark_sent_refuses_an_unsendable_conversation() -> None:
    with pytest.raises(RunfoldError, match="empty"):
        Conversation().mark_sent()
    conv = opened()
    conv.mark_sent()
    conv.add_reply([tool_use_block("a", "f", "{}")], src(2, "model_reply"))
    with pytest.raises(RunfoldError, match="unanswered"):
        conv.mark_sent()


def test_drop_open_wave_removes_only_an_unanswered_reply() -> None:
    conv = opened()
    conv.mark_sent()
    assert conv.drop_open_wave() is False
    conv.add_steer("user", "held", src(2))
    conv.add_reply([text_block("x"), tool_use_block("a", "f", "{}")], src(3, "model_reply"))
    assert conv.drop_open_wave() is True
    assert texts(conv) == [["do the task"]]
    assert [h.block["text"] for h in conv.held] == ["user: held"]
    assert conv.is_sendable


def test_views_are_copies() -> None:
    conv = opened()
    conv.messages[0]["content"].append(text_block("sneaky"))
    conv.sources[0].append(src(9))
    assert texts(conv) == [["do the task"]]
    twin = conv.copy()
    twin.add_steer("user", "only in the twin", src(2))
    assert texts(conv) == [["do the task"]]


def test_block_source_checks_cause_and_seq() -> None:
    with pytest.raises(RunfoldError, match="cause 'steer'"):
        BlockSource(1, "steer")
    with pytest.raises(RunfoldError):
        BlockSource(-1, "seed")


def test_conversation_shape() -> None:
    u1 = {"role": "user", "content": [text_block("a")]}
    u1b = {"role": "user", "content": [text_block("a"), text_block("b")]}
    a1 = {"role": "assistant", "content": [text_block("r")]}
    u2 = {"role": "user", "content": [text_block("c")]}
    assert conversation_shape(None, [u1]) == "first"
    assert conversation_shape([u1], [u1, a1, u2]) == "extended"
    assert conversation_shape([u1], [u1b]) == "reopened"
    assert conversation_shape([u1b], [u1]) == "rewritten"
    assert conversation_shape([u1, a1, u2], [u1b, a1, u2]) == "rewritten"
    assert conversation_shape([u1, a1], [u1]) == "rewritten"


def test_inherit_verbatim_then_the_opening_joins() -> None:
    conv = opened()
    conv.mark_sent()
    conv.add_reply([tool_use_block("a", "f", "{}")], src(2, "model_reply"))
    conv.add_tool_results([result("a")], [src(3, "tool_result")])
    child = Conversation.inherit(conv.messages, conv.sources)
    assert child.messages == conv.messages and child.sent_count == 0
    assert child.open_with("Handed down by x:\n<task>t</task>\n<goal>g</goal>", src(10, "seed")) == "joined"
    assert child.is_sendable


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "assistant", "content": [text_block("x")]}],
        [{"role": "user", "content": [text_block("x")]}, {"role": "user", "content": [text_block("y")]}],
        [{"role": "user", "content": []}],
        [{"role": "user", "content": [text_block(" ")]}],
        [
            {"role": "user", "content": [text_block("x")]},
            {"role": "assistant", "content": [tool_use_block("a", "f", "{}")]},
        ],
        [
            {"role": "user", "content": [text_block("x")]},
            {"role": "assistant", "content": [tool_use_block("a", "f", "{}")]},
            {"role": "user", "content": [text_block("no result")]},
        ],
        [{"role": "user", "content": [result("a")]}],
    ],
)
def test_inherit_refuses_shapes_a_conversation_never_produces(messages: list[dict[str, object]]) -> None:
    sources = [[src(0, "seed")] * len(m["content"]) for m in messages]  # type: ignore[arg-type]
    with pytest.raises(RunfoldError) as err:
        Conversation.inherit(messages, sources)
    assert err.value.code is ErrorCode.INVALID_ARGS


def test_foreign_run_folds_by_hand() -> None:
    """sprawling-golden-p0: two `{}` replies whose calls exist only as tool_called lines, a steer
    between the first reply and its wave, a final text reply."""
    conv = Conversation()
    conv.open_with("The task is in the job file above, handed down by city.", src(1, "seed"))
    for raw in (FIXTURES / "sprawling-golden-p0.jsonl").read_bytes().splitlines():
        line = orjson.loads(raw)
        seq, kind, data = line["seq"], line["kind"], line["data"]
        if kind == "model_called":
            conv.mark_sent()
            pending: list[tuple[Block, BlockSource]] = []
        elif kind == "model_returned":
            conv.add_reply(data["message"].get("content", []), src(seq, "model_reply"))
        elif kind == "steer_received":
            conv.add_steer(data["source"], data["text"], src(seq))
        elif kind == "tool_called":
            pending.append((tool_use_block_of(ToolCalled.from_data(data)), src(seq, "model_reply")))
        elif kind == "tool_result":
            conv.add_tool_results(
                [tool_result_block(ToolResult.from_data(data))],
                [src(seq, "tool_result")],
                calls=[c for c, _ in pending],
                call_sources=[s for _, s in pending],
            )
    assert texts(conv) == [
        ["The task is in the job file above, handed down by city."],
        ["call:call-1"],
        ["result:call-1", "user: narrow the search to the changed files"],
        ["call:call-2"],
        ["result:call-2"],
        ["two waves walked"],
    ]
    assert conv.messages[2]["content"][0]["content"] == '{"content":"{}"}'
    assert [s.seq for row in conv.sources for s in row] == [1, 6, 7, 5, 11, 12, 15]
