"""Hand-damaged index files: a run list that lost a seq or a row, an
index path blocked by a directory or a file, random bytes over the SQLite file. Readers must
still answer exactly the ledger's lines (rebuilding the index); a writer that cannot open the
index refuses with a clear error and writes nothing.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from array import array
from pathlib import Path

import pytest
from test_store_index_blocks import RUN_IDS, build, by_scan, index_db

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.store.index_file import INDEX_FILE
from runfold.store.layout import Layout
from runfold.store.ledger import Ledger

RUNFOLD = [sys.executable, "-m", "runfold"]


def _lose(ws: Path, what: str) -> str:
    """Take one seq (or one whole row) out of the run lists of a real run; returns that run."""
    db = index_db(ws)
    rid, uuid = db.execute("SELECT id, uuid FROM runs WHERE uuid = ?", (RUN_IDS[1],)).fetchone()
    first, blob = db.execute(
        "SELECT first_seq, seqs FROM run_seqs WHERE run = ? ORDER BY first_seq DESC LIMIT 1", (rid,)
    ).fetchone()
    if what == "seq":
        seqs = array("q", blob)
        del seqs[len(seqs) // 2]
        db.execute(
            "UPDATE run_seqs SET seqs = ? WHERE run = ? AND first_seq = ?", (seqs.tobytes(), rid, first)
        )
    else:
        db.execute("DELETE FROM run_seqs WHERE run = ? AND first_seq = ?", (rid, first))
    db.close()
    return str(uuid)


@pytest.mark.parametrize("what", ["seq", "row"])
def test_a_run_list_that_lost_a_seq_is_caught_not_answered_short(tmp_path: Path, what: str) -> None:
    build(tmp_path, 400)
    expected = by_scan(tmp_path)
    run = _lose(tmp_path, what)
    with Ledger.open(tmp_path, writer=False) as r:
        assert [x.raw for x in r.run_records(run)] == expected[run]
    run = _lose(tmp_path, what)  # the rebuilt index was saved: damage it again, read by CLI
    out = subprocess.run(
        [*RUNFOLD, "log", "-w", str(tmp_path), "--run", run, "--json"], capture_output=True, check=True
    ).stdout
    assert out.splitlines() == expected[run]
    run = _lose(tmp_path, what)  # and a writer reads exactly too
    with Ledger.open(tmp_path, writer=True) as w:
        assert [x.raw for x in w.run_records(run)] == expected[run]


@pytest.mark.parametrize("blocked", ["index file", "wal file", "lock file", "index directory"])
# (a reader meeting a file where the index directory belongs is E_STORAGE_FATAL, exit 3: see
# tests/cli/test_environment_errors.py)
def test_an_index_path_blocked_by_a_directory_or_file(tmp_path: Path, blocked: str) -> None:
    ws = tmp_path / "ws"
    build(ws, 200)
    expected = by_scan(ws)
    before = [p.read_bytes() for p in Layout(ws).ledger_dir.iterdir()]
    d = Layout(ws).index_dir
    if blocked == "index directory":
        shutil.rmtree(d)
        d.write_text("not a directory\n")
    else:
        path = d / {"index file": INDEX_FILE, "wal file": f"{INDEX_FILE}-wal", "lock file": "lock"}[blocked]
        path.unlink(missing_ok=True)
        path.mkdir()
    if blocked != "index directory":
        with Ledger.open(ws, writer=False) as r:
            assert {run: [x.raw for x in r.run_records(run)] for run in expected} == expected
        out = subprocess.run(
            [*RUNFOLD, "log", "-w", str(ws), "--run", RUN_IDS[2], "--json"], capture_output=True, check=True
        ).stdout
        assert out.splitlines() == expected[RUN_IDS[2]]
    with pytest.raises(RunfoldError) as err:
        Ledger.open(ws, writer=True)
    assert err.value.code is ErrorCode.STORAGE_FATAL and err.value.subject == str(d)
    assert "index is disposable" in err.value.recovery
    assert [p.read_bytes() for p in Layout(ws).ledger_dir.iterdir()] == before


GARBAGE_TRIALS = [5, *range(100, 110)]
"""Seeds of garbage patterns (5 and 105 made readers fail with SQLite's "database disk image is
malformed" before reads fell back to a rebuild); a bounded count keeps the default suite short."""


@pytest.mark.parametrize("seed", GARBAGE_TRIALS)
def test_garbage_over_the_index_file_never_gives_a_wrong_line(
    tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    base = tmp_path_factory.getbasetemp() / "garbage-base"
    if not base.exists():
        build(base, 5000)
        Ledger.open(base, writer=False).close()
    expected = by_scan(base)
    ws = tmp_path_factory.mktemp("ws")
    shutil.rmtree(ws)
    shutil.copytree(base, ws)
    path = Layout(ws).index_dir / INDEX_FILE
    size = path.stat().st_size
    rng = random.Random(seed)
    with open(path, "r+b") as f:  # random bytes over random places, mostly past the first page
        for _ in range(rng.choice([1, 4, 50])):
            f.seek(rng.randrange(16384, size) if rng.random() < 0.8 else rng.randrange(0, size))
            f.write(rng.randbytes(rng.choice([1, 8, 300])))
    every = [raw for lines in expected.values() for raw in lines]
    with Ledger.open(ws, writer=False) as r:
        assert {run: [x.raw for x in r.run_records(run)] for run in expected} == expected
        for s in rng.sample(range(r.next_seq), 20):
            assert r.record_at(s).seq == s and r.record_at(s).raw in every
        since = rng.randrange(r.next_seq)
        assert [x.seq for x in r.records(since)] == list(range(since, r.next_seq))
    with Ledger.open(ws, writer=True) as w:
        assert {run: [x.raw for x in w.run_records(run)] for run in expected} == expected
