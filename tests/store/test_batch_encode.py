"""The writer proves a batch's lines canonical in one call (`lines_proven`): it must accept
each line's `encode_line` bytes exactly, or decline whenever any payload is one `check_json`
refuses, so that the per-line path names the bad field. A staged batch must hold the same bytes
as lines encoded one by one with `encode_line`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_store_props import json_values, payloads, texts, with_float

from runfold.core.canonical import FORMAT_VERSION, MAX_DEPTH, Envelope, encode_json, encode_line, lines_proven
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.records import Draft
from runfold.store.ledger import Ledger
from runfold.store.verify import verify_path

RUN = "0190f6a2-7c4a-7bbb-9d1e-000000000001"


def _refused(data: dict[str, Any]) -> bool:
    try:
        encode_line_of(data)
    except RunfoldError:
        return True
    return False


def encode_line_of(data: dict[str, Any]) -> bytes:
    return encode_line(
        Envelope(v=FORMAT_VERSION, run=RUN, seq=0, prev="0" * 64, t=0, who="w", kind="tool_result", data=data)
    )


def _envelope(data: dict[str, Any], seq: int = 0) -> Envelope:
    return Envelope(
        v=FORMAT_VERSION, run=RUN, seq=seq, prev="0" * 64, t=0, who="w", kind="tool_result", data=data
    )


def encode_datas(datas: list[dict[str, Any]]) -> list[bytes] | None:
    """What the writer's one-call path makes of a batch: each line's bytes, or None when
    `lines_proven` declines (or the encoder cannot write a value at all)."""
    envs = [_envelope(d, i) for i, d in enumerate(datas)]
    try:
        raws = [encode_json(e) for e in envs]
    except (TypeError, ValueError):
        return None
    return raws if lines_proven([e.data for e in envs], raws) else None


def lines_of(datas: list[dict[str, Any]]) -> list[bytes]:
    """The reference: each line encoded (and checked) on its own."""
    return [encode_line(_envelope(d, i)) for i, d in enumerate(datas)]


@given(batch=st.lists(payloads, max_size=12))
def test_a_batch_of_valid_payloads_gives_each_payloads_own_bytes(batch: list[dict[str, Any]]) -> None:
    assert encode_datas(batch) == lines_of(batch)


@given(
    batch=st.lists(payloads, max_size=6),
    planted=with_float(),
    at=st.integers(0, 6),
)
def test_one_float_anywhere_declines_the_whole_batch(
    batch: list[dict[str, Any]], planted: tuple[dict[str, Any], str], at: int
) -> None:
    batch.insert(min(at, len(batch)), planted[0])
    assert encode_datas(batch) is None


@pytest.mark.parametrize(
    "bad",
    [
        {"x": 1.5},
        {"x": [1, {"y": 1e16}]},
        {"x": math.nan},
        {"x": -math.inf},
        {"x": 1 << 64},
        {"x": -(1 << 63) - 1},
        {"x": "\ud800"},
        {1: "non-str key"},
        {"x": object()},
    ],
    ids=["float", "exponent", "nan", "-inf", "u64+1", "i64-1", "surrogate", "int-key", "object"],
)
def test_each_refused_payload_declines_the_batch(bad: dict[Any, Any]) -> None:
    assert encode_datas([{"ok": 1}, bad, {"ok": 2}]) is None


def _nested(depth: int) -> dict[str, Any]:
    value: Any = 0
    for _ in range(depth - 1):
        value = {"k": value}
    return {"k": value}


def test_nesting_at_the_cap_is_encoded_and_past_it_declined() -> None:
    at_cap = _nested(MAX_DEPTH)
    assert encode_datas([{"a": 1}, at_cap]) == lines_of([{"a": 1}, at_cap])
    assert encode_datas([{"a": 1}, _nested(MAX_DEPTH + 1)]) is None


@given(text=texts, value=json_values)
def test_payload_text_that_looks_like_a_line_boundary_stays_inside_its_payload(text: str, value: Any) -> None:
    batch = [{"a": text + "},{", "b": value}, {"}]": text, "0\n,": "]"}, {}]
    assert encode_datas(batch) == lines_of(batch)


def test_an_empty_batch_is_empty() -> None:
    assert encode_datas([]) == []


@given(batch=st.lists(payloads | with_float().map(lambda p: p[0]), min_size=1, max_size=8))
def test_a_staged_batch_holds_the_bytes_of_lines_encoded_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, batch: list[dict[str, Any]]
) -> None:
    ws: Path = tmp_path_factory.mktemp("ws")
    drafts = [Draft(RUN, "lab/room1", "tool_result", d, addr="lab/room1") for d in batch]
    with Ledger.create(ws) as w:
        head = w.head
        if any(_refused(d) for d in batch):
            with pytest.raises(RunfoldError):
                w.stage(drafts)
            assert w.staged == 0
            return
        records = w.stage(drafts)
        for r in records:
            assert r.env.prev == head
            assert r.raw == encode_line(r.env)
            head = r.hash


@pytest.mark.parametrize(
    "raw",
    [
        b'{"b":1, "a":2}',  # a space
        b'{"b":1,"a":2}',  # keys out of order
        b'{"a":1,"a":2}',  # a duplicate key
        b'"\\u0041"',  # an escape orjson does not write
        b"-0",  # an integer spelled two ways
        b"[1,\n2]",  # a raw newline, like the batch separator
        b"0\n,{}",  # the separator itself
    ],
)
def test_a_fragment_of_bytes_orjson_would_not_write_is_refused_naming_the_draft(
    tmp_path: Path, raw: bytes
) -> None:
    """An `orjson.Fragment` or a `msgspec.Raw` in a payload holds raw bytes (the encoder splices
    a Raw in as it is): the one-call proof must not let non-canonical bytes through (the writer
    would write a line `verify` refuses)."""
    for extra in (orjson.Fragment(raw), msgspec.Raw(raw)):
        _refused_naming_the_draft(
            tmp_path / type(extra).__name__, {"source": "user", "text": "x", "extra": extra}
        )


def _refused_naming_the_draft(tmp_path: Path, bad: dict[str, Any]) -> None:
    assert encode_datas([{"ok": 1}, bad]) is None
    with pytest.raises(RunfoldError) as err:
        encode_line_of(bad)
    assert err.value.code is ErrorCode.INVALID_ARGS and err.value.subject == "data.extra"
    with Ledger.create(tmp_path) as w:
        before = w.segments()[-1].read_bytes()
        good = {"source": "user", "text": "fine"}
        with pytest.raises(RunfoldError) as err:
            w.append([Draft(RUN, "person", "steer_received", d) for d in (good, bad, good)])
        assert err.value.subject == "drafts[1].data.extra"
        assert w.staged == 0 and w.segments()[-1].read_bytes() == before
    assert verify_path(tmp_path).lines == 1


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (1.5, "data.text"),
        (2**64, "data.text"),
        ("\ud800", "data.text"),
        ({"deep": {1: 2}}, "data.text.deep[1]"),
    ],
)
def test_a_batch_mixing_good_and_bad_drafts_writes_nothing_and_names_the_draft(
    tmp_path: Path, value: Any, field: str
) -> None:
    good = Draft(RUN, "person", "steer_received", {"source": "user", "text": "ok"})
    bad = Draft(RUN, "person", "steer_received", {"source": "user", "text": value})
    with Ledger.create(tmp_path) as w:
        with pytest.raises(RunfoldError) as err:
            w.append([good, good, bad, good])
        assert err.value.code is ErrorCode.INVALID_ARGS and err.value.subject == f"drafts[2].{field}"
        assert w.staged == 0 and w.next_seq == 1
    assert verify_path(tmp_path).lines == 1
