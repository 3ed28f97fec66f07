"""A run's lineage: for a fork, its mother's lines through the fork's cut (recursively through
`run_forked`), then its own (DESIGN.md §7); plus the payload memo every fold shares and the one
error for a line whose payload does not fit its place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.kinds import Kind
from runfold.core.payloads import (
    Payload,
    RunForked,
)
from runfold.core.records import Record

P = TypeVar("P", bound=Payload)


_PAYLOAD_CACHE: dict[str, Payload] = {}
_PAYLOAD_CACHE_MAX = 1 << 16


def typed(rec: Record, cls: type[P]) -> P:
    """`rec.typed(cls)`, memoized by the line's chain hash (a line's payload is a pure function of
    its bytes; folds at every seq of a run re-read the same lines). Raises like `Record.typed`."""
    hit = _PAYLOAD_CACHE.get(rec.hash)
    if isinstance(hit, cls):
        return hit
    payload = rec.typed(cls)
    if len(_PAYLOAD_CACHE) >= _PAYLOAD_CACHE_MAX:
        _PAYLOAD_CACHE.clear()
    _PAYLOAD_CACHE[rec.hash] = payload
    return payload


def corrupt(rec: Record, field_name: str, why: str) -> NoReturn:
    raise RunfoldError(
        ErrorCode.LEDGER_CORRUPT,
        f"fold seq {rec.seq} ({rec.kind_name}, field {field_name}): {why}",
        f"run {rec.run}",
        f"inspect the line with `runfold show {rec.seq}`; the ledger holds a line this fold cannot "
        "place, so restore it from a copy or report it",
    )


def unsupported(rec: Record, fields: str, what: str, upgrade: str) -> NoReturn:
    """`E_LOG_VERSION_UNSUPPORTED` for a line naming a change this build does not fold (`fields`:
    where it says so; `what`: the change; `upgrade`: what a newer build folds)."""
    raise RunfoldError(
        ErrorCode.LOG_VERSION_UNSUPPORTED,
        f"fold seq {rec.seq} ({rec.kind_name}, field {fields}): this build does not apply this {what}",
        f"run {rec.run}",
        f"upgrade runfold to a version that folds this {upgrade}; nothing was skipped",
    )


@dataclass(frozen=True)
class LineageStep:
    """One run of a lineage and the part of its lines inherited: seqs `first`..`last` (inclusive)."""

    run: str
    first: int
    last: int
    lines: tuple[Record, ...]


@dataclass(frozen=True)
class Lineage:
    """A run and, for a fork, the runs it inherits from: oldest first, each cut at the fork point."""

    steps: tuple[LineageStep, ...]

    @property
    def run(self) -> str:
        return self.steps[-1].run

    def records(self) -> Iterable[Record]:
        for step in self.steps:
            yield from step.lines

    def seqs(self) -> list[int]:
        return [r.seq for r in self.records()]

    def describe(self, names: Mapping[str, str] | None = None) -> str:
        """`run 0198f6a2: seqs 1–12; run 0198f6b0: seqs 40–45` (oldest first), each run by its
        entry in `names` (`ids.short_run_ids` over every run of the ledger, so each prefix names
        one run there), or by its whole id when `names` is None or lacks it."""
        shown = names or {}
        return "; ".join(f"run {shown.get(s.run, s.run)}: seqs {s.first}–{s.last}" for s in self.steps)


def group_by_run(records: Iterable[Record]) -> dict[str, list[Record]]:
    """The lines of each run in seq order (workspace-level lines are grouped under the nil run)."""
    out: dict[str, list[Record]] = {}
    for rec in records:
        out.setdefault(rec.run, []).append(rec)
    return out


def fork_point(lines: Sequence[Record]) -> tuple[str, int] | None:
    """The `(mother, at_seq)` of a run's `run_forked` line, or None when the run is not a fork.

    Only lines before the run's first request are looked at (a fork writes `run_forked` right
    after `run_started`). Raises `E_LEDGER_CORRUPT` naming the seq when the payload is unreadable.
    """
    for rec in lines[:4]:
        if rec.known and rec.kind is Kind.RUN_FORKED:
            forked = typed(rec, RunForked)
            return forked.from_, forked.at_seq
    return None


def lineage_lines(run_records: Callable[[str], Sequence[Record]], run: str) -> dict[str, list[Record]]:
    """`run`'s lines and each mother's, following `fork_point` (run id → lines in seq order),
    read one run at a time with `run_records` (a ledger's); what `lineage` and the folds read."""
    out: dict[str, list[Record]] = {}
    todo: str | None = run
    while todo is not None and todo not in out:
        out[todo] = list(run_records(todo))
        point = fork_point(out[todo])
        todo = point[0] if point is not None else None
    return out


def through(lin: Lineage, seq: int) -> Lineage | None:
    """`lin` cut after `seq` (None when `seq` is not a line of it)."""
    steps: list[LineageStep] = []
    for step in lin.steps:
        if seq < step.first:
            break
        kept = tuple(r for r in step.lines if r.seq <= seq)
        steps.append(LineageStep(step.run, step.first, kept[-1].seq, kept))
        if any(r.seq == seq for r in step.lines):
            return Lineage(tuple(steps))
    return None


def not_in_lineage(lin: Lineage, seq: int, tail: int | None = None) -> RunfoldError:
    """`E_INVALID_ARGS` for a seq that is not a line of `lin` (never clamped), naming the range."""
    where = lin.describe()
    tail_note = f"; the ledger's tail is seq {tail}" if tail is not None else ""
    past = tail is not None and seq > tail
    return invalid_args(
        f"cut at seq {seq}" + (" (past the ledger's tail)" if past else " (not a line of this run)"),
        f"run {lin.run}",
        f"give a seq of the run or of the runs it inherits from ({where}{tail_note})",
        tuple(str(s) for s in _nearby(lin.seqs(), seq)),
    )


def _nearby(seqs: list[int], seq: int) -> list[int]:
    return sorted(sorted(seqs, key=lambda s: (abs(s - seq), s))[:4])
