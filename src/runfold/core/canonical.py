"""Canonical bytes of a ledger line and the chain hash (DESIGN.md §3): the one encoder.

msgspec's encoder writes every byte (compact JSON, raw UTF-8, the escapes, data keys sorted by
code point, envelope fields in wire order); this module declares the envelope once and owns the
rules msgspec does not enforce (no floats, integers within i64/u64, nesting at most 126, string
keys, JSON types only). It does no I/O, so the file writer, the verifier and any other backend
produce and check the same bytes with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import blake3
import msgspec

from runfold.core.errors import invalid_args

FORMAT_VERSION = 2
"""The format version this build writes; versions 1..FORMAT_VERSION are readable."""
MAX_DEPTH = 126
"""Maximum nesting depth of `data` (the `data` object itself is depth 1)."""
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
U64_MAX = (1 << 64) - 1

Json = Any
"""A JSON value: None, bool, int, str, list of Json, dict of str to Json (never float)."""


def check_json(value: Json, path: str = "data", depth: int = 1) -> None:
    """Refuse anything a canonical payload may not hold.

    Raises `E_INVALID_ARGS` naming the field path (e.g. `data.usage.ratio`) for a float, an
    integer outside i64/u64, a non-string key, nesting deeper than MAX_DEPTH, a string that is
    not valid Unicode (lone surrogate), or a value of a non-JSON type.
    """
    if depth > MAX_DEPTH + 1:
        raise invalid_args("encode payload", path, f"keep payloads at most {MAX_DEPTH} levels deep")
    if value is None or value is True or value is False:
        return
    if isinstance(value, int):
        if not I64_MIN <= value <= U64_MAX:
            raise invalid_args(
                "encode integer",
                path,
                "integers must fit i64/u64; store larger numbers as decimal strings",
            )
        return
    if isinstance(value, float):
        raise invalid_args(
            "encode float",
            path,
            "use an integer (micro-USD, µs, ms, per-mille) or keep outside JSON as its text in a string",
        )
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise invalid_args(
                "encode string", path, "strings must be valid Unicode (no lone surrogates)"
            ) from None
        return
    if isinstance(value, dict):
        if depth > MAX_DEPTH:
            raise invalid_args("encode payload", path, f"keep payloads at most {MAX_DEPTH} levels deep")
        for key, item in value.items():
            if not isinstance(key, str):
                raise invalid_args("encode key", f"{path}[{key!r}]", "object keys must be strings")
            check_json(key, f"{path}.<key>", depth)
            check_json(item, f"{path}.{key}", depth + 1)
        return
    if isinstance(value, (list, tuple)):
        if depth > MAX_DEPTH:
            raise invalid_args("encode payload", path, f"keep payloads at most {MAX_DEPTH} levels deep")
        for index, item in enumerate(value):
            check_json(item, f"{path}[{index}]", depth + 1)
        return
    raise invalid_args(
        f"encode {type(value).__name__}",
        path,
        "payloads hold only JSON null, bool, int, str, list and object",
    )


class FloatSeen(Exception):
    """Raised by `decode_float_free` and `decode_line` at the first float literal."""


def _refuse_float(literal: str) -> Any:
    raise FloatSeen(literal)


decode_float_free = msgspec.json.Decoder(float_hook=_refuse_float).decode
"""Parse JSON bytes, raising FloatSeen at the first float literal (msgspec, C speed)."""


class Envelope(
    msgspec.Struct, kw_only=True, frozen=True, gc=False, omit_defaults=True, forbid_unknown_fields=True
):
    """One ledger line's fields, declared in the wire order of DESIGN.md §3.

    `data` is the payload as a JSON object; `addr` None and `ig` False are omitted on the wire
    (`omit_defaults`). The same declaration is what `encode_line` writes and what `decode_line`
    reads, so a line's canonical bytes are `encode_json(envelope)`. Immutable; build it with
    keywords (`Envelope(v=2, run=..., ...)`), change one with `msgspec.structs.replace`.
    """

    v: int
    run: str
    seq: int
    prev: str
    t: int
    who: str
    addr: str | None = None
    kind: str
    data: dict[str, Json]
    ig: bool = False


_encoder = msgspec.json.Encoder(order="deterministic")
encode_json = _encode = _encoder.encode
"""`encode_json(value) -> bytes`: compact JSON with object keys sorted by code point, raw UTF-8
strings and the escapes of DESIGN.md §3 (msgspec's encoder with `order="deterministic"`; struct
fields, such as an `Envelope`'s, keep their declared order): the one canonical encoder.

Does not check the value: call `check_json` first (or use `encode_line`). Raises TypeError for
a non-str key or a type msgspec cannot encode, UnicodeEncodeError for a lone surrogate."""
encode_into = _encoder.encode_into
"""`encode_into(value, buffer)`: `encode_json(value)` written into a bytearray (reused by scans)."""
decode_line = msgspec.json.Decoder(Envelope, float_hook=_refuse_float).decode
"""Parse a line's bytes into its Envelope: exact field types, no unknown field, FloatSeen at
the first float literal, msgspec.DecodeError for anything else (the checkers' fast path)."""
pack_ints = _pack = msgspec.msgpack.Encoder().encode
"""`pack_ints(value)`: MessagePack bytes of a JSON value, raising OverflowError for an integer
outside i64/u64 (what `fits_64` asks, for loops that cannot pay its call)."""
OPEN_MAX = _OPEN_MAX = MAX_DEPTH + 1
"""Most opening brackets a line may hold and nest within the limit (`data` itself is depth 1)."""
SHORT_LINE = _SHORT_LINE = 2 * (_OPEN_MAX + 1) + 100
"""A line whose `data` nests deeper than MAX_DEPTH holds at least 2 * (_OPEN_MAX + 1) bracket
bytes of structure (each opener of the envelope and of data has its closer), at least 101
other bytes (`"v":1,"run":"<36-char UUID>","seq":0,"prev":"","t":0,"who":"","kind":"","data":`)
and its `prev` string: so a line shorter than this plus `len(prev)` cannot nest too deep."""


def fits_64(value: Json) -> bool:
    """True when every integer in `value` lies within i64/u64 (`-2**63..2**64-1`), checked in
    one C call (msgspec's MessagePack encoder refuses exactly the integers outside that range).
    `value` must hold only JSON types."""
    try:
        _pack(value)
    except (OverflowError, TypeError):  # TypeError: a value of another type (not proven either)
        return False
    return True


def nests_within(raw: bytes, prev_len: int = 0) -> bool:
    """True when the line `raw` (whose `prev` is `prev_len` characters) cannot nest its `data`
    deeper than MAX_DEPTH: it is too short to, or holds at most MAX_DEPTH + 1 opening brackets
    (strings may hold brackets too: a False only costs the path-naming check)."""
    return len(raw) < _SHORT_LINE + prev_len or raw.count(b"{") + raw.count(b"[") <= _OPEN_MAX


def check_data(data: Json) -> None:
    """`check_json(data)` with a C-speed proof first; the path-naming walk runs only when the
    proof fails (same refusals, same errors). The proof: msgspec's bytes of `data` parse back
    with no float literal to a value equal to `data` (so it held only JSON types with string
    keys: a datetime, bytes, a set, a tuple, an enum, a NaN or a struct comes back different),
    its integers fit 64 bits (`pack_ints`), and its brackets bound its depth."""
    try:
        encoded = _encode(data)
        if (
            decode_float_free(encoded) == data
            and (len(encoded) <= 2 * MAX_DEPTH or encoded.count(b"{") + encoded.count(b"[") <= MAX_DEPTH)
            and _pack(data)
        ):
            return
    except (TypeError, ValueError, RecursionError, OverflowError, FloatSeen, msgspec.DecodeError):
        pass  # ValueError: UnicodeEncodeError; OverflowError: an integer beyond 64 bits
    check_json(data)


def encode_line(env: Envelope, *, checked: bool = False) -> bytes:
    """The canonical bytes of a line, without the trailing newline (DESIGN.md §3).

    Raises `E_INVALID_ARGS` (from `check_json`, naming the field path) when `data` is not an
    object or holds a float, an out-of-range integer, a non-str key, a non-JSON value or nests
    too deeply; `checked=True` skips those checks for data already checked.
    """
    if checked:
        return _encode(env)
    data = env.data
    if not isinstance(data, dict):
        raise invalid_args("encode payload", "data", "a line's data must be a JSON object")
    try:
        raw = _encode(env)
    except (TypeError, ValueError, RecursionError):  # ValueError: UnicodeEncodeError
        check_json(data)  # raises naming the field path
        for name in ("run", "prev", "who", "addr", "kind"):  # a lone surrogate in the envelope
            check_json(getattr(env, name), name)
        # what check_json accepts and msgspec does not encode: subclasses of int, str, dict, list
        return _encode(Envelope(**{name: _plain(getattr(env, name)) for name in env.__struct_fields__}))
    if not lines_proven([data], [raw], len(env.prev)):
        check_json(data)  # raises naming the field path, or the data was canonical after all
    return raw


def _plain(value: Json) -> Json:
    """`value` (which `check_json` accepts) rebuilt from exact JSON types, equal to it."""
    if value is None or value is True or value is False:
        return value
    # the base types' own conversions: a subclass's __str__/__int__ must not change the value
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, dict):
        return {str.__str__(key): _plain(item) for key, item in value.items()}
    return [_plain(item) for item in value]


def lines_proven(datas: list[dict[str, Json]], raws: Sequence[bytes], prev_len: int = 64) -> bool:
    """True when each line `raws[i]` (= `encode_line(env, checked=True)` of an envelope whose
    `data` is `datas[i]` and whose `prev` is `prev_len` characters) is proven to carry a payload
    `encode_line` accepts, for a whole batch in a few C calls: every payload is a dict, all of
    them encoded at once parse back (no float literal) equal to themselves, every integer fits
    i64/u64, and no line nests its data deeper than MAX_DEPTH. False: check each with
    `encode_line`, which names the bad field. The envelope's own fields are the caller's to
    check (the writer's draft checks). The writer's staging path (DESIGN.md §3 group commit).
    """
    if datas and set(map(type, datas)) != {dict}:
        return False
    try:
        if decode_float_free(_encode(datas)) != datas:
            return False
        _pack(datas)
    except (FloatSeen, msgspec.DecodeError, TypeError, ValueError, OverflowError):
        return False
    short = _SHORT_LINE + prev_len
    for raw in raws:  # `nests_within`, inlined: it runs once per line
        if len(raw) >= short and raw.count(b"{") + raw.count(b"[") > _OPEN_MAX:
            return False
    return True


def chain_hash(raw_line: bytes) -> str:
    """BLAKE3-256 of a line's exact bytes without its newline, as 64 lowercase hex."""
    return blake3.blake3(raw_line).digest().hex()


def content_hash(content: bytes) -> str:
    """BLAKE3-256 of arbitrary bytes as 64 lowercase hex (CAS keys, request hashes)."""
    return blake3.blake3(content).digest().hex()
