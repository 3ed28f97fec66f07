"""A writer that appends forever, for the crash test (tests/store/test_store_crash.py).

Run as a fork server: it imports runfold once, then for each command line `<round> <ws> <seed>
[<segment bytes>]` on stdin forks a child that opens the workspace as the writer and appends batches of random
sizes in a loop. After each append returns (durable), the child writes
`ack <round> <seq>:<hash> ...` (every line of the batch) to stdout with one write. The test
kills the child with SIGKILL; the server then prints `dead <round> <pid>` and waits for the next
command. Acknowledgements of one child always precede its `dead` line on the pipe.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

from runfold.core.ids import run_id_v7
from runfold.core.records import Draft
from runfold.store.ledger import SEGMENT_BYTES, Ledger

LIFETIME_S = 20.0
"""A child that is never killed stops by itself, so a failed test leaves no process behind."""


def _child(rnd: int, ws: Path, seed: int, segment_bytes: int) -> None:
    rng = random.Random(seed)
    out = sys.stdout.fileno()
    os.write(out, f"pid {rnd} {os.getpid()}\n".encode())
    try:
        ledger = Ledger.open(ws, writer=True, segment_bytes=segment_bytes)
    except Exception as exc:  # reported to the test, which fails on it
        os.write(out, f"error {rnd} {exc!r}\n".replace("\n", " ").encode() + b"\n")
        os._exit(1)
    runs = [run_id_v7(1_700_000_000_000 + i, rng.randbytes(10)) for i in range(3)]
    deadline = time.monotonic() + LIFETIME_S
    n = 0
    while time.monotonic() < deadline:
        size = rng.choice((1, 1, 2, 3, 5, 8, 13, 40))
        drafts = [
            Draft(
                rng.choice(runs),
                "lab/room1",
                "steer_received",
                {"source": "user", "text": f"batch line {n + i} " + "x" * rng.randrange(0, 300)},
                addr="lab/room1" if rng.random() < 0.5 else None,
            )
            for i in range(size)
        ]
        records = ledger.append(drafts)
        n += size
        acks = " ".join(f"{r.seq}:{r.hash}" for r in records)
        os.write(out, f"ack {rnd} {acks}\n".encode())
    os._exit(0)


def main() -> None:
    for line in sys.stdin:
        rnd_s, ws_s, seed_s, *rest = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                _child(int(rnd_s), Path(ws_s), int(seed_s), int(rest[0]) if rest else SEGMENT_BYTES)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        sys.stdout.write(f"dead {rnd_s} {pid}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
