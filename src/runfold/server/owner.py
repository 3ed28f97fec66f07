"""The owner of a workspace's writer while it serves: many runs in one event loop, a limit on how
many run at once with a durable queue beyond it, steer and cancel through the control inbox,
fork and continue (DESIGN.md §3, §5, §7).

Every run this process hosts is claimed (`RunClaims`) before it starts and released once it is
frozen: ownership is explicit, so a backend shared by several hosts can claim runs with a lease
instead. All runs share the one writer and its group commit; the events of each line go out once
it is durable (`EventFanout`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from runfold.api import Workspace
from runfold.core import fold as fold_api
from runfold.core.canonical import I64_MAX
from runfold.core.errors import ErrorCode, Retry, RunfoldError, internal, invalid_args
from runfold.core.ids import is_run_id, runs_with_prefix
from runfold.core.payloads import ForkPoint, SessionOpened
from runfold.core.records import Record
from runfold.providers.registry import parse_spec
from runfold.runtime.control import ControlHub, check_request_text, frozen_text, run_state
from runfold.runtime.delegation import desk_of
from runfold.runtime.executor import RunOutcome
from runfold.runtime.spec import Delegated, RunHooks, RunSpec, new_run_id
from runfold.server.dispatch import OwnerDispatch
from runfold.server.events import EventFanout
from runfold.store.control import ControlRequest, SignalType, new_signal_id
from runfold.store.group_commit import GroupCommit
from runfold.store.ledger import now_ms
from runfold.store.serving import queue_drop, queue_items, queue_put
from runfold.store.view import LedgerWriter
from runfold.tools import builtin_registry

DEFAULT_MAX_RUNS = 32
"""Runs that may run at once by default; later dispatches wait in the queue."""
STOP_GRACE_S = 10.0
"""How long `stop` lets cancelled runs reach a safe point before cancelling their tasks."""

WAIT_RECORDED_S = 60.0
"""How long a steer or cancel sent with `wait` waits for the run to record it (then: `accepted`)."""

_WHAT = {"steer": "steer the run", "cancel": "cancel the run", "approve": "approve the call", "deny": "deny the call"}

SPEC_FIELDS = ("task", "goal", "model", "room", "max_turns", "builtin_tools", "system", "agents", "approvals")
"""The fields of a dispatch request that become the `RunSpec` (with `fork`, `continues`, `session` and a child's `delegated`)."""


class HostedWorkspace(Workspace):
    """A `Workspace` whose reads go through its open writer (the live view: every durable line),
    not through a reader opened once; a serving owner keeps the writer open for its whole life."""

    def _ledger(self) -> Any:
        return self._run_ledger if self._run_ledger is not None else super()._ledger()


class RunClaims(Protocol):
    """Which runs this host owns. A run is claimed before its first line and released once it
    is frozen; a claim refused means another host owns it."""

    def claim(self, run: str) -> bool: ...

    def release(self, run: str) -> None: ...

    def owner(self, run: str) -> str | None: ...


class LocalClaims:
    """Claims of the one process holding the workspace's writer lock: every claim succeeds (the
    lock already excludes other writers); `owner` is `<hostname>:<pid>` for a claimed run."""

    def __init__(self) -> None:
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self._runs: set[str] = set()

    def claim(self, run: str) -> bool:
        self._runs.add(run)
        return True

    def release(self, run: str) -> None:
        self._runs.discard(run)

    def owner(self, run: str) -> str | None:
        return self.name if run in self._runs else None


@dataclass
class Hosted:
    """One run dispatched to this owner: its id, the request it was dispatched with, its `state`
    (`queued`, `running`, `frozen`, `refused` — it could not start, `error` says why — or
    `dropped`: cancelled while queued), and its run's cancel event, steer queue and task."""

    run: str
    request: dict[str, Any]
    spec: RunSpec
    state: str = "queued"
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    steers: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    started: asyncio.Future[int] | None = None
    task: asyncio.Task[None] | None = None
    outcome: RunOutcome | None = None
    error: RunfoldError | None = None
    queued: bool = False


def not_found(run: str) -> RunfoldError:
    """`E_PATH_NOT_FOUND` for a run id or prefix that names no run."""
    return RunfoldError(
        ErrorCode.PATH_NOT_FOUND,
        "find the run",
        f"run {run!r}",
        "no run id starts with that; `GET /api/runs` lists the runs",
        retry=Retry.NO,
    )


def conflict(action: str, run: str, recovery: str) -> RunfoldError:
    """`E_INVALID_ARGS` for an action the run's state refuses (the API answers 409)."""
    return RunfoldError(ErrorCode.INVALID_ARGS, action, f"run {run}", recovery, retry=Retry.NO)


def spec_of(request: dict[str, Any], run_id: str) -> RunSpec:
    """The `RunSpec` of a dispatch request (`SPEC_FIELDS`, `fork: {run, at}`, `continues`,
    `session`, a delegated child's `delegated: {parent, by, detach}`) named `run_id`. Raises
    `E_INVALID_ARGS` as `RunSpec` does."""
    delegated = request.get("delegated")
    return RunSpec(
        **{k: request[k] for k in SPEC_FIELDS if request.get(k) is not None},
        fork=_fork_of(request.get("fork")),
        continues=request.get("continues"),
        run_id=run_id,
        session=session_of(request.get("session")),
        delegated=Delegated.from_data(delegated) if delegated is not None else None,
    )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= I64_MAX


def _fork_of(asked: Any) -> tuple[str, int] | None:
    """The `(run, at)` of a request's `fork` (`{run, at}`). Raises `E_INVALID_ARGS` for any
    other shape (a queued dispatch's file edited by hand)."""
    if asked is None:
        return None
    if not isinstance(asked, dict) or not isinstance(asked.get("run"), str) or not _whole(asked.get("at")):
        raise invalid_args("read the fork", f"fork {asked!r:.80}", "give fork as {run: <run id>, at: <seq>}")
    return asked["run"], asked["at"]


def check_names(spec: RunSpec) -> None:
    """Refuse what the run's start would refuse and can be told without starting it: a model
    SPEC of no known form (`E_INVALID_ARGS`, the valid forms listed) or an unknown built-in tool
    name (`E_TOOL_UNKNOWN`, the closest names). A dispatch past the limit is checked so before it
    is queued, as one under it is by its start."""
    if isinstance(spec.model, str):
        parse_spec(spec.model)
    if spec.builtin_tools is not None and not isinstance(spec.builtin_tools, bool):
        builtin_registry(list(spec.builtin_tools))


def session_of(asked: Any) -> SessionOpened | None:
    """The `session_opened` payload of a request's `session` (`{carried, run?, at_seq?}`)."""
    if not isinstance(asked, dict):
        return None
    run, at = asked.get("run"), asked.get("at_seq")
    if (run is None) != (at is None) or (run is not None and not (is_run_id(str(run)) and _whole(at))):
        raise invalid_args(
            "open the session",
            f"session run {str(run)[:40]!r} at_seq {at!r}",
            "give both `run` (a run's lowercase id) and `at_seq` (its last seq), or neither",
        )
    origin = ForkPoint(run=str(run), at_seq=at) if run is not None and at is not None else None
    return SessionOpened(from_=origin, carried=bool(asked.get("carried")))


class RunOwner:
    """Hosts the runs of `ws` (see the module docstring). `await start()` opens the writer
    (resuming the ledger: runs a dead process left are frozen, `process_died`) and restarts the
    queued dispatches that never started; `await stop()` cancels the running runs (frozen as
    cancelled; queued ones stay queued) and closes the writer."""

    def __init__(self, ws: HostedWorkspace, *, max_runs: int = DEFAULT_MAX_RUNS) -> None:
        if max_runs < 1:
            raise invalid_args("serve the workspace", f"--max-runs {max_runs}", "give at least 1")
        self.ws = ws
        self.max_runs = max_runs
        self.claims: RunClaims = LocalClaims()
        self.hosted: dict[str, Hosted] = {}
        self.queue: deque[str] = deque()
        self.running: set[str] = set()
        self.waiting: set[str] = set()
        """Running runs waiting for their children's replies (`wait_for_reply`): they do not
        count against `max_runs`, so a queued child can take the place its parent lends."""
        self.events = EventFanout(self._started)
        self.recovered: list[str] = []
        """Queued dispatches found at start and queued again."""
        self.dropped: list[tuple[str, str]] = []
        """Queued dispatches found at start and not run again, with why."""
        self._stack = contextlib.AsyncExitStack()
        self._ledger: LedgerWriter | None = None
        self.hub: ControlHub | None = None
        self.stopping = False
        """Set by `quiesce`: no run starts any more."""

    # ---- life ------------------------------------------------------------------------------

    @property
    def ledger(self) -> LedgerWriter:
        assert self._ledger is not None, "RunOwner.start() first"
        return self._ledger

    async def start(self) -> None:
        """Open the writer (`E_LEDGER_HELD` when another process holds it) and re-queue the
        dispatches a previous owner accepted and never started."""
        ledger, hub = await self._stack.enter_async_context(self.ws.shared_writer())
        self._ledger, self.hub = ledger, hub
        if hub is not None:  # delegated children go through this owner's dispatch
            desk = desk_of(ledger, hub)
            desk.dispatcher = OwnerDispatch(self, desk)
        ledger.on_durable.append(self.events.publish)
        self._recover_queue()

    async def quiesce(self, grace_s: float = STOP_GRACE_S) -> None:
        """Wind down before the server stops answering: nothing starts any more (a dispatch is
        queued, durably, for the next server), every running run is cancelled (frozen as
        cancelled at its next safe point; after `grace_s` s its task is cancelled), then every
        event stream is ended, so a client gets the run's last line and the stream's end instead
        of a connection cut at shutdown. Queued dispatches stay queued. Idempotent."""
        self.stopping = True
        self.queue.clear()
        tasks = [h.task for h in self.hosted.values() if h.task is not None and not h.task.done()]
        for h in self.hosted.values():
            if h.state == "running":
                h.cancel.set()
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace_s)
            for t in pending:
                t.cancel()
            for t in pending:
                with contextlib.suppress(BaseException):
                    await t
        self.events.end_all()

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """`quiesce`, then close the writer."""
        await self.quiesce(grace_s)
        if self._ledger is not None and self.events.publish in self._ledger.on_durable:
            self._ledger.on_durable.remove(self.events.publish)
        await self._stack.aclose()
        self._ledger = None

    def _recover_queue(self) -> None:
        known = set(self.ledger.runs())
        for run, request in queue_items(self.ws.root):
            if run in known:  # it started before the crash; resume froze it: never run twice
                queue_drop(self.ws.root, run)
                self.dropped.append((run, "it had started; resume froze it (process_died)"))
                continue
            try:
                if request is None:
                    raise invalid_args("read a queued dispatch", run, "the file is damaged; dispatch the run again")
                spec = spec_of(request, run)
                orphaned = self._orphaned(spec)
                if orphaned is not None:
                    queue_drop(self.ws.root, run)
                    self.dropped.append((run, orphaned))
                    continue
            except RunfoldError as err:
                queue_drop(self.ws.root, run)
                self.dropped.append((run, err.display()))
                continue
            h = Hosted(run, request, spec, queued=True)
            self.hosted[run] = h
            self.queue.append(run)
            self.recovered.append(run)
        self._admit()

    def _orphaned(self, spec: RunSpec) -> str | None:
        """Why a queued delegated child must not start: its parent is frozen (a child that was
        not detached is cancelled with its parent); None when it may start."""
        d = spec.delegated
        if d is None or d.detach:
            return None
        state = run_state(self.ledger.run_records(d.parent))
        if state.frozen is None:
            return None
        return f"its parent {frozen_text(d.parent, state)}; a delegated run that was not detached is cancelled with it"

    # ---- dispatch --------------------------------------------------------------------------

    async def dispatch(self, request: dict[str, Any], *, run_id: str | None = None) -> Hosted:
        """Accept a run (`request`: the fields of `SPEC_FIELDS`, and `fork: {run, at}` or
        `continues`). Below the limit it starts, and this returns once its `run_started` is
        durable (state `running`, or `frozen` when it already ended); past it, the dispatch is
        written to the durable queue first (state `queued`). Raises `E_INVALID_ARGS` (nothing
        written) for a bad request, `E_PATH_NOT_FOUND` for a fork or continue of an unknown run,
        and what the run's start raises (a bad model SPEC, a run still running to continue).
        `run_id` names the run (None: a fresh id); a caller that may retry a dispatch names it,
        so that a retry finds the run instead of starting it twice (`runfold.server.ray_owner`), and
        a delegating run names its child before dispatching it."""
        run_id = run_id if run_id is not None else new_run_id()
        spec = spec_of(request, run_id)
        check_names(spec)
        if spec.origin is not None:
            self.resolve(spec.origin, ledger_only=True)
        h = Hosted(run_id, request, spec)
        self.hosted[run_id] = h
        if self.stopping or self.busy() >= self.max_runs:
            try:
                queue_put(self.ws.root, run_id, request)
            except BaseException:
                del self.hosted[run_id]
                raise
            h.queued = True
            self.queue.append(run_id)
            return h
        self._start(h)
        assert h.started is not None and h.task is not None
        waits: set[asyncio.Future[Any]] = {h.started, h.task}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if h.state == "refused" and h.error is not None:
            del self.hosted[run_id]
            raise h.error
        return h

    def _start(self, h: Hosted) -> None:
        self.claims.claim(h.run)
        h.state = "running"
        h.started = asyncio.get_running_loop().create_future()
        self.running.add(h.run)
        h.task = asyncio.get_running_loop().create_task(self._drive(h), name=f"run {h.run}")

    def _started(self, run: str, seq: int) -> None:
        h = self.hosted.get(run)
        if h is not None and h.started is not None and not h.started.done():
            h.started.set_result(seq)
            if h.queued:
                queue_drop(self.ws.root, run)  # its run_started is durable: a restart never runs it again

    async def _drive(self, h: Hosted) -> None:
        try:
            h.outcome = await self.ws.arun_spec(h.spec, RunHooks(cancel=h.cancel, steers=h.steers))
        except RunfoldError as err:
            h.error = err
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            h.error = internal(
                f"run the agent ({type(exc).__name__}: {str(exc)[:300]})",
                f"run {h.run}",
                "report this with the server's log; dispatch the run again",
            )
        finally:
            started = h.started is not None and h.started.done()
            h.state = "frozen" if started else "refused"
            if h.started is not None and not h.started.done():
                h.started.cancel()
            self.running.discard(h.run)
            self.waiting.discard(h.run)
            self.claims.release(h.run)
            if h.queued:
                queue_drop(self.ws.root, h.run)
            if not started:
                self.events.end(h.run)
            self._admit()

    def busy(self) -> int:
        """How many runs count against `max_runs`: the running ones not waiting for replies."""
        return len(self.running) - len(self.waiting & self.running)

    def set_waiting(self, run: str, waits: bool) -> None:
        """The running `run` began (`waits`) or ended a wait for its children's replies. While it
        waits its place is lent to the queue (a parent waiting on children queued behind the
        limit would otherwise wait for nothing); when the wait ends it goes on at once, even if
        that puts the server over the limit until a run ends."""
        if waits and run in self.running:
            self.waiting.add(run)
            self._admit()
        else:
            self.waiting.discard(run)

    def _admit(self) -> None:
        """Start queued dispatches while there is room."""
        while self.queue and self.busy() < self.max_runs and not self.stopping:
            h = self.hosted.get(self.queue.popleft())
            if h is not None and h.state == "queued":
                self._start(h)

    # ---- finding runs ----------------------------------------------------------------------

    def resolve(self, prefix: str, *, ledger_only: bool = False) -> str:
        """The one run whose id starts with `prefix` (hyphens optional): a run of the ledger or,
        unless `ledger_only`, a dispatch still queued. Raises `E_PATH_NOT_FOUND` when none
        matches, `E_INVALID_ARGS` (naming the candidates) when several do."""
        queued = [] if ledger_only else [r for r, h in self.hosted.items() if h.state in ("queued", "dropped", "refused")]
        matches = runs_with_prefix(prefix, [*queued, *self.ledger.runs()])
        if not matches:
            raise not_found(prefix)
        if len(matches) > 1:  # queued runs too: a run id's start is its time, shared by runs dispatched together
            found = sorted(matches)
            raise invalid_args(
                f"pick one run for the prefix {prefix!r}",
                f"{len(found)} runs whose ids start with it",
                "give more characters of the run id (`GET /api/runs` lists them): " + ", ".join(found[:8]),
                nearby=tuple(found),
            )
        return matches[0]

    def live(self, run: str) -> bool:
        """Whether `run` may still write lines (running, or queued to run)."""
        h = self.hosted.get(run)
        return h is not None and h.state in ("queued", "running") and not (self.stopping and h.state == "queued")

    # ---- steer, cancel, fork ---------------------------------------------------------------

    def cancel_queued(self, run: str) -> Hosted:
        """Cancel a dispatch still queued: it is dropped from the queue and never runs."""
        h = self.hosted[run]
        h.state = "dropped"
        with contextlib.suppress(ValueError):
            self.queue.remove(run)
        queue_drop(self.ws.root, run)
        self.events.end(run)
        return h

    async def control(
        self, run: str, type: str, text: str = "", *, call: str = "", wait: bool = False
    ) -> dict[str, Any]:
        """Steer (`type` `steer`, with `text`) or cancel the live run `run` (full id), or decide its
        call `call` (a `tool_use_id`) that waits for approval (`type` `approve`, or `deny` with the
        reason in `text`), through the control inbox: the request is durable before it is
        acknowledged, so a crash leaves it for resume to record on the run (DESIGN.md §7), and its
        signal id makes it recorded once. Returns `{run, signal, state: accepted|recorded, seq?}`
        (`wait`: once recorded). Raises `E_INVALID_ARGS` naming the run's state when it is queued,
        frozen or not live here, and naming the waiting calls when `call` waits for no decision."""
        what = _WHAT.get(type)
        if what is None:
            raise invalid_args("control the run", repr(type), "use `steer`, `cancel`, `approve` or `deny`")
        if type in ("approve", "deny") and not call.strip():
            raise invalid_args(what, "call", "name the waiting call by its id (its `approval_requested.tool_use_id`)")
        h = self.hosted.get(run)
        if h is not None and h.state in ("queued", "dropped", "refused"):
            if type == "cancel" and h.state == "queued":
                self.cancel_queued(run)
                return {"run": run, "signal": None, "state": "dropped"}
            later = {
                "queued": f"{type} it once it runs (`runfold runs` or `GET /api/runs` shows its state), or cancel it",
                "dropped": "it was dropped from the queue and will never run; dispatch a new run",
                "refused": "it could not start (`GET /api/runs` says why); dispatch it again",
            }[h.state]
            raise conflict(f"{what} (it is {h.state}: it has not started)", run, later)
        if type == "steer":
            if not text.strip():
                raise invalid_args(what, "text", "give the words to deliver (not empty)")
        state = run_state(self.ledger.run_records(run))
        if state.frozen is not None:
            raise conflict(
                f"{what} ({frozen_text(run, state)})",
                run,
                f"nothing was queued; continue the run with your words (`POST /api/runs/{run}/continue`)",
            )
        hub = self.hub
        if hub is None or run not in hub.live:
            raise conflict(
                f"{what} (run {run} is not running in this server)",
                run,
                "it was left running by a dead process and is frozen when the server restarts",
            )
        check_request_text(text, "text", what)
        signal_type: SignalType = type  # type: ignore[assignment]  # one of _WHAT's keys, checked above
        req = ControlRequest(new_signal_id(), run, signal_type, "user", text, now_ms(), call.strip())
        hub.dir.write_request(req)
        hub.poll_once()  # hand it to the run now (the 100 ms poll would too)
        ack = hub.dir.read_ack(req.signal)
        deadline = asyncio.get_running_loop().time() + WAIT_RECORDED_S
        while wait and ack is not None and ack.state == "accepted" and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
            ack = hub.dir.read_ack(req.signal)
        if ack is not None and ack.state == "refused":
            hub.dir.remove_ack(req.signal)
            raise conflict(f"{what} ({ack.reason})", run, f"check the run's state with `GET /api/runs/{run}`")
        out: dict[str, Any] = {"run": run, "signal": req.signal, "state": ack.state if ack else "accepted"}
        if ack is not None and ack.state == "recorded":
            out["seq"] = ack.seq
            hub.dir.remove_ack(req.signal)
        return out

    async def fork(self, run: str, at: int, task: str | None) -> fold_api.ForkPlan:
        """Fork `run` (full id) at `at` without running it (DESIGN.md §7): its `run_started` and
        `run_forked` go out with the next group commit. Raises as `Workspace.fork` does."""
        plan = self.ws.plan_fork_on(self.ledger, run, at, task)
        self.ledger.stage(list(plan.drafts))
        await GroupCommit(self.ledger).commit()
        return plan

    def lines(self, run: str) -> list[Record]:
        """The durable lines of `run` in seq order."""
        return self.ledger.run_records(run)


__all__ = [
    "DEFAULT_MAX_RUNS",
    "Hosted",
    "HostedWorkspace",
    "LocalClaims",
    "RunClaims",
    "RunOwner",
    "check_names",
    "conflict",
    "not_found",
    "spec_of",
]
