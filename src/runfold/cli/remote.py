"""Handing a run to `runfold serve`: when a server owns the workspace, `run`, `continue`, `fork
--run`, `fork`, `steer` and `cancel` send their work to its HTTP API instead of opening the writer.

The run is tailed through its event stream (durable lines only, resumed after a reconnect by
`Last-Event-ID`) and shown with the same live view and summary as a local run; Ctrl-C cancels that
run only (the server and its other runs go on).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from runfold.core.canonical import chain_hash
from runfold.core.chain import parse_envelope
from runfold.core.errors import ErrorCode, Retry, RunfoldError
from runfold.core.payloads import Evidence
from runfold.core.records import Record

if TYPE_CHECKING:
    import httpx

    from runfold.api import RunOutcome, Workspace
    from runfold.cli.live import LiveView
    from runfold.runtime.spec import RunSpec
    from runfold.store.serving import ServeInfo

TIMEOUT_S = 60.0
"""Seconds an API call may take before the CLI gives up on the server."""


@dataclass(frozen=True)
class ForkView:
    """A fork as `runfold fork` prints it: the new run, its mother, the seq asked for, the cut
    used, why the cut moved (None: it did not) and how many messages it inherits."""

    new_run: str
    mother: str
    asked: int
    cut: int
    moved: str | None
    messages: int


class Remote:
    """The API of the server described by `info`, through one httpx client."""

    def __init__(self, info: ServeInfo) -> None:
        import httpx

        self.info = info
        token = info.token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=info.url + "/api", headers=headers, timeout=TIMEOUT_S)

    def close(self) -> None:
        self.client.close()

    def _unreachable(self, exc: Exception) -> RunfoldError:
        return RunfoldError(
            ErrorCode.INVALID_ARGS,
            f"reach the runfold server at {self.info.url} ({type(exc).__name__})",
            f"pid {self.info.pid}",
            "check that `runfold serve` still runs in this workspace (if it died, its next start freezes its runs)",
            retry=Retry.YES,
        )

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        need: Mapping[str, type] | None = None,
        timeout: float = TIMEOUT_S,
    ) -> dict[str, Any]:
        """One API call, given `timeout` seconds; its JSON answer, which holds a value of type
        `need[key]` under every key of `need`. Raises the server's error as a `RunfoldError`, and
        `E_INVALID_ARGS` when the server does not answer or the answer is not such a JSON object
        (not runfold's API: the request may have been applied or not)."""
        import httpx

        try:
            resp = self.client.request(method, path, json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        answer = _answer(resp)
        for key, kind in (need or {}).items():
            if not isinstance(answer.get(key), kind):
                raise RunfoldError(
                    ErrorCode.INVALID_ARGS,
                    f"read the answer of the runfold server at {self.info.url} to {method} {path} "
                    f"(no {kind.__name__} under {key!r}: {resp.text[:80]!r})",
                    f"pid {self.info.pid}",
                    "check that `runfold serve` runs in this workspace and that nothing else answers at its "
                    "URL; `runfold runs` shows whether the request was applied",
                )
        return answer

    def fork(self, run: str, at: int, task: str | None) -> ForkView:
        """Fork `run` (full id) at `at` on the server, not started."""
        body: dict[str, Any] = {"at": at, **({"task": task} if task else {})}
        ans = self.call("POST", f"/runs/{run}/fork", body, need={"run": str, "mother": str, "cut": int})
        return ForkView(ans["run"], ans["mother"], at, ans["cut"], ans.get("moved"), int(ans.get("messages", 0)))

    def events(self, run: str, after: int | None) -> Iterator[Record]:
        """The durable lines of `run` after seq `after` (None: all), until the run is frozen."""
        import httpx

        headers = {"Last-Event-ID": str(after)} if after is not None else {}
        try:
            with self.client.stream("GET", f"/runs/{run}/events", headers=headers, timeout=None) as resp:
                if resp.status_code != 200:
                    resp.read()
                    _answer(resp)
                for line in resp.iter_lines():
                    if line.startswith("data: {\"v\""):
                        raw = line[len("data: ") :].encode()
                        env = parse_envelope(raw)
                        if env is not None:
                            yield Record(env, raw, chain_hash(raw))
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None


def _answer(resp: httpx.Response) -> dict[str, Any]:
    try:
        body = resp.json()
    except ValueError:
        body = None
    if resp.status_code >= 400:
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            try:
                raise RunfoldError.from_data(err)
            except (KeyError, ValueError):
                pass
        raise RunfoldError(
            ErrorCode.INTERNAL,
            f"use the runfold server (HTTP {resp.status_code})",
            str(resp.url),
            "look at the server's log; the request may not have been applied",
        )
    return body if isinstance(body, dict) else {}


def server_of(ws: Workspace) -> Remote | None:
    """The API of the server that owns `ws`, or None when none does."""
    info = ws.server()
    return Remote(info) if info is not None else None


LIST_TIMEOUT_S = 10.0
"""Seconds a command that only lists (`runfold runs`) waits for the server's queued runs."""


def queued_runs(remote: Remote, timeout: float = TIMEOUT_S) -> list[dict[str, str]]:
    """The runs queued on the server (`run`, `task`): dispatched, not started, so not in the
    ledger yet. Raises `E_INVALID_ARGS` as `Remote.call` does when the server does not answer
    within `timeout` seconds, or not as runfold's API."""
    runs = remote.call("GET", "/runs", need={"runs": list}, timeout=timeout)["runs"]
    return [
        {"run": r["run"], "task": str(r.get("task", ""))}
        for r in runs
        if isinstance(r, dict) and r.get("state") == "queued" and isinstance(r.get("run"), str)
    ]


def _model(spec_model: Any) -> str | None:
    """A model SPEC as the server should read it: a script file's path made absolute (the server
    may run elsewhere in the file system)."""
    if not isinstance(spec_model, str):
        return None
    if spec_model.startswith("script:"):
        path, sep, dialect = spec_model[len("script:") :].partition("#")
        return "script:" + os.path.abspath(path) + sep + dialect
    return spec_model


def dispatch(remote: Remote, spec: RunSpec) -> str:
    """Send `spec` to the server (a run, a fork that runs, or a successor); returns the run id.
    Raises `E_INVALID_ARGS` for what the server cannot take from the command line (`--record`),
    and the server's error."""
    return str(dispatch_answer(remote, spec)["run"])


def dispatch_answer(remote: Remote, spec: RunSpec) -> dict[str, Any]:
    """`dispatch`, answered with the server's view of the run (`run`, `state`: `running`, or
    `queued` past its `--max-runs`)."""
    if spec.record is not None:
        raise RunfoldError(
            ErrorCode.INVALID_ARGS,
            "hand the run to `runfold serve` with --record",
            "--record",
            "drop --record, or stop the server to run it in this process",
        )
    approvals = dict(spec.approvals) if spec.approvals is not None else None
    common: dict[str, Any] = {"model": _model(spec.model), "max_turns": spec.max_turns, "approvals": approvals}
    if spec.fork is not None:
        body = {**common, "task": spec.task, "at": spec.fork[1], "start": True}
        path = f"/runs/{spec.fork[0]}/fork"
    elif spec.continues is not None:
        body = {**common, "task": spec.task}
        path = f"/runs/{spec.continues}/continue"
    else:
        body = {**common, "task": spec.task, "goal": spec.goal, "room": spec.room, "agents": spec.agents or None}
        path = "/runs"
    if spec.session is not None and spec.fork is None:
        origin = spec.session.from_
        where = {"run": origin.run, "at_seq": origin.at_seq} if origin is not None else {}
        body["session"] = {"carried": spec.session.carried, **where}
    return remote.call("POST", path, {k: v for k, v in body.items() if v is not None}, need={"run": str})


def outcome_of(run: str, records: list[Record]) -> RunOutcome:
    """How the run ended, folded from its lines (as the executor's `RunOutcome` says it)."""
    from runfold.api import RunOutcome

    out = RunOutcome(run, completion="running")
    for rec in records:
        out.tally.feed(rec)
        out.lines += 1
        out.ledger_bytes += len(rec.raw) + 1
        data = rec.env.data
        if rec.env.kind == "handoff_written":
            progress = str(data.get("progress", ""))
            out.reason = progress.split("; ", 1)[1] if "; " in progress else progress
        elif rec.env.kind == "run_frozen":
            out.frozen_seq = rec.seq
            err = data.get("error")
            out.error = RunfoldError.from_data(err) if isinstance(err, dict) else None
            failed = data.get("cause") == "error" and out.error is not None
            out.completion = "failed" if failed else str(data.get("completion", "cancelled"))
            out.evidence = [
                Evidence(kind=str(e.get("kind", "")), seq=int(e.get("seq", 0)))
                for e in data.get("evidence") or []
                if isinstance(e, dict)
            ]
    return out


def run_remote(ctx: typer.Context, remote: Remote, spec: RunSpec, json: bool, *, events: bool, root: Path) -> None:
    """Dispatch `spec` to the server and tail it with the live view; Ctrl-C cancels the run on
    the server (a second Ctrl-C stops tailing; the run still freezes there). Exits like a local
    run (see `runfold.cli.foreground.run_live`)."""
    from runfold.cli.common import EXIT_CANCELLED, err_console, out_console, workspace_flag
    from runfold.cli.foreground import EventPrinter, finish
    from runfold.cli.live import LiveView

    answer = dispatch_answer(remote, spec)
    run = str(answer["run"])
    console = err_console() if json or events else out_console()
    view = LiveView(console, fancy=console.is_terminal)
    printer = EventPrinter() if events else None
    with view:
        if answer.get("state") == "queued":
            view.note(queued_note(remote, run))
        records = follow(remote, run, view, printer)
    remote.close()
    if records is None:
        ctx.exit(EXIT_CANCELLED)
        return
    if not records:  # dropped from the queue (Ctrl-C) before it started: no line was written
        err_console().print(f"run {run} was dropped from the server's queue before it started: the ledger has no line of it", markup=False)
        ctx.exit(EXIT_CANCELLED)
        return
    last_safe = [r.seq for r in records if r.env.kind in ("model_returned", "tool_result")]
    finish(ctx, outcome_of(run, records), view, last_safe, None, json, events, workspace_flag(root))


def queued_note(remote: Remote, run: str) -> str:
    """What a person waiting on a queued run is told: how full the server is and what Ctrl-C does."""
    server = remote.call("GET", "/server")
    return (
        f"run {run} is queued: the server runs {server.get('running', '?')} of at most "
        f"{server.get('max_runs', '?')} at once; it starts when a place frees (Ctrl-C drops it)"
    )


def follow(remote: Remote, run: str, view: LiveView, also: Callable[[Record], None] | None = None) -> list[Record] | None:
    """Feed `view` (and `also`) each durable line of `run` from the server until it is frozen,
    resuming the stream after a reconnect; its lines. Ctrl-C cancels the run on the server (its
    other runs go on); a second Ctrl-C stops following (None: the server freezes it)."""
    records: list[Record] = []
    cancelled = False
    while True:
        try:
            for rec in remote.events(run, records[-1].seq if records else None):
                records.append(rec)
                view.on_event(rec)
                if also is not None:
                    also(rec)
            return records
        except KeyboardInterrupt:
            if cancelled:
                view.note(f"stopped following run {run}; the server freezes it as cancelled")
                return None
            cancelled = True
            view.note(f"Ctrl-C: cancelling run {run} on the server (its other runs go on)")
            remote.call("POST", f"/runs/{run}/cancel", {})


__all__ = [
    "ForkView",
    "Remote",
    "dispatch",
    "dispatch_answer",
    "follow",
    "outcome_of",
    "queued_note",
    "run_remote",
    "server_of",
]
