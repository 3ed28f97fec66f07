"""The handoff probe end to end: `runfold continue RUN --probe FILE` with a scripted model asks
each question of the predecessor's last state and of the successor's (one-turn forks in the
ledger), and an `eval_run` line on the successor records the answers, what was kept and what
was lost; the ledger verifies and every probe request replays. A bad probe file refuses the
continue before anything runs. The judging rule is checked alone, with hypothesis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runfold.api import Workspace
from runfold.core.errors import RunfoldError
from runfold.core.probe import Probe, Question, judge, parse_probe


def say(text: str) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": text}]}


def write_jsonl(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


def runfold(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    env.update({"NO_COLOR": "1", "COLUMNS": "200"})
    return subprocess.run(
        [sys.executable, "-m", "runfold", *args, "-w", str(root)], capture_output=True, text=True, env=env, timeout=300
    )


def lines_of(root: Path) -> list[dict[str, Any]]:
    with Workspace.open(root) as ws:
        return [json.loads(r.raw) for r in ws.records()]


PROBE = {
    "probe": "garden-facts",
    "version": 2,
    "questions": [
        {"ask": "What is the code word?", "expect": "tulip"},
        {"ask": "Which bed gets the basil?", "expect": "north"},
        {"ask": "Who asked for the plan?", "expect": "ada"},
        "How many beds are there?",
    ],
}


def test_continue_with_a_probe_records_what_was_kept_and_lost(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    first = write_jsonl(tmp_path / "first.jsonl", [say("Noted: the code word is tulip, basil goes in the north bed.")])
    assert runfold(root, "run", "Remember: code word tulip, basil in the north bed.", "--model", f"script:{first}").returncode == 0
    predecessor = lines_of(root)[1]["run"]
    # one provider for the successor and the probe: the successor's reply, then the answers
    # asked of the predecessor (before), then those asked of the successor (after)
    script = write_jsonl(
        tmp_path / "next.jsonl",
        [
            say("Carrying on with the plan."),
            say("Tulip."), say("The north bed."), say("I do not know."), say("Three beds."),
            say("It is tulip"), say("The south bed, I think."), say("Ada asked."), say("three beds"),
        ],
    )
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(PROBE), encoding="utf-8")
    proc = runfold(root, "continue", predecessor, "--task", "go on", "--model", f"script:{script}", "--probe", str(probe))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "probe garden-facts v2 (eval_run, seq" in proc.stdout and "kept 2 of 3 judged (1 of 4 not known before, not judged), lost 1:" in proc.stdout
    assert "lost #1 'Which bed gets the basil?'" in proc.stdout
    lines = lines_of(root)
    starts = [line for line in lines if line["kind"] == "run_started"]
    successor = starts[1]["run"]
    assert starts[1]["data"]["predecessor"] == predecessor
    evals = [line for line in lines if line["kind"] == "eval_run"]
    assert len(evals) == 1
    ev = evals[0]
    assert ev["run"] == successor and ev["who"] == "runtime" and ev["seq"] == lines[-1]["seq"]
    assert ev["data"] == {
        "probe": "garden-facts",
        "version": 2,
        "predecessor": predecessor,
        "kept": 2,  # tulip kept; "three beds" read the same; Ada was not known before: not counted
        "lost": [1],  # north became south
        "before": ["Tulip.", "The north bed.", "I do not know.", "Three beds."],
        "after": ["It is tulip", "The south bed, I think.", "Ada asked.", "three beds"],
    }
    # every question is a one-turn fork without tools of the state it probes, in the ledger
    probes = starts[2:]
    assert len(probes) == 8
    assert [p["data"]["parent"] for p in probes] == [predecessor] * 4 + [successor] * 4
    assert [p["data"]["task"] for p in probes] == [q if isinstance(q, str) else q["ask"] for q in PROBE["questions"]] * 2
    forked = {line["run"]: line["data"]["at_seq"] for line in lines if line["kind"] == "run_forked"}
    frozen = {line["run"]: line["seq"] for line in lines if line["kind"] == "run_frozen"}
    assert all(forked[p["run"]] <= frozen[p["data"]["parent"]] for p in probes)
    with Workspace.open(root) as ws:
        assert ws.verify().lines == len(lines)
        for p in probes:
            assert ws.replay(p["run"]).ok
    shown = runfold(root, "log", "--kind", "eval_run")
    assert "probe garden-facts v2" in shown.stdout and "kept 2" in shown.stdout
    # the question forks are the runtime's, and a command without RUN means the successor
    assert all(p["who"] == "runtime" and p["data"]["dispatched_by"] == "runtime" for p in probes)
    with Workspace.open(root) as ws:
        assert ws.latest_run() == successor
    talk = runfold(root, "conversation", "--json")
    assert talk.returncode == 0, talk.stderr
    assert json.loads(talk.stdout)["run"] == successor


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("not json", "probe.json"),
        ('{"probe": "p", "questions": []}', "questions"),
        ('{"probe": "p", "questions": [{"ask": "  "}]}', "questions[0].ask"),
        ('{"probe": "p", "version": 0, "questions": ["q"]}', "version"),
        ('{"questions": ["q"]}', "probe"),
    ],
)
def test_a_bad_probe_refuses_the_continue_before_anything_runs(tmp_path: Path, text: str, where: str) -> None:
    root = Workspace.init(tmp_path / "ws").root
    first = write_jsonl(tmp_path / "first.jsonl", [say("ok")])
    assert runfold(root, "run", "hello", "--model", f"script:{first}").returncode == 0
    before = len(lines_of(root))
    probe = tmp_path / "probe.json"
    probe.write_text(text, encoding="utf-8")
    proc = runfold(root, "continue", "--model", f"script:{first}", "--probe", str(probe))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "E_INVALID_ARGS: cannot read the probe" in proc.stderr and where in proc.stderr
    assert len(lines_of(root)) == before


def test_probing_a_run_that_continues_none_is_refused(tmp_path: Path) -> None:
    import asyncio

    root = Workspace.init(tmp_path / "ws").root
    first = write_jsonl(tmp_path / "first.jsonl", [say("ok")])
    assert runfold(root, "run", "hello", "--model", f"script:{first}").returncode == 0
    with Workspace.open(root) as ws, pytest.raises(RunfoldError, match="continues none"):
        asyncio.run(ws.aprobe(parse_probe(b'{"probe": "p", "questions": ["q"]}', "p"), ws.latest_run(), model=f"script:{first}"))


def test_the_json_summary_carries_the_probe_and_a_served_workspace_refuses_it_first(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    first = write_jsonl(tmp_path / "first.jsonl", [say("The code word is tulip.")])
    assert runfold(root, "run", "Remember the code word tulip.", "--model", f"script:{first}").returncode == 0
    predecessor = lines_of(root)[1]["run"]
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"probe": "words", "version": 1, "questions": [
        {"ask": "The code word?", "expect": "tulip"}, {"ask": "The colour?", "expect": "red"}]}))  # fmt: skip
    script = write_jsonl(tmp_path / "next.jsonl", [say("On it."), say("tulip"), say("no idea"), say("rose"), say("no idea")])
    proc = runfold(root, "continue", predecessor, "--model", f"script:{script}", "--probe", str(probe), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["probe"] == {"name": "words", "version": 1, "seq": lines_of(root)[-1]["seq"], "asked": 2, "judged": 1, "kept": 0, "lost": [0]}
    # with a server owning the workspace the probe is refused before anything is said or run
    from server.srv_support import start_server

    srv = start_server(root)
    try:
        before = len(lines_of(root))
        again = runfold(root, "continue", predecessor, "--model", f"script:{script}", "--probe", str(probe))
        assert again.returncode == 2, again.stdout + again.stderr
        assert "stop `runfold serve`" in again.stderr and "already continued" not in again.stdout + again.stderr
        with srv.client() as c:
            assert not [r for r in c.get("/runs").json()["runs"] if r["state"] in ("queued", "running")], c.get("/runs").json()
        assert len(lines_of(root)) == before
    finally:
        srv.stop()


answers = st.text(alphabet="abcXYZ .!", max_size=12)


@given(st.lists(st.tuples(st.one_of(st.none(), st.sampled_from(["ab", "xyz", "c"])), answers, answers), min_size=1, max_size=8))
def test_judge_counts_each_question_once_and_never_loses_what_was_not_known(rows: list[tuple[str | None, str, str]]) -> None:
    probe = Probe("p", 1, tuple(Question(f"q{i}", e) for i, (e, _, _) in enumerate(rows)))
    before = [b for _, b, _ in rows]
    after = [a for _, _, a in rows]
    ev = judge(probe, "r", before, after)
    assert ev.kept + len(ev.lost) <= len(rows)
    assert ev.lost == sorted(set(ev.lost))
    for i, (expect, b, _a) in enumerate(rows):
        if expect is not None and expect.casefold() not in " ".join(b.casefold().split()):
            assert i not in ev.lost  # not known before: never counted lost
    # asking the same answers twice keeps every question known before
    same = judge(probe, "r", before, before)
    assert same.lost == [] and same.kept == sum(
        1 for (e, b, _) in rows if e is None or e.casefold() in " ".join(b.casefold().split())
    )
