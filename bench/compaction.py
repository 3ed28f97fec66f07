"""Compaction over a long run: a scripted model calls a tool every turn that returns 4 KB, under a
32k-token window, for 10,000 turns (DESIGN.md §10).

Usage: python bench/compaction.py [--quick] [--turns N] [--json PATH]. It reports: every request
within its budget (measured as the trigger measures, `runtime.compaction.request_measures`), the
number of compactions by strategy, per-turn CPU time and ledger bytes of the last 10% of the
turns after the first compaction against the first 10% (flat: within 10%), and whether replay
rebuilds every request byte-exact; and the share of each request's bytes that open like the
previous request's (what a provider's prefix cache could serve) after a compaction and
otherwise — the provider test server only echoes scripted usage, so the share is computed from
the request bytes. `--quick` runs 400 turns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runfold.api import Workspace
from runfold.core.compaction import SUMMARY_ASK
from runfold.core.locator import CasLocator, parse_locator
from runfold.core.records import Record
from runfold.providers.base import CallSettings, Reply, Request, StreamCallback, Usage
from runfold.runtime.compaction import prefix_bytes, request_measures
from runfold.runtime.prefix import Prefix
from runfold.store.cas import Cas

WINDOW = 32_768
RESULT_BYTES = 4096
CONFIG = f"""\
[context]
keep_waves = 2

[models."bench-model"]
context_window = {WINDOW}
max_output_tokens = 1024
"""


def blob(n: int) -> str:
    """Return 4 KB of text for part `n`.

    Args:
        n: The part to return.
    """
    head = f"part {n}: "
    return (head + "lorem ipsum dolor sit amet " * (RESULT_BYTES // 27 + 1))[:RESULT_BYTES]


def common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes `a` and `b` share."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # the largest n with a[:n] == b[:n] (binary search, memcmp speed)
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class BenchModel:
    """A scripted model without a script: a `blob` call per turn until `turns`, then an answer;
    a summary call gets a short summary. Usage is bytes/4 for input (as the scripted provider)."""

    turns: int
    dialect: str = "anthropic"
    model: str = "bench-model"
    settings: CallSettings = field(default_factory=lambda: CallSettings(max_tokens=1024))
    done: int = 0
    shares: list[int] = field(default_factory=list)
    """Per request of the run's conversation: per-mille of its bytes that open with the same
    bytes as the previous such request (what a prefix cache could serve)."""
    previous: bytes = b""

    async def complete(self, request: Request, on_delta: StreamCallback | None = None) -> Reply:
        usage = Usage(input=len(request.body_bytes) // 4, output=20)
        if SUMMARY_ASK.encode() in request.body_bytes:
            return Reply([{"kind": "text", "text": f"Read parts 0 to {self.done - 1}; each is lorem ipsum."}], "end_turn", usage)
        body = request.body_bytes
        self.shares.append(1000 * common_prefix(self.previous, body) // max(1, len(body)))
        self.previous = body
        if self.done >= self.turns:
            return Reply([{"kind": "text", "text": "done"}], "end_turn", usage)
        n = self.done
        self.done += 1
        call = {"kind": "tool_use", "id": f"c{n}", "name": "blob", "input": json.dumps({"n": n})}
        return Reply([call], "tool_use", usage)  # type: ignore[list-item]

    async def aclose(self) -> None:
        return None


@dataclass
class Result:
    turns: int
    compactions: dict[str, int]
    over_budget: int
    budget: int
    max_tokens: int
    cpu_us_first: float
    cpu_us_last: float
    bytes_first: float
    bytes_last: float
    replay_exact: bool
    replay_summary: str
    seconds: float
    cacheable_after: int = 0
    cacheable_else: int = 0

    @property
    def flat(self) -> bool:
        return self.cpu_us_last <= 1.1 * self.cpu_us_first and self.bytes_last <= 1.1 * self.bytes_first


async def measure(turns: int, root: Path) -> Result:
    """Run the benchmark once in a fresh workspace under `root`."""
    ws = Workspace.init(root)
    (root / ".runfold" / "config.toml").write_text(CONFIG)
    marks: list[tuple[float, int]] = []
    written = [0]

    def on_event(rec: Record) -> None:
        if rec.kind_name == "prompt_shape_compared":
            marks.append((time.process_time(), written[0]))
        written[0] += len(rec.raw) + 1

    t0 = time.perf_counter()
    model = BenchModel(turns)
    out = await ws.arun("read every part", model=model, tools=[blob], builtin_tools=False, on_event=on_event)
    seconds = time.perf_counter() - t0
    if out.completion != "done":
        raise RuntimeError(f"the run ended {out.completion}: {out.reason}")
    lines = ws.records(run=out.run_id)
    compactions: dict[str, int] = {}
    first_change = None
    for rec in lines:
        if rec.kind_name == "context_changed" and "failed" not in rec.env.data:
            s = str(rec.env.data.get("strategy"))
            compactions[s] = compactions.get(s, 0) + 1
            if first_change is None:
                first_change = rec.seq
    assembled = next(r for r in lines if r.kind_name == "prompt_assembled")
    loc = parse_locator(str(assembled.env.data["prefix"]))
    assert isinstance(loc, CasLocator)
    plen = prefix_bytes(Prefix.load(Cas(root).get_locator(loc), "bench"))
    budget = next((int(r.env.data["budget"]) for r in lines if r.kind_name == "context_changed"), 0)
    measures = [t for _, t, summary in request_measures(lines, plen) if not summary]
    over = sum(1 for t in measures if budget and t > budget)
    # per-turn CPU and ledger bytes between successive assemblies, after the first compaction
    shape_seqs = [r.seq for r in lines if r.kind_name == "prompt_shape_compared"]
    start = next((i for i, s in enumerate(shape_seqs) if first_change is not None and s > first_change), 0)
    steps = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(marks[start:], marks[start + 1 :], strict=False)]
    k = max(1, len(steps) // 10)
    first, last = steps[:k], steps[-k:]
    shapes = [str(r.env.data["conversation"]) for r in lines if r.kind_name == "prompt_shape_compared"]
    after = [sh for sh, kind in zip(model.shares, shapes, strict=False) if kind == "rewritten"]
    other = [sh for sh, kind in zip(model.shares, shapes, strict=False) if kind == "extended"]
    report = ws.replay(out.run_id)
    ws.close()
    return Result(
        turns=turns,
        compactions=compactions,
        over_budget=over,
        budget=budget,
        max_tokens=max(measures) if measures else 0,
        cpu_us_first=1e6 * sum(c for c, _ in first) / len(first),
        cpu_us_last=1e6 * sum(c for c, _ in last) / len(last),
        bytes_first=sum(b for _, b in first) / len(first),
        bytes_last=sum(b for _, b in last) / len(last),
        replay_exact=report.ok,
        replay_summary=report.summary(),
        seconds=seconds,
        cacheable_after=sum(after) // max(1, len(after)),
        cacheable_else=sum(other) // max(1, len(other)),
    )


def lines_of(r: Result) -> list[str]:
    return [
        f"turns: {r.turns} in {r.seconds:.1f} s; window {WINDOW} tokens, conversation budget {r.budget}",
        f"compactions: {r.compactions or 'none'}",
        f"requests over budget: {r.over_budget} (largest conversation {r.max_tokens} tokens)",
        f"per-turn CPU after the first compaction: first 10% {r.cpu_us_first:.0f} µs, last 10% {r.cpu_us_last:.0f} µs",
        f"per-turn ledger bytes: first 10% {r.bytes_first:.0f}, last 10% {r.bytes_last:.0f}",
        f"flat (within 10%): {'met' if r.flat else 'NOT met'}",
        f"request bytes a prefix cache could serve: {r.cacheable_after}‰ on the request after a "
        f"compaction, {r.cacheable_else}‰ on the others",
        f"replay: {r.replay_summary}",
    ]


def main(argv: Sequence[str] | None = None, emit: Callable[[str], None] = print) -> Result:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="400 turns")
    ap.add_argument("--turns", type=int, help="turns (overrides --quick)")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    turns = args.turns or (400 if args.quick else 10_000)
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(measure(turns, Path(tmp) / "ws"))
    for line in lines_of(result):
        emit(line)
    if args.json:
        data: dict[str, Any] = {**asdict(result), "flat": result.flat}
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    return result


if __name__ == "__main__":
    r = main()
    sys.exit(0 if r.replay_exact and not r.over_budget else 1)
