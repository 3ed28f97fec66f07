"""The pieces of delegation that need no server: the `[agents]` limits of config.toml, the cause
of a reply letter (`fan_out`, DESIGN.md §10), a delegated run's opening (the parent's words,
escaped, never the person's), and the agent tools added by a run's `agents` option."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runfold.core.causes import Cause
from runfold.core.compaction import steer_cause
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.payloads import SteerReceived
from runfold.core.speakers import LINE_BREAK, Letter, render_opening
from runfold.runtime.assemble import resolve_defaults
from runfold.runtime.config import AgentLimits, parse_config
from runfold.runtime.spec import Delegated, RunSpec
from runfold.tools import BUILTIN_NAMES

RUN = "01a238fe-f871-75b6-a92a-5129b366edb3"


def test_agent_limits_default_and_are_checked() -> None:
    assert parse_config({}).agents == AgentLimits(max_depth=3, max_fan_out=4)
    assert parse_config({"agents": {"max_depth": 0, "max_fan_out": 1}}).agents == AgentLimits(0, 1)
    for bad, key in (
        ({"agents": {"max_depth": -1}}, "agents.max_depth"),
        ({"agents": {"max_fan_out": 0}}, "agents.max_fan_out"),
        ({"agents": {"max_fan_out": True}}, "agents.max_fan_out"),
        ({"agents": {"max_depht": 2}}, "agents.max_depht"),
        ({"agents": 3}, "agents"),
    ):
        with pytest.raises(RunfoldError) as info:
            parse_config(bad)
        assert info.value.code is ErrorCode.CONFIG_INVALID and key in info.value.action


def test_a_reply_letter_is_fan_out_and_a_steer_letter_a_message() -> None:
    reply = Letter("lab", RUN, "reply", "done").recorded()
    steer = Letter("lab", RUN, "steer", "running").recorded()
    assert steer_cause(SteerReceived(source=reply, text="x")) is Cause.FAN_OUT
    assert steer_cause(SteerReceived(source=steer, text="x")) is Cause.MESSAGE
    assert steer_cause(SteerReceived(source="user", text="kind=reply")) is Cause.MESSAGE


@given(st.text(min_size=1))
def test_a_delegated_task_opens_escaped_on_lines_the_person_never_speaks(task: str) -> None:
    text = render_opening("inherited", task=task, handed_down_by="lab/room1")
    first, second = LINE_BREAK.split(text, maxsplit=1)
    assert first == "Handed down by lab/room1:"
    assert second.startswith("<task>") and second.endswith("</task>") and not LINE_BREAK.search(second)


def test_the_agents_option_adds_the_agent_tools_to_the_set() -> None:
    config = parse_config({})
    assert resolve_defaults(RunSpec("t"), config).builtin_tools is True
    tools = resolve_defaults(RunSpec("t", agents=True), config).builtin_tools
    assert list(tools) == [*BUILTIN_NAMES, "send_message", "delegate", "wait_for_reply"]  # type: ignore[arg-type]
    assert resolve_defaults(RunSpec("t", builtin_tools=False, agents=True), config).builtin_tools == [
        "send_message",
        "delegate",
        "wait_for_reply",
    ]
    named = resolve_defaults(RunSpec("t", builtin_tools=["read_file", "delegate"], agents=True), config)
    assert named.builtin_tools == ["read_file", "delegate", "send_message", "wait_for_reply"]


def test_a_delegation_round_trips_and_bad_shapes_are_refused() -> None:
    d = Delegated(RUN, "lab", True)
    assert Delegated.from_data(d.to_data()) == d
    for bad in (None, {}, {"parent": "x", "by": "lab"}, {"parent": RUN, "by": 3}, {"parent": RUN, "by": "a", "detach": 1}):
        with pytest.raises(RunfoldError):
            Delegated.from_data(bad)
    with pytest.raises(RunfoldError):
        RunSpec("t", agents="yes")  # type: ignore[arg-type]


def test_a_childs_dispatch_request_carries_every_spec_field_the_owner_reads() -> None:
    """What a serving owner queues for a delegated child rebuilds the child's spec: approvals
    included (a child inherits its parent's policies)."""
    from runfold.server.dispatch import request_of
    from runfold.server.owner import SPEC_FIELDS, spec_of

    child = RunSpec(
        "check the tests", "they pass", "script:/x.jsonl", "lab", 3, builtin_tools=["read_file"],
        system="be brief", run_id="0198f6a2-7c4a-7bbb-9d1e-00000000000a", approvals={"write": "deny", "exec": "ask"},
        agents=True, delegated=Delegated("0198f6a2-7c4a-7bbb-9d1e-00000000000b", "@lab", False),
    )  # fmt: skip
    request = request_of(child)
    assert set(SPEC_FIELDS) <= set(request)
    again = spec_of(request, "0198f6a2-7c4a-7bbb-9d1e-00000000000a")
    for name in SPEC_FIELDS:
        want, got = getattr(child, name), getattr(again, name)
        assert (list(got) if isinstance(got, tuple | list) else got) == (list(want) if isinstance(want, tuple | list) else want), name
    assert again.delegated == child.delegated


def test_a_child_whose_parent_is_cancelled_during_its_dispatch_never_starts() -> None:
    """In-process dispatch waits for the child's first line; a cancel of the delegating run in
    that wait cancels the child's task too (the cascade cannot know a child without a line)."""
    import asyncio
    from types import SimpleNamespace

    from runfold.runtime.delegation import InProcess

    began, finished = asyncio.Event(), []

    async def start(spec: RunSpec) -> None:
        began.set()
        try:
            await asyncio.sleep(60)  # a child slow to write its first line
        finally:
            finished.append(spec.run_id)

    desk = SimpleNamespace(ledger=SimpleNamespace(run_records=lambda run, limit=None: []))
    dispatcher = InProcess(desk, start)  # type: ignore[arg-type]

    async def main() -> None:
        spec = RunSpec("child", run_id="0198f6a2-7c4a-7bbb-9d1e-00000000000c")
        parent = asyncio.create_task(dispatcher.dispatch(spec))
        await began.wait()
        parent.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parent
        await asyncio.sleep(0.05)
        assert not dispatcher.tasks  # the child's task ended

    asyncio.run(asyncio.wait_for(main(), 30))
    assert finished == ["0198f6a2-7c4a-7bbb-9d1e-00000000000c"]
