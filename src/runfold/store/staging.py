"""Staging: drafts become records (envelope, canonical bytes, chain hash) before their write.

The writer's CPU half of group commit (DESIGN.md §3, §5): each draft is checked as the line
checker would check it once written, encoded with the one canonical encoder and chained. It does
no I/O, so any backend that appends lines can stage them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import blake3

from runfold.core.address import address_problem
from runfold.core.canonical import (
    FORMAT_VERSION,
    I64_MAX,
    I64_MIN,
    Envelope,
    encode_json,
    encode_line,
    lines_proven,
)
from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.ids import is_run_id
from runfold.core.kinds import KNOWN_KIND_NAMES
from runfold.core.records import Draft, Record

_CACHE_MAX = 1 << 16
"""Checked run ids / addresses remembered per stager before the sets are cleared."""


class Stager:
    """One writer's staging state: the run ids and addresses it has checked (a set lookup, not
    a regex, per line) and one BLAKE3 state for chain hashes (update, digest, reset)."""

    def __init__(self) -> None:
        self._runs_ok: set[str] = set()
        self._addrs_ok: set[str] = set()
        self._hasher = blake3.blake3()

    def stage(self, drafts: Sequence[Draft], seq: int, head: str, clock: int) -> list[Record]:
        """The records of `drafts` as lines `seq`, `seq + 1`, ... chained after `head`; a draft
        whose `t` is None gets `clock` (UTC ms). Each gets `v` = FORMAT_VERSION.

        Each line is encoded with the one encoder (`encode_json` of its `Envelope`) and the
        whole batch proven canonical at once (`lines_proven`); a batch the proof refuses is
        staged again line by line with `encode_line`, whose refusal names the bad draft.
        Raises `E_INVALID_ARGS` naming the first bad draft (`drafts[i].<field>`): a run that is
        not a lowercase UUID, an empty author, an unknown kind without `ig`, a bad address, a
        `t` outside i64, a payload of another kind or one `check_json` refuses.
        """
        datas = [d.data if type(d.data) is dict else _draft_data(d, i) for i, d in enumerate(drafts)]
        try:
            records = self._records(drafts, datas, seq, head, clock, careful=False)
            proven = lines_proven(datas, [r.raw for r in records])
        except (RunfoldError, TypeError, ValueError, RecursionError):
            proven = False  # the careful pass raises the first draft's fault, naming it
        if not proven:
            records = self._records(drafts, datas, seq, head, clock, careful=True)
        return records

    def _records(
        self,
        drafts: Sequence[Draft],
        datas: list[dict[str, object]],
        seq: int,
        head: str,
        clock: int,
        *,
        careful: bool,
    ) -> list[Record]:
        """Envelope, bytes and chain hash of each draft. Each draft's run, author, kind, address
        and time are checked (a set lookup once seen); `careful` encodes each line with
        `encode_line` (checking its data, naming the draft on refusal), else with the unchecked
        encoder (the caller proves the batch)."""
        records: list[Record] = []
        append = records.append
        runs_ok = self._runs_ok
        addrs_ok = self._addrs_ok
        known = KNOWN_KIND_NAMES
        hasher = self._hasher
        update, digest, reset = hasher.update, hasher.digest, hasher.reset
        encode = encode_json
        version = FORMAT_VERSION
        envelope, record = Envelope, Record  # locals: looked up once per batch, not per line
        first = seq
        for d, data in zip(drafts, datas, strict=True):
            t = d.t
            if t is None:
                t = clock
            run, who, kind, addr = d.run, d.who, d.kind, d.addr
            if not (
                run in runs_ok
                and type(who) is str
                and who
                and kind in known
                and (addr is None or addr in addrs_ok)
                and (t is clock or (type(t) is int and I64_MIN <= t <= I64_MAX))
            ):
                check_draft(d, t, seq - first)  # raises naming the field, or the draft is well-formed
                if len(runs_ok) >= _CACHE_MAX or len(addrs_ok) >= _CACHE_MAX:
                    runs_ok.clear()
                    addrs_ok.clear()
                runs_ok.add(run)
                if addr is not None:
                    addrs_ok.add(addr)
            env = envelope(
                v=version, run=run, seq=seq, prev=head, t=t, who=who, addr=addr, kind=kind, data=data,
                ig=bool(d.ig),
            )  # fmt: skip
            raw = _encode_draft(env, seq - first) if careful else encode(env)
            update(raw)
            head = digest().hex()
            reset()
            append(record(env, raw, head))
            seq += 1
        return records


def check_draft(d: Draft, t: int, i: int) -> None:
    """Refuse draft `i` of a batch (its time resolved to `t`) when the checker would refuse its
    line once written (so the writer never writes one): `E_INVALID_ARGS` naming the field."""
    if not is_run_id(d.run):
        raise invalid_args(
            "append a line",
            f"drafts[{i}].run={d.run!r}",
            "give a lowercase UUID (the nil UUID for workspace lines)",
        )
    if not isinstance(d.who, str) or not d.who:
        raise invalid_args(
            "append a line", f"drafts[{i}].who", "name the author: runtime, person or an agent identity"
        )
    if d.kind not in KNOWN_KIND_NAMES and not d.ig:
        raise invalid_args(
            "append a line",
            f"drafts[{i}].kind={d.kind!r}",
            "use a kind this build knows, or mark a foreign kind ig=True",
        )
    if d.addr is not None and (problem := address_problem(d.addr)) is not None:
        raise invalid_args(
            "append a line", f"drafts[{i}].addr={d.addr!r} ({problem})", "give a relative address"
        )
    if isinstance(t, bool) or not isinstance(t, int) or not I64_MIN <= t <= I64_MAX:
        raise invalid_args(
            "append a line", f"drafts[{i}].t={t!r}", "give UTC milliseconds as an integer, or None"
        )


def _draft_data(d: Draft, i: int) -> dict[str, object]:
    try:
        return d.data_object()
    except TypeError as exc:
        raise invalid_args(
            "append a line", f"drafts[{i}].data ({exc})", "give a payload of the draft's kind"
        ) from None


def _encode_draft(env: Envelope, i: int) -> bytes:
    """`encode_line(env)` of draft `i` of a batch; its refusal (`E_INVALID_ARGS` naming the
    field, e.g. `data.usage.ratio`) names the draft too: `drafts[i].data.usage.ratio`."""
    try:
        return encode_line(env)
    except RunfoldError as exc:
        if exc.code is not ErrorCode.INVALID_ARGS:
            raise
        raise invalid_args(exc.action, f"drafts[{i}].{exc.subject}", exc.recovery, exc.nearby) from None
