"""The offload rule, pure (DESIGN.md §10): a result is offloaded iff its window content is larger
than `offload_bytes`; the head is a prefix cut on a UTF-8 boundary; the run fold puts the head and
locator in the window whether the line comes before its `tool_result` (as the runtime writes it)
or after it inside the wave."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from test_fold import _run_with
from test_fold_support import check_valid, lines_of, rid

from runfold.core.fold import fold_run
from runfold.core.offload import offload_payload, should_offload, stub_bytes
from runfold.core.window import ContextSettings

LOC = "cas:b3-" + "e" * 64


@given(
    threshold=st.integers(1, 300),
    delta=st.integers(-40, 40),
    head=st.integers(1, 300),
    alphabet=st.sampled_from(["x", "é", "€", "😀", "aé€😀"]),
)
def test_offload_iff_larger_than_the_threshold_and_the_head_is_a_boundary_prefix(
    threshold: int, delta: int, head: int, alphabet: str
) -> None:
    settings = ContextSettings(offload_bytes=max(threshold, head), offload_head_bytes=head)
    size = max(0, settings.offload_bytes + delta)
    content = b""
    for i in range(size):  # valid UTF-8 of at most `size` bytes, within a character of it
        ch = alphabet[i % len(alphabet)].encode()
        if len(content) + len(ch) > size:
            break
        content += ch
    smaller = stub_bytes(content, settings) < len(content)  # an offload never grows the window
    assert should_offload(content, settings) == (len(content) > settings.offload_bytes and smaller)
    off = offload_payload("c1", content, "e" * 64, settings)
    cut = off.head.encode()
    assert content.startswith(cut) and len(cut) <= head and off.bytes == len(content)
    assert len(cut) > head - 4 or len(cut) == len(content)  # never more than one character short
    assert off.locator == LOC and off.bytes_removed >= 0


def _offloaded(off: dict[str, Any]) -> dict[str, Any]:
    return {"tool_use_id": off["tool_use_id"], "locator": LOC, "head": "xx", "bytes": 61, "bytes_removed": 0}


def test_an_offload_written_before_its_result_replaces_it_even_as_the_last_result_of_the_wave() -> None:
    mem, _ = _run_with(
        [
            ("model_returned", {"message": {}, "calls": 1}),
            ("tool_called", {"id": "a", "name": "n", "args": {}}),
            ("result_offloaded", _offloaded({"tool_use_id": "a"})),
            ("tool_result", {"tool_use_id": "a", "name": "n", "result": {"big": "x" * 50}}),
        ]
    )
    fold = fold_run(lines_of(mem.records), rid(7))
    content = fold.messages[2]["content"][0]["content"]
    assert content == '{"bytes":61,"head":"xx","locator":"' + LOC + '","note":"result offloaded"}'
    assert check_valid(fold.messages) == []
