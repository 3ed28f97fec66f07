"""Importing another tool's session: time per source line for each fixture transcript and for a
synthetic Claude Code session of N and 2N tool turns, beside the floor any importer pays (parsing
the same file's JSON with `json.loads`, nothing else).

Usage: python bench/importing.py [--quick] [--turns N]. It prints, per file: lines, the time of
`Workspace.import_session` (read, check, fold every run, write and fsync the ledger), µs per
source line, and its ratio to the JSON floor; then the 2N/N time ratio of the synthetic session
(about 2 when the import is linear in the session's length). `--quick` uses 100 turns.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from runfold.api import Workspace

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "transcripts"


@dataclass(frozen=True)
class Timing:
    """One file imported: its `name`, source `lines`, import and JSON-floor seconds, the report's
    counts (`replies`, `calls`, `results` over every run)."""

    name: str
    lines: int
    import_s: float
    json_s: float
    replies: int
    calls: int
    results: int

    @property
    def us_per_line(self) -> float:
        return self.import_s * 1e6 / max(self.lines, 1)

    @property
    def ratio(self) -> float:
        return self.import_s / max(self.json_s, 1e-9)


def claude_code_session(turns: int) -> str:
    """A Claude Code session of `turns` tool turns (a call and its 200-byte result each) between
    the person's request and a final text reply, linked by `parentUuid` as the CLI writes them."""
    rows: list[dict[str, object]] = []

    def add(row: dict[str, object]) -> None:
        parent = rows[-1]["uuid"] if rows else None
        stamp = "2026-01-21T06:20:30.861Z"
        rows.append({**row, "uuid": f"u{len(rows)}", "parentUuid": parent, "sessionId": "s1", "version": "2.1.14", "timestamp": stamp})  # fmt: skip

    def reply(mid: str, content: list[dict[str, object]]) -> dict[str, object]:
        usage = {"input_tokens": 5, "output_tokens": 9}
        return {"type": "assistant", "message": {"id": mid, "model": "claude-x", "role": "assistant", "content": content, "usage": usage}}  # fmt: skip

    add({"type": "user", "message": {"role": "user", "content": "Fix the failing test."}})
    for k in range(turns):
        add(
            reply(
                f"m{k}",
                [{"type": "tool_use", "id": f"t{k}", "name": "Bash", "input": {"command": f"ls {k}"}}],
            )
        )
        result = {"type": "tool_result", "tool_use_id": f"t{k}", "content": "x" * 200}
        add({"type": "user", "message": {"role": "user", "content": [result]}})
    add(reply("end", [{"type": "text", "text": "Done."}]))
    return "".join(json.dumps(r) + "\n" for r in rows)


def time_import(path: Path, root: Path, fmt: str = "auto") -> Timing:
    """Import `path` into a fresh workspace under `root` and time it against the JSON floor."""
    raw = path.read_text()
    t0 = time.perf_counter()
    if path.suffix == ".jsonl":
        [json.loads(x) for x in raw.splitlines() if x.strip()]
    else:
        json.loads(raw)
    json_s = time.perf_counter() - t0
    ws = Workspace.init(root)
    t0 = time.perf_counter()
    report = ws.import_session(path, fmt)
    import_s = time.perf_counter() - t0
    ws.close()
    runs = report.runs
    return Timing(
        path.name,
        raw.count("\n") + (0 if raw.endswith("\n") else 1),
        import_s,
        json_s,
        sum(r.replies for r in runs),
        sum(r.calls for r in runs),
        sum(r.results for r in runs),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 synthetic turns")
    parser.add_argument("--turns", type=int, default=1000, help="synthetic tool turns N (default 1000)")
    args = parser.parse_args(argv)
    turns = 100 if args.quick else args.turns
    with tempfile.TemporaryDirectory(prefix="runfold-import-bench-") as tmp:
        root = Path(tmp)
        rows = [time_import(p, root / f"ws-{p.name}") for p in sorted(FIXTURES.iterdir())]
        synthetic = []
        for n in (turns, 2 * turns):
            src = root / f"claude-code-{n}-turns.jsonl"
            src.write_text(claude_code_session(n))
            synthetic.append(time_import(src, root / f"ws-{n}", "claude-code"))
        rows += synthetic
    print(f"{'file':44} {'lines':>6} {'import':>9} {'µs/line':>8} {'json floor':>10} {'ratio':>6}")
    for r in rows:
        print(
            f"{r.name:44} {r.lines:6d} {r.import_s * 1000:7.1f}ms {r.us_per_line:8.0f} "
            f"{r.json_s * 1000:8.2f}ms {r.ratio:5.0f}x"
        )
    small, big = synthetic
    print(f"linearity: {big.name} / {small.name} = {big.import_s / small.import_s:.2f}x time for 2x turns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
