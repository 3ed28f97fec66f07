"""The one line checker shared by every reader: open, verify, replay, fork (DESIGN.md §3).

`LineChecker.check` takes a line's raw bytes and either returns its envelope and advances the
chain, or raises `LineRefused` naming the 1-based line number, the seq, the fault and what to do.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import blake3
import msgspec
import orjson

from runfold.core.canonical import (
    FORMAT_VERSION,
    I64_MIN,
    OPEN_MAX,
    SHORT_LINE,
    U64_MAX,
    Envelope,
    FloatSeen,
    check_data,
    decode_line,
    encode_into,
    encode_json,
    encode_line,
    fits_64,
    nests_within,
    pack_ints,
)
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.ids import ZERO_HASH, is_run_id
from runfold.core.kinds import KNOWN_KIND_NAMES


class Fault(enum.StrEnum):
    """Why a line was refused; the value is the phrase shown to users."""

    NOT_A_LINE = "not a line"
    VERSION_UNSUPPORTED = "version unsupported"
    VERSION_AHEAD = "version ahead"
    VERSION_DOWN = "version went down"
    CHAIN_BREAK = "chain break"
    SEQ_GAP = "seq gap"
    NOT_CANONICAL = "not canonical"
    UNKNOWN_KIND = "unknown kind"


_NEXT_STEP: dict[Fault, str] = {
    Fault.NOT_A_LINE: (
        "if this is the last line, a writer died mid-append and the next `runfold` writer cuts it "
        "with one log_truncated line; anywhere else restore the ledger from a copy (runfold never "
        "truncates valid history)"
    ),
    Fault.VERSION_UNSUPPORTED: "this line is not from runfold or sprawling; restore the ledger from a copy",
    Fault.VERSION_AHEAD: "upgrade runfold to a version that reads this format; nothing was read",
    Fault.VERSION_DOWN: (
        "an older writer appended to a ledger a newer one had written, or lines were spliced in "
        "from another ledger; restore the ledger from a copy and write it only with the newest "
        "format it holds"
    ),
    Fault.CHAIN_BREAK: (
        "the ledger was edited or lines were lost before this one; restore it from a copy and verify again"
    ),
    Fault.SEQ_GAP: "lines were lost or reordered; restore the ledger from a copy and verify again",
    Fault.NOT_CANONICAL: (
        "the line was re-encoded or edited by another tool; restore the original bytes from a copy"
    ),
    Fault.UNKNOWN_KIND: "upgrade runfold to a version that knows this kind; nothing was skipped",
}

_ENVELOPE_KEYS = ("v", "run", "seq", "prev", "t", "who", "kind", "data")
_TYPES: dict[str, type] = {
    "v": int,
    "run": str,
    "seq": int,
    "prev": str,
    "t": int,
    "who": str,
    "kind": str,
    "data": dict,
}


@dataclass(eq=False)
class LineRefused(RunfoldError):
    """A line failed verification. `line_no` is 1-based within what was read (the whole ledger,
    or one segment file); `seq` is the line's own seq when it could be read, else the expected."""

    fault: Fault = Fault.NOT_A_LINE
    line_no: int = 0
    seq: int = 0
    detail: str = ""


def refuse(fault: Fault, line_no: int, seq: int, detail: str, where: str = "ledger") -> LineRefused:
    """Build the refusal for `fault` at `line_no`/`seq`; `where` names the file or ledger."""
    code = (
        ErrorCode.LOG_VERSION_UNSUPPORTED
        if fault in (Fault.VERSION_AHEAD, Fault.VERSION_UNSUPPORTED)
        else ErrorCode.LEDGER_CORRUPT
    )
    return LineRefused(
        code=code,
        action=f"verify line {line_no} (seq {seq}): {fault.value}: {detail}",
        subject=where,
        recovery=_NEXT_STEP[fault],
        fault=fault,
        line_no=line_no,
        seq=seq,
        detail=detail,
    )


def parse_envelope(raw: bytes) -> Envelope | None:
    """Parse a line's bytes into an Envelope, or None when they are not a ledger line."""
    try:
        obj: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return _envelope_of(obj)


def _envelope_of(obj: Any) -> Envelope | None:
    """The Envelope of a parsed line, or None when a field is missing or of the wrong type
    (unknown keys are left for the canonical comparison to refuse)."""
    if type(obj) is not dict:
        return None
    try:
        v, run, seq, prev = obj["v"], obj["run"], obj["seq"], obj["prev"]
        t, who, kind, data = obj["t"], obj["who"], obj["kind"], obj["data"]
    except KeyError:
        return None
    if (
        type(v),
        type(run),
        type(seq),
        type(prev),
        type(t),
        type(who),
        type(kind),
        type(data),
    ) != _FIELD_TYPES:
        return None
    addr = obj.get("addr")
    ig = obj.get("ig", False)
    if (addr is not None and type(addr) is not str) or type(ig) is not bool:
        return None
    return Envelope(v=v, run=run, seq=seq, prev=prev, t=t, who=who, addr=addr, kind=kind, data=data, ig=ig)


_FIELD_TYPES = (int, str, int, str, int, str, str, dict)
_blake3 = blake3.blake3


class LineChecker:
    """Stateful verifier of consecutive lines: the running chain head and expected seq.

    Start it at (0, ZERO_HASH) for a whole ledger, or at a segment's first seq and the previous
    segment's head to continue across segments. A ledger's format version never goes down: a
    line whose `v` is below the highest `v` this checker accepted is refused (`version went
    down`); `min_version` holds that highest version (set it back to 1 to check an unrelated line).
    """

    __slots__ = ("_hasher", "expected_seq", "head", "known_kinds", "min_version", "run_ids", "where")

    def __init__(
        self,
        expected_seq: int = 0,
        head: str = ZERO_HASH,
        where: str = "ledger",
        known_kinds: frozenset[str] = KNOWN_KIND_NAMES,
    ) -> None:
        self.expected_seq = expected_seq
        self.head = head
        self.where = where
        self.known_kinds = known_kinds
        self.min_version = 1
        """The lowest format version the next line may have: the highest one accepted so far."""
        self.run_ids: set[str] = set()
        """Run ids already seen well-formed (a lookup instead of a regex per line)."""
        self._hasher = blake3.blake3()
        """One BLAKE3 state reused per line (update, digest, reset: cheaper than a new one; and
        `digest().hex()` is cheaper than blake3's own `hexdigest()`)."""

    def check(self, raw: bytes, line_no: int) -> tuple[Envelope, bool]:
        """Verify one line (bytes without its newline) and advance.

        Returns the envelope and whether the line is known (False: an unknown kind with
        `ig:true`, which stays in the chain but must be skipped by folds). Raises LineRefused.

        Fast path (C calls only), else the exact path (`_check_exact`), which names the fault.
        Why the fast path accepts only lines the exact path accepts: `decode_line` parses into
        the one `Envelope` declaration (exact field types, no unknown field, float literals
        refused); re-encoding it with the one encoder (`encode_json`) equal to `raw` proves
        `raw == encode_line(env)`; `fits_64` and `nests_within` bound integers to i64/u64 and
        nesting to MAX_DEPTH; prev, seq, version, kind and a run id already seen well-formed are
        compared directly.
        """
        try:
            w = decode_line(raw)
        except (FloatSeen, msgspec.DecodeError):
            w = None
        if (
            w is not None
            and w.prev == self.head
            and w.seq == self.expected_seq
            and w.kind in self.known_kinds
            and w.run in self.run_ids
            and self.min_version <= w.v <= FORMAT_VERSION
            and encode_json(w) == raw
            and I64_MIN <= w.t <= U64_MAX
            and fits_64(w.data)
            and nests_within(raw, len(w.prev))
        ):
            self.expected_seq += 1
            self.min_version = w.v
            h = self._hasher
            h.update(raw)
            self.head = h.digest().hex()
            h.reset()
            return w, True
        return self._check_exact(raw, line_no)

    def check_fast(self, lines: Sequence[bytes], start: int, versions: set[int]) -> int:
        """Verify `lines[start:]` in order until the first line the fast path cannot prove,
        advancing the chain over every line accepted; returns how many were accepted (all of
        known kinds, of format version `FORMAT_VERSION` or less and never below the one before).
        The caller hands the next
        line, if any, to `check`, which accepts it or names its fault. Adds each accepted
        line's format version to `versions`. Accepts exactly the
        lines `check` accepts by its fast path, with the same head afterwards; returns no
        envelope (for scans that only verify, DESIGN.md §3 "Verification of a line")."""
        head = self.head
        seq = self.expected_seq
        known = self.known_kinds
        runs = self.run_ids
        decode = decode_line
        encode = encode_into
        canonical = bytearray()
        hasher = self._hasher
        update = hasher.update
        digest = hasher.digest
        reset = hasher.reset
        pack = pack_ints  # `fits_64` and `nests_within`, inlined: they run once per line
        long_line = SHORT_LINE + len(ZERO_HASH)  # every accepted prev is 64 hex digits long
        max_open = OPEN_MAX
        t_min = I64_MIN
        t_max = U64_MAX
        version = FORMAT_VERSION
        floor = self.min_version
        seen_version = 0
        for raw in itertools.islice(lines, start, None):
            try:
                w = decode(raw)
            except (FloatSeen, msgspec.DecodeError):
                break
            if not (w.prev == head and w.seq == seq and w.kind in known and w.run in runs):
                break
            encode(w, canonical)
            if canonical != raw:
                break
            v = w.v
            if v != seen_version:
                if not floor <= v <= version:
                    break
                seen_version = floor = v
                versions.add(v)
            try:
                pack(w.data)
            except OverflowError:
                break
            if not t_min <= w.t <= t_max or (
                len(raw) >= long_line and raw.count(b"{") + raw.count(b"[") > max_open
            ):
                break
            update(raw)
            head = digest().hex()
            reset()
            seq += 1
        self.head = head
        self.min_version = floor
        accepted = seq - self.expected_seq
        self.expected_seq = seq
        return accepted

    def _check_exact(self, raw: bytes, line_no: int) -> tuple[Envelope, bool]:
        """The path that names the fault: every check in DESIGN.md order, on orjson's parse
        (which reads floats, unknown keys and big integers, so each is named)."""
        try:
            obj: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
        env = _envelope_of(obj)
        if env is None:
            raise refuse(
                Fault.NOT_A_LINE,
                line_no,
                self.expected_seq,
                "the bytes do not parse as a ledger line",
                self.where,
            )
        if env.run not in self.run_ids:
            if not is_run_id(env.run):
                raise refuse(
                    Fault.NOT_A_LINE,
                    line_no,
                    env.seq,
                    f"run {env.run!r} is not a lowercase hyphenated UUID",
                    self.where,
                )
            self.run_ids.add(env.run)
        if env.v < 1:
            raise refuse(
                Fault.VERSION_UNSUPPORTED, line_no, env.seq, f"format version {env.v} < 1", self.where
            )
        if env.v > FORMAT_VERSION:
            raise refuse(
                Fault.VERSION_AHEAD,
                line_no,
                env.seq,
                f"format version {env.v} was written by a newer runfold (this build reads 1..{FORMAT_VERSION})",
                self.where,
            )
        if env.v < self.min_version:
            raise refuse(
                Fault.VERSION_DOWN,
                line_no,
                env.seq,
                f"format version {env.v} follows a line of version {self.min_version} (a ledger's "
                "version never goes down)",
                self.where,
            )
        if env.prev != self.head:
            raise refuse(
                Fault.CHAIN_BREAK,
                line_no,
                env.seq,
                f"prev is {env.prev[:16]}…, the previous line hashes to {self.head[:16]}…",
                self.where,
            )
        if env.seq != self.expected_seq:
            raise refuse(
                Fault.SEQ_GAP,
                line_no,
                env.seq,
                f"found seq {env.seq}, expected {self.expected_seq}",
                self.where,
            )
        try:
            check_data(env.data)
            canonical = encode_line(env, checked=True)
        except (RunfoldError, TypeError, ValueError) as exc:
            raise refuse(Fault.NOT_CANONICAL, line_no, env.seq, str(exc), self.where) from None
        if canonical != raw:
            raise refuse(Fault.NOT_CANONICAL, line_no, env.seq, _first_difference(raw, canonical), self.where)
        known = env.kind in self.known_kinds
        if not known and not env.ig:
            raise refuse(
                Fault.UNKNOWN_KIND,
                line_no,
                env.seq,
                f"kind {env.kind!r} is unknown to this build and not marked ig:true",
                self.where,
            )
        self.expected_seq += 1
        self.min_version = env.v
        self.head = _blake3(raw).digest().hex()  # = chain_hash(raw), inlined: it runs once per line
        return env, known


def _first_difference(raw: bytes, canonical: bytes) -> str:
    n = next(
        (i for i, (a, b) in enumerate(zip(raw, canonical, strict=False)) if a != b),
        min(len(raw), len(canonical)),
    )
    return f"byte {n} differs from the canonical encoding (found {raw[n : n + 12]!r}, canonical {canonical[n : n + 12]!r})"
