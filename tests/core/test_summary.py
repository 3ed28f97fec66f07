"""The one-line summaries of `runfold log` and the web timeline: every kind has one, and odd
payloads never crash it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.core.canonical import Envelope
from runfold.core.ids import ZERO_HASH
from runfold.core.kinds import Kind
from runfold.core.payloads import PAYLOADS
from runfold.core.summary import SUMMARIZERS, head, iso_ms, summarize


def _env(kind: str, data: dict[str, object]) -> Envelope:
    return Envelope(
        v=2,
        run="0" * 8 + "-0000-0000-0000-" + "0" * 12,
        seq=0,
        prev=ZERO_HASH,
        t=0,
        who="runtime",
        kind=kind,
        data=data,
    )


def test_every_kind_has_a_summarizer() -> None:
    assert set(SUMMARIZERS) == set(Kind)


def test_default_payload_of_every_kind_summarizes() -> None:
    for kind, cls in PAYLOADS.items():
        text = summarize(_env(kind.value, cls().to_data()))
        assert "\n" not in text


def test_kind_specific_summaries() -> None:
    tool = summarize(
        _env("tool_called", {"id": "c1", "name": "read_file", "args": {}, "subject": "src/a.py"})
    )
    assert tool.startswith("read_file src/a.py")
    steer = summarize(_env("steer_received", {"source": "user", "text": "narrow\nthe   search"}))
    assert steer == 'user: "narrow the search"'
    reply = summarize(
        _env(
            "model_returned",
            {"message": {"content": []}, "calls": 2, "stop": "tool_use", "usage": {"input": 10, "output": 5}},
        )
    )
    assert reply == "calls 2 stop tool_use tokens in 10 out 5"
    frozen = summarize(
        _env("run_frozen", {"completion": "done", "evidence": [{"kind": "model_returned", "seq": 9}]})
    )
    assert frozen == "done evidence seq 9"
    waited = summarize(_env("signal_wait_ended", {"outcome": "replied", "replied": ["a", "b"], "pending": []}))
    assert waited == "ended replied 2 replies"
    short = summarize(_env("signal_wait_ended", {"outcome": "timeout", "replied": ["a"], "pending": ["b"]}))
    assert short == "ended timeout 1 reply 1 pending"
    assert summarize(_env("future_kind", {"x": 1})).startswith("(kind unknown to this build")


def test_head_cuts_long_text_with_ellipsis() -> None:
    assert head("x" * 100, 10) == '"' + "x" * 9 + '…"'


def test_iso_ms() -> None:
    assert iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert iso_ms(1_764_514_800_123) == "2025-11-30T15:00:00.123Z"
    assert iso_ms(-1) == "1969-12-31T23:59:59.999Z"
    assert iso_ms(253_402_300_800_000) == "t=253402300800000"  # year 10000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@settings(max_examples=500, deadline=None)
@given(t=st.integers(min_value=-70_000_000_000_000, max_value=270_000_000_000_000) | st.integers())
def test_iso_ms_is_what_datetime_says(t: int) -> None:
    """The pure calendar arithmetic agrees with `datetime` wherever `datetime` can say it."""
    try:
        moment = _EPOCH + timedelta(milliseconds=t)
    except OverflowError:
        assert iso_ms(t) == f"t={t}"
        return
    assert iso_ms(t) == moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(sorted(k.value for k in Kind)),
    data=st.dictionaries(
        st.sampled_from(
            [
                "name",
                "text",
                "usage",
                "evidence",
                "segments",
                "message",
                "calls",
                "source",
                "error",
                "from",
                "tools",
                "args",
            ]
        ),
        json_values,
        max_size=5,
    ),
)
def test_summaries_never_raise_on_odd_payloads(kind: str, data: dict[str, object]) -> None:
    text = summarize(_env(kind, data))
    assert isinstance(text, str)
