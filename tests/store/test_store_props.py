"""Property tests of the line format and verification (DESIGN.md §3).

Canonical bytes round-trip for arbitrary payloads, every float is refused naming its path, and
one flipped byte anywhere in a ledger stops verification at that line.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfold.core.canonical import (
    FORMAT_VERSION,
    I64_MIN,
    MAX_DEPTH,
    U64_MAX,
    Envelope,
    chain_hash,
    encode_line,
)
from runfold.core.chain import Fault, LineChecker, LineRefused, parse_envelope
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.ids import WORKSPACE_RUN, ZERO_HASH
from runfold.store.verify import verify_path

EDGE_INTS = [I64_MIN, I64_MIN + 1, -1, 0, 1, (1 << 63) - 1, 1 << 63, U64_MAX - 1, U64_MAX]
ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(I64_MIN, U64_MAX))
texts = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["\x00\x01\x1f\x7f", '"\\', "\u2028\u2029", "😀𝄞\U0010ffff", "\b\t\n\f\r", "</letter>"]
)
scalars = st.none() | st.booleans() | ints | texts
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=30,
)
payloads = st.dictionaries(texts, json_values, max_size=6)
run_ids = st.uuids().map(str)
kinds = st.sampled_from(["steer_received", "tool_result", "model_returned", "log_truncated"])


def nested(depth: int) -> dict[str, Any]:
    """A `data` object whose nesting depth is `depth` (the data object itself is depth 1)."""
    value: Any = {"leaf": 1}
    for i in range(depth - 1):
        value = [value] if i % 2 == 0 and i < depth - 2 else {"k": value}
    assert isinstance(value, dict)
    return value


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(
    data=payloads,
    run=run_ids,
    kind=kinds,
    seq=st.integers(0, 1 << 40),
    t=st.integers(0, (1 << 63) - 1),
    who=texts.filter(bool),
    addr=st.none() | st.sampled_from(["lab/room1", "a/b/ç"]),
    ig=st.booleans(),
)
def test_canonical_bytes_round_trip(
    data: dict[str, Any], run: str, kind: str, seq: int, t: int, who: str, addr: str | None, ig: bool
) -> None:
    env = Envelope(
        v=FORMAT_VERSION,
        run=run,
        seq=seq,
        prev=ZERO_HASH,
        t=t,
        who=who,
        kind=kind,
        data=data,
        addr=addr,
        ig=ig,
    )
    raw = encode_line(env)
    assert b"\n" not in raw
    parsed = parse_envelope(raw)
    assert parsed == env
    assert encode_line(parsed) == raw
    checker = LineChecker(seq, ZERO_HASH)
    got, known = checker.check(raw, 1)
    assert got == env and known
    assert checker.head == chain_hash(raw) and checker.expected_seq == seq + 1
    # keys sorted by code point, raw UTF-8, only " \ and controls escaped
    assert raw.endswith(
        b'"data":' + orjson.dumps(data, option=orjson.OPT_SORT_KEYS) + (b',"ig":true}' if ig else b"}")
    )


@pytest.mark.parametrize("depth", [1, 2, MAX_DEPTH - 1, MAX_DEPTH])
def test_nesting_up_to_the_cap_round_trips(depth: int) -> None:
    data = nested(depth)
    assert depth_of(data) == depth
    env = Envelope(
        v=FORMAT_VERSION,
        run=WORKSPACE_RUN,
        seq=0,
        prev=ZERO_HASH,
        t=0,
        who="runtime",
        kind="tool_result",
        data=data,
    )
    raw = encode_line(env)
    assert LineChecker().check(raw, 1)[0] == env


def test_nesting_past_the_cap_is_refused() -> None:
    data = nested(MAX_DEPTH + 1)
    env = Envelope(
        v=FORMAT_VERSION,
        run=WORKSPACE_RUN,
        seq=0,
        prev=ZERO_HASH,
        t=0,
        who="runtime",
        kind="tool_result",
        data=data,
    )
    with pytest.raises(RunfoldError) as err:
        encode_line(env)
    assert err.value.code is ErrorCode.INVALID_ARGS
    raw = encode_line(env, checked=True)  # what a foreign writer could produce
    with pytest.raises(LineRefused) as refused:
        LineChecker().check(raw, 1)
    assert refused.value.fault is Fault.NOT_CANONICAL


names = st.text("abcxyz_", min_size=1, max_size=6)


@st.composite
def with_float(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A payload with one float planted somewhere, and the field path check_json names."""
    base = draw(payloads)
    value = draw(st.floats(allow_nan=False, allow_infinity=False))
    path = "data"
    holder: Any = base
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            key = draw(names)
            holder[key] = {}
            holder, path = holder[key], f"{path}.{key}"
        else:
            key = draw(names)
            holder[key] = [None]
            holder, path = holder[key], f"{path}.{key}"
            path = f"{path}[0]"
            holder[0] = {}
            holder = holder[0]
    key = draw(names)
    holder[key] = value
    return base, f"{path}.{key}"


@settings(max_examples=200, deadline=None)
@given(planted=with_float())
def test_every_float_is_refused_naming_its_path(planted: tuple[dict[str, Any], str]) -> None:
    data, path = planted
    env = Envelope(
        v=FORMAT_VERSION,
        run=WORKSPACE_RUN,
        seq=0,
        prev=ZERO_HASH,
        t=0,
        who="runtime",
        kind="tool_result",
        data=data,
    )
    with pytest.raises(RunfoldError) as err:
        encode_line(env)
    assert err.value.code is ErrorCode.INVALID_ARGS and err.value.subject == path
    # and a line that carries it anyway (bytes from elsewhere) does not verify
    raw = encode_line(env, checked=True)
    with pytest.raises(LineRefused) as refused:
        LineChecker().check(raw, 1)
    assert refused.value.fault is Fault.NOT_CANONICAL and path in refused.value.detail


def _ledger(n: int) -> list[bytes]:
    lines: list[bytes] = []
    head = ZERO_HASH
    for seq in range(n):
        env = Envelope(
            v=FORMAT_VERSION,
            run="0190f6a2-7c4a-7bbb-9d1e-00000000000a",
            seq=seq,
            prev=head,
            t=1_700_000_000_000 + seq,
            who="lab/room1",
            kind="tool_result" if seq % 2 else "steer_received",
            data={"n": seq, "text": f"line {seq} ünïcode 😀", "nested": {"b": [1, 2], "a": None}},
            addr="lab/room1" if seq % 3 == 0 else None,
        )
        raw = encode_line(env)
        lines.append(raw)
        head = chain_hash(raw)
    return lines


LINES = _ledger(6)
ORIGINAL = b"".join(line + b"\n" for line in LINES)
ORIGINAL_HEAD = chain_hash(LINES[-1])
STARTS = [sum(len(x) + 1 for x in LINES[:i]) for i in range(len(LINES))]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pos=st.integers(0, len(ORIGINAL) - 1), delta=st.integers(1, 255))
def test_one_flipped_byte_stops_verification_at_its_line(pos: int, delta: int) -> None:
    damaged = bytearray(ORIGINAL)
    damaged[pos] = (damaged[pos] + delta) % 256
    line_no = max(i for i, s in enumerate(STARTS) if s <= pos) + 1  # 1-based line of the flip
    n = len(LINES)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ledger.jsonl"
        path.write_bytes(bytes(damaged))
        try:
            report = verify_path(path)
        except LineRefused as exc:
            if exc.line_no == line_no:
                return
            # a changed second-to-last line cannot be told from a changed prev in the last line:
            # nothing follows the last line to say which of the two is intact
            assert line_no == n - 1 and exc.line_no == n and exc.fault is Fault.CHAIN_BREAK, (line_no, exc)
            return
    # no refusal: only the last line can be damaged without a line after it to notice
    assert line_no == n, (line_no, report)
    if report.torn_tail_bytes:
        assert report.torn_tail_bytes == len(ORIGINAL) - STARTS[-1] and report.lines == n - 1
    else:
        # the last line still verifies on its own: only the head (BLAKE3 of that line) tells
        assert report.lines == n and report.head != ORIGINAL_HEAD


def test_a_first_line_claiming_a_later_seq_after_the_zero_hash_is_blamed_itself(tmp_path: Path) -> None:
    """Found by the flipped-byte property (seq 0 → 1 in line 1): only seq 0 follows the zero
    hash, so such a line is damage in line 1, not a gap at line 2."""
    damaged = ORIGINAL.replace(b'"seq":0,', b'"seq":1,', 1)
    assert damaged != ORIGINAL
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(damaged)
    with pytest.raises(LineRefused) as refused:
        verify_path(path)
    assert refused.value.line_no == 1 and refused.value.fault is Fault.SEQ_GAP
