"""Escape attempts against the room, through every writing tool and through `exec` (DESIGN.md §9).

Each trick — `..`, an absolute path, a symlink (to a file, to a directory) leading out, a hard
link to a file outside, the `.runfold` ledger directory, `/proc/self/cwd` — is tried through
`write_file`, `edit_file` and `exec` (in its bubblewrap sandbox). A writing tool must refuse
with the three-part gate (rule, violation, alternative); `exec` must fail or be contained. Either
way nothing outside the room changes: the whole tree around the workspace (and the ledger
directory inside it) is hashed before and after. `ESCAPE_TABLE=1` prints the table of outcomes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.tools import ToolContext
from runfold.tools.builtin import EDIT_FILE, EXEC, WRITE_FILE
from runfold.tools.context import ToolContext as Ctx
from runfold.tools.registry import Tool
from runfold.tools.sandbox import ExecSettings, bwrap_problem
from runfold.tools.write_domain import write_in_room

pytestmark = pytest.mark.skipif(bwrap_problem() is not None, reason=f"no sandbox here: {bwrap_problem()}")

TABLE: list[tuple[str, str, str]] = []


def _tree(top: Path, skip: Path | None) -> dict[str, str]:
    """path → what it is (file hash, link target, dir) for everything under `top` but `skip`."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(top, followlinks=False):
        here = Path(dirpath)
        if skip is not None and (here == skip or skip in here.parents):
            dirs[:] = []
            continue
        for name in dirs + files:
            p = here / name
            if skip is not None and p == skip:
                continue
            if p.is_symlink():
                out[str(p)] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[str(p)] = "dir"
            else:
                out[str(p)] = hashlib.blake2b(p.read_bytes()).hexdigest()
    return out


def _exec_outcome(out: dict[str, Any]) -> str:
    if out["exit_code"] == 0:
        return "exit 0: contained (it wrote only inside the sandbox: its private /tmp or the room)"
    return f"exit {out['exit_code']}: {out['stderr'].strip()[:70]}"


def _invoke(t: Tool, ctx: ToolContext, **args: Any) -> dict[str, Any]:
    result: dict[str, Any] = asyncio.run(t.invoke(t.validate(args), ctx))
    return result


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ToolContext, Path, Path]:
    """A workspace in `tmp_path/ws` with a ledger directory, a sibling room, a file at its root,
    a file beyond it, and in the room: a symlink to the root's file, a symlink to the sibling
    room, a hard link to the root's file, a symlink through /proc/self/cwd."""
    ws = tmp_path / "ws"
    (ws / ".runfold" / "ledger").mkdir(parents=True)
    (ws / ".runfold" / "config.toml").write_text("[defaults]\n")
    (ws / ".runfold" / "ledger" / "0000.seg").write_text('{"line": 1}\n')
    (ws / "lab" / "other").mkdir(parents=True)
    (ws / "lab" / "other" / "notes.md").write_text("other room\n")
    (ws / "outside.txt").write_text("keep me\n")
    (tmp_path / "beyond.txt").write_text("beyond\n")
    room = ws / "lab" / "room1"
    room.mkdir(parents=True)
    (room / "file-link").symlink_to("../../outside.txt")
    (room / "dir-link").symlink_to("../other")
    (room / "abs-link").symlink_to(tmp_path / "beyond.txt")
    (room / "proc-link").symlink_to("/proc/self/cwd/../../outside.txt")
    os.link(ws / "outside.txt", room / "hard")
    ctx = ToolContext(workspace=ws, room="lab/room1")
    return ctx, tmp_path, room


TRICKS: list[tuple[str, str, str]] = [
    # (trick, path for write_file/edit_file, shell command for exec)
    ("`..` to a sibling room", "../other/notes.md", "echo x > ../other/notes.md"),
    ("`..` to the workspace root", "../../outside.txt", "echo x >> ../../outside.txt"),
    ("absolute path", "{ws}/outside.txt", "echo x >> {ws}/outside.txt"),
    ("absolute path beyond the workspace", "{tmp}/beyond.txt", "echo x >> {tmp}/beyond.txt"),
    ("symlink to a file outside", "file-link", "echo x >> file-link"),
    ("symlink to a directory outside", "dir-link/notes.md", "echo x >> dir-link/notes.md"),
    ("absolute symlink beyond the workspace", "abs-link", "echo x >> abs-link"),
    ("hard link to a file outside", "hard", "echo x >> hard"),
    ("/proc/self/cwd", "/proc/self/cwd/../../outside.txt", "echo x >> /proc/self/cwd/../../outside.txt"),
    ("symlink through /proc/self/cwd", "proc-link", "echo x >> proc-link"),
    ("the ledger via `..`", "../../.runfold/config.toml", "echo x >> ../../.runfold/config.toml"),
    ("the ledger by absolute path", "{ws}/.runfold/ledger/0000.seg", "echo x >> {ws}/.runfold/ledger/0000.seg"),
    ("new symlink made by exec, then written", "made-link", "ln -s ../../outside.txt made-link && echo x >> made-link"),
    ("new hard link made by exec", "made-hard", "ln ../../outside.txt made-hard && echo x >> made-hard"),
]


@pytest.mark.parametrize(("trick", "path", "command"), TRICKS, ids=[t[0] for t in TRICKS])
def test_every_trick_is_refused_or_contained(
    setup: tuple[ToolContext, Path, Path], trick: str, path: str, command: str
) -> None:
    ctx, tmp, room = setup
    ws = ctx.workspace
    path, command = path.format(ws=ws, tmp=tmp), command.format(ws=ws, tmp=tmp)
    before = _tree(tmp, room)
    ledger_before = _tree(ws / ".runfold", None)
    if trick.startswith("new "):  # made inside the sandbox first (refused there), then written
        out = _invoke(EXEC, ctx, command=command)
        TABLE.append((trick, "exec", _exec_outcome(out)))
        assert out["exit_code"] != 0
    else:
        for t in (WRITE_FILE, EDIT_FILE):
            args = {"path": path, "content": "x"} if t is WRITE_FILE else {"path": path, "old": "keep", "new": "lost"}
            with pytest.raises(RunfoldError) as info:
                _invoke(t, ctx, **args)
            err = info.value
            assert err.code in (ErrorCode.OUTSIDE_WRITE_DOMAIN, ErrorCode.PATH_NOT_FOUND), err.display()
            if err.code is ErrorCode.OUTSIDE_WRITE_DOMAIN:
                assert err.gate is not None and err.gate.rule and err.gate.violation and err.gate.alternative
            TABLE.append((trick, t.name, f"{err.code.value}: {err.gate.violation if err.gate else err.recovery}"))
        out = _invoke(EXEC, ctx, command=command)
        TABLE.append((trick, "exec", _exec_outcome(out)))
    if trick.startswith("new "):
        for t in (WRITE_FILE, EDIT_FILE):
            if not (room / path).is_symlink() and not (room / path).exists():
                continue
            args = {"path": path, "content": "x"} if t is WRITE_FILE else {"path": path, "old": "keep", "new": "lost"}
            with pytest.raises(RunfoldError) as info:
                _invoke(t, ctx, **args)
            assert info.value.code is ErrorCode.OUTSIDE_WRITE_DOMAIN
            TABLE.append((trick, t.name, f"{info.value.code.value}: {info.value.gate.violation if info.value.gate else ''}"))
    assert _tree(tmp, room) == before, f"{trick}: something outside the room changed"
    assert _tree(ws / ".runfold", None) == ledger_before
    assert (ws / "outside.txt").read_text() == "keep me\n"


def test_the_ledger_is_read_only_even_when_the_room_is_the_workspace_root(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".runfold").mkdir(parents=True)
    (ws / ".runfold" / "config.toml").write_text("[defaults]\n")
    ctx = ToolContext(workspace=ws, room=None)
    before = _tree(ws / ".runfold", None)
    for command in (
        "echo x >> .runfold/config.toml",
        "rm -rf .runfold",
        "mv .runfold gone",
        "echo x > .runfold/new",
        "cd /proc/self/cwd/.runfold && echo x > config.toml",
    ):
        out = _invoke(EXEC, ctx, command=command)
        assert out["exit_code"] != 0, command
        TABLE.append((f"the ledger from the root room: {command}", "exec", f"exit {out['exit_code']}"))
    out = _invoke(EXEC, ctx, command="echo fine > work.txt")  # the room itself stays writable
    assert out["exit_code"] == 0 and (ws / "work.txt").read_text() == "fine\n"
    with pytest.raises(RunfoldError) as info:
        _invoke(WRITE_FILE, ctx, path=".runfold/config.toml", content="x")
    assert info.value.code is ErrorCode.OUTSIDE_WRITE_DOMAIN
    assert _tree(ws / ".runfold", None) == before


def test_the_sandbox_holds_against_privilege_and_process_tricks(setup: tuple[ToolContext, Path, Path]) -> None:
    ctx, tmp, room = setup
    before = _tree(tmp, room)
    for command, what in (
        ("mount -o remount,rw /", "remount / read-write"),
        (f"mount --bind {room} {ctx.workspace}", "bind the room over the workspace"),
        (f"kill -9 {os.getpid()}", "kill runfold by its pid"),
        ("ls /proc/*/cwd/ 2>/dev/null | wc -l; echo x > /proc/1/cwd/../outside-via-init", "write through pid 1's cwd"),
        ("echo x > /etc/runfold-escape", "write /etc"),
    ):
        out = _invoke(EXEC, ctx, command=command)
        TABLE.append((what, "exec", f"exit {out['exit_code']}: {out['stderr'].strip()[:60]}"))
        if what != "write through pid 1's cwd":
            assert out["exit_code"] != 0, what
    out = _invoke(EXEC, ctx, command=f"echo scratch > /tmp/x && cat /tmp/x && echo x > {tmp}/made.txt; ls {tmp}")
    assert out["stdout"].startswith("scratch\n")  # a private /tmp: usable, and gone afterwards
    assert not Path(tmp / "made.txt").exists()
    assert not Path("/etc/runfold-escape").exists()
    assert _tree(tmp, room) == before


def _listener() -> tuple[socket.socket, int, threading.Event]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    hit = threading.Event()

    def accept() -> None:
        try:
            conn, _ = server.accept()
            hit.set()
            conn.close()
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1], hit


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "network-granted"])
def test_network_only_when_the_config_grants_it(setup: tuple[ToolContext, Path, Path], network: bool) -> None:
    import dataclasses
    import sys

    ctx, _tmp, _room = setup
    server, port, hit = _listener()
    try:
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')"
        run_ctx = dataclasses.replace(ctx, sandbox=ExecSettings(network=network))
        out = _invoke(EXEC, run_ctx, command=f"{sys.executable} -c {json.dumps(probe)}")
        assert ("connected" in out["stdout"]) is network, out
        assert (hit.wait(10) if network else not hit.is_set()), "the listener saw what the command saw"
        TABLE.append((f"connect to a host port (network={network})", "exec", f"exit {out['exit_code']}"))
    finally:
        server.close()


def test_a_symlink_planted_after_the_check_is_refused_not_followed(setup: tuple[ToolContext, Path, Path]) -> None:
    ctx, tmp, room = setup
    (room / "sub").mkdir()
    real = ctx.resolve_write("sub/new.txt")
    before = _tree(tmp, room)
    (room / "sub").rmdir()
    (room / "sub").symlink_to("../other")  # the race: swapped between the check and the write
    with pytest.raises(RunfoldError) as info:
        write_in_room(ctx, real, b"x", "write file", "sub/new.txt")
    assert info.value.code is ErrorCode.OUTSIDE_WRITE_DOMAIN and info.value.gate is not None
    assert "became a symlink" in info.value.gate.violation
    assert _tree(tmp, room) == before and not (ctx.workspace / "lab" / "other" / "new.txt").exists()


def test_no_sandbox_refuses_exec_unless_the_config_says_none(
    setup: tuple[ToolContext, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import runfold.tools.sandbox as sandbox

    ctx, _tmp, room = setup
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bubblewrap (`bwrap`) is not installed")
    with pytest.raises(RunfoldError) as info:
        _invoke(EXEC, ctx, command="echo hi > hi.txt")
    err = info.value
    assert err.code is ErrorCode.GATE_DENIED and err.gate is not None
    assert "not installed" in err.gate.violation and 'sandbox = "none"' in err.recovery
    assert not (room / "hi.txt").exists()
    import dataclasses

    loose: Ctx = dataclasses.replace(ctx, sandbox=ExecSettings(sandbox="none"))
    assert _invoke(EXEC, loose, command="echo hi > hi.txt")["exit_code"] == 0
    assert (room / "hi.txt").read_text() == "hi\n"


def test_zz_print_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    if os.environ.get("ESCAPE_TABLE"):
        with capsys.disabled():
            print("\n| trick | tool | outcome |\n|---|---|---|")
            for trick, tool, outcome in TABLE:
                print(f"| {trick} | {tool} | {outcome.replace('|', '/')} |")

