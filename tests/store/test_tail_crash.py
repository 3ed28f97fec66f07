"""No false "the ledger lost its tail" alarm, with real kills (DESIGN.md §3 "Marks outside the
ledger"): a writer appending batches into small segments (so kills land around roll-overs too)
is killed with SIGKILL at random moments; after each kill the head mark names a line the ledger
holds, verify passes, and the next writer opens, so no crash window (after a write and before
its fsync, after the fsync and before the mark, mid roll-over) makes a healthy ledger look cut.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from runfold.store.layout import Layout
from runfold.store.ledger import Ledger
from runfold.store.marks import read_head_mark
from runfold.store.verify import verify_path

WRITER = Path(__file__).with_name("crash_writer.py")
KILLS = 60
SEGMENT_BYTES = 1500
"""A few batches per segment: many kills land next to a roll-over."""


def test_kills_at_random_moments_never_raise_a_lost_tail_alarm(tmp_path: Path) -> None:
    rng = random.Random(20261202)
    server = subprocess.Popen(
        [sys.executable, str(WRITER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert server.stdin is not None and server.stdout is not None
    ws = tmp_path / "ws"
    Ledger.create(ws, segment_bytes=SEGMENT_BYTES).close()
    layout = Layout(ws)
    acked: dict[int, str] = {}
    marks_behind_acks = 0
    try:
        for rnd in range(KILLS):
            if rnd == KILLS // 2:  # half the rounds start from a fresh workspace (short opens)
                ws = tmp_path / "ws2"
                Ledger.create(ws, segment_bytes=SEGMENT_BYTES).close()
                layout = Layout(ws)
                acked = {}
            server.stdin.write(f"{rnd} {ws} {rng.randrange(1 << 32)} {SEGMENT_BYTES}\n")
            server.stdin.flush()
            first = server.stdout.readline().split()
            assert first[:2] == ["pid", str(rnd)], first
            time.sleep(rng.uniform(0.0, 0.15))
            os.kill(int(first[2]), signal.SIGKILL)
            while True:
                line = server.stdout.readline()
                assert line, "the writer server died"
                word, _, rest = line.partition(" ")
                if word == "dead":
                    break
                assert word == "ack", f"writer failed: {line}"
                for pair in rest.partition(" ")[2].split():
                    seq, _, digest = pair.partition(":")
                    acked[int(seq)] = digest
            mark = read_head_mark(layout)
            report = verify_path(ws)  # raises on a false alarm
            assert mark is not None
            assert mark.seq <= report.last_seq if report.last_seq is not None else False
            if acked and mark.seq < max(acked):
                marks_behind_acks += 1  # cannot happen: the mark is written before the ack
            with Ledger.open(ws, writer=True, segment_bytes=SEGMENT_BYTES) as w:  # raises on a false alarm
                for seq, digest in acked.items():
                    assert w.record_at(seq).hash == digest
                assert w.next_seq == report.lines + (1 if w.torn_tail_bytes else 0)
            after = read_head_mark(layout)
            assert after is not None and after.seq >= mark.seq  # never moved back
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    assert marks_behind_acks == 0
    assert len(list(layout.ledger_dir.glob("ledger-*.jsonl"))) > 3  # kills landed across roll-overs
