"""The built-in tools on real files and real processes: ranges and caps of read_file, edit_file
ambiguity, list_dir, search skipping .runfold and binaries, exec timeouts, caps and scrubbed env."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.core.canonical import check_json
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.tools import Tool, ToolContext, ToolError, is_secret_name, scrub_env
from runfold.tools.builtin import EDIT_FILE, EXEC, LIST_DIR, READ_FILE, SEARCH, WRITE_FILE
from runfold.tools.exec_tool import _Capture
from runfold.tools.sandbox import ExecSettings


def call(t: Tool, ctx: ToolContext, **args: Any) -> dict[str, Any]:
    result = asyncio.run(t.invoke(t.validate(args), ctx))
    check_json(result)  # every result is float-free ledger data
    return result


def fails(t: Tool, ctx: ToolContext, **args: Any) -> RunfoldError:
    with pytest.raises(RunfoldError) as info:
        call(t, ctx, **args)
    check_json(info.value.to_data())
    return info.value


# ---- read_file --------------------------------------------------------------------------


def test_read_file_whole_and_ranges(ctx: ToolContext, room: Path) -> None:
    (room / "f.txt").write_text("one\ntwo\nthree\nfour")
    whole = call(READ_FILE, ctx, path="f.txt")
    assert whole == {
        "path": "f.txt",
        "content": "one\ntwo\nthree\nfour",
        "start_line": 1,
        "end_line": 4,
        "total_lines": 4,
        "bytes": 18,
        "truncated": False,
    }
    part = call(READ_FILE, ctx, path="f.txt", start_line=2, end_line=3)
    assert (part["content"], part["start_line"], part["end_line"]) == ("two\nthree\n", 2, 3)
    tail = call(READ_FILE, ctx, path="f.txt", start_line=4, end_line=99)
    assert (tail["content"], tail["end_line"]) == ("four", 4)
    other = call(READ_FILE, ctx, path="../other/notes.md")
    assert other["path"] == "../other/notes.md" and other["content"] == "other room\n"
    empty = room / "empty.txt"
    empty.write_text("")
    assert call(READ_FILE, ctx, path="empty.txt")["total_lines"] == 0


def test_read_file_errors(ctx: ToolContext, room: Path) -> None:
    (room / "f.txt").write_text("a\nb\n")
    (room / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    err = fails(READ_FILE, ctx, path="f.txt", start_line=5)
    assert err.subject == "argument `start_line`" and "2 lines" in err.recovery
    err = fails(READ_FILE, ctx, path="f.txt", start_line=2, end_line=1)
    assert err.subject == "argument `end_line`"
    err = fails(READ_FILE, ctx, path="f.tx")
    assert err.code is ErrorCode.PATH_NOT_FOUND and err.nearby == ("f.txt",)
    assert "binary" in fails(READ_FILE, ctx, path="blob.bin").recovery
    assert "list_dir" in fails(READ_FILE, ctx, path=".").recovery
    with pytest.raises(RunfoldError, match="start_line"):
        READ_FILE.validate({"path": "f.txt", "start_line": 0})


def test_read_file_caps_output_and_says_where_to_continue(ctx: ToolContext, room: Path) -> None:
    small = dataclasses.replace(ctx, read_max_bytes=20)
    (room / "long.txt").write_text("".join(f"line {i:02}\n" for i in range(1, 11)))  # 8 bytes a line
    first = call(READ_FILE, small, path="long.txt")
    assert first["content"] == "line 01\nline 02\n"
    assert first["truncated"] is True and first["end_line"] == 2 and first["next_start_line"] == 3
    nxt = call(READ_FILE, small, path="long.txt", start_line=first["next_start_line"], end_line=3)
    assert nxt["content"] == "line 03\n" and nxt["truncated"] is False
    (room / "wide.txt").write_text("x" * 100 + "\nshort\n")
    wide = call(READ_FILE, small, path="wide.txt")
    assert wide["content"] == "x" * 20 and wide["truncated"] and wide["next_start_line"] == 2


# ---- write_file / edit_file -------------------------------------------------------------


def test_write_then_edit(ctx: ToolContext, room: Path) -> None:
    assert call(WRITE_FILE, ctx, path="src/app.py", content="a = 1\nb = 2\n") == {
        "path": "src/app.py",
        "written": 12,
        "created": True,
    }
    os.chmod(room / "src" / "app.py", 0o640)
    out = call(EDIT_FILE, ctx, path="src/app.py", old="b = 2", new="b = 3  # changed")
    assert out == {"path": "src/app.py", "replaced": 1, "line": 2, "written": 23}
    assert (room / "src" / "app.py").read_text() == "a = 1\nb = 3  # changed\n"
    assert (room / "src" / "app.py").stat().st_mode & 0o777 == 0o640  # the mode survives the rewrite
    assert [p.name for p in (room / "src").iterdir()] == ["app.py"]  # no temp files left


def test_edit_file_refuses_zero_or_many_matches(ctx: ToolContext, room: Path) -> None:
    text = "def f(x):\n    return x\n\ndef g(x):\n    return x\n"
    (room / "m.py").write_text(text)
    many = fails(EDIT_FILE, ctx, path="m.py", old="    return x", new="    return 0")
    assert many.code is ErrorCode.INVALID_ARGS
    assert "matches 2 times (at lines 2, 5)" in many.recovery
    assert many.nearby == ("line 2: return x", "line 5: return x")
    none = fails(EDIT_FILE, ctx, path="m.py", old="def f(y):", new="def f(z):")
    assert "matches 0 times" in none.recovery
    assert none.nearby[0] == "line 1: def f(x):"
    assert "empty" in fails(EDIT_FILE, ctx, path="m.py", old="", new="x").recovery
    assert fails(EDIT_FILE, ctx, path="nope.py", old="a", new="b").code is ErrorCode.PATH_NOT_FOUND
    assert (room / "m.py").read_text() == text  # untouched
    # overlapping occurrences count as ambiguous too
    (room / "o.txt").write_text("aaa")
    assert "2 times" in fails(EDIT_FILE, ctx, path="o.txt", old="aa", new="b").recovery


# ---- list_dir / search ------------------------------------------------------------------


def test_list_dir(ctx: ToolContext, room: Path, ws: Path) -> None:
    (room / "b.txt").write_text("bb")
    (room / "a").mkdir()
    (room / "link").symlink_to(room / "b.txt")
    assert call(LIST_DIR, ctx) == {
        "path": ".",
        "entries": [
            {"name": "a", "type": "dir"},
            {"name": "b.txt", "type": "file", "bytes": 2},
            {"name": "link", "type": "symlink"},
        ],
        "total": 3,
        "truncated": False,
    }
    top = call(LIST_DIR, ctx, path="../..")
    assert [e["name"] for e in top["entries"]] == ["README.md", "lab"]  # .runfold is never listed
    capped = call(LIST_DIR, dataclasses.replace(ctx, list_max_entries=2), path=".")
    assert capped["truncated"] and capped["total"] == 3 and len(capped["entries"]) == 2
    assert fails(LIST_DIR, ctx, path="b.txt").code is ErrorCode.INVALID_ARGS
    assert fails(LIST_DIR, ctx, path="../../.runfold").code is ErrorCode.GATE_DENIED


def test_search(ctx: ToolContext, room: Path, ws: Path) -> None:
    (room / "a.py").write_text("import os\nTODO: one\n")
    (room / "sub").mkdir()
    (room / "sub" / "b.md").write_text("nothing\nsee TODO two\n")
    (room / "bin.dat").write_bytes(b"TODO\x00binary")
    (ws / ".runfold" / "secret.txt").write_text("TODO in the ledger dir\n")
    (room / "sneaky").symlink_to(ws / ".runfold")
    out = call(SEARCH, ctx, pattern="TODO", path="../..")
    assert out["matches"] == [
        {"path": "a.py", "line": 2, "text": "TODO: one"},
        {"path": "sub/b.md", "line": 2, "text": "see TODO two"},
    ]
    assert out["truncated"] is False and out["skipped"] == 1  # the binary file
    rx = call(SEARCH, ctx, pattern=r"TODO:? (one|two)$", regex=True)
    assert [m["line"] for m in rx["matches"]] == [2, 2]
    assert call(SEARCH, ctx, pattern="TODO", path="a.py")["files_searched"] == 1
    capped = call(SEARCH, dataclasses.replace(ctx, search_max_results=1), pattern="TODO")
    assert len(capped["matches"]) == 1 and capped["truncated"] is True
    err = fails(SEARCH, ctx, pattern="(unclosed", regex=True)
    assert err.subject == "argument `pattern`" and "regular expression" in err.recovery


# ---- exec -------------------------------------------------------------------------------


def test_exec_runs_in_the_room(ctx: ToolContext, room: Path) -> None:
    out = call(EXEC, ctx, command="pwd; echo err >&2; exit 3")
    assert out["exit_code"] == 3
    assert Path(out["stdout"].strip()).resolve() == room.resolve()
    assert out["stderr"] == "err\n" and out["truncated"] is False
    assert isinstance(out["took_ms"], int) and out["stdout_bytes"] == len(out["stdout"].encode())


def test_exec_env_is_scrubbed_of_secrets(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOO_API_KEY", "sk-very-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("MY_DB_PASSWORD", "hunter2")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    run_ctx = dataclasses.replace(ctx, env={"RUN_ONLY": "given"})
    out = call(EXEC, run_ctx, command="env")
    seen = dict(line.split("=", 1) for line in out["stdout"].splitlines() if "=" in line)
    for name in ("FOO_API_KEY", "ANTHROPIC_API_KEY", "MY_DB_PASSWORD", "SSH_AUTH_SOCK"):
        assert name not in seen
    assert "sk-" not in out["stdout"] and "hunter2" not in out["stdout"]
    assert seen["HARMLESS_SETTING"] == "visible" and seen["RUN_ONLY"] == "given"
    assert seen["PATH"] == os.environ["PATH"]
    assert scrub_env({"PATH": "/bin", "HOME": "/h", "LANG": "C", "GITHUB_TOKEN": "t"}) == {
        "PATH": "/bin",
        "HOME": "/h",
        "LANG": "C",
    }
    assert is_secret_name("aws_secret_access_key") and not is_secret_name("GIT_AUTHOR_NAME")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _host_pids(token: str) -> list[int]:
    """Live (not zombie) processes of this machine whose command line holds `token`: a sandboxed
    command's `$!` is a pid of its own namespace, so its processes are found from outside."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if token.encode() not in f.read():
                    continue
        except OSError:
            continue
        if _alive(int(entry)):
            found.append(int(entry))
    return found


def _gone(token: str) -> bool:
    for _ in range(100):  # SIGKILL is delivered asynchronously; no timing assumption beyond "soon"
        if not _host_pids(token):
            return True
        time.sleep(0.05)
    return False


SANDBOXES = [ExecSettings(), ExecSettings(sandbox="none")]
"""The process-group tests run in the sandbox and unconfined (`sandbox = "none"`)."""


@pytest.mark.parametrize("sandbox", SANDBOXES, ids=["bwrap", "none"])
def test_exec_timeout_kills_the_process_group(ctx: ToolContext, room: Path, sandbox: ExecSettings) -> None:
    token = f"{secrets.randbelow(10**6) + 30}.{secrets.randbelow(10**6)}"
    with pytest.raises(ToolError) as info:
        call(
            EXEC,
            dataclasses.replace(ctx, sandbox=sandbox),
            command=f"sleep {token} & echo $! > bg.pid; echo partial; sleep 30",
            timeout_s=1,
        )
    err = info.value
    assert err.code is ErrorCode.TIMEOUT
    data = err.to_data()
    check_json(data)
    assert (
        data["detail"]["stdout"] == "partial\n" and data["detail"]["exit_code"] == -9
    )  # SIGKILL, not a finished sleep
    assert (room / "bg.pid").read_text().strip(), "the background child was started"
    assert _gone(token), "the background child of the command survived the timeout"


@pytest.mark.parametrize("sandbox", SANDBOXES, ids=["bwrap", "none"])
def test_exec_leaves_no_background_processes(ctx: ToolContext, room: Path, sandbox: ExecSettings) -> None:
    token = f"{secrets.randbelow(10**6) + 30}.{secrets.randbelow(10**6)}"
    out = call(EXEC, dataclasses.replace(ctx, sandbox=sandbox), command=f"sleep {token} & echo $! > bg.pid")
    assert out["exit_code"] == 0
    assert (room / "bg.pid").read_text().strip()
    assert _gone(token)


def test_exec_output_is_capped_head_and_tail(ctx: ToolContext) -> None:
    small = dataclasses.replace(ctx, exec_output_max_bytes=100)
    out = call(EXEC, small, command="printf 'HEAD'; head -c 5000 /dev/zero | tr '\\0' x; printf 'TAIL'")
    assert out["truncated"] is True and out["stdout_bytes"] == 5008
    assert out["stdout"].startswith("HEAD") and out["stdout"].endswith("TAIL")
    assert "…[4908 bytes omitted]…" in out["stdout"]
    assert fails(EXEC, ctx, command="   ").code is ErrorCode.INVALID_ARGS


def test_special_files_and_blocked_parents_are_refused(ctx: ToolContext, room: Path) -> None:
    os.mkfifo(room / "pipe")
    assert "regular file" in fails(READ_FILE, ctx, path="pipe").recovery  # would block forever
    (room / "plain").write_text("x")
    err = fails(WRITE_FILE, ctx, path="plain/child.txt", content="y")
    assert err.code is ErrorCode.INVALID_ARGS and "cannot be written there" in err.recovery
    assert (room / "plain").read_text() == "x"


@pytest.mark.parametrize("sandbox", SANDBOXES, ids=["bwrap", "none"])
def test_cancelled_exec_kills_its_processes(ctx: ToolContext, room: Path, sandbox: ExecSettings) -> None:
    from runfold.tools import ToolCallRequest, WaveCancelled, builtin_registry, execute_wave

    token = f"{secrets.randbelow(10**6) + 30}.{secrets.randbelow(10**6)}"
    run_ctx = dataclasses.replace(ctx, sandbox=sandbox)

    async def main() -> WaveCancelled:
        command = json.dumps({"command": f"sleep {token} & echo $! > bg.pid; sleep 30"})
        task = asyncio.create_task(
            execute_wave([ToolCallRequest("c1", "exec", command)], builtin_registry(), run_ctx)
        )
        for _ in range(400):  # until the command has started its background child
            if (room / "bg.pid").exists() and (room / "bg.pid").read_text().strip():
                break
            await asyncio.sleep(0.025)
        task.cancel()
        with pytest.raises(WaveCancelled) as info:
            await task
        return info.value

    cancelled = asyncio.run(main())
    assert cancelled.outcomes[0].error is not None
    assert cancelled.outcomes[0].error["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    assert (room / "bg.pid").read_text().strip()
    assert _gone(token)


@settings(max_examples=150, deadline=None)
@given(chunks=st.lists(st.binary(max_size=40), max_size=12), cap=st.integers(min_value=2, max_value=64))
def test_capture_keeps_head_and_tail_within_the_cap(chunks: list[bytes], cap: int) -> None:
    cap_ = _Capture(cap)
    for chunk in chunks:
        cap_.feed(chunk)
    data = b"".join(chunks)
    assert cap_.total == len(data)
    if len(data) <= cap:
        assert not cap_.truncated and cap_.text() == data.decode("utf-8", errors="replace")
    else:
        head, tail = data[: cap // 2], data[len(data) - (cap - cap // 2) :]
        omitted = len(data) - len(head) - len(tail)
        expected = (
            head.decode("utf-8", errors="replace")
            + f"\n…[{omitted} bytes omitted]…\n"
            + tail.decode("utf-8", errors="replace")
        )
        assert cap_.truncated and cap_.text() == expected
