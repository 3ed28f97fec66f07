"""Control from another process: steer and cancel delivery through the inbox (DESIGN.md §5–§6).

The process running a workspace's runs owns it: a `ControlHub` holds `.runfold/control/owner.lock`,
polls the inbox (`runfold.store.control`) every 100 ms and hands each request to its live run in
memory; the run records it at its next safe point (`steer_received`/`cancel_received` carrying the
signal id), flushes, and only then is the request file deleted — so a request handed over is never
lost (the file outlives a crash; resume records it on the dead run) and never recorded twice (the
signal ids already in the ledger are skipped).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from runfold.core.address import RESERVED_SEGMENT
from runfold.core.errors import ErrorCode, Retry, RunfoldError, invalid_args
from runfold.core.ids import run_prefix_key, runs_with_prefix
from runfold.core.kinds import Kind
from runfold.core.payloads import CancelReceived, SteerReceived
from runfold.core.records import Draft, Record
from runfold.core.speakers import Letter, Person, Runtime, parse_source
from runfold.runtime.approvals import Decision, Waiting
from runfold.runtime.resume import ResumeReport, resume_ledger
from runfold.store.control import (
    MAX_REQUEST_BYTES,
    ControlAck,
    ControlDir,
    ControlRequest,
    SignalType,
    new_signal_id,
)
from runfold.store.ledger import RUNTIME, now_ms
from runfold.store.view import LedgerView, LedgerWriter

POLL_S: Final = 0.1
"""How often the hub looks at the inbox, in seconds."""
ACK_WAIT_S: Final = 10.0
"""How long a sender waits for the owner's ack, in seconds."""

_SIGNAL_KINDS = (Kind.STEER_RECEIVED.value, Kind.CANCEL_RECEIVED.value, Kind.APPROVAL_RESOLVED.value)


@dataclass(frozen=True)
class Steer:
    """One item of a run's steer queue: `text`, its `source` (`steer_received.source` wire form)
    and the control `signal` id when it came through the inbox (None for in-process steers)."""

    text: str
    source: str = "user"
    signal: str | None = None


def steer_author(source: str, person: str = "person") -> str:
    """The `who` of a `steer_received` line for `source`: `person` (the given name) for the
    person, `runtime` for the runtime, the sending room's address for a letter."""
    speaker = parse_source(source)
    if isinstance(speaker, Person):
        return person
    if isinstance(speaker, Runtime):
        return RUNTIME
    return speaker.from_


# ---- what the ledger says about a run ---------------------------------------------------------


@dataclass
class RunState:
    """A run as the inbox needs it: `exists`; `frozen` (its completion) or None; `addr`; and the
    signal ids its `steer_received`/`cancel_received` lines carry → their seq."""

    exists: bool = False
    frozen: str | None = None
    cause: str | None = None
    addr: str | None = None
    signals: dict[str, int] = field(default_factory=dict)


def run_state(lines: Sequence[Record]) -> RunState:
    """Fold one run's lines into a `RunState`."""
    state = RunState(exists=bool(lines))
    for rec in lines:
        env = rec.env
        if env.kind == Kind.RUN_STARTED.value:
            state.addr = env.addr
        elif env.kind in _SIGNAL_KINDS:
            sig = env.data.get("signal")
            if isinstance(sig, str):
                state.signals.setdefault(sig, rec.seq)
        elif env.kind == Kind.RUN_FROZEN.value:
            state.frozen = str(env.data.get("completion", "cancelled"))
            cause = env.data.get("cause")
            state.cause = cause if isinstance(cause, str) else None
    return state


def inbox_source_problem(source: str) -> str | None:
    """Why `source` may not arrive through the inbox, or None when it may. A request speaks as
    the person (`user`) or as a letter (`@<address> ...`); the runtime's voice (`runtime`,
    `city`) is the runtime's alone, so a file in the inbox can never pass for it, and a source
    this build does not write is refused."""
    try:
        speaker = parse_source(source)
    except RunfoldError as err:
        return f"{err.action} ({source!r}): {err.recovery}"
    if isinstance(speaker, Runtime):
        return (
            f"a request may speak as the person (`user`) or as a letter (`@<address>`), "
            f"not as the runtime ({source!r})"
        )
    if isinstance(speaker, Letter) and any(s.casefold() == RESERVED_SEGMENT for s in speaker.from_.split("/")):
        return (
            f"a letter comes from a room, and `.runfold` is reserved: no agent works there "
            f"({speaker.from_!r}); give the sending room's address, such as `lab/room2`"
        )
    return None


def frozen_text(run: str, state: RunState) -> str:
    """`run X is frozen as C` (with the cause when there is one)."""
    why = f" ({state.cause})" if state.cause else ""
    return f"run {run} is frozen as {state.frozen}{why}"


def _draft(req: ControlRequest, addr: str | None) -> Draft:
    if req.type == "cancel":
        return Draft(
            req.run,
            "person",
            Kind.CANCEL_RECEIVED.value,
            CancelReceived(source=req.source, signal=req.signal),
            addr=addr,
        )
    return Draft(
        req.run,
        steer_author(req.source),
        Kind.STEER_RECEIVED.value,
        SteerReceived(source=req.source, text=req.text, signal=req.signal),
        addr=addr,
    )


def _settle(
    cd: ControlDir, ledger: LedgerWriter, signal: str, req: ControlRequest, *, refuse_open: bool
) -> bool:
    """Answer a request whose run is not live here: recorded (ack with its seq), frozen or unknown
    (refused). A run still open is refused only when `refuse_open`. Returns True when answered."""
    state = run_state(ledger.run_records(req.run))
    if signal in state.signals:
        cd.write_ack(signal, ControlAck("recorded", os.getpid(), seq=state.signals[signal]))
    elif (problem := inbox_source_problem(req.source)) is not None:
        cd.write_ack(signal, ControlAck("refused", os.getpid(), reason=problem))
    elif not state.exists:
        cd.write_ack(signal, ControlAck("refused", os.getpid(), reason=f"no run {req.run} in this workspace"))
    elif state.frozen is not None:
        cd.write_ack(signal, ControlAck("refused", os.getpid(), reason=frozen_text(req.run, state)))
    elif refuse_open:
        reason = (
            f"run {req.run} is not running in this process (pid {os.getpid()}); it was left running "
            "by a dead process: `runfold resume`, then `runfold continue`"
        )
        cd.write_ack(signal, ControlAck("refused", os.getpid(), reason=reason))
    else:
        return False
    cd.remove_request(signal)
    return True


def _refuse_unreadable(cd: ControlDir, signal: str, err: RunfoldError) -> None:
    cd.write_ack(signal, ControlAck("refused", os.getpid(), reason=f"{err.action}: {err.recovery}"))
    cd.remove_request(signal)


# ---- resume: requests a dead owner was handed --------------------------------------------------


def inbox_pending(ws: Path, ledger: LedgerWriter) -> Callable[[str], Sequence[Draft]]:
    """The `pending` hook of `resume_ledger`: for a run being frozen because its process died, the
    drafts of the inbox requests aimed at it that its lines do not already record (steers as
    `steer_received`, a cancel as `cancel_received`, in the order they were sent) — so a steer
    handed to the dead process is inherited by `runfold continue`. Files stay until
    `settle_inbox` runs after the resume's flush."""
    cd = ControlDir(ws)

    def pending(run: str) -> Sequence[Draft]:
        wanted = [req for _, req in cd.requests() if isinstance(req, ControlRequest) and req.run == run]
        if not wanted:
            return []
        state = run_state(ledger.run_records(run))
        drafts: list[Draft] = []
        cancelled = False
        for req in wanted:
            if req.type not in ("steer", "cancel"):
                continue  # a decision for a call of a dead run: refused by settle_inbox
            if req.signal in state.signals or (req.type == "cancel" and cancelled):
                continue
            if req.type == "steer" and not req.text.strip():
                continue
            if inbox_source_problem(req.source) is not None:
                continue  # refused by settle_inbox, never written in another voice
            try:
                drafts.append(_draft(req, state.addr))
            except RunfoldError:
                continue  # a source this build does not write: refused by settle_inbox
            cancelled = cancelled or req.type == "cancel"
        return drafts

    return pending


def resume_with_inbox(ws: Path, ledger: LedgerWriter, *, full: bool = False) -> ResumeReport:
    """`resume_ledger` (DESIGN.md §7) with the inbox wired in: steers and cancels handed to a
    process that died are recorded on its runs just before they are frozen (`inbox_pending`),
    then every request whose run is no longer open is answered and its file removed
    (`settle_inbox`, after the resume's flush); acks nobody will read and stale temporary files
    are deleted (`ControlDir.prune`). Raises what `resume_ledger` raises, and
    `E_STORAGE_FATAL` when a control file cannot be written."""
    report = resume_ledger(ledger, pending=inbox_pending(ws, ledger), full=full)
    if ControlDir(ws).inbox.is_dir():
        settle_inbox(ws, ledger)
    ControlDir(ws).prune()  # acks nobody will read, temporary files of killed writers
    return report


def settle_inbox(ws: Path, ledger: LedgerWriter) -> int:
    """After a writer opened (and resumed) the ledger: answer every inbox request whose run is not
    open — recorded (ack with seq, file removed), frozen or unknown (refused, file removed).
    Requests for runs still open are left for the hub. Returns how many were answered. Raises
    `E_STORAGE_FATAL` when a control file cannot be written."""
    cd = ControlDir(ws)
    answered = 0
    for signal, req in cd.requests():
        if isinstance(req, RunfoldError):
            _refuse_unreadable(cd, signal, req)
            answered += 1
        elif _settle(cd, ledger, signal, req, refuse_open=False):
            answered += 1
    return answered


# ---- the hub ----------------------------------------------------------------------------------


class RunControl:
    """What the hub knows of one live run: its `cancel` event and `steers` queue, the signal of
    the cancel it was handed (`cancel_signal`), and the signals handed/recorded. The run calls
    `recorded(signal, seq)` once the line is durable."""

    def __init__(
        self, hub: ControlHub, run_id: str, cancel: asyncio.Event, steers: asyncio.Queue[Any]
    ) -> None:
        self.hub = hub
        self.run_id = run_id
        self.cancel = cancel
        self.steers = steers
        self.cancel_signal: str | None = None
        self.cancel_source = "user"
        """Who sent the cancel it was handed: the person, or a letter from the run's parent."""
        self.waiting = Waiting()  # calls waiting for `runfold approve`/`deny`
        self.handed: set[str] = set()
        self.recorded_signals: set[str] = set()

    def is_recorded(self, signal: str) -> bool:
        return signal in self.recorded_signals

    def recorded(self, signal: str, seq: int) -> None:
        """The line carrying `signal` is durable at `seq`: delete the request, ack `recorded`."""
        self.recorded_signals.add(signal)
        self.handed.discard(signal)
        self.hub._recorded(signal, seq)


class ControlHub:
    """The owner side of the inbox for workspace `ws` (DESIGN.md §5): `start()` takes
    `owner.lock` (after the writer lock) and starts polling; `register(run, cancel, steers)`
    makes a run reachable; `stop()` releases the lock. One per writer (see `Workspace.shared_writer`)."""

    def __init__(self, ws: Path, ledger: LedgerWriter, *, poll_s: float = POLL_S) -> None:
        self.ws = ws
        self.ledger = ledger
        self.poll_s = poll_s
        self.dir = ControlDir(ws)
        self.live: dict[str, RunControl] = {}
        self._seen: set[str] = set()
        self._fd: int | None = None
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        """Take `owner.lock` and start the polling task on the running event loop. Raises
        `E_LEDGER_HELD` when another process holds the lock, `E_STORAGE_FATAL` on an OS error."""
        try:
            self.dir.inbox.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunfoldError(
                ErrorCode.STORAGE_FATAL,
                f"create the control inbox ({exc.strerror or exc})",
                str(self.dir.inbox),
                "check that the workspace's .runfold directory is writable",
            ) from None
        self._fd = self.dir.take_owner_lock()
        self._task = asyncio.get_running_loop().create_task(self._poll_forever())

    async def stop(self) -> None:
        """Stop polling and release `owner.lock` (idempotent)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._fd is not None:
            self.dir.release_owner_lock(self._fd)
            self._fd = None

    async def _poll_forever(self) -> None:
        while True:
            try:
                self.poll_once()
            except (RunfoldError, OSError) as exc:  # keep serving; the files stay for the next pass
                self.error = exc
            await asyncio.sleep(self.poll_s)

    # ---- runs -----------------------------------------------------------------------------

    def register(self, run_id: str, cancel: asyncio.Event, steers: asyncio.Queue[Any]) -> RunControl:
        """Make `run_id` reachable from other processes until `unregister`."""
        ctl = RunControl(self, run_id, cancel, steers)
        self.live[run_id] = ctl
        return ctl

    def unregister(self, run_id: str) -> None:
        """The run is frozen: requests it was handed but did not record (they arrived after its
        last safe point) are refused with the reason, and their files removed."""
        ctl = self.live.pop(run_id, None)
        if ctl is None or not (ctl.handed - ctl.recorded_signals):
            return
        try:
            state = run_state(self.ledger.run_records(run_id))
        except (RunfoldError, OSError):  # the ledger failed: the files stay for the next owner
            return
        if state.frozen is None:
            return  # not frozen (the ledger failed): the next writer's resume records them
        why = (
            frozen_text(run_id, state)
            + " before its next safe point; send it to a successor (`runfold continue`)"
        )
        for signal in sorted(ctl.handed - ctl.recorded_signals):
            with contextlib.suppress(RunfoldError):
                if signal in state.signals:
                    self.dir.write_ack(signal, ControlAck("recorded", os.getpid(), seq=state.signals[signal]))
                else:
                    self.dir.write_ack(signal, ControlAck("refused", os.getpid(), reason=why))
                self.dir.remove_request(signal)

    def _recorded(self, signal: str, seq: int) -> None:
        with contextlib.suppress(RunfoldError):
            self.dir.write_ack(signal, ControlAck("recorded", os.getpid(), seq=seq))
            self.dir.remove_request(signal)

    # ---- the inbox ------------------------------------------------------------------------

    def poll_once(self) -> int:
        """One pass over the inbox: hand each new request to its live run (ack `accepted`) or
        answer it (recorded / refused). Returns how many requests were handled."""
        handled = 0
        for signal, req in self.dir.requests():
            if signal in self._seen:
                continue
            self._seen.add(signal)
            handled += 1
            if isinstance(req, RunfoldError):
                _refuse_unreadable(self.dir, signal, req)
                continue
            ctl = self.live.get(req.run)
            if ctl is None:
                _settle(self.dir, self.ledger, signal, req, refuse_open=True)
                continue
            refusal = self._hand(ctl, req)
            if refusal is not None:
                self.dir.write_ack(signal, ControlAck("refused", os.getpid(), reason=refusal))
                self.dir.remove_request(signal)
            else:
                self.dir.write_ack(signal, ControlAck("accepted", os.getpid()))
        return handled

    def _hand(self, ctl: RunControl, req: ControlRequest) -> str | None:
        """Give `req` to its live run; returns why it was refused, or None."""
        if ctl.is_recorded(req.signal):
            return None
        problem = inbox_source_problem(req.source)
        if problem is not None:
            return problem
        if req.type in ("approve", "deny"):
            decision = Decision(req.type == "approve", req.text.strip() or None, "inbox", req.signal)
            refusal = ctl.waiting.deliver(req.call, decision)
            if refusal is None:
                ctl.handed.add(req.signal)
            return refusal
        if req.type == "cancel":
            if ctl.cancel_signal is not None or ctl.cancel.is_set():
                return f"run {req.run} is already being cancelled"
            ctl.cancel_signal = req.signal
            ctl.cancel_source = req.source
            ctl.handed.add(req.signal)
            ctl.cancel.set()
            return None
        if not req.text.strip():
            return "the steer's text is empty"
        ctl.handed.add(req.signal)
        ctl.steers.put_nowait(Steer(req.text, req.source, req.signal))
        return None

    # ---- letters from a run of this process (the send_message tool) -----------------------

    def send_letter(self, sender_run: str, sender_room: str | None, to: str, text: str) -> dict[str, Any]:
        """Write a letter from `sender_run` (in `sender_room`) to the live run `to` (id or prefix)
        into the inbox; the hub hands it over at its next pass. Returns `{delivered_to, signal}`.
        Raises `E_INVALID_ARGS` (with a recovery) when `to` names no run, more than one, a frozen
        run or one not running here, or `text` is empty."""
        if not text.strip():
            raise invalid_args("send a message", "text", "give the words to send (not empty)")
        check_request_text(text, "text", "send a message")
        target = self._resolve(to)
        if target == sender_run:
            raise invalid_args("send a message", f"run {to!r}", "this is your own run; send to another run")
        if target not in self.live:
            state = run_state(self.ledger.run_records(target))
            why = (
                frozen_text(target, state) if state.frozen else f"run {target} is not running in this process"
            )
            raise invalid_args(
                f"send a message ({why})",
                f"run {to!r}",
                "send to a run that is running now: " + (", ".join(sorted(self.live)) or "(none)"),
                nearby=tuple(sorted(self.live)),
            )
        letter = Letter(from_=sender_room or "agent", run=sender_run, kind="steer", sender="running")
        req = ControlRequest(new_signal_id(), target, "steer", letter.recorded(), text, now_ms())
        self.dir.write_request(req)
        return {"delivered_to": target, "signal": req.signal}

    def _resolve(self, to: str) -> str:
        if not run_prefix_key(to):
            raise invalid_args("send a message", "to", "give the target run's id or its start")
        matches = runs_with_prefix(to, [*self.live, *self.ledger.runs()])
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise invalid_args(
                "send a message",
                f"run {to!r}",
                "give more characters: " + ", ".join(matches[:8]),
                tuple(matches),
            )
        raise invalid_args(
            "send a message",
            f"run {to!r}",
            "no run starts with that; runs running now: " + (", ".join(sorted(self.live)) or "(none)"),
            nearby=tuple(sorted(self.live)),
        )


# ---- the sender side --------------------------------------------------------------------------


@dataclass(frozen=True)
class ControlReceipt:
    """What a sender learned: `signal` id, `run`, `type`, `source`, `state` (`accepted`,
    `recorded`, or `queued` when no ack came in time), `seq` (when recorded), `path` of the
    request file (while it is still in the inbox), `owner_pid`."""

    signal: str
    run: str
    type: SignalType
    source: str
    state: str
    seq: int | None = None
    path: Path | None = None
    owner_pid: str = "unknown"


def check_request_text(text: str, where: str, what: str) -> None:
    """Refuse (`E_INVALID_ARGS`, naming `where`) steer words that cannot go into a request file:
    text that is not valid Unicode (e.g. undecodable bytes from the command line, which Python
    keeps as lone surrogates) or longer than the inbox reads (`MAX_REQUEST_BYTES`, bytes)."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise invalid_args(
            f"{what} (the text is not valid UTF-8 at character {exc.start})",
            where,
            "give the words as UTF-8 text (check the terminal's encoding or the bytes you passed)",
        ) from None
    if size > MAX_REQUEST_BYTES - 4096:
        raise invalid_args(
            f"{what} (the text is {size} bytes; at most {MAX_REQUEST_BYTES - 4096} fit in a request)",
            where,
            "send shorter words (put long text in a file in the workspace and name the file)",
        )


def _no_owner(run: str, state: RunState, what: str) -> RunfoldError:
    if state.frozen is not None:
        why = frozen_text(run, state)
        rec = f'nothing was queued; `runfold continue {run} --task "..."` to go on with your words'
    else:
        why = f"run {run} was left running by a dead process"
        rec = f'nothing was queued; `runfold resume`, then `runfold continue {run} --task "..."` to go on with your words'
    return RunfoldError(
        ErrorCode.INVALID_ARGS,
        f"{what} (nobody is running this workspace; {why})",
        f"run {run}",
        rec,
        retry=Retry.NO,
    )


def send_request(
    ws: Path,
    reader: LedgerView,
    run: str,
    type: SignalType,
    *,
    text: str = "",
    source: str = "user",
    call: str = "",
    wait_s: float = ACK_WAIT_S,
    until_recorded: bool = False,
    poll_s: float = 0.05,
    sleep: Callable[[float], None] = time.sleep,
) -> ControlReceipt:
    """Send a steer, a cancel, or an approve/deny of the waiting `call` (a `tool_use_id`) for the
    full run id `run` to the workspace's owner and wait for its
    ack (DESIGN.md §5): up to `wait_s` s for `accepted`, and with `until_recorded` until the run
    recorded it (then `seq` is set; the wait for the recording has no ceiling but the run's
    life: a run that ends first refuses it).

    Refuses before writing anything (`E_INVALID_ARGS`, nothing queued) when no process owns the
    workspace (the run is frozen or was left by a dead process), when the run is frozen, when
    `text` is empty for a steer, not valid UTF-8 or too long (`check_request_text`), or `source` is not a steer source this build writes. Raises
    `E_INVALID_ARGS` with the owner's reason when it refused the request. When no ack comes in
    time the receipt's state is `queued` and `path` names the file left in the inbox.
    """
    what = {"steer": "steer the run", "cancel": "cancel the run", "approve": "approve the call", "deny": "deny the call"}[type]
    if type in ("approve", "deny") and not call.strip():
        raise invalid_args(what, "CALL", "name the waiting call by its id (`runfold log --kind approval_requested`)")
    parse_source(source)  # E_INVALID_ARGS for a source this build does not write
    problem = inbox_source_problem(source)
    if problem is not None:
        raise invalid_args(what, "--from", problem)
    if type == "steer" and not text.strip():
        raise invalid_args(what, "TEXT", "give the words to deliver (not empty)")
    check_request_text(text, "TEXT", what)
    check_request_text(source, "--from", what)
    cd = ControlDir(ws)
    state = run_state(reader.run_records(run))
    if not cd.owner_present():
        raise _no_owner(run, state, what)
    if state.frozen is not None:
        raise RunfoldError(
            ErrorCode.INVALID_ARGS,
            f"{what} ({frozen_text(run, state)})",
            f"run {run}",
            f'nothing was queued; `runfold continue {run} --task "..."` to go on with your words',
            retry=Retry.NO,
        )
    req = ControlRequest(new_signal_id(), run, type, source, text, now_ms(), call.strip())
    path = cd.write_request(req)
    deadline = time.monotonic() + wait_s
    while True:
        ack = cd.read_ack(req.signal)
        if ack is not None and ack.state == "refused":
            cd.remove_ack(req.signal)
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                f"{what} (the owner, pid {ack.pid}, refused it: {ack.reason or 'no reason given'})",
                f"run {run}",
                "nothing was recorded; check the run with `runfold runs`, or continue it with your words",
                retry=Retry.NO,
            )
        if ack is not None and ack.state == "recorded":
            cd.remove_ack(req.signal)
            return ControlReceipt(req.signal, run, type, source, "recorded", ack.seq, None, str(ack.pid))
        if ack is not None and not until_recorded:
            return ControlReceipt(req.signal, run, type, source, "accepted", None, path, str(ack.pid))
        if ack is None and time.monotonic() >= deadline:
            return ControlReceipt(req.signal, run, type, source, "queued", None, path, cd.owner_pid())
        if ack is not None and not cd.owner_present():
            final = cd.read_ack(req.signal)  # final acks are written before the file is removed
            if final is None or final.state == "accepted":
                # the owner died with it: resume records it on the run (the file stays)
                return ControlReceipt(req.signal, run, type, source, "queued", None, path, str(ack.pid))
            continue
        sleep(poll_s)


__all__ = [
    "ACK_WAIT_S",
    "POLL_S",
    "ControlHub",
    "ControlReceipt",
    "RunControl",
    "RunState",
    "Steer",
    "check_request_text",
    "frozen_text",
    "inbox_pending",
    "inbox_source_problem",
    "resume_with_inbox",
    "run_state",
    "send_request",
    "settle_inbox",
    "steer_author",
]
