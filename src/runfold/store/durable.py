"""Durable file replacement for the store's small files (CAS objects, control requests and
answers): the one place that writes a file so that after a crash it is either absent, or whole
under its final name.

Written once because every such writer needs the same four steps in the same order (DESIGN.md §3
"Storage": durability before anything depends on a file).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """fsync the directory `path`, making the names created, renamed or removed in it durable.
    Raises OSError."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(target: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` (bytes) as `target`: a fresh temporary file `.<name>.tmp-<pid>-<hex>` in the
    same directory is written whole, fsynced, renamed over `target`, then the directory is
    fsynced. The directory must exist. On failure the temporary file is removed and the OSError
    propagates; `target` is then either its old self or absent, never partial."""
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{os.urandom(6).hex()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
