"""End-to-end tests of `runfold conversation`, `fork`, `runs`, `tree`, `why` on real workspaces:
the foreign ledger as a workspace's first segment, and a built multi-run ledger."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from cli_support import GOLDEN, GOLDEN_RUN, run_cli

from runfold.api import Workspace
from runfold.core.ids import short_run_ids
from runfold.core.validate import validate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_fold_support import Book, write_base_runs


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """A workspace whose ledger's first segment is the foreign sprawling ledger."""
    ledger = tmp_path / "ws" / ".runfold" / "ledger"
    ledger.mkdir(parents=True)
    shutil.copyfile(GOLDEN, ledger / "ledger-00000000000000000000.jsonl")
    return tmp_path / "ws"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    ws = Workspace.init(tmp_path_factory.mktemp("built"))
    with ws.writer() as led:
        runs = write_base_runs(Book(led.append))
    return ws.root, {k: b.run for k, b in runs.items()}


def test_conversation_readable(foreign: Path) -> None:
    r = run_cli("conversation", GOLDEN_RUN[:8], cwd=foreign)
    assert r.code == 0, r.err
    assert "[1] assistant" in r.out and "tool_use call-1 probe" in r.out
    assert "user: narrow the search to the changed files   (seq 5, message)" in r.out
    assert "validator: anthropic ok · openai-chat ok · openai-responses ok" in r.out


@pytest.mark.parametrize("dialect", ["anthropic", "openai-chat", "openai-responses"])
def test_conversation_json_is_the_request_body_and_validates(foreign: Path, dialect: str) -> None:
    r = run_cli("conversation", GOLDEN_RUN, "--at", "12", "--dialect", dialect, "--json", cwd=foreign)
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["cut"] == 12 and out["moved"] is None and out["valid"] is True
    assert validate(dialect, out["body"]) == []
    key = "input" if dialect == "openai-responses" else "messages"
    assert out["body"][key]


def test_conversation_at_a_moved_cut_says_why(foreign: Path) -> None:
    r = run_cli("conversation", GOLDEN_RUN[:8], "--at", "5", "--json", cwd=foreign)
    out = json.loads(r.out)
    assert out["asked"] == 5 and out["cut"] == 1 and "inside the turn" in out["moved"]
    assert out["body"] == {
        "messages": [
            {
                "role": "user",
                "content": [{"kind": "text", "text": out["body"]["messages"][0]["content"][0]["text"]}],
            }
        ]
    }


def test_conversation_refuses_a_seq_outside_the_run(foreign: Path) -> None:
    r = run_cli("conversation", GOLDEN_RUN[:8], "--at", "40", cwd=foreign)
    assert r.code == 2
    assert "E_INVALID_ARGS" in r.err and "tail is seq 17" in r.err and "seqs 1–17" in r.err


def test_fork_prints_the_new_run_and_the_moved_cut(foreign: Path) -> None:
    r = run_cli("fork", GOLDEN_RUN[:8], "--at", "10", "--task", "try again", cwd=foreign, process=True)
    assert r.code == 0, r.err
    assert f"from {GOLDEN_RUN} at seq 7" in r.out and "cut moved from seq 10" in r.out
    new = r.out.split()[1]
    # the ledger still verifies with the fork's lines appended, and the fork folds valid
    assert run_cli("verify", cwd=foreign).code == 0
    c = json.loads(run_cli("conversation", new[:13], "--json", cwd=foreign).out)
    assert c["valid"] and c["cut"] == 19
    assert "<task>try again</task>" in c["body"]["messages"][-1]["content"][-1]["text"]
    j = json.loads(run_cli("fork", GOLDEN_RUN[:8], "--at", "15", "--json", cwd=foreign).out)
    assert j["ok"] and j["cut"] == 15 and j["moved"] is None and j["from"] == GOLDEN_RUN


def test_fork_refusals(foreign: Path) -> None:
    r = run_cli("fork", GOLDEN_RUN[:8], "--at", "18", cwd=foreign)
    assert r.code == 2 and "past the ledger's tail" in r.err and "tail is seq 17" in r.err
    r = run_cli("fork", GOLDEN_RUN[:8], "--at", "0", "--json", cwd=foreign)
    assert r.code == 2 and json.loads(r.out)["error"]["code"] == "E_INVALID_ARGS"
    r = run_cli("fork", "ffff", "--at", "3", cwd=foreign)
    assert r.code == 2 and "no run id starts with" in r.err
    assert (
        len((foreign / ".runfold" / "ledger" / "ledger-00000000000000000000.jsonl").read_bytes().splitlines())
        == 18
    )


def test_runs_and_tree_read_a_lone_segment_file_as_the_other_read_commands_do(tmp_path: Path) -> None:
    # a bare ledger has no serve queue to list: `runs` must not look for one inside the file
    segment = tmp_path / "copy" / "ledger-00000000000000000000.jsonl"
    segment.parent.mkdir()
    shutil.copyfile(GOLDEN, segment)
    for argv in (("runs",), ("runs", "--json"), ("tree",)):
        r = run_cli(*argv, "-w", segment, cwd=tmp_path)
        assert r.code == 0 and r.err == "", (argv, r.err)
        assert GOLDEN_RUN[:8] in r.out, argv
    assert GOLDEN_RUN in {d["run"] for d in json.loads(run_cli("runs", "--json", "-w", segment, cwd=tmp_path).out)}


def test_runs_and_tree(built: tuple[Path, dict[str, str]]) -> None:
    root, names = built
    ws = Workspace.open(root)
    plan = ws.fork(names["A"], ws.records(run=names["A"])[-1].seq)
    r = run_cli("runs", cwd=root)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split()[:7] == ["run", "status", "model", "turns", "tokens", "cost", "from"]
    by_id = {line.split()[0]: line for line in lines[1:]}
    short = short_run_ids(Workspace.open(root).runs())
    assert len(by_id) == len(short)  # runs started together still get distinct names
    assert "cancelled (process_died)" in by_id[short[names["E"]]]
    assert "unknown" in by_id[short[names["B"]]]  # a reply without a bill: cost unknown, never 0
    assert f"fork of {short[names['A']]}" in by_id[short[plan.new_run]]
    data = {d["run"]: d for d in json.loads(run_cli("runs", "--json", cwd=root).out)}
    a = data[names["A"]]
    assert a["status"] == "done" and a["turns"] == 4 and a["cost_usd_micros"] == 1500 + 3 * 1200
    assert a["tokens"] == {"input": 400, "output": 80, "cache_read": 200, "cache_write": 0}
    assert data[names["D"]]["tokens"] is None and data[names["D"]]["status"] == "limit"
    assert data[names["C"]]["status"] == "cancelled"
    assert data[plan.new_run]["forked_at"] == plan.cut and data[plan.new_run]["relation"] == "fork"
    t = run_cli("tree", cwd=root)
    assert t.code == 0
    tree_lines = t.out.splitlines()
    parent_line = next(i for i, line in enumerate(tree_lines) if line.startswith(short[names["A"]] + " "))
    assert tree_lines[parent_line + 1].startswith(f"└─ fork@{plan.cut} {short[plan.new_run]} ")
    tj = json.loads(run_cli("tree", "--json", cwd=root).out)
    root_a = next(n for n in tj if n["run"] == names["A"])
    assert [c["run"] for c in root_a["children"]] == [plan.new_run]
    # one run's subtree: the run and what came from it, nothing else
    sub = run_cli("tree", names["A"], cwd=root)
    assert sub.code == 0, sub.err
    shown = sub.out.splitlines()
    # each run is named by a prefix no other run of the ledger shares, not only of the subtree
    assert len(shown) == 2 and shown[0].split()[0] == short[names["A"]]
    assert shown[1].startswith(f"└─ fork@{plan.cut} {short[plan.new_run]} ")
    talk = run_cli("conversation", plan.new_run, cwd=root)
    assert talk.code == 0, talk.err
    lineage = next(line for line in talk.out.splitlines() if line.startswith("lineage: "))
    assert lineage.startswith(f"lineage: run {short[names['A']]}: seqs ") and f"; run {short[plan.new_run]}: seqs " in lineage
    leaf = json.loads(run_cli("tree", plan.new_run, "--json", cwd=root).out)
    assert [n["run"] for n in leaf] == [plan.new_run] and leaf[0]["children"] == []
    assert run_cli("tree", "ffff", cwd=root).code == 2
    # the fork's own tree names the run it came from, which this ledger holds
    fork_tree = run_cli("tree", plan.new_run, cwd=root)
    assert fork_tree.code == 0 and "(fork of " in fork_tree.out, fork_tree
    assert "not in this ledger" not in fork_tree.out
    # the nil workspace run roots no tree: said so, not "no runs yet"
    nil = run_cli("tree", "workspace", cwd=root)
    assert nil.code == 2 and "no runs yet" not in nil.out and "leave RUN out" in nil.err, nil


def test_why(foreign: Path) -> None:
    r = run_cli("why", GOLDEN_RUN[:8], "--at", "12", cwd=foreign)
    assert r.code == 0, r.err
    assert "by region:" in r.out and "by cause:" in r.out and "changes:" in r.out
    assert "message" in r.out and "(from seq 5)" in r.out
    j = json.loads(run_cli("why", GOLDEN_RUN[:8], "--json", "--since", "7", cwd=foreign).out)
    assert j["cut"] == 17
    assert sum(p["bytes"] for p in j["parts"]) == j["total"]["bytes"]
    assert sum(c["bytes"] for c in j["causes"].values()) == j["total"]["bytes"]
    assert all(c["seq"] > 7 for c in j["changes"])
    assert {c["cause"] for c in j["changes"]} == {"model_reply", "tool_result"}
    assert {p["cause"] for p in j["parts"]} == {"seed", "model_reply", "tool_result", "message"}
