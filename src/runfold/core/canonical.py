"""Canonical bytes of a ledger line and the chain hash (DESIGN.md §3).

This module is the only producer of line bytes: the writer, the verifier and every test call
`encode_line`. Payload values are checked here (no floats, integers within i64/u64, nesting at
most 126) so that nothing non-canonical can ever be constructed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import blake3
import msgspec
import orjson

from runfold.core.errors import invalid_args

try:
    from runfold.core import _staging
except ImportError:  # built without a C compiler: the pure-Python path below does everything
    _staging = None  # type: ignore[assignment]

native = _staging
"""The C staging core module, or None when it was not built (the store's writer uses its
`stage_lines` from here, so the optional import happens once)."""

NATIVE: bool = native is not None
"""Whether the C staging core (`runfold.core._staging`) is used: `encode_datas` and
`Ledger.stage` call it when True, their Python code when False. False when the extension was not
built; tests set it False to run the Python reference path (the two must agree byte for byte)."""

FORMAT_VERSION = 2
"""The format version this build writes; versions 1..FORMAT_VERSION are readable."""
MAX_DEPTH = 126
"""Maximum nesting depth of `data` (the `data` object itself is depth 1)."""
I64_MIN = -(1 << 63)
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
    """Raised by `decode_float_free` at the first float literal."""


def _refuse_float(literal: str) -> Any:
    raise FloatSeen(literal)


decode_float_free = msgspec.json.Decoder(float_hook=_refuse_float).decode
"""Parse JSON bytes, raising FloatSeen at the first float literal (msgspec, C speed)."""


def _encode_data_fast(data: Json) -> bytes | None:
    """`data`'s canonical bytes when proven with C calls that `check_json` would accept it:
    orjson encodes it (no non-str key, no integer beyond 64 bits, no lone surrogate), re-parsing
    meets no float literal, and its opening brackets bound its depth (more than MAX_DEPTH of
    them, each with its closing bracket, need more than 2 * MAX_DEPTH bytes), and re-encoding the
    parsed bytes gives them back (an `orjson.Fragment` in `data` would splice in raw bytes). None:
    run `check_json` (also whenever the bytes hold `null`: orjson writes a NaN or infinite float
    as `null`).
    (orjson also encodes datetimes, UUIDs and dataclasses, as strings and objects; such values
    then land in the ledger in that JSON form.)"""
    try:
        encoded = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        if b"null" in encoded or (
            len(encoded) > 2 * MAX_DEPTH and encoded.count(b"{") + encoded.count(b"[") > MAX_DEPTH
        ):
            return None
        if orjson.dumps(decode_float_free(encoded), option=orjson.OPT_SORT_KEYS) != encoded:
            return None  # an orjson.Fragment spliced in bytes orjson would not write
    except (orjson.JSONEncodeError, TypeError, FloatSeen, msgspec.DecodeError):
        return None
    return encoded


def check_data(data: Json) -> None:
    """`check_json(data)` with a C-speed proof first; the path-naming walk runs only when the
    proof fails (same refusals, same errors)."""
    if _encode_data_fast(data) is None:
        check_json(data)


def encode_json(value: Json) -> bytes:
    """Compact JSON with object keys sorted by code point, raw UTF-8 strings (DESIGN.md §3).

    Does not check the value: call `check_json` first (or use `encode_line`).
    """
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


class Envelope(NamedTuple):
    """One ledger line's fields, in the wire order of DESIGN.md §3.

    `data` is the payload as a JSON object; `addr` None and `ig` False are omitted on the wire.
    An immutable NamedTuple: the verifier builds one per line, and a tuple is built ~10x faster
    than a frozen dataclass.
    """

    v: int
    run: str
    seq: int
    prev: str
    t: int
    who: str
    kind: str
    data: dict[str, Json]
    addr: str | None = None
    ig: bool = False


def encode_line(env: Envelope, *, checked: bool = False) -> bytes:
    """The canonical bytes of a line, without the trailing newline.

    Raises `E_INVALID_ARGS` (from `check_json`) when `data` holds a float, an out-of-range
    integer or is nested too deeply; `checked=True` skips that walk for data already checked.
    """
    data: bytes | None = None
    if not checked:
        if not isinstance(env.data, dict):
            raise invalid_args("encode payload", "data", "a line's data must be a JSON object")
        data = _encode_data_fast(env.data)
        if data is None:
            check_json(env.data)  # raises naming the field path
    try:
        if data is None:
            data = encode_json(env.data)
    except orjson.JSONEncodeError:
        if not checked:
            check_json(env.data)  # a lone surrogate: raise the path-naming error
        raise
    return splice_line(env, data)


def splice_line(env: Envelope, data: bytes) -> bytes:
    """The canonical bytes of a line whose `data` is already encoded: `data` must be
    `encode_json(env.data)` of checked data (as `encode_line` or `encode_datas` give it).

    Fields in wire order, each spelled as orjson spells it, the data's bytes spliced in as they
    are. The pieces that repeat from line to line (`{"v":..,"run":..,"seq":` per run, and
    `who`/`addr`/`kind`/`ig` around `data`) are encoded once and kept (`_SPLICE_CACHE_MAX`
    entries), so a line costs one format call; the property tests hold it equal to a field-by-
    field encoder. Raises orjson.JSONEncodeError for a field orjson cannot encode.
    """
    v, run, seq, prev, t, who, kind, _, addr, ig = env
    if type(v) is not int or type(seq) is not int or type(t) is not int:
        return _splice_dict(env, data)
    start = _line_starts.get((v, run))
    if start is None:
        if len(_line_starts) >= _SPLICE_CACHE_MAX:
            _line_starts.clear()
        start = _line_starts[(v, run)] = b'{"v":%d,"run":%b,"seq":' % (v, orjson.dumps(run))
    around = _data_surroundings.get((who, addr, kind, ig))
    if around is None:
        if len(_data_surroundings) >= _SPLICE_CACHE_MAX:
            _data_surroundings.clear()
        addr_field = b"" if addr is None else b',"addr":' + orjson.dumps(addr)
        around = _data_surroundings[(who, addr, kind, ig)] = (
            b',"who":%b%b,"kind":%b,"data":' % (orjson.dumps(who), addr_field, orjson.dumps(kind)),
            b',"ig":true}' if ig else b"}",
        )
    return b'%b%d,"prev":%b,"t":%d%b%b%b' % (start, seq, orjson.dumps(prev), t, around[0], data, around[1])


_SPLICE_CACHE_MAX = 4096
_line_starts: dict[tuple[int, str], bytes] = {}
_data_surroundings: dict[tuple[str, str | None, str, bool], tuple[bytes, bytes]] = {}


def _splice_dict(env: Envelope, data: bytes) -> bytes:
    """`splice_line` for an envelope whose numbers are not plain ints (a bool, say, from a
    damaged line the exact checker re-encodes): one orjson call over the fields in wire order."""
    line: dict[str, Any] = {
        "v": env.v,
        "run": env.run,
        "seq": env.seq,
        "prev": env.prev,
        "t": env.t,
        "who": env.who,
    }
    if env.addr is not None:
        line["addr"] = env.addr
    line["kind"] = env.kind
    line["data"] = _Fragment(data)
    if env.ig:
        line["ig"] = True
    return orjson.dumps(line)


_SEPARATOR = orjson.Fragment(b"0\n")
"""Between payloads in `encode_datas`'s one array: the number 0 and a raw newline, which no
encoded value contains (orjson escapes control characters in strings and adds no whitespace), so
splitting on `,0\n,` gives back each payload's bytes exactly, and the array stays valid JSON."""
_SPLIT = b",0\n,"


def encode_datas(datas: list[dict[str, Json]]) -> list[bytes] | None:
    """The canonical bytes of each payload (`encode_json(d)` for each d) from one orjson call and
    one float check for the whole batch, or None when that proof fails for any of them (a
    float, `null` anywhere, an integer beyond 64 bits, a lone surrogate, a non-str key, deep
    nesting): then encode each with `encode_line`, which names the bad field.

    The same proof as `_encode_data_fast`, made once per batch instead of once per payload: the
    writer's staging cost per line (DESIGN.md §3 group commit; issue 2 benchmark (a)). With
    `NATIVE`, the C twin `_staging.encode_payloads` answers first: the same bytes (it also takes
    `None` values, which the orjson proof cannot tell from a NaN); only when it answers None
    (anything outside its exact-type subset) does the orjson proof run.
    """
    if not datas:
        return []
    if NATIVE:
        parts = native.encode_payloads(datas)
        if parts is not None:
            return parts
    items: list[Any] = []
    add = items.append
    for data in datas:
        add(data)
        add(_SEPARATOR)
    try:
        blob = orjson.dumps(items, option=orjson.OPT_SORT_KEYS)
        if b"null" in blob:
            return None
        # re-encoding the parsed batch gives the blob back (the separators' newlines aside) only
        # when every byte is orjson's own: an orjson.Fragment inside a payload splices raw bytes
        # (spaces, newlines, unsorted or duplicate keys, `\u` escapes, `-0`) that check_json refuses
        flat = blob.replace(b"\n", b"")
        if (
            len(blob) - len(flat) != len(datas)
            or orjson.dumps(decode_float_free(blob), option=orjson.OPT_SORT_KEYS) != flat
        ):
            return None
    except (orjson.JSONEncodeError, TypeError, FloatSeen, msgspec.DecodeError):
        return None
    parts = blob[1:-4].split(_SPLIT)
    if len(parts) != len(datas):
        return None
    for part in parts:  # a payload nesting deeper than MAX_DEPTH is longer than 2 * MAX_DEPTH
        if len(part) > 2 * MAX_DEPTH and part.count(b"{") + part.count(b"[") > MAX_DEPTH:
            return None
    return parts


_Fragment = orjson.Fragment


def chain_hash(raw_line: bytes) -> str:
    """BLAKE3-256 of a line's exact bytes without its newline, as 64 lowercase hex."""
    return blake3.blake3(raw_line).digest().hex()


def content_hash(content: bytes) -> str:
    """BLAKE3-256 of arbitrary bytes as 64 lowercase hex (CAS keys, request hashes)."""
    return blake3.blake3(content).digest().hex()
