"""The disposable index and the CAS (DESIGN.md §3 "Index", "Content store")."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.locator import CasLocator, parse_locator
from runfold.core.records import Draft
from runfold.store.cas import Cas
from runfold.store.index_file import FLUSH_ROWS
from runfold.store.layout import Layout
from runfold.store.ledger import Ledger

RUNS = [f"0190f6a2-7c4a-7bbb-9d1e-{i:012x}" for i in range(7)]


def build(ws: Path, batches: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    with Ledger.create(ws, segment_bytes=20_000) as w:
        for b in range(batches):
            w.append(
                [
                    Draft(
                        rng.choice(RUNS),
                        "lab/room1",
                        "steer_received",
                        {"source": "user", "text": f"{b}.{i}"},
                    )
                    for i in range(rng.randrange(1, 30))
                ]
            )


def scan_filter(ws: Path, run: str) -> list[bytes]:
    with Ledger.open(ws, writer=False) as r:
        return [rec.raw for rec in r.records() if rec.run == run]


def test_run_records_equal_a_full_scan_filter(tmp_path: Path) -> None:
    build(tmp_path, 400)
    with Ledger.open(tmp_path, writer=False) as r:
        assert r.next_seq > FLUSH_ROWS  # some rows were flushed, some were pending at close
        assert len(r.segments()) > 3
        assert r.runs() == sorted(set(r.runs()), key=r.runs().index)
        for run in RUNS:
            assert [x.raw for x in r.run_records(run)] == scan_filter(tmp_path, run)
        for seq in (0, 1, r.next_seq // 2, r.next_seq - 1):
            assert r.record_at(seq).seq == seq


def test_index_rebuilt_when_deleted_or_stale(tmp_path: Path) -> None:
    build(tmp_path, 60)
    index_dir = Layout(tmp_path).index_dir
    expected = {run: scan_filter(tmp_path, run) for run in RUNS}
    shutil.rmtree(index_dir)  # deleted: readers rebuild (and persist when nobody writes)
    with Ledger.open(tmp_path, writer=False) as r:
        assert {run: [x.raw for x in r.run_records(run)] for run in RUNS} == expected
    assert (index_dir / "index.sqlite").exists()
    # stale: the ledger grew while the index did not learn it (an old copy of the index)
    saved = tmp_path / "saved-index"
    shutil.copytree(index_dir, saved)
    with Ledger.open(tmp_path, writer=True) as w:
        (extra,) = w.append(
            [Draft(RUNS[0], "lab/room1", "steer_received", {"source": "user", "text": "late"})]
        )
    shutil.rmtree(index_dir)
    shutil.copytree(saved, index_dir)
    with Ledger.open(tmp_path, writer=False) as r:
        assert r.run_records(RUNS[0])[-1].raw == extra.raw and r.next_seq == extra.seq + 1
    # stale the other way: an index of a different ledger is detected and rebuilt
    other = tmp_path / "other"
    build(other, 30, seed=99)
    shutil.rmtree(index_dir)
    shutil.copytree(Layout(other).index_dir, index_dir)
    with Ledger.open(tmp_path, writer=False) as r:
        assert [x.raw for x in r.run_records(RUNS[1])] == scan_filter(tmp_path, RUNS[1])
    with Ledger.open(tmp_path, writer=True) as w:
        assert [x.raw for x in w.run_records(RUNS[1])] == scan_filter(tmp_path, RUNS[1])


def test_reads_through_the_index_are_verified(tmp_path: Path) -> None:
    build(tmp_path, 20)
    Ledger.open(tmp_path, writer=False).close()  # index persisted
    seg = sorted(Layout(tmp_path).ledger_dir.glob("ledger-*.jsonl"))[0]
    data = seg.read_bytes()
    # change one line in the middle without changing its length: its hash no longer matches
    i = data.index(b'"text":"3.') + len(b'"text":"')
    seg.write_bytes(data[:i] + b"9" + data[i + 1 :])
    with Ledger.open(tmp_path, writer=False) as r, pytest.raises(RunfoldError) as err:
        for run in RUNS:
            r.run_records(run)
    assert err.value.code is ErrorCode.LEDGER_CORRUPT


def test_cas_put_get_ranges_and_damage(tmp_path: Path) -> None:
    Ledger.create(tmp_path).close()
    cas = Cas(tmp_path)
    content = b"line one\nline two\nline three\n"
    digest = cas.put(content)
    assert cas.put(content) == digest  # idempotent
    path = Layout(tmp_path).cas_path(digest)
    assert path.parent.name == digest[:2] and path.read_bytes() == content
    assert cas.has(digest) and cas.get(digest) == content
    assert not list(
        path.parent.glob(".*.tmp-*")
    )  # no temporary file (store.durable names them .<name>.tmp-<pid>-<hex>)
    loc = parse_locator(f"cas:b3-{digest}#L2-3")
    assert isinstance(loc, CasLocator)
    assert cas.get_locator(loc) == b"line two\nline three\n"
    assert cas.get_locator(CasLocator(digest, "B", 5, 7)) == b"one"
    assert cas.get_locator(CasLocator(digest)) == content
    with pytest.raises(RunfoldError) as err:
        cas.get_locator(CasLocator(digest, "L", 2, 9))
    assert err.value.code is ErrorCode.INVALID_ARGS and "3 lines" in err.value.recovery
    with pytest.raises(RunfoldError):
        cas.get_locator(CasLocator(digest, "B", 0, len(content)))
    # damage is detected on read, and a put of the original content repairs it
    path.chmod(0o644)
    path.write_bytes(b"line one\nline 2\n")
    with pytest.raises(RunfoldError) as err2:
        cas.get(digest)
    assert err2.value.code is ErrorCode.LEDGER_CORRUPT and str(path) in err2.value.subject
    assert cas.put(content) == digest and cas.get(digest) == content
    missing = "0" * 64
    assert not cas.has(missing)
    with pytest.raises(RunfoldError) as err3:
        cas.get(missing)
    assert err3.value.code is ErrorCode.PATH_NOT_FOUND
    with pytest.raises(RunfoldError) as err4:
        cas.get("ABC")
    assert err4.value.code is ErrorCode.INVALID_ARGS
