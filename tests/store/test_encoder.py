"""The one canonical encoder (`runfold.core.canonical`) against a reference re-encoding.

`encode_line` must give the bytes of a field-by-field orjson reference for every payload
`check_json` accepts, and refuse (never other bytes) every payload it refuses: floats, integers
beyond i64/u64, lone surrogates, non-str keys, nesting past MAX_DEPTH, values of other types.
`Ledger.stage`, which encodes a batch unchecked and proves it in one call, must give the records
a reference built line by line with `encode_line` and `chain_hash` (same bytes, hashes and
envelopes), and refuse a bad draft the same way, naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_paths import reference_encode_line
from test_store_props import EDGE_INTS

from runfold.core.canonical import (
    FORMAT_VERSION,
    I64_MIN,
    MAX_DEPTH,
    U64_MAX,
    Envelope,
    chain_hash,
    check_json,
    encode_json,
    encode_line,
)
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.records import Draft, Record
from runfold.store import ledger as ledger_module
from runfold.store.ledger import Ledger
from runfold.store.staging import check_draft
from runfold.store.verify import verify_path

RUNS = ["0190f6a2-7c4a-7bbb-9d1e-000000000001", "00000000-0000-0000-0000-000000000000"]
ADDRS = ["lab/room1", "é/😀", 'a b/c"d']
HEAD = chain_hash(b"the line before")

SPECIAL_CHARS = [chr(c) for c in range(0x20)] + ['"', "\\", "/", "\x7f", "\x80", "\xff", "\u2028", "\u2029"]
SPECIAL_CHARS += ["\u0100", "\uffff", "\U0001f600", "\U0010ffff", "\ud800", "\udfff"]  # last two: lone
chars = st.sampled_from(SPECIAL_CHARS) | st.characters(codec="utf-8")
strings = st.text(chars, max_size=12) | st.sampled_from(["", "a" * 40, "ascii only, 17 b", 'x"' * 9])
edge_ints = st.sampled_from([*EDGE_INTS, I64_MIN - 1, U64_MAX + 1, -(1 << 64), 1 << 100]) | st.integers()
plain_scalars = st.none() | st.booleans() | edge_ints | strings


class IntSub(int):
    pass


class StrSub(str):
    pass


class DictSub(dict):  # type: ignore[type-arg]
    pass


class ListSub(list):  # type: ignore[type-arg]
    pass


exotic_scalars = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(-5, 5).map(IntSub)
    | strings.map(StrSub)
    | st.sampled_from(
        [orjson.Fragment(b"1"), msgspec.Raw(b'{"a":1}'), msgspec.Raw(b"1.5"), b"bytes", object(), {1, 2}]
    )
)


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(strings, inner, max_size=5)
    )


plain_values = st.recursive(plain_scalars, containers, max_leaves=15)
plain_payloads = st.dictionaries(strings, plain_values, max_size=6)


@st.composite
def exotic_payloads(draw: st.DrawFn) -> dict[Any, Any]:
    """A plain payload with one value the encoder's C-speed proof must decline planted in it."""
    exotic = draw(
        exotic_scalars
        | plain_values.map(lambda v: DictSub(k=v))
        | plain_values.map(lambda v: ListSub([v]))
        | st.sampled_from([{1: "int key"}, {StrSub("k"): 1}, {None: 1}])
    )
    value: Any = exotic
    for wrap in draw(st.lists(st.sampled_from(["list", "tuple", "dict"]), max_size=3)):
        value = [value] if wrap == "list" else (value,) if wrap == "tuple" else {draw(strings): value}
    payload = draw(plain_payloads)
    payload[draw(strings)] = value
    return payload


def accepted(data: Any) -> bool:
    try:
        check_json(data)
    except RunfoldError:
        return False
    return True


def envelope(data: Any, **fields: Any) -> Envelope:
    base: dict[str, Any] = dict(
        v=FORMAT_VERSION, run=RUNS[0], seq=3, prev=HEAD, t=5, who="w", kind="tool_result"
    )
    base.update(fields)
    return Envelope(data=data, **base)


def outcome(data: Any) -> bytes | None:
    """`encode_line`'s bytes, or None when it refuses (`E_INVALID_ARGS`, never another error)."""
    try:
        return encode_line(envelope(data))
    except RunfoldError as exc:
        assert exc.code is ErrorCode.INVALID_ARGS
        return None


@settings(max_examples=200)
@given(data=plain_payloads)
def test_plain_payloads_get_the_reference_bytes_or_a_refusal_exactly_when_check_json_refuses(
    data: dict[str, Any],
) -> None:
    got = outcome(data)
    if accepted(data):
        assert got == reference_encode_line(envelope(data))
    else:  # a lone surrogate or an integer beyond i64/u64 somewhere
        assert got is None


@settings(max_examples=150)
@given(data=exotic_payloads())
def test_values_outside_json_are_refused_or_encoded_as_the_reference_encodes_them(
    data: dict[Any, Any],
) -> None:
    got = outcome(data)
    assert (got is not None) == accepted(data)
    if got is not None:  # tuples and int/str/dict/list subclasses: check_json accepts them
        assert got == reference_encode_line(envelope(json.loads(json.dumps(data))))


@pytest.mark.parametrize("wrap", ["dict", "list", "tuple"])
def test_nesting_to_the_cap_is_encoded_and_one_beyond_is_refused(wrap: str) -> None:
    def nest(depth: int) -> dict[str, Any]:
        value: Any = "leaf"
        for _ in range(depth - 1):
            value = {"k": value} if wrap == "dict" else [value] if wrap == "list" else (value,)
        return {"k": value}

    at_cap, beyond = nest(MAX_DEPTH), nest(MAX_DEPTH + 1)
    assert accepted(at_cap) and not accepted(beyond)
    assert outcome(at_cap) == reference_encode_line(envelope(at_cap))
    assert outcome(beyond) is None


@pytest.mark.parametrize("char", [chr(c) for c in range(0x80)] + ["\u2028", "\U0001f600", "\xe9"])
def test_every_ascii_character_is_escaped_as_the_reference_escapes_it(char: str) -> None:
    """Each character alone, at each position of an 8-byte word, in keys, values and envelope fields."""
    for pad in range(9):
        text = "a" * pad + char + "b" * (16 - pad)
        env = envelope({char: text, text: [text]}, who=text, addr=text, kind=text, ig=True)
        assert encode_line(env) == reference_encode_line(env)
        assert encode_json(text) == orjson.dumps(text)


def test_the_edges_of_the_rules() -> None:
    cases: list[Any] = [
        {"i64": I64_MIN, "u64": U64_MAX, "t": True, "f": False, "n": None, "e": "", "": []},
        {
            "tuple": (1, (2, [3]), ()),
            "empty": {},
            "keys": {"b": 1, "a": 2, "é": 3, "Z": 4, "😀": 5, "\uffff": 6},
        },
        {str(i): i for i in range(40)},
        DictSub(a=1),
        {"sub": [IntSub(1), StrSub("s"), DictSub(), ListSub()]},
    ]
    for data in cases:
        assert outcome(data) == reference_encode_line(envelope(json.loads(json.dumps(data))))
    for bad in [I64_MIN - 1, U64_MAX + 1, 1.0, float("nan"), "\ud800", b"x", {1, 2}, msgspec.Raw(b"1")]:
        assert outcome({"ok": 1, "x": bad}) is None, bad
    assert outcome([1]) is None  # data must be an object
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(5000):  # past the encoder's own recursion limit: still a named refusal
        inner["k"] = inner = {}
    assert outcome(deep) is None


# ---- staging ----------------------------------------------------------------------------------


class ShoutingDraft(Draft):
    """A Draft subclass whose `who` is computed: read through the generic attribute lookup."""

    def __getattribute__(self, name: str) -> Any:
        return "SHOUTING" if name == "who" else super().__getattribute__(name)


class BrokenDraft(Draft):
    """A Draft whose `kind` raises when read."""

    def __getattribute__(self, name: str) -> Any:
        if name == "kind":
            raise RuntimeError("kind exploded")
        return super().__getattribute__(name)


who_texts = st.sampled_from(["runtime", "lab/room1", 'a"b\\c', "é😀", "\x00\x1f\x7f", "", "\ud800"])
times = st.none() | st.sampled_from([0, -1, I64_MIN, (1 << 63) - 1, 1 << 63, True]) | st.integers(0, 1 << 45)
CLOCK = 1_700_000_000_000


@st.composite
def drafts(draw: st.DrawFn) -> Draft:
    kind = draw(st.sampled_from(["tool_result", "steer_received", "x_foreign_kind"]))
    data = draw(st.fixed_dictionaries({"text": strings}) | plain_payloads | exotic_payloads())
    return Draft(
        draw(st.sampled_from([*RUNS, "not-a-run"])),
        draw(who_texts),
        kind,
        data,
        addr=draw(st.none() | st.sampled_from([*ADDRS, "/abs"])),
        ig=draw(st.booleans()),
        t=draw(times),
    )


def reference_stage(batch: list[Draft], seq: int, head: str) -> tuple[str, Any]:
    """The records of `batch` built line by line: the writer's draft check, then `encode_line`
    (which checks the payload) and `chain_hash`; or the first draft's refusal, as the writer
    names it (`drafts[i]...`)."""
    records = []
    for i, d in enumerate(batch):
        t = CLOCK if d.t is None else d.t
        try:
            check_draft(d, t, i)
            env = Envelope(
                v=FORMAT_VERSION, run=d.run, seq=seq, prev=head, t=t, who=d.who, addr=d.addr, kind=d.kind,
                data=d.data_object(), ig=d.ig,
            )  # fmt: skip
            raw = encode_line(env)
        except RunfoldError as exc:
            subject = exc.subject if exc.subject.startswith("drafts[") else f"drafts[{i}].{exc.subject}"
            return "refused", (exc.code, subject)
        head = chain_hash(raw)
        records.append(Record(env, raw, head))
        seq += 1
    return "records", records


def stage_outcome(w: Ledger, batch: list[Draft]) -> tuple[str, Any]:
    try:
        return "records", w.stage(batch)
    except RunfoldError as exc:
        return "refused", (exc.code, exc.subject)


@settings(max_examples=80)
@given(batches=st.lists(st.lists(drafts(), min_size=1, max_size=5), min_size=1, max_size=4))
def test_staging_gives_the_records_of_lines_encoded_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[Draft]]
) -> None:
    """Each batch is staged twice: the second time the writer's caches know its runs and addresses."""
    root = tmp_path_factory.mktemp("stage")
    saved_clock = ledger_module.now_ms
    ledger_module.now_ms = lambda: CLOCK
    try:
        with Ledger.create(root) as w:
            for batch in batches:
                for _ in range(2):
                    seq = w.next_seq + w.staged
                    head = w._pending[-1].hash if w._pending else w.head
                    want = reference_stage(batch, seq, head)
                    got = stage_outcome(w, batch)
                    assert got[0] == want[0] and (got[0] == "records" or got == want)
                    if got[0] == "records":
                        assert got[1] == want[1]
                        for r in got[1]:
                            assert type(r) is Record and type(r.env) is Envelope
                            plain = msgspec.structs.replace(r.env, data=json.loads(json.dumps(r.env.data)))
                            assert r.raw == reference_encode_line(plain)
            w.flush()
        assert verify_path(root).lines == 1 + sum(
            len(b) for b in batches for _ in range(2) if reference_stage(b, 0, HEAD)[0] == "records"
        )
    finally:
        ledger_module.now_ms = saved_clock


def test_a_computed_attribute_is_read_as_the_draft_gives_it(tmp_path: Path) -> None:
    with Ledger.create(tmp_path) as w:
        records = w.append([ShoutingDraft(RUNS[0], "ignored", "tool_result", {"n": None})] * 2)
    assert [r.env.who for r in records] == ["SHOUTING", "SHOUTING"]
    assert verify_path(tmp_path).lines == 3


def test_a_bad_draft_is_named_and_nothing_is_staged(tmp_path: Path) -> None:
    good = Draft(RUNS[0], "person", "steer_received", {"source": "user", "text": "ok"})
    with Ledger.create(tmp_path) as w:
        w.append([good])
        for bad, field in [
            (Draft(RUNS[0], "person", "x_unknown_kind", {"source": "user", "text": "ok"}), "drafts[2].kind"),
            (
                Draft(RUNS[0], "person", "steer_received", {"source": "user", "text": 1.5}),
                "drafts[2].data.text",
            ),
        ]:
            with pytest.raises(RunfoldError) as err:
                w.stage([good, good, bad])
            assert err.value.code is ErrorCode.INVALID_ARGS and err.value.subject.startswith(field)
            assert w.staged == 0


def test_an_error_raised_by_a_draft_propagates_and_leaves_the_writer_sound(tmp_path: Path) -> None:
    good = Draft(RUNS[0], "w", "tool_result", {"text": "fine"})
    broken = BrokenDraft(RUNS[0], "w", "tool_result", {"text": "boom"})
    with Ledger.create(tmp_path) as w:
        w.append([good])
        for _ in range(3):
            with pytest.raises(RuntimeError, match="kind exploded"):
                w.stage([good, broken])
            assert w.staged == 0
        w.append([good, good])  # the shared hasher was left clean: these hashes verify
    assert verify_path(tmp_path).lines == 4


def test_subclasses_with_their_own_conversions_are_written_as_their_values() -> None:
    """A str or int subclass whose __str__/__int__ says something else is still written as the
    value it holds (what `json.dumps` writes), never as what its conversion returns."""

    class Loud(str):
        def __str__(self) -> str:
            return "WEIRD"

    class Off(int):
        def __int__(self) -> int:
            return 99

    line = encode_line(envelope({Loud("k"): [Loud("s"), Off(7)]}))
    assert line.endswith(b'"data":{"k":["s",7]}}')
