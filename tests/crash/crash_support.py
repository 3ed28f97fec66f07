"""Checks shared by the crash, safe-point and field-failure tests.

`history_problems(ws)` lists everything that would make a history unusable after a crash, a
cancel or a steer: a tool call without exactly one result, a run without `run_frozen` or with
lines after it, a request that some dialect refuses, a request that does not extend the one
before it. Every request of every run is rebuilt from the ledger (as replay does) and rendered
in all three dialects, not only the run's own, because any model may continue any run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from cli.cli_support import Result
from runfold.api import Workspace
from runfold.core.fold import RunFolder, lineage
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.kinds import Kind
from runfold.core.locator import CasLocator, parse_locator
from runfold.core.records import Record
from runfold.core.render import DIALECTS, render_request
from runfold.core.validate import validate
from runfold.runtime.prefix import Prefix
from runfold.store.cas import Cas

LIST_KEY = {"anthropic": "messages", "openai-chat": "messages", "openai-responses": "input"}
"""Where each dialect's body keeps the conversation."""


@dataclass(frozen=True)
class Rendered:
    """One `model_called` of a run rebuilt from the ledger: its seq and the body in every dialect."""

    seq: int
    bodies: dict[str, dict[str, Any]]


def _strip_cache_marks(value: Any) -> Any:
    """The value without Anthropic `cache_control` marks (the tail breakpoint moves by design)."""
    if isinstance(value, dict):
        return {k: _strip_cache_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_marks(v) for v in value]
    return value


def message_bytes(body: dict[str, Any], dialect: str) -> list[bytes]:
    """The rendered conversation items of a request body, each as its JSON bytes (cache marks
    removed), for the prefix comparison."""
    return [orjson.dumps(_strip_cache_marks(m)) for m in body[LIST_KEY[dialect]]]


def rendered_requests(ws: Workspace, run: str) -> list[Rendered]:
    """Every `model_called` of `run`, its request rebuilt from the ledger and the CAS (the run
    fold at that line plus the frozen prefix) and rendered in all three dialects."""
    lin = lineage(ws.lineage_lines(run), run)
    folder = RunFolder()
    cas = Cas(ws.root)
    prefixes: dict[str, Prefix] = {}
    out: list[Rendered] = []
    for index, step in enumerate(lin.steps):
        for rec in step.lines:
            folder.feed(rec, inherits=index > 0 and rec is step.lines[0])
            if rec.run != run or not rec.known or rec.kind is not Kind.MODEL_CALLED:
                continue
            assembled = folder.prefix
            assert assembled is not None and assembled.prefix, f"seq {rec.seq}: no stored prefix"
            prefix = prefixes.get(assembled.prefix)
            if prefix is None:
                loc = parse_locator(assembled.prefix)
                assert isinstance(loc, CasLocator)
                prefix = prefixes[assembled.prefix] = Prefix.load(cas.get_locator(loc))
            conv = folder.conversation
            assert conv is not None
            spec = prefix.spec(conv.messages)
            out.append(Rendered(rec.seq, {d: render_request(d, spec).body for d in DIALECTS}))
    return out


def request_problems(ws: Workspace, run: str) -> list[str]:
    """Every request of `run` validated in all three dialects, and request n+1 checked to extend
    request n byte-for-byte: every conversation item of n equal in n+1 (cache marks aside). The
    one exception DESIGN.md §6 allows, results reopening the sent user message after an empty
    reply, is reported too: the scripts of these tests never reply empty."""
    problems: list[str] = []
    previous: Rendered | None = None
    for req in rendered_requests(ws, run):
        for dialect, body in req.bodies.items():
            for v in validate(dialect, body):
                problems.append(f"run {run} seq {req.seq} {dialect}: {v.rule}: {v}")
            if previous is not None:
                before = message_bytes(previous.bodies[dialect], dialect)
                after = message_bytes(body, dialect)
                if len(after) < len(before) or after[: len(before) - 1] != before[:-1]:
                    problems.append(
                        f"run {run} seq {req.seq} {dialect}: request does not extend the one at "
                        f"seq {previous.seq} (an earlier message was edited or dropped)"
                    )
                elif before and after[len(before) - 1] != before[-1]:
                    problems.append(
                        f"run {run} seq {req.seq} {dialect}: the last message of seq {previous.seq} "
                        "was edited after it was sent"
                    )
        previous = req
    return problems


def _runs(records: list[Record]) -> Iterator[tuple[str, list[Record]]]:
    by_run: dict[str, list[Record]] = {}
    for r in records:
        if r.run != WORKSPACE_RUN:
            by_run.setdefault(r.run, []).append(r)
    yield from by_run.items()


def structure_problems(ws: Workspace, only: str | None = None) -> list[str]:
    """Every tool call has exactly one result, written before the run's freeze; every run (or
    only the run `only`) has exactly one `run_frozen`, its last line."""
    problems: list[str] = []
    for run, lines in _runs(ws.records()):
        if only is not None and run != only:
            continue
        kinds = [r.kind_name for r in lines]
        if kinds.count("run_frozen") != 1 or kinds[-1] != "run_frozen":
            problems.append(f"run {run}: run_frozen count {kinds.count('run_frozen')}, last line {kinds[-1]}")
        called = [r.env.data["id"] for r in lines if r.kind_name == "tool_called"]
        answered = [r.env.data["tool_use_id"] for r in lines if r.kind_name == "tool_result"]
        for cid in called:
            if answered.count(cid) != 1:
                problems.append(f"run {run}: tool call {cid} has {answered.count(cid)} results")
        for cid in answered:
            if cid not in called:
                problems.append(f"run {run}: result for {cid} that was never called")
    return problems


def history_problems(ws: Workspace) -> list[str]:
    """`structure_problems` plus `request_problems` for every run of the workspace."""
    problems = structure_problems(ws)
    for run in ws.runs():
        problems += request_problems(ws, run)
    return problems


def tail_problems(ws: Workspace, run: str) -> list[str]:
    """The conversation a successor of `run` would inherit, rendered in every dialect and
    validated (what `continue` sends first, before its own opening)."""
    view = ws.request_at(run)
    return [f"run {run} tail {d}: {v}" for d, vs in view.verdicts.items() for v in vs]


_COMMAND: Any = None


def cli(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """`runfold ARGS` in this process through typer's CliRunner, like `cli_support.run_cli`, but
    with the click command built once (typer rebuilds it on every invoke, ~0.1 s each: the kill
    test runs ~1500 commands)."""
    global _COMMAND
    import typer.testing
    from typer.main import get_command

    from runfold.cli.main import app

    if _COMMAND is None:
        _COMMAND = get_command(app)
    run_env: dict[str, str | None] = {"RUNFOLD_WORKSPACE": None, "NO_COLOR": "1", "COLUMNS": "200"}
    run_env.update(env or {})
    build = typer.testing._get_command
    typer.testing._get_command = lambda _app: _COMMAND  # type: ignore[assignment]
    try:
        with contextlib.chdir(cwd):
            result = typer.testing.CliRunner().invoke(app, [str(a) for a in args], env=run_env)
    finally:
        typer.testing._get_command = build
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Result(result.exit_code, result.stdout, result.stderr)
