"""A helper thread that does a writer's bookkeeping while the writer's thread waits in fdatasync.

fdatasync releases the GIL, so work that does not depend on its outcome (a batch's index rows,
a flush of index rows whose lines are already durable) can run during it instead of after it.
Nothing the helper does is visible before the sync returns: the caller waits for both and
decides what to keep (DESIGN.md §3 group commit: state advances only after the fsync).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WhileSyncing:
    """One helper thread, started on first use (again in a forked child) and stopped by `close`.

    Not thread-safe: one caller thread at a time, as `Ledger` is.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._go = threading.Lock()
        self._done = threading.Lock()
        self._job: Callable[[], object] | None = None
        self._result: object = None
        self._error: BaseException | None = None

    def run(self, job: Callable[[], T], wait: Callable[[], None]) -> T:
        """Call `job()` on the helper thread while `wait()` (a system call that releases the
        GIL) runs on this one; return `job`'s result once both have returned.

        When `wait` raises, its exception propagates after `job` has returned (its result or
        exception is dropped); else `job`'s exception propagates. When no thread can be started,
        `job` runs here after `wait`.
        """
        if self._thread is None or self._pid != os.getpid():
            try:
                self._start()
            except RuntimeError:  # no thread can be started: do the work after the wait
                wait()
                return job()
        self._job = job
        self._go.release()
        try:
            wait()
        finally:
            self._join_job()
        result, error = self._result, self._error
        self._result = self._error = None
        if error is not None:
            raise error
        return result  # type: ignore[return-value]  # what `job` returned

    def close(self) -> None:
        """Stop the helper thread (a no-op when none runs). Safe to call twice."""
        thread, self._thread = self._thread, None
        if thread is None or self._pid != os.getpid():
            return
        self._job = None
        self._go.release()
        thread.join()

    def _start(self) -> None:
        # fresh locks: a forked child inherits the parent's in whatever state they were
        self._go = threading.Lock()
        self._done = threading.Lock()
        self._go.acquire()
        self._done.acquire()
        thread = threading.Thread(target=self._serve, name="runfold-ledger-sync", daemon=True)
        thread.start()
        self._thread, self._pid = thread, os.getpid()

    def _serve(self) -> None:
        go, done = self._go, self._done
        while True:
            go.acquire()
            job = self._job
            if job is None:
                return
            try:
                self._result = job()
            except BaseException as exc:  # handed to the caller's thread, raised there
                self._error = exc
            done.release()

    def _join_job(self) -> None:
        """Wait until the job has returned, even when a signal handler raises meanwhile (the
        job touches the caller's state, so the caller must not go on before it ends); the first
        such exception is raised once it has."""
        interrupted: BaseException | None = None
        while True:
            try:
                self._done.acquire()
                break
            except BaseException as exc:
                interrupted = interrupted or exc
        self._job = None
        if interrupted is not None:
            raise interrupted
