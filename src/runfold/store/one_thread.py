"""One thread at a time inside a ledger: its index (one sqlite connection), its file offsets and
its view of the tail are not safe for two threads at once.

The file ledger's reading and writing methods enter a `ThreadGuard`; a second thread entering
while the first is still inside gets `E_INTERNAL` (runfold's own bug: some code handed the ledger
to a worker thread) instead of a torn index or a crash inside sqlite. Handing a ledger from one
thread to another between calls stays allowed.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from runfold.core.errors import ErrorCode, Retry, RunfoldError

P = ParamSpec("P")
T = TypeVar("T")


class ThreadGuard:
    """Who is inside the guarded object now: a thread id and how deep (a guarded method may
    call another). `what` names the object in the error (a path)."""

    __slots__ = ("_depth", "_lock", "_thread", "what")

    def __init__(self, what: str) -> None:
        self.what = what
        self._lock = threading.Lock()
        self._thread: int | None = None
        self._depth = 0

    def enter(self, action: str) -> None:
        """Enter for `action`; raises `E_INTERNAL` when another thread is inside."""
        me = threading.get_ident()
        with self._lock:
            if self._thread is not None and self._thread != me:
                raise RunfoldError(
                    ErrorCode.INTERNAL,
                    f"{action} from a second thread while another thread is inside the ledger",
                    self.what,
                    "runfold's own bug: a ledger is used by one thread at a time (an async server "
                    "reads it on its event loop); report it with the traceback",
                    retry=Retry.NO,
                )
            self._thread = me
            self._depth += 1

    def leave(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self._thread = None


class Guarded(Protocol):
    """An object with a `ThreadGuard` (the file ledger)."""

    @property
    def thread_guard(self) -> ThreadGuard: ...


G = TypeVar("G", bound=Guarded)


def one_thread_at_a_time(method: Callable[Concatenate[G, P], T]) -> Callable[Concatenate[G, P], T]:
    """Decorate a method of a `Guarded` object: the call enters the object's guard (named after
    the method) and leaves it when it returns or raises."""
    action = method.__name__.strip("_").replace("_", " ")

    @functools.wraps(method)
    def guarded(self: G, /, *args: P.args, **kwargs: P.kwargs) -> T:
        guard = self.thread_guard
        guard.enter(action)
        try:
            return method(self, *args, **kwargs)
        finally:
            guard.leave()

    return guarded


__all__ = ["Guarded", "ThreadGuard", "one_thread_at_a_time"]
