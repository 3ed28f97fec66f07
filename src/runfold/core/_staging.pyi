"""Type stub of the C extension `runfold.core._staging` (source `_staging.c`): the writer's
staging hot path (DESIGN.md §3). The Python twins in `runfold.core.canonical` (`encode_datas`)
and `runfold.store.ledger` (`Ledger.stage`) are the reference; see their docstrings."""

from collections.abc import Sequence
from typing import Any

MAX_DEPTH: int

def encode_payloads(datas: list[dict[str, Any]], /) -> list[bytes] | None:
    """Each payload's canonical bytes (orjson OPT_SORT_KEYS), or None as soon as a value leaves
    the fast subset: exact dict (str keys), list, tuple, str (no lone surrogate), int in
    I64_MIN..U64_MAX, bool, None; nesting at most MAX_DEPTH. TypeError when not a list."""

def stage_lines(
    drafts: Sequence[Any],
    datas: list[dict[str, Any]],
    encoded: list[bytes],
    seq: int,
    head: str,
    clock: int,
    version: int,
    runs_ok: set[str] | frozenset[str],
    addrs_ok: set[str] | frozenset[str],
    known: set[str] | frozenset[str],
    envelope_cls: type[tuple[Any, ...]],
    record_cls: type[tuple[Any, ...]],
    hasher: Any,
    /,
) -> list[Any] | None:
    """The chain loop of `Ledger.stage`: one Record per draft (seq from `seq`, prev from `head`,
    t None -> `clock`; chain hashes through `hasher`, a `blake3.blake3` in its reset state), or None when any draft fails a fast check (the caller's Python loop then
    checks and names it). Reads the caches, never changes them. Raises TypeError for malformed
    arguments and whatever a draft's attributes or the hasher raise (the hasher is reset even then)."""
