"""The one line checker shared by every reader: open, verify, replay, fork (DESIGN.md §3).

`LineChecker.check` takes a line's raw bytes and either returns its envelope and advances the
chain, or raises `LineRefused` naming the 1-based line number, the seq, the fault and what to do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import blake3
import msgspec
import orjson

from runfold.core.canonical import (
    FORMAT_VERSION,
    MAX_DEPTH,
    Envelope,
    FloatSeen,
    check_json,
    decode_float_free,
    encode_line,
)
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.ids import ZERO_HASH, is_run_id
from runfold.core.kinds import KNOWN_KIND_NAMES


class Fault(enum.StrEnum):
    """Why a line was refused; the value is the phrase shown to users."""

    NOT_A_LINE = "not a line"
    VERSION_UNSUPPORTED = "version unsupported"
    VERSION_AHEAD = "version ahead"
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
    """The Envelope of a parsed line, or None when a field is missing or of the wrong type."""
    if type(obj) is not dict:
        return None
    # Fast path: the keys are exactly a canonical envelope's, in wire order, without addr.
    shape = _PLAIN_SHAPES.get(tuple(obj))
    if shape is not None:
        values = tuple(obj.values())
        if tuple(map(type, values)) == shape and (len(values) == 8 or values[8] is True):
            return _new_envelope(Envelope, values[:8] + _NO_ADDR[len(values) - 8])
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
    return _new_envelope(Envelope, (v, run, seq, prev, t, who, kind, data, addr, ig))


_FIELD_TYPES = (int, str, int, str, int, str, str, dict)
_PLAIN_SHAPES: dict[tuple[str, ...], tuple[type, ...]] = {
    ("v", "run", "seq", "prev", "t", "who", "kind", "data"): _FIELD_TYPES,
    ("v", "run", "seq", "prev", "t", "who", "kind", "data", "ig"): (*_FIELD_TYPES, bool),
}
_NO_ADDR: tuple[tuple[None, bool], ...] = ((None, False), (None, True))
"""The (addr, ig) ending an envelope read by the fast path: without ig, with `"ig":true`."""
_new_envelope = tuple.__new__
_blake3 = blake3.blake3


_KEY_ORDER: dict[tuple[bool, bool], tuple[str, ...]] = {
    (has_addr, ig): (
        ("v", "run", "seq", "prev", "t", "who")
        + (("addr",) if has_addr else ())
        + ("kind", "data")
        + (("ig",) if ig else ())
    )
    for has_addr in (False, True)
    for ig in (False, True)
}
"""The envelope keys of a canonical line, by (addr present, ig true)."""


def _needs_full_check(value: Any, depth: int) -> bool:
    """True when parsed `data` may not be canonical in a way `orjson.dumps` would not show: a
    float, nesting near MAX_DEPTH, or object keys out of code-point order. One pass over the
    values; False lets the checker skip the path-naming `check_json` walk and `encode_line`."""
    if depth >= MAX_DEPTH:
        return True
    if type(value) is dict:
        if len(value) > 1:
            keys = list(value)
            if keys != sorted(keys):
                return True
        items: Any = value.values()
    else:
        items = value
    for item in items:
        t = type(item)
        if t is float:
            return True
        if (t is dict or t is list) and _needs_full_check(item, depth + 1):
            return True
    return False


class LineChecker:
    """Stateful verifier of consecutive lines: the running chain head and expected seq.

    Start it at (0, ZERO_HASH) for a whole ledger, or at a segment's first seq and the previous
    segment's head to continue across segments.
    """

    __slots__ = ("expected_seq", "head", "known_kinds", "run_ids", "where")

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
        self.run_ids: set[str] = set()
        """Run ids already seen well-formed (a lookup instead of a regex per line)."""

    def check(self, raw: bytes, line_no: int) -> tuple[Envelope, bool]:
        """Verify one line (bytes without its newline) and advance.

        Returns the envelope and whether the line is known (False: an unknown kind with
        `ig:true`, which stays in the chain but must be skipped by folds). Raises LineRefused.
        """
        try:
            env = self._accept_fast(decode_float_free(raw), raw)
        except (FloatSeen, msgspec.DecodeError, orjson.JSONEncodeError):
            env = None
        if env is not None:
            self.expected_seq += 1
            self.head = _blake3(raw).hexdigest()
            return env, True
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
            fast = not _needs_full_check(env.data, 1)
            if not fast:
                check_json(env.data)
            # With data floats-free and sorted, orjson re-serializing the parsed object to exactly
            # `raw` with the envelope keys in wire order means `raw == encode_line(env)`.
            if not (
                fast and tuple(obj) == _KEY_ORDER[(env.addr is not None, env.ig)] and orjson.dumps(obj) == raw
            ):
                canonical = encode_line(env, checked=True)
                if canonical != raw:
                    raise refuse(
                        Fault.NOT_CANONICAL, line_no, env.seq, _first_difference(raw, canonical), self.where
                    )
        except (RunfoldError, TypeError, orjson.JSONEncodeError) as exc:
            if isinstance(exc, LineRefused):
                raise
            raise refuse(Fault.NOT_CANONICAL, line_no, env.seq, str(exc), self.where) from None
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
        self.head = _blake3(raw).hexdigest()  # = chain_hash(raw), inlined: it runs once per line
        return env, known

    def _accept_fast(self, obj: Any, raw: bytes) -> Envelope | None:
        """The envelope of a line that passes every check, proven with C-speed tests only; None
        sends the line through the exact path, which names the fault (or accepts it).

        Why this equals the exact path's acceptance: `orjson.dumps(obj) == raw` proves compact
        spelling, orjson escaping and no duplicate keys, and with the key tuple it proves the
        envelope's wire order; the data re-encoded with sorted keys having the same bytes proves
        code-point key order at every depth; the decoder raised on any float literal, and an
        integer beyond i64/u64 makes orjson refuse to re-encode; at most MAX_DEPTH + 1 opening
        brackets bound the nesting of data by MAX_DEPTH.
        """
        if type(obj) is not dict:
            return None
        shape = _FAST_SHAPES.get(tuple(obj))
        if shape is None:
            return None
        values = tuple(obj.values())
        if tuple(map(type, values)) != shape:
            return None
        v, run, seq, prev, _t, _who = values[:6]
        kind, data = values[-3:-1] if shape[-1] is bool else values[-2:]
        if (
            prev != self.head
            or seq != self.expected_seq
            or not 1 <= v <= FORMAT_VERSION
            or kind not in self.known_kinds
            or run not in self.run_ids
            or (shape[-1] is bool and values[-1] is not True)
            or raw.count(b"{") + raw.count(b"[") > MAX_DEPTH + 1
            or orjson.dumps(obj) != raw
        ):
            return None
        sorted_data = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        if not raw.endswith(sorted_data + (b',"ig":true}' if shape[-1] is bool else b"}")):
            return None
        addr = obj.get("addr")
        return _new_envelope(Envelope, (*values[:6], kind, data, addr, shape[-1] is bool))


_FAST_SHAPES: dict[tuple[str, ...], tuple[type, ...]] = {
    _KEY_ORDER[(has_addr, ig)]: (int, str, int, str, int, str)
    + ((str,) if has_addr else ())
    + (str, dict)
    + ((bool,) if ig else ())
    for has_addr in (False, True)
    for ig in (False, True)
}
"""Per canonical envelope key order, the exact types of its values."""


def _first_difference(raw: bytes, canonical: bytes) -> str:
    n = next(
        (i for i, (a, b) in enumerate(zip(raw, canonical, strict=False)) if a != b),
        min(len(raw), len(canonical)),
    )
    return f"byte {n} differs from the canonical encoding (found {raw[n : n + 12]!r}, canonical {canonical[n : n + 12]!r})"
