"""The store's pid-stamped flock (`runfold.store.locks`) against real holder processes: a live
holder is refused or waited for as asked, a dead holder's leftover lock is waited for, and both
callers (the ledger's writer lock, the control owner lock) keep their own errors."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.store import locks
from runfold.store.control import ControlDir
from runfold.store.locks import LockHeld, pid_alive, take_pid_lock

_HOLDER = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "os.ftruncate(fd, 0)\n"
    "os.pwrite(fd, (sys.argv[2] if len(sys.argv) > 2 else str(os.getpid()) + '\\n').encode(), 0)\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"  # hold the lock until the test closes our stdin
)


@contextmanager
def holder(path: Path, stamp: str | None = None) -> Iterator[subprocess.Popen[str]]:
    """A child process holding the flock on `path`, with `stamp` (default: its own pid) written
    in the file; it releases the lock when its stdin is closed."""
    args = [sys.executable, "-c", _HOLDER, str(path)] + ([] if stamp is None else [stamp])
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def release_soon(proc: subprocess.Popen[str], after_s: float = 0.2) -> threading.Timer:
    """Close the holder's stdin after `after_s` s (it then exits, releasing the lock) from another
    thread, so that a `take_pid_lock` that waits succeeds and one that refuses at once does not."""
    assert proc.stdin is not None
    timer = threading.Timer(after_s, proc.stdin.close)
    timer.start()
    return timer


def dead_pid() -> str:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = done.stdout.strip()
    assert not pid_alive(pid)
    return pid


def test_a_free_lock_is_taken_and_stamped_with_our_pid(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    lock.write_text("a much longer leftover than any pid\n")
    fd = take_pid_lock(lock, wait_s=0.0, poll_s=0.01, wait_for_live_holder=False)
    try:
        assert lock.read_text() == f"{os.getpid()}\n"
        with pytest.raises(LockHeld):  # held by this fd: a second open file is refused
            take_pid_lock(lock, wait_s=0.0, poll_s=0.01, wait_for_live_holder=True)
    finally:
        os.close(fd)
    os.close(take_pid_lock(lock, wait_s=0.0, poll_s=0.01, wait_for_live_holder=False))


def test_a_live_holder_is_refused_at_once_unless_asked_to_wait(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with holder(lock) as proc:
        timer = release_soon(proc, 1.0)  # a refusal that waited would see the lock released
        with pytest.raises(LockHeld) as held:
            take_pid_lock(lock, wait_s=60.0, poll_s=0.01, wait_for_live_holder=False)
        assert (held.value.holder, held.value.holder_alive) == (str(proc.pid), True)
        with pytest.raises(LockHeld) as waited:
            take_pid_lock(lock, wait_s=0.1, poll_s=0.01, wait_for_live_holder=True)
        assert waited.value.holder == str(proc.pid)
        fd = take_pid_lock(lock, wait_s=60.0, poll_s=0.01, wait_for_live_holder=True)
        timer.join()
        assert lock.read_text() == f"{os.getpid()}\n"
        os.close(fd)


def test_a_dead_holders_lock_is_waited_for_until_the_deadline(tmp_path: Path) -> None:
    """The pid in the file is gone but a process still holds the lock (a child the dead writer
    had started): wait for it, and past the deadline say the holder is gone."""
    lock = tmp_path / "x.lock"
    gone = dead_pid()
    with holder(lock, f"{gone}\n") as proc:
        with pytest.raises(LockHeld) as held:
            take_pid_lock(lock, wait_s=0.1, poll_s=0.01, wait_for_live_holder=False)
        assert (held.value.holder, held.value.holder_alive) == (gone, False)
        timer = release_soon(proc)
        fd = take_pid_lock(lock, wait_s=60.0, poll_s=0.01, wait_for_live_holder=False)
        timer.join()
        os.close(fd)


def test_an_empty_lock_file_names_an_unknown_holder(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with holder(lock, ""), pytest.raises(LockHeld) as held:
        take_pid_lock(lock, wait_s=0.0, poll_s=0.01, wait_for_live_holder=False)
    assert (held.value.holder, held.value.holder_alive) == ("unknown", True)


def test_the_ledger_names_a_gone_holder_in_e_ledger_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locks, "DEAD_HOLDER_WAIT_S", 0.1)
    lock = tmp_path / "ledger.lock"
    gone = dead_pid()
    with holder(lock, f"{gone}\n"), pytest.raises(RunfoldError) as err:
        locks.take_writer_lock(lock)
    assert err.value.code is ErrorCode.LEDGER_HELD
    assert f"pid {gone}" in err.value.action and "that process is gone" in err.value.action


def test_the_control_owner_lock_is_refused_while_another_process_holds_it(tmp_path: Path) -> None:
    control = ControlDir(tmp_path)
    control.root.mkdir(parents=True)
    with holder(control.owner_lock) as proc:
        assert control.owner_present() and control.owner_pid() == str(proc.pid)
        with pytest.raises(RunfoldError) as err:
            control.take_owner_lock(timeout_s=0.1)
        assert err.value.code is ErrorCode.LEDGER_HELD and err.value.action == "take the control owner lock"
        timer = release_soon(proc)
        fd = control.take_owner_lock(timeout_s=60.0)
        timer.join()
        assert control.owner_pid() == str(os.getpid())
        control.release_owner_lock(fd)
    assert not control.owner_present()
