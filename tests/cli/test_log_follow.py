"""`runfold log --follow`: new lines are printed as a writer commits them, on both stores; a
PostgreSQL-backed workspace is woken by LISTEN/NOTIFY (its waiter is a `LineWaiter`, never the
file poll), and following a run ends once it is frozen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli.cli_support import run_cli
from runfold.api import Workspace
from runfold.core.payloads import RunFrozen
from runfold.core.records import Draft
from runfold.store.backend import open_ledger
from runfold.store.follow import PollWaiter, line_waiter
from runfold.store.pg_tools import LineWaiter

RUN_A = "0190f6a2-7c4a-7bbb-9d1e-00000000000a"
RUN_B = "0190f6a2-7c4a-7bbb-9d1e-00000000000b"


def steer(run: str, text: str) -> Draft:
    return Draft(run, "lab/room1", "steer_received", {"source": "user", "text": text}, addr="lab/room1")


def test_a_postgresql_workspace_is_followed_by_listen_notify_a_file_one_by_polling(tmp_path: Path, store_url: str | None) -> None:
    root = Workspace.init(tmp_path / "ws", store_url).root
    with line_waiter(root) as waiter:
        assert isinstance(waiter, LineWaiter if store_url else PollWaiter)
        assert waiter.wait(1, 0.1) == 1  # nothing new yet
        with open_ledger(root, writer=True) as w:
            w.append([steer(RUN_A, "one"), steer(RUN_A, "two")])
        assert waiter.wait(1, 60) == 3


def test_follow_prints_new_lines_of_the_run_until_it_is_frozen(tmp_path: Path, store_url: str | None) -> None:
    root = Workspace.init(tmp_path / "ws", store_url).root
    with open_ledger(root, writer=True) as w:
        [first] = w.append([steer(RUN_A, "before")])
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "log", "--follow", "--run", RUN_A, "--json", "-w", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == first.raw + b"\n"  # the history, then it waits
        with open_ledger(root, writer=True) as w:
            later = w.append([steer(RUN_B, "not this run"), steer(RUN_A, "after")])
            frozen = w.append([Draft(RUN_A, "runtime", "run_frozen", RunFrozen(completion="cancelled"))])
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out == later[1].raw + b"\n" + frozen[0].raw + b"\n"


def test_follow_refuses_limit(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    res = run_cli("log", "--follow", "--limit", "3", "-w", root, cwd=tmp_path)
    assert res.code == 2 and "--follow with --limit" in res.err
