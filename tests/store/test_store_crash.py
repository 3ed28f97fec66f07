"""Crash safety with real kills (DESIGN.md §3 "Storage").

A writer process appends batches in a loop and is killed with SIGKILL at random moments, 200
times. After each kill the ledger opens as a writer and verifies; every batch whose append had
returned is there byte for byte; a torn tail (left by the kill, or written here as a partial
line, since a kill between write and fsync rarely tears a file on a healthy filesystem) is cut
with exactly one `log_truncated` whose `dropped_bytes` is the cut length; a whole line missing
only its newline is kept and the newline added.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from runfold.core.canonical import FORMAT_VERSION, Envelope, encode_line
from runfold.core.payloads import LogTruncated
from runfold.store.layout import Layout, list_segments
from runfold.store.ledger import Ledger
from runfold.store.verify import verify_path

WRITER = Path(__file__).with_name("crash_writer.py")
KILLS = 200
FRESH_EVERY = 25
"""A new workspace every 25 kills keeps each open's full verification short."""


def _ledger_bytes(ws: Path) -> int:
    return sum(p.stat().st_size for _, p in list_segments(Layout(ws).ledger_dir))


def _partial_line(ledger_ws: Path, rng: random.Random) -> bytes:
    """A prefix of the next line a writer would write: what a torn append leaves."""
    with Ledger.open(ledger_ws, writer=False) as r:
        env = Envelope(
            v=FORMAT_VERSION,
            run="0190f6a2-7c4a-7bbb-9d1e-000000000001",
            seq=r.next_seq,
            prev=r.head,
            t=1,
            who="runtime",
            kind="steer_received",
            data={"source": "user", "text": "y" * rng.randrange(0, 200)},
        )
    raw = encode_line(env)
    return raw[: rng.randrange(1, len(raw) + 1)]  # may be the whole line without its newline


def test_sigkill_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(20240601)
    server = subprocess.Popen(
        [sys.executable, str(WRITER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert server.stdin is not None and server.stdout is not None
    stats = {
        "acked_batches": 0,
        "injected_tails": 0,
        "natural_tails": 0,
        "killed_before_first_ack": 0,
        "waited_for_first_ack": 0,
    }
    ws = tmp_path
    try:
        for rnd in range(KILLS):
            if rnd % FRESH_EVERY == 0:
                ws = tmp_path / f"ws{rnd}"
                Ledger.create(ws).close()
            server.stdin.write(f"{rnd} {ws} {rng.randrange(1 << 32)}\n")
            server.stdin.flush()
            first = server.stdout.readline().split()
            assert first[:2] == ["pid", str(rnd)], first
            pid = int(first[2])
            # kill at a random moment: mostly inside the append loop (after a first ack, mid-batch
            # or between batches), sometimes while the child is still opening the ledger
            pending: list[str] = []
            if rng.random() < 0.8:
                pending.append(server.stdout.readline())
                stats["waited_for_first_ack"] += 1
                time.sleep(rng.uniform(0.0, 0.03))
            else:
                time.sleep(rng.uniform(0.0, 0.05))
            os.kill(pid, signal.SIGKILL)
            acked: list[tuple[int, str]] = []
            while True:
                line = pending.pop() if pending else server.stdout.readline()
                assert line, "the writer server died"
                word, _, rest = line.partition(" ")
                if word == "dead":
                    break
                assert word == "ack", f"writer failed: {line}"
                _, _, pairs = rest.partition(" ")
                stats["acked_batches"] += 1
                for pair in pairs.split():
                    seq, _, digest = pair.partition(":")
                    acked.append((int(seq), digest))
            if not acked:
                stats["killed_before_first_ack"] += 1

            injected = b""
            if rng.random() < 0.35:
                injected = _partial_line(ws, rng)
                with open(list_segments(Layout(ws).ledger_dir)[-1][1], "ab") as f:
                    f.write(injected)
                stats["injected_tails"] += 1
            before = _ledger_bytes(ws)

            with Ledger.open(ws, writer=True) as ledger:
                torn = ledger.torn_tail_bytes
                if ledger.newline_restored:  # a whole line was injected: kept, its "\n" added
                    assert torn == 0 and _ledger_bytes(ws) == before + 1
                    before += 1
                    injected = b""
                assert torn >= len(injected)
                if torn > len(injected):
                    stats["natural_tails"] += 1
                after = _ledger_bytes(ws)
                if torn:
                    last = ledger.record_at(ledger.next_seq - 1)
                    assert last.kind_name == "log_truncated"
                    assert last.typed(LogTruncated).dropped_bytes == torn
                    # exactly one line was added, in place of the torn bytes
                    assert after == before - torn + len(last.raw) + 1
                else:
                    assert after == before
                for seq, digest in acked:
                    assert ledger.record_at(seq).hash == digest
            report = verify_path(ws)
            assert report.torn_tail_bytes == 0
            assert report.last_seq is not None and report.lines == report.last_seq + 1
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    print(f"\ncrash test: {KILLS} kills, {stats}")
    assert stats["acked_batches"] >= stats["waited_for_first_ack"] > KILLS // 2
    assert stats["injected_tails"] > 30
