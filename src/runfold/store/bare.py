"""A ledger read without a workspace around it: a directory of segments or one segment file
(DESIGN.md §12 foreign ledgers). Every line is verified once with the store's `scan` and kept in
memory, behind the same `LedgerView` as the workspace `Ledger`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from runfold.core.canonical import Envelope, encode_line
from runfold.core.chain import LineChecker, parse_envelope
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.records import Record
from runfold.store.layout import RUNFOLD_DIR, list_segments, parse_segment_name
from runfold.store.verify import resolve_ledger, scan


def segment_first_seq(path: Path, default: int) -> int:
    """The first seq a segment file's name gives (`ledger-<20 digits>.jsonl`), else `default`."""
    first = parse_segment_name(path.name)
    return default if first is None else first


def is_bare_ledger(path: Path) -> bool:
    """True for a segment file, or a directory of segments that is not a workspace."""
    if path.is_file():
        return True
    return path.is_dir() and not (path / RUNFOLD_DIR).is_dir() and bool(list_segments(path))


class BareLedger:
    """A read-only `LedgerView` of a ledger directory or one segment file. Verified lines are
    canonical, so their bytes are `encode_line(env)`. A lone file that starts mid-chain is
    checked from its first line's seq and prev, as `verify_path` does (`first_seq` is then that
    seq, else 0); a torn tail is left out (and never cut). Raises `LineRefused` for damage."""

    def __init__(self, path: Path) -> None:
        segment_list, _lone = resolve_ledger(path)
        self._segments = [p for _, p in segment_list]
        checker = LineChecker()
        self.first_seq = 0
        if segment_list:
            with segment_list[0][1].open("rb") as f:
                first_line = f.readline().rstrip(b"\n")
            env = parse_envelope(first_line)
            if env is not None and env.seq != 0:
                checker = LineChecker(env.seq, env.prev)
                self.first_seq = env.seq
        self._records: list[Record] = []
        self._by_run: dict[str, list[Record]] = {}

        def sink(_seg: int, _off: int, _length: int, digest: str, env: Envelope) -> None:
            record = Record(env, encode_line(env, checked=True), digest)
            self._records.append(record)
            self._by_run.setdefault(env.run, []).append(record)

        result = scan(segment_list, checker, sink=sink)
        self._next_seq = result.next_seq
        self._head = result.head

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def head(self) -> str:
        return self._head

    def segments(self) -> list[Path]:
        return list(self._segments)

    def runs(self) -> list[str]:
        return [r for r in self._by_run if r != WORKSPACE_RUN]

    def records(self, since: int = 0) -> Iterator[Record]:
        return iter(self._records[max(since - self.first_seq, 0) :])

    def run_records(self, run: str, limit: int | None = None, since: int = 0) -> list[Record]:
        lines = self._by_run.get(run, [])
        return [r for r in lines if r.seq >= since][:limit] if since else list(lines[:limit])

    def record_at(self, seq: int) -> Record:
        return self._records[seq - self.first_seq]

    def close(self) -> None:
        return None
