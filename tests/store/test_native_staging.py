"""The C staging core (`runfold.core._staging`, issue 2 goal (a)) against its Python twins.

`encode_payloads` must give orjson's OPT_SORT_KEYS bytes exactly for every value of its fast
subset, and None for anything else (never other bytes); `stage_lines` must give the records the
Python loop of `Ledger.stage` gives (same bytes, hashes, envelopes, errors). The extension must
be built and active here (CI installs with a compiler); set RUNFOLD_NATIVE_ABSENT_OK=1 only
where it is meant to be missing. Memory and reference counts must not grow over 100,000 lines.
"""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blake3
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_store_props import EDGE_INTS

from runfold.core import canonical
from runfold.core.canonical import (
    FORMAT_VERSION,
    I64_MIN,
    MAX_DEPTH,
    U64_MAX,
    Envelope,
    check_json,
    encode_json,
    encode_line,
)
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.kinds import KNOWN_KIND_NAMES
from runfold.core.records import Draft, Record
from runfold.store import ledger as ledger_module
from runfold.store.ledger import Ledger
from runfold.store.verify import verify_path

native: Any = canonical.native
needs_native = pytest.mark.skipif(native is None, reason="the C extension runfold.core._staging is not built")

RUNS = ["0190f6a2-7c4a-7bbb-9d1e-000000000001", "00000000-0000-0000-0000-000000000000"]
ADDRS = ["lab/room1", "é/😀", 'a b/c"d']


def test_the_extension_is_built_and_active() -> None:
    """A silent build failure (optional=True only warns) must fail CI, not slow it down."""
    if os.environ.get("RUNFOLD_NATIVE_ABSENT_OK") == "1":
        pytest.skip("RUNFOLD_NATIVE_ABSENT_OK=1: this install is meant to run without the C extension")
    assert native is not None, "runfold.core._staging did not import: was a C compiler missing at install?"
    assert canonical.NATIVE is True
    assert native.__file__.endswith((".so", ".pyd"))
    assert ledger_module._native_stage_lines is native.stage_lines


@pytest.fixture
def python_path() -> Iterator[None]:
    """Force the Python reference path for the duration of a test."""
    saved = canonical.NATIVE
    canonical.NATIVE = False
    try:
        yield
    finally:
        canonical.NATIVE = saved


# ---- encode_payloads ------------------------------------------------------------------------


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
    | st.sampled_from([orjson.Fragment(b"1"), orjson.Fragment(b'{"a":1}'), b"bytes", object()])
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
    """A plain payload with one value the fast path must decline planted somewhere in it."""
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


def orjson_bytes(data: Any) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)


@needs_native
@settings(max_examples=200)
@given(batch=st.lists(plain_payloads, max_size=5))
def test_plain_payloads_get_orjsons_bytes_or_none_exactly_when_refused(batch: list[dict[str, Any]]) -> None:
    got = native.encode_payloads(batch)
    if all(accepted(d) for d in batch):
        assert got == [orjson_bytes(d) for d in batch]
    else:  # a lone surrogate or an integer beyond i64/u64 somewhere
        assert got is None


@needs_native
@settings(max_examples=150)
@given(batch=st.lists(plain_payloads, max_size=3), bad=exotic_payloads(), at=st.integers(0, 3))
def test_anything_outside_the_fast_subset_gives_none(batch: list[Any], bad: dict[Any, Any], at: int) -> None:
    batch.insert(at, bad)
    assert native.encode_payloads(batch) is None
    got = canonical.encode_datas(batch)  # the orjson proof then decides, as before
    assert got is None or got == [encode_json(d) for d in batch]


@needs_native
@pytest.mark.parametrize("wrap", ["dict", "list", "tuple"])
def test_nesting_to_the_cap_is_encoded_and_one_beyond_is_declined(wrap: str) -> None:
    def nest(depth: int) -> dict[str, Any]:
        value: Any = "leaf"
        for _ in range(depth - 1):
            value = {"k": value} if wrap == "dict" else [value] if wrap == "list" else (value,)
        return {"k": value}

    at_cap, beyond = nest(MAX_DEPTH), nest(MAX_DEPTH + 1)
    assert accepted(at_cap) and not accepted(beyond)
    assert native.encode_payloads([at_cap]) == [orjson_bytes(at_cap)]
    assert native.encode_payloads([beyond]) is None


@needs_native
@pytest.mark.parametrize("char", [chr(c) for c in range(0x80)] + ["\u2028", "\U0001f600", "\xe9"])
def test_every_ascii_character_is_escaped_as_orjson_escapes_it(char: str) -> None:
    """Each character alone, at each position of an 8-byte word (the ASCII scan reads words)."""
    for pad in range(9):
        value = {char: "a" * pad + char + "b" * (16 - pad)}
        assert native.encode_payloads([value]) == [orjson_bytes(value)]


@needs_native
def test_the_edges_of_the_subset() -> None:
    cases: list[Any] = [
        {"i64": I64_MIN, "u64": U64_MAX, "t": True, "f": False, "n": None, "e": "", "": []},
        {
            "tuple": (1, (2, [3]), ()),
            "empty": {},
            "keys": {"b": 1, "a": 2, "é": 3, "Z": 4, "😀": 5, "\uffff": 6},
        },
        {str(i): i for i in range(40)},  # more keys than the on-stack sort
    ]
    assert native.encode_payloads(cases) == [orjson_bytes(d) for d in cases]
    for bad in [I64_MIN - 1, U64_MAX + 1, 1.0, "\ud800", IntSub(1), StrSub("s"), DictSub(), ListSub()]:
        assert native.encode_payloads([{"ok": 1}, {"x": bad}]) is None
    assert native.encode_payloads([DictSub(a=1)]) is None
    assert native.encode_payloads([]) == []
    with pytest.raises(TypeError):
        native.encode_payloads(({"a": 1},))


def test_encode_datas_gives_the_same_bytes_on_both_paths() -> None:
    batch = [{"a": [1, {"b": "c"}]}, {"x": "\x00é"}]
    native_got = canonical.encode_datas(batch)
    saved = canonical.NATIVE
    canonical.NATIVE = False
    try:
        assert canonical.encode_datas(batch) == native_got == [encode_json(d) for d in batch]
    finally:
        canonical.NATIVE = saved


# ---- stage_lines ----------------------------------------------------------------------------


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


@st.composite
def drafts(draw: st.DrawFn) -> Draft:
    kind = draw(st.sampled_from(["tool_result", "steer_received", "x_foreign_kind"]))
    data = draw(st.fixed_dictionaries({"text": strings}) | plain_payloads)
    return Draft(
        draw(st.sampled_from([*RUNS, "not-a-run"])),
        draw(who_texts),
        kind,
        data,
        addr=draw(st.none() | st.sampled_from([*ADDRS, "/abs"])),
        ig=draw(st.booleans()),
        t=draw(times),
    )


def stage_outcome(w: Ledger, batch: list[Draft]) -> tuple[str, Any]:
    """What `stage` did: its records, or the error it raised (type, code and subject)."""
    try:
        return "records", w.stage(batch)
    except RunfoldError as exc:
        return "refused", (exc.code, exc.subject)
    except Exception as exc:
        return "raised", (type(exc), str(exc))


def assert_same_records(a: list[Record], b: list[Record]) -> None:
    assert a == b
    for x, y in zip(a, b, strict=True):
        assert type(x) is type(y) is Record and type(x.env) is type(y.env) is Envelope
        assert [type(f) for f in x.env] == [type(f) for f in y.env]
        assert x.raw == encode_line(x.env)


@needs_native
@settings(max_examples=60)
@given(batches=st.lists(st.lists(drafts(), min_size=1, max_size=5), min_size=1, max_size=4))
def test_native_and_python_staging_give_the_same_records(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[Draft]]
) -> None:
    """Each batch is staged twice on each ledger: the second time the native ledger's caches know
    the runs and addresses, so its C loop makes the records (the first time its Python loop may)."""
    root = tmp_path_factory.mktemp("stage")
    saved_clock = ledger_module.now_ms
    ledger_module.now_ms = lambda: 1_700_000_000_000  # t None -> the same clock on both sides
    try:
        with Ledger.create(root / "native") as wn, Ledger.create(root / "python") as wp:
            for batch in batches:
                for _ in range(2):
                    got = stage_outcome(wn, batch)
                    canonical.NATIVE = False
                    try:
                        want = stage_outcome(wp, batch)
                    finally:
                        canonical.NATIVE = True
                    assert got[0] == want[0] and (got[0] == "records" or got == want)
                    if got[0] == "records":
                        assert_same_records(got[1], want[1])
            assert wn.staged == wp.staged
            wn.flush()
            wp.flush()
        assert verify_path(root / "native").head == verify_path(root / "python").head
    finally:
        ledger_module.now_ms = saved_clock


def direct_args(w: Ledger, batch: list[Any], hasher: Any = None) -> tuple[Any, ...]:
    """The arguments `Ledger.stage` gives `stage_lines` for `batch` on writer `w`."""
    datas = [d.data for d in batch]
    encoded = canonical.encode_datas(datas)
    return (
        batch, datas, encoded, w.next_seq + w.staged, w._pending[-1].hash if w._pending else w.head,
        1_700_000_000_000, FORMAT_VERSION, w._runs_ok, w._addrs_ok, KNOWN_KIND_NAMES,
        Envelope, Record, blake3.blake3() if hasher is None else hasher,
    )  # fmt: skip


@needs_native
def test_the_c_loop_makes_the_records_of_known_drafts_and_declines_the_rest(tmp_path: Path) -> None:
    good = [
        Draft(RUNS[0], "lab/room1", "tool_result", {"text": "x"}, addr="lab/room1", t=5),
        Draft(RUNS[1], "runtime", "steer_received", {"source": "user", "text": "é"}, ig=True),
        ShoutingDraft(RUNS[0], "ignored", "tool_result", {"n": None}),
    ]
    with Ledger.create(tmp_path) as w:
        w.stage(good)  # teaches the caches
        got = native.stage_lines(*direct_args(w, good))
        assert got is not None and len(got) == 3 and got[2].env.who == "SHOUTING"
        for bad in [
            Draft("0190F6A2-7C4A-7BBB-9D1E-000000000001", "w", "tool_result", {}),  # uppercase: not cached
            Draft(RUNS[0], "", "tool_result", {}),
            Draft(RUNS[0], "w", "x_unknown", {}, ig=True),
            Draft(RUNS[0], "w", "tool_result", {}, addr="lab/other"),
            Draft(RUNS[0], "w", "tool_result", {}, t=True),
            Draft(RUNS[0], "w", "tool_result", {}, t=1 << 63),
            Draft(RUNS[0], "w", "tool_result", {}, ig=1),  # type: ignore[arg-type]
            Draft(RUNS[0], "\ud800", "tool_result", {}),
        ]:
            assert native.stage_lines(*direct_args(w, [good[0], bad])) is None, bad
        assert w._runs_ok == {RUNS[0], RUNS[1]}  # the C loop never changes the caches


@needs_native
def test_a_bad_draft_is_named_the_same_way_on_both_paths(tmp_path: Path) -> None:
    good = Draft(RUNS[0], "person", "steer_received", {"source": "user", "text": "ok"})
    bad = Draft(RUNS[0], "person", "x_unknown_kind", {"source": "user", "text": "ok"})
    errors = []
    for force_python in (False, True):
        with Ledger.create(tmp_path / str(force_python)) as w:
            w.append([good])
            canonical.NATIVE = not force_python
            try:
                with pytest.raises(RunfoldError) as err:
                    w.stage([good, good, bad])
            finally:
                canonical.NATIVE = True
            assert w.staged == 0
            errors.append((err.value.code, err.value.action, err.value.subject))
    assert errors[0] == errors[1] and errors[0][0] is ErrorCode.INVALID_ARGS and "drafts[2]" in errors[0][2]


@needs_native
def test_an_error_inside_the_c_loop_propagates_and_leaves_the_writer_sound(tmp_path: Path) -> None:
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


class FailingHasher:
    """A hasher whose digest raises: stage_lines must still reset it and raise the digest error."""

    def __init__(self) -> None:
        self.inner = blake3.blake3()
        self.resets = 0

    def update(self, data: bytes) -> None:
        self.inner.update(data)

    def digest(self) -> bytes:
        raise ValueError("digest failed")

    def reset(self) -> None:
        self.resets += 1
        self.inner.reset()


@needs_native
def test_a_hasher_error_propagates_and_the_hasher_is_reset(tmp_path: Path) -> None:
    good = [Draft(RUNS[0], "w", "tool_result", {"text": "fine"})]
    with Ledger.create(tmp_path) as w:
        w.stage(good)
        hasher = FailingHasher()
        with pytest.raises(ValueError, match="digest failed"):
            native.stage_lines(*direct_args(w, good, hasher))
        assert hasher.resets == 1
        with pytest.raises(TypeError):
            native.stage_lines(*direct_args(w, good)[:12])
        with pytest.raises(TypeError):
            args = list(direct_args(w, good))
            args[10] = dict
            native.stage_lines(*args)


# ---- memory and reference counts ------------------------------------------------------------


LEAK_LINES = int(os.environ.get("RUNFOLD_LEAK_LINES", "100000"))


@needs_native
def test_staging_many_lines_keeps_memory_and_reference_counts_flat(tmp_path: Path) -> None:
    """100,000 lines through the C loop (batches of 100, each dropped before the next): traced
    memory and the reference counts of the objects every line shares stay where they were."""
    run, who, kind, addr = RUNS[0], "lab/room1", "tool_result", "lab/room1"
    datas = [{"text": f"line {i}", "list": [i, None, True], "nested": {"k": "é"}} for i in range(100)]
    batch = [Draft(run, who, kind, d, addr=addr) for d in datas]
    shared = [run, who, kind, addr, *datas, datas[0]["list"]]
    with Ledger.create(tmp_path) as w:
        w._next_seq = 1 << 40  # seq beyond the small-int cache: each line's seq is a new int object
        for _ in range(20):  # warm up: caches, buffers, free lists
            w.stage(batch)
            w._pending = []
        gc.collect()
        shared.append(w.head)  # every batch starts from it (the staged lines are dropped)
        refs = [sys.getrefcount(o) for o in shared]
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(LEAK_LINES // len(batch)):
                w.stage(batch)
                w._pending = []
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert [sys.getrefcount(o) for o in shared] == refs
        assert grown < 256 * 1024, f"traced memory grew by {grown} bytes over {LEAK_LINES} lines"
