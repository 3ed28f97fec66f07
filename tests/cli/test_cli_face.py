"""What a user meets first, end to end through the command line: run ids shown by one rule that
keeps them unique, usage errors as one §11 line, error wording, a refused connection, tool
errors that name the right tool, whole replies in the live view, one number format, a capped
resume list, and typed `Workspace.run` arguments."""

from __future__ import annotations

import inspect
import io
import json
import re
import socket
from pathlib import Path

import pytest
from cli_support import run_cli
from rich.console import Console

from runfold import RunfoldError, ScriptedProvider, Workspace
from runfold.cli.live import LiveView

REPO = Path(__file__).resolve().parents[2]
SESSION = REPO / "examples" / "garden-session.jsonl"


def _garden(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    Workspace.init(ws).close()
    for item in (REPO / "examples" / "garden").iterdir():
        (ws / item.name).write_bytes(item.read_bytes())
    return ws


def _script(path: Path, *replies: dict[str, object]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in replies))
    return f"script:{path}"


def _use(call_id: str, name: str, args: dict[str, object]) -> dict[str, object]:
    return {"kind": "tool_use", "id": call_id, "name": name, "input": json.dumps(args)}


# ---- run ids: one rule, unique everywhere ----------------------------------------------------


def test_every_run_named_in_log_and_runs_resolves_back_to_it(tmp_path: Path) -> None:
    ws = _garden(tmp_path)
    for _ in range(2):  # started within a minute: their ids share the first 8 hex digits
        assert run_cli("run", "x", "--model", f"script:{SESSION}", "-w", ws, cwd=tmp_path).code == 0
    with Workspace.open(ws) as w:
        first, _second = w.runs()
    forked = run_cli("fork", first, "--at", "5", "-w", ws, "--json", cwd=tmp_path)
    assert forked.code == 0, forked.err
    log = run_cli("log", "-w", ws, "--kind", "run_started", "--kind", "run_forked", cwd=tmp_path).out
    shown = re.findall(r"^\s+\d+\s+\S+\s+(\S+)\s", log, re.M) + re.findall(r"from (\S+) at seq", log)
    runs = run_cli("runs", "-w", ws, cwd=tmp_path).out.splitlines()[1:]
    shown += [row.split()[0] for row in runs] + re.findall(r"fork of (\S+)", "\n".join(runs))
    assert len(shown) == 9  # 3 run_started + 1 run_forked + its mother; 3 rows + 1 mother
    with Workspace.open(ws) as w:
        for name in shown:
            assert w.resolve_run(name) in w.runs()
        assert w.resolve_run(re.findall(r"from (\S+) at seq", log)[0]) == first


# ---- usage errors: one line ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (("show",), "Missing argument 'SEQ'"),
        (("log", "--bogus"), "No such option: --bogus"),
        (("logg",), "No such command 'logg'"),
        (("--bogus", "log"), "No such option: --bogus"),
        (("run", "x", "--max-turns", "abc"), "Invalid value for '--max-turns'"),
    ],
)
def test_a_usage_error_is_one_e_invalid_args_line(tmp_path: Path, argv: tuple[str, ...], reason: str) -> None:
    r = run_cli(*argv, cwd=tmp_path)
    assert r.code == 2 and r.out == ""
    assert len(r.err.splitlines()) == 1, r.err
    assert r.err.startswith("E_INVALID_ARGS: cannot parse the command line on runfold") and reason in r.err
    assert "Usage:" not in r.err and "usage: `runfold" in r.err
    j = run_cli(*argv, "--json", cwd=tmp_path)
    assert j.code == 2 and json.loads(j.out)["error"]["code"] == "E_INVALID_ARGS"
    assert len(j.err.splitlines()) == 1 and "Usage:" not in j.err


def test_error_wording_reads_as_a_sentence(tmp_path: Path) -> None:
    ws = _garden(tmp_path)
    r = run_cli("run", "x", "--model", "anthropic:claude-x", "-w", ws, cwd=tmp_path, env={"ANTHROPIC_API_KEY": ""})
    assert r.err.startswith(
        "E_CONFIG_INVALID: cannot call the model 'anthropic:claude-x' on this machine: ANTHROPIC_API_KEY is not set"
    )
    r = run_cli("run", "x", "--max-turns", "0", "-w", ws, cwd=tmp_path)
    assert r.code == 2
    assert r.err.startswith("E_INVALID_ARGS: cannot run an agent on a ceiling of 0 turns (--max-turns 0)")


# ---- a refused connection --------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_says_nothing_answered_retries_once_and_prints_once(tmp_path: Path) -> None:
    ws = _garden(tmp_path)
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    r = run_cli("run", "x", "--model", f"openai-compat:m@{url}", "-w", ws, cwd=tmp_path)
    assert r.code == 3
    errors = [line for line in (r.out + r.err).splitlines() if "E_PROVIDER" in line]
    assert len(errors) == 2 and errors[0] == "failed: frozen by E_PROVIDER (its error line is on stderr)"
    assert errors[1] == r.err.strip()
    assert f"nothing answered at {url}" in r.err and "check that the server is running" in r.err
    assert "stream was cut" not in r.err and "provider's status" not in r.err
    with Workspace.open(ws) as w:
        kinds = [rec.env.kind for rec in w.records()]
        fired = [rec.env.data for rec in w.records(kind="watchdog_fired")]
    assert kinds.count("model_called") == 2
    assert [f["reason"] for f in fired] == ["connection_refused"]


# ---- tool errors point to the right tool ------------------------------------------------------


def test_list_dir_on_a_file_names_the_read_file_call(tmp_path: Path) -> None:
    ws = _garden(tmp_path)
    model = _script(
        tmp_path / "s.jsonl",
        {"content": [_use("c1", "list_dir", {"path": "todo.md"})]},
        {"content": [_use("c2", "read_file", {"path": "."})]},
        {"content": [{"kind": "text", "text": "ok"}]},
    )
    assert run_cli("run", "x", "--model", model, "-w", ws, cwd=tmp_path).code == 0
    with Workspace.open(ws) as w:
        errors = [rec.env.data["error"]["recovery"] for rec in w.records(kind="tool_result")]
    assert 'read it with read_file {"path":"todo.md"}' in errors[0]
    assert 'list it with list_dir {"path":"."}' in errors[1]


# ---- the live view: whole replies, streamed text on a terminal --------------------------------


def test_the_live_view_shows_whole_replies(tmp_path: Path) -> None:
    ws = _garden(tmp_path)
    long = "I will read the to-do list now, because " + "the question is about what is on it " * 4
    model = _script(
        tmp_path / "s.jsonl",
        {"content": [{"kind": "text", "text": long + "\nand then answer."}, _use("c1", "read_file", {"path": "todo.md"})]},
        {"content": [{"kind": "text", "text": "ok"}]},
    )
    r = run_cli("run", "x", "--model", model, "-w", ws, cwd=tmp_path)
    assert r.code == 0
    assert f"    {long.rstrip()}\n    and then answer.\n" in r.out


def test_streamed_text_is_shown_whole_and_replaced_by_the_durable_reply(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=60, height=40)
    ws = Workspace.init(tmp_path / "ws")
    words = " ".join(f"word{i}" for i in range(80))
    seen: list[str] = []
    with LiveView(console, fancy=True) as view:

        def on_delta(kind: str, text: str) -> None:
            view.on_delta(kind, text)
            seen.append(view._stream_tail())

        provider = ScriptedProvider.of([{"content": [{"kind": "text", "text": words}]}])
        ws.run("x", model=provider, on_event=view.on_event, on_delta=on_delta, builtin_tools=False)
        assert view._streamed == ""  # the durable reply replaced the provisional text
    assert seen and "word0" in seen[-1] and "word79" in seen[-1]
    assert "word79" in buf.getvalue() and "word0 word1" in buf.getvalue()


# ---- numbers and costs -------------------------------------------------------------------------


def test_counts_have_separators_and_free_costs_read_zero(tmp_path: Path) -> None:
    ws = _garden(tmp_path)
    run = run_cli("run", "x", "--model", f"script:{SESSION}", "-w", ws, cwd=tmp_path).out
    assert "cost     $0\n" in run and "$0.000000" not in run
    runs = run_cli("runs", "-w", ws, cwd=tmp_path).out
    assert "3,003" in runs and "$0.000000" not in runs
    verify = run_cli("verify", ws, cwd=tmp_path).out
    assert re.search(r"read \d{1,3}(,\d{3})+ bytes", verify), verify
    cost = run_cli("cost", "-w", ws, cwd=tmp_path).out
    assert "2,950" in cost and "$0.000000" not in cost


# ---- resume: a capped list ---------------------------------------------------------------------


def test_resume_caps_the_waiting_list(tmp_path: Path) -> None:
    ws = _garden(tmp_path)
    with Workspace.open(ws) as w:
        for i in range(13):
            provider = ScriptedProvider.of([{"content": [_use(f"c{i}", "list_dir", {"path": "."})]}])
            assert w.run(f"task {i}", model=provider, max_turns=1).completion == "limit"
    out = run_cli("resume", "-w", ws, cwd=tmp_path).out
    assert out.count("runfold continue") == 10
    assert "+3 more waiting runs (older)" in out and "runfold resume --all" in out
    assert "task 12" in out and "task 0'" not in out
    every = run_cli("resume", "--all", "-w", ws, cwd=tmp_path).out
    assert every.count("runfold continue") == 13 and "more" not in every


# ---- the rest a user meets ---------------------------------------------------------------------


def test_replay_of_a_run_with_no_request_says_so(tmp_path: Path) -> None:
    ws = _garden(tmp_path)
    assert run_cli("run", "x", "--model", f"script:{SESSION}", "-w", ws, cwd=tmp_path).code == 0
    with Workspace.open(ws) as w:
        mother = w.runs()[0]
    fork = json.loads(run_cli("fork", mother, "--at", "5", "-w", ws, "--json", cwd=tmp_path).out)
    r = run_cli("replay", fork["run"], "-w", ws, cwd=tmp_path)
    assert r.code == 0 and "nothing to replay: it sent no model request" in r.out and "0/0" not in r.out


def test_conversation_json_feeds_validate(tmp_path: Path) -> None:
    ws = _garden(tmp_path)
    assert run_cli("run", "x", "--model", f"script:{SESSION}", "-w", ws, cwd=tmp_path).code == 0
    with Workspace.open(ws) as w:
        run = w.runs()[0]
    rendered = run_cli("conversation", run, "--dialect", "anthropic", "--json", "-w", ws, cwd=tmp_path).out
    (tmp_path / "c.json").write_text(rendered)
    r = run_cli("validate", tmp_path / "c.json", cwd=tmp_path)
    assert r.code == 0 and "anthropic" in r.out and "ok" in r.out
    internal = run_cli("conversation", run, "--json", "-w", ws, cwd=tmp_path).out
    (tmp_path / "i.json").write_text(internal)
    r = run_cli("validate", tmp_path / "i.json", cwd=tmp_path)
    assert r.code == 2 and "--dialect anthropic --json" in r.err


def test_a_bad_models_table_names_the_config_file(tmp_path: Path) -> None:
    ws = _garden(tmp_path)
    config = ws / ".runfold" / "config.toml"
    assert config.read_text().endswith("\n")
    with config.open("a") as f:
        f.write('[models."script"]\ncontext_window = "big"\n')
    r = run_cli("run", "x", "--model", f"script:{SESSION}", "-w", ws, cwd=tmp_path)
    assert r.code == 3 and str(config) in r.err and "models.\"script\".context_window" in r.err


def test_workspace_run_has_a_real_signature_and_refuses_wrong_types(tmp_path: Path) -> None:
    for method in (Workspace.run, Workspace.continue_run, Workspace.acontinue):
        params = inspect.signature(method).parameters
        assert "kwargs" not in params and {"model", "max_turns", "tools", "on_event"} <= set(params)
    with Workspace.init(tmp_path / "ws") as ws:
        for bad in ({"max_turns": "3"}, {"room": 5}, {"tools": "read_file"}, {"fork": ["a", 1]}):
            with pytest.raises(RunfoldError) as caught:
                ws.run("x", model=f"script:{SESSION}", **bad)  # type: ignore[arg-type]
            assert caught.value.code.value == "E_INVALID_ARGS"
            assert next(iter(bad)) in caught.value.subject
