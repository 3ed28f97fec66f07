"""`runfold batch`: run a JSONL file of tasks as runs spread over the owner actors of a Ray
cluster, with a limit on how many run at once (DESIGN.md §7).

One owner actor holds each workspace's single writer, so `workers` actors drive `workers`
workspaces: the workspace itself for one worker, else shards `.runfold/shards/<k>/` (each a
whole workspace with its own ledger, in the store of the workspace). Each task gets a run id before it is dispatched and the
dispatch is idempotent, so after an actor died and Ray restarted it the runner asks again and
the ledger decides: a run it holds is never started twice (resume froze it `process_died`; with
`continue_lost` a successor continues it), a run it does not hold is started then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from runfold.api import Workspace
from runfold.api_store import copy_settings
from runfold.core.errors import ErrorCode, Retry, RunfoldError, invalid_args
from runfold.runtime.spec import new_run_id
from runfold.server.owner import SPEC_FIELDS, spec_of
from runfold.server.ray_owner import NAMESPACE, claim_owner, ray_module
from runfold.store.backend import store_setting, with_workspace

TASK_FIELDS = ("id", *SPEC_FIELDS)
"""The fields a task line may hold: `task` (required), an optional `id` naming it in the
outcomes, and the run's fields (`goal`, `model`, `room`, `max_turns`, `builtin_tools`, `system`)."""
DEFAULT_CONCURRENCY = 16
"""Runs in flight at once by default (over all workers)."""
CONTINUE_FIELDS = ("model", "max_turns", "system", "builtin_tools")
"""The fields of a task its successor keeps when the batch continues a lost run."""
SESSION_ROOT_MAX = 40
"""The longest directory a local Ray cluster's session files may go under: Ray adds about 65
bytes of session and socket names, and a unix socket path holds at most 107."""
RETRY_WINDOW_S = 300.0
"""How long a task keeps asking a dead owner actor again while Ray restarts it."""
CONNECT_TIMEOUT_S = 60.0
"""How long connecting to a running cluster may take: Ray itself retries for ten minutes and
more when the address answers but is not a Ray head (another service on that port)."""


@dataclass(frozen=True)
class BatchTask:
    """One line of the task file: `id` (given, or `line-<n>`), `line` (1-based) and the
    dispatch `request` (`task` and the run's fields)."""

    id: str
    line: int
    request: dict[str, Any]


@dataclass
class TaskResult:
    """How one task ended: `run` (its run id), `shard` (the workspace that holds it), `frozen`
    (the `run_frozen` completion, None when it never started), `cause`, `reason`, `turns`,
    `attempts` (calls to its owner, > 1 after a restart), `lost` (frozen `process_died`) and
    `continued_by` (the successor run when the batch continued it, with its own result)."""

    task: BatchTask
    run: str
    shard: str
    frozen: str | None = None
    cause: str | None = None
    reason: str = ""
    turns: int = 0
    error: str | None = None
    attempts: int = 0
    continued_by: TaskResult | None = None

    @property
    def lost(self) -> bool:
        return self.cause == "process_died"

    @property
    def final(self) -> TaskResult:
        """The result of the last run of this task (its successor's, when it was continued)."""
        return self.continued_by.final if self.continued_by is not None else self

    def to_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.task.id,
            "run": self.run,
            "shard": self.shard,
            "frozen": self.frozen,
            "cause": self.cause,
            "reason": self.reason,
            "turns": self.turns,
            "attempts": self.attempts,
            "error": self.error,
        }
        if self.continued_by is not None:
            out["continued_by"] = self.continued_by.to_data()
        return out


@dataclass
class BatchReport:
    """A finished batch: `results` in task order, `workers`, `shards`, `seconds` (wall clock
    from the first dispatch to the last outcome) and `restarts` (owner calls that failed because
    the actor died)."""

    results: list[TaskResult] = field(default_factory=list)
    workers: int = 1
    shards: list[str] = field(default_factory=list)
    seconds: float = 0.0
    restarts: int = 0

    def runs(self) -> list[TaskResult]:
        """Every run of the batch, successors included."""
        out: list[TaskResult] = []
        for r in self.results:
            cur: TaskResult | None = r
            while cur is not None:
                out.append(cur)
                cur = cur.continued_by
        return out

    def summary(self) -> dict[str, Any]:
        runs = self.runs()
        final = Counter(r.final.frozen or ("refused" if r.final.error else "not_started") for r in self.results)
        return {
            "tasks": len(self.results),
            "runs": len(runs),
            "outcomes": dict(sorted(final.items())),
            "lost": sum(1 for r in runs if r.lost),
            "continued": sum(1 for r in runs if r.continued_by is not None),
            "failed_calls": self.restarts,
            "workers": self.workers,
            "seconds": round(self.seconds, 3),
            "runs_per_s": round(len(runs) / self.seconds, 2) if self.seconds > 0 else None,
        }

    def to_data(self) -> dict[str, Any]:
        return {"summary": self.summary(), "shards": self.shards, "results": [r.to_data() for r in self.results]}


def audit(report: BatchReport) -> dict[str, Any]:
    """Check a finished batch against the ledgers (the source of truth, never Ray): every shard
    verifies, every run of the batch is in its shard with exactly one `run_started` and a
    `run_frozen`, and no run id is in two shards. Returns `{verified_lines, runs, frozen,
    started_twice: [...], not_frozen: [...], missing: [...]}` (the lists empty when all holds).
    Raises what `verify` raises for a damaged ledger."""
    from runfold.core.kinds import Kind

    started: Counter[str] = Counter()
    frozen: set[str] = set()
    where: dict[str, str] = {}
    lines = 0
    for shard in report.shards:
        with Workspace.open(Path(shard)) as ws:
            lines += ws.verify().lines
            for rec in ws.records():
                if rec.env.kind == Kind.RUN_STARTED.value:
                    started[rec.env.run] += 1
                    if where.setdefault(rec.env.run, shard) != shard:
                        started[rec.env.run] += 1
                elif rec.env.kind == Kind.RUN_FROZEN.value:
                    frozen.add(rec.env.run)
    runs = [r for r in report.runs() if r.frozen is not None or r.error is None]
    return {
        "verified_lines": lines,
        "runs": len(runs),
        "frozen": sum(1 for r in runs if r.run in frozen),
        "started_twice": sorted(r for r, n in started.items() if n > 1),
        "not_frozen": sorted(r.run for r in runs if r.run not in frozen),
        "missing": sorted(r.run for r in runs if where.get(r.run) != r.shard),
    }


def _bad_line(path: Path, line: int, what: str, recovery: str) -> RunfoldError:
    return invalid_args(f"read the task file ({what})", f"{path} line {line}", recovery)


def read_tasks(path: Path, *, model: str | None = None, base: Path | None = None) -> list[BatchTask]:
    """The tasks of the JSONL file `path` (blank lines skipped). `model` is the default model
    of tasks that name none; a relative `script:<file>` model is made absolute against `base`
    (default: the current directory) so every worker finds it. Raises `E_PATH_NOT_FOUND` for a
    missing file, `E_INVALID_ARGS` naming the line and field of a bad task (nothing is run)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RunfoldError(
            ErrorCode.PATH_NOT_FOUND, "read the task file", str(path), "give the path of a JSONL file of tasks", retry=Retry.NO
        ) from None
    except OSError as exc:
        raise invalid_args("read the task file", str(path), f"check the file ({exc.strerror or exc})") from None
    base = base or Path.cwd()
    tasks: list[BatchTask] = []
    seen: set[str] = set()
    for n, text in enumerate(raw.splitlines(), start=1):
        if not text.strip():
            continue
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise _bad_line(path, n, f"not JSON: {exc}", 'write one JSON object per line, e.g. {"task": "…"}') from None
        if not isinstance(obj, dict):
            raise _bad_line(path, n, "not a JSON object", 'write one JSON object per line, e.g. {"task": "…"}')
        unknown = sorted(set(obj) - set(TASK_FIELDS))
        if unknown:
            raise _bad_line(path, n, f"unknown field {unknown[0]!r}", f"use only {', '.join(TASK_FIELDS)}")
        if not isinstance(obj.get("task"), str) or not obj["task"].strip():
            raise _bad_line(path, n, "no task", 'give the task as text: {"task": "…"}')
        tid = obj.pop("id", None)
        if tid is not None and not isinstance(tid, str | int):
            raise _bad_line(path, n, "field 'id'", "give the id as a string or a number")
        tid = str(tid) if tid is not None else f"line-{n}"
        if tid in seen:
            raise _bad_line(path, n, f"id {tid!r} given twice", "give every task its own id")
        seen.add(tid)
        if obj.get("model") is None and model is not None:
            obj["model"] = model
        spec_model = obj.get("model")
        if isinstance(spec_model, str) and spec_model.startswith("script:"):
            script = Path(spec_model[len("script:") :]).expanduser()
            obj["model"] = f"script:{script if script.is_absolute() else (base / script).resolve()}"
        try:
            spec_of(obj, new_run_id())
        except RunfoldError as err:
            raise _bad_line(path, n, err.display(), "fix the field it names") from None
        except TypeError as exc:
            raise _bad_line(path, n, str(exc), "fix the field's type") from None
        tasks.append(BatchTask(tid, n, obj))
    if not tasks:
        raise invalid_args("run a batch", str(path), 'the file holds no task; write one JSON object per line, e.g. {"task": "…"}')
    return tasks


def shard_roots(root: Path, workers: int) -> list[Path]:
    """The workspaces `workers` owners drive: `[root]` for one, else `root/.runfold/shards/<k>`
    for k < workers, created when missing with the settings of `root` and a ledger in the store
    of `root`: files, or, for a ledger in PostgreSQL, workspace `<name>/shards/<k>` of the same
    database (joined when it holds lines already)."""
    if workers < 1:
        raise invalid_args("run a batch", f"--workers {workers}", "give at least 1")
    if workers == 1:
        return [root]
    store = store_setting(root)
    out = []
    for k in range(workers):
        shard = root / ".runfold" / "shards" / str(k)
        if not (shard / ".runfold").exists():
            url = None if store is None else with_workspace(store, f"{store.name}/shards/{k}")
            Workspace.init(shard, url)
            (shard / ".runfold" / "config.toml").unlink()
            copy_settings(root, shard, url)
        out.append(shard)
    return out


def _reachable(address: str) -> str | None:
    """Why the head at `host:port` cannot be reached (None: it accepts connections, or the
    address is not of that form and Ray itself decides)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return None
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _unreachable(address: str, why: str) -> RunfoldError:
    return RunfoldError(
        ErrorCode.INVALID_ARGS,
        f"reach the Ray cluster ({why})",
        f"--ray {address}",
        "start the cluster (`ray start --head` prints its address), check the address, or pass `--ray local`; "
        "nothing was run",
        retry=Retry.UNKNOWN,
    )


def _session_root() -> str | None:
    """Where a local cluster keeps its session files: Ray's default (`$TMPDIR/ray`) unless that
    is too long for the unix sockets Ray puts four levels below it (107 bytes at most), then
    `/tmp/ray` (Ray's own default on Linux); `RAY_TMPDIR` wins when set."""
    if os.environ.get("RAY_TMPDIR"):
        return None
    default = os.path.join(tempfile.gettempdir(), "ray")
    return None if len(default) <= SESSION_ROOT_MAX else "/tmp/ray"


def _init_within(ray: Any, address: str, timeout_s: float, options: dict[str, Any]) -> None:
    """`ray.init(address)` on a helper thread, given up after `timeout_s` s (the thread, stuck
    in Ray's own retries, is a daemon and does not keep the process alive)."""
    failed: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(address=address, **options)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=init, name="runfold-ray-connect", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise _unreachable(address, f"no Ray head answered there within {timeout_s:.0f} s")
    if failed:
        raise failed[0]


def connect(address: str, *, workers: int, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Connect this process to a Ray cluster: `local` starts one on this machine with `workers`
    CPUs; anything else is the address of a running cluster (`host:port`, `ray://…`, `auto`),
    reached within `timeout_s` s. Raises `E_INVALID_ARGS` when the cluster cannot be reached
    (never runs elsewhere instead) and `E_CONFIG_INVALID` when the `ray` extra is missing."""
    ray = ray_module()
    if ray.is_initialized():
        return
    quiet: dict[str, Any] = {"log_to_driver": False, "namespace": NAMESPACE, "configure_logging": False}
    logging.getLogger("ray").setLevel(logging.ERROR)  # its start-up notices are not ours to print
    if address == "local":  # always a new cluster of this process, never one found running
        ray.init(
            address="local",
            num_cpus=workers,
            include_dashboard=False,
            object_store_memory=100 * 2**20,
            _temp_dir=_session_root(),
            **quiet,
        )
        return
    why = _reachable(address)
    if why is not None:
        raise _unreachable(address, why)
    try:
        _init_within(ray, address, timeout_s, quiet)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        raise _unreachable(address, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__) from None


def _actor_died(exc: BaseException) -> bool:
    ray = ray_module()
    errors = tuple(
        e for e in (getattr(ray.exceptions, n, None) for n in ("RayActorError", "ActorUnavailableError")) if e is not None
    )
    return isinstance(exc, errors)


@dataclass
class BatchRunner:
    """Runs `tasks` over the owner actors of `roots` (one actor per workspace), at most
    `concurrency` at once; `continue_lost` continues each run frozen `process_died` with a
    successor. `on_result(result, done_count)` is called as each task ends."""

    roots: list[Path]
    concurrency: int = DEFAULT_CONCURRENCY
    continue_lost: bool = False
    on_result: Callable[[TaskResult, int], None] | None = None
    actors: list[Any] = field(default_factory=list)
    report: BatchReport = field(default_factory=BatchReport)
    _load: list[int] = field(default_factory=list)
    _done: int = 0

    def claim(self) -> list[Any]:
        """Claim (find or create) every workspace's owner actor and wait until each has
        started (its writer open, its ledger resumed)."""
        if self.concurrency < 1:
            raise invalid_args("run a batch", f"--concurrency {self.concurrency}", "give at least 1")
        ray = ray_module()
        per_actor = max(1, -(-self.concurrency // len(self.roots)))
        self.actors = [claim_owner(r, max_runs=per_actor) for r in self.roots]
        ray.get([a.info.remote() for a in self.actors])
        self._load = [0] * len(self.actors)
        return self.actors

    async def _call(self, k: int, method: str, *args: Any, result: TaskResult) -> dict[str, Any]:
        deadline = time.monotonic() + RETRY_WINDOW_S
        while True:
            result.attempts += 1
            try:
                out: dict[str, Any] = await getattr(self.actors[k], method).remote(*args)
                return out
            except Exception as exc:
                if not _actor_died(exc) or time.monotonic() > deadline:
                    raise
                self.report.restarts += 1
                await asyncio.sleep(0.5)

    async def _one_run(self, k: int, task: BatchTask, request: dict[str, Any]) -> TaskResult:
        run = new_run_id()
        result = TaskResult(task, run, str(self.roots[k]))
        status = await self._call(k, "ensure", run, request, True, result=result)
        result.frozen, result.cause, result.error = status["frozen"], status["cause"], status["error"]
        result.reason, result.turns = status["reason"], status["turns"]
        return result

    async def _task(self, task: BatchTask, sem: asyncio.Semaphore) -> TaskResult:
        async with sem:
            k = min(range(len(self.actors)), key=lambda i: self._load[i])
            self._load[k] += 1
            try:
                result = await self._one_run(k, task, task.request)
                last = result
                while self.continue_lost and last.lost:
                    request: dict[str, Any] = {"task": "", "continues": last.run}
                    request.update({f: task.request[f] for f in CONTINUE_FIELDS if f in task.request})
                    last.continued_by = await self._one_run(k, task, request)
                    last = last.continued_by
            finally:
                self._load[k] -= 1
        self._done += 1
        if self.on_result is not None:
            self.on_result(result, self._done)
        return result

    async def arun(self, tasks: list[BatchTask]) -> BatchReport:
        """Run every task; returns the report (results in task order)."""
        if not self.actors:
            self.claim()
        sem = asyncio.Semaphore(self.concurrency)
        start = time.monotonic()
        self.report = BatchReport(workers=len(self.roots), shards=[str(r) for r in self.roots])
        self.report.results = list(await asyncio.gather(*(self._task(t, sem) for t in tasks)))
        self.report.seconds = time.monotonic() - start
        return self.report

    def run(self, tasks: list[BatchTask]) -> BatchReport:
        return asyncio.run(self.arun(tasks))

    @property
    def done(self) -> int:
        """Tasks whose outcome is known so far."""
        return self._done

    def stop(self) -> None:
        """Stop every owner actor (its running runs are frozen as cancelled, its writer closed)."""
        ray = ray_module()
        for a in self.actors:
            with contextlib.suppress(Exception):
                ray.get(a.stop.remote(), timeout=60)
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)


__all__ = [
    "DEFAULT_CONCURRENCY",
    "TASK_FIELDS",
    "BatchReport",
    "BatchRunner",
    "BatchTask",
    "TaskResult",
    "audit",
    "connect",
    "read_tasks",
    "shard_roots",
]
