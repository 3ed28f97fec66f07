"""What a tool call may touch: the run's workspace, its room, and the write domain (DESIGN.md §9).

A run writes only inside its room and never into `.runfold`; it reads anywhere inside the
workspace except `.runfold`. Every path a model gives is relative to the room (the directory
`exec` runs in). A refusal is a `RunfoldError` with a three-part `Gate` (rule, violation, an
alternative that works), which the run loop turns into a `tool_result` error; it never ends a turn.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runfold.core.address import RESERVED_SEGMENT, is_reserved, parse_address
from runfold.core.errors import ErrorCode, Gate, RunfoldError, invalid_args
from runfold.core.secrets import scrub_env
from runfold.tools.sandbox import ExecSettings

_DRIVE = re.compile(r"^[A-Za-z]:")

def _posix(path: Path | str) -> str:
    return Path(path).as_posix()


def is_reserved_segment(segment: str) -> bool:
    """True for a path segment naming the reserved `.runfold` directory (any letter case)."""
    return segment.casefold() == RESERVED_SEGMENT


READ_RULE = (
    "a run reads only inside its workspace, never inside .runfold, through no name: symlinks are "
    "resolved, and a file with several names (hard links) is read only when all of them are there"
)
"""The rule every read refusal cites (its `gate.rule`)."""


class AgentDesk(Protocol):
    """What the agent tools ask of the owner hosting the run (`runfold.runtime.delegation`).

    - `delegate(task, goal, room, detach) -> {run, depth, ...}`: dispatch a child run whose
      `run_started` names this run as `parent`; raises `E_GATE_DENIED` past the depth or fan-out
      limit, `E_INVALID_ARGS` for a bad task or room;
    - `wait_for_reply(runs, timeout_s) -> {replied, pending, ...}`: wait until each of `runs`
      (ids or prefixes of this run's children; empty: every child not waited for yet) has sent
      its reply letter, or the timeout ran out; raises `E_INVALID_ARGS` when there is nothing to
      wait for.
    """

    async def delegate(self, task: str, goal: str, room: str | None, detach: bool) -> dict[str, Any]: ...

    async def wait_for_reply(self, runs: list[str], timeout_s: int) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ToolContext:
    """Everything a tool call may depend on besides its arguments.

    - `workspace`: the workspace directory (made absolute; the ledger lives in `.runfold/` below it);
    - `room`: the run's address (its write domain), or None for a run working at the workspace
      root (it may then write anywhere in the workspace except `.runfold`);
    - `run_id`: the run the calls belong to;
    - `env`: extra variables for `exec`, set after the parent environment was scrubbed of secrets;
      `base_env`: the environment to scrub (None = this process's `os.environ`, read per call);
    - `tool_timeout_s`: the ceiling in seconds for one call of a tool that does not time itself;
      `exec_max_timeout_s`: the most an `exec` call may run, whatever its `timeout_s` asks;
    - caps, in bytes or counts: `read_max_bytes` (read_file content), `exec_output_max_bytes`
      (per stream, head + tail), `search_max_results`, `list_max_entries`;
    - `messenger(to, text) -> {delivered_to, signal}`: delivers a letter from this run to another
      live run through the workspace's control inbox (the `send_message` tool); None when the run
      is not driven by a workspace's control hub. It raises `RunfoldError` for a bad target.
    - `offloaded(key) -> (tool_use_id, locator, content bytes)`: the full content of a tool result
      of this run's lineage that was offloaded to the CAS, by tool_use_id or locator, hash
      re-verified (the `read_result` tool); None outside a run loop. It raises `RunfoldError`
      (`E_INVALID_ARGS` for an unknown key, `E_STORAGE_FATAL` for a missing object);
      `result_page_bytes`: the most bytes one `read_result` call returns.
    - `edit_region(region, op, fields) -> result`: applies a notes/todo/scratch edit of this run's
      window (the context tools, `runtime.regions.RegionEditor.edit`); None outside a run loop.
      It raises `RunfoldError` for an edit that cannot apply or would pass its region's budget.
    - `agents`: the run's desk for the agent tools (`delegate`, `wait_for_reply`: see
      `AgentDesk`); None when the run is not driven by a workspace's owner.
    - `sandbox`: how `exec` is confined (`[tools.exec]`: `tools.sandbox.ExecSettings`);
      `launched`: the process group the run loop started for this call of `exec`, held at its
      gate and recorded on its `tool_called` (`tools.exec_tool.Launch`); None otherwise.

    Raises `E_INVALID_ARGS` when `room` is not an address (DESIGN.md §9) or is reserved.
    """

    workspace: Path
    room: str | None
    run_id: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    base_env: Mapping[str, str] | None = None
    tool_timeout_s: int = 120
    exec_max_timeout_s: int = 600
    read_max_bytes: int = 64 * 1024
    exec_output_max_bytes: int = 32 * 1024
    search_max_results: int = 100
    list_max_entries: int = 1000
    messenger: Callable[[str, str], dict[str, Any]] | None = field(default=None, compare=False)
    offloaded: Callable[[str], tuple[str, str, bytes]] | None = field(default=None, compare=False)
    result_page_bytes: int = 16384
    edit_region: Callable[[str, str, dict[str, Any]], dict[str, Any]] | None = field(default=None, compare=False)
    sandbox: ExecSettings = field(default_factory=ExecSettings)
    launched: object | None = field(default=None, compare=False)
    agents: AgentDesk | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "workspace", Path(os.path.abspath(self.workspace)))
        if self.room is not None:
            parse_address(self.room)
            if is_reserved(self.room):
                raise invalid_args(
                    "use room",
                    repr(self.room),
                    "choose a room outside .runfold, e.g. `work`",
                )

    # ---- places -------------------------------------------------------------------------

    @property
    def room_dir(self) -> Path:
        """The room's directory (lexical, absolute); the workspace itself when `room` is None."""
        return self.workspace.joinpath(*self.room.split("/")) if self.room else self.workspace

    @property
    def real_workspace(self) -> Path:
        return Path(os.path.realpath(self.workspace))

    @property
    def real_room(self) -> Path:
        return Path(os.path.realpath(self.room_dir))

    @property
    def room_label(self) -> str:
        """How errors name the room: "the room `lab/room1`", or "the workspace root"."""
        return f"the room `{self.room}`" if self.room else "the workspace root"

    def ensure_room(self) -> Path:
        """Create the room directory if missing and return it (it is inside the write domain).
        Raises `E_OUTSIDE_WRITE_DOMAIN`, creating nothing, when the room's directory or one above
        it (below the workspace) is a symbolic link: the run would work wherever the link points
        (DESIGN.md §9)."""
        place = self.workspace
        for segment in self.room.split("/") if self.room else ():
            place = place / segment
            if place.is_symlink():
                raise RunfoldError(
                    ErrorCode.OUTSIDE_WRITE_DOMAIN,
                    "open the room",
                    f"room {self.room}",
                    f"`{place.relative_to(self.workspace).as_posix()}` is a symbolic link (to "
                    f"{os.readlink(place)}): make the room a real directory of the workspace, or give another room",
                    gate=Gate(
                        self._write_rule(),
                        f"{place.relative_to(self.workspace).as_posix()} is a symbolic link",
                        "a room that is a real directory",
                    ),
                )
        self.room_dir.mkdir(parents=True, exist_ok=True)
        return self.room_dir

    def display(self, real: Path) -> str:
        """A resolved path as the model should write it: relative to the room, `/`-separated
        (`../x` for a place elsewhere in the workspace, `.` for the room itself)."""
        return _posix(os.path.relpath(real, self.real_room))

    def exec_env(self) -> dict[str, str]:
        """The environment of an `exec` command: the base environment without secrets, then `env`."""
        base = os.environ if self.base_env is None else self.base_env
        out = scrub_env(base)
        out.update(self.env)
        return out

    # ---- the write domain ---------------------------------------------------------------

    def _write_rule(self) -> str:
        return f"a run writes only inside {self.room_label}, never into .runfold"

    def _refuse_write(self, path: str, violation: str, name: str, action: str) -> RunfoldError:
        alt = self._alternative(name)
        where = f"{self.room}/{alt}" if self.room else alt
        return RunfoldError(
            ErrorCode.OUTSIDE_WRITE_DOMAIN,
            action,
            repr(path),
            f"write `{alt}` instead (room-relative; `{where}` in the workspace)",
            nearby=(alt,),
            gate=Gate(
                rule=self._write_rule(),
                violation=violation,
                alternative=f"write `{alt}`, which lands in {self.room_label} as `{where}`",
            ),
        )

    def refuse_write(self, path: str, violation: str, action: str) -> RunfoldError:
        """The `E_OUTSIDE_WRITE_DOMAIN` refusal (rule, `violation`, an alternative that works) of
        a write to `path`."""
        name = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
        return self._refuse_write(path, violation, name, action)

    def _alternative(self, name: str) -> str:
        base = name if name and name not in (".", "..") and not is_reserved_segment(name) else "output.txt"
        for candidate in (base, f"new-{base}", f"new-{base}.txt"):
            if isinstance(self._check_write(candidate), Path):
                return candidate
        return base

    def resolve_write(self, path: str, action: str = "write file") -> Path:
        """The real path a write to `path` (room-relative) lands on, after checking the write domain.

        Refused with `E_OUTSIDE_WRITE_DOMAIN` and a Gate when `path` is absolute, uses `..`, has a
        `.runfold` segment, resolves (through symlinks) outside the room or into `.runfold`, or
        names a file with other hard links (which may lie outside the room);
        `E_INVALID_ARGS` when it is empty, names the room itself, or contains a NUL byte.
        """
        checked = self._check_write(path)
        if isinstance(checked, Path):
            return checked
        kind, message = checked
        if kind == "invalid":
            raise invalid_args(action, repr(path), message)
        raise self.refuse_write(path, message, action)

    def _check_write(self, path: str) -> Path | tuple[str, str]:
        """The real target, or (`invalid` | `outside`, what is wrong)."""
        if "\x00" in path:
            return "invalid", "remove the NUL byte from the path"
        if path.startswith(("/", "\\", "~")) or _DRIVE.match(path):
            return "outside", f"`{path}` is an absolute path"
        segments = [s for s in path.split("/") if s not in ("", ".")]
        if ".." in segments:
            return "outside", f"`{path}` climbs out with `..`"
        if any(is_reserved_segment(s) for s in segments):
            return "outside", f"`{path}` reaches into the reserved .runfold directory"
        if not segments:
            return "invalid", "give a file path inside the room, e.g. `notes.md`"
        real_ws, real_room = self.real_workspace, self.real_room
        real = Path(os.path.realpath(self.room_dir.joinpath(*segments)))
        if not real.is_relative_to(real_ws):
            return "outside", f"`{path}` follows a symlink to `{real}`, outside the workspace"
        inside_ws = real.relative_to(real_ws)
        if not real.is_relative_to(real_room) or not real_room.is_relative_to(real_ws):
            return (
                "outside",
                f"`{path}` resolves to `{_posix(inside_ws)}` (through a symlink), outside the room",
            )
        if any(is_reserved_segment(s) for s in inside_ws.parts):
            return "outside", f"`{path}` resolves into the reserved .runfold directory"
        if real == real_room:
            return "invalid", "give a file path inside the room, e.g. `notes.md`"
        try:
            links = real.stat().st_nlink if real.is_file() else 1
        except OSError:
            links = 1
        if links > 1:
            return (
                "outside",
                f"`{path}` is a hard link ({links} names share this file; a write would change it "
                "under its other names, which may lie outside the room)",
            )
        return real

    # ---- reads --------------------------------------------------------------------------

    def _refuse_read(self, path: str, violation: str, alternative: str, action: str) -> RunfoldError:
        return RunfoldError(
            ErrorCode.GATE_DENIED,
            action,
            repr(path),
            f"read `{alternative}` or another path inside the workspace instead",
            nearby=(alternative,),
            gate=Gate(
                rule=READ_RULE,
                violation=violation,
                alternative=f"read `{alternative}` (paths are relative to {self.room_label})",
            ),
        )

    def resolve_read(self, path: str, action: str = "read path") -> Path:
        """The real path a read of `path` (room-relative; `..` may climb up to the workspace root)
        refers to. The path need not exist.

        Refused with `E_GATE_DENIED` and a Gate when it is absolute (the alternative is its
        room-relative spelling when it lies inside the workspace), resolves outside the workspace,
        or touches `.runfold`; `E_INVALID_ARGS` for a NUL byte.
        """
        if "\x00" in path:
            raise invalid_args(action, repr(path), "remove the NUL byte from the path")
        real_ws = self.real_workspace
        if path.startswith(("/", "\\", "~")) or _DRIVE.match(path):
            alt = "."
            absolute = Path(os.path.realpath(path)) if path.startswith("/") else None
            if absolute is not None and absolute.is_relative_to(real_ws):
                alt = self.display(absolute)
            raise self._refuse_read(path, f"`{path}` is an absolute path", alt, action)
        segments = [s for s in path.split("/") if s not in ("", ".")]
        if any(is_reserved_segment(s) for s in segments):
            raise self._refuse_read(
                path, f"`{path}` reaches into the reserved .runfold directory", ".", action
            )
        real = Path(os.path.realpath(self.room_dir.joinpath(*segments)))
        if not real.is_relative_to(real_ws):
            raise self._refuse_read(
                path, f"`{path}` resolves to `{real}`, outside the workspace", ".", action
            )
        if any(is_reserved_segment(s) for s in real.relative_to(real_ws).parts):
            raise self._refuse_read(
                path, f"`{path}` resolves into the reserved .runfold directory", ".", action
            )
        return real

    def is_readable(self, real: Path) -> bool:
        """True when an already resolved path lies inside the workspace and outside `.runfold`."""
        real_ws = self.real_workspace
        if not real.is_relative_to(real_ws):
            return False
        return not any(is_reserved_segment(s) for s in real.relative_to(real_ws).parts)
