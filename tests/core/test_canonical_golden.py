"""Golden bytes for the canonical line encoding (DESIGN.md §3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runfold.core.canonical import Envelope, chain_hash, encode_line
from runfold.core.chain import Fault, LineChecker, LineRefused
from runfold.core.ids import WORKSPACE_RUN, ZERO_HASH

FIXTURE = Path(__file__).parents[1] / "fixtures" / "sprawling-golden-p0.jsonl"


def test_golden_line_bytes() -> None:
    env = Envelope(
        v=2,
        run="00000000-0000-0000-0000-000000000000",
        seq=0,
        prev=ZERO_HASH,
        t=5,
        who="runtime",
        kind="steer_received",
        data={"text": 'é "q" \\ \x00\x1f\t\n', "source": "user", "z": [1, {"b": 1, "a": -2}]},
        addr="lab/room1",
        ig=True,
    )
    assert encode_line(env) == (
        b'{"v":2,"run":"00000000-0000-0000-0000-000000000000","seq":0,"prev":"'
        + ZERO_HASH.encode()
        + b'","t":5,"who":"runtime","addr":"lab/room1","kind":"steer_received","data":{"source":"user",'
        b'"text":"\xc3\xa9 \\"q\\" \\\\ \\u0000\\u001f\\t\\n","z":[1,{"a":-2,"b":1}]},"ig":true}'
    )


def test_foreign_fixture_chain_head() -> None:
    checker = LineChecker()
    lines = FIXTURE.read_bytes().splitlines()
    for number, raw in enumerate(lines, 1):
        env, known = checker.check(raw, number)
        assert known
        assert encode_line(env) == raw
    assert checker.expected_seq == 18
    assert checker.head == "0baccd18194099432a24e6e820889eac0e3d0d524dbfd1cc8cb646f037284526"
    assert chain_hash(lines[-1]) == checker.head


@pytest.mark.parametrize(
    ("mutate", "fault"),
    [
        (lambda raw: raw.replace(b'"seq":3', b'"seq":4'), Fault.SEQ_GAP),
        (lambda raw: raw.replace(b'"v":1', b'"v":3'), Fault.VERSION_AHEAD),
        (lambda raw: raw.replace(b'"v":1', b'"v":0'), Fault.VERSION_UNSUPPORTED),
        (lambda raw: raw.replace(b'"model":"script"', b'"model" :"script"'), Fault.NOT_CANONICAL),
        (lambda raw: raw.replace(b'"kind":"model_called"', b'"kind":"model_kalled"'), Fault.UNKNOWN_KIND),
        (lambda raw: raw[:-3], Fault.NOT_A_LINE),
        (lambda raw: raw.replace(b'"t":2', b'"t":2.0'), Fault.NOT_A_LINE),
    ],
)
def test_each_fault_is_named_at_its_line(mutate, fault: Fault) -> None:  # type: ignore[no-untyped-def]
    lines = FIXTURE.read_bytes().splitlines()
    lines[3] = mutate(lines[3])
    checker = LineChecker()
    with pytest.raises(LineRefused) as err:
        for number, raw in enumerate(lines, 1):
            checker.check(raw, number)
    assert err.value.fault is fault
    assert err.value.line_no == 4
    assert "line 4" in err.value.display()


def test_float_inside_data_is_not_canonical() -> None:
    env = Envelope(
        v=2,
        run=WORKSPACE_RUN,
        seq=0,
        prev=ZERO_HASH,
        t=0,
        who="runtime",
        kind="log_truncated",
        data={"dropped_bytes": 1},
    )
    raw = encode_line(env).replace(b'"dropped_bytes":1', b'"dropped_bytes":1.5')
    with pytest.raises(LineRefused) as err:
        LineChecker().check(raw, 1)
    assert err.value.fault is Fault.NOT_CANONICAL
    assert "float" in err.value.display()


@pytest.mark.parametrize(
    "spelling",
    [b"18446744073709551616", b"-9223372036854775809", b"-0", b"1E2", b"10.0", b"01"],
)
def test_numbers_a_re_encoding_would_change_are_refused(spelling: bytes) -> None:
    env = Envelope(
        v=2,
        run=WORKSPACE_RUN,
        seq=0,
        prev=ZERO_HASH,
        t=0,
        who="runtime",
        kind="log_truncated",
        data={"dropped_bytes": 7},
    )
    raw = encode_line(env).replace(b'"dropped_bytes":7', b'"dropped_bytes":' + spelling)
    with pytest.raises(LineRefused) as err:
        LineChecker().check(raw, 1)
    assert err.value.fault in (Fault.NOT_CANONICAL, Fault.NOT_A_LINE)


def test_ig_line_without_addr_keeps_no_addr() -> None:
    env = Envelope(
        v=2,
        run=WORKSPACE_RUN,
        seq=0,
        prev=ZERO_HASH,
        t=0,
        who="runtime",
        kind="log_truncated",
        data={"dropped_bytes": 1},
        addr=None,
        ig=True,
    )
    got, known = LineChecker().check(encode_line(env), 1)
    assert got == env and known


@pytest.mark.parametrize("run", ["not-a-uuid", "0198F6A2-7C4A-7BBB-9D1E-00000000040A", ""])
def test_a_run_that_is_not_a_lowercase_uuid_is_not_a_line(run: str) -> None:
    env = Envelope(
        v=2,
        run=run,
        seq=0,
        prev=ZERO_HASH,
        t=0,
        who="runtime",
        kind="log_truncated",
        data={"dropped_bytes": 1},
    )
    with pytest.raises(LineRefused) as err:
        LineChecker().check(encode_line(env), 1)
    assert err.value.fault is Fault.NOT_A_LINE and "UUID" in err.value.display()
