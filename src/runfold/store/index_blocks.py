"""The packed row format of the ledger index (DESIGN.md §3 "Index"): how the rows of up to
`BLOCK_ROWS` consecutive seqs become one SQLite BLOB and back, and how a run's seqs become one
`run_seqs` BLOB.

Kept apart from `runfold.store.index_file` (SQLite, flush policy) and `runfold.store.index` (open,
check, rebuild) because it is the one place that knows byte offsets inside a block: packing,
unpacking, and reading one row in place all follow the layout documented on `Block`.
"""

from __future__ import annotations

import sqlite3
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

BLOCK_ROWS = 64
"""Seqs per block row: block k covers seqs [k·64, (k+1)·64). 64 rows of 56 bytes plus a 32-byte
header (3,616 bytes) stay inside one SQLite page, so reading one line's row reads one page."""
HASH_BYTES = 32
"""Bytes of one BLAKE3-256 digest."""
ROW_BYTES = 8 + 8 + 4 + 4 + HASH_BYTES
"""Bytes of one row in a block: segment u64, offset u64, length u32, run id u32, hash."""
ZERO_PREV = bytes(HASH_BYTES)
"""The `prev` of seq 0 (32 zero bytes)."""

_I64 = struct.Struct("=q")
_U32 = struct.Struct("=I")
assert array("q").itemsize == 8 and array("I").itemsize == 4


class IndexMismatch(LookupError):
    """The index file contradicts itself (a seq its run list names is missing from its block, a
    BLOB of the wrong size, an unknown run id): it is damaged, or was reset by another process
    under this reader. `Ledger` rebuilds the index when a read raises it."""


@dataclass(frozen=True, slots=True)
class Entry:
    """Where a line is: its segment (by first seq), byte offset and length (no newline), its
    BLAKE3 (hex) and the BLAKE3 of the line before it (64 zeros for seq 0)."""

    seq: int
    seg: int
    off: int
    len: int
    hash: str
    prev: str


def rows_in(first: int, size: int) -> int:
    """How many rows a block BLOB of `size` bytes (starting at seq `first`) holds; raises
    `IndexMismatch` when the size is not 32 + 56·n with n ≥ 1."""
    n, rest = divmod(size - HASH_BYTES, ROW_BYTES)
    if rest or n < 1:
        raise IndexMismatch(f"block at seq {first} holds {size} bytes, not 32 + {ROW_BYTES}·n")
    return n


def rows_claimed(size: int) -> int:
    """How many rows a block BLOB of `size` bytes would hold, unchecked (rounded down)."""
    return (size - HASH_BYTES) // ROW_BYTES


class Block:
    """One block row unpacked into columns.

    BLOB layout for n rows (native byte order, recorded in the index's `meta`): the hash of the
    line before the block's first seq (32 bytes, zeros before seq 0), then n segments (u64), n
    offsets minus seqs (i64: offset = value + seq, so the lines of one write are one running sum
    of lengths), n lengths (u32), n run ids (u32), n hashes (32 bytes each).

    Raises `IndexMismatch` when the BLOB's size is not that of a whole number of rows."""

    __slots__ = ("first", "hashes", "lens", "n", "offs", "prev", "rids", "segs")

    def __init__(self, first: int, blob: bytes) -> None:
        n = rows_in(first, len(blob))
        self.first = first
        self.n = n
        self.prev = blob[:HASH_BYTES]
        a = HASH_BYTES
        self.segs = array("q", blob[a : a + 8 * n])
        a += 8 * n
        self.offs = array("q", blob[a : a + 8 * n])
        a += 8 * n
        self.lens = array("I", blob[a : a + 4 * n])
        a += 4 * n
        self.rids = array("I", blob[a : a + 4 * n])
        self.hashes = blob[a + 4 * n :]


def pack_blocks(
    base: int,
    prev: bytes,
    segs: Sequence[int],
    offs: Sequence[int],
    lens: Sequence[int],
    rids: Sequence[int],
    hashes: bytes | bytearray,
    block_rows: int,
) -> list[tuple[int, bytes]]:
    """The (first seq, BLOB) of every block holding the rows of seqs [base, base + len(lens)),
    cut every `block_rows` rows (the last one may be partial). `base` is a block's first seq,
    `prev` the 32-byte hash of seq base - 1, and the columns are in the stored form of `Block`
    (offsets minus seqs), `hashes` their 32-byte digests end to end."""
    held = len(lens)
    if not held:
        return []
    sb = array("q", segs).tobytes()
    ob = array("q", offs).tobytes()
    lb = array("I", lens).tobytes()
    rb = array("I", rids).tobytes()
    hb = bytes(hashes)
    blocks: list[tuple[int, bytes]] = []
    for i in range(0, held, block_rows):
        j = min(i + block_rows, held)
        blob = b"".join(
            (
                prev,
                sb[8 * i : 8 * j],
                ob[8 * i : 8 * j],
                lb[4 * i : 4 * j],
                rb[4 * i : 4 * j],
                hb[HASH_BYTES * i : HASH_BYTES * j],
            )
        )
        blocks.append((base + i, blob))
        prev = hb[HASH_BYTES * (j - 1) : HASH_BYTES * j]
    return blocks


def blob_entry(first: int, blob: bytes, n: int, i: int) -> Entry:
    """Row i of a block BLOB of n rows starting at seq `first` (see `Block`), read in place
    without unpacking the rest."""
    h = HASH_BYTES + 24 * n + HASH_BYTES * i
    return Entry(
        first + i,
        _I64.unpack_from(blob, HASH_BYTES + 8 * i)[0],
        _I64.unpack_from(blob, HASH_BYTES + 8 * n + 8 * i)[0] + first + i,
        _U32.unpack_from(blob, HASH_BYTES + 16 * n + 4 * i)[0],
        blob[h : h + HASH_BYTES].hex(),
        (blob[h - HASH_BYTES : h] if i else blob[:HASH_BYTES]).hex(),
    )


def read_row(blob: sqlite3.Blob, first: int, seq: int) -> Entry | None:
    """The row of `seq` read from an open SQLite BLOB handle on the block starting at seq
    `first`, a few bytes at a time (not the whole BLOB); None when the block ends before it.
    Raises `IndexMismatch` when the BLOB's size is wrong or it is cut short."""
    i = seq - first
    n = rows_in(first, len(blob))
    if i >= n:
        return None
    blob.seek(HASH_BYTES + 8 * i)
    seg = _I64.unpack(blob.read(8))[0]
    blob.seek(HASH_BYTES + 8 * n + 8 * i)
    off = _I64.unpack(blob.read(8))[0] + seq
    blob.seek(HASH_BYTES + 16 * n + 4 * i)
    length = _U32.unpack(blob.read(4))[0]
    h = HASH_BYTES + 24 * n + HASH_BYTES * i
    if i:
        blob.seek(h - HASH_BYTES)
        both = blob.read(2 * HASH_BYTES)
        prev, own = both[:HASH_BYTES], both[HASH_BYTES:]
    else:
        blob.seek(0)
        prev = blob.read(HASH_BYTES)
        blob.seek(h)
        own = blob.read(HASH_BYTES)
    if len(own) != HASH_BYTES:
        raise IndexMismatch(f"block at seq {first} is shorter than its row {i}")
    return Entry(seq, seg, off, length, own.hex(), prev.hex())


def pack_seqs(seqs: Sequence[int]) -> bytes:
    """A `run_seqs` BLOB: the seqs as native i64, in the order given (ascending)."""
    return array("q", seqs).tobytes()


def unpack_seqs(into: array[int], blob: bytes, run: str) -> None:
    """Append the seqs of a `run_seqs` BLOB of run `run` to `into` (an `array("q")`). Raises
    `IndexMismatch` when the BLOB is not a whole number of i64."""
    try:
        into.frombytes(blob)
    except ValueError:
        raise IndexMismatch(f"run {run}: a seq list of {len(blob)} bytes") from None


__all__ = [
    "BLOCK_ROWS",
    "HASH_BYTES",
    "ROW_BYTES",
    "ZERO_PREV",
    "Block",
    "Entry",
    "IndexMismatch",
    "blob_entry",
    "pack_blocks",
    "pack_seqs",
    "read_row",
    "rows_claimed",
    "rows_in",
    "unpack_seqs",
]
