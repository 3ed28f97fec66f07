"""Compaction over a long run: a scripted model calls a tool every turn that returns 4 KB, under a
32k-token window, for 10,000 turns (DESIGN.md §10).

Usage: python bench/compaction.py [--quick] [--turns N] [--json PATH]. It reports: every request
within its budget (measured as the trigger measures, `runtime.compaction.request_measures`), the
number of compactions by strategy, per-turn CPU time and ledger bytes of the last 10% of the
turns after the first compaction against the first 10% (flat: within 10%), and whether replay
rebuilds every request byte-exact. Then, per dialect, a shorter run (`--cache-turns`, default a
quarter of the turns, at most 400) through the official SDK against the provider test server, whose usage computes prompt-cache
reads as each provider documents them (`tests/provider_server/cache.py`): the share of input
tokens read from the cache, from the usage recorded in the ledger, on the request before a
compaction, the first request after it, the one after that, and the others. `--quick` runs 400
turns.
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


@dataclass
class BenchModel:
    """A scripted model without a script: a `blob` call per turn until `turns`, then an answer;
    a summary call gets a short summary. Usage is bytes/4 for input (as the scripted provider)."""

    turns: int
    dialect: str = "anthropic"
    model: str = "bench-model"
    settings: CallSettings = field(default_factory=lambda: CallSettings(max_tokens=1024))
    done: int = 0

    async def complete(self, request: Request, on_delta: StreamCallback | None = None) -> Reply:
        usage = Usage(input=len(request.body_bytes) // 4, output=20)
        if SUMMARY_ASK.encode() in request.body_bytes:
            return Reply([{"kind": "text", "text": f"Read parts 0 to {self.done - 1}; each is lorem ipsum."}], "end_turn", usage)
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
    cache: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per dialect: per-mille of input tokens read from the prompt cache on the request `before`
    a compaction, `at` (the first after it), `after` (the second after it), on the `others`, and
    on the `summary` calls; `requests` and `compactions` counted."""

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
    )


DIALECTS = ("anthropic", "openai-chat", "openai-responses")
TESTS_DIR = Path(__file__).resolve().parents[1] / "tests"


def responder(turns: int) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    """What the provider test server answers in place of a script, as `BenchModel` does: a
    `blob` call per turn until `turns`, then the answer; a summary call gets a short summary.
    No usage: the server computes it, cache reads and writes included."""
    done = [0]

    def answer(dialect: str, body: dict[str, Any]) -> dict[str, Any]:
        if SUMMARY_ASK in json.dumps(body, ensure_ascii=False):
            return {"content": [{"kind": "text", "text": f"Read parts 0 to {done[0] - 1}; each is lorem ipsum."}]}
        if done[0] >= turns:
            return {"content": [{"kind": "text", "text": "done"}]}
        n = done[0]
        done[0] += 1
        return {"content": [{"kind": "tool_use", "id": f"c{n}", "name": "blob", "input": json.dumps({"n": n})}]}

    return answer


def cache_shares(lines: Sequence[Record]) -> dict[str, int]:
    """Per-mille of input tokens read from the prompt cache, from the usage of each
    `model_returned` (see `Result.cache`), token-weighted per class."""
    requests: list[tuple[bool, int, int]] = []  # (after a compaction, cache_read, input tokens)
    summary = [0, 0]
    compacted = False
    purpose: str | None = None
    compactions = 0
    for rec in lines:
        if rec.kind_name == "context_changed" and rec.env.data.get("region") == "conversation":
            if "failed" not in rec.env.data:
                compacted = True
                compactions += 1
        elif rec.kind_name == "model_called":
            purpose = rec.env.data.get("purpose")
        elif rec.kind_name == "model_returned":
            u = rec.env.data.get("usage") or {}
            read = int(u.get("cache_read", 0))
            total = read + int(u.get("input", 0)) + int(u.get("cache_write", 0))
            if purpose == "compaction":
                summary[0] += read
                summary[1] += total
            else:
                requests.append((compacted, read, total))
                compacted = False
    classes: dict[str, list[int]] = {k: [0, 0] for k in ("before", "at", "after", "others")}
    for k, (at, read, total) in enumerate(requests):
        marks = []
        if at:
            marks.append("at")
        if k + 1 < len(requests) and requests[k + 1][0]:
            marks.append("before")
        if k >= 1 and requests[k - 1][0] and not at:
            marks.append("after")
        for name in marks or ["others"]:
            classes[name][0] += read
            classes[name][1] += total
    out = {name: 1000 * read // max(1, total) for name, (read, total) in classes.items()}
    out["summary"] = 1000 * summary[0] // max(1, summary[1])
    out["requests"] = len(requests) + sum(1 for r in lines if r.kind_name == "model_called" and r.env.data.get("purpose") == "compaction")
    out["compactions"] = compactions
    return out


async def measure_cache(turns: int, root: Path, dialect: str) -> dict[str, int]:
    """`turns` turns of the benchmark through the official SDK of `dialect` against the
    provider test server; the prompt-cache shares of its ledger (`cache_shares`)."""
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))
    from provider_server import ProviderServer

    ws = Workspace.init(root)
    (root / ".runfold" / "config.toml").write_text(CONFIG)
    with ProviderServer(responder=responder(turns), prompt_cache=True) as server:
        if dialect == "anthropic":
            from runfold.providers.anthropic import AnthropicProvider

            provider: Any = AnthropicProvider("bench-model", api_key="k", base_url=server.anthropic_url, max_tokens=1024, stream=False)
        elif dialect == "openai-chat":
            from runfold.providers.openai_chat import OpenAIChatProvider

            provider = OpenAIChatProvider("bench-model", api_key="k", base_url=server.openai_url, max_tokens=1024, stream=False)
        else:
            from runfold.providers.openai_responses import OpenAIResponsesProvider

            provider = OpenAIResponsesProvider("bench-model", api_key="k", base_url=server.openai_url, max_tokens=1024, stream=False)
        try:
            out = await ws.arun("read every part", model=provider, tools=[blob], builtin_tools=False)
        finally:
            await provider.aclose()
    if out.completion != "done":
        raise RuntimeError(f"the {dialect} run ended {out.completion}: {out.reason}")
    shares = cache_shares(ws.records(run=out.run_id))
    ws.close()
    return shares


def lines_of(r: Result) -> list[str]:
    return [
        f"turns: {r.turns} in {r.seconds:.1f} s; window {WINDOW} tokens, conversation budget {r.budget}",
        f"compactions: {r.compactions or 'none'}",
        f"requests over budget: {r.over_budget} (largest conversation {r.max_tokens} tokens)",
        f"per-turn CPU after the first compaction: first 10% {r.cpu_us_first:.0f} µs, last 10% {r.cpu_us_last:.0f} µs",
        f"per-turn ledger bytes: first 10% {r.bytes_first:.0f}, last 10% {r.bytes_last:.0f}",
        f"flat (within 10%): {'met' if r.flat else 'NOT met'}",
        f"replay: {r.replay_summary}",
        *(
            f"input tokens read from the prompt cache ({dialect}, {c['requests']} requests, "
            f"{c['compactions']} compactions): {c['before']}‰ before a compaction, {c['at']}‰ at it, "
            f"{c['after']}‰ after it, {c['others']}‰ on the others, {c['summary']}‰ on summary calls"
            for dialect, c in r.cache.items()
        ),
    ]


def main(argv: Sequence[str] | None = None, emit: Callable[[str], None] = print) -> Result:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="400 turns")
    ap.add_argument("--turns", type=int, help="turns (overrides --quick)")
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument(
        "--cache-turns", type=int, help="turns of each prompt-cache run (default: a quarter of --turns, at most 400; 0: none)"
    )
    args = ap.parse_args(argv)
    turns = args.turns or (400 if args.quick else 10_000)
    cache_turns = min(400, turns // 4) if args.cache_turns is None else args.cache_turns
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(measure(turns, Path(tmp) / "ws"))
        if cache_turns:
            for dialect in DIALECTS:
                result.cache[dialect] = asyncio.run(measure_cache(cache_turns, Path(tmp) / dialect, dialect))
    for line in lines_of(result):
        emit(line)
    if args.json:
        data: dict[str, Any] = {**asdict(result), "flat": result.flat}
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    return result


if __name__ == "__main__":
    r = main()
    sys.exit(0 if r.replay_exact and not r.over_budget else 1)
