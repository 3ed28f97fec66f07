"""The write domain (DESIGN.md §9): writes stay in the room and out of `.runfold`, refusals carry a
three-part gate whose alternative works, reads stay in the workspace; checked on real files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.tools import ToolContext
from runfold.tools.builtin import EDIT_FILE, EXEC, WRITE_FILE


def _write(ctx: ToolContext, path: str, content: str = "x") -> dict[str, object]:
    return asyncio.run(WRITE_FILE.invoke(WRITE_FILE.validate({"path": path, "content": content}), ctx))


def _refusal(ctx: ToolContext, path: str) -> RunfoldError:
    with pytest.raises(RunfoldError) as info:
        _write(ctx, path)
    return info.value


@pytest.mark.parametrize(
    ("path", "violation", "alternative"),
    [
        ("../x.txt", "climbs out with `..`", "x.txt"),
        ("sub/../../other/notes.md", "climbs out with `..`", "notes.md"),
        ("/etc/passwd", "absolute path", "passwd"),
        ("~/.bashrc", "absolute path", ".bashrc"),
        (".runfold/ledger.lock", "reserved .runfold", "ledger.lock"),
        ("deep/.runfold/x", "reserved .runfold", "x"),
        ("deep/.RUNFOLD/x", "reserved .runfold", "x"),
        ("..", "climbs out", "output.txt"),
    ],
)
def test_lexical_escapes_are_refused_with_a_gate(
    ctx: ToolContext, ws: Path, path: str, violation: str, alternative: str
) -> None:
    before = sorted(p.relative_to(ws) for p in ws.rglob("*"))
    err = _refusal(ctx, path)
    assert err.code is ErrorCode.OUTSIDE_WRITE_DOMAIN
    assert err.gate is not None
    assert "only inside the room `lab/room1`" in err.gate.rule
    assert violation in err.gate.violation
    assert f"write `{alternative}`" in err.gate.alternative
    assert err.nearby == (alternative,)
    data = err.to_data()
    assert set(data["gate"]) == {"rule", "violation", "alternative"}
    # nothing was written anywhere
    assert sorted(p.relative_to(ws) for p in ws.rglob("*")) == before
    # the alternative works
    assert _write(ctx, alternative)["path"] == alternative
    assert (ws / "lab" / "room1" / alternative).read_text() == "x"


def test_symlink_inside_the_room_pointing_outside_is_refused(
    ctx: ToolContext, ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    room = ctx.ensure_room()
    (room / "escape").symlink_to(outside)
    (room / "to_other").symlink_to(ws / "lab" / "other")
    (room / "to_ledger").symlink_to(ws / ".runfold")
    (room / "file_link").symlink_to(outside / "target.txt")

    err = _refusal(ctx, "escape/evil.txt")
    assert err.gate is not None and "outside the workspace" in err.gate.violation
    assert not (outside / "evil.txt").exists()

    err = _refusal(ctx, "to_other/notes.md")
    assert err.gate is not None
    assert (
        "resolves to `lab/other/notes.md`" in err.gate.violation and "outside the room" in err.gate.violation
    )
    assert (ws / "lab" / "other" / "notes.md").read_text() == "other room\n"

    err = _refusal(ctx, "to_ledger/ledger.lock")
    assert err.gate is not None and ".runfold" in err.gate.violation

    err = _refusal(ctx, "file_link")
    assert err.gate is not None and "outside the workspace" in err.gate.violation
    assert not (outside / "target.txt").exists()
    # the named alternative is not itself the escaping link
    assert err.nearby == ("new-file_link",)
    assert _write(ctx, "new-file_link")["written"] == 1


def test_edit_file_obeys_the_same_domain(ctx: ToolContext, ws: Path) -> None:
    with pytest.raises(RunfoldError) as info:
        asyncio.run(
            EDIT_FILE.invoke(
                EDIT_FILE.validate({"path": "../other/notes.md", "old": "other", "new": "mine"}), ctx
            )
        )
    assert info.value.code is ErrorCode.OUTSIDE_WRITE_DOMAIN
    assert (ws / "lab" / "other" / "notes.md").read_text() == "other room\n"


def test_writes_inside_the_room_work_including_inner_symlinks(ctx: ToolContext, ws: Path) -> None:
    room = ctx.ensure_room()
    (room / "real").mkdir()
    (room / "alias").symlink_to(room / "real")
    assert _write(ctx, "./a//b/c.txt", "abc") == {"path": "a/b/c.txt", "written": 3, "created": True}
    assert _write(ctx, "alias/d.txt", "dd") == {"path": "real/d.txt", "written": 2, "created": True}
    assert (room / "real" / "d.txt").read_text() == "dd"
    assert _write(ctx, "a/b/c.txt", "é")["created"] is False
    assert (room / "a" / "b" / "c.txt").read_bytes() == "é".encode()


def test_workspace_root_room_may_write_anywhere_but_runfold(ws: Path) -> None:
    root = ToolContext(workspace=ws, room=None)
    assert _write(root, "lab/other/new.txt")["path"] == "lab/other/new.txt"
    err = _refusal(root, ".runfold/x")
    assert err.gate is not None and "the workspace root" in err.gate.rule


def test_reads_range_over_the_workspace_but_not_beyond(ctx: ToolContext, ws: Path, tmp_path: Path) -> None:
    assert ctx.resolve_read("../other/notes.md") == (ws / "lab" / "other" / "notes.md").resolve()
    assert ctx.resolve_read("../../README.md") == (ws / "README.md").resolve()
    for path, violation in [
        ("../../../", "outside the workspace"),
        ("../../.runfold/ledger.lock", ".runfold"),
        ("/etc/passwd", "absolute path"),
    ]:
        with pytest.raises(RunfoldError) as info:
            ctx.resolve_read(path)
        assert info.value.code is ErrorCode.GATE_DENIED
        assert info.value.gate is not None and violation in info.value.gate.violation
    # an absolute path inside the workspace gets its room-relative spelling as the alternative
    with pytest.raises(RunfoldError) as info:
        ctx.resolve_read(str(ws / "README.md"))
    assert info.value.nearby == ("../../README.md",)
    (ctx.ensure_room() / "out").symlink_to(tmp_path)
    with pytest.raises(RunfoldError):
        ctx.resolve_read("out/anything")


def test_bad_rooms_are_refused(ws: Path) -> None:
    for room in ("/abs", "a/../b", ".runfold/x", "a//b", ""):
        with pytest.raises(RunfoldError) as info:
            ToolContext(workspace=ws, room=room)
        assert info.value.code is ErrorCode.INVALID_ARGS


SEGMENTS = st.sampled_from(["a", "b", "..", ".", "", ".runfold", ".RunFold", "link", "up", "x.txt", "/"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(SEGMENTS, min_size=1, max_size=6))
def test_any_accepted_write_lands_inside_the_room(ctx: ToolContext, ws: Path, parts: list[str]) -> None:
    room = ctx.ensure_room()
    if not (room / "link").is_symlink():
        (room / "link").symlink_to(ws / ".runfold")
        (room / "up").symlink_to(ws / "lab")
    path = "/".join(parts)
    try:
        real = ctx.resolve_write(path)
    except RunfoldError as err:
        assert err.code in (ErrorCode.OUTSIDE_WRITE_DOMAIN, ErrorCode.INVALID_ARGS)
        if err.code is ErrorCode.OUTSIDE_WRITE_DOMAIN:
            assert err.gate is not None
            alt = ctx.resolve_write(err.nearby[0])  # the alternative is accepted
            assert alt.parent == room.resolve()
        return
    assert real.is_relative_to(room.resolve())
    assert ".runfold" not in [p.casefold() for p in real.relative_to(ws.resolve()).parts]
    assert os.path.realpath(real) == str(real)



def _swap_room_for_link(ws: Path, swapped: str) -> Path:
    """Replace `swapped` (the room `lab/room1` or `lab` above it) by a symlink that makes the
    room's path lead to the sibling room `other`; returns that room's real directory."""
    moved = ws / "moved"
    os.rename(ws / swapped, moved)
    if swapped == "lab/room1":
        (ws / swapped).symlink_to(ws / "lab" / "other", target_is_directory=True)
        return ws / "lab" / "other"
    (ws / swapped).symlink_to(moved, target_is_directory=True)
    (moved / "room1").rename(moved / "room1-real")
    (moved / "room1").symlink_to(moved / "other", target_is_directory=True)
    return moved / "other"


@pytest.mark.parametrize("swapped", ["lab/room1", "lab"])
def test_a_room_swapped_for_a_symlink_while_the_run_goes_keeps_writes_out(
    ctx: ToolContext, ws: Path, swapped: str
) -> None:
    # the start refuses a room under a symlink; one made while the run goes (the room or a
    # directory above it replaced by a link to another room of the workspace) must not carry the
    # run's writes, nor its sandboxed commands' writes, into that other room
    ctx.ensure_room()
    assert _write(ctx, "before.txt")["created"] is True
    other = _swap_room_for_link(ws, swapped)
    err = _refusal(ctx, "after.txt")
    assert err.code is ErrorCode.OUTSIDE_WRITE_DOMAIN and "symbolic link" in err.display()
    with pytest.raises(RunfoldError) as info:
        asyncio.run(EXEC.invoke(EXEC.validate({"command": "echo x > by-exec.txt"}), ctx))
    assert info.value.code is ErrorCode.OUTSIDE_WRITE_DOMAIN, info.value
    assert "symbolic link" in info.value.display()
    assert sorted(p.name for p in other.iterdir()) == ["notes.md"]
