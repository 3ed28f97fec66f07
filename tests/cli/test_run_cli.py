"""`runfold run`, `replay`, `cost` and `.runfold/config.toml` end to end on scripted models.

Each test drives the real typer app (CliRunner, in process) on a fresh workspace with a
`script:` model file, then checks the exit code the completion maps to, what the summary and the
live lines say, and that the ledger verifies and every request replays byte-exact.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli

from runfold.api import Workspace
from runfold.core.kinds import Kind
from runfold.core.payloads import ModelCalled
from runfold.core.records import Draft
from runfold.runtime.config import DEFAULT_CONFIG_TOML, load_config, parse_config, require_key


def text(t: str, **extra: Any) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": t}], **extra}


def call(cid: str, name: str, args: dict[str, Any], say: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [] if say is None else [{"kind": "text", "text": say}]
    content.append({"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)})
    return {"content": content}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    assert run_cli("init", "-w", root, cwd=tmp_path).code == 0
    (root / "notes.md").write_text("alpha\nbeta\n", encoding="utf-8")
    (root / "docs").mkdir()
    return root


def script(root: Path, *entries: dict[str, Any], name: str = "s.jsonl") -> str:
    path = root.parent / name
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return f"script:{path}"


def run_json(root: Path, *args: str | Path) -> tuple[int, dict[str, Any], str]:
    res = run_cli("run", *args, "--json", "-w", root, cwd=root)
    return res.code, json.loads(res.out), res.err


def assert_valid(root: Path, run: str) -> None:
    assert run_cli("verify", "-w", root, cwd=root).code == 0
    res = run_cli("replay", run, "-w", root, cwd=root)
    assert res.code == 0, res.out + res.err
    assert "requests byte-exact" in res.out


# ---- run: completions and exit codes ---------------------------------------------------------


def test_next_commands_name_the_workspace_when_run_from_elsewhere(ws: Path, tmp_path: Path) -> None:
    """`runfold run ... -w DIR` from outside DIR (the README's own first example): every suggested
    command carries `-w DIR` and works as printed from that same directory; `resume` too."""
    elsewhere = tmp_path / "elsewhere dir"  # a space: the path is shell-quoted
    elsewhere.mkdir()
    spec = script(ws, call("t1", "read_file", {"path": "notes.md"}), name="s1.jsonl")
    res = run_cli("run", "read the notes", "--model", spec, "--max-turns", "1", "-w", ws, cwd=elsewhere)
    assert res.code == 5, res.out + res.err
    nexts = [line.strip() for line in res.out.split("next:")[1].splitlines() if line.strip()]
    assert len(nexts) == 6 and nexts[0].startswith("runfold continue ")
    for cmd in nexts:
        assert cmd.endswith(f" -w {ws}"), cmd
        if not cmd.startswith("runfold continue"):
            done = run_cli(*cmd.split()[1:], cwd=elsewhere)
            assert done.code == 0, (cmd, done.out, done.err)
    resumed = run_cli("resume", "-w", ws, cwd=elsewhere)
    assert resumed.code == 0 and f" -w {ws}  [--task TEXT]" in resumed.out, resumed.out
    # from inside the workspace (or a folder below it) the commands stay short
    inside = run_cli("resume", cwd=ws / "docs")
    assert inside.code == 0 and " -w " not in inside.out, inside.out


def test_done_prints_live_lines_summary_and_next_commands(ws: Path) -> None:
    spec = script(
        ws,
        call("t1", "read_file", {"path": "notes.md"}, say="Reading it."),
        text("It lists alpha and beta.", usage={"input": 120, "output": 9}),
    )
    res = run_cli("run", "summarize notes.md", "--model", spec, "-w", ws, cwd=ws)
    assert res.code == 0, res.out + res.err
    out = res.out
    assert "turn 1 · calling script" in out
    assert '→ read_file "notes.md"' in out
    assert "← read_file ok" in out
    assert 'turn 2 · reply "It lists alpha and beta."' in out
    assert "done: the model answered without calling a tool" in out
    assert "\nIt lists alpha and beta.\n" in out  # the final answer, whole, on its own lines
    assert "turns    2 (2 model calls), 1 tool call" in out
    assert "cost     $0\n" in out
    run_id = Workspace.open(ws).runs()[-1]
    assert f"run      {run_id}" in out
    for cmd in ("conversation", "replay", "cost"):
        assert f"runfold {cmd} {run_id}" in out
    assert f"runfold fork {run_id} --at " in out
    assert_valid(ws, run_id)
    replay = run_cli("replay", "-w", ws, cwd=ws)  # default: the latest run
    assert "ok: 2/2 requests byte-exact" in replay.out
    # every suggested next command works on this run
    nexts = [line.strip() for line in out.split("next:")[1].splitlines() if line.strip()]
    assert len(nexts) == 5
    for cmd in nexts:
        res = run_cli(*cmd.split()[1:], "-w", ws, cwd=ws)
        assert res.code == 0, (cmd, res.out, res.err)


def test_json_outcome_and_live_lines_on_stderr(ws: Path) -> None:
    code, obj, err = run_json(ws, "say hi", "--model", script(ws, text("hi")))
    assert code == 0
    assert obj["ok"] is True and obj["completion"] == "done"
    assert obj["answer"] == "hi"
    assert obj["turns"] == 1 and obj["tool_calls"] == 0
    assert obj["evidence"][0]["kind"] == "model_returned"
    assert obj["billed_usd_micros"] == 0
    assert obj["error"] is None
    assert "turn 1 · calling script" in err
    rec = Workspace.open(ws).records(run=obj["run"])
    assert rec[-1].seq == obj["frozen_seq"] and rec[-1].kind is Kind.RUN_FROZEN
    assert obj["evidence"][0]["seq"] in {r.seq for r in rec if r.kind is Kind.MODEL_RETURNED}


def test_turn_ceiling_is_limit_exit_5(ws: Path) -> None:
    spec = script(ws, call("t1", "list_dir", {"path": "."}), call("t2", "list_dir", {"path": "docs"}))
    code, obj, _ = run_json(ws, "look around", "--model", spec, "--max-turns", "1")
    assert code == 5
    assert obj["completion"] == "limit" and obj["turns"] == 1
    assert_valid(ws, obj["run"])


@pytest.mark.parametrize(
    "reply", [text("", stop="end_turn"), text("cut off mid", stop="max_tokens")], ids=["empty", "max_tokens"]
)
def test_empty_reply_and_max_tokens_are_limit(ws: Path, reply: dict[str, Any]) -> None:
    code, obj, _ = run_json(ws, "answer", "--model", script(ws, reply))
    assert (code, obj["completion"]) == (5, "limit")
    frozen = Workspace.open(ws).records(run=obj["run"])[-1]
    assert frozen.env.data["completion"] == "limit"


def test_provider_failure_freezes_the_run_exit_3_with_the_error_line(ws: Path) -> None:
    spec = script(ws, {"fault": "http_400_refusal"})
    res = run_cli("run", "do it", "--model", spec, "-w", ws, cwd=ws)
    assert res.code == 3
    assert "E_PROVIDER: cannot call the model" in res.err
    run_id = Workspace.open(ws).runs()[-1]
    assert_valid(ws, run_id)
    frozen = Workspace.open(ws).records(run=run_id)[-1]
    assert frozen.env.data["completion"] == "cancelled" and frozen.env.data["cause"] == "error"


def test_retry_after_a_429_is_shown_and_recorded(ws: Path) -> None:
    spec = script(ws, {"fault": "http_429", "retry_after_ms": 1}, text("fine now"))
    res = run_cli("run", "go", "--model", spec, "-w", ws, cwd=ws)
    assert res.code == 0, res.err
    assert "! " in res.out and "(attempt 1), retrying in" in res.out
    assert "turn 1 · calling script (attempt 2)" in res.out
    run_id = Workspace.open(ws).runs()[-1]
    kinds = [r.kind_name for r in Workspace.open(ws).records(run=run_id)]
    assert kinds.count("model_called") == 2 and "watchdog_fired" in kinds
    assert "2/2 requests byte-exact" in run_cli("replay", run_id, "-w", ws, cwd=ws).out


def test_refused_write_outside_the_room_comes_back_as_a_tool_error(ws: Path) -> None:
    spec = script(
        ws,
        call("w1", "write_file", {"path": "../notes.md", "content": "x"}),
        call("w2", "write_file", {"path": "ok.md", "content": "inside\n"}),
        text("Wrote ok.md inside the room."),
    )
    res = run_cli("run", "write a file", "--model", spec, "--room", "docs", "-w", ws, cwd=ws)
    assert res.code == 0, res.out + res.err
    assert "← write_file E_" in res.out
    assert (ws / "docs" / "ok.md").read_text() == "inside\n"
    assert (ws / "notes.md").read_text() == "alpha\nbeta\n"
    assert_valid(ws, Workspace.open(ws).runs()[-1])


def test_record_writes_a_script_that_replays_the_same_requests(ws: Path) -> None:
    spec = script(
        ws,
        call("t1", "list_dir", {"path": "."}, say="Looking."),
        text("Two entries.", usage={"input": 50, "output": 3, "cache_read": 7, "cache_write": 0}),
    )
    recorded = ws.parent / "session.jsonl"
    code, first, _ = run_json(ws, "list", "--model", spec, "--record", recorded)
    assert code == 0 and first["recorded"] == str(recorded)
    header, *lines = [json.loads(x) for x in recorded.read_text().splitlines()]
    assert header["recorded"]["dialect"] == "anthropic" and header["recorded"]["model"] == "script"
    assert [e["stop"] for e in lines] == ["tool_use", "end_turn"]
    assert lines[1]["usage"] == {"input": 50, "output": 3, "cache_read": 7, "cache_write": 0}
    code, second, _ = run_json(ws, "list", "--model", f"script:{recorded}")
    assert code == 0
    w = Workspace.open(ws)

    def hashes(run: str) -> list[str]:
        return [r.typed(ModelCalled).request.hash for r in w.records(run=run, kind="model_called")]

    assert hashes(first["run"]) == hashes(second["run"])


# ---- run: usage errors and keys ---------------------------------------------------------------


def test_malformed_model_spec_is_usage_exit_2(ws: Path) -> None:
    res = run_cli("run", "x", "--model", "gpt-9", "-w", ws, cwd=ws)
    assert res.code == 2
    assert "E_INVALID_ARGS" in res.err and "anthropic:<model>" in res.err
    assert Workspace.open(ws).runs() == []


@pytest.mark.parametrize(
    ("spec", "var"),
    [
        ("anthropic:claude-x", "ANTHROPIC_API_KEY"),
        ("openai:gpt-x", "OPENAI_API_KEY"),
        ("openai-responses:o-x", "OPENAI_API_KEY"),
    ],
)
def test_missing_key_names_the_variable(ws: Path, spec: str, var: str) -> None:
    res = run_cli("run", "x", "--model", spec, "-w", ws, cwd=ws, env={var: ""})
    assert res.code == 3
    assert res.err.startswith(f"E_CONFIG_INVALID: cannot call the model '{spec}' on this machine: {var} is not set")
    assert f"export {var}=" in res.err
    assert Workspace.open(ws).runs() == []


def test_missing_key_check_is_skipped_for_compat_local_and_script() -> None:
    for spec in ("openai-compat:m@http://127.0.0.1:9/v1", "local", "script:x.jsonl"):
        require_key(spec, env={})
    require_key("anthropic:m", env={"ANTHROPIC_API_KEY": "k"})


def test_bad_max_turns_is_usage(ws: Path) -> None:
    res = run_cli("run", "x", "--max-turns", "0", "--model", script(ws, text("hi")), "-w", ws, cwd=ws)
    assert res.code == 2 and "--max-turns 0" in res.err


def test_run_without_a_workspace_says_how_to_make_one(tmp_path: Path) -> None:
    res = run_cli("run", "x", "--model", "script:none.jsonl", cwd=tmp_path)
    assert res.code == 3 and "E_PATH_NOT_FOUND" in res.err


# ---- config.toml ----------------------------------------------------------------------------


def test_init_writes_the_commented_default_config(ws: Path) -> None:
    path = ws / ".runfold" / "config.toml"
    text_ = path.read_text(encoding="utf-8")
    assert text_ == DEFAULT_CONFIG_TOML
    cfg = parse_config(tomllib.loads(text_))
    assert cfg.defaults.model == "local" and cfg.defaults.max_turns == 20
    assert cfg.defaults.tools == ("read_file", "write_file", "edit_file", "list_dir", "search", "exec")
    assert load_config(ws) == cfg


def test_config_default_model_and_turn_ceiling_are_used(ws: Path) -> None:
    spec = script(ws, call("t1", "list_dir", {}), call("t2", "list_dir", {"path": "docs"}))
    (ws / ".runfold" / "config.toml").write_text(
        f'[defaults]\nmodel = "{spec}"\nmax_turns = 1\ntools = ["list_dir"]\n', encoding="utf-8"
    )
    code, obj, _ = run_json(ws, "look")
    assert (code, obj["completion"], obj["turns"]) == (5, "limit", 1)
    started = Workspace.open(ws).records(run=obj["run"], kind="run_started")[0]
    assert started.env.data["policy"] == {"max_turns": 1}
    # the tool table holds the configured tools only (and the paging tool, appended last)
    body = Workspace.open(ws).request_at(obj["run"]).body
    assert [t["name"] for t in body["tools"]] == ["list_dir", "read_result"]


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[defaults]\nmodle = 'local'\n", "defaults.modle"),
        ("[defaults]\nmax_turns = 0\n", "defaults.max_turns"),
        ("[defaults]\nmax_turns = 'ten'\n", "defaults.max_turns"),
        ("[defaults]\nmodel = 'gpt-9'\n", "defaults.model"),
        ("[defaults]\ntools = ['read_file', 'rm']\n", "defaults.tools ('rm')"),
        ("[default]\nmodel = 'local'\n", "default"),
        (
            "[prices.'m']\ninput_usd_micros_per_mtok = 1.5\noutput_usd_micros_per_mtok = 1\n",
            "input_usd_micros_per_mtok",
        ),
        ("[providers.antropic]\nmax_tokens = 1\n", "providers.antropic"),
    ],
)
def test_invalid_config_names_the_key(ws: Path, toml: str, key: str) -> None:
    (ws / ".runfold" / "config.toml").write_text(toml, encoding="utf-8")
    res = run_cli("run", "x", "--model", script(ws, text("hi")), "-w", ws, cwd=ws)
    assert res.code == 3
    assert res.err.startswith("E_CONFIG_INVALID")
    assert key in res.err
    assert Workspace.open(ws).runs() == []


def test_config_syntax_error_names_the_file(ws: Path) -> None:
    (ws / ".runfold" / "config.toml").write_text("[defaults\n", encoding="utf-8")
    res = run_cli("run", "x", "-w", ws, cwd=ws)
    assert res.code == 3 and "config.toml" in res.err and "E_CONFIG_INVALID" in res.err


# ---- cost -----------------------------------------------------------------------------------


def test_cost_unknown_price_is_unknown_never_zero_then_priced(ws: Path) -> None:
    spec = script(ws, text("hi", usage={"input": 1000, "output": 100, "cache_read": 4000, "cache_write": 0}))
    (ws / ".runfold" / "config.toml").write_text(
        '[providers.script]\nmodel = "mystery-1"\n', encoding="utf-8"
    )
    code, obj, _ = run_json(ws, "x", "--model", spec)
    assert code == 0 and obj["billed_usd_micros"] is None
    res = run_cli("run", "x", "--model", spec, "-w", ws, cwd=ws)
    assert "cost     unknown (no price known for this model" in res.out
    out = run_cli("cost", "-w", ws, cwd=ws).out
    assert "cost unknown" in out and "unknown: no price for mystery-1" in out
    assert "$0.000000" not in out
    cost = json.loads(run_cli("cost", obj["run"], "--json", "-w", ws, cwd=ws).out)
    assert cost["total"]["billed_usd_micros"] is None
    assert cost["models"][0]["key"] == "mystery-1"
    # with a price in config.toml the same ledger is priced, cache savings included
    (ws / ".runfold" / "config.toml").write_text(
        '[providers.script]\nmodel = "mystery-1"\n[prices."mystery-1"]\n'
        "input_usd_micros_per_mtok = 3000000\noutput_usd_micros_per_mtok = 15000000\n"
        "cache_read_usd_micros_per_mtok = 300000\n",
        encoding="utf-8",
    )
    cost = json.loads(run_cli("cost", obj["run"], "--json", "-w", ws, cwd=ws).out)
    # the reply recorded no bill (unknown at run time): the table prices it now
    assert (
        cost["total"]["billed_usd_micros"]
        == (1000 * 3_000_000 + 100 * 15_000_000 + 4000 * 300_000) // 1_000_000
    )
    assert cost["total"]["cache_savings_usd_micros"] == 4000 * (3_000_000 - 300_000) // 1_000_000
    code, priced, _ = run_json(ws, "x", "--model", spec)
    assert priced["billed_usd_micros"] == 5700


def test_cost_by_run_model_and_tool(ws: Path) -> None:
    spec = script(ws, call("t1", "read_file", {"path": "nope.md"}), text("no such file"))
    code, obj, _ = run_json(ws, "read", "--model", spec)
    assert code == 0
    cost = json.loads(run_cli("cost", "--json", "-w", ws, cwd=ws).out)
    assert [r["key"] for r in cost["runs"]] == [obj["run"]]
    assert [r["key"] for r in cost["models"]] == ["script"]
    assert cost["tools"][0]["name"] == "read_file"
    assert cost["tools"][0]["calls"] == 1 and cost["tools"][0]["errors"] == 1
    plain = run_cli("cost", "-w", ws, cwd=ws).out
    assert "read_file" in plain and "total: 2 replies" in plain


# ---- replay ---------------------------------------------------------------------------------


def test_replay_names_the_first_request_that_differs_exit_1(ws: Path) -> None:
    code, obj, _ = run_json(ws, "list", "--model", script(ws, call("t1", "list_dir", {}), text("done")))
    assert code == 0
    w = Workspace.open(ws)
    lines = w.records(run=obj["run"])
    # copy the run as a new run whose second request hash was recorded wrong
    copy_run = "01900000-0000-7000-8000-000000000001"
    drafts = []
    called = 0
    for rec in lines:
        data = dict(rec.env.data)
        if rec.kind is Kind.MODEL_CALLED:
            called += 1
            if called == 2:
                data["request"] = {"hash": "0" * 64, "bytes": data["request"]["bytes"]}
        drafts.append(Draft(copy_run, rec.env.who, rec.env.kind, data, addr=rec.env.addr, t=rec.env.t))
    with w.writer() as ledger:
        ledger.append(drafts)
    res = run_cli("replay", copy_run, "-w", ws, cwd=ws)
    assert res.code == 1
    second = [r.seq for r in Workspace.open(ws).records(run=copy_run, kind="model_called")][1]
    assert f"MISMATCH: 1/2 requests byte-exact; first mismatch at seq {second}" in res.out
    assert "same length" in res.out
    data = json.loads(run_cli("replay", copy_run, "--json", "-w", ws, cwd=ws).out)
    assert data["ok"] is False and data["first_mismatch"]["seq"] == second
    assert data["first_mismatch"]["expected"] == "0" * 64


def test_replay_of_an_empty_ledger_says_start_a_run(ws: Path) -> None:
    res = run_cli("replay", "-w", ws, cwd=ws)
    assert res.code == 2 and "runfold run TASK" in res.err


def test_help_documents_the_exit_codes(ws: Path) -> None:
    out = run_cli("run", "--help", cwd=ws).out
    assert "5 limit" in out and "6 cancelled" in out and "Ctrl-C" in out


@pytest.mark.parametrize("linked", ["lab", "lab/inner"])
def test_a_room_that_is_or_sits_under_a_symlink_is_refused_and_nothing_is_made(ws: Path, tmp_path: Path, linked: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "lab").symlink_to(outside, target_is_directory=True)
    before = (ws / ".runfold" / "ledger").joinpath("ledger-00000000000000000000.jsonl").read_bytes()
    spec = script(ws, call("w", "write_file", {"path": "a.txt", "content": "x"}), text("done"))
    res = run_cli("run", "write a.txt", "--room", linked, "--model", spec, "-w", ws, cwd=ws)
    assert res.code == 3, res.out + res.err
    assert "E_OUTSIDE_WRITE_DOMAIN: cannot open the room" in res.err and "`lab` is a symbolic link" in res.err
    assert list(outside.iterdir()) == []  # no room made through the link, no file written there
    assert (ws / ".runfold" / "ledger").joinpath("ledger-00000000000000000000.jsonl").read_bytes() == before
