"""Where a workspace keeps its files on disk (DESIGN.md §3 "Storage").

Every path under `<ws>/.runfold/` is named here and nowhere else, so that the ledger, the index,
the CAS and the CLI agree on one layout; `find_workspace` locates a workspace the way git finds
its repository.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from runfold.core.errors import ErrorCode, RunfoldError

RUNFOLD_DIR = ".runfold"
"""The directory that marks a workspace."""
ENV_WORKSPACE = "RUNFOLD_WORKSPACE"
"""Environment variable naming the workspace when no explicit path is given."""
SEQ_DIGITS = 20
"""Width of the zero-padded first seq in a segment's file name."""

_SEGMENT = re.compile(r"^ledger-(\d{20})\.jsonl$")


def segment_name(first_seq: int) -> str:
    """`ledger-<first seq, 20 digits>.jsonl`."""
    return f"ledger-{first_seq:0{SEQ_DIGITS}d}.jsonl"


def parse_segment_name(name: str) -> int | None:
    """The first seq encoded in a segment file name, or None when `name` is not a segment."""
    m = _SEGMENT.match(name)
    return int(m.group(1)) if m else None


def list_segments(ledger_dir: Path) -> list[tuple[int, Path]]:
    """The segments of a ledger directory as (first seq, path), ordered by first seq.

    Files that are not named like a segment are ignored. A missing directory gives []. Raises
    `E_STORAGE_FATAL` naming the path when a segment is not a regular file (a FIFO, a device such
    as `/dev/zero` behind a symlink, a socket): reading one could block or never end.
    """
    try:
        names = os.listdir(ledger_dir)
    except FileNotFoundError:
        return []
    found = [(seq, ledger_dir / n) for n in names if (seq := parse_segment_name(n)) is not None]
    found.sort()
    for _, path in found:
        _refuse_special(path)
    return found


def _refuse_special(path: Path) -> None:
    """Raise `E_STORAGE_FATAL` when `path` (followed through symlinks) exists and is neither a
    regular file nor a directory (a directory is refused where it is opened, naming it)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # gone or unreadable: the open that follows names the fault
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    what = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
    raise RunfoldError(
        ErrorCode.STORAGE_FATAL,
        f"read the ledger segment ({what})",
        str(path),
        "a segment must be a regular file: move this one aside and restore the segment from a copy "
        "of the ledger directory; nothing was read or changed",
    )


@dataclass(frozen=True)
class Layout:
    """The paths of one workspace `ws` (the directory that holds `.runfold/`)."""

    ws: Path

    @property
    def root(self) -> Path:
        """`<ws>/.runfold`."""
        return self.ws / RUNFOLD_DIR

    @property
    def ledger_dir(self) -> Path:
        """`<ws>/.runfold/ledger`: the segment files."""
        return self.root / "ledger"

    @property
    def lock_path(self) -> Path:
        """`<ws>/.runfold/ledger.lock`: the one-writer lock; the holder writes its pid in it."""
        return self.root / "ledger.lock"

    @property
    def cas_dir(self) -> Path:
        """`<ws>/.runfold/cas/b3`: content objects by BLAKE3 hash."""
        return self.root / "cas" / "b3"

    @property
    def index_dir(self) -> Path:
        """`<ws>/.runfold/index`: the disposable index (safe to delete)."""
        return self.root / "index"

    @property
    def control_dir(self) -> Path:
        """`<ws>/.runfold/control`: steer/cancel requests from other processes (`inbox/`), the
        owner's answers (`acks/`) and `owner.lock`, held by the process running the runs."""
        return self.root / "control"

    @property
    def head_mark_path(self) -> Path:
        """`<ws>/.runfold/head-mark.json`: seq and hash of the newest durable line, written by the
        writer after each batch (`runfold.store.marks`)."""
        return self.root / "head-mark.json"

    @property
    def resume_mark_path(self) -> Path:
        """`<ws>/.runfold/resume-mark.json`: the clean point resume recorded (seq and hash)."""
        return self.root / "resume-mark.json"

    @property
    def quarantine_dir(self) -> Path:
        """`<ws>/.runfold/quarantine`: bytes `runfold repair --quarantine` moved out of a segment."""
        return self.root / "quarantine"

    @property
    def config_path(self) -> Path:
        """`<ws>/.runfold/config.toml`."""
        return self.root / "config.toml"

    def segment_path(self, first_seq: int) -> Path:
        """The path of the segment whose first line has seq `first_seq`."""
        return self.ledger_dir / segment_name(first_seq)

    def cas_path(self, digest: str) -> Path:
        """`cas/b3/<2 hex>/<64 hex>` for a 64-hex BLAKE3 digest."""
        return self.cas_dir / digest[:2] / digest


def _not_found(subject: str, why: str) -> RunfoldError:
    return RunfoldError(
        ErrorCode.PATH_NOT_FOUND,
        f"find a workspace ({why})",
        subject,
        "run `runfold init` to create one, or pass --workspace DIR (or set RUNFOLD_WORKSPACE)",
    )


def _as_workspace(path: Path) -> Path | None:
    """`path` as a workspace dir when it is one or is its `.runfold` dir, else None."""
    if path.name == RUNFOLD_DIR and path.is_dir():
        return path.parent
    if (path / RUNFOLD_DIR).is_dir():
        return path
    return None


def find_workspace(start: Path | None = None) -> Path:
    """The workspace directory (the one that holds `.runfold/`), absolute.

    Order: `start` when given (a workspace or its `.runfold` dir; not searched upward), else the
    environment variable RUNFOLD_WORKSPACE, else the nearest ancestor of the current directory
    (itself included) that holds `.runfold/`, as git finds a repository.
    Raises `E_PATH_NOT_FOUND` naming where it looked when there is none.
    """
    if start is not None:
        found = _as_workspace(Path(start).absolute())
        if found is None:
            raise _not_found(str(start), "no .runfold/ directory there")
        return found
    env = os.environ.get(ENV_WORKSPACE)
    if env:
        found = _as_workspace(Path(env).absolute())
        if found is None:
            raise _not_found(env, f"{ENV_WORKSPACE} points at a directory without .runfold/")
        return found
    cwd = Path.cwd().absolute()
    for candidate in (cwd, *cwd.parents):
        if (candidate / RUNFOLD_DIR).is_dir():
            return candidate
    raise _not_found(str(cwd), "no .runfold/ in this directory or any parent")
