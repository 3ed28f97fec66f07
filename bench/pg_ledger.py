"""The ledger in PostgreSQL next to the file ledger, in one run: durable appends/s at batch 1, 10
and 100, verify MB/s, a migrate round trip (files → PostgreSQL → files) with identical heads, the
content store (CAS) as files or as a table, and, when its package is installed in a separate
venv, LangGraph's `PostgresSaver` storing the same turns.

    python bench/pg_ledger.py                    # a throwaway server; 100,000-line round trip
    python bench/pg_ledger.py --quick            # smaller counts (the smoke test's)
    python bench/pg_ledger.py --langgraph-python /tmp/lgpgvenv/bin/python
      (that venv: python3.11 -m venv /tmp/lgpgvenv && /tmp/lgpgvenv/bin/pip install
       langgraph-checkpoint-postgres==3.2.0 'psycopg[binary]==3.3.9' langgraph-checkpoint==4.3.2)

Both ledgers stage the same drafts with the one encoder; the file ledger's batch is one write and
one fdatasync, PostgreSQL's one transaction (lease and head check, the rows, a NOTIFY, COMMIT
with the server's WAL flush). Sides alternate batch by batch so both see the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _pg import Postgres
from ledger import draft
from runfold.api import Workspace
from runfold.store.backend import open_ledger, parse_store_url
from runfold.store.cas import Cas


def appends(root: Path, url: str, batch: int, batches: int) -> dict[str, float]:
    """Durable lines/s of the file ledger and the PostgreSQL ledger at `batch` lines per batch."""
    files, pg = root / f"files-{batch}", root / f"pg-{batch}"
    Workspace.init(files).close()
    Workspace.init(pg, f"{url}&workspace=appends-{batch}-{uuid.uuid4().hex[:6]}").close()
    spent = {"files": 0.0, "postgresql": 0.0}
    with open_ledger(files, writer=True) as fw, open_ledger(pg, writer=True) as pw:
        for b in range(batches):
            drafts = [draft(b * batch + i) for i in range(batch)]
            for name, w in (("files", fw), ("postgresql", pw)):
                t0 = time.perf_counter()
                w.append(drafts)
                spent[name] += time.perf_counter() - t0
    lines = batch * batches
    return {name: lines / s for name, s in spent.items()}


def build(ws: Path, lines: int, url: str | None = None) -> None:
    Workspace.init(ws, url).close()
    with open_ledger(ws, writer=True) as w:
        for start in range(0, lines - 1, 1000):
            w.append([draft(i) for i in range(start, min(start + 1000, lines - 1))])


def verify_and_migrate(root: Path, url: str, lines: int) -> dict[str, Any]:
    """Build a `lines`-line file ledger, migrate it into PostgreSQL and back, verify all three."""
    src = root / "src"
    build(src, lines)
    store = f"{url}&workspace=verify-{uuid.uuid4().hex[:6]}"
    t0 = time.perf_counter()
    to_pg = Workspace.open(src).migrate(to=store)
    to_pg_s = time.perf_counter() - t0
    Workspace.init(root / "pg", store).close()  # joins it
    t0 = time.perf_counter()
    back = Workspace.open(root / "pg").migrate(to_file=root / "back")
    back_s = time.perf_counter() - t0
    reports = {name: Workspace.open(root / name).verify() for name in ("src", "pg", "back")}
    same_bytes = all(
        a.read_bytes() == b.read_bytes()
        for a, b in zip(
            sorted((src / ".runfold" / "ledger").glob("ledger-*")),
            sorted((root / "back" / ".runfold" / "ledger").glob("ledger-*")),
            strict=True,
        )
    )
    heads = {name: r.head for name, r in reports.items()}
    return {
        "lines": lines,
        "bytes": reports["src"].bytes,
        "verify_mb_s": {name: r.mb_per_s for name, r in reports.items() if name != "back"},
        "to_pg_s": to_pg_s,
        "back_s": back_s,
        "heads_match": len(set(heads.values())) == 1 and to_pg.head == back.head == heads["src"],
        "bytes_identical": same_bytes,
        "head": heads["src"],
    }


def cas(root: Path, dsn: str, objects: int, size: int) -> dict[str, float]:
    """Objects/s put and got by the file CAS (temp file, fsync, rename, fsync dir; get
    re-hashes) and by a PostgreSQL table (one committed INSERT per object; get re-hashes)."""
    import blake3
    import psycopg

    blobs = [os.urandom(size) for _ in range(objects)]
    store = Cas(root / f"cas-{size}")
    (root / f"cas-{size}" / ".runfold" / "cas").mkdir(parents=True)
    t0 = time.perf_counter()
    digests = [store.put(b) for b in blobs]
    file_put = objects / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for d in digests:
        store.get(d)
    file_get = objects / (time.perf_counter() - t0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_cas (hash text PRIMARY KEY, data bytea NOT NULL)")
        t0 = time.perf_counter()
        for b in blobs:
            conn.execute(
                "INSERT INTO bench_cas VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (blake3.blake3(b).hexdigest(), b),
            )
        pg_put = objects / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for d in digests:
            (data,) = conn.execute("SELECT data FROM bench_cas WHERE hash = %s", (d,)).fetchone()
            assert blake3.blake3(data).hexdigest() == d
        pg_get = objects / (time.perf_counter() - t0)
        conn.execute("DROP TABLE bench_cas")
    return {"file_put": file_put, "file_get": file_get, "pg_put": pg_put, "pg_get": pg_get}


_LANGGRAPH = r"""
import json, sys, time
import psycopg
from psycopg.rows import dict_row
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.base import empty_checkpoint
dsn, turns = sys.argv[1], int(sys.argv[2])
conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
saver = PostgresSaver(conn)
saver.setup()
config = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
messages = []
t0 = time.perf_counter()
for i in range(turns):
    messages.append({"role": "tool", "tool_use_id": f"toolu_{i:08d}", "name": "read_file",
                     "content": f"line {i}: the quick brown fox jumps over the lazy dog"})
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": list(messages)}
    cp["channel_versions"] = {"messages": i + 1}
    config = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}}, {"messages": i + 1})
spent = time.perf_counter() - t0
print(json.dumps({"turns_per_s": turns / spent}))
"""


def langgraph(python: str, dsn: str, turns: int) -> dict[str, float] | str:
    """Turns/s of LangGraph's `PostgresSaver.put` storing one checkpoint per turn (the thread's
    messages so far, as its agent graph does), run by `python` (a venv with the package)."""
    done = subprocess.run(
        [python, "-c", _LANGGRAPH, dsn, str(turns)], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small counts (seconds, not minutes)")
    parser.add_argument("--dsn", help="a server to use (default: a throwaway one)")
    parser.add_argument("--langgraph-python", help="python of a venv with langgraph-checkpoint-postgres")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    server = None if args.dsn else Postgres()
    dsn = args.dsn or server.dsn  # type: ignore[union-attr]
    root = Path(tempfile.mkdtemp(prefix="runfold-pg-bench-"))
    lines = 2_000 if args.quick else 100_000
    out: dict[str, Any] = {"server": f"PostgreSQL {server.version}" if server else dsn, "appends": {}}
    try:
        url = parse_store_url(dsn).conninfo
        for batch, batches in (
            (1, 50 if args.quick else 400),
            (10, 20 if args.quick else 200),
            (100, 5 if args.quick else 60),
        ):
            out["appends"][batch] = appends(root, url, batch, batches)
        out["verify"] = verify_and_migrate(root, url, lines)
        out["cas"] = {size: cas(root, dsn, 20 if args.quick else 300, size) for size in (4096, 1 << 20)}
        if args.langgraph_python:
            out["langgraph"] = langgraph(args.langgraph_python, dsn, 50 if args.quick else 400)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(out))
        return
    report(out)
    ok = out["verify"]["heads_match"] and out["verify"]["bytes_identical"]
    sys.exit(0 if ok else 1)


def report(out: dict[str, Any]) -> None:
    print(f"runfold ledger: files vs {out['server']} (unix socket, fsync on)")
    print("\n(a) durable appends, lines/s")
    print(f"{'batch':>6} {'files':>10} {'postgresql':>11} {'pg/files':>9}")
    for batch, r in out["appends"].items():
        print(
            f"{batch:>6} {r['files']:>10.0f} {r['postgresql']:>11.0f} {r['postgresql'] / r['files']:>8.2f}x"
        )
    lg = out.get("langgraph")
    if isinstance(lg, dict):
        print(
            f"  LangGraph PostgresSaver, one checkpoint per turn: {lg['turns_per_s']:.0f} turns/s "
            f"(runfold on PostgreSQL at batch 1: {out['appends'][1]['postgresql']:.0f} lines/s)"
        )
    elif lg is not None:
        print(f"  LangGraph PostgresSaver: {lg}")
    else:
        print("  LangGraph PostgresSaver: not measured (pass --langgraph-python, see --help)")
    v = out["verify"]
    mb = v["verify_mb_s"]
    print(f"\n(b) verify a {v['lines']:,}-line ledger ({v['bytes'] / 1e6:.1f} MB)")
    print(
        f"  files {mb['src']:.1f} MB/s, postgresql (server-side cursor) {mb['pg']:.1f} MB/s, "
        f"ratio {mb['pg'] / mb['src']:.2f}x"
    )
    print(
        f"\n(c) migrate round trip: files -> postgresql {v['to_pg_s']:.2f} s, postgresql -> files {v['back_s']:.2f} s"
    )
    print(
        f"  heads match: {v['heads_match']}; segment bytes identical: {v['bytes_identical']}; head {v['head'][:16]}…"
    )
    print("\n(d) content store, objects/s (put durable; get re-hashes)")
    print(f"{'size':>8} {'file put':>9} {'file get':>9} {'table put':>10} {'table get':>10}")
    for size, c in out["cas"].items():
        print(
            f"{int(size):>8} {c['file_put']:>9.0f} {c['file_get']:>9.0f} {c['pg_put']:>10.0f} {c['pg_get']:>10.0f}"
        )


if __name__ == "__main__":
    main()
