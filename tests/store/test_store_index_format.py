"""The index's packed row format (`runfold.store.index_blocks`) on its own: the rows packed into
block BLOBs read back the same three ways the index reads them (unpacked whole, one row in place
from bytes, one row through a SQLite BLOB handle), and run lists round-trip; a BLOB of the wrong
size is refused as `IndexMismatch`."""

from __future__ import annotations

import sqlite3
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.store.index_blocks import (
    HASH_BYTES,
    ROW_BYTES,
    ZERO_PREV,
    Block,
    IndexMismatch,
    blob_entry,
    pack_blocks,
    pack_seqs,
    read_row,
    rows_claimed,
    unpack_seqs,
)

_row = st.tuples(
    st.integers(0, 1 << 40),  # segment (its first seq)
    st.integers(0, 1 << 40),  # offset
    st.integers(0, (1 << 32) - 1),  # length
    st.integers(1, (1 << 32) - 1),  # run id
    st.binary(min_size=HASH_BYTES, max_size=HASH_BYTES),
)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(_row, min_size=1, max_size=40),
    block_rows=st.integers(1, 9),
    base_block=st.integers(0, 1000),
    prev=st.binary(min_size=HASH_BYTES, max_size=HASH_BYTES) | st.just(ZERO_PREV),
)
def test_packed_blocks_read_back_every_row(
    rows: list[tuple[int, int, int, int, bytes]], block_rows: int, base_block: int, prev: bytes
) -> None:
    base = base_block * block_rows
    segs, offs, lens, rids, hashes = [], [], [], [], bytearray()
    for k, (seg, off, length, rid, digest) in enumerate(rows):
        segs.append(seg)
        offs.append(off - (base + k))  # the stored form: offset minus seq
        lens.append(length)
        rids.append(rid)
        hashes += digest
    blocks = pack_blocks(base, prev, segs, offs, lens, rids, hashes, block_rows)
    assert [first for first, _ in blocks] == list(range(base, base + len(rows), block_rows))
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE blocks (first_seq INTEGER PRIMARY KEY, rows BLOB NOT NULL)")
    db.executemany("INSERT INTO blocks VALUES (?, ?)", blocks)
    before = prev
    for first, blob in blocks:
        block = Block(first, blob)
        assert block.prev == before and rows_claimed(len(blob)) == block.n <= block_rows
        for i in range(block.n):
            seq = first + i
            seg, off, length, rid, digest = rows[seq - base]
            assert (block.segs[i], block.offs[i] + seq, block.lens[i], block.rids[i]) == (
                seg,
                off,
                length,
                rid,
            )
            entry = blob_entry(first, blob, block.n, i)
            assert (entry.seq, entry.seg, entry.off, entry.len) == (seq, seg, off, length)
            assert (entry.hash, entry.prev) == (digest.hex(), before.hex())
            with db.blobopen("blocks", "rows", first, readonly=True) as handle:
                assert read_row(handle, first, seq) == entry
            before = digest
        with db.blobopen("blocks", "rows", first, readonly=True) as handle:
            assert read_row(handle, first, first + block.n) is None


@given(st.lists(st.integers(0, (1 << 63) - 1), max_size=50))
def test_run_lists_round_trip(seqs: list[int]) -> None:
    out = array("q", [7])
    unpack_seqs(out, pack_seqs(seqs), "r1")
    assert out.tolist() == [7, *seqs]


@pytest.mark.parametrize("size", [0, HASH_BYTES, HASH_BYTES + ROW_BYTES - 1, HASH_BYTES + ROW_BYTES + 8])
def test_a_blob_of_the_wrong_size_is_refused(size: int) -> None:
    with pytest.raises(IndexMismatch, match="block at seq 64"):
        Block(64, bytes(size))
    with pytest.raises(IndexMismatch, match="run r1"):
        unpack_seqs(array("q"), bytes(12), "r1")
