"""Micro-benchmark of the ledger index's writer path: µs per row of
`LedgerIndex.add_lines` and of its flushes, as `Ledger.flush` drives them.

Batches of 100 rows over 100 runs, 41 batches between flushes; the flush between rounds is the
automatic one (`flush(full=False)`: blocks every round, run lists every RUN_FLUSH_ROWS rows) and
the close-time full flush is counted too. Usage: python bench/index.py [--rounds N].
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from runfold.store.index_file import INDEX_FILE, LedgerIndex


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    runs = [f"0190f6a2-7c4a-7bbb-9d1e-{i:012x}" for i in range(100)]
    digest = "ab" * 32
    with tempfile.TemporaryDirectory() as d:
        idx = LedgerIndex(Path(d) / INDEX_FILE)
        idx.autoflush = False
        seq = 0
        add_s = flush_s = 0.0
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for _ in range(41):
                idx.add_lines(seq, 0, seq * 371, [(370, digest, runs[(seq + k) % 100]) for k in range(100)])
                seq += 100
            t1 = time.perf_counter()
            idx.flush(full=False)
            flush_s += time.perf_counter() - t1
            add_s += t1 - t0
        t0 = time.perf_counter()
        idx.close()
        flush_s += time.perf_counter() - t0
    print(
        f"{seq:,} rows: add {add_s / seq * 1e6:.2f} µs/row, flush {flush_s / seq * 1e6:.2f} µs/row, "
        f"total {(add_s + flush_s) / seq * 1e6:.2f} µs/row"
    )


if __name__ == "__main__":
    main()
