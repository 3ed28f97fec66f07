"""Every fixture transcript imports into a ledger that verifies, whose runs fold into
conversations every dialect's validator accepts, with the counts the source file holds; a
Claude Code session forks at every safe point; an imported run continues on another model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from import_support import ALL, FIXTURES, forgotten_results, source_counts

from runfold.api import Workspace
from runfold.core.kinds import Kind
from runfold.importers import FORMATS, detect

EXPECTED_FORMAT = {
    "claude-code-coverage-fix.jsonl": "claude-code",
    "claude-code-hello-world.jsonl": "claude-code",
    "codex-rollout-sample.jsonl": "codex",
    "openhands-fix-add.json": "openhands",
    "swe-agent-function-calling-simple.traj": "swe-agent",
    "tau-bench-gpt4o-airline-4.json": "openai-chat",
}


def test_the_format_list_is_pinned() -> None:
    assert FORMATS == ("claude-code", "codex", "openai-chat", "swe-agent", "openhands")
    assert set(EXPECTED_FORMAT.values()) == set(FORMATS), "every format has a fixture"
    assert sorted(EXPECTED_FORMAT) == ALL


@pytest.mark.parametrize("name", ALL)
def test_auto_detection_names_the_format(name: str) -> None:
    assert detect((FIXTURES / name).read_bytes(), name) == EXPECTED_FORMAT[name]


def _imported(tmp_path: Path, name: str) -> tuple[Workspace, list[str]]:
    ws = Workspace.init(tmp_path / "ws")
    report = ws.import_session(FIXTURES / name, EXPECTED_FORMAT[name])
    return ws, [r.run for r in report.runs]


@pytest.mark.parametrize("name", ALL)
def test_fixture_imports_verifies_validates_and_keeps_the_counts(tmp_path: Path, name: str) -> None:
    ws, runs = _imported(tmp_path, name)
    assert ws.verify().lines == 1 + sum(len(ws.records(run=r)) for r in runs)
    expected = source_counts(name)
    assert len(runs) == len(expected)
    for run, want in zip(runs, expected, strict=True):
        lines = ws.records(run=run)
        kinds = [r.kind_name for r in lines]
        assert kinds[:2] == ["run_started", "session_imported"]
        assert kinds[-1] == "run_frozen"
        results = [r for r in lines if r.kind is Kind.TOOL_RESULT]
        lost = [r for r in results if r.env.data.get("error", {}).get("code") == "E_TOOL_OUTCOME_UNKNOWN"]
        got = {
            "replies": kinds.count("model_returned"),
            "calls": kinds.count("tool_called"),
            "results": len(results) - len(lost),
        }
        assert got == want, f"{name} {run}: the ledger holds {got}, the source {want}"
        view = ws.request_at(run)
        assert view.verdicts == {"anthropic": [], "openai-chat": [], "openai-responses": []}
        # the fold holds every result but those the source's own compactions took out
        body = ws.request_at(run, dialect="openai-chat").body
        tool_messages = sum(1 for m in body["messages"] if m["role"] == "tool")
        assert tool_messages == got["results"] + len(lost) - forgotten_results(name)


def test_forks_at_every_safe_point_of_a_claude_code_session_validate(tmp_path: Path) -> None:
    ws, (run,) = _imported(tmp_path, "claude-code-coverage-fix.jsonl")
    from runfold.core.fold import safe_points

    points = safe_points({run: ws.records(run=run)}, run)
    assert len(points) >= 14
    for at in points:
        plan = ws.fork(run, at)
        view = ws.request_at(plan.new_run)
        assert view.verdicts == {"anthropic": [], "openai-chat": [], "openai-responses": []}, at
    assert ws.verify().lines > 0


def test_session_imported_names_the_source_and_maps_every_line(tmp_path: Path) -> None:
    from runfold.core.canonical import content_hash
    from runfold.core.locator import CasLocator, parse_locator
    from runfold.store.cas import Cas

    name = "claude-code-hello-world.jsonl"
    ws, (run,) = _imported(tmp_path, name)
    started, imported = ws.records(run=run)[:2]
    assert started.env.data["imported"] == {"format": "claude-code", "session": "main", "source": name}
    data = imported.env.data
    raw = (FIXTURES / name).read_bytes()
    assert data["hash"] == content_hash(raw) and data["bytes"] == len(raw)
    loc = parse_locator(data["map"])
    assert isinstance(loc, CasLocator)
    doc = json.loads(Cas(ws.root).get_locator(loc))
    mapped = {row["at"] for row in doc["rows"]} | {s["at"] for s in doc["skipped"]}
    assert mapped == {f"line {i}" for i in range(1, len(raw.decode().splitlines()) + 1)}
    seqs = {r.seq for r in ws.records(run=run)}
    assert all(set(row["seqs"]) <= seqs for row in doc["rows"])


def test_replay_says_imported_requests_have_no_recorded_bytes(tmp_path: Path) -> None:
    ws, (run,) = _imported(tmp_path, "claude-code-hello-world.jsonl")
    report = ws.replay(run)
    assert report.requests == 0 and report.exact == 0
    assert len(report.skipped) == 4
    assert all("imported" in why and "no recorded" in why for _, why in report.skipped)


def test_cost_counts_usage_where_the_source_has_it(tmp_path: Path) -> None:
    ws, (run,) = _imported(tmp_path, "claude-code-hello-world.jsonl")
    cost = ws.cost(run)
    raw = [json.loads(x) for x in (FIXTURES / "claude-code-hello-world.jsonl").read_text().splitlines()]
    out = {}
    for row in raw:
        if row.get("type") == "assistant":
            m = row["message"]
            out[m["id"]] = max(out.get(m["id"], 0), m["usage"]["output_tokens"])
    assert cost.total.usage.output == sum(out.values())


SCRIPT = '{"content":[{"kind":"text","text":"Picked up where the imported session stopped."}],"usage":{"input":10,"output":8}}\n'


@pytest.mark.parametrize("name", ALL)
def test_continue_an_imported_run_with_a_scripted_model(tmp_path: Path, name: str) -> None:
    ws, runs = _imported(tmp_path, name)
    for dialect in ("anthropic", "openai-chat", "openai-responses"):
        script = tmp_path / f"reply-{dialect}.jsonl"
        script.write_text(SCRIPT)
        outcome = ws.continue_run(runs[-1], model=f"script:{script}#{dialect}", builtin_tools=False)
        assert outcome.completion == "done", outcome
        called = [r for r in ws.records(run=outcome.run_id) if r.kind is Kind.MODEL_CALLED]
        assert called and called[0].env.data["request"]["hash"]
    assert ws.verify().lines > 0


def test_examples_copy_is_the_fixture() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "claude-code-hello-world.jsonl"
    assert example.read_bytes() == (FIXTURES / "claude-code-hello-world.jsonl").read_bytes()


def test_a_fixture_copied_elsewhere_imports_the_same(tmp_path: Path) -> None:
    copy = tmp_path / "session.jsonl"
    shutil.copy(FIXTURES / "claude-code-hello-world.jsonl", copy)
    ws = Workspace.init(tmp_path / "ws")
    report = ws.import_session(copy)
    assert report.detected and report.format == "claude-code"


def test_a_claude_code_file_written_with_spaces_is_still_detected() -> None:
    """A session re-serialized with `json.dumps` defaults (`"type": "user"`) is the same format."""
    rows = [json.loads(x) for x in (FIXTURES / "claude-code-hello-world.jsonl").read_text().splitlines()]
    spaced = "".join(json.dumps(r) + "\n" for r in rows).encode()
    assert b'"type": "user"' in spaced and detect(spaced, "s.jsonl") == "claude-code"
