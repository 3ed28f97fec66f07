"""A ledger is used by one thread at a time: a second thread entering a file ledger while another
is inside gets E_INTERNAL naming the ledger, never a torn index or a crash inside sqlite; handing
the ledger to another thread between calls stays allowed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.records import Draft
from runfold.store.ledger import Ledger
from runfold.store.one_thread import ThreadGuard


def _draft(i: int) -> Draft:
    return Draft(WORKSPACE_RUN, "runtime", "steer_received", {"source": "user", "text": f"line {i}"})


def test_a_second_thread_is_refused_while_the_first_is_inside() -> None:
    guard = ThreadGuard("/ws/.runfold")
    guard.enter("flush")
    guard.enter("run records")  # the same thread may nest
    errors: list[RunfoldError] = []

    def other() -> None:
        try:
            guard.enter("stage")
        except RunfoldError as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    (err,) = errors
    assert err.code is ErrorCode.INTERNAL and "stage from a second thread" in err.action
    assert err.subject == "/ws/.runfold"
    guard.leave()
    guard.leave()
    t = threading.Thread(target=lambda: (guard.enter("stage"), guard.leave()))
    t.start()
    t.join()  # once the first thread left, another may enter


def test_a_reader_thread_meeting_a_flush_in_progress_gets_e_internal(tmp_path: Path) -> None:
    inside, release = threading.Event(), threading.Event()
    with Ledger.create(tmp_path / "ws") as w:
        w.on_durable.append(lambda _records: (inside.set(), release.wait(30)))

        def writer() -> None:
            w.append([_draft(0)])  # its on_durable callback holds it inside flush

        t = threading.Thread(target=writer)
        t.start()
        assert inside.wait(30)
        with pytest.raises(RunfoldError) as refused:
            w.run_records(WORKSPACE_RUN)
        release.set()
        t.join()
        assert refused.value.code is ErrorCode.INTERNAL and "run records from a second thread" in refused.value.action
        w.on_durable.clear()
        w.append([_draft(1)])  # this thread may use it now the other has left
        assert [r.seq for r in w.run_records(WORKSPACE_RUN)] == [0, 1, 2]
