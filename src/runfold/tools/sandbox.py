"""The OS sandbox `exec` runs in: bubblewrap, so the kernel (not a string check) keeps a command
inside its room (DESIGN.md §9).

The whole filesystem is mounted read-only, the room alone read-write, the ledger directory
`.runfold` and any file of the room with another hard link read-only even inside the room; `/proc` is the sandbox's own (its pid
namespace shows no process of the host), `/dev` a minimal one, `/tmp` a private tmpfs; there is
no network unless the workspace's config grants it; every capability is dropped. Where bubblewrap
cannot run, `exec` is refused unless the config says `sandbox = "none"`.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runfold.core.errors import ErrorCode, Gate, Retry, RunfoldError

SandboxMode = Literal["bwrap", "none"]
SANDBOX_MODES: tuple[str, ...] = ("bwrap", "none")
"""`bwrap`: every command in a bubblewrap sandbox (the default); `none`: unconfined, only when
the config says so in these words."""
MAX_SHARED_FILES = 4096
"""At most this many hard-linked files in a room are mounted read-only; more refuse `exec`."""
PROBE_TIMEOUT_S = 20
"""How long the one-time check that bubblewrap works may take."""


@dataclass(frozen=True)
class ExecSettings:
    """`[tools.exec]` of config.toml: `sandbox` (`bwrap` | `none`) and `network` (True lets a
    sandboxed command reach the network; default False: loopback only, in a network namespace of
    its own)."""

    sandbox: SandboxMode = "bwrap"
    network: bool = False


@functools.cache
def bwrap_problem() -> str | None:
    """None when bubblewrap can start a sandbox here (checked once per process: namespaces may be
    refused by the kernel or a container), else why not."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap (`bwrap`) is not installed"
    try:
        done = subprocess.run(
            [
                exe,
                *_isolation(network=False),
                "--ro-bind",
                "/",
                "/",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "true",
            ],
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not be started ({exc})"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        return f"bubblewrap cannot create a sandbox here ({why[-1] if why else f'exit {done.returncode}'})"
    return None


def _isolation(*, network: bool) -> list[str]:
    out = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        out.append("--unshare-net")
    # No `--new-session`: the sandbox's init stays in the process group `exec` started (a session
    # of its own, so no controlling terminal reaches the command), and killing that group kills
    # the init, whose death ends every process of the pid namespace. With `--new-session` the
    # init leaves the group and dies only through `--die-with-parent`, which was seen to miss.
    return [*out, "--die-with-parent", "--cap-drop", "ALL"]


def sandbox_refused(problem: str, command: str) -> RunfoldError:
    """The refusal of an `exec` that no sandbox can hold (`E_GATE_DENIED`, with a Gate)."""
    return RunfoldError(
        ErrorCode.GATE_DENIED,
        "run command",
        repr(command[:200]),
        'install bubblewrap (Debian: `apt-get install bubblewrap`), or write `sandbox = "none"` under '
        "[tools.exec] in .runfold/config.toml to run commands unconfined",
        retry=Retry.NO,
        gate=Gate(
            rule="exec runs a command only inside an OS sandbox that confines it to its room",
            violation=problem,
            alternative="use write_file / edit_file / read_file, which need no sandbox",
        ),
    )


def bwrap_argv(
    command: str, *, workspace: Path, room: Path, network: bool, ledger_dir: str = ".runfold"
) -> list[str]:
    """The argv running `/bin/sh -c command` in a sandbox whose only writable place is `room`
    (both paths real, absolute; `room` inside `workspace`). Raises `E_GATE_DENIED` when bubblewrap
    cannot run here (`bwrap_problem`)."""
    problem = bwrap_problem()
    if problem is not None:
        raise sandbox_refused(problem, command)
    exe = shutil.which("bwrap") or "bwrap"
    ws, rm = str(workspace), str(room)
    argv = [exe, *_isolation(network=network)]
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    argv += ["--ro-bind", ws, ws, "--bind", rm, rm]  # the workspace again: it may lie under /tmp
    ledger = workspace / ledger_dir
    if ledger.is_dir() and not ledger.is_symlink():
        argv += ["--ro-bind", str(ledger), str(ledger)]  # never writable, even inside the room
    shared = hard_linked_files(room, ledger)
    if len(shared) > MAX_SHARED_FILES:
        raise sandbox_refused(
            f"the room holds {len(shared)} files with other hard links (at most {MAX_SHARED_FILES} "
            "can be made read-only)",
            command,
        )
    for path in shared:  # a name elsewhere shares the inode: the room may not change it
        argv += ["--ro-bind", path, path]
    argv += ["--setenv", "TMPDIR", "/tmp", "--chdir", rm, "/bin/sh", "-c", command]
    return argv


def hard_linked_files(room: Path, skip: Path | None = None) -> list[str]:
    """The regular files under `room` (symlinks not followed; the directory `skip` left out) with
    more than one hard link: their other names may lie outside the room, so the sandbox mounts
    them read-only."""
    found: list[str] = []
    for dirpath, dirs, files in os.walk(room, followlinks=False):
        if skip is not None:  # the ledger directory is read-only as a whole already
            dirs[:] = [d for d in dirs if os.path.join(dirpath, d) != str(skip)]
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                found.append(path)
    return found
