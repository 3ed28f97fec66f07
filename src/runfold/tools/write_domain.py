"""How a writing tool puts bytes on disk without leaving its room, even against a racing process
(DESIGN.md §9).

`ToolContext.resolve_write` refuses a path by its spelling and where it resolves (absolute, `..`,
`.runfold`, a symlink or hard link leading out); the write itself then walks the resolved path
from the room's directory one component at a time with `O_NOFOLLOW`, so a symlink planted after
the check is refused, never followed; the file is replaced through a temporary file and a rename
in the same directory, so a crash leaves the old or the new content, never a mix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from runfold.core.errors import RunfoldError, invalid_args
from runfold.tools.context import ToolContext

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def write_in_room(ctx: ToolContext, real: Path, data: bytes, action: str, path: str) -> None:
    """Replace the file `real` (as `ctx.resolve_write(path)` returned it) with `data`; missing
    directories are created; an existing file keeps its mode.

    Raises `E_OUTSIDE_WRITE_DOMAIN` (a Gate) when a component became a symlink or the file a hard
    link since the check, `E_INVALID_ARGS` when a parent is a file or the directory is not
    writable; nothing is changed then. Other OS errors propagate."""
    try:
        _write(ctx, real, data, action, path)
    except (NotADirectoryError, FileExistsError, IsADirectoryError, PermissionError) as exc:
        raise invalid_args(
            action,
            repr(path),
            f"the file cannot be written there ({exc.strerror}); choose another path inside the room",
        ) from None
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise invalid_args(
                action, repr(path), "this place is read-only; choose another path inside the room"
            ) from None
        raise


def _open_dir(name: str, dirfd: int, ctx: ToolContext, action: str, path: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
            os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode
        ):
            raise _raced(
                ctx, path, action, f"`{name}` became a symlink while the write was checked"
            ) from None
        raise


def _raced(ctx: ToolContext, path: str, action: str, violation: str) -> RunfoldError:
    return ctx.refuse_write(path, violation, action)


def _write(ctx: ToolContext, real: Path, data: bytes, action: str, path: str) -> None:
    ctx.ensure_room()
    parts = real.relative_to(ctx.real_room).parts
    dirfd = os.open(ctx.real_room, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            try:
                nfd = _open_dir(name, dirfd, ctx, action, path)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=dirfd)
                nfd = _open_dir(name, dirfd, ctx, action, path)
            os.close(dirfd)
            dirfd = nfd
        name = parts[-1]
        mode = 0
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISLNK(st.st_mode):
                raise _raced(ctx, path, action, f"`{path}` became a symlink while the write was checked")
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                raise _raced(ctx, path, action, f"`{path}` became a hard link while the write was checked")
            mode = stat.S_IMODE(st.st_mode)
        tmp = f".{name}.runfold-tmp-{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=dirfd)
        try:
            try:
                view, done = memoryview(data), 0
                while done < len(data):
                    done += os.write(fd, view[done:])
                if st is not None:
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dirfd)
            raise
    finally:
        os.close(dirfd)
