"""`search` on a linear-time engine: a catastrophic pattern cannot hold the process, a cancelled
search stops, constructs RE2 cannot run are refused by name, and the lines found are the lines
Python's `re` finds for every pattern both engines run.

The process-level test runs a real `runfold run` whose model asks for `search` with `(a|a)*b`
(exponential on a backtracking engine) over thousands of 8 MiB files, sends Ctrl-C while the
search runs, and checks the cancel lands: the process ends cancelled, the search's outcome is
unknown (it was stopped mid-execution), long before the scan would have finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.api import Workspace
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.tools import ToolContext
from runfold.tools.builtin import SEARCH
from runfold.tools.search import compile_pattern, matching_lines


def call(ctx: ToolContext, **args: Any) -> dict[str, Any]:
    return asyncio.run(SEARCH.invoke(SEARCH.validate(args), ctx))


def refused(ctx: ToolContext, pattern: str) -> RunfoldError:
    with pytest.raises(RunfoldError) as info:
        call(ctx, pattern=pattern, regex=True)
    assert info.value.code is ErrorCode.INVALID_ARGS and info.value.subject == "argument `pattern`"
    return info.value


def test_a_catastrophic_pattern_finishes(ctx: ToolContext, room: Path) -> None:
    (room / "a.txt").write_text(("a" * 29 + "\n") * 8 + "aab\n")
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(out=call(ctx, pattern="(a|a)*b", regex=True)))
    worker.start()
    worker.join(timeout=60)  # a backtracking engine needs ~2^29 steps per line
    assert not worker.is_alive(), "the search is still running"
    assert box["out"]["matches"] == [{"path": "a.txt", "line": 9, "text": "aab"}]


@pytest.mark.parametrize(
    ("pattern", "named", "instead"),
    [
        (r"(\w+) \1", "backreference `\\1`", "compare the repeats"),
        (r"(?P<w>\w+) (?P=w)", "named backreference", "compare the repeats"),
        (r"foo(?=bar)", "lookahead", "`foobar`"),
        (r"foo(?!bar)", "negative lookahead", "wider pattern"),
        (r"(?<=foo)bar", "lookbehind", "`foobar`"),
        (r"(?<!foo)bar", "negative lookbehind", "wider pattern"),
        (r"(?>a+)b", "atomic group", "`(a+)`"),
        (r"a++b", "possessive quantifier", "use `+`"),
        (r"end\Z", "`\\Z`", "use `$`"),
        (r"a{1001}", "at most 1000", "smaller count"),
        (r"(unclosed", "regular expression is invalid", "regex=false"),
    ],
)
def test_what_re2_cannot_run_is_refused_by_name(
    ctx: ToolContext, pattern: str, named: str, instead: str
) -> None:
    err = refused(ctx, pattern)
    assert named in err.recovery and instead in err.recovery, err.recovery
    assert "RE2" in err.recovery


def test_plain_text_is_literal_and_never_spans_lines(ctx: ToolContext, room: Path) -> None:
    (room / "f.txt").write_text("a.b\naxb\r\nend\n")
    assert [m["line"] for m in call(ctx, pattern="a.b")["matches"]] == [1]
    assert [m["text"] for m in call(ctx, pattern="a.b", regex=True)["matches"]] == ["a.b", "axb"]
    assert call(ctx, pattern="b\nend")["matches"] == []
    assert call(ctx, pattern=r"b\s+end", regex=True)["matches"] == []
    assert [m["line"] for m in call(ctx, pattern="^end$", regex=True)["matches"]] == [3]


def test_a_set_stop_flag_ends_the_scan() -> None:
    stop = threading.Event()
    program = compile_pattern("x", regex=False)
    lines = matching_lines(program, b"x\n" * 1000, stop)
    assert next(lines) == (1, b"x")
    stop.set()
    assert list(lines) == []


_LINE = st.text(alphabet="ab\r\n é", max_size=12)
_PATTERNS = ["a", "ab*", "^b", "a$", "(a|b)+é", "", "^$", " ", r"\s", "[^a]", "é"]


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=12), st.sampled_from(_PATTERNS))
def test_the_lines_found_are_the_lines_python_re_finds(parts: list[str], pattern: str) -> None:
    text = "\n".join(parts)
    data = text.encode()
    expected = [i for i, line in enumerate(text.split("\n"), 1) if re.search(pattern, line)]
    if text.endswith("\n") or text == "":
        expected = [i for i in expected if i <= text.count("\n")]  # no line after a final newline
    program = compile_pattern(pattern or "^", regex=True)
    found = list(matching_lines(program, data, threading.Event()))
    assert [n for n, _ in found] == expected
    assert all(b"\n" not in line and line == data.split(b"\n")[n - 1] for n, line in found)


# ---- a real run, cancelled mid-search ---------------------------------------------------------


def _wait_until_it_reads(proc: subprocess.Popen[bytes], path: Path) -> None:
    """Poll the process's open files until it has `path` open, for at most 10 s (the tool's lines
    are durable only after the wave, so the ledger cannot tell that the search runs; a search
    stuck in one regular expression opened its file once, long ago)."""
    fds = Path(f"/proc/{proc.pid}/fd")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        with contextlib.suppress(OSError):
            if any(os.path.realpath(fd) == os.path.realpath(path) for fd in fds.iterdir()):
                return
        time.sleep(0.005)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="POSIX signals and /proc")
def test_ctrl_c_lands_while_search_runs_a_catastrophic_pattern(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    big = root / "big.txt"
    with open(big, "wb") as f:  # 8 MiB of the lines `(a|a)*b` backtracks on
        f.write((b"a" * 29 + b"\n") * (8 * 1024 * 1024 // 30 - 1))
    for i in range(10_000):  # minutes of scanning even for a linear engine
        (root / f"l{i:05}.txt").symlink_to(big)
    call_ = {
        "kind": "tool_use",
        "id": "s1",
        "name": "search",
        "input": json.dumps({"pattern": "(a|a)*b", "regex": True}),
    }
    script = tmp_path / "s.jsonl"
    script.write_text(
        json.dumps({"content": [call_]})
        + "\n"
        + json.dumps({"content": [{"kind": "text", "text": "never"}]})
        + "\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "find b", "--model", f"script:{script}", "--events"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    for raw in proc.stdout:  # model_called is durable before the (instant) scripted reply
        event = json.loads(raw)
        run = event["run"]
        if event["kind"] == "model_called":
            break
    _wait_until_it_reads(proc, big)  # the search is under way
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=90)  # the scan alone would take minutes
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("Ctrl-C did not land while search ran") from None
    assert proc.returncode == 6, err
    ws = Workspace.open(root)
    lines = ws.records(run=run)
    assert [r.kind_name for r in lines][-3:] == ["cancel_received", "handoff_written", "run_frozen"]
    (result,) = [r.env.data for r in lines if r.kind_name == "tool_result"]
    assert result["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN", result  # stopped mid-execution
