"""A workspace's owner (`RunOwner`, the core of `runfold serve`) as a named Ray actor, so that a
Ray cluster places and restarts the processes that drive runs while the ledger stays the only
history (DESIGN.md §7).

The actor's name is derived from the workspace's identity (its directory and the hash of its
seq-0 line), so a second claim of the same workspace finds the running actor instead of opening
a second writer. Every dispatch names its run id: `ensure` is idempotent — a run the ledger
already holds is never started again — which is what lets a caller retry after the actor died
and Ray restarted it (the restarted owner resumes the ledger first: lost runs are frozen
`process_died`).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import blake3

from runfold.core.errors import ErrorCode, Retry, RunfoldError
from runfold.runtime.control import run_state
from runfold.server.owner import DEFAULT_MAX_RUNS, HostedWorkspace, RunOwner

NAMESPACE = "runfold"
"""The Ray namespace every owner actor is named in."""
MAX_RESTARTS = 8
"""How many times Ray restarts a dead owner actor (each restart resumes the ledger)."""
INSTALL = "pip install 'runfold[ray]'"


def ray_module() -> Any:
    """The `ray` package. Raises `E_CONFIG_INVALID` naming the extra to install when missing."""
    try:
        import ray
    except ImportError:
        raise RunfoldError(
            ErrorCode.CONFIG_INVALID,
            "run a batch on Ray (the ray package is not installed)",
            "ray",
            f"install the extra: `{INSTALL}`",
            retry=Retry.NO,
        ) from None
    return ray


def owner_name(root: Path) -> str:
    """The actor name of the workspace at `root`: `runfold-owner-<16 hex>` of its resolved
    directory and seq-0 line hash (two copies of one ledger in two directories differ)."""
    with HostedWorkspace(root) as ws:
        first = ws.record_at(0).hash
    key = blake3.blake3(f"{root.resolve()}\n{first}".encode()).hexdigest()[:16]
    return f"runfold-owner-{key}"


def status_of(owner: RunOwner, run: str) -> dict[str, Any]:
    """What the ledger says of `run` (the source of truth) plus what this owner knows of it:
    `{run, known, frozen, cause, state, reason, turns, lines, error, worker}`. `known` False:
    the ledger holds no line of it; `frozen`: its `run_frozen` completion (None: not frozen)."""
    lines = owner.ledger.run_records(run)
    state = run_state(lines)
    h = owner.hosted.get(run)
    out: dict[str, Any] = {
        "run": run,
        "known": state.exists,
        "frozen": state.frozen,
        "cause": state.cause,
        "state": h.state if h is not None else ("frozen" if state.frozen else "lost" if state.exists else "unknown"),
        "reason": "",
        "turns": 0,
        "lines": len(lines),
        "error": None,
        "worker": os.getpid(),
    }
    if h is not None and h.outcome is not None:
        out["reason"] = h.outcome.reason
        out["turns"] = h.outcome.tally.turns
    if h is not None and h.error is not None:
        out["error"] = h.error.display()
    return out


class OwnerActor:
    """The body of the owner actor (`owner_actor_class()` makes it a Ray actor class). The owner
    starts on the first call: it takes the writer and resumes the ledger, then re-queues the
    dispatches a previous owner accepted and never started."""

    def __init__(self, root: str, max_runs: int = DEFAULT_MAX_RUNS) -> None:
        self.root = Path(root)
        self.owner = RunOwner(HostedWorkspace(self.root), max_runs=max_runs)
        self._started = False
        self._lock = asyncio.Lock()

    async def _ready(self) -> RunOwner:
        async with self._lock:
            if not self._started:
                await self.owner.start()
                self._started = True
        return self.owner

    async def info(self) -> dict[str, Any]:
        """`{workspace, worker (pid), frozen_at_start: [run ids resume froze], recovered}`."""
        owner = await self._ready()
        last = owner.ws.last_resume
        return {
            "workspace": str(self.root),
            "worker": os.getpid(),
            "frozen_at_start": [r.run for r in last.frozen] if last is not None else [],
            "recovered": list(owner.recovered),
        }

    def pid(self) -> int:
        """The pid of the worker process hosting this actor."""
        return os.getpid()

    async def ensure(self, run_id: str, request: dict[str, Any], wait: bool = False) -> dict[str, Any]:
        """Start `request` as run `run_id` unless this owner or its ledger already knows that
        run; returns `status_of` the run (`wait`: once it is frozen, as `outcome`). Idempotent,
        so safe to retry. A request the owner refuses returns `state: refused` with the error
        (nothing was written)."""
        owner = await self._ready()
        if run_id not in owner.hosted and not owner.ledger.run_records(run_id, limit=1):
            try:
                await owner.dispatch(request, run_id=run_id)
            except RunfoldError as err:
                out = status_of(owner, run_id)
                out.update(state="refused", error=err.display())
                return out
        return await self.outcome(run_id) if wait else status_of(owner, run_id)

    def cpu_s(self) -> float:
        """CPU seconds this worker process has used (user + system)."""
        return time.process_time()

    async def outcome(self, run_id: str) -> dict[str, Any]:
        """`status_of` the run once it is frozen (waits while it runs or is queued)."""
        owner = await self._ready()
        h = owner.hosted.get(run_id)
        while h is not None and h.state in ("queued", "running"):
            if h.task is not None:
                await asyncio.wait({h.task})
            else:
                await asyncio.sleep(0.05)
        return status_of(owner, run_id)

    async def steer(self, run_id: str, text: str, wait: bool = False) -> dict[str, Any]:
        """Steer the live run `run_id` (`RunOwner.control`)."""
        owner = await self._ready()
        return await owner.control(owner.resolve(run_id), "steer", text, wait=wait)

    async def cancel(self, run_id: str, wait: bool = False) -> dict[str, Any]:
        """Cancel the live or queued run `run_id` (`RunOwner.control`)."""
        owner = await self._ready()
        return await owner.control(owner.resolve(run_id), "cancel", wait=wait)

    async def stop(self) -> None:
        """Cancel the running runs (frozen as cancelled) and close the writer."""
        if self._started:
            await self.owner.stop()
            self._started = False


def owner_actor_class() -> Any:
    """`OwnerActor` as a Ray actor class: restarted by Ray up to `MAX_RESTARTS` times; a call in
    flight when it dies fails (never retried by Ray: `ensure` is retried by the caller)."""
    ray = ray_module()
    return ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=0, num_cpus=1)(OwnerActor)


def claim_owner(root: Path, *, max_runs: int = DEFAULT_MAX_RUNS) -> Any:
    """The owner actor of the workspace at `root` on the connected cluster: the existing one
    when it is already running (a second claim finds it), else a new one."""
    return owner_actor_class().options(
        name=owner_name(root), namespace=NAMESPACE, get_if_exists=True, lifetime=None
    ).remote(str(root.resolve()), max_runs)


__all__ = [
    "INSTALL",
    "MAX_RESTARTS",
    "NAMESPACE",
    "OwnerActor",
    "claim_owner",
    "owner_actor_class",
    "owner_name",
    "ray_module",
    "status_of",
]
