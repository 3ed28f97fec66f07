"""The fast paths of the line checker, the line encoder and the index agree with the exact ones
(DESIGN.md §3 "Verification of a line").

`LineChecker.check_fast` and the fast branch of `check` may decline a line (the exact path then
decides), but must never accept a line the exact path refuses, and must give the same envelope
and chain hash. `encode_line` must give the bytes of the reference encoder (field by field), and
`LedgerIndex.add_lines` the rows of `add` called per line.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_store_props import json_values, kinds, payloads, run_ids, texts

from runfold.core.canonical import FORMAT_VERSION, MAX_DEPTH, Envelope, chain_hash, check_data, encode_line
from runfold.core.chain import LineChecker, LineRefused
from runfold.core.errors import RunfoldError
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.kinds import KNOWN_KIND_NAMES
from runfold.store.index_file import LedgerIndex

HEAD = chain_hash(b"the line before")


def reference_encode_line(env: Envelope) -> bytes:
    """The encoder as first written: each field spelled on its own, joined in wire order."""
    parts = [
        b'{"v":',
        str(env.v).encode(),
        b',"run":',
        orjson.dumps(env.run),
        b',"seq":',
        str(env.seq).encode(),
        b',"prev":',
        orjson.dumps(env.prev),
        b',"t":',
        str(env.t).encode(),
        b',"who":',
        orjson.dumps(env.who),
    ]
    if env.addr is not None:
        parts += [b',"addr":', orjson.dumps(env.addr)]
    parts += [b',"kind":', orjson.dumps(env.kind), b',"data":']
    parts.append(orjson.dumps(env.data, option=orjson.OPT_SORT_KEYS))
    if env.ig:
        parts.append(b',"ig":true')
    parts.append(b"}")
    return b"".join(parts)


envelopes = st.builds(
    Envelope,
    v=st.integers(1, FORMAT_VERSION),
    run=run_ids | st.just(WORKSPACE_RUN),
    seq=st.integers(0, 1 << 40),
    prev=st.just(HEAD),
    t=st.integers(-(1 << 63), (1 << 63) - 1),
    who=texts,
    kind=kinds,
    data=payloads,
    addr=st.none() | st.sampled_from(["lab/room1", "a/b/ç"]) | texts,
    ig=st.booleans(),
)


@given(env=envelopes)
def test_encode_line_gives_the_reference_bytes(env: Envelope) -> None:
    try:
        expected = reference_encode_line(env)
    except orjson.JSONEncodeError:
        with pytest.raises((orjson.JSONEncodeError, RunfoldError)):
            encode_line(env)
        return
    assert encode_line(env) == expected


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_not_written_as_null(value: float) -> None:
    with pytest.raises(RunfoldError) as err:
        check_data({"ok": None, "x": [1, {"y": value}]})
    assert err.value.subject == "data.x[1].y"
    env = Envelope(
        v=FORMAT_VERSION,
        run=WORKSPACE_RUN,
        seq=0,
        prev=HEAD,
        t=0,
        who="w",
        kind="tool_result",
        data={"y": value},
    )
    with pytest.raises(RunfoldError):
        encode_line(env)


def _checker(env: Envelope) -> LineChecker:
    checker = LineChecker(env.seq, HEAD)
    checker.run_ids.add(env.run)
    return checker


def _exact(env: Envelope, raw: bytes) -> tuple[Envelope, bool, str] | str:
    checker = _checker(env)
    try:
        got, known = checker._check_exact(raw, 1)
    except LineRefused as exc:
        return exc.fault.value
    return got, known, checker.head


MUTATIONS = [
    (b'"data":{', b'"data": {'),
    (b'"ig":true', b'"ig":false'),
    (b',"kind"', b',"addr":null,"kind"'),
    (b"1", b"1.0"),
    (b"1", b"1e0"),
    (b"0", b"-0"),
    (b"1", b"18446744073709551616"),
    (b"1", b"-9223372036854775809"),
    (b"1", b"18446744073709551615"),
    (b"1", b"-9223372036854775808"),
    (b"a", b"\\u0061"),
    (b"/", b"\\/"),
    (b"true", b"1"),
    (b"null", b"0"),
    (b'"t":', b'"t":"'),
    (b'{"v":', b'{"v":"'),
    (b"}}", b"},}"),
    (b'"seq"', b'"SEQ"'),
]


@st.composite
def lines(draw: st.DrawFn) -> tuple[Envelope, bytes]:
    env = draw(envelopes)
    try:
        raw = encode_line(env)
    except (RunfoldError, orjson.JSONEncodeError):
        raw = reference_encode_line(msgspec.structs.replace(env, data={}))
        env = msgspec.structs.replace(env, data={})
    how = draw(st.integers(0, 3))
    if how == 1:  # one changed byte
        pos = draw(st.integers(0, len(raw) - 1))
        raw = raw[:pos] + bytes([(raw[pos] + draw(st.integers(1, 255))) % 256]) + raw[pos + 1 :]
    elif how == 2:  # a spelling another encoder could produce
        old, new = draw(st.sampled_from(MUTATIONS))
        if old in raw:
            nth = draw(st.integers(0, raw.count(old) - 1))
            at = -1
            for _ in range(nth + 1):
                at = raw.index(old, at + 1)
            raw = raw[:at] + new + raw[at + len(old) :]
    elif how == 3:  # data with its keys out of order, or a value of an odd shape
        data: Any = draw(st.dictionaries(texts, json_values, min_size=2, max_size=5))
        spelled = orjson.dumps(data)  # insertion order, not sorted
        raw = raw.replace(orjson.dumps(env.data, option=orjson.OPT_SORT_KEYS), spelled, 1)
    return env, raw


@settings(max_examples=400)
@given(case=lines())
def test_fast_paths_accept_only_what_the_exact_path_accepts(case: tuple[Envelope, bytes]) -> None:
    env, raw = case
    exact = _exact(env, raw)
    versions: set[int] = set()
    fast = _checker(env)
    accepted = fast.check_fast([raw], 0, versions)
    if accepted:
        assert not isinstance(exact, str), f"fast path accepted a line the exact path refuses ({exact})"
        assert (fast.head, True) == (exact[2], exact[1])
        assert versions == {exact[0].v}
    one = _checker(env)
    try:
        got = one.check(raw, 1)
    except LineRefused as exc:
        assert exact == exc.fault.value
    else:
        assert not isinstance(exact, str)
        assert got == (exact[0], exact[1]) and one.head == exact[2]


@given(env=envelopes)
def test_fast_path_accepts_every_canonical_line_of_a_known_run(env: Envelope) -> None:
    try:
        raw = encode_line(env)
    except (RunfoldError, orjson.JSONEncodeError):
        return
    checker = _checker(env)
    assert checker.check_fast([raw, raw], 0, set()) == 1  # the second line breaks the chain
    assert checker.head == chain_hash(raw) and checker.expected_seq == env.seq + 1


batches = st.lists(
    st.lists(st.tuples(st.integers(1, 5000), st.sampled_from(["r1", "r2", WORKSPACE_RUN, "r3"])), max_size=8),
    max_size=8,
)


@given(batches=batches, seg=st.integers(0, 5), off=st.integers(0, 1 << 30))
def test_index_rows_added_per_batch_equal_rows_added_per_line(
    batches: list[list[tuple[int, str]]], seg: int, off: int
) -> None:
    per_line, per_batch = LedgerIndex(None), LedgerIndex(None)
    seq = 0
    for batch in batches:
        rows = [(n, chain_hash(f"{seq + i}".encode()), run) for i, (n, run) in enumerate(batch)]
        per_batch.add_lines(seq, seg, off, rows)
        for n, digest, run in rows:
            per_line.add(seq, seg, off, n, digest, run)
            seq += 1
            off += n + 1
    assert [per_batch.entry(s) for s in range(seq + 1)] == [per_line.entry(s) for s in range(seq + 1)]
    assert per_batch.head == per_line.head and per_batch.last_position() == per_line.last_position()
    for run in ("r1", "r2", WORKSPACE_RUN, "r3"):
        assert per_batch.run_entries(run) == per_line.run_entries(run)
    assert per_batch.runs() == per_line.runs() and per_batch.next_seq == per_line.next_seq
    with pytest.raises(ValueError):
        per_batch.add_lines(seq + 1, seg, off, [(1, HEAD, "r1")])


def _line(data_json: bytes, t: bytes = b"5") -> tuple[Envelope, bytes]:
    env = Envelope(
        v=FORMAT_VERSION, run=WORKSPACE_RUN, seq=7, prev=HEAD, t=5, who="w", kind="tool_result", data={}
    )
    raw = encode_line(env).replace(b'"data":{}', b'"data":' + data_json).replace(b'"t":5', b'"t":' + t)
    return env, raw


def _deep(openers: int) -> bytes:
    return b'{"k":' + b"[" * (openers - 1) + b"1" + b"]" * (openers - 1) + b"}"


@pytest.mark.parametrize(
    ("data_json", "t"),
    [
        (b'{"x":18446744073709551616}', b"5"),
        (b'{"x":[-9223372036854775809]}', b"5"),
        (b'{"x":1.5}', b"5"),
        (b'{"x":1e3}', b"5"),
        (b"{}", b"18446744073709551616"),
        (b"{}", b"-9223372036854775809"),
        (b'{"b":1,"a":2}', b"5"),
        (b'{"a":1,"a":1}', b"5"),
        (_deep(127), b"5"),  # data nests 127 deep, one past MAX_DEPTH
    ],
)
def test_fast_path_declines_what_the_exact_path_refuses(data_json: bytes, t: bytes) -> None:
    env, raw = _line(data_json, t)
    assert isinstance(_exact(env, raw), str)
    assert _checker(env).check_fast([raw], 0, set()) == 0
    with pytest.raises(LineRefused):
        _checker(env).check(raw, 1)


@pytest.mark.parametrize(
    ("data_json", "t"),
    [
        (b'{"x":18446744073709551615}', b"5"),
        (b'{"x":[-9223372036854775808]}', b"-9223372036854775808"),
        (b"{}", b"18446744073709551615"),
        (_deep(126), b"5"),  # data nests exactly MAX_DEPTH deep
    ],
)
def test_fast_and_exact_paths_agree_at_the_edges(data_json: bytes, t: bytes) -> None:
    env, raw = _line(data_json, t)
    exact = _exact(env, raw)
    fast = _checker(env)
    accepted = fast.check_fast([raw], 0, set())
    assert accepted == (0 if isinstance(exact, str) else 1)


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 2])
def test_shortest_deep_lines_get_the_exact_answer(depth: int) -> None:
    """The fast path skips counting brackets on lines too short to nest past MAX_DEPTH; the
    shortest possible lines at and past the cap must still get the exact path's answer."""
    kind = min(KNOWN_KIND_NAMES, key=len)
    inner = b"[" * (depth - 1) + b"]" * (depth - 1)
    env = Envelope(v=FORMAT_VERSION, run=WORKSPACE_RUN, seq=0, prev=HEAD, t=0, who="", kind=kind, data={})
    raw = encode_line(env).replace(b'"data":{}', b'"data":{"":' + inner + b"}")
    exact = _exact(env, raw)
    assert isinstance(exact, str) == (depth > MAX_DEPTH)
    assert _checker(env).check_fast([raw], 0, set()) == (0 if depth > MAX_DEPTH else 1)
