"""The content store: immutable blobs addressed by their BLAKE3 hash (DESIGN.md §3 "Content store").

Large tool results, job files and request bodies live here and are named in the ledger by a
locator (`cas:b3-<hex64>[#L<a>-<b>|#B<a>-<b>]`). A put is atomic and durable (temp file, fsync,
rename, fsync dir); every get re-hashes what it read, so a damaged object is never returned.
"""

from __future__ import annotations

from pathlib import Path

from runfold.core.canonical import content_hash
from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.ids import is_hex64
from runfold.core.locator import CasLocator
from runfold.store.durable import fsync_dir, replace_durably
from runfold.store.layout import Layout


class Cas:
    """The CAS of workspace `ws` at `<ws>/.runfold/cas/b3/<2 hex>/<64 hex>`."""

    def __init__(self, ws: Path) -> None:
        self.layout = Layout(Path(ws).absolute())

    def path(self, digest: str) -> Path:
        """Where object `digest` lives. Raises `E_INVALID_ARGS` for anything but 64 lowercase hex."""
        if not is_hex64(digest):
            raise invalid_args(
                "name a CAS object",
                repr(digest),
                "give the 64 lowercase hex digits of a BLAKE3 hash (as in cas:b3-<hex>)",
            )
        return self.layout.cas_path(digest)

    def put(self, content: bytes) -> str:
        """Store `content` durably and return its BLAKE3 hash (64 hex). Idempotent: an intact
        object is left alone; a damaged one is replaced. Raises `E_STORAGE_FATAL` on I/O errors."""
        digest = content_hash(content)
        target = self.path(digest)
        if target.exists():
            try:
                if content_hash(target.read_bytes()) == digest:
                    return digest
            except OSError:
                pass
        shard = target.parent
        try:
            if not shard.is_dir():
                shard.mkdir(parents=True, exist_ok=True)
                fsync_dir(shard.parent)
            replace_durably(target, content, mode=0o444)
        except OSError as exc:
            raise RunfoldError(
                ErrorCode.STORAGE_FATAL,
                f"store a {len(content)}-byte object ({exc})",
                str(target),
                "free disk space or fix the permissions of .runfold/cas, then retry",
            ) from exc
        return digest

    def has(self, digest: str) -> bool:
        """True when an object file exists for `digest` (its bytes are checked only by `get`)."""
        return self.path(digest).is_file()

    def get(self, digest: str) -> bytes:
        """The object's bytes, re-verified against `digest`.

        Raises `E_PATH_NOT_FOUND` when it is missing, `E_LEDGER_CORRUPT` naming the file when
        its bytes no longer hash to `digest`.
        """
        target = self.path(digest)
        try:
            content = target.read_bytes()
        except FileNotFoundError:
            raise RunfoldError(
                ErrorCode.PATH_NOT_FOUND,
                f"read CAS object {digest[:16]}…",
                str(target),
                "restore .runfold/cas from a copy, or re-run the step that stored it",
            ) from None
        actual = content_hash(content)
        if actual != digest:
            raise RunfoldError(
                ErrorCode.LEDGER_CORRUPT,
                f"read CAS object {digest[:16]}… (its bytes hash to {actual[:16]}…)",
                str(target),
                "the object file was damaged; restore it from a copy (or put the original content again)",
            )
        return content

    def get_locator(self, locator: CasLocator) -> bytes:
        """The bytes a locator names: the whole object, a 1-based closed line range (lines keep
        their newline) or a 0-based closed byte range. Raises `E_INVALID_ARGS` naming the
        object's size when the range lies outside it, plus the errors of `get`."""
        content = self.get(locator.hash)
        if locator.unit == "B" and locator.end >= len(content):
            raise invalid_args(
                f"read bytes {locator.start}-{locator.end}",
                str(locator),
                f"the object has {len(content)} bytes: give a range within 0-{len(content) - 1}",
            )
        if locator.unit == "L":
            lines = len(content.splitlines())
            if locator.end > lines:
                raise invalid_args(
                    f"read lines {locator.start}-{locator.end}",
                    str(locator),
                    f"the object has {lines} lines: give a range within 1-{lines}",
                )
        return locator.slice(content)
