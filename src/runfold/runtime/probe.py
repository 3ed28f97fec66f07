"""Asking the handoff probe (DESIGN.md §4 `eval_run`): each question is a one-turn fork of the
predecessor's last line and of the successor's last line, run with no tools by one model, so
every question and answer is in the ledger like any run; then `eval_run` (on the successor)
records the answers and what was kept and lost (`runfold.core.probe.judge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from runfold.core.errors import invalid_args
from runfold.core.kinds import Kind
from runfold.core.messages import reply_blocks
from runfold.core.payloads import RunStarted
from runfold.core.probe import Probe, judge
from runfold.core.records import Draft, Record
from runfold.providers.base import Provider
from runfold.runtime.spec import RunSpec
from runfold.store.view import LedgerWriter

if TYPE_CHECKING:
    from runfold.runtime.loop_io import RunOutcome

RUNTIME = "runtime"


class ProbeHost(Protocol):
    """What the probe needs of its workspace (`runfold.api.Workspace` is one)."""

    def resolve_run(self, prefix: str) -> str: ...

    def records(self, run: str | None = None, *, limit: int | None = None) -> list[Record]: ...

    def writer(self, *, resume: bool = True) -> AbstractContextManager[LedgerWriter]: ...

    async def arun_spec(self, spec: RunSpec) -> RunOutcome: ...


def answer_of(lines: Sequence[Record]) -> str:
    """The text of a run's last model reply (its text blocks joined by blank lines; empty when
    it has none)."""
    for rec in reversed(lines):
        if rec.env.kind == Kind.MODEL_RETURNED.value:
            data = rec.env.data if isinstance(rec.env.data, dict) else {}
            blocks = reply_blocks(data.get("message"))
            return "\n\n".join(b["text"] for b in blocks if b["kind"] == "text" and b["text"].strip())
    return ""


async def ask(host: ProbeHost, probe: Probe, run: str, provider: Provider) -> list[str]:
    """Each question of `probe` asked of `run`'s last state: a fork of `run` at its last line
    with the question as its task, no tools and one turn; the answers, in question order."""
    at = host.records(run)[-1].seq
    answers = []
    for q in probe.questions:
        spec = RunSpec(q.ask, model=provider, fork=(run, at), builtin_tools=False, max_turns=1, dispatched_by=RUNTIME)
        outcome = await host.arun_spec(spec)
        answers.append(answer_of(host.records(outcome.run_id)))
    return answers


async def probe_handoff(host: ProbeHost, probe: Probe, successor: str, provider: Provider) -> Record:
    """Ask `probe` of the last state of `successor`'s predecessor and of `successor`'s own, then
    append the `eval_run` line to `successor` (author `runtime`) and return it. Raises
    `E_INVALID_ARGS` when the run is no successor (it has no `predecessor`), and the errors of a
    run (`arun_spec`)."""
    rid = host.resolve_run(successor)
    first = host.records(rid, limit=1)[0]
    predecessor = first.typed(RunStarted).predecessor
    if not predecessor:
        raise invalid_args(
            "probe the handoff",
            f"run {rid}",
            "probe a successor (`runfold continue RUN --probe FILE` makes one): this run continues none",
        )
    before = await ask(host, probe, predecessor, provider)
    after = await ask(host, probe, rid, provider)
    payload = judge(probe, predecessor, before, after)
    with host.writer() as ledger:
        return ledger.append([Draft(rid, RUNTIME, Kind.EVAL_RUN.value, payload, addr=first.env.addr)])[0]


__all__ = ["ProbeHost", "answer_of", "ask", "probe_handoff"]
