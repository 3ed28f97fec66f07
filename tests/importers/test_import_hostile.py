"""Hostile and malformed session files: a field of the wrong type, a parentUuid cycle, JSON nested
beyond reason, a file of another format or holding no conversation, a directory. Each is imported
or refused with a one-line §11 error naming the source position; a refusal writes nothing (the
ledger is compared byte for byte) and nothing else (a TypeError, a RecursionError) escapes."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from import_support import FIXTURES

from runfold.api import Workspace
from runfold.core.errors import RunfoldError

HELLO = (FIXTURES / "claude-code-hello-world.jsonl").read_text()
CODEX = (FIXTURES / "codex-rollout-sample.jsonl").read_text()
OPENHANDS = (FIXTURES / "openhands-fix-add.json").read_text()
SWE = (FIXTURES / "swe-agent-function-calling-simple.traj").read_text()


def _names_a_position(err: RunfoldError, source: str) -> bool:
    """Whether a refusal points into `source` (`line 3 of s.jsonl`, `event 0 (id 0)
    args.openhands_version of …`, `history[2].tool_calls of …`), never at a seq or run of a ledger
    it did not write; a file with no conversation at all is named whole."""
    where = err.subject.removesuffix(f" of {source}")
    if where == err.subject:
        return err.subject == source and "no conversation" in err.action
    return bool(where) and not re.search(r"\b(seq|run)\b", where)


def _ledger_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((root / ".runfold" / "ledger").glob("*.jsonl")))


def _rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _set(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    value = copy.deepcopy(value)
    cur = value
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = new
    return value


def _jsonl_with(text: str, line: int, path: tuple[Any, ...], new: Any) -> str:
    rows = _rows(text)
    rows[line - 1] = _set(rows[line - 1], path, new)
    return _jsonl(rows)


def _refused(tmp_path: Path, content: str | bytes, fmt: str, name: str = "session.src") -> str:
    """Import `content` as `fmt` into a workspace already holding a run; assert it is refused with
    the ledger unchanged; return the one-line error."""
    ws = Workspace.init(tmp_path / "ws")
    ws.import_session(FIXTURES / "swe-agent-function-calling-simple.traj")
    before = _ledger_bytes(ws.root)
    bad = tmp_path / name
    bad.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(RunfoldError) as err:
        ws.import_session(bad, fmt)
    shown = err.value.display()
    assert "\n" not in shown and err.value.recovery.strip(), shown
    assert _ledger_bytes(ws.root) == before
    return shown


# ---- a field of the wrong type: refused naming its line, never a TypeError --------------------

WRONG_TYPES: dict[str, tuple[Callable[[], str], str, str]] = {
    # before: refused naming `seq N (data.stop)` of a run never written, not the source line
    "claude-code stop_reason true": (
        lambda: _jsonl_with(HELLO, 3, ("message", "stop_reason"), True),
        "claude-code",
        "line 3",
    ),
    "claude-code stop_reason array": (
        lambda: _jsonl_with(HELLO, 5, ("message", "stop_reason"), ["end_turn"]),
        "claude-code",
        "line 5",
    ),
    "swe-agent tool_calls true": (
        lambda: json.dumps(_set(json.loads(SWE), ("history", 2, "tool_calls"), True)),
        "swe-agent",
        "history[2].tool_calls",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_a_field_of_the_wrong_type_is_refused_naming_its_line(tmp_path: Path, case: str) -> None:
    make, fmt, where = WRONG_TYPES[case]
    shown = _refused(tmp_path, make(), fmt)
    assert shown.startswith(f"E_INVALID_ARGS: cannot import session.src as {fmt}"), shown
    assert f" on {where} of session.src" in shown, shown
    assert "seq " not in shown, shown  # a seq of a run never written means nothing to the user


READ_ANYWAY: dict[str, tuple[Callable[[], str], str]] = {
    # each raised TypeError before (`kind in MESSAGE_TYPES` with a list: unhashable), or for
    # tool_calls: true, "'bool' object is not iterable"
    "claude-code line type array": (lambda: _jsonl_with(HELLO, 1, ("type",), []), "claude-code"),
    "claude-code tool_use id object": (
        lambda: _jsonl_with(HELLO, 3, ("message", "content", 0, "id"), {}),
        "claude-code",
    ),
    "claude-code tool_use_id array": (
        lambda: _jsonl_with(HELLO, 4, ("message", "content", 0, "tool_use_id"), []),
        "claude-code",
    ),
    "codex item type array": (lambda: _jsonl_with(CODEX, 2, ("payload", "type"), []), "codex"),
    "openhands observation object": (
        lambda: json.dumps(_set(json.loads(OPENHANDS), (3, "observation"), {})),
        "openhands",
    ),
}


@pytest.mark.parametrize("case", sorted(READ_ANYWAY))
def test_an_odd_type_where_a_name_belongs_is_read_or_refused_never_a_crash(tmp_path: Path, case: str) -> None:
    make, fmt = READ_ANYWAY[case]
    ws = Workspace.init(tmp_path / "ws")
    src = tmp_path / "session.src"
    src.write_text(make())
    before = _ledger_bytes(ws.root)
    try:
        ws.import_session(src, fmt)
    except RunfoldError as err:
        assert _names_a_position(err, src.name), err.display()
        assert _ledger_bytes(ws.root) == before
    else:
        assert ws.verify().lines > 1


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path] if path else []
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:3]):
            out += _paths(item, (*path, i))
    return out


SOURCES = {"claude-code": HELLO, "codex": CODEX, "openhands": OPENHANDS, "swe-agent": SWE}
ODD = st.sampled_from([True, 7, None, "x", [], {}, [1], {"a": 1}])


@pytest.fixture(scope="module")
def shared_ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace.init(tmp_path_factory.mktemp("hostile") / "ws")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(sorted(SOURCES)), pick=st.integers(0, 10**6), odd=ODD)
def test_any_field_of_any_type_is_imported_or_refused_naming_a_position(
    shared_ws: Workspace, fmt: str, pick: int, odd: Any
) -> None:
    """A field of any fixture replaced by a value of another type: the import succeeds (and the
    ledger verifies) or is refused naming a source position, with the ledger unchanged."""
    text = SOURCES[fmt]
    whole = fmt in ("openhands", "swe-agent")
    docs = [json.loads(text)] if whole else _rows(text)
    spots = [(d, p) for d, doc in enumerate(docs) for p in _paths(doc)]
    d, path = spots[pick % len(spots)]
    docs[d] = _set(docs[d], path, odd)
    src = shared_ws.root.parent / f"odd-{fmt}.src"
    src.write_text(json.dumps(docs[0]) if whole else _jsonl(docs))
    before = _ledger_bytes(shared_ws.root)
    try:
        shared_ws.import_session(src, fmt)
    except RunfoldError as err:
        assert _names_a_position(err, src.name), err.display()
        assert _ledger_bytes(shared_ws.root) == before
    assert shared_ws.verify().lines >= len(before.splitlines())


# ---- structure: cycles, nesting, another format, no conversation, a directory ---------------


def _cycle(self_loop: bool) -> str:
    rows = _rows(HELLO)
    messages = [r for r in rows if r.get("type") in ("user", "assistant")]
    if self_loop:
        messages[-1]["parentUuid"] = messages[-1]["uuid"]
    else:
        messages[0]["parentUuid"] = messages[-1]["uuid"]
    return _jsonl(rows)


@pytest.mark.parametrize(("self_loop", "where"), [(True, "line 9"), (False, "line 2")])
def test_a_parent_uuid_cycle_is_refused_naming_the_line(tmp_path: Path, self_loop: bool, where: str) -> None:
    """Naive: stop the leaf-chain walk at a line seen before and import what it reached (a
    self-parented last line left one reply of four, the rest marked as an abandoned branch)."""
    shown = _refused(tmp_path, _cycle(self_loop), "claude-code")
    assert f" on {where} of session.src" in shown and "cycle" in shown, shown


def test_json_nested_beyond_reason_is_refused_naming_the_line(tmp_path: Path) -> None:
    deep = "[" * 5000 + "]" * 5000
    rows = HELLO.splitlines()
    rows[3] = rows[3].replace('"content":', f'"content":{deep},"was":', 1)
    shown = _refused(tmp_path, "\n".join(rows) + "\n", "claude-code")
    assert " on line 4 of session.src" in shown and "nests deeper" in shown, shown
    chat = '[{"role":"user","content":"hi"},\n{"role":"user","content":' + "[" * 300 + "]" * 300 + "}]"
    shown = _refused(tmp_path / "2", chat, "openai-chat")
    assert " on line 2 of session.src" in shown and "nests deeper" in shown, shown


def test_a_jsonl_file_read_as_one_document_says_so(tmp_path: Path) -> None:
    shown = _refused(tmp_path, HELLO, "openai-chat")
    assert " on line 2 column 1 of session.src" in shown and "JSON Lines" in shown, shown
    assert "runfold import auto" in shown


@pytest.mark.parametrize(
    ("content", "fmt"),
    [("", "codex"), ("\n\n", "codex"), ("{}\n", "codex"), ("[]", "openhands")],
)
def test_a_file_holding_no_conversation_is_refused(tmp_path: Path, content: str, fmt: str) -> None:
    """Before, each became an empty frozen run."""
    shown = _refused(tmp_path, content, fmt)
    assert "holds no conversation" in shown, shown


def test_a_claude_code_file_read_as_codex_is_refused_at_line_1(tmp_path: Path) -> None:
    """Before, every Claude Code line was taken for an older-layout Codex item and skipped: an
    empty run."""
    shown = _refused(tmp_path, HELLO, "codex")
    assert " on line 1 of session.src" in shown and "without a payload" in shown, shown
    assert "runfold import auto" in shown


def test_a_byte_order_mark_is_not_part_of_the_session(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    src = tmp_path / "bom.jsonl"
    src.write_bytes(b"\xef\xbb\xbf" + HELLO.encode())
    report = ws.import_session(src)
    (run,) = report.runs
    assert report.format == "claude-code" and (run.replies, run.calls, run.results) == (4, 2, 2)


def test_a_directory_is_refused_saying_what_to_give(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    before = _ledger_bytes(ws.root)
    with pytest.raises(RunfoldError) as err:
        ws.import_session(tmp_path, "auto")
    assert err.value.display().startswith("E_INVALID_ARGS: cannot read the session file (it is a directory)")
    assert _ledger_bytes(ws.root) == before


@pytest.mark.parametrize("blank", ["", "  \n", None])
def test_a_blank_user_message_between_two_replies_is_not_a_turn(tmp_path: Path, blank: str | None) -> None:
    """A user message with no text writes no line, so the replies around it are one reply, as
    two assistant messages in a row are. Before: the run would not fold (a model call with no
    user turn to answer) and the import was refused naming a seq of a run never written."""
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": blank},
        {"role": "assistant", "content": "b"},
    ]
    src = tmp_path / "chat.json"
    src.write_text(json.dumps(chat))
    ws = Workspace.init(tmp_path / "ws")
    (run,) = ws.import_session(src, "openai-chat").runs
    assert run.replies == 1
    body = ws.request_at(run.run, dialect="openai-chat").body
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
